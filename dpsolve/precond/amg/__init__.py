"""Smoothed-aggregation algebraic multigrid, ``M="amg"`` or ``dpsolve.precond.AMG(...)``.

One V-cycle per application: the same smoother before and after the coarse-grid correction (so
M is symmetric for a symmetric A, and PCG stays valid), the coarsest level solved by a dense
pseudo-inverse. ``reference.py`` is the specification and the host face (NumPy/SciPy);
``device.py`` sets the hierarchy up on the GPU and runs the V-cycle as kernels on the solve's
stream (the stream face: variants cublas, cuda, merge, and graph, which captures it into its
loop; dynamic and persistent fuse only pointwise preconditioners and refuse it by name).

Options (pyamg's names where it has one): ``theta`` (strength threshold, 0: every nonzero is
strong), ``B`` (n x k near-null-space, default the constants; rigid-body modes for elasticity),
``smoother`` ("jacobi": one damped sweep of weight omega / rho(D^-1 A); "chebyshev": ``degree``
steps on D^-1 A), ``omega`` (default ``reference.SMOOTHER_OMEGA``, 1.5: it says why), ``degree``,
``max_coarse`` and ``max_levels``; dpsolve's own: ``max_dense`` (default 2,500: a level below
the finest with at most this many rows is the coarsest, solved by its dense inverse;
``reference.MAX_DENSE`` says why),
``second_pass``, the distance (1 or 2; 0: none) of the aggregation's second pass
(``reference.aggregate``: 1 gives more, smaller aggregates and fewer iterations, 2 a cheaper
hierarchy and V-cycle): "auto" (default: 2 on levels of at least 10^5 rows, 1 below;
``reference.SECOND_DISTANCE`` says why), an int, or one a level with the last repeated; and
``precision``, the V-cycle's: "auto" (default) runs the V-cycle of a float64 (complex128) system
in float32 (complex64) wherever the hierarchy's values fit, and stores the cycle's matrices of a
real system in float16 (scaled by a power of two) wherever they fit that; "half" insists on
float16 matrices, "mixed" on float32 ones (ValueError where they do not fit), "full" keeps the
working dtype (reference.py's module docstring says why the lower precisions cost no or few
iterations).
"""
from __future__ import annotations

import math
import time

import numpy as np

from .. import register
from ..base import DeviceFace, Preconditioner


@register
class AMG(Preconditioner):
    name = "amg"
    has_adjoint = False          # BiCG's M^H: not built (the V-cycle of a nonsymmetric A)

    def __init__(self, theta=0.0, B=None, smoother="jacobi", omega=None, degree=3,
                 max_coarse=300, max_levels=10, second_pass=None, precision="auto",
                 max_dense=None):
        if smoother not in ("jacobi", "chebyshev"):
            raise ValueError(f"AMG smoother must be 'jacobi' or 'chebyshev', got {smoother!r}")
        if omega is None:
            from .reference import SMOOTHER_OMEGA as omega
        for name, v in (("theta", theta), ("omega", omega)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"AMG {name} must be a finite number, got {v!r}")
        if theta < 0 or omega <= 0:
            raise ValueError(f"AMG needs theta >= 0 and omega > 0, got theta={theta!r}, "
                             f"omega={omega!r}")
        if smoother == "chebyshev" and degree not in (2, 3, 4):
            raise ValueError(f"AMG's Chebyshev smoother takes degree 2, 3 or 4, got {degree!r}")
        for name, v in (("max_coarse", max_coarse), ("max_levels", max_levels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"AMG {name} must be a positive integer, got {v!r}")
        if second_pass is None:
            from .reference import SECOND_DISTANCE as second_pass
        from .reference import MAX_DENSE, check_max_dense, check_precision, check_second_pass
        self.second_pass = check_second_pass(second_pass)
        self.max_dense = MAX_DENSE if max_dense is None else max_dense
        check_max_dense(self.max_dense)
        check_precision(precision)
        self.precision = precision
        self.theta, self.B, self.smoother, self.omega = float(theta), B, smoother, float(omega)
        self.degree, self.max_coarse, self.max_levels = int(degree), max_coarse, max_levels
        self.csr = None
        self.hierarchy = None        # the last hierarchy built (device or host)
        self._reuse = None           # the AMG of the same pattern before update(A)
        self.vcycle_time = None

    def options(self) -> dict:
        out = {"theta": self.theta, "smoother": self.smoother, "omega": self.omega,
               "degree": self.degree, "max_coarse": self.max_coarse,
               "max_levels": self.max_levels, "max_dense": self.max_dense,
               "second_pass": self.second_pass,
               "precision": self.precision}
        if self.B is not None:
            out["B"] = f"{np.shape(self.B)[0]}x{np.shape(self.B)[1]}"
        return out

    def _setup_kw(self) -> dict:
        return dict(theta=self.theta, B=self.B, smoother=self.smoother, omega=self.omega,
                    degree=self.degree, max_coarse=self.max_coarse, max_levels=self.max_levels,
                    max_dense=self.max_dense,
                    second_pass=self.second_pass, precision=self.precision)

    def bind(self, csr, n, dtype, *, snapshot=False):
        if csr is None:
            raise ValueError("M='amg' needs A as a matrix, not a LinearOperator")
        B = self.B
        if B is not None:
            B = B.get() if hasattr(B, "get") and not isinstance(B, np.ndarray) else np.asarray(B)
            if B.ndim == 1:
                B = B[:, None]
            if B.ndim != 2 or B.shape[0] != n or B.shape[1] < 1:
                raise ValueError(f"AMG's B must have shape ({n}, k), got {np.shape(self.B)}")
            if not np.isfinite(B).all():
                raise ValueError("AMG's B contains NaN or Inf")
            if B.dtype.kind == "c" and np.dtype(dtype).kind != "c":
                raise TypeError(f"AMG's B is complex ({B.dtype}) but the working dtype is "
                                f"{np.dtype(dtype)}; pass a real B")
            B = B.astype(dtype, copy=True)               # a snapshot: the caller's B not kept
        out = AMG(**dict(self._setup_kw(), B=B))
        out.csr, out.dtype, out.bound = csr, np.dtype(dtype), True
        return out

    def inherit(self, previous) -> None:
        """Keep ``previous``'s aggregates where A's sparsity pattern is unchanged (a prepared
        system's ``update``): the re-set-up recomputes only the numbers."""
        h = getattr(previous, "hierarchy", None)
        if (not isinstance(previous, AMG) or h is None or previous.options() != self.options()
                or not hasattr(h, "vcycle")):
            return
        a, b = previous.csr, self.csr
        if a is None or b is None or a.n != b.n or a.nnz != b.nnz:
            return
        if _equal((a.indptr, a.indices), (b.indptr, b.indices)):
            self._reuse = previous        # its hierarchy and its V-cycle's time (device)

    def adopt(self, other) -> None:
        if isinstance(other, AMG):
            self.hierarchy, self.vcycle_time = other.hierarchy, other.vcycle_time

    # --- host face: the reference -------------------------------------------------------------
    def host(self):
        from . import reference
        if self.hierarchy is None or hasattr(self.hierarchy, "vcycle"):
            t0 = time.perf_counter()
            self.hierarchy = reference.setup(self.csr.to_scipy(), dtype=self.dtype,
                                             **self._setup_kw())
            self.setup_time = time.perf_counter() - t0
        h = self.hierarchy
        op = reference.as_operator(h)
        return (lambda r: reference.vcycle(h, r)), op.rmatvec

    # --- stream face: the device hierarchy ----------------------------------------------------
    def device(self, state):
        from . import device
        prev = self._reuse
        A = getattr(state, "A", None)                  # the solve's matrix on the device
        h = device.setup(self.csr.to_device(), state.dtype, state.stream,
                         reuse=None if prev is None else prev.hierarchy,
                         ell=device.ell_of(A, self.csr.n, state.dtype), **self._setup_kw())
        # level 0 over the solve's ELL, if it is (a numeric re-set-up keeps its packed offsets)
        h.use_ell(A, prev.hierarchy if prev is not None and h.resetup == "numeric" else None)
        self.hierarchy = h
        self._reuse = None
        face = AMGFace(h)
        # a re-set-up over every kept pattern runs the same kernels over the same patterns: its
        # V-cycle takes the previous one's time, which does not depend on the numbers
        kept = (prev.vcycle_time if prev is not None and prev.dtype == self.dtype
                and h.resetup == "numeric" and (prev.hierarchy.low is None) == (h.low is None)
                and getattr(prev.hierarchy.low, "half", False) == getattr(h.low, "half", False)
                else None)
        self.vcycle_time = kept if kept is not None else face.time_vcycle(state)
        return face

    def rhs_window(self):
        """A V-cycle run in a lower precision than the system's (float32 for float64) takes the
        b whose residuals and results stay in its range (``reference.cast_exponents``); None
        otherwise."""
        low = getattr(self.hierarchy, "low", None)
        if low is None or np.dtype(low.levels[0].A.dtype) == np.dtype(self.dtype):
            return None
        return low.cast_exps

    def describe(self) -> dict:
        """The report's description; the hierarchy's part is computed once per hierarchy (every
        solve's report has it: recomputed, it cost ~60 us of host time a solve)."""
        h = self.hierarchy
        cached = getattr(self, "_described", None)       # (hierarchy, V-cycle time, dict)
        if cached is not None and cached[0] is h and cached[1] == self.vcycle_time:
            return dict(cached[2])
        out = {"precond": "amg", **self.options()}
        if h is not None:
            from . import reference
            table = reference.levels_table(h)        # host or device hierarchy alike
            out.update(levels=table,
                       operator_complexity=sum(z for _, z in table) / table[0][1],
                       grid_complexity=sum(n for n, _ in table) / table[0][0])
            times = getattr(h, "setup_times", None)
            if times:
                out["setup_times"] = dict(times)
            if getattr(h, "resetup", None):
                out["resetup"] = h.resetup          # full, aggregates kept, or numbers only
            out["vcycle_bytes"] = self.vcycle_bytes
            low = getattr(h, "low", None)       # the dtype the V-cycle ran in
            cycling = h if low is None else low
            out["vcycle_dtype"] = np.dtype(cycling.levels[0].A.dtype).name
            if low is not None and low.half:    # its matrices' values
                out["vcycle_values"] = "float16"
            # the levels that restrict by R (I - A S) in one product (reference.uses_rs)
            out["smoothed_restriction"] = [i for i, lev in enumerate(cycling.levels[:-1])
                                           if reference.uses_rs(cycling, lev)]
        if self.vcycle_time is not None:
            out["vcycle_time"] = self.vcycle_time
        self._described = (h, self.vcycle_time, out)
        return dict(out)

    # what bench-amg and the CLI read on a prepared system's ``precond``
    @property
    def levels(self):
        """(rows, nonzeros) of every level, finest first (None before the set-up)."""
        return None if self.hierarchy is None else self.describe().get("levels")

    @property
    def vcycle_bytes(self):
        """The bytes one V-cycle must move: its bandwidth floor at the copy bandwidth."""
        from . import reference
        h = self.hierarchy
        if h is None:
            return None
        item = np.dtype(self.dtype).itemsize
        if getattr(h, "low", None) is None:
            return reference.vcycle_bytes(h, item, narrow=getattr(h, "narrow_matrices", set)())
        single = np.dtype(h.low.levels[0].A.dtype).itemsize
        n = h.levels[0].A.shape[0]
        stored = getattr(h.low, "stored_value_bytes", dict)()      # float16 copies
        cycle = reference.vcycle_bytes(h.low, single, stored=stored,    # its RS (uses_rs)
                                       narrow=getattr(h.low, "narrow_matrices", set)())
        if getattr(h, "casts_fused", lambda: False)():   # b read twice, z written once, wide
            return cycle + 3 * n * (item - single)
        return cycle + 2 * n * (item + single)   # + the casts

    @property
    def setup_times(self):
        return getattr(self.hierarchy, "setup_times", None)


def _equal(arrays_a, arrays_b) -> bool:
    """Whether two tuples of index arrays are equal, array by array; on the device by one counting
    kernel an array and one host read (CuPy's array_equal reduces through a kernel compiled per
    size class on first use, and reads back each time)."""
    if any(a.shape != b.shape for a, b in zip(arrays_a, arrays_b)):
        return False
    if all(isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
           for a, b in zip(arrays_a, arrays_b)):
        return all(bool(np.array_equal(a, b)) for a, b in zip(arrays_a, arrays_b))
    import cupy
    from ...cuda import ops
    differ = cupy.zeros(1, cupy.int32)
    for a, b in zip(arrays_a, arrays_b):
        ops.count_true(cupy.asarray(a) != cupy.asarray(b), out=differ)
    return int(differ.get()[0]) == 0


class AMGFace(DeviceFace):
    """The V-cycle as kernels on the executor's stream (z = M r; M is self-adjoint for a
    Hermitian A, the only case BiCG's M^H would need, which dpsolve refuses for AMG)."""

    def __init__(self, hierarchy):
        self.h = hierarchy

    def apply(self, ex, r, z):
        self.h.vcycle(r, z, ex.stream)

    def apply_adjoint(self, ex, r, z):
        raise ValueError("the AMG V-cycle's adjoint is not built; use cg or bicgstab")

    def time_vcycle(self, state, reps: int = 3) -> float:
        """Seconds per V-cycle on the device, the report's ``vcycle_time``: one V-cycle captured
        into a CUDA graph (as variant graph runs it, without the host's launch costs), launched
        ``reps`` times after a warm-up between CUDA events. Uses its own vectors, before any
        solve; a capture that fails falls back to timing stream launches. Part of the set-up's
        time (2 + reps V-cycles: 1.3 ms at 10^6 rows, 8 at 4 x 10^6), so kept short; a numeric
        re-set-up (every pattern kept) keeps the set-up's (``AMG.inherit``)."""
        import cupy
        from ...cuda.executor import Executor
        stream = state.stream
        ex = Executor(stream)                 # the set-up's launches are not the solve's
        with stream, ex:
            r = cupy.ones(state.n, state.dtype)
            z = cupy.empty_like(r)
            self.h.vcycle(r, z, stream)
            graph = None
            try:
                stream.begin_capture()
                try:
                    self.h.vcycle(r, z, stream)
                finally:
                    graph = stream.end_capture()
                graph.launch(stream)
            except Exception:
                graph = None
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(reps):
                if graph is not None:
                    graph.launch(stream)
                else:
                    self.h.vcycle(r, z, stream)
            end.record(stream)
            end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) * 1e-3 / reps
