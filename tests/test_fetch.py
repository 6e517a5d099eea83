"""The SuiteSparse fetcher against a real HTTP server on 127.0.0.1 (http.server in a thread).

The server serves tarballs the tests build, laid out as the collection lays them out
(``<base>/<GROUP>/<NAME>.tar.gz`` holding ``<NAME>/<NAME>.mtx``), counts the requests per path,
and can close the connection half-way through the body. Nothing of the HTTP layer is mocked.
"""
from __future__ import annotations

import csv
import io
import tarfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from dpsolve import DpsolveWarning, catalog, fetch
from dpsolve.matrices import MatrixFileError, extract_mtx, laplace_2d, laplace_3d, read_matrix

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the server
def make_tarball(name: str, A, extra: dict | None = None) -> bytes:
    """A SuiteSparse-style ``<name>.tar.gz``: ``<name>/<name>.mtx`` plus ``extra`` members."""
    def mtx_bytes(M):
        buf = io.BytesIO()
        scipy.io.mmwrite(buf, sp.coo_matrix(M), symmetry="general")
        return buf.getvalue()

    members = {f"{name}/{name}_b.mtx": mtx_bytes(np.ones((A.shape[0], 1)))}
    members[f"{name}/{name}.mtx"] = mtx_bytes(A)
    members.update(extra or {})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        for path, data in members.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


class LocalSuiteSparse:
    """http.server on 127.0.0.1 serving ``files`` {url path: bytes} under ``/MM``.

    ``interrupt[path] = k`` makes the next k requests for ``path`` announce the full
    Content-Length, send half the body and close the connection. ``trickle[path] = s`` sends
    its body 16 bytes at a time, ``s`` seconds apart. ``requests[path]`` counts.
    """

    def __init__(self):
        self.files, self.interrupt, self.requests, self.trickle = {}, {}, {}, {}
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path
                srv.requests[path] = srv.requests.get(path, 0) + 1
                data = srv.files.get(path)
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if srv.interrupt.get(path, 0) > 0:
                    srv.interrupt[path] -= 1
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)       # the connection drops mid-body
                    return
                pause = srv.trickle.get(path)
                try:
                    for i in range(0, len(data), 16 if pause else len(data)):
                        self.wfile.write(data[i:i + 16] if pause else data)
                        self.wfile.flush()
                        time.sleep(pause or 0)
                except OSError:                       # the client gave up
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/MM"

    def add(self, spec: str, data: bytes):
        self.files[f"/MM/{spec}.tar.gz"] = data
        return f"/MM/{spec}.tar.gz"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = LocalSuiteSparse()
    yield s
    s.close()


@pytest.fixture
def env(server, tmp_path, monkeypatch):
    """The fetcher pointed at the local server, with a fresh cache folder."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", server.url)
    monkeypatch.setenv("DPSOLVE_MATRIX_DIR", str(cache))
    monkeypatch.setattr(fetch, "RETRY_PAUSE", 0.0)
    return cache


def _files(d: Path):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()) \
        if d.exists() else []


def _same(A, B):
    return A.shape == B.shape and abs(sp.csr_array(A) - sp.csr_array(B)).max() == 0


# --------------------------------------------------------------------------- tests
def test_download_extracts_the_matrix_into_the_cache(server, env):
    A = laplace_2d(5)
    server.add("Grp/small", make_tarball("small", A))
    path = fetch.fetch("Grp/small", progress=False)
    assert path == env / "Grp" / "small.mtx"
    assert _files(env) == ["Grp/small.mtx"]          # no tarball, no temporary file left
    assert _same(read_matrix(path), A)


def test_cached_rerun_makes_no_request(server, env):
    p = server.add("Grp/small", make_tarball("small", laplace_2d(4)))
    first = fetch.fetch("Grp/small", progress=False)
    mtime = first.stat().st_mtime_ns
    assert server.requests[p] == 1
    again = fetch.fetch("Grp/small", progress=False)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert server.requests[p] == 1                   # served from the cache
    assert _same(fetch.load("Grp/small", progress=False), laplace_2d(4))
    assert server.requests[p] == 1


def test_interrupted_download_leaves_nothing_and_a_retry_succeeds(server, env):
    A = laplace_2d(30)                               # big enough for a half body to be partial
    p = server.add("Grp/big", make_tarball("big", A))
    server.interrupt[p] = 1
    with pytest.raises(fetch.FetchError, match="interrupted|ended after"):
        fetch.fetch("Grp/big", progress=False, retries=0)
    assert server.requests[p] == 1
    assert _files(env) == []                         # no partial tarball, no partial matrix
    assert not fetch.cached_path("Grp/big").exists()
    path = fetch.fetch("Grp/big", progress=False, retries=0)
    assert server.requests[p] == 2
    assert _files(env) == ["Grp/big.mtx"]
    assert _same(read_matrix(path), A)


def test_automatic_retry_after_an_interruption(server, env):
    p = server.add("Grp/big", make_tarball("big", laplace_2d(30)))
    server.interrupt[p] = 1
    path = fetch.fetch("Grp/big", progress=False)     # default: retries
    assert server.requests[p] == 2 and path.is_file()


def test_every_attempt_interrupted_is_an_error_with_no_file(server, env):
    p = server.add("Grp/big", make_tarball("big", laplace_2d(30)))
    server.interrupt[p] = 10
    with pytest.raises(fetch.FetchError) as e:
        fetch.fetch("Grp/big", progress=False, retries=2)
    assert server.requests[p] == 3
    assert "Grp/big" in str(e.value) and "\n" not in str(e.value)
    assert _files(env) == []


def test_missing_matrix_is_a_clear_error(server, env):
    with pytest.raises(fetch.FetchError, match="HTTP 404"):
        fetch.fetch("Grp/nothere", progress=False, retries=0)
    assert _files(env) == []


def test_corrupt_tarball_is_an_error_with_no_file(server, env):
    server.add("Grp/bad", b"this is not a tarball" * 100)
    with pytest.raises(fetch.FetchError, match="not a usable SuiteSparse tarball"):
        fetch.fetch("Grp/bad", progress=False, retries=0)
    assert _files(env) == []


def test_a_slow_server_meets_the_overall_deadline(server, env):
    """A server that trickles bytes (each read well within the per-read timeout) is cut off by
    the deadline of the whole fetch, and leaves nothing behind."""
    data = make_tarball("slow", laplace_2d(20))
    p = server.add("Grp/slow", data)
    server.trickle[p] = 0.05                          # len(data) / 16 * 0.05 s in all
    assert len(data) / 16 * 0.05 > 10
    with pytest.raises(fetch.FetchError) as e:
        fetch.fetch("Grp/slow", progress=False, timeout=5, deadline=0.5)
    msg = str(e.value)
    assert "Grp/slow" in msg and "0.5 s deadline" in msg
    assert server.requests[p] == 1                    # no retry past the deadline
    assert _files(env) == []


def test_the_deadline_covers_the_retries(server, env, monkeypatch):
    monkeypatch.setattr(fetch, "RETRY_PAUSE", 0.3)
    p = server.add("Grp/big", make_tarball("big", laplace_2d(30)))
    server.interrupt[p] = 100
    with pytest.raises(fetch.FetchError, match="deadline"):
        fetch.fetch("Grp/big", progress=False, retries=50, deadline=0.5)
    assert server.requests[p] < 50


BAD_MEMBERS = {
    "a NUL byte": (b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\x00\n2 2 1\n",
                   "line 3: a NUL byte"),
    "not a number": (b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0d0\n2 2 1\n",
                     "line 3: '1.0d0' is not a number"),
    "cut short": (b"%%MatrixMarket matrix coordinate real general\n3 3 5\n1 1 1.0\n",
                  "truncated file"),
}


@pytest.mark.parametrize("what", sorted(BAD_MEMBERS))
def test_a_corrupt_matrix_never_enters_the_cache(server, env, what):
    content, needle = BAD_MEMBERS[what]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        info = tarfile.TarInfo("bad/bad.mtx")
        info.size = len(content)
        tf.addfile(info, io.BytesIO(content))
    server.add("Grp/bad", out.getvalue())
    with pytest.raises(fetch.FetchError) as e:
        fetch.fetch("Grp/bad", progress=False, retries=0)
    msg = str(e.value)
    assert "not a usable SuiteSparse tarball: its bad.mtx" in msg and needle in msg
    assert ".part" not in msg                         # the temporary file is not named
    assert _files(env) == [] and not env.exists()


def test_a_corrupt_cached_file_is_named_and_evicted(server, env):
    """A cached file that fails to read (damaged after it was fetched) is named in the error
    and removed: the next load downloads it again."""
    A = laplace_2d(4)
    p = server.add("Grp/m", make_tarball("m", A))
    cached = fetch.cached_path("Grp/m")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 \x00\n")
    with pytest.raises(MatrixFileError) as e:
        fetch.load("Grp/m", progress=False)
    msg = str(e.value)
    assert msg.startswith(f"{cached}, line 3: a NUL byte") and "removed from the cache" in msg
    assert not cached.exists() and p not in server.requests
    assert _same(fetch.load("Grp/m", progress=False), A)          # downloaded anew
    assert server.requests[p] == 1


def _folders(d: Path):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_dir())


@pytest.mark.parametrize("how", ["404", "corrupt", "interrupted", "ctrl-c"])
def test_a_failed_fetch_leaves_no_empty_folders(server, env, monkeypatch, how):
    server.add("Old/kept", make_tarball("kept", laplace_2d(3)))
    if how == "corrupt":
        server.add("Grp/x", b"this is not a tarball" * 100)
    elif how == "interrupted":
        server.interrupt[server.add("Grp/x", make_tarball("x", laplace_2d(30)))] = 10
    elif how == "ctrl-c":
        def interrupted(*a, **k):
            raise KeyboardInterrupt
        monkeypatch.setattr(fetch, "_download", interrupted)
    with pytest.raises(KeyboardInterrupt if how == "ctrl-c" else fetch.FetchError):
        fetch.fetch("Grp/x", progress=False, retries=0)
    assert not env.exists()                  # the cache did not exist: nothing is left of it
    monkeypatch.undo()
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", server.url)
    monkeypatch.setenv("DPSOLVE_MATRIX_DIR", str(env))
    fetch.fetch("Old/kept", progress=False)
    if how == "ctrl-c":
        monkeypatch.setattr(fetch, "_download", interrupted)
    with pytest.raises(KeyboardInterrupt if how == "ctrl-c" else fetch.FetchError):
        fetch.fetch("Grp/x", progress=False, retries=0)
    assert _folders(env) == ["Old"] and _files(env) == ["Old/kept.mtx"]   # what was there stays


def test_mirrors_are_tried_in_order(server, env, monkeypatch):
    server.add("Grp/small", make_tarball("small", laplace_2d(3)))
    dead = "http://127.0.0.1:9/MM"                   # nothing listens on the discard port
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", f"{dead}, {server.url}")
    assert fetch.base_urls() == [dead, server.url]
    assert fetch.fetch("Grp/small", progress=False, retries=0).is_file()


def test_progress_bar_and_plain_fallback(server, env, capsys, monkeypatch):
    server.add("Grp/a", make_tarball("a", laplace_2d(20)))
    server.add("Grp/b", make_tarball("b", laplace_2d(20)))
    fetch.fetch("Grp/a", progress=True)
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)      # tqdm missing
    fetch.fetch("Grp/b", progress=True)
    err = capsys.readouterr().err
    assert "Grp/a" in err and "Grp/b: 100%" in err


def test_catalog_mismatch_warns_after_reading(server, env):
    # a small matrix served under the name of one of the paper's: n and nnz do not match
    server.add("GHS_psdef/ldoor", make_tarball("ldoor", laplace_2d(4)))
    with pytest.warns(DpsolveWarning, match=r"ldoor.*n = 16.*Table 1 gives n = 952,203"):
        fetch.load("GHS_psdef/ldoor", progress=False)
    server.add("Grp/other", make_tarball("other", laplace_2d(4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # not in the catalog: nothing to compare
        fetch.load("Grp/other", progress=False)


def test_catalog_match_is_silent():
    e = catalog.lookup("CRANKSEG_2")

    class Fake:                                      # only n and nnz are looked at
        shape, nnz = (e.n, e.n), e.nnz
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fetch.check(Fake(), "GHS_psdef", "crankseg_2") is None


def test_cache_dir_and_urls_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DPSOLVE_MATRIX_DIR", str(tmp_path / "m"))
    assert fetch.cache_dir() == tmp_path / "m"
    monkeypatch.delenv("DPSOLVE_MATRIX_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch.cache_dir() == tmp_path / "xdg" / "dpsolve" / "matrices"
    monkeypatch.delenv("DPSOLVE_SUITESPARSE_URL", raising=False)
    assert fetch.base_urls() == [u.rstrip("/") for u in fetch.DEFAULT_URLS]
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", "http://example.invalid/MM/")
    assert fetch.base_urls() == ["http://example.invalid/MM"]


@pytest.mark.parametrize("bad", ["ldoor", "a/b/c", "../x", "GHS/..", "", "a b/c"])
def test_malformed_names_are_refused(bad):
    with pytest.raises(ValueError, match="GROUP/NAME"):
        fetch.split_name(bad)


# --------------------------------------------------------------------------- reading, catalog
def test_read_matrix_reads_a_suitesparse_tarball(tmp_path):
    A = laplace_2d(6)
    tar = tmp_path / "small.tar.gz"
    tar.write_bytes(make_tarball("small", A))
    assert _same(read_matrix(tar), A)                 # the main member, not small_b.mtx
    out = extract_mtx(tar, tmp_path / "x" / "small.mtx")
    assert _files(tmp_path / "x") == ["small.mtx"] and _same(read_matrix(out), A)


def test_tarball_without_the_matrix_is_refused(tmp_path):
    tar = tmp_path / "t.tar.gz"
    tar.write_bytes(make_tarball("t", laplace_2d(3), extra={"t/other.mtx": b"x"}))
    bad = tmp_path / "u.tar.gz"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tf:
        info = tarfile.TarInfo("u/readme.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    bad.write_bytes(out.getvalue())
    with pytest.raises(ValueError, match="holds no u.mtx"):
        extract_mtx(bad, tmp_path / "u.mtx")
    assert not (tmp_path / "u.mtx").exists()


def test_paper_catalog_matches_the_csv_and_table_1():
    with open(ROOT / "matrices" / "paper.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == catalog.as_csv_rows()
    expect = {"BMWCRA1_1": ("GHS_psdef/bmwcra_1", 148_770, 10_641_602),
              "CRANKSEG_2": ("GHS_psdef/crankseg_2", 63_838, 14_148_858),
              "F1": ("Koutsovasilis/F1", 343_791, 26_837_113),
              "INLINE_1": ("GHS_psdef/inline_1", 503_712, 38_816_170),
              "LDOOR": ("GHS_psdef/ldoor", 952_203, 42_493_817),
              "AUDIKW_1": ("GHS_psdef/audikw_1", 943_645, 77_651_847),
              "A252": ("laplace3d-252", 16_003_008, 111_640_032)}
    assert {e.paper_name: (e.source, e.n, e.nnz) for e in catalog.PAPER} == expect
    assert catalog.lookup("audi").paper_name == "AUDIKW_1"
    assert catalog.lookup("ghs_psdef/LDOOR").paper_name == "LDOOR"
    assert catalog.lookup("nope") is None


def test_a252_sizes_follow_from_the_generator():
    # n = k^3 and nnz = 7 k^3 - 6 k^2 for the 7-point Laplacian; checked on small grids, then
    # applied to k = 252 (generating A252 itself takes seconds and gigabytes)
    for k in (2, 3, 7, 12):
        A = laplace_3d(k)
        assert (A.shape[0], A.nnz) == (k ** 3, 7 * k ** 3 - 6 * k ** 2)
    e = catalog.lookup("A252")
    assert (e.n, e.nnz) == (252 ** 3, 7 * 252 ** 3 - 6 * 252 ** 2)
