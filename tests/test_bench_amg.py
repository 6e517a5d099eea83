"""scripts/bench-amg: a tiny run end to end (on a machine without CuPy only its pyamg CPU rows
run, the GPU rows say why), and the V-cycle floor it counts for the pyamg + CuPy peer."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench-amg"


def _needs_pyamg():
    try:
        import pyamg  # noqa: F401
    except ImportError as e:
        pytest.skip(f"pyamg is not importable ({e}): scripts/bench-amg's CPU rows need it")


def _script_module():
    loader = importlib.machinery.SourceFileLoader("bench_amg", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_bench_amg_quick_run_prints_its_tables(tmp_path):
    _needs_pyamg()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    res = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--problems", "poisson2d:32",
                          "--reps", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "## 2-D Poisson 32^2" in out
    assert ("| solver | iterations | set-up ms | solve ms | total ms | V-cycle ms | floor ms | "
            "note |") in out
    assert "| pyamg SA-PCG, CPU |" in out
    assert ("| problem | Jacobi-CG prepared (best variant) ms | pyamg+CuPy peer ms | "
            "AMG-PCG prepared (best variant) ms |") in out
    assert "[1/" in res.stderr                                          # progress lines
    csv_text = (tmp_path / "bench-amg.csv").read_text()
    assert csv_text.startswith("problem,") and "pyamg SA-PCG, CPU" in csv_text


def test_vcycle_floor_counts_the_cycle_as_run():
    """Per level but the coarsest: A twice (residual, post-smooth), R and P once (CSR: 12 bytes
    an entry, 4 a row pointer), 13 fine-level and 2 coarse-level vector passes; the coarsest
    level: its dense pinv, b read and x written."""
    bench = _script_module()
    n, nc, nnz_A, nnz_R, nnz_P = 1000, 100, 5000, 1200, 1200
    csr = bench.csr_bytes
    assert csr(n, nnz_A) == 12 * nnz_A + 4 * (n + 1)
    level = dict(n=n, nc=nc, nnz_A=nnz_A, nnz_R=nnz_R, nnz_P=nnz_P)
    expect = (2 * csr(n, nnz_A) + csr(nc, nnz_R) + csr(n, nnz_P) + 8 * (13 * n + 2 * nc)
              + 8 * (nc * nc + 2 * nc))
    assert bench.vcycle_floor_bytes([level], nc) == expect
    assert bench.vcycle_floor_bytes([], 7) == 8 * (49 + 14)            # one level: pinv only


def test_energy_windows_alternate_and_pool(monkeypatch):
    """energy_rows measures Jacobi-CG and AMG-PCG (each on its fastest prepared variant) in two
    windows each, in the order Jacobi, AMG, AMG, Jacobi, and pools them: joules and seconds
    summed over both windows; a window whose energy is unmeasurable leaves joules None."""
    import types

    import dpsolve.measure
    bench = _script_module()
    order, windows = [], {"jacobi": [(10, 0.1, 40.0), (30, 0.1, 44.0)],
                          "amg": [(50, 0.02, 9.0), (70, 0.02, 11.0)]}

    class Prepared:
        def __init__(self, M):
            self.M = M

        def solve(self, b, rtol):
            return None

    def window(solve, seconds, sync):
        M = solve.__closure__[0].cell_contents.M            # the prepared system it calls
        order.append(M)
        reps, wall, joules = windows[M][order.count(M) - 1]
        return {"reps": reps, "wall": wall, "gpu_energy": joules,        # J a solve, as dpsolve's
                "gpu_power": None if joules is None else joules / wall}

    monkeypatch.setattr(dpsolve.measure, "measure_window", window)
    gpu = types.SimpleNamespace(sync=None, dpsolve=types.SimpleNamespace(
        prepare=lambda A, method, M, variant: Prepared(M)))
    prob = types.SimpleNamespace(dA=None, db=None, rows=[
        {"M": "jacobi", "solver": "Jacobi-CG prepared, graph", "variant": "graph", "solve_ms": 5},
        {"M": "jacobi", "solver": "Jacobi-CG prepared, merge", "variant": "merge", "solve_ms": 6},
        {"M": "amg", "solver": "AMG-CG prepared, merge", "variant": "merge", "solve_ms": 2},
        {"M": "amg", "solver": "AMG-CG one-shot, graph", "variant": "graph", "solve_ms": 1}])
    got = bench.energy_rows(gpu, prob, 2.0)
    assert all("note" not in r for r in got), got
    rows = {r["M"]: r for r in got}
    assert order == ["jacobi", "amg", "amg", "jacobi"]
    jac, amg = rows["jacobi"], rows["amg"]
    assert jac["solver"].endswith(", graph") and amg["solver"].endswith(", merge")
    assert jac["reps"] == 40 and amg["reps"] == 120
    assert jac["joules"] == pytest.approx((10 * 40.0 + 30 * 44.0) / 40)
    assert jac["ms"] == pytest.approx(100.0)
    assert amg["watts"] == pytest.approx((50 * 9.0 + 70 * 11.0) / (120 * 0.02))
    windows["amg"][1] = (70, 0.02, None)
    order.clear()
    rows = {r["M"]: r for r in bench.energy_rows(gpu, prob, 2.0)}
    assert order == ["jacobi", "amg", "amg", "jacobi"]
    assert rows["amg"]["joules"] is None and rows["amg"]["watts"] is None
    assert "energy ratio >= time ratio" not in bench.energy_table(
        types.SimpleNamespace(energy=list(rows.values()), label="x"))


def test_precisions_option_is_checked_before_anything_runs():
    """--precisions takes half, mixed and full (comma-separated); another name stops the script
    with argparse's usage error naming it, before any problem is built."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    res = subprocess.run([sys.executable, str(SCRIPT), "--problems", "poisson2d:32",
                          "--precisions", "mixed,single"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert res.returncode == 2
    assert "--precisions takes half, mixed and full, got 'single'" in res.stderr
    assert "## 2-D Poisson" not in res.stdout
