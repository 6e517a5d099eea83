"""scripts/bench-many: a tiny run end to end. On a machine without CuPy only its CPU rows run
(dpsolve's host block and batch, SciPy's loop, the block-diagonal assembly); JAX's rows run or
say why not; the summary and the CSV are written."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench-many"


def test_bench_many_quick_run_prints_its_tables(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    res = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--reps", "1", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=600, env=env,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "## block 2-D 16^2, k = 4 (n = 256, nnz = 1,216)" in out
    assert "## batch 40 x 3-D 4^3 (n = 64, nnz = 352 per system)" in out
    assert "| solver | ms | iterations | worst rel. res. | note |" in out
    for solver in ("| dpsolve.batch.cg |", "| block-diagonal assembly, one dpsolve.cg |",
                   "| JAX vmap of jitted cg (BCOO) |", "| JAX vmap over the systems (BCOO) |"):
        assert solver in out
    assert "## Summary: dpsolve's best against its target and the peers" in out
    assert "[2/2] batch 40 x 3-D 4^3" in res.stderr                      # progress lines
    with open(tmp_path / "bench-many.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["work", "n", "k", "solver", "ms", "iterations", "worst", "note"]
    batch = {r["solver"]: r for r in rows if r["work"] == "batch 40 x 3-D 4^3"}
    assert float(batch["dpsolve.batch.cg"]["worst"]) <= 1e-8       # each system to its rtol


def test_bench_many_refuses_bad_arguments():
    for argv, needle in ((["--reps", "0"], "--reps must be at least 1"),
                         (["--k", "4,x"], "--k takes integers")):
        res = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True,
                             text=True, timeout=120, cwd=ROOT)
        assert res.returncode == 2 and needle in res.stderr
