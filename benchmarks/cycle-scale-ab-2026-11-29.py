"""The single-precision V-cycle's power-of-two scaling inside its kernels (issue 30 follow-up,
2026-11-29; tried, not kept): the V-cycle and the prepared AMG-PCG solve per tree, and a hash of
x to show the same bits. The csv's rows: run1-base / run2-base the tree f9ae7a5, run1-new the
level-0 kernels scaling every b, run2-new a branch on the scale with the plain loops at 1 (the
tried trees are in BENCHMARKS.md's entry, not in git).
Run from a tree's root on PYTHONPATH: python3 this.py LABEL PROBLEMS BENCH_DIR
(PROBLEMS as vcycle_ab.systems: "2:1024,3:100,3:160"). Prints csv rows:
label,problem,iterations,info,error,vcycle_us,solve_ms,x_hash"""
import hashlib
import statistics
import sys
import time

import cupy

sys.path.insert(0, sys.argv[3])
import dpsolve  # noqa: E402
from vcycle_ab import systems, vcycle_us  # noqa: E402

label = sys.argv[1]
for item, A, b in systems(sys.argv[2]):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
    err = float(cupy.linalg.norm(x - 1) / cupy.linalg.norm(cupy.ones_like(x)))
    digest = hashlib.sha256(x.get().tobytes()).hexdigest()[:12]
    vc = statistics.median([vcycle_us(P) for _ in range(3)])
    ts = []
    for _ in range(9):
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        P.solve(b, rtol=1e-8)
        cupy.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t)
    print(f"{label},{item},{rep.iterations},{info},{err:.2e},{vc:.1f},"
          f"{statistics.median(ts) * 1e3:.3f},{digest}", flush=True)
