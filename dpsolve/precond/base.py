"""What every preconditioner provides: the base class, and the faces it shows each variant.

A preconditioner M approximates A^-1. It is made unbound (``Jacobi()``, ``AMG(theta=0.1)``, or a
name: ``M="jacobi"``) and bound to one system by :meth:`Preconditioner.bind`, which checks it
against A and keeps what every face needs. A bound preconditioner has up to three faces:

* the **host face** (:meth:`host`): ``(psolve, rpsolve)``, NumPy callables z = M r and z = M^H r.
  It is dpsolve's own implementation of the algorithm, the specification the tests compare the
  GPU to, and what variant "host" runs.
* the **stream face** (:meth:`device` -> :class:`DeviceFace`): ``apply(ex, r, z)`` issues
  kernels on the solve's executor (``dpsolve/cuda/executor.py``). The host-driven variants
  (cublas, cuda, merge) call it between their kernels, and ``graph`` captures it into its loop.
* the **device face** of a *pointwise* preconditioner (z_i from r_i and row i's data alone):
  ``DeviceFace.args``, the ``PrecondArgs`` record (``dpsolve/cuda/include/dpsolve/args.cuh``) that
  the fused kernels of merge, dynamic and persistent take and inline through
  ``dps::Pointwise`` (``precond.cuh``).

Which variant runs which preconditioner follows from the faces: every GPU variant runs a pointwise
one; a preconditioner with kernels only (``pointwise = False``) runs on the variants that call a
stream face (``GpuBackend.takes_stream_M``); one that calls the user's Python
(``calls_python``) runs on the host-driven variants only.
"""
from __future__ import annotations

import numpy as np


class Preconditioner:
    """An approximation M of A^-1. Subclasses set ``name`` (the registry key, ``M="name"``) and
    the flags below, and define :meth:`bind`, :meth:`host` and :meth:`device`."""

    name = "?"
    pointwise = False        # has a device face: the fused kernels inline it
    calls_python = False     # its faces call the user's Python (host-driven variants only)
    needs_matrix = True      # needs A as a matrix (not a LinearOperator)
    active = True            # False only for no preconditioner (z is r itself)
    has_adjoint = True       # can apply M^H (BiCG's shadow system)
    bound = False

    @property
    def kind(self) -> str:
        """The name reports and errors use ("none", "jacobi", "operator", "chebyshev", ...)."""
        return self.name

    def options(self) -> dict:
        """The options this preconditioner was made with (part of a graph cache key)."""
        return {}

    def bind(self, csr, n: int, dtype, *, snapshot: bool = False) -> "Preconditioner":
        """A new preconditioner bound to the system (A as ``csr``, a :class:`dpsolve.formats.CSR`
        in A's memory space, or None for an operator A; ``n``; the working ``dtype``), checked
        against it: errors name the problem. ``snapshot``: a prepared system's M, which must
        not follow later changes of what the caller passed. ``self`` is not modified."""
        raise NotImplementedError

    def host(self):
        """(psolve, rpsolve): z = M r and z = M^H r on NumPy vectors (the host face)."""
        raise NotImplementedError

    def device(self, state) -> "DeviceFace":
        """The stream (and device) face on a GPU state (``dpsolve.backends._gpu.GpuState``):
        made once per prepared state, on its stream; its set-up cost is the state's."""
        raise NotImplementedError

    def apply_host(self, b):
        """M b of a host vector (the host face's psolve): x0="Mb" and the tests."""
        return self.host()[0](b)

    def cache_arrays(self) -> list:
        """Arrays whose contents a cached prepared state depends on (variant graph's key)."""
        return []

    def inherit(self, previous) -> None:
        """Take what can be kept from ``previous`` (the preconditioner a prepared system had
        before ``update(A)``); nothing by default."""

    def adopt(self, other) -> None:
        """Take ``other``'s device set-up as this one's (variant graph reuses a cached state
        built for an equal preconditioner): what ``describe`` reports. Nothing by default."""

    def describe(self) -> dict:
        """What the report and ``dpsolve solve`` print about this preconditioner."""
        return {"precond": self.kind}

    def rhs_window(self) -> tuple | None:
        """(lo, hi): the exponents e of ||b|| (||b|| in [2^(e-1), 2^e)) this bound preconditioner
        takes as they are, lo < e <= hi; elsewhere the front end solves for b times a power of
        two that brings e inside (exact; ``_frontend.fit_rhs``). None: any b in the working
        dtype's own safe range (AMG's single-precision V-cycle has a narrower one)."""
        return None

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"


class DeviceFace:
    """A preconditioner on one GPU state. ``args``: the ``PrecondArgs`` record the fused kernels
    take (a pointwise preconditioner's device face; None otherwise). ``apply`` / ``apply_adjoint``
    issue z = M r / z = M^H r on the executor ``ex`` (its stream)."""

    args = None

    def apply(self, ex, r, z) -> None:
        raise NotImplementedError

    def apply_adjoint(self, ex, r, z) -> None:
        raise NotImplementedError


class Identity(Preconditioner):
    """No preconditioner (``M=None``): z is r. Every variant runs it; nothing is applied."""

    name = "none"
    pointwise = True          # the fused kernels get an inactive PrecondArgs
    needs_matrix = False
    active = False

    def bind(self, csr, n, dtype, *, snapshot=False):
        out = Identity()
        out.bound = True
        return out

    def host(self):
        return None, None

    def device(self, state):
        return _IdentityFace()

    def apply_host(self, b):
        return b.copy()


class _IdentityFace(DeviceFace):
    def __init__(self):
        from ..cuda import abi
        self.args = abi.pack("PrecondArgs", inv_diag=None)

    def apply(self, ex, r, z):
        ex.copy(r, z)

    apply_adjoint = apply


def check_cast(src, dtype, what: str, fix: str) -> None:
    """Refuse a cast of ``what`` from ``src`` to the working ``dtype`` that NumPy's ``same_kind``
    rule does not allow (complex to real would drop the imaginary part)."""
    src, dtype = np.dtype(src), np.dtype(dtype)
    if not np.can_cast(src, dtype, "same_kind"):
        raise TypeError(f"{what} has dtype {src}, which does not cast to the working dtype "
                        f"{dtype} (its imaginary part would be dropped); {fix}")
