"""The study's files on resume (issue 29, item 8): an incomplete last line left by a killed run or
a full disk is dropped with a warning and its configuration runs again; raw.csv rows of a
configuration without a result are dropped; a header of another version is an error (or started
anew where the file holds no rows); every error about study.json, results.csv and raw.csv names
the file; a configuration's rows reach the file in one write."""
from __future__ import annotations

import builtins
import errno
import json
import os
import re

import pytest
from test_study import _csv, _problems, host_settings

from dpsolve import study


def _run(out, *specs, **kw):
    logs = []
    study.run_study(_problems(*specs), host_settings(), out, progress=False, log=logs.append,
                    **kw)
    return logs


def _whole(path):
    """The rows of a CSV file, each checked to have every field of the header."""
    rows = _csv(path)
    assert all(None not in r and None not in r.values() for r in rows), rows
    return rows


def _last_line(path) -> bytes:
    return path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[1]


def _cut_last_line(path) -> bytes:
    """Cut the file in the middle of its last line, as a kill or a full disk would; return the
    part of the line that is left."""
    data, last = path.read_bytes(), _last_line(path)
    left = last[: len(last) // 2]
    path.write_bytes(data[: len(data) - len(last) - 1] + left)
    return left


@pytest.fixture
def two(tmp_path):
    """A finished study of two configurations."""
    out = tmp_path / "out"
    _run(out, "laplace1d-10", "laplace1d-11")
    return out


def _check_second_ran_once(out):
    res = _whole(out / "results.csv")
    assert [r["matrix"] for r in res] == ["laplace1d-10", "laplace1d-11"]
    assert res[1]["status"] == "ok" and float(res[1]["time_s"]) > 0
    raw = [r for r in _whole(out / "raw.csv") if r["matrix"] == "laplace1d-11"]
    assert [int(r["rep"]) for r in raw] == list(range(int(res[1]["reps"])))


def test_an_incomplete_last_line_is_dropped_and_its_configuration_runs_again(two):
    res, raw = two / "results.csv", two / "raw.csv"
    assert b",ok," in _cut_last_line(res)       # its key and status survived, its numbers not
    _cut_last_line(raw)
    logs = _run(two, "laplace1d-10", "laplace1d-11")
    for path in (res, raw):
        assert any(str(path) in m and "incomplete" in m for m in logs), logs
    assert any("1 of 2 configurations already done" in m for m in logs)
    _check_second_ran_once(two)


def test_raw_rows_of_a_configuration_without_a_result_are_dropped(two):
    """A kill between the append to raw.csv and the one to results.csv."""
    res = two / "results.csv"
    data = res.read_bytes()
    res.write_bytes(data[: len(data) - len(_last_line(res)) - 1])
    logs = _run(two, "laplace1d-10", "laplace1d-11")
    assert any(str(two / "raw.csv") in m and "laplace1d-11" in m for m in logs), logs
    _check_second_ran_once(two)


def test_a_header_of_another_version_is_an_error_naming_the_file(two):
    res = two / "results.csv"
    text = res.read_text().replace(",window_s,", ",").replace("status,", "state,", 1)
    res.write_text(text)
    with pytest.raises(study.StudyFileError, match=re.escape(str(res))) as e:
        _run(two, "laplace1d-10", "laplace1d-11")
    assert "window_s" in str(e.value) and "status" in str(e.value) and "--restart" in str(e.value)
    assert res.read_text() == text                   # nothing was lost


def test_a_header_of_another_version_without_rows_is_started_anew(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("matrix,method,old_column\n")
    logs = _run(out, "laplace1d-10")
    assert any(str(out / "results.csv") in m and "started anew" in m for m in logs), logs
    assert list(_whole(out / "results.csv")[0]) == list(study.RESULT_FIELDS)


def _replace_field(path, line, field, value):
    lines = path.read_text().split("\n")
    head = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[head.index(field)] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines))


def _drop_field(path, line, field):
    lines = path.read_text().split("\n")
    cells = lines[line - 1].split(",")
    del cells[lines[0].split(",").index(field)]
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines))


@pytest.mark.parametrize("name, damage, says", [
    ("results.csv", lambda p: _replace_field(p, 2, "time_s", "fast"),
     r"line 2: time_s is 'fast', not a number"),
    ("results.csv", lambda p: _replace_field(p, 3, "status", "done"),
     r"line 3: status is 'done', not ok, failed or skipped"),
    ("results.csv", lambda p: _drop_field(p, 2, "nnz"), r"line 2: \d+ fields, the header has \d+"),
    ("raw.csv", lambda p: _replace_field(p, 2, "wall_s", "1,5"), r"line 2: \d+ fields"),
    ("raw.csv", lambda p: _replace_field(p, 2, "wall_s", "0x1p-3"),
     r"line 2: wall_s is '0x1p-3', not a number"),
    ("results.csv", lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()),
     r"line 1: not UTF-8 text"),
    ("results.csv", lambda p: p.write_bytes(p.read_bytes().replace(b"laplace", b"lap\x00", 1)),
     r"line 2: a NUL byte"),
])
def test_a_damaged_csv_file_is_an_error_naming_it(two, name, damage, says):
    path = two / name
    damage(path)
    before = path.read_bytes()
    with pytest.raises(study.StudyFileError) as e:
        _run(two, "laplace1d-10", "laplace1d-11")
    assert str(e.value).startswith(f"{path}, line ")
    assert re.search(says, str(e.value)), str(e.value)
    assert path.read_bytes() == before
    if name == "results.csv":                           # the same error when the tables are made
        with pytest.raises(study.StudyFileError, match=re.escape(str(path))):
            study.read_results(two)


@pytest.mark.parametrize("text, says", [
    ('{"settings": {"rtol": 1e-6,', "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"settings": 3}', '"settings" is not a JSON object'),
    ("\xff", "not UTF-8"),
])
def test_a_damaged_study_json_is_an_error_naming_it(two, text, says):
    meta = two / "study.json"
    meta.write_bytes(text.encode("latin-1"))
    with pytest.raises(study.StudyFileError) as e:
        _run(two, "laplace1d-10", "laplace1d-11")
    assert str(e.value).startswith(str(meta)) and says in str(e.value)
    assert "--restart" in str(e.value)
    assert meta.read_bytes() == text.encode("latin-1")


def test_study_json_is_written_whole(two, monkeypatch):
    """Written beside it and renamed: a kill before the rename leaves the old one, whole."""
    meta = two / "study.json"
    old = meta.read_text()

    def killed(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        _run(two, "laplace1d-10", extra_meta={"run": 2})
    assert meta.read_text() == old and json.loads(old)
    assert sorted(p.name for p in two.iterdir() if "study" in p.name) == ["study.json"]


class _Recorder:
    """A file whose writes and flushes are recorded; ``fail`` writes half of one call's data
    and raises ENOSPC, as a full disk does."""

    def __init__(self, f, log, fail):
        self.f, self.log, self.fail = f, log, fail

    def write(self, data):
        if self.fail:
            self.f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        self.log.append(("write", data))
        return self.f.write(data)

    def flush(self):
        self.log.append(("flush",))
        return self.f.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)


def _record_appends(monkeypatch, name, fail_at=None):
    """Record each append to the file ``name`` of the study: a list of event lists."""
    real_open, appends = builtins.open, []

    def recording_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        if str(file).endswith(name) and "a" in mode:
            appends.append([])
            return _Recorder(f, appends[-1], fail=len(appends) == fail_at)
        return f
    monkeypatch.setattr(builtins, "open", recording_open)
    return appends


def test_each_configuration_reaches_each_file_in_one_write(tmp_path, monkeypatch):
    out = tmp_path / "out"
    for name in ("results.csv", "raw.csv"):
        appends = _record_appends(monkeypatch, name)
        _run(out, "laplace1d-10", "laplace1d-11", restart=True)
        assert len(appends) == 2, appends
        for events in appends:
            assert [e[0] for e in events] == ["write", "flush"]
            data = events[0][1]
            assert (data.decode() if isinstance(data, bytes) else data).endswith("\n")
        monkeypatch.undo()
    assert len(_whole(out / "raw.csv")) >= 2


def test_a_full_disk_is_an_error_naming_the_file_and_a_resume_repairs_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _record_appends(monkeypatch, "results.csv", fail_at=2)
    with pytest.raises(OSError) as e:
        _run(out, "laplace1d-10", "laplace1d-11")
    assert e.value.errno == errno.ENOSPC and str(out / "results.csv") in str(e.value)
    monkeypatch.undo()
    assert not (out / "results.csv").read_bytes().endswith(b"\n")     # half a line was written
    logs = _run(out, "laplace1d-10", "laplace1d-11")
    assert any("incomplete" in m for m in logs)
    _check_second_ran_once(out)
