"""Download SuiteSparse matrices by ``GROUP/NAME`` into a local cache, in Matrix Market form.

The collection serves ``<base>/<GROUP>/<NAME>.tar.gz`` (holding ``<NAME>/<NAME>.mtx``). The base
URL is ``DPSOLVE_SUITESPARSE_URL`` (one URL, or several separated by spaces or commas, tried in
order), by default :data:`DEFAULT_URLS`. The cache is ``DPSOLVE_MATRIX_DIR``, by default
``$XDG_CACHE_HOME/dpsolve/matrices`` (``~/.cache/dpsolve/matrices``); a matrix is kept there as
``<GROUP>/<NAME>.mtx``.

* What is cached is never downloaded again (no request is made).
* The tarball is written to a temporary file in the cache and the matrix is extracted through
  another one, checked (:func:`dpsolve.matrices.check_matrix_file`: every line) and renamed into
  place at the end: an interrupted or short download (fewer bytes than the server announced), or
  a corrupt one, leaves no file behind, and the next call starts again. Nor does a failed
  download (or Ctrl-C) leave the folders it created for it (``<GROUP>/``, the cache itself).
* A fetch has a deadline for the whole of it (:data:`DEADLINE` seconds, every attempt and mirror
  included) besides the timeout of each read from the server: a server that trickles its bytes
  cannot keep it waiting without bound.
* A cached file that fails to read (:func:`load`, :func:`read`) is removed from the cache, and
  the error names it: the next fetch downloads it again.
* A progress bar (tqdm when installed, else a line every 10 %) goes to stderr.
* n and nnz are checked against the paper's catalog once the matrix is read
  (:func:`load`); a mismatch warns.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

from . import __version__
from ._errors import DpsolveError, DpsolveWarning
from .catalog import lookup_source

DEFAULT_URLS = ("https://sparse.tamu.edu/MM",
                "https://suitesparse-collection-website.herokuapp.com/MM")
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
CHUNK = 1 << 20
RETRY_PAUSE = 2.0            # seconds before the second round of attempts, twice that before
                             # the third
DEADLINE = 3600.0            # seconds for a whole fetch, every attempt included


class FetchError(DpsolveError, OSError):
    """A matrix could not be downloaded; the message says from where and why."""


def cache_dir() -> Path:
    """DPSOLVE_MATRIX_DIR, else $XDG_CACHE_HOME/dpsolve/matrices (~/.cache/dpsolve/matrices)."""
    d = os.environ.get("DPSOLVE_MATRIX_DIR")
    if d:
        return Path(d).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dpsolve" / "matrices"


def base_urls() -> list[str]:
    env = os.environ.get("DPSOLVE_SUITESPARSE_URL", "").strip()
    urls = [u for u in re.split(r"[\s,]+", env) if u] if env else list(DEFAULT_URLS)
    return [u.rstrip("/") for u in urls]


def split_name(spec: str) -> tuple[str, str]:
    """``"GHS_psdef/ldoor"`` -> ``("GHS_psdef", "ldoor")``, refusing anything but two plain
    names."""
    parts = spec.strip().strip("/").split("/")
    if len(parts) != 2 or not all(_NAME.match(p) and p not in (".", "..") for p in parts):
        raise ValueError(f"expected a SuiteSparse matrix as GROUP/NAME (e.g. GHS_psdef/ldoor), "
                         f"got {spec!r}")
    return parts[0], parts[1]


def cached_path(spec: str, directory=None) -> Path:
    group, name = split_name(spec)
    return Path(directory or cache_dir()) / group / f"{name}.mtx"


class _Progress:
    """tqdm over bytes when installed, else a plain line on stderr every 10 %."""

    def __init__(self, total, desc, enabled):
        self.total, self.desc, self.done, self._shown = total, desc, 0, -1
        self.bar = None
        if not enabled:
            self.update = lambda n: None
            return
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
                            file=sys.stderr, leave=True, dynamic_ncols=True)
        except ImportError:
            print(f"downloading {desc} ({_size(total)})", file=sys.stderr, flush=True)

    def update(self, n):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.total:
            tenth = self.done * 10 // self.total
            if tenth != self._shown:
                self._shown = tenth
                print(f"  {self.desc}: {tenth * 10}% of {_size(self.total)}", file=sys.stderr,
                      flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _size(nbytes):
    if not nbytes:
        return "size unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def _download(url: str, dest_dir: Path, desc: str, progress: bool, timeout: float,
              deadline: _Deadline) -> Path:
    """Stream ``url`` into a temporary file in ``dest_dir``; return its path (the caller removes
    it). Raises FetchError, leaving nothing behind, on any failure, a short body or a passed
    deadline (checked after every read, each read waiting at most ``timeout`` seconds)."""
    req = urllib.request.Request(url, headers={"User-Agent": f"dpsolve/{__version__}"})
    fd, tmp = tempfile.mkstemp(prefix=".download-", suffix=".tar.gz.part", dir=dest_dir)
    tmp = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as out, \
                urllib.request.urlopen(req, timeout=deadline.timeout(timeout)) as resp:
            total = resp.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            bar = _Progress(total, desc, progress)
            got = 0
            try:
                while chunk := resp.read1(CHUNK):     # what has come, not a full CHUNK
                    out.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
                    deadline.check(f"download of {url} ({got:,} bytes in)")
            finally:
                bar.close()
            if total is not None and got != total:
                raise FetchError(f"download of {url} ended after {got} of {total} bytes")
        return tmp
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, FetchError):
            raise
        if isinstance(e, urllib.error.HTTPError):
            raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
        if isinstance(e, urllib.error.URLError):
            raise FetchError(f"{url}: {e.reason}") from None
        if isinstance(e, (OSError, EOFError)) or type(e).__module__ == "http.client":
            raise FetchError(f"download of {url} was interrupted: "
                             f"{type(e).__name__}: {e}") from None
        raise


class _Deadline:
    """The deadline of a whole fetch, ``seconds`` from now."""

    def __init__(self, seconds: float):
        self.seconds, self.end = seconds, time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def timeout(self, timeout: float) -> float:
        """A per-read timeout that does not reach past the deadline."""
        return max(0.01, min(timeout, self.left()))

    def check(self, what: str):
        if self.left() <= 0:
            raise FetchError(f"{what}: gave up at the {self.seconds:g} s deadline")


def fetch(spec: str, directory=None, *, progress: bool = True, retries: int = 2,
          timeout: float = 60.0, deadline: float | None = None) -> Path:
    """Path of the cached ``GROUP/NAME`` Matrix Market file, downloading it first if needed.

    Each base URL is tried in turn; the whole round is tried ``1 + retries`` times (with a short
    pause) before a FetchError naming every failure is raised. ``timeout``: seconds a read from
    the server may wait; ``deadline``: seconds the whole fetch may take (default
    :data:`DEADLINE`), every attempt included. The matrix is checked before it enters the cache.
    """
    group, name = split_name(spec)
    dest = cached_path(spec, directory)
    if dest.is_file():
        return dest
    made = _missing_folders(dest.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _fetch_into(dest, group, name, progress, retries, timeout,
                           _Deadline(DEADLINE if deadline is None else deadline))
    except BaseException:
        for d in made:                      # deepest first; a folder someone else filled stays
            try:
                d.rmdir()
            except OSError:
                break
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """The folders that creating ``folder`` would create, deepest first."""
    made = []
    while not folder.exists() and folder != folder.parent:
        made.append(folder)
        folder = folder.parent
    return made


def _fetch_into(dest: Path, group: str, name: str, progress, retries, timeout,
                deadline: _Deadline) -> Path:
    from .matrices import MatrixFileError, extract_mtx
    errors = []
    try:
        for attempt in range(1 + max(0, retries)):
            if attempt:
                time.sleep(max(0.0, min(RETRY_PAUSE * attempt, deadline.left())))
            for base in base_urls():
                deadline.check(f"could not fetch {group}/{name}")
                url = f"{base}/{group}/{name}.tar.gz"
                try:
                    tar = _download(url, dest.parent, f"{group}/{name}", progress, timeout,
                                    deadline)
                except FetchError as e:
                    errors.append(str(e))
                    continue
                try:
                    return extract_mtx(tar, dest, name, check=True)
                except MatrixFileError as e:    # a corrupt matrix: never enters the cache
                    line = f", line {e.line}" if e.line else ""
                    errors.append(f"{url}: not a usable SuiteSparse tarball: its {name}.mtx"
                                  f"{line}: {e.detail}")
                except Exception as e:          # a corrupt or unexpected archive
                    errors.append(f"{url}: not a usable SuiteSparse tarball ({e})")
                finally:
                    tar.unlink(missing_ok=True)
    except FetchError as e:                     # the deadline
        errors.append(str(e))
    raise FetchError(f"could not fetch {group}/{name}: " + "; ".join(dict.fromkeys(errors)))


def check(A, group: str, name: str) -> str | None:
    """Compare n and nnz with the paper's catalog: None when they agree (or the matrix is not in
    the catalog), else the mismatch, which is also issued as a DpsolveWarning."""
    entry = lookup_source(group, name)
    if entry is None:
        return None
    n, nnz = A.shape[0], A.nnz
    if (n, nnz) == (entry.n, entry.nnz):
        return None
    msg = (f"{group}/{name}: read n = {n:,}, nnz = {nnz:,}; the paper's Table 1 gives "
           f"n = {entry.n:,}, nnz = {entry.nnz:,}")
    warnings.warn(msg, DpsolveWarning, stacklevel=2)
    return msg


def read(path):
    """read_matrix of a cached file. One that fails to read (damaged after it was fetched) is
    removed from the cache, so that the next fetch downloads it again; the MatrixFileError
    names it and says so."""
    from .matrices import MatrixFileError, read_matrix
    try:
        return read_matrix(path)
    except MatrixFileError as e:
        Path(path).unlink(missing_ok=True)
        raise MatrixFileError(e.path, f"{e.detail} (removed from the cache: the next fetch "
                              f"downloads it again)", e.line, e.member) from None


def load(spec: str, directory=None, *, progress: bool = True):
    """Fetch (if needed), read as CSR (:func:`read`) and check against the catalog. Returns the
    matrix."""
    group, name = split_name(spec)
    A = read(fetch(spec, directory, progress=progress))
    check(A, group, name)
    return A
