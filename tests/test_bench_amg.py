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
