"""The ``dpsolve`` command line: help for every command, solve (text and JSON), one-line errors,
fetch against a local HTTP server, a tiny study, and the scripts/study wrapper."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.io
import scipy.sparse as sp

from dpsolve import fetch
from dpsolve._device import status as device_status
from dpsolve.cli import main
from dpsolve.matrices import laplace_2d
from test_fetch import LocalSuiteSparse, make_tarball

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("info", "solve", "study", "fetch")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small_mtx(tmp_path):
    p = tmp_path / "poisson.mtx"
    scipy.io.mmwrite(str(p), sp.coo_matrix(laplace_2d(7)))
    return p


# --------------------------------------------------------------------------- help
def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for c in COMMANDS:
        assert c in out
    assert "exits 0 when the solve converged, 3 when it did not" in " ".join(out.split())
    assert "imports only" not in out                 # the module's note to its maintainers


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_help(capsys, cmd):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dpsolve {cmd}") and len(out.splitlines()) > 3


def test_help_documents_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["study", "--help"])
    out = capsys.readouterr().out
    for opt in ("--paper", "--matrices", "--methods", "--variants", "--syncs", "--dtypes",
                "--window", "--out", "--restart"):
        assert opt in out
    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    out = capsys.readouterr().out
    for opt in ("--method", "--variant", "--sync", "--format", "--rtol", "--precond", "--json"):
        assert opt in out


@pytest.fixture
def herm_mtx(tmp_path):
    """A small complex Hermitian positive definite matrix in a ``complex hermitian`` file (its
    real part alone is a different system: the imaginary parts are 0.5 off the diagonal)."""
    import numpy as np
    E = sp.diags_array([np.ones(15)], offsets=[1]).astype(complex)
    A = laplace_2d(4).astype(complex) + 2 * sp.eye_array(16) + 0.5j * (E - E.T)
    p = tmp_path / "herm.mtx"
    scipy.io.mmwrite(str(p), sp.coo_matrix(A), symmetry="hermitian")
    assert "complex hermitian" in p.read_text().splitlines()[0]
    return p


# --------------------------------------------------------------------------- solve
def test_solve_prints_the_report(capsys, small_mtx):
    code, out, err = run(capsys, "solve", str(small_mtx), "--variant", "host", "--rtol", "1e-8")
    assert code == 0, err
    assert "poisson" in out and "n = 49, nnz = 217" in out
    assert "cg/host/-/- float64 n=49 nnz=217: info=0" in out
    assert "converged" in out


def test_solve_prints_times_in_human_units(capsys, small_mtx, monkeypatch):
    import numpy as np
    from dpsolve import _solvers
    from dpsolve.report import SolveReport

    def slow(A, b, **kw):                 # a solve that took 2.38 s of wall time
        rep = SolveReport(variant="cuda", format="ell", sync="blocking", method="cg",
                          dtype="float64", n=49, nnz=217, iterations=12, info=0, converged=True,
                          residual_norm=1e-9, wall_time=2.38, gpu_time=0.0238,
                          host_cpu_time=75.0, gpu_energy=512.0)
        return np.ones(A.shape[0]), 0, rep
    monkeypatch.setattr(_solvers, "cg", slow)
    code, out, err = run(capsys, "solve", str(small_mtx))
    assert code == 0, err
    report = next(ln for ln in out.splitlines() if ln.startswith("report"))
    assert "wall=2.38 s gpu=23.8 ms" in report and "cpu=1 min 15 s" in report
    assert "e+0" not in report and "E_gpu=512 J" in report
    code, out, err = run(capsys, "solve", str(small_mtx), "--json")
    rep = json.loads(out)["report"]                      # the JSON keeps SI numbers
    assert (rep["wall_time"], rep["gpu_time"], rep["host_cpu_time"]) == (2.38, 0.0238, 75.0)


def test_the_host_report_has_no_sync_mode(capsys, small_mtx):
    code, out, err = run(capsys, "solve", str(small_mtx), "--variant", "host", "--sync",
                         "blocking")
    assert code == 0, err
    report = next(ln for ln in out.splitlines() if ln.startswith("report"))
    assert "cg/host/-/- float64 n=49 nnz=217: info=0" in report
    assert "polling" not in report and "blocking" not in report
    code, out, err = run(capsys, "solve", str(small_mtx), "--variant", "host", "--json")
    assert json.loads(out)["report"]["sync"] is None


def test_solve_json(capsys, small_mtx):
    code, out, err = run(capsys, "solve", str(small_mtx), "--variant", "host", "--json",
                         "--method", "bicgstab", "--precond", "jacobi", "--rtol", "1e-10")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["n"], doc["nnz"], doc["precond"]) == (49, 217, "jacobi")
    rep = doc["report"]
    assert (rep["method"], rep["variant"], rep["info"], rep["converged"]) == \
        ("bicgstab", "host", 0, True)
    assert rep["iterations"] > 0 and doc["relative_residual"] <= 1e-10
    assert doc["relative_error"] < 1e-6


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_solve_keeps_a_complex_file_complex(capsys, herm_mtx, method):
    code, out, err = run(capsys, "solve", str(herm_mtx), "--variant", "host", "--json",
                         "--method", method, "--rtol", "1e-10")
    assert code == 0, err
    assert "imaginary" not in err and "Casting" not in err
    doc = json.loads(out)
    assert doc["report"]["dtype"] == "complex128" and doc["report"]["info"] == 0
    assert doc["relative_residual"] <= 1e-10 and doc["relative_error"] < 1e-8
    code, out, err = run(capsys, "solve", str(herm_mtx), "--variant", "host", "--dtype",
                         "complex64")
    assert code == 0, err
    assert "n = 16, nnz = 70, complex64" in out and "converged" in out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_solve_refuses_a_real_dtype_for_a_complex_file(capsys, herm_mtx, dtype):
    code, out, err = run(capsys, "solve", str(herm_mtx), "--variant", "host", "--dtype", dtype)
    assert code == 1 and err.count("\n") == 1 and out == ""
    assert str(herm_mtx) in err and "complex" in err and f"--dtype {dtype}" in err
    assert "imaginary part" in err


def test_solve_a_real_problem_in_complex(capsys):
    code, out, err = run(capsys, "solve", "laplace2d-5", "--variant", "host", "--dtype",
                         "complex128", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["report"]["dtype"] == "complex128" and doc["report"]["info"] == 0


def test_solve_a_generated_problem_with_auto(capsys):
    code, out, err = run(capsys, "solve", "laplace2d-10", "--dtype", "float32")
    assert code == 0
    if not device_status().ok:           # auto falls back to the host, with a one-line warning
        assert err.count("\n") <= 1 and "warning" in err and "host" in out


@pytest.mark.parametrize("argv, needle", [
    (("solve", "/nonexistent/matrix.mtx"), "no matrix file at /nonexistent/matrix.mtx"),
    (("solve", "not-a-matrix"), "unknown matrix 'not-a-matrix'"),
    (("fetch", "not a name"), "GROUP/NAME"),
    (("fetch", "A252"), "generated"),
])
def test_errors_are_one_line_with_exit_status_1(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"dpsolve {argv[0]}: error:")
    assert needle in err


@pytest.mark.parametrize("exc, line", [
    (None, "variant 'cublas' cannot run here: no usable CUDA device here"),
    (RuntimeError("the kernel failed"), "the kernel failed"),
    (KeyError(), "KeyError"),                       # no message: the class says what it was
])
def test_the_error_line_is_the_message_alone(capsys, monkeypatch, exc, line):
    from dpsolve import BackendUnavailableError, cli
    if exc is None:
        exc = BackendUnavailableError("cublas", "no usable CUDA device here")

    def fails(args):
        raise exc
    monkeypatch.setattr(cli, "cmd_info", fails)
    monkeypatch.delenv("DPSOLVE_DEBUG", raising=False)
    code, out, err = run(capsys, "info")
    assert (code, err) == (1, f"dpsolve info: error: {line}\n")
    monkeypatch.setenv("DPSOLVE_DEBUG", "1")            # the traceback instead
    with pytest.raises(type(exc)):
        main(["info"])


def test_corrupt_matrix_file_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.mtx"
    bad.write_text("this is not matrix market\n")
    code, out, err = run(capsys, "solve", str(bad))
    assert code == 1 and err.count("\n") == 1 and str(bad.name) not in out


BAD_FILES = {
    "float.mtx": (b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 x\n3 3 1\n",
                  ", line 4: 'x' is not a number"),
    "banner.mtx": (b"garbage\n", ", line 1: not a Matrix Market file"),
    "short.mtx": (b"%%MatrixMarket matrix coordinate real general\n3 3 5\n1 1 1.0\n",
                  ": truncated file"),
    "bad.mtx.gz": (b"no", ": not a gzip file"),
    "cut.mtx.gz": (None, ": the compressed file is cut short"),
    "bad.tar.gz": (b"not a tar", ": not a tar archive"),
    "cut.tar.gz": (None, ": the archive is cut short or corrupt"),
    "nan.mtx": (b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 nan\n3 3 1\n",
                ", line 4: 'nan' is not finite"),
    "inf.mtx.gz": (b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 1\n"
                   b"3 3 -1e999\n", ", line 5: '-1e999' is not finite"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_file_errors_name_the_file_and_line(capsys, tmp_path, name):
    import gzip
    content, needle = BAD_FILES[name]
    path = tmp_path / name
    if name == "cut.tar.gz":                  # a tarball whose end is missing
        src = tmp_path / "whole.tar.gz"
        src.write_bytes(make_tarball("cut", laplace_2d(30)))
        content = src.read_bytes()[:3000]
    elif content is None:                     # a .gz whose end is missing
        content = gzip.compress(BAD_FILES["float.mtx"][0] * 50)[:60]
    elif name == "inf.mtx.gz":
        content = gzip.compress(content)
    path.write_bytes(content)
    code, out, err = run(capsys, "solve", str(path), "--variant", "host")
    assert code == 1 and err.count("\n") == 1 and out == ""
    assert f"error: {path}{needle}" in err
    assert "b contains" not in err


def test_an_archive_member_error_names_the_archive_and_line(capsys, tmp_path):
    import io
    import tarfile
    data = BAD_FILES["float.mtx"][0]
    path = tmp_path / "m.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo("m/m.mtx")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    code, out, err = run(capsys, "solve", str(path), "--variant", "host")
    assert code == 1 and err.count("\n") == 1
    assert f"error: {path} (its .mtx member), line 4: 'x' is not a number" in err


def test_a_non_square_file_is_refused_by_name(capsys, tmp_path):
    path = tmp_path / "rect.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(sp.random(3, 4, density=0.5, random_state=0)))
    code, out, err = run(capsys, "solve", str(path), "--variant", "host")
    assert code == 1 and err.count("\n") == 1 and out == ""
    assert f"error: {path}: expected a square matrix, got 3 x 4" in err and "matmul" not in err


def test_a_directory_is_not_taken_for_group_name(capsys, tmp_path):
    code, out, err = run(capsys, "solve", str(tmp_path), "--variant", "host")
    assert code == 1 and err.count("\n") == 1
    assert f"{tmp_path} is a directory, not a matrix file" in err
    assert "GROUP/NAME" not in err


def test_bad_option_is_one_line_with_exit_status_2(capsys, small_mtx):
    with pytest.raises(SystemExit) as e:
        main(["solve", str(small_mtx), "--method", "minres"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'minres'" in err
    with pytest.raises(SystemExit) as e:
        main(["study", "--variants", "cublas,warp"])
    assert e.value.code == 2 and "unknown 'warp'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (("study", "--rtol", "-1"), "argument --rtol: must be a positive finite number, got '-1'"),
    (("study", "--rtol", "0"), "argument --rtol: must be a positive finite number, got '0'"),
    (("study", "--rtol", "nan"), "argument --rtol"),
    (("study", "--rtol", "x"), "argument --rtol: must be a positive finite number, got 'x'"),
    (("study", "--maxiter", "0"), "argument --maxiter: must be an integer >= 1, got '0'"),
    (("study", "--maxiter", "2.5"), "argument --maxiter: must be an integer >= 1, got '2.5'"),
    (("study", "--window", "-1"), "argument --window: must be a finite number >= 0, got '-1'"),
    (("study", "--window", "inf"), "argument --window"),
    (("study", "--gap", "-0.5"), "argument --gap: must be a finite number >= 0, got '-0.5'"),
    (("study", "--warmup", "-1"), "argument --warmup: must be an integer >= 0, got '-1'"),
    (("solve", "laplace1d-5", "--rtol", "-1"), "argument --rtol: must be a finite number >= 0"),
    (("solve", "laplace1d-5", "--atol", "-0.001"), "argument --atol: must be a finite number >= 0"),
    (("solve", "laplace1d-5", "--maxiter", "0"), "argument --maxiter: must be an integer >= 1"),
])
def test_bad_numbers_exit_2_before_any_work(capsys, tmp_path, argv, needle):
    extra = (("--out", str(tmp_path / "s"), "--variants", "host", "--matrices", "laplace1d-3",
              "--window", "0", "--gap", "0", "--no-progress") if argv[0] == "study" else ())
    with pytest.raises(SystemExit) as e:                 # the bad value last: it is the one used
        main([argv[0], *extra, *argv[1:]])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err
    assert not (tmp_path / "s").exists()                 # nothing ran


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("info, status, says", [(0, 0, "converged"),
                                                (12, 3, "not converged after 12 iterations"),
                                                (-10, 4, "breakdown (-10)")])
def test_the_exit_status_tells_the_result(capsys, small_mtx, monkeypatch, json_out, info, status,
                                          says):
    """0 converged, 3 not converged, 4 breakdown: a script sees the result without parsing the
    output (1 stays an error, 2 a malformed command line)."""
    import numpy as np
    from dpsolve import _solvers
    from dpsolve.report import SolveReport

    def solve(A, b, **kw):
        rep = SolveReport(variant="host", format=None, sync=None, method="cg", dtype="float64",
                          n=49, nnz=217, iterations=12, info=info, converged=info == 0,
                          residual_norm=1.0)
        return np.ones(A.shape[0]), info, rep
    monkeypatch.setattr(_solvers, "cg", solve)
    code, out, err = run(capsys, "solve", str(small_mtx), *(("--json",) if json_out else ()))
    assert code == status, err
    assert json.loads(out)["report"]["info"] == info if json_out else f"result   : {says}" in out


def test_help_documents_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for line in ("0 converged", "1 an error", "2 a malformed command line", "3 not converged",
                 "4 a breakdown", "130 interrupted"):
        assert line in out


def test_a_run_out_of_iterations_exits_3(small_mtx):
    r = subprocess.run([sys.executable, "-m", "dpsolve", "solve", str(small_mtx), "--variant",
                        "host", "--maxiter", "2"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3 and "not converged after 2 iterations" in r.stdout


@pytest.mark.parametrize("method", ["gmres", "cgs"])
def test_a_method_without_a_distributed_solver_is_a_usage_error(capsys, monkeypatch, method):
    from dpsolve import study

    def resolved(*a, **k):
        raise AssertionError("work started")
    monkeypatch.setattr(study, "resolve_problem", resolved)
    with pytest.raises(SystemExit) as e:
        main(["solve", "laplace2d-5", "--distributed", "--method", method])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"--method {method} has no distributed solver (--distributed takes cg, bicg, " \
           f"bicgstab)" in err


def test_cg_on_a_nonsymmetric_file_warns(capsys, tmp_path, small_mtx):
    A = laplace_2d(7).tolil()
    A[0, 1] = -1.5                                  # no longer symmetric; still solvable
    path = tmp_path / "nonsym.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(A.tocsr()))
    code, out, err = run(capsys, "solve", str(path), "--variant", "host")
    assert code in (0, 3, 4)
    assert err.count("\n") == 1 and err.startswith("dpsolve: warning: ")
    assert f"{path}: the matrix is not symmetric" in err and "CG" in err
    code, out, err = run(capsys, "solve", str(path), "--variant", "host", "--method", "bicgstab")
    assert err == ""
    code, out, err = run(capsys, "solve", str(small_mtx), "--variant", "host")
    assert err == ""


def test_a_nul_byte_is_one_line_not_a_crash(tmp_path):
    """SciPy's reader crashed the process (SIGSEGV) on a NUL byte after a value."""
    path = tmp_path / "nul.mtx"
    path.write_bytes(b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\x00\n2 2 1\n")
    r = subprocess.run([sys.executable, "-m", "dpsolve", "solve", str(path), "--variant", "host"],
                       capture_output=True, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"dpsolve solve: error: {path}, line 3: a NUL byte (a binary or corrupt "
                        f"file)\n")


def test_the_process_exit_status(small_mtx):
    r = subprocess.run([sys.executable, "-m", "dpsolve", "solve", "/nonexistent.mtx"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stdout == ""


# --------------------------------------------------------------------------- size guard
@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 24 GB available, on which nothing generated may be built (a build fails
    the test): the guard must refuse before any work."""
    from dpsolve import matrices

    def built(*a, **k):
        raise AssertionError("the problem was built")
    monkeypatch.setattr(matrices, "available_memory", lambda: 24 * 10 ** 9)
    monkeypatch.setattr(matrices, "_grid_csr", built)
    monkeypatch.delenv("DPSOLVE_NO_SIZE_GUARD", raising=False)
    return matrices


@pytest.mark.parametrize("argv", [("solve", "laplace3d-500"),
                                  ("study", "--matrices", "laplace2d-4,laplace3d-500")])
def test_size_guard_refuses_at_once(capsys, small_machine, tmp_path, argv):
    code, out, err = run(capsys, *argv, "--variant" if argv[0] == "solve" else "--variants",
                         "host", *(("--out", str(tmp_path / "s")) if argv[0] == "study" else ()))
    assert code == 1 and err.count("\n") == 1
    assert "laplace3d-500: n = 125,000,000, nnz = 873,500,000 (float64) needs about 60.1 GB" in err
    assert "more than the 24 GB available here" in err
    assert "--force" in err and "DPSOLVE_NO_SIZE_GUARD=1" in err
    assert not (tmp_path / "s").exists()                 # the study did not start


def test_size_guard_applies_to_the_paper_set_and_force_passes_it(capsys, monkeypatch, tmp_path):
    from dpsolve import matrices, study
    monkeypatch.setattr(matrices, "available_memory", lambda: 4 * 10 ** 9)      # 4 GB
    monkeypatch.delenv("DPSOLVE_NO_SIZE_GUARD", raising=False)
    code, out, err = run(capsys, "study", "--paper", "--variants", "host", "--out",
                         str(tmp_path / "s"))
    assert code == 1 and "laplace3d-252: n = 16,003,008, nnz = 111,640,032 (float32) needs" in err
    assert not (tmp_path / "s").exists()
    # --force gets past the guard (the problems are then only resolved, not run, here)
    seen = []
    monkeypatch.setattr(study, "paper_problems", lambda *a, **k: seen.append(k) or [])
    monkeypatch.setattr("dpsolve.study.run_study", lambda *a, **k: [])
    run(capsys, "study", "--paper", "--variants", "host", "--out", str(tmp_path / "t"),
        "--force")
    assert seen and seen[0]["force"] is True


def test_size_guard_overrides(capsys, monkeypatch):
    from dpsolve import matrices
    monkeypatch.setattr(matrices, "available_memory", lambda: 10 ** 6)          # 1 MB
    monkeypatch.delenv("DPSOLVE_NO_SIZE_GUARD", raising=False)
    code, out, err = run(capsys, "solve", "laplace2d-30", "--variant", "host")
    assert code == 1 and "more than the 1 MB available here" in err
    code, out, err = run(capsys, "solve", "laplace2d-30", "--variant", "host", "--force")
    assert code == 0 and "converged" in out
    monkeypatch.setenv("DPSOLVE_NO_SIZE_GUARD", "1")
    code, out, err = run(capsys, "solve", "laplace2d-30", "--variant", "host")
    assert code == 0 and "converged" in out


def test_size_guard_meets_a_files_header(capsys, small_machine, tmp_path):
    path = tmp_path / "huge.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n"
                    "200000000 200000000 2000000000\n1 1 1.0\n")
    code, out, err = run(capsys, "solve", str(path), "--variant", "host")
    assert code == 1 and err.count("\n") == 1
    assert f"error: {path}: the header declares n = 200,000,000, nnz = 2,000,000,000" in err
    assert "more than the 24 GB available here" in err and "--force" in err
    code, out, err = run(capsys, "solve", str(path), "--variant", "host", "--force")
    assert code == 1 and "truncated file: the header declares 2,000,000,000 entries" in err
    assert "DPSOLVE_NO_SIZE_GUARD" not in os.environ          # --force lasted the command only


@pytest.mark.parametrize("name", ["laplace1d-99999999999999999999", "laplace3d-" + "9" * 5000],
                         ids=["20-digits", "5000-digits"])
@pytest.mark.parametrize("force", [(), ("--force",)], ids=["guarded", "forced"])
def test_a_problem_too_large_to_index_says_so(capsys, small_machine, name, force):
    code, out, err = run(capsys, "solve", name, "--variant", "host", *force)
    assert code == 1 and err.count("\n") == 1
    assert "more than a sparse matrix can index" in err
    assert "Maximum allowed dimension" not in err and "Exceeds the limit" not in err


# --------------------------------------------------------------------------- Ctrl-C
_INTERRUPT_AT_IMPORT = """
import importlib.abc, runpy, signal, sys
class Interrupt(importlib.abc.MetaPathFinder):     # Ctrl-C while {target!r} is being imported
    def find_spec(self, name, path, target=None):
        if name == {target!r}:
            try:
                signal.raise_signal(signal.SIGINT)  # a real SIGINT, to whatever handler is set
            except KeyboardInterrupt:
                if {converted!r}:                   # as NumPy's C import turns it into this
                    raise ImportError("PyCapsule_Import could not import module 'datetime'")
                raise
sys.meta_path.insert(0, Interrupt())
if {entry!r} == "script":                          # what the installed `dpsolve` script runs
    from dpsolve.cli import main
    sys.exit(main(["info"]))
sys.argv = ["dpsolve", "info"]                     # python -m dpsolve info
runpy.run_module("dpsolve", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("entry", ["script", "module"])
@pytest.mark.parametrize("target, converted", [
    ("argparse", False), ("numpy", False), ("scipy.sparse", False), ("dpsolve._frontend", False),
    ("numpy._core._multiarray_umath", True), ("scipy.sparse", True)])
def test_ctrl_c_during_start_up_is_one_line(entry, target, converted):
    """Ctrl-C in the first fraction of a second (while modules are imported) gives one line and
    exit status 130, not a traceback, whichever import it lands in, also where the import turns
    the KeyboardInterrupt into an ImportError."""
    r = subprocess.run([sys.executable, "-c", _INTERRUPT_AT_IMPORT.format(
                            target=target, entry=entry, converted=converted)],
                       capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stderr, r.stdout) == (130, "dpsolve: interrupted\n", "")


# --------------------------------------------------------------------------- fetch
@pytest.fixture
def server(tmp_path, monkeypatch):
    s = LocalSuiteSparse()
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", s.url)
    monkeypatch.setenv("DPSOLVE_MATRIX_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch, "RETRY_PAUSE", 0.0)
    yield s
    s.close()


def test_fetch_against_the_local_server(capsys, server, tmp_path):
    p = server.add("Grp/small", make_tarball("small", laplace_2d(5)))
    code, out, err = run(capsys, "fetch", "Grp/small", "--quiet")
    assert code == 0, err
    path = tmp_path / "cache" / "Grp" / "small.mtx"
    assert f"Grp/small: {path}" in out and "n = 25, nnz = 105; not in the paper's catalog" in out
    code, out, err = run(capsys, "fetch", "Grp/small")
    assert code == 0 and "(already cached)" in out and server.requests[p] == 1
    # the solve command reads it from the cache by name
    code, out, err = run(capsys, "solve", "Grp/small", "--variant", "host")
    assert code == 0 and "n = 25" in out and server.requests[p] == 1


def test_fetch_paper_name_checks_table_1(capsys, server):
    server.add("GHS_psdef/crankseg_2", make_tarball("crankseg_2", laplace_2d(3)))
    code, out, err = run(capsys, "fetch", "CRANKSEG_2", "--quiet")
    assert code == 0
    assert "differs from the paper's Table 1" in out
    assert "warning" in err and "63,838" in err and err.count("\n") == 1


def test_fetch_failure_is_one_line(capsys, server, tmp_path):
    code, out, err = run(capsys, "fetch", "Grp/missing", "--quiet")
    assert code == 1 and "HTTP 404" in err and err.count("\n") == 1
    assert not (tmp_path / "cache" / "Grp" / "missing.mtx").exists()


def test_fetch_url_option(capsys, server, monkeypatch):
    server.add("Grp/x", make_tarball("x", laplace_2d(3)))
    monkeypatch.setenv("DPSOLVE_SUITESPARSE_URL", "http://127.0.0.1:9/MM")
    code, out, err = run(capsys, "fetch", "Grp/x", "--url", server.url, "--quiet", "--no-check")
    assert code == 0 and "Grp/x:" in out and "nnz" not in out


def test_fetch_deadline_option(capsys, server, tmp_path):
    data = make_tarball("slow", laplace_2d(20))
    server.trickle[server.add("Grp/slow", data)] = 0.05      # about 20 s in all
    code, out, err = run(capsys, "fetch", "Grp/slow", "--quiet", "--deadline", "0.5")
    assert code == 1 and err.count("\n") == 1 and "gave up at the 0.5 s deadline" in err
    assert not (tmp_path / "cache").exists()


def test_fetch_names_and_evicts_a_corrupt_cached_file(capsys, server, tmp_path):
    p = server.add("Grp/m", make_tarball("m", laplace_2d(3)))
    cached = tmp_path / "cache" / "Grp" / "m.mtx"
    cached.parent.mkdir(parents=True)
    cached.write_text("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1,5\n")
    code, out, err = run(capsys, "fetch", "Grp/m", "--quiet")
    assert code == 1 and err.count("\n") == 1
    assert f"{cached}, line 3: '1,5' is not a number (removed from the cache" in err
    assert not cached.exists() and p not in server.requests
    code, out, err = run(capsys, "fetch", "Grp/m", "--quiet")
    assert code == 0 and "n = 9, nnz = 33" in out and server.requests[p] == 1


# --------------------------------------------------------------------------- study
def test_study_command(capsys, tmp_path):
    out_dir = tmp_path / "s"
    code, out, err = run(capsys, "study", "--matrices", "laplace2d-6,laplace1d-9", "--variants",
                         "host", "--window", "0.05", "--out", str(out_dir), "--no-progress")
    assert code == 0, err
    assert "study: 2 matrices x cg x host" in out
    assert "# Table 2" in out and f"written to {out_dir}/" in out
    for f in ("results.csv", "raw.csv", "table2.md", "absolute.md", "study.json"):
        assert (out_dir / f).is_file()
    assert "GPU variant" not in out.split("study:")[0]   # only host was asked for
    code, out, err = run(capsys, "study", "--matrices", "laplace2d-6", "--variants", "host",
                         "--window", "0.05", "--out", str(out_dir), "--no-progress", "--rtol",
                         "1e-3")
    assert code == 1 and "--restart" in err and err.count("\n") == 1


def test_study_takes_several_preconditioners(capsys, tmp_path):
    out_dir = tmp_path / "s"
    code, out, err = run(capsys, "study", "--matrices", "laplace2d-12", "--variants", "host",
                         "--precond", "jacobi,amg", "--window", "0.05", "--out", str(out_dir),
                         "--no-progress")
    assert code == 0, err
    assert "rtol = 1e-06, Jacobi / AMG;" in out
    assert "laplace2d-12 cg M=amg float64 host: " in out and ", set-up " in out
    with pytest.raises(SystemExit) as e:
        main(["study", "--precond", "jacobi,ilu"])
    assert e.value.code == 2 and "unknown 'ilu'" in capsys.readouterr().err


def test_study_keeps_a_complex_file_complex(capsys, tmp_path, herm_mtx):
    import csv
    out_dir = tmp_path / "s"
    code, out, err = run(capsys, "study", "--matrices", f"{herm_mtx},laplace1d-6", "--variants",
                         "host", "--window", "0.02", "--out", str(out_dir), "--no-progress")
    assert code == 0, err
    with open(out_dir / "results.csv", newline="") as f:
        res = {(r["matrix"], r["dtype"]): r for r in csv.DictReader(f)}
    assert set(res) == {("herm", "complex128"), ("laplace1d-6", "float64")}   # each its own
    assert res["herm", "complex128"]["status"] == "ok"
    assert float(res["herm", "complex128"]["rel_residual"]) <= 1e-6
    # a real dtype asked for: the complex file fails with the reason, the others run
    code, out, err = run(capsys, "study", "--matrices", f"{herm_mtx},laplace1d-6", "--variants",
                         "host", "--window", "0.02", "--out", str(tmp_path / "t"),
                         "--no-progress", "--dtypes", "float64,complex64")
    assert code == 0, err
    with open(tmp_path / "t" / "results.csv", newline="") as f:
        res = {(r["matrix"], r["dtype"]): r for r in csv.DictReader(f)}
    assert res["herm", "float64"]["status"] == "failed"
    assert "imaginary part" in res["herm", "float64"]["error"]
    assert res["herm", "complex64"]["status"] == "ok"
    assert res["laplace1d-6", "float64"]["status"] == res["laplace1d-6", "complex64"]["status"] \
        == "ok"


@pytest.mark.parametrize("where", ["missing", "empty", "a file"])
def test_a_wrong_shared_matrices_folder_is_an_error(capsys, tmp_path, monkeypatch, where):
    path = {"missing": tmp_path / "nonexistent", "empty": tmp_path,
            "a file": tmp_path / "f.mtx.gz"}[where]
    if where == "a file":
        path.write_bytes(b"")
    monkeypatch.setenv("DPSOLVE_SHARED_MATRICES", str(path))
    code, out, err = run(capsys, "study", "--variants", "host", "--out", str(tmp_path / "s"),
                         "--no-progress", "--window", "0.01")
    assert code == 1 and err.count("\n") == 1
    assert f"DPSOLVE_SHARED_MATRICES={path}" in err
    assert ("no such folder" if where != "empty" else "holds no *.mtx.gz file") in err
    assert not (tmp_path / "s").exists()


@pytest.mark.skipif(device_status().ok, reason="the CPU-only default study")
def test_default_study_on_a_cpu_only_machine_runs_the_host_variant(capsys, tmp_path,
                                                                    monkeypatch):
    from dpsolve import study
    monkeypatch.setattr(study.plan, "DEFAULT_GENERATED", ("laplace2d-8",))
    monkeypatch.setattr(study.plan._m, "shared_matrix_dir", lambda: None)
    code, out, err = run(capsys, "study", "--out", str(tmp_path / "d"), "--no-progress",
                         "--window", "0.02")
    assert code == 0
    assert "running the host variant" in out and "need a usable CUDA device" in out
    assert "Table 2 cannot be formed" in out
    assert "study: 1 matrix x cg x host" in out and "1 warm-up solve," in out


def test_study_header_counts_in_words(capsys, tmp_path):
    for mats, warm, words in (("laplace1d-4", "0", ("1 matrix x", "0 warm-up solves,")),
                              ("laplace1d-4,laplace1d-5", "2", ("2 matrices x",
                                                                 "2 warm-up solves,"))):
        code, out, err = run(capsys, "study", "--matrices", mats, "--variants", "host",
                             "--window", "0", "--gap", "0", "--warmup", warm, "--no-progress",
                             "--out", str(tmp_path / warm))
        assert code == 0, err
        header = next(ln for ln in out.splitlines() if ln.startswith("study:"))
        assert all(w in header for w in words) and "(s)" not in header


@pytest.fixture
def no_gpu_variants(monkeypatch):
    """Every GPU variant unavailable for one reason, as dpsolve.variants() tells the study."""
    import dpsolve
    from dpsolve.backends import VARIANT_NAMES, VariantInfo
    monkeypatch.setattr(dpsolve, "variants", lambda: [
        VariantInfo(n, n == "host", None if n == "host" else "no GPU (test)", "")
        for n in VARIANT_NAMES])


@pytest.mark.parametrize("variants, said, not_said", [
    ("cublas,dynamic,host",
     ["GPU variants cublas, dynamic need a usable CUDA device, and this machine has none: "
      "no GPU (test) - recorded as skipped"], ["instead", "cuda,", "merge", "graph", "persistent"]),
    ("cublas",
     ["GPU variant cublas needs a usable CUDA device, and this machine has none: no GPU (test) "
      "- recorded as skipped", "none of the variants asked for can run here"],
     ["instead", "dynamic"]),
    ("host", [], ["GPU variant", "instead", "skipped"]),
    (None, ["GPU variants cublas, cuda, merge, dynamic, graph, persistent need a usable CUDA "
            "device, and this machine has none: no GPU (test) - skipped",
            "running the host variant (the NumPy reference solvers on the CPU) instead"], []),
])
def test_study_names_only_the_variants_asked_for(capsys, tmp_path, no_gpu_variants, variants,
                                                 said, not_said):
    code, out, err = run(capsys, "study", "--matrices", "laplace1d-4", "--window", "0", "--gap",
                         "0", "--no-progress", "--out", str(tmp_path / "s"),
                         *(("--variants", variants) if variants else ()))
    assert code == 0, err
    head = out.split("study:")[0]
    for text in said:
        assert text in head
    for text in not_said:
        assert text not in head


@pytest.mark.parametrize("dev", [
    dict(ok=False, reason="no CUDA device (test)"),
    dict(ok=False, reason="Old GPU has compute capability 6.0 (test)", name="Old GPU"),
    dict(ok=True, name="Fake GPU")], ids=["none", "unusable", "usable"])
def test_study_json_keeps_the_device_and_the_reason_apart(capsys, tmp_path, monkeypatch, dev):
    from dpsolve import _device
    monkeypatch.setattr(_device, "status", lambda: _device.DeviceStatus(**dev))
    code, out, err = run(capsys, "study", "--matrices", "laplace1d-4", "--variants", "host",
                         "--window", "0", "--gap", "0", "--no-progress", "--out",
                         str(tmp_path / "s"))
    assert code == 0, err
    machine = json.loads((tmp_path / "s" / "study.json").read_text())["machine"]
    assert machine["device"] == dev.get("name")          # a name or null, never a reason
    assert machine["device_unavailable"] == dev.get("reason")


@pytest.mark.parametrize("progress", ["none", "plain"])
def test_study_results_on_stdout_progress_on_stderr(capsys, tmp_path, monkeypatch, progress):
    monkeypatch.setitem(sys.modules, "tqdm", None)       # the plain [i/N] progress lines
    code, out, err = run(capsys, "study", "--matrices", "laplace1d-4,laplace1d-5", "--variants",
                         "host", "--window", "0", "--gap", "0", "--out", str(tmp_path / "s"),
                         *(("--no-progress",) if progress == "none" else ()))
    assert code == 0, err
    for m in ("laplace1d-4", "laplace1d-5"):             # one result line per configuration
        assert re.search(rf"^  {m} cg float64 host: .*/solve, \d+ it, ", out, re.M)
        assert f"{m} cg float64 host:" not in err
    assert "study: 2 matrices" in out and "# Table 2" in out
    if progress == "plain":
        assert "[1/2] laplace1d-4 cg float64 host ..." in err and "[1/2]" not in out
    else:
        assert "[1/2]" not in err + out


def test_scripts_study_wrapper(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "study"), "--help"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0 and r.stdout.startswith("usage: dpsolve study")


def test_study_downloads_first_and_a_missing_matrix_fails_alone(capsys, server, tmp_path):
    import csv
    p = server.add("Grp/small", make_tarball("small", laplace_2d(5)))
    out_dir = tmp_path / "s"
    code, out, err = run(capsys, "study", "--matrices", "Grp/small,Grp/missing,laplace1d-8",
                         "--variants", "host", "--window", "0.02", "--out", str(out_dir),
                         "--no-progress")
    assert code == 0, err
    assert "could not download missing" in out and "HTTP 404" in out
    with open(out_dir / "results.csv", newline="") as f:
        res = {r["matrix"]: r for r in csv.DictReader(f)}
    assert res["small"]["status"] == "ok" and res["small"]["n"] == "25"
    assert res["laplace1d-8"]["status"] == "ok"
    assert res["missing"]["status"] == "failed" and "HTTP 404" in res["missing"]["error"]
    assert server.requests[p] == 1


def test_solve_prints_the_amg_hierarchy(capsys):
    """`solve --precond amg` prints the hierarchy as AmgX does (a line per level, then the
    complexities); --json carries it as "preconditioner"."""
    code, out, err = run(capsys, "solve", "laplace2d-40", "--variant", "host", "--precond", "amg",
                         "--rtol", "1e-8")
    assert code == 0, err
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("AMG      :"))
    assert "smoothed aggregation, jacobi smoother" in lines[head]
    # float64 A, the default "auto": a float32 V-cycle over float16 matrices
    assert lines[head].endswith("levels, V-cycle in float32, float16 matrices")
    assert lines[head + 2].split()[:3] == ["0", "1,600", "7,840"]
    assert any("operator complexity" in ln for ln in lines[head:])
    code, out, err = run(capsys, "solve", "laplace2d-40", "--variant", "host", "--precond",
                         "chebyshev", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["preconditioner"]["precond"] == "chebyshev"


def test_solve_takes_a_file_of_right_hand_sides(capsys, tmp_path):
    """`solve --rhs FILE`: every column solved, a line each, the worst column's exit status."""
    import numpy as np
    from dpsolve.matrices import laplace_2d
    A = laplace_2d(12)
    B = np.random.default_rng(0).random((144, 3))
    B[:, 1] = 0
    path = tmp_path / "B.npy"
    np.save(path, B)
    code, out, err = run(capsys, "solve", "laplace2d-12", "--variant", "host", "--rhs", str(path),
                         "--rtol", "1e-8")
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("column")]
    assert len(lines) == 3 and all("converged" in ln for ln in lines)
    code, out, err = run(capsys, "solve", "laplace2d-12", "--variant", "host", "--rhs", str(path),
                         "--json")
    doc = json.loads(out)
    assert code == 0 and doc["k"] == 3 and [c["info"] for c in doc["columns"]] == [0, 0, 0]
    r = np.linalg.norm(B[:, 0] - A @ np.linalg.solve(A.toarray(), B[:, 0]))
    assert doc["columns"][0]["relative_residual"] <= 1e-5 and r < 1e-8
    # a column that cannot converge in maxiter: exit status 3 (not converged), the worst column's
    code, out, err = run(capsys, "solve", "laplace2d-12", "--variant", "host", "--rhs", str(path),
                         "--maxiter", "2", "--rtol", "1e-12")
    assert code == 3
    np.save(path, B[:-1])
    code, out, err = run(capsys, "solve", "laplace2d-12", "--variant", "host", "--rhs", str(path))
    assert code != 0 and "the matrix has 144 rows" in err
