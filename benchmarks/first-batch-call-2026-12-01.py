"""First batch calls in a fresh process: complex64, then float64, each called twice.

Run with an empty kernel cache and the tree to time on the path, once a tree and round (ABAB):
    CUPY_CACHE_DIR=$(mktemp -d) PYTHONPATH=TREE python3 first-batch-call-2026-12-01.py LABEL
It prints one line: LABEL | dtype callK seconds info=<systems not converged> | ...
"""
import sys
import time

import cupy
import numpy as np
import scipy.sparse as sp

from dpsolve import batch
from dpsolve.matrices import laplace_2d


def main(label):
    cupy.zeros(1).sum()
    cupy.cuda.Device().synchronize()
    A = sp.csr_array(laplace_2d(8))
    A.sort_indices()
    rng = np.random.default_rng(0)
    out = [label]
    for dt in (np.complex64, np.float64):
        vals = np.tile(A.data, (16, 1)).astype(dt)
        B = rng.standard_normal((16, A.shape[0])).astype(dt)
        Ab = batch.csr(vals, A.indices, A.indptr)
        for k in range(2):
            t = time.perf_counter()
            X, info = batch.cg(Ab, cupy.asarray(B), rtol=1e-5)
            cupy.cuda.Device().synchronize()
            bad = int((cupy.asarray(info) != 0).sum())
            out.append(f"{np.dtype(dt).name} call{k + 1} {time.perf_counter() - t:.2f}s "
                       f"info={bad}")
    print(" | ".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
