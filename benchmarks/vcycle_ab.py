"""Shared pieces of the V-cycle A/B scripts in this folder (from 2026-11-29 on; the older scripts
keep their own copies, as they ran).

* ``kernels_built_with(defines)``: a context in which the AMG V-cycle's kernels come from amg.cu
  compiled with extra ``-D`` macro definitions (the loader's ``defines``: a module of their own),
  so that two builds of the same source run side by side in one process.
* ``vcycle_us(P)``: one V-cycle of a prepared AMG system, in microseconds: ``k`` cycles captured
  into one CUDA graph (with PDL, as variant graph runs them), the median of ``reps`` launches / k.
* ``solve_ms(P, b)``: one prepared solve, synchronised, in milliseconds, with its iterations.
* ``systems(spec)``: the problems "2:1024,3:160" (2-D Poisson 1024^2, 3-D Laplace 160^3) on the
  device, each with b = A ones.
"""
import contextlib
import statistics
import time

import cupy
import cupyx.scipy.sparse as csp

from dpsolve.cuda._loader import amg_source, get_kernel
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device


@contextlib.contextmanager
def kernels_built_with(defines: tuple):
    """device.vc_kernel from amg.cu built with ``defines`` (e.g. ("-DAMG_ROW_CHUNK=0",)) inside
    the block; () leaves the shipped module. A graph captured inside keeps those kernels."""
    shipped = device.vc_kernel

    def vc_kernel(expression, dtype):          # a pdl.Kernel, as the shipped one's
        return get_kernel(amg_source(expression), expression, dtype, defines=defines)

    if defines:
        device.vc_kernel = vc_kernel
    try:
        yield
    finally:
        device.vc_kernel = shipped


def vcycle_us(P, reps: int = 5, k: int = 20) -> float:
    """Microseconds per V-cycle of the prepared system P (its hierarchy, b = ones)."""
    h = P.precond.hierarchy
    b = cupy.ones(h.levels[0].n, h.dtype)
    z = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h.vcycle(b, z, s)
        s.begin_capture()
        for _ in range(k):
            h.vcycle(b, z, s)
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        times = []
        for _ in range(reps):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s)
            g.launch(s)
            e1.record(s)
            e1.synchronize()
            times.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / k)
    return statistics.median(times)


def solve_ms(P, b, rtol: float = 1e-8):
    """(milliseconds, iterations) of one prepared solve."""
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    _, _, rep = P.solve(b, rtol=rtol, full_output=True)
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t) * 1e3, rep.iterations


def systems(spec: str):
    """(item, A, b) for each "dim:size" of ``spec``: A the Laplacian (2-D or 3-D) as a CuPy CSR,
    b = A ones."""
    for item in spec.split(","):
        dim, size = item.split(":")
        A = csp.csr_matrix(laplace_2d(int(size)) if dim == "2" else laplace_3d(int(size)))
        yield item, A, A @ cupy.ones(A.shape[0])
