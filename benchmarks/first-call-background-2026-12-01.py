"""One fresh process, empty CuPy cache: a plain dpsolve.cg call (the common modules), then the
first M="amg" call at 2-D 512^2 (CuPy inputs), timed. A GPU is needed.

    python3 benchmarks/first-call-background-2026-12-01.py TREE LABEL   # TREE: a dpsolve checkout

Run 2026-12-01 on one H200 as main/background in the order ABBAABBA, a process each (the
"amg-only process" rows of first-call-background-2026-12-01.csv)."""
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

A = csp.csr_matrix(sp.csr_matrix(laplace_2d(512)))
b = A @ cupy.ones(A.shape[0])
dpsolve.cg(A, b)
cupy.cuda.Device().synchronize()
t = time.perf_counter()
dpsolve.cg(A, b, M="amg")
cupy.cuda.Device().synchronize()
print(f"{sys.argv[2]} {time.perf_counter() - t:.2f}")
