"""The study's own files: results.csv and raw.csv (read and checked, appended a configuration at a
time, repaired on resume) and study.json (read and checked, replaced whole).

Every error about them names the file (and the line of a CSV file): :class:`StudyFileError` for
what is in a file, an ``OSError`` carrying the file's name for what the system refused.

A configuration's rows reach each CSV file in one write, then a flush, so a run killed between two
configurations leaves whole lines. A write cut short (a kill during it, a full disk) leaves an
incomplete last line: a resume drops it, with a warning, and that configuration runs again."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .plan import KEY, NUMBER_FIELDS, STATUSES, Config


class StudyFileError(ValueError):
    """A study file (study.json, results.csv, raw.csv) that cannot be used; the message names it
    and says what is wrong."""


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)
_DAMAGED = "fix or remove that line, or pass --restart to start over (deleting its results)"


@contextlib.contextmanager
def _naming(path):
    """An OSError raised inside names ``path`` (a failed write or read does not on its own)."""
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


def _read_bytes(path: Path) -> bytes:
    with _naming(path):
        return path.read_bytes() if path.exists() else b""


def _decode(path: Path, data: bytes, advice: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise StudyFileError(f"{path}, line {line}: not UTF-8 text (byte {e.start}): "
                             f"{advice}") from None


def write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file beside it, renamed over it: a kill while writing
    leaves the old file (or none), never half of the new one."""
    with _naming(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


# --------------------------------------------------------------------------- CSV
def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if v != v else f"{v:.6g}"
    return " ".join(str(v).splitlines())          # one row, one line (an error's text may not be)


def append_rows(path: Path, fields, rows) -> None:
    """Append ``rows`` to the CSV file ``path`` (its header first where the file is new or empty)
    in one write, then a flush."""
    if not rows:
        return
    buf = io.StringIO()
    w = csv.DictWriter(buf, fields, extrasaction="ignore", lineterminator="\n")
    with _naming(path):
        if not path.exists() or path.stat().st_size == 0:
            w.writeheader()
        w.writerows({k: _fmt(r.get(k)) for k in fields} for r in rows)
        with open(path, "ab") as f:
            f.write(buf.getvalue().encode("utf-8"))
            f.flush()


@dataclass
class _CsvFile:
    rows: list            # the rows under the expected header, checked
    header: list | None   # the header as found (None: no complete line)
    whole: int            # bytes up to the end of the last complete line
    partial: bytes        # what follows it: an incomplete last line, or b""


def _check_row(path, line, fields, cells) -> dict:
    if len(cells) != len(fields):
        raise StudyFileError(f"{path}, line {line}: {len(cells)} fields, the header has "
                             f"{len(fields)}: {_DAMAGED}")
    row = dict(zip(fields, cells))
    for k in (k for k in fields if k in NUMBER_FIELDS):
        if row[k] and not _NUMBER.fullmatch(row[k]):
            raise StudyFileError(f"{path}, line {line}: {k} is {row[k]!r}, not a number: "
                                 f"{_DAMAGED}")
    if "status" in row and row["status"] not in STATUSES:
        raise StudyFileError(f"{path}, line {line}: status is {row['status']!r}, not "
                             f"{', '.join(STATUSES[:-1])} or {STATUSES[-1]}: {_DAMAGED}")
    return row


def _load(path: Path, fields) -> _CsvFile:
    """``path`` read and checked against ``fields``. A header that differs is an error where the
    file holds rows (they may be another version's results, and would be lost)."""
    data = _read_bytes(path)
    whole = data.rfind(b"\n") + 1
    text = _decode(path, data[:whole], _DAMAGED)
    fields = list(fields)
    header, rows = None, []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for cells in reader:
            line = reader.line_num
            if "\0" in "".join(cells):
                raise StudyFileError(f"{path}, line {line}: a NUL byte (a damaged file): "
                                     f"{_DAMAGED}")
            if header is None:
                header = cells
            elif cells and header != fields:
                raise _other_header(path, header, fields)
            elif cells:
                rows.append(_check_row(path, line, fields, cells))
    except csv.Error as e:
        raise StudyFileError(f"{path}, line {reader.line_num}: not CSV ({e}): "
                             f"{_DAMAGED}") from None
    return _CsvFile(rows, header, whole, data[whole:])


def _other_header(path, header, fields) -> StudyFileError:
    missing = [f for f in fields if f not in header]
    extra = [f for f in header if f not in fields]
    what = "; ".join(s for s in (f"no column {', '.join(missing)}" if missing else "",
                                 f"columns {', '.join(extra)} it does not know" if extra else "")
                     if s) or "its columns in another order"
    return StudyFileError(f"{path}: written by another version of dpsolve ({what}): its results "
                          f"cannot be resumed; pass --restart to start over (deleting them), or "
                          f"another --out")


def read_rows(path: Path, fields) -> list[dict]:
    """The rows of a study CSV file, checked ([] for a missing or empty one); an incomplete last
    line is not a row (a resume drops it: :func:`repair`)."""
    return _load(Path(path), fields).rows


def repair(path: Path, fields, log=print) -> list[dict]:
    """Before a resume appends to ``path``: drop an incomplete last line, and start anew a file
    that holds no rows under another header (nothing is lost); a warning for each. Returns the
    rows."""
    path = Path(path)
    f = _load(path, fields)
    if f.partial:
        log(f"warning: {path}: its last line is incomplete (a run killed while writing it, or a "
            f"full disk): dropped; its configuration runs again")
    other = f.header is not None and f.header != list(fields)
    if other:
        log(f"warning: {path} held another version's header and no rows: started anew")
    if f.partial or other:
        with _naming(path):
            os.truncate(path, 0 if other else f.whole)
    return f.rows


def drop_rows_without_result(path: Path, fields, rows, results, log=print) -> None:
    """Drop the rows of raw.csv whose configuration has no ok row in results.csv (a run killed
    between its append to raw.csv and the one to results.csv): that configuration runs again."""
    ok = {tuple(r[k] for k in KEY) for r in results if r["status"] == "ok"}
    keep = [r for r in rows if tuple(r[k] for k in KEY) in ok]
    if len(keep) == len(rows):
        return
    lost = {tuple(r[k] for k in KEY) for r in rows} - ok
    log(f"warning: {path}: {len(rows) - len(keep)} rows without a result in results.csv "
        f"({'; '.join(sorted(Config(*k).label() for k in lost))}): dropped; "
        f"{'it runs' if len(lost) == 1 else 'they run'} again")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fields, lineterminator="\n")
    w.writeheader()
    w.writerows(keep)
    write_whole(path, buf.getvalue().encode("utf-8"))


# --------------------------------------------------------------------------- study.json
def read_settings(path: Path) -> dict:
    """The ``settings`` object of study.json ({} where it has none)."""
    path = Path(path)
    advice = "fix it, or pass --restart to start over (deleting the results beside it)"
    try:
        doc = json.loads(_decode(path, _read_bytes(path), advice))
    except json.JSONDecodeError as e:
        raise StudyFileError(f"{path}, line {e.lineno}: not valid JSON ({e.msg}): "
                             f"{advice}") from None
    if not isinstance(doc, dict):
        why = "not a JSON object"
    elif not isinstance(doc.get("settings", {}), dict):
        why = '"settings" is not a JSON object'
    else:
        return doc.get("settings", {})
    raise StudyFileError(f"{path}: {why}, as dpsolve writes it: {advice}")
