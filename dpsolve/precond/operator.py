"""A preconditioner the caller wrote: any matrix or ``LinearOperator`` approximating A^-1,
called every iteration (``M.matvec``; ``M.rmatvec`` for BiCG's M^H). Its faces call the user's
Python, so it runs on the host and the host-driven GPU variants (cublas, cuda, merge), which call
it between kernels with arrays of the caller's kind (CuPy in, CuPy out)."""
from __future__ import annotations

from .base import DeviceFace, Preconditioner


class Operator(Preconditioner):
    name = "operator"
    calls_python = True
    needs_matrix = False

    def __init__(self, op):
        self.op = op                     # a scipy LinearOperator, checked by dpsolve.precond.make
        self.bound = True

    def bind(self, csr, n, dtype, *, snapshot=False):
        return self

    def host(self):
        return self.op.matvec, self.op.rmatvec

    def apply_host(self, b):
        return self.op.matvec(b)

    def device(self, state):
        return _OperatorFace(self.op, state, adjoint=state.adjoint)


class _OperatorFace(DeviceFace):
    def __init__(self, op, state, adjoint):
        from ..cuda import ops
        n, dt = state.n, state.dtype
        self.M = ops.OperatorMatrix(op, "matvec", n, dt, "M.matvec")
        self.MH = ops.OperatorMatrix(op, "rmatvec", n, dt, "M.rmatvec") if adjoint else None
        self.operators = tuple(m for m in (self.M, self.MH) if m is not None)

    def apply(self, ex, r, z):
        ex.spmv(self.M, r, z)

    def apply_adjoint(self, ex, r, z):
        ex.spmv(self.MH, r, z)
