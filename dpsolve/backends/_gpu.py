"""Machinery shared by the GPU back ends: device buffers, the two sync modes, and measurement.

Sync modes (the paper's CUDA polling and blocking modes):

* ``polling``:  the device's scheduling flag is ``cudaDeviceScheduleSpin`` for the solve and the
  host waits on a plain event: the host thread spins.
* ``blocking``: the flag is ``cudaDeviceScheduleBlockingSync`` and the host waits on an event made
  with ``cudaEventBlockingSync``: the host thread sleeps until the GPU signals.

The device flag matters for waits that happen inside libraries (cuBLAS in host pointer mode
copies its result to the host and waits there); the event covers dpsolve's own waits. The
previous flags are restored after the solve.
"""
from __future__ import annotations

import math

import numpy as np

from .. import methods as method_table
from .._device import status as device_status
from ..cuda import abi, ops
from ..cuda.executor import Executor
from ..formats import FORMATS
from .._setup import Readback, resources, scaled_norm, wait
from .._system import in_safe_range
from ..measure import GpuEnergyMeter, Stopwatch, no_rapl, nvml_index_of
from .base import Backend, Run

SCHED_SPIN, SCHED_BLOCKING, SCHED_MASK = 1, 4, 7
# NVML's energy counter ticks about every 100 ms: a solve shorter than this reports no energy
# (None) rather than a quantised 0 or one tick. dpsolve.measure.measure_window repeats a solve
# until a window is long enough.
ENERGY_MIN_SECONDS = 0.25
_SCHED = {"polling": SCHED_SPIN, "blocking": SCHED_BLOCKING}
GPU_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))

# Slots of GpuState.scal, the device-side scalars (abi.cuh's DPS_SLOT_*). CG's: TAU and STATUS
# are adjacent so that one device-to-host copy reads both (and graph.cu reads them as a pair).
SIGMA, PV, ALPHA, ZETA, RR, BETA, TAU, STATUS, ONE = (
    abi.DPS_SLOT_SIGMA, abi.DPS_SLOT_PV, abi.DPS_SLOT_ALPHA, abi.DPS_SLOT_ZETA, abi.DPS_SLOT_RR,
    abi.DPS_SLOT_BETA, abi.DPS_SLOT_TAU, abi.DPS_SLOT_STATUS, abi.DPS_SLOT_ONE)

# Slots of BiCG and BiCGStab on the host-driven variants (cuda, merge; dpsolve/cuda/krylov.cu,
# bicg_merge.cu, bicgstab_merge.cu). They keep TAU and STATUS above for the host's one read per
# iteration (read_tau); STATUS then holds OK, SciPy's breakdown code (-10, -11) or
# CONVERGED_MID_STEP. RHO_PREV: rho of the previous iteration (cuda). RV: <p~, q> (BiCG) or
# <r~, v> (BiCGStab). TS, TT, SS: <t, s>, <t, t>, <s, s> (BiCGStab, cuda). PENDING: a breakdown
# the merge kernels found for the next iteration, raised by that iteration's first kernel.
RHO, RHO_PREV, RV, BI_ALPHA, BI_BETA, OMEGA, TS, TT, SS, PENDING = (
    abi.DPS_SLOT_RHO, abi.DPS_SLOT_RHO_PREV, abi.DPS_SLOT_RV, abi.DPS_SLOT_BI_ALPHA,
    abi.DPS_SLOT_BI_BETA, abi.DPS_SLOT_OMEGA, abi.DPS_SLOT_TS, abi.DPS_SLOT_TT, abi.DPS_SLOT_SS,
    abi.DPS_SLOT_PENDING)


def _cudart():
    try:
        from cuda.bindings import runtime
        return runtime
    except ImportError:
        return None


class SyncMode:
    """Sets the device scheduling flag for a solve and provides the host's wait.

    The wait events are the thread's own, made once (``dpsolve._setup.resources``); the flag is
    changed only when it differs from the one in force, and restored after the solve."""

    def __init__(self, mode: str, res=None):
        self.mode = mode
        self.res = res or resources()
        self.waits = 0
        self._old = None

    def __enter__(self):
        rt = _cudart()
        if rt is not None:
            err, flags = rt.cudaGetDeviceFlags()
            want = (flags & ~SCHED_MASK) | _SCHED[self.mode]
            if int(err) == 0 and want != flags:
                self._old = flags
                rt.cudaSetDeviceFlags(want)
        return self

    def __exit__(self, *exc):
        rt = _cudart()
        if rt is not None and self._old is not None:
            rt.cudaSetDeviceFlags(self._old)
        return False

    def wait(self, stream):
        """Block the host until everything issued on ``stream`` so far has finished."""
        wait(stream, self.mode, self.res)
        self.waits += 1


def poisoned(n: int, dtype, k: int, stream) -> list:
    """k device vectors of n values, in one allocation, every byte 0xFF (NaN in every float
    type): one memset instead of k fill kernels."""
    import cupy
    with stream:
        buf = cupy.empty(k * n, dtype)
    cupy.cuda.runtime.memsetAsync(buf.data.ptr, 0xFF, buf.nbytes, stream.ptr)
    return [buf[i * n:(i + 1) * n] for i in range(k)]


class HostScalars:
    """Pinned host buffer for device-to-host scalar reads (one copy + one wait per read)."""

    def __init__(self, k: int, dtype):
        import cupy
        self.dtype = np.dtype(dtype)
        self.mem = cupy.cuda.alloc_pinned_memory(k * self.dtype.itemsize)
        self.arr = np.frombuffer(self.mem, self.dtype, k)

    def copy_async(self, dev, stream):
        """Queue the copy of ``dev`` into the pinned buffer; valid after the next wait."""
        import cupy
        cupy.cuda.runtime.memcpyAsync(self.arr.ctypes.data, dev.data.ptr, dev.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        return self.arr[: dev.size]

    def fetch(self, dev, stream, sync: SyncMode):
        vals = self.copy_async(dev, stream)
        sync.wait(stream)
        return vals


def _adjoint_matrix(csr, fmt):
    """A^H on the device in ``fmt``; a format A^H cannot take is refused naming A^H."""
    from .._errors import FormatError
    try:
        return ops.DeviceMatrix.build(csr.conj_transpose(), fmt)
    except FormatError as e:
        raise FormatError(f"A^H, which BiCG runs in A's format: {e}") from None


class GpuState:
    """Per-system device state: the matrix in its format, b, the preconditioner's faces
    (``pc``, dpsolve/precond), work vectors and scalars."""

    N_SCALARS = abi.DPS_SLOTS   # slots 0..8 are the CG layout; BiCG / BiCGStab use 9..18

    def __init__(self, system, fmt):
        import cupy
        self.stream = resources().stream      # the thread's stream, reused by every solve
        dt = system.dtype
        n = system.n
        self.n, self.dtype, self.method, self.format = n, dt, system.method, fmt
        # the length the scalar kernels' accurate re-computation of a suspect inner product
        # covers (dps::confirm_dot): all of r~, z here; 0 across ranks, whose vectors a kernel
        # sees only in part (dpsolve/distributed/gpu.py: the test is then on the fast sum)
        self.confirm_n = n
        self.real_dtype = np.finfo(dt).dtype        # of norms, residual histories, tolerances
        self._vectors = {}
        # A^H (and M^H) for the methods whose descriptor says they need it (BiCG)
        self.adjoint = adjoint = method_table.get(system.method).adjoint
        with self.stream:
            # a user's operator (A or M) is called on CuPy arrays when the caller passed b as a
            # CuPy array (CuPy in, CuPy out, operators included), else on NumPy copies: set per
            # solve by load()
            if system.operator is not None:          # the user's operator, called per SpMV
                op = system.operator
                self.A = ops.OperatorMatrix(op, "matvec", n, dt, "A.matvec")
                self.AH = (ops.OperatorMatrix(op, "rmatvec", n, dt, "A.rmatvec") if adjoint
                           else None)
            else:
                self.A = ops.DeviceMatrix.build(system.csr, fmt)
                # BiCG also needs A^H x: the conjugate transpose, built once, in the same format
                # ("auto" picks one that takes both: formats.row_stats)
                self.AH = _adjoint_matrix(system.csr, fmt) if adjoint else None
            # the preconditioner on this state: its stream face (pc.apply) and, pointwise, its
            # device face. ``fused``: a pointwise M that the fused kernels apply themselves
            # (``pc_args``, their PrecondArgs); ``general``: one the loops apply between kernels
            # through its stream face (the fused kernels then get an inactive ``pc_args``)
            self.precond = system.M
            self.pc = system.M.device(self)
            self.preconditioned = system.M.active
            self.fused = system.M.active and system.M.pointwise
            self.general = system.M.active and not system.M.pointwise
            self.pc_args = (self.pc.args if self.fused
                            else abi.pack("PrecondArgs", inv_diag=None))
            # work vectors start poisoned (NaN): a kernel that reads what nothing wrote shows up.
            # b: each solve's b is copied in (load)
            vecs = poisoned(n, dt, 5 if self.preconditioned else 4, self.stream)
            self.b, self.r, self.p, self.v = vecs[:4]
            self.z = vecs[4] if self.preconditioned else self.r
            self.scal = cupy.zeros(self.N_SCALARS, dt)
            self.scal[ONE] = 1
            # the executor runs this state's operations on its stream (dpsolve/cuda/executor.py)
            self.ex = Executor(self.stream, dt)
            self.partials = self.ex.partials
            # (atol, maxiter, rtol or -1, -) as kernels read them from device memory (merge's
            # BiCGStab, graph; rtol: graph's fast path, graph.cu)
            self.params = cupy.zeros(4, np.float64)
        self.host = HostScalars(self.N_SCALARS, dt)

    def load(self, system):
        """Take one solve's right-hand side (copied into this state's own b) and array kind."""
        import cupy
        b = system.b
        if isinstance(b, np.ndarray):
            self.b.set(b, stream=self.stream)
        elif b.dtype == self.b.dtype and b.flags.c_contiguous:
            cupy.cuda.runtime.memcpyAsync(self.b.data.ptr, b.data.ptr, self.b.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToDevice,
                                          self.stream.ptr)
        else:
            with self.stream:
                cupy.copyto(self.b, b.reshape(self.n))
        for op in (self.A, self.AH) + getattr(self.pc, "operators", ()):
            if isinstance(op, ops.OperatorMatrix):
                op.on_device = system.out_cupy
        self.options = system.options        # the method's own parameters (GMRES's restart)

    def psolve(self, r, z):
        """z = M r: the preconditioner's stream face, on this state's executor."""
        self.pc.apply(self.ex, r, z)

    def rpsolve(self, r, z):
        """z = M^H r (BiCG's psolve of r~)."""
        self.pc.apply_adjoint(self.ex, r, z)

    def s(self, k: int):
        """Device scalar slot k, as a 1-element view (its pointer is what kernels take)."""
        return self.scal[k:k + 1]

    def vec(self, name: str):
        """A named work vector (rt, pt, qt, s, t, phat, ...) allocated on first use, poisoned
        with NaN. The CG vectors r, p, v, z are attributes."""
        v = self._vectors.get(name)
        if v is None:
            v = self._vectors[name] = poisoned(self.n, self.dtype, 1, self.stream)[0]
        return v

    def read_tau(self, sync):
        """Copy (tau, status) to the host and wait for them: the host-driven loops' one read."""
        tau, status = self.host.fetch(self.scal[TAU:STATUS + 1], self.stream, sync)
        return float(tau.real), int(status.real)

    def confirm_dot(self, a, b, sync):
        """The accurate <a, b> (dps::dot_accurate, one block), read back to the host: variant
        cublas's confirmation of a breakdown test that failed on a fast inner product (rho,
        <p~, q>, <r~, v>, <t, s>) before it reports -10 / -11 (a rare path; see common.cuh).
        Uses the RHO slot as scratch."""
        self.ex.count()
        ops.dot_accurate(a, b, self.s(RHO), self.stream)
        return self.host.fetch(self.s(RHO), self.stream, sync)[0]

    def residual(self, x):
        """Issue r = b - A x (v as scratch): the first step of every set-up."""
        ex = self.ex
        ex.copy(self.b, self.r)
        ex.spmv(self.A, x, self.v)
        ex.axpy(self.s(ONE), self.v, self.r, sign=-1.0)

    def cg_setup(self, x):
        """Issue the CG set-up with dpsolve's unfused kernels: r = b - A x, z = D^-1 r,
        sigma = <r, z>, tau = ||r||, status = 0, p = z. Shared by the host-driven variants."""
        ex, s, pre = self.ex, self.s, self.preconditioned
        self.residual(x)                                               # r = b - A x
        if pre:
            self.psolve(self.r, self.z)
        ex.dots(((self.r, self.r, s(RR)),) * pre + ((self.r, self.z, s(ZETA)),))
        ex.scalar("cg", "cg_start", self.dtype, s(ZETA), s(RR if pre else ZETA), s(SIGMA),
                  s(TAU), s(STATUS))
        ex.copy(self.z, self.p)

    # --- BiCG / BiCGStab on the host-driven variants ------------------------------------------

    def krylov_vectors(self):
        """Allocate (poisoned) the named work vectors of this state's method (its descriptor's
        ``gpu_vectors``), so that no allocation happens inside a measured run. BiCG's q is ``v``;
        z is ``r`` unpreconditioned."""
        m = method_table.get(self.method)
        names = m.gpu_vectors + (m.gpu_vectors_preconditioned if self.preconditioned else ())
        for name in names:
            self.vec(name)
        self.partial_sets(6)

    def partial_sets(self, k: int):
        """k separate DOT partial arrays of ops.DOT_MAX_PARTIALS values each (allocated once)."""
        m = ops.DOT_MAX_PARTIALS
        buf = getattr(self, "_krylov_partials", None)
        if buf is None or buf.size < k * m:
            import cupy
            with self.stream:
                buf = self._krylov_partials = cupy.zeros(max(k, 6) * m, self.dtype)
        return [buf[i * m:(i + 1) * m] for i in range(k)]

    @property
    def breakdown_tol(self):
        """SciPy's rhotol / omegatol, eps**2 of the working dtype (dpsolve.reference._util), as a
        scalar of its real type (what the kernels take)."""
        return ops.real_scalar(self.dtype, np.finfo(self.dtype).eps ** 2)

    def krylov_setup(self, x, zero=()):
        """Issue the BiCG / BiCGStab set-up with unfused kernels: r = b - A x, r~ = r, the
        vectors in ``zero`` set to 0 (p, p~, v: the first iteration's beta = 0 then gives p = z
        or p = r exactly), status = beta = omega = 0, tau = ||r||. Shared by cuda and merge."""
        ex, s = self.ex, self.s
        self.residual(x)                                               # r = b - A x
        ex.copy(self.r, self.vec("rt"))
        for v in zero:
            ex.fill(v, 0)
        ex.scalar("krylov", "krylov_start", self.dtype, s(STATUS), s(BI_BETA), s(OMEGA))
        ex.nrm2(self.r, s(TAU))


class GpuBackend(Backend):
    """A back end that runs on the GPU. A subclass runs a method by defining a function of the
    method's name, ``cg(self, state, x, *, atol, maxiter, sync, callback)``: defining the class
    enters it in the method table (dpsolve.methods), from which ``solve_loop`` dispatches."""

    State = GpuState
    formats = FORMATS            # the SpMV formats this variant runs
    takes_operator_A = False     # A as an operator, called every iteration (host-driven variants)
    takes_operator_M = False     # a general M, called every iteration (variants that do not fuse M)
    takes_stream_M = False       # a preconditioner of kernels (not pointwise): its stream face

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "name" in cls.__dict__:                 # a variant (not an abstract base)
            for m in method_table.names():
                fn = cls.__dict__.get(m)           # its own methods only, not inherited ones
                if callable(fn):
                    method_table.implement(m, cls.name, fn)

    def availability(self):
        st = device_status()
        if not st.ok:
            return False, st.reason
        return self.extra_availability()

    _available = None

    def extra_availability(self):
        """What this variant needs beyond a usable device: ``_probe()``, run once and kept."""
        if self._available is None:
            self._available = self._probe()
        return self._available

    @staticmethod
    def _probe():
        return True, None

    def why_not(self, system):
        """None if this back end can take ``system``, else the reason (for a clear error)."""
        if not method_table.implemented(system.method, self.name):
            takers = method_table.variants_of(system.method)
            return (f"variant {self.name!r} implements {', '.join(self.methods)}, "
                    f"not {system.method}; {system.method} runs on "
                    f"{', '.join(repr(v) for v in takers)}")
        if system.dtype not in GPU_DTYPES:
            return (f"variant {self.name!r} supports {', '.join(str(d) for d in GPU_DTYPES)}, not "
                    f"{system.dtype}; use variant='host'")
        if system.operator is not None and not self.takes_operator_A:
            return (f"variant {self.name!r} runs the solve on the GPU without the host and needs "
                    f"A as a matrix, not a LinearOperator; variants that call an operator every "
                    f"iteration: {_takers('takes_operator_A')}")
        M = system.M
        if M.calls_python and not self.takes_operator_M:
            return (f"variant {self.name!r} takes M=None, 'jacobi' or a diagonal (it fuses the "
                    f"Jacobi application into its kernels); a general preconditioner runs on "
                    f"{_takers('takes_operator_M')}")
        if not (M.pointwise or M.calls_python or self.takes_stream_M):
            return (f"variant {self.name!r} fuses pointwise preconditioners (None, 'jacobi', a "
                    f"diagonal) into its kernels and cannot run M={M.kind!r}, whose V-cycle or "
                    f"polynomial is a sequence of kernels; M={M.kind!r} runs on "
                    f"{_takers('takes_stream_M')}")
        return None

    def prepare(self, system, fmt):
        self.refuse(system)
        if fmt is not None and fmt not in self.formats:
            from . import VARIANT_NAMES, get_backend
            takers = [n for n in VARIANT_NAMES[1:] if fmt in getattr(get_backend(n), "formats", ())]
            raise ValueError(f"variant {self.name!r} runs formats {', '.join(self.formats)}, not "
                             f"{fmt!r}; {fmt!r} runs on {', '.join(repr(t) for t in takers)}")
        return self.State(system, fmt)

    def initial_x(self, system):
        import cupy
        with resources().stream:              # the solve's stream: ordered before its kernels
            if system.x0 is None:
                return cupy.zeros(system.n, dtype=system.dtype)
            return cupy.array(system.x0, dtype=system.dtype, copy=True)

    def load(self, state, system):
        state.load(system)

    def run(self, state, system, x, *, atol, maxiter, callback, sync, energy=False):
        import cupy
        if callback is not None and self.device_driven:
            raise ValueError(
                f"variant {self.name!r} runs the whole loop on the GPU and cannot call a Python "
                f"callback mid-solve; use a host-driven variant ('cublas', 'cuda', 'merge' or "
                f"'host') for callbacks")
        cb = None
        if callback is not None:
            # arrays reach the callback as the caller's kind (a method may pass a norm instead)
            cb = callback if system.out_cupy else (
                lambda xk: callback(xk.get() if hasattr(xk, "get") else xk))
        res = resources()
        # energy only on request: an NVML read costs milliseconds of host time
        meter = GpuEnergyMeter(nvml_index_of()) if energy else None
        t_start, t_end = res.t_start, res.t_end
        ex = state.ex
        launches0 = ex.launches
        stream = state.stream
        with SyncMode(sync, res) as sm, ex:            # the state's executor counts the launches
            if meter is not None:
                stream.synchronize()               # the window starts on an idle stream
                meter.start()
            with Stopwatch(None if energy else no_rapl()) as sw:
                t_start.record(stream)
                with stream:
                    result = self.solve_loop(state, x, atol=atol, maxiter=maxiter,
                                             sync=sm, callback=cb)
                t_end.record(stream)
                launches = ex.launches - launches0             # the iterations' own
                # the true residual ||b - A x|| is queued behind the solve and read with its
                # final wait: one host wait for both (its launches are the check's, not counted)
                rb = Readback(stream, res)
                k_res = self.queue_residual(state, x, rb)
                rb.fetch(sync)
                sm.waits += 1
                # device-driven variants return a closure that reads their result after this wait
                info, its, extra = result() if callable(result) else result
            joules = meter.stop() if meter is not None else None
        gpu_time = cupy.cuda.get_elapsed_time(t_start, t_end) * 1e-3
        if joules is not None and sw.wall < ENERGY_MIN_SECONDS:
            joules = None
        stats = {"wall_time": sw.wall, "gpu_time": gpu_time, "gpu_energy": joules,
                 "gpu_power": (joules / sw.wall) if joules is not None else None,
                 "host_cpu_time": sw.cpu, "host_energy": sw.host_energy,
                 "host_syncs": sm.waits, "host_launches": launches,
                 "device": device_status().name}
        stats.update(extra)
        return Run(x, info, its, stats, residual=self.residual_result(rb, k_res, state))

    def queue_residual(self, state, x, rb):
        """Queue ||b - A x||^2 into a readback slot (SpMV, then one partial-sum kernel and
        blas1's final sum); returns the slot. An operator A is applied by the host, here."""
        ops.spmv(state.A, x, state.v, stream=state.stream)
        k, slot = rb.take(state.dtype)
        ops.resid_norm2(state.b, state.v, slot, rb.res.partials(state.dtype), state.stream)
        return k

    @staticmethod
    def residual_result(rb, k, state) -> float:
        sq = float(np.real(rb.value(k, state.dtype)))
        if in_safe_range(sq, state.dtype):
            return float(np.sqrt(sq))
        # squares that over- or underflow (an exact zero included: 0 must mean r == 0, which
        # a tolerance of 0 accepts), or a non-finite x: the rare scaled path
        with state.stream:
            r = state.b - state.v
        return scaled_norm(r, state.stream)

    def solve_loop(self, state, x, *, atol, maxiter, sync, callback):
        """Run up to ``maxiter`` iterations; return (info, iterations, extra report fields), or a
        callable returning them once the run's final host wait is over (device-driven variants:
        their one wait is that one). Dispatches through the method table: ``(method, variant)``
        -> the implementation, each taking the same arguments."""
        fn = method_table.implementation(state.method, self.name)
        return fn(self, state, x, atol=atol, maxiter=maxiter, sync=sync, callback=callback)

    def residual_norm(self, state, system, x):
        rb = Readback(state.stream)
        k = self.queue_residual(state, x, rb)
        rb.fetch()
        return self.residual_result(rb, k, state)

    def to_output(self, x, system):
        from .._setup import download
        return x if system.out_cupy else download(x)


class HostDrivenBackend(GpuBackend):
    """A GPU back end whose loop runs on the host (cublas, cuda, merge): it runs every method,
    calls an operator A every iteration, and allocates the BiCG / BiCGStab work vectors when the
    system is prepared, outside the measured run."""

    takes_operator_A = True
    takes_stream_M = True

    def prepare(self, system, fmt):
        st = super().prepare(system, fmt)
        st.krylov_vectors()
        return st


def _takers(flag: str) -> str:
    from . import VARIANT_NAMES, get_backend
    names = [n for n in VARIANT_NAMES if n == "host" or getattr(get_backend(n), flag, False)]
    return ", ".join(repr(n) for n in names)


# step() status codes of the host-driven loops (abi.cuh), the same for every method; negative
# codes are SciPy's breakdown infos (-10, -11)
OK, CONVERGED_MID_STEP, BREAKDOWN = abi.DPS_OK, abi.DPS_MID_STEP, abi.DPS_BREAKDOWN


def head_test(j, tau, atol, maxiter):
    """The stop rule at the head of iteration j (tau = ||r_j||): (info, iterations, go). The
    device's twin is dpsolve/cuda/include/dpsolve/stop.cuh's ``dps::head_test``, the same tests
    in the same order, the reference solvers' order: a non-finite tau after a step is -10 at j;
    a spent budget is maxiter (whatever tau says); SciPy's strict ``tau < atol`` is 0 at j."""
    if j > 0 and not math.isfinite(tau):
        return BREAKDOWN, j, False
    if j >= maxiter:
        return maxiter, maxiter, False
    if tau < atol:
        return 0, j, False
    return 0, j, True


def host_loop(step, start, atol, maxiter, callback, x):
    """The host-driven loop of every method, written once (cublas, cuda and merge share it).

    ``start()`` issues the set-up and returns (tau, status). ``step()`` runs one iteration and
    returns (tau, status) read back on the host, where tau is the residual norm the reference
    tests at the top of the next iteration, and status is OK, a SciPy breakdown code (-10, -11:
    the step stopped where the reference stops, so x is what the reference returns; -10 also
    for a non-finite scalar), or CONVERGED_MID_STEP (BiCGStab's ||s|| < atol exit: x already
    holds the final update). After the step and its callback, ``head_test`` decides (a
    non-finite tau ends the solve with -10 after the callback, as every reference solver does;
    graph.cu's ``dps::step_test`` is this on the device).
    """
    tau, _ = start()
    j = 0
    while True:
        info, its, go = head_test(j, tau, atol, maxiter)
        if not go:
            return info, its
        tau, status = step()
        if status < 0:
            return status, j
        if status == CONVERGED_MID_STEP:
            return 0, j + 1
        if callback is not None:
            callback(x)
        j += 1
