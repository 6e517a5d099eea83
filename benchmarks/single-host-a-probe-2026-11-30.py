"""Probe: one-shot dpsolve.cg with a host SciPy A (NumPy b): a call's wall time, median of 5."""
import statistics
import sys
import time

import numpy as np

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

for name, A in (("3-D 160^3", laplace_3d(160).tocsr()), ("2-D 1024^2", laplace_2d(1024).tocsr())):
    b = A @ np.ones(A.shape[0])
    for variant in ("graph", "persistent"):
        dpsolve.cg(A, b, rtol=1e-8, variant=variant)
        ts, setups = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            x, info, rep = dpsolve.cg(A, b, rtol=1e-8, variant=variant, full_output=True)
            ts.append(time.perf_counter() - t0)
            setups.append(rep.setup_time)
        print(f"{sys.argv[1]} {name} {variant:10s} call {statistics.median(ts) * 1e3:8.1f} ms, "
              f"set-up {statistics.median(setups) * 1e3:7.1f} ms, its {rep.iterations}", flush=True)
