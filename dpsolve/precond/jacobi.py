"""Jacobi: M = D^-1, the inverse of A's diagonal. Pointwise, so every variant runs it, fused
into its kernels (the paper's preconditioner, and dpsolve's only one before this package).

Made from ``M="jacobi"`` (D from A), or from what the caller passes as the inverse diagonal: a
1-D array, or a diagonal sparse matrix (``dpsolve.precond.make``).
"""
from __future__ import annotations

import numpy as np

from .base import DeviceFace, Preconditioner
from .diagonal import inverse_diagonal


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _device_inverse(csr, dtype):
    """D^-1 of a device CSR (int32 indices, rows sorted, values in ``dtype``) in one kernel and
    one host read (precond.cu's inverse_diagonal), or None where the host's path answers: a
    complex dtype (NumPy's complex division is the specification), another CSR, or a row the
    kernel counts (a zero, NaN, Inf or float32-subnormal diagonal entry, a reciprocal past the
    dtype's range or below its normal range: the host's D^-1 or its refusal, in its words).
    Before, every device bind went through the host: the diagonal down, NumPy's division, D^-1
    up again (32 of the 44 ms of a 3-D 160^3 Jacobi-CG ``update``, H200). Not AMG's
    ``device._check_level`` (amg.cu's diag_check): that would compile AMG's modules for Jacobi."""
    import cupy

    from .._setup import resources
    from ..cuda import ops
    from ..cuda._loader import get_kernel
    from ..cuda.executor import launch
    dtype = np.dtype(dtype)
    if (dtype.kind != "f" or csr.dtype != dtype or csr.n == 0
            or csr.indptr.dtype != np.int32 or csr.indices.dtype != np.int32):
        return None
    stream = resources().stream          # the stream the device set-up made the CSR on
    with stream:
        inv = cupy.empty(csr.n, dtype)
        bad = cupy.zeros(1, cupy.int32)
        launch(get_kernel("precond", "inverse_diagonal<{T}>", dtype), (ops.grid_for(csr.n),),
               (ops.BLOCK,), (np.int32(csr.n), csr.indptr, csr.indices, csr.data, inv, bad),
               stream)
        count = int(bad.get(stream=stream)[0])
    return None if count else inv


class Jacobi(Preconditioner):
    """z = D^-1 r. ``inv_diag`` (bound): D^-1 in the working dtype, where A is: a device array
    for a matrix on the GPU (``_device_inverse``), else a host array."""

    name = "jacobi"
    pointwise = True

    def __init__(self):
        self.inv_diag = None

    @classmethod
    def from_inverse_diagonal(cls, inv_diag) -> "Jacobi":
        """A bound Jacobi from a checked host array holding D^-1 (already in the working dtype)."""
        out = cls()
        out.inv_diag = inv_diag
        out.bound = True
        return out

    def bind(self, csr, n, dtype, *, snapshot=False):
        if csr is None:
            raise ValueError("M='jacobi' needs A as a matrix, not a LinearOperator")
        inv = _device_inverse(csr, dtype) if csr.on_device else None
        if inv is None:
            inv, why = inverse_diagonal(_host(csr.diagonal()), dtype)
            if why:
                raise ValueError(why)
        return self.from_inverse_diagonal(inv)

    def host(self):
        # closures over named arrays: a bound ``tmp.__mul__`` of an unnamed array lets NumPy's
        # temporary elision reuse (overwrite) that array's buffer for the product
        inv = _host(self.inv_diag)
        inv_conj = np.conj(inv)
        return (lambda r: inv * r), (lambda r: inv_conj * r)

    def apply_host(self, b):
        return _host(self.inv_diag) * b

    def device(self, state):
        import cupy
        with state.stream:
            inv = cupy.asarray(self.inv_diag, dtype=state.dtype)
        return PointwiseFace(inv_diag=inv)

    def cache_arrays(self):
        return [self.inv_diag]


class PointwiseFace(DeviceFace):
    """The faces of a pointwise preconditioner on a GPU state: its ``PrecondArgs`` (the device
    face, fused by merge, dynamic and persistent) and precond.cu's kernels (the stream face)."""

    def __init__(self, **fields):
        from ..cuda import abi
        self.fields = fields                   # keeps the device arrays alive
        self.args = abi.pack("PrecondArgs", **fields)

    def apply(self, ex, r, z):
        ex.pointwise(self.args, r, z)

    def apply_adjoint(self, ex, r, z):
        ex.pointwise(self.args, r, z, adjoint=True)
