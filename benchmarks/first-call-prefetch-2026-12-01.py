"""One fresh process, empty CuPy cache: the first dpsolve.cg(A, b) (CuPy inputs, 2-D 64^2), timed;
then its second and third calls (the third takes the lane). A GPU is needed.

    python3 benchmarks/first-call-prefetch-2026-12-01.py TREE LABEL   # TREE: a dpsolve checkout

Run 2026-12-01 on one H200 as main/prefetch in the order ABBAABBA, a process each
(first-call-prefetch-2026-12-01.csv)."""
import os
import sys
import tempfile
import time

os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, sys.argv[1])

import cupy  # noqa: E402
import cupyx.scipy.sparse as csp  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import dpsolve  # noqa: E402
from dpsolve.matrices import laplace_2d  # noqa: E402


def synced(call):
    """Seconds of ``call()`` to the device's last kernel."""
    t = time.perf_counter()
    out = call()
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - t, out


A = csp.csr_matrix(sp.csr_matrix(laplace_2d(64)))
b = A @ cupy.ones(A.shape[0])
cupy.cuda.Device().synchronize()
first, (x, info) = synced(lambda: dpsolve.cg(A, b))
later, _ = synced(lambda: (dpsolve.cg(A, b), dpsolve.cg(A, b)))
print(f"{sys.argv[2]} first {first:.2f} calls-2-3 {later:.2f} info {info}")
