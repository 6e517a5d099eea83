"""Reading Matrix Market files strictly (dpsolve.matrices.read_matrix): what is not a number is an
error naming the file and the line, never another number; a NUL byte is an error, not a crash; a
header's n and nnz meet the size guard before any entry is read. The same for a .mtx, a .mtx.gz
and the .mtx member of a SuiteSparse .tar.gz, with SciPy's reader or fast_matrix_market."""
from __future__ import annotations

import bz2
import gzip
import io
import itertools
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from dpsolve import matrices
from scipy_cases import scipy_mmread
from dpsolve.matrices import MatrixFileError, ProblemTooLargeError, read_matrix

ROOT = Path(__file__).resolve().parents[1]
REAL = b"%%MatrixMarket matrix coordinate real general\n3 3 3\n"


def entries(value: bytes, head: bytes = REAL) -> bytes:
    """Three entries, ``value`` on line 3 (the first entry line)."""
    return head + b"1 1 " + value + b"\n2 2 2.0\n3 3 1\n"


def write(tmp_path, data: bytes, container: str) -> Path:
    """``data`` as m.mtx, m.mtx.gz, m.mtx.bz2 or the m/m.mtx member of m.tar.gz."""
    path = tmp_path / f"m.{container}"
    if container == "mtx":
        path.write_bytes(data)
    elif container == "mtx.gz":
        path.write_bytes(gzip.compress(data))
    elif container == "mtx.bz2":
        path.write_bytes(bz2.compress(data))
    else:
        with tarfile.open(path, "w:gz") as tf:
            info = tarfile.TarInfo("m/m.mtx")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


CONTAINERS = ("mtx", "mtx.gz", "mtx.bz2", "tar.gz")


@pytest.fixture(params=["scipy", "fast_matrix_market"])
def parser(request, monkeypatch):
    """Each reader that may do the parsing: SciPy's (fast_matrix_market hidden) and
    fast_matrix_market (skipped where it is not installed)."""
    if request.param == "scipy":
        monkeypatch.setitem(sys.modules, "fast_matrix_market", None)
    else:
        pytest.importorskip("fast_matrix_market")
    return request.param


def refused(path, line, *needles):
    with pytest.raises(MatrixFileError) as e:
        read_matrix(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and e.value.path == str(path)
    assert e.value.line == line and (f"line {line}:" in msg if line else "line" not in msg)
    for needle in needles:
        assert needle in msg, msg
    assert "\n" not in msg
    return e.value


# --------------------------------------------------------------------------- not a number
NOT_NUMBERS = [b"1.0d0", b"1,5", b"0x1p3", b"1.0abc", b"1-2", b"1.2.3", b"1e5.3", b"1e5e3", b"1e",
               b"1e+", b"e5", b"--1", b"+", b".", b"-.e5", b"1.-1", b"+-1", b"1..0", b"1\xc3\xa9",
               b"\xff", b"1\x0b", b"2\x0c"]


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("value", NOT_NUMBERS, ids=[v.decode("latin-1") for v in NOT_NUMBERS])
def test_what_is_not_a_number_is_refused_with_file_and_line(tmp_path, parser, container, value):
    e = refused(write(tmp_path, entries(value), container), 3, "is not a number")
    assert e.member == (container == "tar.gz")
    shown = value.decode("ascii", "backslashreplace")
    assert f"'{shown}'" in str(e)


@pytest.mark.parametrize("value, needle", [
    (b"1.0 7.0", "expected 3 fields (row, column, value), found 4"),
    (b"", "expected 3 fields (row, column, value), found 2"),
    (b"1.0 % a comment", "expected 3 fields (row, column, value), found 6"),
])
def test_a_wrong_number_of_fields_is_refused(tmp_path, parser, value, needle):
    refused(write(tmp_path, entries(value), "mtx"), 3, needle)


@pytest.mark.parametrize("line, needle", [
    (b"1.0 1 1.0", "the row index '1.0' is not a positive integer"),
    (b"1 +1 1.0", "the column index '+1' is not a positive integer"),
    (b"1e0 1 1.0", "the row index '1e0' is not a positive integer"),
    (b"-1 1 1.0", "the row index '-1' is not a positive integer"),
    (b"1 1.5 1.0", "the column index '1.5' is not a positive integer"),
])
def test_an_index_must_be_a_positive_integer(tmp_path, parser, line, needle):
    data = REAL + line + b"\n2 2 2.0\n3 3 1\n"
    refused(write(tmp_path, data, "mtx"), 3, needle)


@pytest.mark.parametrize("head, value, needle", [
    (b"integer", b"1.5", "'1.5' is not an integer"),
    (b"integer", b"1e3", "'1e3' is not an integer"),
    (b"complex", b"1.0", "expected 4 fields (row, column, real part, imaginary part), found 3"),
    (b"complex", b"1.0 2.0 3.0", "found 5"),
    (b"complex", b"1.0 2.0d0", "'2.0d0' is not a number"),
    (b"pattern", b"1.0", "expected 2 fields (row, column), found 3"),
])
def test_each_field_has_its_own_grammar(tmp_path, parser, head, value, needle):
    data = REAL.replace(b"real", head)
    rest = {b"complex": b"\n2 2 2.0 0\n3 3 1 0\n", b"pattern": b"\n2 2\n3 3\n",
            b"integer": b"\n2 2 2\n3 3 1\n"}[head]
    refused(write(tmp_path, data + b"1 1 " + value + rest, "mtx"), 3, needle)


@pytest.mark.parametrize("value", [b"nan", b"NaN", b"inf", b"-Infinity", b"1e999", b"-2e400"])
@pytest.mark.parametrize("container", CONTAINERS)
def test_a_value_that_is_not_finite_is_refused(tmp_path, parser, container, value):
    refused(write(tmp_path, entries(value), container), 3, "is not finite",
            value.decode())


def test_an_array_file_is_checked_too(tmp_path, parser):
    head = b"%%MatrixMarket matrix array real general\n2 2\n"
    path = write(tmp_path, head + b"1\n2\n3,5\n4\n", "mtx")
    refused(path, 5, "'3,5' is not a number")
    path.write_bytes(head + b"1\n2\n3\n1e999\n")
    refused(path, 6, "is not finite")
    path.write_bytes(head + b"1\n2\n3 4\n")
    refused(path, 5, "expected 1 field (value), found 2")


# --------------------------------------------------------------------------- NUL bytes
NULS = {
    "after a value": entries(b"1.0\x00"),
    "inside a value": entries(b"1.\x005"),
    "a line of its own": REAL + b"1 1 1.0\n\x00\n2 2 2.0\n3 3 1\n",
    "in the header": REAL.replace(b"3 3 3", b"3 3\x00 3") + b"1 1 1.0\n2 2 2.0\n3 3 1\n",
    "in a comment": REAL.replace(b"\n3 3 3", b"\n% a\x00b\n3 3 3") + b"1 1 1\n2 2 2\n3 3 1\n",
    "array": b"%%MatrixMarket matrix array real general\n3 1\n1.0\x00\n2\n3\n",
}
NUL_LINES = {"after a value": 3, "inside a value": 3, "a line of its own": 4, "in the header": 2,
             "in a comment": 2, "array": 3}

_READ = """
import sys
from dpsolve.matrices import MatrixFileError, read_matrix
try:
    read_matrix(sys.argv[1])
except MatrixFileError as e:
    print(e.line, e)
"""


@pytest.mark.parametrize("where", sorted(NULS))
@pytest.mark.parametrize("container", CONTAINERS)
def test_a_nul_byte_is_an_error_not_a_crash(tmp_path, where, container):
    """In a subprocess: SciPy's reader crashes the process (SIGSEGV) on some of these."""
    path = write(tmp_path, NULS[where], container)
    r = subprocess.run([sys.executable, "-c", _READ, str(path)], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    line = NUL_LINES[where]
    assert r.stdout.startswith(f"{line} {path}") and f"line {line}: a NUL byte" in r.stdout


# --------------------------------------------------------------------------- the header
@pytest.mark.parametrize("banner, needle", [
    (b"%%MatrixMarket matrix coordinate real", "the banner should be"),
    (b"%%MatrixMarket matrix coordinate reel general", "unknown field 'reel'"),
    (b"%%MatrixMarket matrix sparse real general", "unknown format 'sparse'"),
    (b"%%MatrixMarket matrix coordinate real lower", "unknown symmetry 'lower'"),
    (b"%%MatrixMarket vector coordinate real general", "a vector file, not a matrix"),
    (b"%%MatrixMarket matrix array pattern general", "an array file cannot be a pattern"),
])
def test_a_bad_banner_is_refused(tmp_path, banner, needle):
    refused(write(tmp_path, banner + b"\n3 3 0\n", "mtx"), 1, needle)


@pytest.mark.parametrize("size, needle", [
    (b"3 3", "the size line should be 'rows columns entries'"),
    (b"3 3 3 3", "the size line should be 'rows columns entries'"),
    (b"3 3 x", "the size line should be 'rows columns entries'"),
    (b"3 -3 1", "the size line should be 'rows columns entries'"),
    (b"3 3 10", "the header declares 10 entries, more than a 3 x 3 matrix holds"),
    (b"1 1 99999999999999999999999",
     "the header declares 99,999,999,999,999,999,999,999 entries, more than a 1 x 1 matrix holds"),
    (b"99999999999999999999 99999999999999999999 1", "more than a sparse matrix can index"),
])
def test_a_bad_size_line_is_refused(tmp_path, size, needle):
    refused(write(tmp_path, REAL.replace(b"3 3 3", size), "mtx"), 2, needle)


def test_too_few_and_too_many_entries(tmp_path, parser):
    path = write(tmp_path, REAL + b"1 1 1\n2 2 2\n", "mtx")
    refused(path, None, "truncated file: the header declares 3 entries, the file holds 2")
    path.write_bytes(REAL + b"1 1 1\n2 2 2\n3 3 3\n\n1 2 4\n")
    refused(path, 7, "more entries than the 3 the header declares")


@pytest.fixture
def small_machine(monkeypatch):
    """1 GB available."""
    monkeypatch.setattr(matrices, "available_memory", lambda: 10 ** 9)
    monkeypatch.delenv(matrices.SIZE_GUARD_ENV, raising=False)


HUGE = b"%%MatrixMarket matrix coordinate real symmetric\n100000000 100000000 900000000\n1 1 1\n"


@pytest.mark.parametrize("container", CONTAINERS)
def test_the_size_guard_reads_the_header_first(tmp_path, small_machine, monkeypatch, container):
    def parsed(*a, **k):
        raise AssertionError("the entries were read")
    monkeypatch.setattr(matrices, "_parse", parsed)
    path = write(tmp_path, HUGE, container)
    with pytest.raises(ProblemTooLargeError) as e:
        read_matrix(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: the header declares n = 100,000,000, nnz = 1,800,000,000 "
                          f"(float64)")
    assert "more than the 1 GB available here" in msg
    assert "--force" in msg and f"{matrices.SIZE_GUARD_ENV}=1" in msg


def test_the_size_guard_can_be_passed(tmp_path, small_machine, monkeypatch):
    path = write(tmp_path, HUGE, "mtx")
    for how in ("force", "env"):
        with pytest.raises(MatrixFileError, match="truncated file"):    # past the guard
            if how == "force":
                read_matrix(path, force=True)
            else:
                monkeypatch.setenv(matrices.SIZE_GUARD_ENV, "1")
                read_matrix(path)


# --------------------------------------------------------------------------- what is read
VALID = {
    "forms of a number": (REAL.replace(b"3 3 3", b"3 3 7") + b"1 1 1.\n1 2 .5\n1 3 -1.e5\n"
                          b"2 1 -0\n2 2 007\n3 3 1E+05\n3 1 -.5e-3\n"),
    "blanks": (b"%%MatrixMarket matrix coordinate real general\n%c\n\n  3 3 3  \n\n"
               b"\t1\t1\t1.0\t\n 2  2   2.0\n\n3 3 1\n\n"),
    "crlf, no final newline": (REAL + b"1 1 1.0\r\n2 2 2.0\r\n3 3 1").replace(b"\n", b"\r\n"),
    "upper case banner": REAL.replace(b"matrix coordinate real general",
                                      b"MATRIX Coordinate REAL General") + b"1 1 1\n2 2 2\n3 3 3\n",
    "symmetric": (b"%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 4\n2 1 -1\n"
                  b"2 2 4\n3 3 4\n"),
    "skew": b"%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 -1\n3 2 5\n",
    "hermitian": (b"%%MatrixMarket matrix coordinate complex hermitian\n2 2 3\n1 1 2 0\n"
                  b"2 1 1 -1\n2 2 3 0\n"),
    "integer": b"%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 1 -3\n2 2 4\n",
    "pattern": b"%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 1\n",
    "array": b"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3e0\n-4\n",
    "double": b"%%MatrixMarket matrix coordinate double general\n1 1 1\n1 1 2.5\n",
    "empty": b"%%MatrixMarket matrix coordinate real general\n2 2 0\n",
}


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("name", sorted(VALID))
def test_what_is_valid_reads_as_scipy_reads_it(tmp_path, parser, container, name):
    data = VALID[name]
    expect = sp.csr_array(sp.coo_array(scipy_mmread(io.BytesIO(data))))
    got = read_matrix(write(tmp_path, data, container))
    assert got.shape == expect.shape and got.dtype == expect.dtype
    assert abs(got - expect).max() == 0 if got.nnz or expect.nnz else True


@pytest.mark.parametrize("head, value", [(b"real", b"+1.5"), (b"real", b"+.5"),
                                         (b"integer", b"+4")])
def test_a_leading_plus_is_the_parsers_to_refuse(tmp_path, parser, head, value):
    """A number may start with '+', but the C++ reader of both parsers does not read one: its
    error, with the file and line."""
    data = REAL.replace(b"real", head) + b"1 1 " + value + b"\n2 2 2\n3 3 1\n"
    refused(write(tmp_path, data, "mtx"), 3, "invalid")


def test_lines_are_counted_across_chunks(tmp_path, parser, monkeypatch):
    """The file is checked a chunk at a time; a line cut by a chunk's end is checked whole, and
    the line number counts every line before it."""
    monkeypatch.setattr(matrices, "MTX_CHUNK", 50)
    A = sp.random_array((40, 40), density=0.3, rng=0, format="coo")
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, A)
    text = buf.getvalue()
    path = write(tmp_path, text, "mtx")
    assert abs(read_matrix(path) - A.tocsr()).max() == 0
    lines = text.split(b"\n")
    bad = len(lines) - 30
    lines[bad - 1] = lines[bad - 1] + b"junk"
    path.write_bytes(b"\n".join(lines))
    refused(path, bad, "is not a number")


@pytest.mark.parametrize("container", ["mtx.gz", "mtx.bz2", "tar.gz"])
def test_a_damaged_container_is_named(tmp_path, container):
    whole = write(tmp_path, VALID["symmetric"], container).read_bytes()
    path = tmp_path / f"cut.{container}"
    path.write_bytes(whole[:len(whole) * 2 // 3])
    refused(path, None, "is cut short or corrupt")


def test_a_line_without_end_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(matrices, "MTX_MAX_LINE", 100)
    monkeypatch.setattr(matrices, "MTX_CHUNK", 64)
    path = write(tmp_path, REAL + b"1 1 " + b"1" * 500 + b"\n", "mtx")
    refused(path, 3, "longer than 100 bytes")


# --------------------------------------------------------------------------- the fast check
ALPHABET = b"0123456789+-.eE"


def test_the_fast_check_never_passes_what_the_line_check_refuses():
    """_count_entries (vectorised) may leave a chunk to _scan_lines (exact); it must never pass
    one that _scan_lines refuses, nor count otherwise. Every token of up to 4 bytes of the
    number alphabet, as a value and as an index, in real and integer files."""
    tokens = [bytes(t) for k in range(1, 5) for t in itertools.product(ALPHABET, repeat=k)]
    checked = 0
    for field in ("real", "integer"):
        header = matrices.MtxHeader("coordinate", field, "general", 9, 9, 10 ** 6, 2)
        for line in itertools.chain((b"1 1 " + t for t in tokens), (t + b" 1 1" for t in tokens)):
            chunk = b"\n" + line + b"\n\n 2\t3 4\r\n"
            fast = matrices._count_entries(chunk, header)
            entries, lines, problem = matrices._scan_lines(chunk, header)
            assert fast is None or (fast == (entries, lines) and problem is None), line
            checked += 1
    assert checked > 100_000


def test_the_fast_check_passes_ordinary_files():
    """What mmwrite writes goes through the vectorised check alone (no line-by-line scan)."""
    A = sp.random_array((300, 300), density=0.05, rng=1, format="coo")
    A.data = A.data * 10.0 ** np.random.default_rng(1).integers(-300, 300, A.nnz)
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, A)
    body = buf.getvalue().split(b"\n", 3)[3]
    header = matrices.MtxHeader("coordinate", "real", "general", 300, 300, A.nnz, 3)
    assert matrices._count_entries(body, header) == (A.nnz, A.nnz)


def test_a_long_comment_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(matrices, "MTX_MAX_LINE", 100)
    data = REAL.replace(b"\n3 3 3", b"\n%" + b"c" * 1000 + b"\n3 3 3") + b"1 1 1\n2 2 2\n3 3 3\n"
    assert read_matrix(write(tmp_path, data, "mtx")).nnz == 3


@pytest.mark.parametrize("symmetry, entries", [("general", 6), ("symmetric", 6),
                                               ("skew-symmetric", 3)])
def test_an_array_has_the_entries_of_its_shape(tmp_path, symmetry, entries):
    head = f"%%MatrixMarket matrix array real {symmetry}\n".encode()
    size = b"2 3\n" if symmetry == "general" else b"3 3\n"
    path = write(tmp_path, head + size + b"1\n" * (entries - 1), "mtx")
    refused(path, None, f"the header declares {entries} entries, the file holds {entries - 1}")
    path.write_bytes(head + size + b"1\n" * entries)
    assert read_matrix(path).shape == ((2, 3) if symmetry == "general" else (3, 3))
