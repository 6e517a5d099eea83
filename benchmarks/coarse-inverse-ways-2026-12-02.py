#!/usr/bin/env python3
"""The coarsest level's dense inverse, by way (issue 30, session 70; H200): the 2-D 1024^2
hierarchy's coarsest A (Hermitian positive definite, float64), inverted by cuSOLVER's posv
with the identity (the shipped way), by potrf then potrs, and by cupy.linalg.inv; each timed
by CUDA events, median of 9 after 2 warm; the check's GEMM ||A X - I|| apart.

    PYTHONPATH=. python3 benchmarks/coarse-inverse-ways-2026-12-02.py 2:1024
"""
import statistics
import sys

import cupy
import cupyx.scipy.sparse as csp
from cupyx import lapack

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import sparse as sps

spec = sys.argv[1] if len(sys.argv) > 1 else "2:1024"
d, s = spec.split(":")
A = csp.csr_matrix(laplace_2d(int(s)) if d == "2" else laplace_3d(int(s)))
P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
h = P.precond.hierarchy
C = h.levels[-1].A
H = sps.dense(C.indptr, C.indices, C.data, C.shape).astype(cupy.float64)
H = (H + H.T) / 2
n = H.shape[0]
print(spec, "coarsest rows", n, "cusolver has:",
      [k for k in dir(cupy.cuda.cusolver) if "potri" in k.lower() or "trtri" in k.lower()])
eye = cupy.eye(n, dtype=H.dtype)


def timed(f, reps=9):
    ts = []
    for k in range(reps + 2):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        X = f()
        b.record()
        b.synchronize()
        if k >= 2:
            ts.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(ts), X


LOWER = 0                                     # CUBLAS_FILL_MODE_LOWER


def _lib():
    """libcusolver as CuPy loaded it (ctypes: CuPy's wrapper has no potri or trtri; potri, tried
    on 12-02, took 5.1 ms at 1,998 rows against posv's 3.5)."""
    import ctypes
    for line in open("/proc/self/maps"):
        if "libcusolver.so" in line:
            return ctypes.CDLL(line.split()[-1])
    raise RuntimeError("libcusolver not loaded")


def _potrf_f():
    """H's Cholesky factor L in the lower triangle of a Fortran-ordered copy (column-major,
    as cuSOLVER reads it; H symmetric: the same numbers either order)."""
    from cupy.cuda import cusolver, device
    handle = device.get_cusolver_handle()
    L = cupy.asfortranarray(H)
    work = cupy.empty(cusolver.dpotrf_bufferSize(handle, LOWER, n, L.data.ptr, n), H.dtype)
    info = cupy.empty(1, cupy.int32)
    cusolver.dpotrf(handle, LOWER, n, L.data.ptr, n, work.data.ptr, work.size, info.data.ptr)
    return L


def potrf_trsm_gemm():
    """L from potrf, L^-1 by cuBLAS's trsm on the identity, then X = L^-T L^-1 (one GEMM)."""
    import numpy as np
    from cupy_backends.cuda.libs import cublas
    from cupy.cuda import device
    L = _potrf_f()
    Li = cupy.asfortranarray(eye)
    one = np.ones(1, np.float64)
    cublas.dtrsm(device.get_cublas_handle(), 0, 0, 0, 0, n, n, one.ctypes.data, L.data.ptr, n,
                 Li.data.ptr, n)          # left, lower, no transpose, non-unit
    return Li.T @ Li


def potrf_trtri_gemm():
    """L from potrf, L^-1 by cuSOLVER's Xtrtri (ctypes) in place, then X = L^-T L^-1."""
    import ctypes
    from cupy.cuda import device
    lib = _lib()
    handle = ctypes.c_void_p(device.get_cusolver_handle())
    L = _potrf_f()
    dws, hws = ctypes.c_size_t(), ctypes.c_size_t()
    st = lib.cusolverDnXtrtri_bufferSize(handle, LOWER, 0, ctypes.c_int64(n), 1,
                                         ctypes.c_void_p(L.data.ptr), ctypes.c_int64(n),
                                         ctypes.byref(dws), ctypes.byref(hws))
    assert st == 0, st
    dbuf = cupy.empty(max(dws.value, 1), cupy.uint8)
    hbuf = ctypes.create_string_buffer(max(hws.value, 1))
    info = cupy.zeros(1, cupy.int32)
    st = lib.cusolverDnXtrtri(handle, LOWER, 0, ctypes.c_int64(n), 1,
                              ctypes.c_void_p(L.data.ptr), ctypes.c_int64(n),
                              ctypes.c_void_p(dbuf.data.ptr), ctypes.c_size_t(dws.value),
                              hbuf, ctypes.c_size_t(hws.value), ctypes.c_void_p(info.data.ptr))
    assert st == 0, st
    Li = cupy.tril(L)
    return Li.T @ Li


def potrf_potrs():
    from cupy.cuda import cusolver, device
    L = _potrf_f()
    info = cupy.empty(1, cupy.int32)
    X = eye.copy()
    cusolver.dpotrs(device.get_cusolver_handle(), LOWER, n, n, L.data.ptr, n, X.data.ptr, n,
                    info.data.ptr)
    return X


def potrf_only():
    return _potrf_f()


rows = []
for name, f in [("posv(H, I) shipped", lambda: lapack.posv(H.copy(), eye.copy())),
                ("potrf alone", potrf_only),
                ("potrf + potrs(I)", potrf_potrs),
                ("potrf + trsm(I) + GEMM", potrf_trsm_gemm),
                ("potrf + trtri (ctypes) + GEMM", potrf_trtri_gemm),
                ("cupy.linalg.inv (getrf+getrs)", lambda: cupy.linalg.inv(H)),
                ("check GEMM H @ X - I", lambda: H @ eye - eye)]:
    try:
        t, X = timed(f)
        rows.append((name, t))
        print("  %-32s %7.3f ms" % (name, t))
    except Exception as e:                     # noqa: BLE001
        print("  %-32s failed: %s" % (name, e))
X = lapack.posv(H.copy(), eye.copy())
for name, f in [("potrf+potrs", potrf_potrs), ("potrf+trsm+gemm", potrf_trsm_gemm),
                ("potrf+trtri+gemm", potrf_trtri_gemm)]:
    Y = f()
    print("  posv vs %s: max diff %.3e, max |X| %.3e, ||H Y - I||_max %.3e"
          % (name, float(abs(X - Y).max()), float(abs(X).max()), float(abs(H @ Y - eye).max())))
print("  posv ||H X - I||_max %.3e" % float(abs(H @ X - eye).max()))
