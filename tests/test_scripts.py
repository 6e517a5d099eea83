"""The GPU-machine scripts' own logic, on the CPU: argument checks of scripts/sanitize and
scripts/sanitize-cases (they refuse a bad part or value type before touching a device),
scripts/gpu-check's parts of the suite, and the SpMV floor of scripts/bench-spmv."""
from __future__ import annotations

import csv
import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script_module(name):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"),
                                                  str(ROOT / "scripts" / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_sanitize_cases_refuses_an_unknown_value_type():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "sanitize-cases"), "all",
                          "float16"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "float16" in res.stderr and "complex128" in res.stderr     # names the bad and the good


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_sanitize_refuses_an_unknown_part(tmp_path):
    res = subprocess.run(["bash", str(ROOT / "scripts" / "sanitize"), "everything"],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                                          "OUT": str(tmp_path)})
    assert res.returncode == 2
    assert "everything" in res.stderr and "adaptive" in res.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
@pytest.mark.parametrize("others, rc", [(0, 0), (1, 1)])
def test_sanitize_counts_entry_point_lookups_apart(tmp_path, others, rc):
    """memcheck's API errors of cuda.bindings' cuGetProcAddress lookups alone do not fail a part
    (its summary counts them); one error of another kind does. A stand-in compute-sanitizer
    writes the log and exits 9, as the real one does on any error."""
    fake = tmp_path / "fake-sanitizer"
    lookup = ('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" '
              'on CUDA API call to cuGetProcAddress_v2.')
    other = "========= Invalid __global__ read of size 8 bytes"
    lines = [lookup] * 3 + [other] * others + [f"========= ERROR SUMMARY: {3 + others} errors"]
    fake.write_text("#!/bin/bash\ncat <<'LOG'\n" + "\n".join(lines) + "\nLOG\nexit 9\n")
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "sanitize"), "precond"],
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path),
                              "COMPUTE_SANITIZER": str(fake)})
    assert res.returncode == rc, res.stdout + res.stderr
    assert f"memcheck precond: exit {9 if others else 0}" in res.stdout
    assert "of them 3 cuGetProcAddress lookups" in res.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
@pytest.mark.parametrize("part", ["gpu", "distributed", "rest", "rest1", "rest2", "everything"],
                         ids=lambda part: f"part={part}")       # (an id "gpu" would mark it gpu)
def test_gpu_check_runs_one_part_of_the_suite(tmp_path, part):
    """SUITE_PART picks the files a device call of 10 minutes can hold: gpu the test_gpu_ files,
    distributed test_distributed.py, rest every other one (the three together the whole suite,
    each file once), rest1 and rest2 rest's files taken alternately (together rest, each file
    once); the arguments (pytest options) come first; an unknown part is refused by name before
    anything runs. A stand-in Python records the pytest command line."""
    fake = tmp_path / "fake-python"
    log = tmp_path / "argv"
    fake.write_text(f'#!/bin/bash\n[ "$1 $2" = "-m pytest" ] && echo "$@" >> {log}\nexit 0\n')
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check"), "-n", "14"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                              "PYTHON": str(fake), "NO_SANITIZE": "1", "NO_BENCH": "1",
                              "SUITE_PART": part})
    if part == "everything":
        assert res.returncode == 2 and "everything" in res.stderr and "rest" in res.stderr
        assert not log.exists()
        return
    args = log.read_text().split()
    files = [a for a in args if a.startswith("tests/")]
    first = args.index(files[0])
    assert args[first - 2:first] == ["-n", "14"], args
    every = sorted(f"tests/{f.name}" for f in (ROOT / "tests").glob("test_*.py"))
    gpu = [f for f in every if f.startswith("tests/test_gpu_")]
    rest = [f for f in every if f not in gpu and f != "tests/test_distributed.py"]
    want = {"gpu": gpu, "distributed": ["tests/test_distributed.py"], "rest": rest,
            "rest1": rest[0::2], "rest2": rest[1::2]}
    assert sorted(files) == want[part]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_gpu_check_leaves_the_ci_only_files_out_of_a_part(tmp_path):
    """CI_ONLY_SKIP=1 with SUITE_PART=rest1 / rest2: the two parts together are rest's files but
    the four CI-only ones (nvcc's compiles, the Matrix Market reader, the AMG reference, the
    formats), each once, none named (pytest's --ignore does
    not drop a file named on the command line: before, rest2 ran the nvcc compiles)."""
    fake = tmp_path / "fake-python"
    log = tmp_path / "argv"
    fake.write_text(f'#!/bin/bash\n[ "$1 $2" = "-m pytest" ] && echo "$@" >> {log}\nexit 0\n')
    fake.chmod(0o755)
    files = []
    for part in ("rest1", "rest2"):
        log.unlink(missing_ok=True)
        subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check")], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / part),
                            "PYTHON": str(fake), "NO_SANITIZE": "1", "NO_BENCH": "1",
                            "SUITE_PART": part, "CI_ONLY_SKIP": "1"})
        args = log.read_text().split()
        files += [a for i, a in enumerate(args) if a.startswith("tests/test_")
                  and (i == 0 or args[i - 1] != "--ignore")]       # not --ignore's own
    ci_only = {"tests/test_cuda_compile.py", "tests/test_mtx_reader.py",
               "tests/test_amg_reference.py", "tests/test_formats.py"}
    rest = sorted(f"tests/{f.name}" for f in (ROOT / "tests").glob("test_*.py")
                  if not f.name.startswith("test_gpu_") and f.name != "test_distributed.py")
    assert sorted(files) == [f for f in rest if f not in ci_only]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_gpu_check_interrupts_pytest_at_its_budget(tmp_path):
    """PYTEST_BUDGET=S sends pytest SIGINT after S seconds (so that a part cut short by a device
    call's limit still writes its junit XML and its slowest tests), and says so; pytest asks
    for its slowest tests (--durations) every run. A stand-in Python that never ends."""
    fake = tmp_path / "fake-python"
    log = tmp_path / "argv"
    fake.write_text(f'#!/bin/bash\n[ "$1 $2" = "-m pytest" ] && echo "$@" >> {log} '
                    '&& exec sleep 60\nexit 0\n')
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check"), "tests/test_units.py"],
                         capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                              "PYTHON": str(fake), "NO_SANITIZE": "1", "NO_BENCH": "1",
                              "PYTEST_BUDGET": "1"})
    assert "pytest interrupted after PYTEST_BUDGET=1 s" in res.stdout, res.stdout + res.stderr
    assert "exit codes: pytest 124" in res.stdout and res.returncode == 1
    assert "--durations=15" in log.read_text().split()


def test_bench_spmv_floor_counts_what_every_format_must_move():
    """Values + column indices + x read once at the read bandwidth, y written at the write
    bandwidth; no row pointers (ELL has none, so a floor with them would not bound it)."""
    bench = _script_module("bench-spmv")
    n, nnz = 4_096_000, 28_518_400                                     # 3-D Laplace 160^3
    bw = {"read": 3.0e12, "write": 2.0e12, "copy": 1.0}
    assert bench.floor_seconds(n, nnz, bw) == pytest.approx(
        (12 * nnz + 8 * n) / 3.0e12 + 8 * n / 2.0e12)
    ell_bytes = 12 * 7 * n + 8 * n                                     # width 7, no row pointers
    assert bench.floor_seconds(n, nnz, bw) <= ell_bytes / bw["read"] + 8 * n / bw["write"]
    # the copy bandwidth does not enter the floor
    assert bench.floor_seconds(n, nnz, {**bw, "copy": 1e30}) == bench.floor_seconds(n, nnz, bw)


def test_nonfinite_table_runs_on_the_host(tmp_path):
    """scripts/nonfinite-table on a CPU machine (the host variant only): a few systems, the
    Markdown table last on stdout, exit 0 (no variant returned a non-finite x)."""
    out = tmp_path / "t.md"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "nonfinite-table"),
                          "--systems", "3", "--grid", "8", "--variants", "host", "--out", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[-3:-2] == ["|---|---|---|"] and lines[-1].startswith("| host | ")
    assert lines[-2] == "| SciPy | 0 / 0 / 0 | 0 / 0 / 0 |"
    assert "3 systems on which SciPy's bicg converged" in res.stdout
    assert out.read_text() == res.stdout                      # stdout holds the table only
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "nonfinite-table"), "--variants",
                          "no-such-variant"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and "no-such-variant" in bad.stderr


def test_profile_fixed_timeline_wraps_and_restores():
    """scripts/profile-fixed --timeline wraps the solve path's steps for its calls only: inside,
    each is a wrapper that records (start, duration); outside, every original is back (the
    backend's inherited methods included, which it must not leave as own attributes)."""
    import collections

    import dpsolve._frontend as fe
    from dpsolve.backends.graph import GraphBackend
    mod = _script_module("profile-fixed")
    backend = GraphBackend()
    before = {name: vars(GraphBackend).get(name) for name in mod.BACKEND_STEPS}
    original_iterate = fe.iterate
    acc, t0 = collections.defaultdict(list), [0.0]
    with mod.timeline_wrappers(backend, acc, t0):
        assert fe.iterate is not original_iterate and fe.iterate.__wrapped__ is original_iterate
        from dpsolve.backends._gpu import GpuBackend
        assert vars(GraphBackend)["load"].__wrapped__ is GpuBackend.load    # inherited, wrapped
        # a wrapped step records its call: restarted is pure Python
        assert fe.restarted(lambda budget: (0, 3), lambda: 0.5, 1.0, 10) == (0, 3, 0.5, 0)
        assert len(acc["_frontend.restarted"]) == 1
    assert fe.iterate is original_iterate
    assert {name: vars(GraphBackend).get(name) for name in mod.BACKEND_STEPS} == before


def test_profile_block_counts_each_steps_bytes_and_checks_its_arguments():
    """scripts/profile-block: the bytes of each fused block step (the SpMM reads A and P once
    and writes Q; update 3 vector passes, direction 4.5: 3, and 6 every other call, when x's
    two deferred steps ride on it), and bad arguments refused before any device work."""
    prof = _script_module("profile-block")
    n, nnz, k = 1_000_000, 6_940_000, 16                                # 3-D Laplace 100^3
    b = prof.step_bytes(n, nnz, k)
    v = 8 * n * k
    assert b["spmm_dot"] == 2 * v + 12 * nnz + 4 * (n + 1)
    assert (b["update"], b["direction"], b["alpha"], b["beta"]) == (3 * v, 9 * v // 2, 0, 0)
    assert prof.parse("laplace3d:160") == ("laplace3d", 160)
    for bad in ("foo:3", "laplace3d", "poisson2d:x", "laplace3d:1"):
        with pytest.raises(ValueError, match="unknown problem"):
            prof.parse(bad)
    for argv in (["--k", "40"], ["--problems", "foo:3"], ["--reps", "0"], ["--unrolls", "0"],
                 ["--unrolls", "x"], ["--build-grids", "0"]):
        with pytest.raises(SystemExit) as e:
            prof.main(argv)
        assert e.value.code == 2


def test_bench_first_call_names_whose_kernel_each_source_is():
    bench = _script_module("bench-first-call")
    assert bench.kind_of('// dpsolve headers 0123\n#line 1 "x.cu"\n') == "dpsolve"
    assert bench.kind_of("#include <cub/block/block_reduce.cuh>\n__global__ void k()") == "cub"
    assert bench.kind_of("#include <cupy/complex.cuh>\n__global__ void cupy_take()") == "cupy"


def test_bench_first_call_names_each_module():
    bench = _script_module("bench-first-call")
    src = '// dpsolve headers 0123\n#line 1 "/x/dpsolve/cuda/amg.cu"\n__global__ void k()'
    assert bench.module_name(src, ["power_iterate<double, 8>"]) == (
        "amg.cu: power_iterate<double, 8>")
    assert bench.module_name(src, ["a<double>", "b<double>"]) == "amg.cu: 2 kernels"
    assert bench.module_name("extern \"C\" __global__ void cupy_add__float64(double* x)") == (
        "cupy: cupy_add__float64")
    rows = [{"case": "one", "modules": [["cupy: cupy_add", 0.1], ["amg.cu: 3 kernels", 2.0],
                                        ["cub: cupy_sum", 1.5]]},
            {"case": "two", "modules": []}]
    text = bench.modules_text([Path("/x/main")], [rows]).splitlines()
    assert text[1:] == ["  main / one: amg.cu: 3 kernels 2.00; cub: cupy_sum 1.50; "
                        "1 other CuPy kernels"]


def test_bench_first_call_writes_its_tables(monkeypatch, tmp_path, capsys):
    bench = _script_module("bench-first-call")
    row = {"wall_s": 1.0, "dpsolve_n": 1, "dpsolve_s": 0.5, "cub_n": 0, "cub_s": 0.0,
           "cupy_n": 1, "cupy_s": 0.25, "modules": [["amg.cu: 2 kernels", 0.5],
                                                   ["cupy: cupy_add", 0.25]]}
    monkeypatch.setattr(bench, "run_tree", lambda tree: [dict(row, case=c) for c in bench.CASES])
    assert bench.main(["--tree", str(ROOT), "--out", str(tmp_path / "first")]) == 0
    with open(tmp_path / "first.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(bench.CASES) and "modules" not in rows[0]
    with open(tmp_path / "first-modules.csv") as f:
        mods = list(csv.DictReader(f))
    assert len(mods) == 2 * len(bench.CASES) and mods[0]["module"] == "amg.cu: 2 kernels"
    out = capsys.readouterr().out
    assert out.rindex("SUMMARY") > out.index("modules compiled a call")


def test_bench_first_call_refuses_a_tree_without_dpsolve(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench-first-call"), "--tree",
                          str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "no dpsolve package" in res.stderr and str(tmp_path) in res.stderr


def test_bench_first_call_table_has_a_row_per_call_and_the_total():
    bench = _script_module("bench-first-call")
    row = {"wall_s": 1.5, "dpsolve_n": 2, "dpsolve_s": 1.0, "cub_n": 1, "cub_s": 0.25,
           "cupy_n": 3, "cupy_s": 0.125}
    rows = [dict(row, case=c) for c in bench.CASES]
    text = bench.table([Path("/x/old"), Path("/x/new")], [rows, rows])
    lines = text.splitlines()
    assert len(lines) == 2 + len(bench.CASES) + 1
    assert "old: wall s" in lines[0] and "new: wall s" in lines[0]
    assert "1.50 (2, 1.00 / 1, 0.25 / 3, 0.12)" in lines[2]
    total = f"{1.5 * len(bench.CASES):.2f}"
    assert lines[-1] == f"| the sequence | {total} | {total} |"
