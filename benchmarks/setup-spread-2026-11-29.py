# ruff: noqa
"""AMG set-up ms (prepare, graph, float64) at 2-D 1024^2 and 3-D 100^3: median of 5 after one
untimed, with or without pyamg imported first (argv[1] == "pyamg"), and the split."""
import gc, sys, time
if sys.argv[1] == "pyamg":
    import pyamg  # noqa: F401
import numpy as np
import cupy
import cupyx.scipy.sparse as csp
import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d

for name, A in (("1024^2", laplace_2d(1024, 1024)), ("100^3", laplace_3d(100, 100, 100))):
    dA = csp.csr_matrix(A)
    P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
    ts, splits = [], []
    for _ in range(5):
        P = None
        gc.collect()
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        P = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
        cupy.cuda.Device().synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
        splits.append(P.precond.setup_times)
    st = splits[int(np.argsort(ts)[2])]
    print(f"{sys.argv[1]},{name},{np.median(ts):.2f},{min(ts):.2f},{max(ts):.2f},"
          + ";".join(f"{k}={v * 1e3:.1f}" for k, v in st.items()), flush=True)
