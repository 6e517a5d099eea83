"""csr_check's time (dpsolve/cuda/check.cu), the tree at argv[1] against another run of this
script (benchmarks/csr-check-ab-2026-11-30.csv: base e0f93bd as ``git archive`` into a folder,
then this tree, ABAB, each in its own process):

    for t in base $PWD base $PWD; do python3 benchmarks/csr-check-ab-2026-11-30.py $t; done

One JSON line a run: the median of 7 windows of 50 checks (CUDA events), us a check, for cupyx
CSR matrices of 3-D 160^3, 2-D 1024^2 and 3-D 40^3 in float64 and float32."""
import json
import sys

sys.path.insert(0, sys.argv[1])

import cupy  # noqa: E402
import cupyx.scipy.sparse as csp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from dpsolve._setup import csr_check_queue  # noqa: E402
from dpsolve.matrices import laplace_2d, laplace_3d  # noqa: E402


def check_us(A, dtype) -> float:
    dA = csp.csr_matrix(sp.csr_matrix(A).astype(dtype))
    words = cupy.zeros(4, np.int32)
    queue = csr_check_queue(dA.indptr, dA.indices, dA.data, dA.shape[0], words)
    stream = cupy.cuda.get_current_stream()
    for _ in range(20):
        queue(stream)
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(7):
        e0.record()
        for _ in range(50):
            queue(stream)
        e1.record()
        e1.synchronize()
        times.append(cupy.cuda.get_elapsed_time(e0, e1) / 50 * 1e3)
    return round(float(np.median(times)), 2)


out = {"tree": sys.argv[1]}
for name, A in (("3d160", laplace_3d(160)), ("2d1024", laplace_2d(1024)),
                ("3d40", laplace_3d(40))):
    for dt in (np.float64, np.float32):
        out[f"{name}-{np.dtype(dt).name}"] = check_us(A, dt)
print(json.dumps(out))
