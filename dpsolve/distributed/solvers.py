"""Distributed cg, bicg and bicgstab: SciPy's semantics on a :class:`DistributedMatrix` and each
rank's LOCAL vectors (its rows of b, x0 and x).

The ``host`` variant runs the very reference solvers of ``dpsolve.reference`` (through the
method table), with a :class:`DistributedSpace` as their ``space=``: their inner products and
norms become global all-reduces, ``x0.any()`` a global OR, and the SpMV is
``DistributedMatrix.matvec`` (halo exchange overlapped with the local product). Every rank runs
the same iteration on the same global scalars, so every rank takes the same branches and stops
at the same iteration with the same ``info``.

Determinism: the MPI transport's all-reduce sums the ranks' partial sums in rank order after an
all-gather (not ``MPI_Allreduce``, whose order is unspecified), and each rank's SpMV adds its
local then its remote part in a fixed order, so the same solve on the same number of ranks gives
the same bits, whatever the timing. On one rank the result is bit for bit the serial
``dpsolve.<method>(..., variant="host")``.

Errors never leave a rank behind:

* Before any work, one all-gather of every rank's signature (method, variant, transport, working
  dtype, global n and partition, rtol, atol, maxiter, preconditioner, single_reduction, and the
  rank's own checks: the length of its b and x0, NaN/Inf in them or in its rows of A, a zero
  diagonal entry for Jacobi). Any disagreement or bad value raises the same ValueError on every
  rank, naming the problem and the rank(s).
* A user callback or preconditioner that raises on one rank (any exception, KeyboardInterrupt
  and SystemExit included): that rank records the exception and stops calling user code; each
  all-reduce carries one extra slot with the ranks' error flags, so every rank stops at the
  next one, and a final all-gather after the solve catches an exception raised after the last.
  Every rank then raises :class:`DistributedError` (a RuntimeError) naming the rank(s) and
  their exceptions ("rank 1: raised in the callback: ValueError: ..."; "rank 1: stopped by
  KeyboardInterrupt in M"); on a rank that raised an ordinary exception, the original is its
  ``__cause__``, and a rank that raised KeyboardInterrupt or SystemExit raises that exception
  itself again instead (a Ctrl-C stays a KeyboardInterrupt, an exit keeps its code). The flag
  travels in the all-reduces the iteration makes anyway (variant ``cuda``: as NaN partial sums,
  see ``gpu.py``): no collective is added.
* A SIGINT (Ctrl-C sent to one rank's process) while the solve runs: the rank's SIGINT handler
  still runs at once, but the KeyboardInterrupt it raises is deferred to the next all-reduce
  (:class:`_Interrupts`), as if user code had raised it, unless user code is running then:
  that code is interrupted as usual. In the main thread, over a Python handler only.

GPU energy (``energy=True``, GPU variants only; variant ``host`` refuses it with the same
ValueError on every rank, as it runs on no GPU): each rank reads NVML's total-energy counter of
its own GPU (found by PCI bus id, named by NVML UUID) at the edges of its solve; the report
counts each physical GPU once (:func:`~dpsolve.distributed.report.aggregate_energy`: ranks
sharing a GPU read the same counter) and sums over the GPUs. Where NVML or the counter is
missing, or the solve is shorter than the counter's resolution, the report's ``energy_joules``
is None and ``energy_note`` says why.

The user's b and x0 are never modified. A must be a DistributedMatrix on every rank (the
communicator comes from it: a rank passing something else raises TypeError alone).
"""
from __future__ import annotations

import hashlib
import itertools
import math
import numbers
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np

from .. import methods as method_table
from .._errors import DistributedError
from .._frontend import restarted, tolerance_pair
from .._system import (_all_finite, abs_max, coerce, exponent_in_window, exponent_of,
                       exponent_shift, in_safe_range, largest_magnitude, solved_x0,
                       times_power_of_two, value_exponents, x0_in_range)
from .._block import is_block, non_finite_columns
from ..formats.csr import _is_cupy, array_module
from ..backends._gpu import ENERGY_MIN_SECONDS
from ..precond.diagonal import inverse_diagonal
from ..reference._util import _two_product, ldexp_or_inf
from ._collective import describe as _describe
from ._collective import disagreement, everywhere, format_problems
from .matrix import DistributedMatrix
from .energy import EnergyWindow
from .report import DistributedReport, aggregate_energy
from .transport import TRANSPORTS, Transport, make_transport

METHODS = ("cg", "bicg", "bicgstab")


class _Abort(Exception):
    """Raised on every rank at the same collective once a rank's error flag is seen."""


# --------------------------------------------------------------------------- the space
class DistributedSpace:
    """The reference solvers' ``space=`` over the ranks of a row-partitioned system.

    ``dot``, ``norm`` and ``any`` each make one all-reduce through ``transport`` of a float64
    buffer holding this rank's partial (the real and imaginary parts for complex data) plus one
    error-flag slot; ``dots`` makes one for several inner products (the single-reduction
    CG's), each the bits of a separate ``dot``. The partials are this rank's NumPy dot / sum of
    squares in the working dtype (as the serial solver computes them), summed over the ranks in
    float64 in rank order (``MpiTransport.allreduce``), then rounded to the working dtype: on
    one rank, bit for bit the serial result.

    ``dot_accurate``: each rank writes the exact value of its local sum of products as a
    nonoverlapping expansion of doubles (``hi, lo, ...``, found with ``math.fsum``: the
    correctly rounded sum, then the correctly rounded remainder, until it is 0; usually two
    terms), the ranks' expansions are all-gathered (two all-reduces: the lengths, then the
    terms, each rank's in its own slots) and ``math.fsum``-ed: the correctly rounded global
    sum, so a cancellation to exactly 0 across ranks is seen as 0.

    ``error`` holds ``(where, exception)`` once user code raised on this rank (or a SIGINT
    came, see :class:`_Interrupts`); the next collective then raises ``_Abort`` on every rank.
    ``in_user_code``: True while a user callback or preconditioner runs on this rank.
    """

    def __init__(self, transport: Transport, rank: int, size: int, dtype):
        self.transport, self.rank, self.size = transport, rank, size
        self.dtype = np.dtype(dtype)
        self.complex = self.dtype.kind == "c"
        self.real = np.dtype(self.dtype.char.lower())
        self.error = None
        self.in_user_code = False

    # ---- the one reduction, with the flag
    def reduce(self, values):
        """The global sums of the float64 ``values`` (this rank's partials), plus the error
        flag; raises ``_Abort`` on every rank if any rank's flag is set."""
        buf = np.zeros(len(values) + 1, dtype=np.float64)
        buf[:-1] = values
        buf[-1] = 1.0 if self.error is not None else 0.0
        self.transport.allreduce(buf)
        if buf[-1] != 0:
            raise _Abort()
        return buf[:-1]

    def dot(self, a, b):
        return self.dots([(a, b)])[0]

    def dots(self, pairs):
        """[<a, b> for (a, b) in pairs] in one all-reduce of all the partials (the flag slot
        once): each the bits of a separate ``dot``, since the sum over the ranks is taken slot by
        slot in the same order."""
        f = np.vdot if self.complex else np.dot
        local = [f(a, b) for a, b in pairs]
        if self.complex:
            s = self.reduce([v for c in local for v in (c.real, c.imag)])
            return [type(c)(complex(s[2 * i], s[2 * i + 1])) for i, c in enumerate(local)]
        s = self.reduce(local)
        return [type(c)(s[i]) for i, c in enumerate(local)]

    def norm(self, r):
        # np.linalg.norm's own sum of squares, so one rank gives exactly the serial norm; a GPU
        # variant's device vector (b): CuPy's, as its true residual (gpu._true_residual)
        if _is_cupy(r):
            import cupy
            sq = float(cupy.vdot(r, r).real) if r.size else 0.0
        elif self.complex:
            re, im = r.real, r.imag
            sq = re.dot(re) + im.dot(im)
        else:
            sq = r.dot(r)
        total = self.reduce([sq])[0]
        return float(np.sqrt(self.real.type(total)))

    def any(self, x):
        return bool(self.reduce([1.0 if x.any() else 0.0])[0] > 0)

    def dot_accurate(self, a, b):
        dt = np.result_type(a, b)
        try:
            if self.complex or np.iscomplexobj(a) or np.iscomplexobj(b):
                a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
                parts = [_expansion([(a.real, b.real), (a.imag, b.imag)]),
                         _expansion([(a.real, b.imag), (-a.imag, b.real)])]
            else:
                parts = [_expansion([(a, b)])]
        except (OverflowError, ValueError) as e:       # fsum's intermediate overflow
            self.error = self.error or ("dot_accurate", e)
            parts = [[]] * (2 if self.complex else 1)
        k = len(parts)
        counts = np.zeros(self.size * k)
        counts[self.rank * k:(self.rank + 1) * k] = [len(p) for p in parts]
        counts = self.reduce(counts)
        width = int(counts.max()) if counts.size else 0
        terms = np.zeros(self.size * k * width)
        for i, p in enumerate(parts):
            at = (self.rank * k + i) * width
            terms[at:at + len(p)] = p
        terms = self.reduce(terms).reshape(self.size, k, width) if width else \
            np.zeros((self.size, k, 0))
        sums = [math.fsum(terms[:, i, :].ravel().tolist()) for i in range(k)]
        return dt.type(complex(sums[0], sums[1]) if k == 2 else sums[0])


def _expansion(pairs) -> list:
    """The exact sum of x * y over the real array pairs, as a nonoverlapping list of doubles
    (largest first; empty for 0)."""
    terms = []
    for x, y in pairs:
        p, e = _two_product(np.asarray(x, np.float64), np.asarray(y, np.float64))
        terms += (p, e)
    values = np.concatenate(terms).tolist() if terms else []
    out = []
    rest = math.fsum(values)
    while rest != 0.0 and len(out) < 128:
        out.append(rest)
        rest = math.fsum(itertools.chain(values, (-v for v in out)))
    return out


# --------------------------------------------------------------------------- the job
@dataclass
class DistributedJob:
    """A checked solve, as a variant gets it (``VARIANTS[name](job) -> Outcome``).

    ``A`` is in the working dtype; ``b`` (and ``x0``, or None) are private 1-D copies of this
    rank's rows in it (NumPy; CuPy on this rank's GPU for the GPU variants); ``tol`` is
    max(atol, rtol * ||b||) with the global norm; ``precond`` is "none", "jacobi" (``inv_diag``
    this rank's D^-1) or "callable" (``psolve``/``rpsolve``, already guarded); ``callback``
    (guarded) takes the local x.
    ``space`` carries the error flag: a variant's own collectives should all-reduce through
    ``space.reduce`` (or set and send the flag likewise) so that an error stops every rank.
    ``single_reduction`` (cg only): run Chronopoulos & Gear's CG, one all-reduce per iteration.
    """
    method: str
    A: DistributedMatrix
    b: object                     # np.ndarray, or a CuPy array (GPU variants)
    x0: object
    dtype: np.dtype
    tol: float
    maxiter: int
    precond: str
    inv_diag: np.ndarray | None
    psolve: object
    rpsolve: object
    callback: object
    transport: Transport
    space: DistributedSpace
    format: str = "auto"          # the GPU variants' SpMV format of the local part
    single_reduction: bool = False   # cg: the single-reduction CG (dpsolve/methods/cg1)
    cache: object = None          # a prepared system's SetupCache (dpsolve/distributed/prepared.py)

    def initial_x(self):
        """x0 (a copy), or zeros: where b is (NumPy, or CuPy for a GPU variant)."""
        if self.x0 is not None:
            return self.x0.copy()
        return array_module(self.b).zeros(self.A.n_local, self.dtype)


@dataclass
class Outcome:
    x: object                # this rank's rows of x
    info: int
    iterations: int
    residual_norm: float     # the true global ||b - A x||
    restarts: int = 0


def run_host(job: DistributedJob) -> Outcome:
    """The ``host`` variant: the reference solver with the distributed space and SpMV, and
    dpsolve's restarts from the true residual (``dpsolve._frontend.restarted``); with
    ``job.single_reduction``, ``dpsolve.methods.cg1``'s reference."""
    A, tr, space = job.A, job.transport, job.space
    if job.single_reduction:
        from ..methods.cg1.reference import cg1 as solver
    else:
        solver = method_table.get(job.method).reference_solver()

    def matvec(v):
        return A.matvec(v, tr)
    kw = dict(psolve=job.psolve, callback=job.callback, space=space)
    if method_table.get(job.method).adjoint:
        AH = _adjoint(job)
        kw.update(rmatvec=lambda v: AH.matvec(v, tr), rpsolve=job.rpsolve)
    x = job.initial_x()

    def run_once(budget):
        _, info, its = solver(matvec, job.b, x, atol=job.tol, maxiter=budget, **kw)  # x in place
        return info, its

    t0 = time.perf_counter()
    info, total, rnorm, restarts = restarted(
        run_once, lambda: space.norm(job.b - matvec(x)), job.tol, job.maxiter)
    out = Outcome(x, info, total, rnorm, restarts)
    out.seconds = time.perf_counter() - t0
    return out


def _adjoint(job: DistributedJob) -> DistributedMatrix:
    """A^H of the job's A (collective: an all-to-all of the entries), kept in a prepared
    system's cache for its later solves (every rank alike)."""
    cache = job.cache
    if cache is None:
        return job.A.conj_transpose()
    key = id(job.A)                  # the cache holds A too (``matrices``): the id stays its own
    if key not in cache.adjoints:
        cache.adjoints[key] = job.A.conj_transpose()
    return cache.adjoints[key]


# variant name -> fn(job) -> Outcome; GPU variants register themselves here
def run_cuda(job: DistributedJob) -> Outcome:
    """The ``cuda`` variant: the single-GPU ``cuda`` variant's loops over a distributed
    executor (``gpu.py``)."""
    from .gpu import run_cuda as run
    return run(job)


def run_graph(job: DistributedJob) -> Outcome:
    """The ``graph`` variant (CG, transport ``nccl``): one conditional-WHILE CUDA graph per rank
    holding the kernels and the NCCL calls (``gpu.py``)."""
    from .gpu import run_graph as run
    return run(job)


VARIANTS = {"host": run_host, "cuda": run_cuda, "graph": run_graph}
GPU_VARIANTS = ("cuda", "graph")
DEVICE_VECTORS = ("cuda", "graph")     # the variants whose job holds b and x0 on the GPU (CuPy)


# --------------------------------------------------------------------------- checks
def _host_array(v):
    if hasattr(v, "__cuda_array_interface__") and not isinstance(v, np.ndarray):
        return v.get()
    return np.asarray(v)


def _local_vector(v, n_local, what, device=False):
    """(array or None, problem or None): ``v`` as a checked 1-D array (not yet cast): NumPy, or
    for a GPU variant (``device``) a CuPy ``v`` where it is, its entries tested there."""
    v, problem = _numeric(v, what, device)
    if problem:
        return None, problem
    if v.shape not in ((n_local,), (n_local, 1)):
        return None, (f"{what} has shape {v.shape}, but this rank owns {n_local} rows of A "
                      f"(pass each rank's own rows of {what})")
    v = v.reshape(-1)
    if not _finite(v):
        return None, f"{what} contains NaN or Inf"
    return v, None


def _numeric(v, what, device):
    """(array, None) or (None, problem): ``v`` as an array of a dtype the solvers take (NumPy,
    or for a GPU variant, ``device``, a CuPy ``v`` where it is): a vector's and a block's
    first check."""
    if not (device and _is_cupy(v)):
        v = _host_array(v)
    if v.dtype == object or v.dtype.kind not in "biufc" or v.dtype.char in "gG":
        return None, f"{what} has unsupported dtype {v.dtype}"
    return v, None


def block_width(b, n_local):
    """k where ``b`` is this rank's rows of a block of right-hand sides, shape (n_local, k) with
    k != 1 (the single-GPU front end's ``_block.is_block``, on this rank's rows); else None."""
    if not is_block(b):
        return None
    rows, k = getattr(b, "shape", None) or np.shape(b)
    return k if rows == n_local else None


def _local_block(v, n_local, what, device=False, k=None):
    """(array or None, problem or None): a block ``v`` (n_local, k) checked as
    :func:`_local_vector` checks a vector (x0: ``k`` columns, b's), non-finite entries named
    by column (``_block.non_finite_columns``, the single-GPU block's words)."""
    v, problem = _numeric(v, what, device)
    if problem:
        return None, problem
    if v.ndim != 2 or v.shape[0] != n_local or (k is not None and v.shape[1] != k):
        return None, (f"{what} has shape {v.shape}, but b is this rank's {n_local} rows of {k} "
                      f"right-hand sides: {what} must have b's shape")
    if not _finite(v):
        bad = np.flatnonzero(~_host_array(array_module(v).isfinite(v).all(axis=0)))
        return None, non_finite_columns(bad, what)
    return v, None


def _finite(v) -> bool:
    """Whether every entry of a 1-D NumPy or CuPy vector is finite (a CuPy one on its own
    device: dpsolve's one-kernel test; float16, which it has no kernel for, through CuPy)."""
    if not _is_cupy(v):
        return bool(np.isfinite(v).all())
    import cupy
    with v.device:
        return bool(cupy.isfinite(v).all()) if v.dtype.char == "e" else _all_finite(v)


def _working(v, dtype, device):
    """A private copy of a checked b or x0 in the working ``dtype``: for a GPU variant
    (``device``) on this rank's GPU (a NumPy vector uploaded, a CuPy one copied device to
    device, on the caller's current stream), else in host memory."""
    if not device:
        return v.astype(dtype, copy=True)
    import cupy
    if _is_cupy(v):
        return cupy.array(v, dtype=dtype, copy=True)
    from .._setup import upload             # through pinned staging (a pageable copy: 4 GB/s)
    return upload([np.asarray(v, dtype)], cupy.cuda.get_current_stream())[0]


def _tolerance_problem(name, value):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or np.isnan(value) \
            or value < 0:
        return f"invalid `{name}`={value!r}; `{name}` must be a real, non-negative number"
    return None


def _digest(partition) -> str:
    return hashlib.sha1(partition.offsets.tobytes()).hexdigest()[:12]


def magnitudes(A) -> tuple:
    """max|component| of this rank's local and remote values (inf or NaN where one is not
    finite): :func:`_check`'s pass over A, made once by a prepared system."""
    return largest_magnitude(A.local.data), largest_magnitude(A.remote.data)


def _check(method, A, b, x0, rtol, atol, maxiter, M, callback, variant, transport,
           energy=False, single_reduction=False, mags=None):
    """This rank's signature and checked inputs: (signature, b, x0, dtype, inv_diag, A's
    magnitudes); b and x0 2-D where b is a block (``block_width``).
    Never raises: the problems go into the signature, for :func:`_agree_signatures`.
    ``mags``: :func:`magnitudes` of A where already known."""
    problems = []
    n_local = A.n_local
    if method not in METHODS:
        problems.append(f"unknown distributed method {method!r}; expected one of "
                        f"{', '.join(METHODS)}")
    if not isinstance(variant, str) or variant not in VARIANTS:
        problems.append(f"unknown distributed variant {variant!r}; the distributed variants "
                        f"are: {', '.join(VARIANTS)}")
    if isinstance(transport, Transport):
        tname = transport.name
        if transport.closed:
            problems.append(f"the {tname} transport passed is closed; make a new one (or pass "
                            f"its name: a transport made for the call)")
    elif isinstance(transport, str) and transport in TRANSPORTS:
        tname = transport
    else:
        tname = repr(transport)
        problems.append(f"unknown transport {transport!r}; expected one of "
                        f"{', '.join(TRANSPORTS)} or a Transport")
    if tname == "nccl" and variant not in GPU_VARIANTS:
        problems.append(f"transport 'nccl' moves device arrays: use variant "
                        f"{' or '.join(map(repr, GPU_VARIANTS))}, or transport 'mpi'")
    if variant == "graph":
        if tname != "nccl":
            problems.append(f"variant 'graph' captures the NCCL calls into a CUDA graph: it "
                            f"needs transport 'nccl', not {tname} (whose host calls cannot be "
                            f"captured); use variant 'cuda' with transport {tname}")
        if method != "cg":
            problems.append(f"variant 'graph' runs cg; use variant 'cuda' for {method}")
        if callback is not None:
            problems.append("variant 'graph' runs the whole loop on the GPU and cannot call a "
                            "Python callback; use variant 'cuda' for callbacks")
        if M is not None and not (isinstance(M, str) and M == "jacobi"):
            problems.append("variant 'graph' takes M=None or 'jacobi' (a Python M cannot run "
                            "inside a graph)")
    if variant in GPU_VARIANTS:
        from .._device import status as device_status
        st = device_status()
        if not st.ok:
            problems.append(f"variant {variant!r} needs a GPU on every rank: {st.reason}")
    if not isinstance(energy, (bool, np.bool_)):
        problems.append(f"energy must be True or False, got {energy!r}")
    elif energy and isinstance(variant, str) and variant in VARIANTS \
            and variant not in GPU_VARIANTS:
        problems.append(f"energy=True measures each rank's GPU energy (NVML), but variant "
                        f"{variant!r} runs on no GPU: use variant "
                        f"{' or '.join(map(repr, GPU_VARIANTS))}, or leave energy off")
    for name, value in (("rtol", rtol), ("atol", atol)):
        p = _tolerance_problem(name, value)
        if p:
            problems.append(p)
    if maxiter is not None and (isinstance(maxiter, bool)
                                or not isinstance(maxiter, numbers.Integral) or maxiter < 1):
        problems.append(f"maxiter must be a positive integer or None, got {maxiter!r}")
    if callback is not None and not callable(callback):
        problems.append(f"callback must be callable, got {type(callback).__name__}")
    if not isinstance(single_reduction, (bool, np.bool_)):
        problems.append(f"single_reduction must be True or False, got {single_reduction!r}")
    elif single_reduction and method != "cg":
        problems.append(f"single_reduction is a keyword of cg only, not of {method}")
    elif single_reduction and variant == "graph":
        problems.append("variant 'graph' captures the two-reduction CG; single_reduction runs "
                        "on variants 'cuda' and 'host'")
    start, stop = A.partition.rows(A.rank)
    if n_local != stop - start or A.remote.shape != (n_local, A.ghosts.size):
        problems.append(f"A holds {n_local} rows, but its partition gives this rank "
                        f"{stop - start}")
    # b, x0 and the working dtype
    dtype = None
    device = isinstance(variant, str) and variant in DEVICE_VECTORS
    k = block_width(b, n_local)                  # b (n_local, k), k != 1: k right-hand sides
    bv, p = (_local_vector(b, n_local, "b", device) if k is None
             else _local_block(b, n_local, "b", device))
    if p:
        problems.append(p)
    x0v = None
    if x0 is not None:
        if isinstance(x0, str):
            problems.append(f"x0={x0!r} is not supported; pass an array or None")
        else:
            x0v, p = (_local_vector(x0, n_local, "x0", device) if k is None
                      else _local_block(x0, n_local, "x0", device, k))
            if p:
                problems.append(p)
    if bv is not None:
        dtype = coerce(A.dtype.char, bv.dtype.char)
    mags = magnitudes(A) if mags is None else mags
    if not all(map(math.isfinite, mags)):
        problems.append("A contains NaN or Inf in this rank's rows")
    # the preconditioner
    inv_diag = None
    if M is None:
        kind = "none"
    elif isinstance(M, str):
        kind = M
        if M in ("amg", "chebyshev"):
            problems.append(f"M={M!r} is not distributed yet: dpsolve.distributed takes None, "
                            f"'jacobi' or a callable on this rank's vectors (M={M!r} runs on "
                            f"one GPU: dpsolve.cg)")
        elif M != "jacobi":
            problems.append(f"unknown preconditioner M={M!r}; expected None, 'jacobi' or a "
                            f"callable on this rank's vectors")
        elif dtype is not None:
            inv_diag, why = inverse_diagonal(A.diagonal().astype(dtype), dtype,
                                             label="global row", start=start)
            if why:
                problems.append(why)
    elif callable(M) or hasattr(M, "matvec"):
        kind = "callable"
        if method == "bicg" and not hasattr(M, "rmatvec"):
            problems.append("bicg needs M^H: pass M as an object with .matvec and .rmatvec "
                            "(a LinearOperator on this rank's rows), or 'jacobi'")
    else:
        kind = repr(type(M).__name__)
        problems.append(f"M must be None, 'jacobi' or a callable on this rank's vectors, got "
                        f"{type(M).__name__}")
    sig = {
        "method": method, "variant": variant if isinstance(variant, str) else repr(variant),
        "transport": tname, "dtype": dtype.name if dtype is not None else None,
        "n": A.n, "ranks": A.partition.size, "partition": _digest(A.partition),
        "rtol": rtol if isinstance(rtol, numbers.Real) else repr(rtol),
        "atol": atol if isinstance(atol, numbers.Real) else repr(atol),
        "maxiter": maxiter if isinstance(maxiter, numbers.Integral) or maxiter is None
        else repr(maxiter),
        "M": kind, "energy": bool(energy) if isinstance(energy, (bool, np.bool_))
        else repr(energy),
        "single_reduction": (bool(single_reduction)
                             if isinstance(single_reduction, (bool, np.bool_))
                             else repr(single_reduction)),
        "columns": "one vector" if k is None else k,
        "problems": "; ".join(problems) or None,
    }
    return sig, bv, x0v, dtype, inv_diag, mags


_AGREE = (("method", "method"), ("variant", "variant"), ("transport", "transport"),
          ("dtype", "the working dtype"), ("n", "the global n"), ("ranks", "the number of ranks"),
          ("partition", "the partition (digest of its row offsets)"), ("rtol", "rtol"),
          ("atol", "atol"), ("maxiter", "maxiter"), ("M", "the preconditioner kind"),
          ("energy", "energy"), ("single_reduction", "single_reduction"),
          ("columns", "the right-hand sides (b's columns)"))


def _agree_signatures(sigs):
    """Raise the same ValueError on every rank when any rank has a problem or the ranks
    disagree on what must be the same everywhere."""
    msgs = []
    local = format_problems([s["problems"] for s in sigs])
    if local:
        msgs.append(local)
    for key, what in _AGREE:
        if key == "dtype" and any(s["dtype"] is None for s in sigs):
            continue                            # a bad b, already named
        d = disagreement(what, [s[key] for s in sigs])
        if d:
            msgs.append(d)
    if msgs:
        # one message for every rank: it does not name the function, which may differ
        raise everywhere(ValueError(f"dpsolve.distributed: {'; '.join(msgs)}"))


# --------------------------------------------------------------------------- the driver
def _guard(space, fn, where, fallback, vector_out=False):
    """``fn`` on this rank's vectors; an exception is recorded in ``space.error`` (once) and
    ``fallback(v)`` returned, and ``fn`` is not called again: the next collective stops
    every rank. Any exception: KeyboardInterrupt and SystemExit too (raised again on this rank
    once every rank has stopped). ``vector_out``: ``fn`` must return a vector of ``v``'s
    length (a preconditioner)."""
    def call(v):
        if space.error is not None:
            return fallback(v)
        try:
            space.in_user_code = True           # a SIGINT now interrupts fn (_Interrupts)
            try:
                out = fn(v)
            finally:
                space.in_user_code = False
            if vector_out:
                out = np.asarray(out)
                if out.shape not in (v.shape, v.shape + (1,)):
                    raise ValueError(f"{where} returned shape {out.shape} for a vector of "
                                     f"shape {v.shape}")
                out = out.reshape(v.shape)
            return out
        except BaseException as e:
            space.error = (where, e)
            return fallback(v)
    return call


def _failure(where, exc) -> str:
    """How the error messages name what happened on a rank."""
    if isinstance(exc, Exception):
        return f"raised in {where}: {_describe(exc)}"
    return f"stopped by {_describe(exc)} in {where}"       # KeyboardInterrupt, SystemExit


class _Interrupts:
    """SIGINT during a distributed solve, deferred to the next collective (``with``; the main
    thread only, where Python runs its signal handlers, and only over a Python handler).

    Python raises the handler's KeyboardInterrupt wherever this rank is: in the middle of the
    solver, one rank would leave the collectives that the others then wait in forever. So for
    the solve's duration the handler is wrapped: it still runs at once, but what it raises is
    recorded as this rank's error (``(where, exception)``, in the solve's space once there is
    one, see :meth:`attach`) and this rank runs on to the next all-reduce, whose flag stops
    every rank; the KeyboardInterrupt is then raised again on this rank. While user code runs
    (``space.in_user_code``) the handler raises as usual, interrupting that code, and
    ``_guard`` records it. An error recorded too late to be reported (after the final status
    was sent, or before the space existed when the solve failed earlier) is raised on leaving
    the ``with``, when this rank has no collective left."""

    def __init__(self):
        self.error = None                 # (where, exception), before a space takes over
        self.space = None
        self.reported = None              # the error sent with the final status, if any
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self.previous = previous
                signal.signal(signal.SIGINT, self._handler)
        return self

    def attach(self, space) -> None:
        """From now on, record into ``space`` (an interrupt already recorded goes with it)."""
        space.error = space.error or self.error
        self.space = space

    def _handler(self, signum, frame):
        sink = self.space or self
        if getattr(sink, "in_user_code", False):
            return self.previous(signum, frame)
        try:
            self.previous(signum, frame)
        except BaseException as e:
            if sink.error is None:
                sink.error = ("a SIGINT handler", e)

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        error = (self.space or self).error
        if error is not None and error is not self.reported:
            raise error[1]
        return False


def _none(v):
    return None


def _copy(v):
    return v.copy()


def require_distributed(A) -> None:
    """TypeError unless ``A`` is a DistributedMatrix (raised by this rank alone: the
    communicator comes from A)."""
    if not isinstance(A, DistributedMatrix):
        raise TypeError(f"A must be a DistributedMatrix (on every rank), got "
                        f"{type(A).__name__}")


def solve(method, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
          variant="host", transport="mpi", format="auto", full_output=False, energy=False,
          single_reduction=False, cache=None):
    """The distributed solve of ``method`` (see the module docstring). Collective.
    ``single_reduction`` (cg only): Chronopoulos & Gear's CG, one all-reduce per iteration.
    ``cache``: a prepared system's ``SetupCache`` (``prepared.py``): what depends on A alone
    is made once and kept there."""
    t0 = time.perf_counter()
    require_distributed(A)
    with _Interrupts() as interrupts:
        return _solve(method, A, b, x0, rtol, atol, maxiter, M, callback, variant, transport,
                      format, full_output, energy, single_reduction, t0, interrupts, cache)


def _solve(method, A, b, x0, rtol, atol, maxiter, M, callback, variant, transport, format,
           full_output, energy, single_reduction, t0, interrupts, cache=None):
    """:func:`solve`'s work, with SIGINT deferred by ``interrupts``."""
    comm = A.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    mags = None
    if cache is not None:
        if cache.mags is None:
            cache.mags = magnitudes(A)
        mags = cache.mags
    sig, bv, x0v, dtype, inv_diag, mags = _check(method, A, b, x0, rtol, atol, maxiter, M,
                                                 callback, variant, transport, energy,
                                                 single_reduction, mags)
    _agree_signatures(comm.allgather(sig))
    if sig["columns"] != "one vector":            # every rank: a block of the same k columns
        return _solve_columns(method, A, bv, x0v, dtype, mags, cache, t0, interrupts, dict(
            rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback, variant=variant,
            transport=transport, format=format, full_output=full_output, energy=energy,
            single_reduction=single_reduction))
    amax = max(mags)                              # (max and min: the scaling's pass too)
    # every rank is here, checked: the window's device lookup is collective
    window = EnergyWindow(comm) if energy else None

    tr, owned = make_transport(transport, comm)
    before = tr.stats.copy()
    space = DistributedSpace(tr, rank, size, dtype)
    interrupts.attach(space)
    out_device = hasattr(b, "__cuda_array_interface__") and not isinstance(b, np.ndarray)
    device = variant in DEVICE_VECTORS        # b and x0 on the GPU from here: a CuPy b never
    if device:                                # leaves it, a NumPy b is uploaded once
        from .gpu import select_device
        select_device(comm)                   # (collective: every rank has this variant)
    bw = _working(bv, dtype, device)
    x0w = _working(x0v, dtype, device) if x0v is not None else None
    scaling = M is None or (isinstance(M, str) and M == "jacobi")    # _scaled_matrix's rule
    if cache is not None and (dtype, scaling) in cache.matrices:      # every rank alike
        Aw, ascale = cache.matrices[dtype, scaling]
    else:
        Aw, ascale = _scaled_matrix(comm, A.astype(dtype), dtype, M, amax)  # A / 2^ascale
        if cache is not None:
            cache.matrices[dtype, scaling] = Aw, ascale
    if ascale and inv_diag is not None:
        inv_diag = (1.0 / Aw.diagonal()).astype(dtype)
    psolve = rpsolve = None
    if inv_diag is not None:
        inv_h = np.conj(inv_diag)
        psolve, rpsolve = (lambda r: inv_diag * r), (lambda r: inv_h * r)
    elif M is not None and not isinstance(M, str):
        fwd = M.matvec if hasattr(M, "matvec") else M
        psolve = _guard(space, fwd, "M", _copy, vector_out=True)
        if hasattr(M, "rmatvec"):
            rpsolve = _guard(space, M.rmatvec, "M^H", _copy, vector_out=True)
    scale = [0]                           # b is solved as b / 2^scale: see _scaled_rhs
    if callback is not None:
        user_cb = callback
        errstate = np.geterr()            # the caller's, for the callback: the solve ignores
                                          # floating-point warnings, as the single-GPU one

        def callback(xk):                 # the caller's scale, as the single-GPU front end
            e = scale[0] - ascale
            xk = times_power_of_two(xk, e) if e else xk
            with np.errstate(**errstate):
                return user_cb(xk)
    cb = _guard(space, callback, "the callback", _none) if callback is not None else None
    outcome, tol, past = None, None, False
    try:
        bw, bnorm, scale[0] = _scaled_rhs(space, comm, bw)
        x0_given = x0w
        x0w = solved_x0(x0w, ascale, scale[0])           # x0 * 2^(f - e), in one product
        # an x0 that product carries past the largest float stops at once (_frontend.at_once);
        # one all-reduce, on the scaled path only (every rank has the same f - e)
        past = ascale != scale[0] and space.any(np.array([not x0_in_range(x0w, x0_given)]))
        tol, tol_solved = tolerance_pair(bnorm, scale[0], atol, rtol)
        if device:           # b and x0 were made on the caller's stream, which the variant's
            import cupy      # own (non-blocking) stream does not follow: finished here (the
            cupy.cuda.get_current_stream().synchronize()     # norm of b waited for them)
        job = DistributedJob(method, Aw, bw, x0w, dtype, tol_solved,
                             10 * A.n if maxiter is None else int(maxiter),
                             "jacobi" if inv_diag is not None else
                             ("callable" if psolve is not None else "none"),
                             inv_diag, psolve, rpsolve, cb, tr, space, format,
                             bool(single_reduction), cache)
        if window is not None:      # just after the all-reduce of ||b||: the windows open together
            window.start()
        try:
            if bnorm == 0:                      # SciPy: a zero b returns zeros at once
                outcome = Outcome(np.zeros(A.n_local, dtype), 0, 0, 0.0)
            elif past:                          # -10 (0: tol inf), x = x0 as given
                outcome = Outcome(np.zeros(A.n_local, dtype) if x0_given is None
                                  else x0_given, 0 if tol_solved == math.inf else -10, 0,
                                  math.nan)
            else:
                with np.errstate(all="ignore"):     # a breakdown is a code, not a warning
                    outcome = VARIANTS[variant](job)
                    if ascale != scale[0]:
                        _unscaled_check(outcome, job, Aw, tr, space, scale[0] - ascale)
        finally:
            if window is not None and window.t_start is not None:
                window.stop()
    except _Abort:
        pass
    except Exception as e:
        # this rank alone failed outside user code (a bug, memory): it reports the error at
        # the final status below; the other ranks get there only if they were not waiting in
        # a collective this rank left
        space.error = space.error or ("the solver", e)
    stats = tr.stats.since(before)
    wall = time.perf_counter() - t0
    interrupts.reported = space.error
    mine = {"error": None if space.error is None else _failure(*space.error),
            "wall": wall, "solve": getattr(outcome, "seconds", None),
            "comm": (stats.allreduce_seconds + stats.halo_seconds
                     if getattr(outcome, "comm_timed", True) else None),
            "allreduce_seconds": stats.allreduce_seconds, "halo_seconds": stats.halo_seconds,
            "allreduce_wait_seconds": stats.allreduce_wait_seconds,
            "allreduce_calls": stats.allreduce_calls, "halo_calls": stats.halo_calls,
            "bytes": stats.bytes_sent, "nnz": A.nnz_local, "rows": A.n_local,
            "energy": window.record() if window is not None else None}
    try:
        facts = comm.allgather(mine)              # the final status, and the report
    finally:
        if owned:
            tr.close()
    errors = [f["error"] for f in facts]
    if any(errors) and cache is not None:
        cache.drop_states()          # on every rank (the errors are everyone's): built anew
    if any(errors):
        err = everywhere(DistributedError(f"dpsolve.distributed.{method}: "
                                          f"{format_problems(errors)}"))
        err.errors = {r: e for r, e in enumerate(errors) if e}
        err.ranks = tuple(err.errors)
        if space.error is None:
            raise err
        original = space.error[1]
        if not isinstance(original, Exception):     # KeyboardInterrupt, SystemExit: as they are
            raise original
        raise err from original
    x = outcome.x
    if out_device:
        import cupy
        x = cupy.asarray(x)
    elif not isinstance(x, np.ndarray):           # a GPU variant's x, for NumPy's b
        from .._setup import download
        x = download(x)
    if scale[0] != ascale and not past:
        with np.errstate(over="ignore", invalid="ignore"):   # past the largest float: inf
            x = times_power_of_two(x, scale[0] - ascale)
    if scale[0]:
        outcome.residual_norm = ldexp_or_inf(outcome.residual_norm, scale[0])
    if not full_output:
        return x, outcome.info
    walls = tuple(f["wall"] for f in facts)
    solves = tuple(f["solve"] for f in facts)
    comms = tuple(f["comm"] for f in facts)
    report = DistributedReport(
        method=method, variant=variant, transport=tr.name, ranks=size, dtype=dtype.name,
        n=A.n, nnz=sum(f["nnz"] for f in facts), iterations=outcome.iterations,
        single_reduction=bool(single_reduction),
        info=outcome.info, converged=outcome.info == 0, residual_norm=outcome.residual_norm,
        tolerance=tol, restarts=outcome.restarts, wall_times=walls, comm_times=comms,
        solve_times=solves, solve_time=None if None in solves else min(solves),
        wall_time=max(walls), comm_time=None if None in comms else max(comms),
        allreduce_calls=mine["allreduce_calls"], halo_calls=mine["halo_calls"],
        allreduce_seconds=tuple(f["allreduce_seconds"] for f in facts),
        allreduce_wait_seconds=tuple(f["allreduce_wait_seconds"] for f in facts),
        halo_seconds=tuple(f["halo_seconds"] for f in facts),
        bytes_sent=sum(f["bytes"] for f in facts),
        bytes_sent_per_rank=tuple(f["bytes"] for f in facts),
        rows_per_rank=tuple(f["rows"] for f in facts))
    if energy:
        report.energy_joules, report.energy_per_gpu, report.energy_note = aggregate_energy(
            [f["energy"] for f in facts], ENERGY_MIN_SECONDS)
    return x, outcome.info, report


def _solve_columns(method, A, B, X0, dtype, mags, cache, t0, interrupts, opts):
    """A block b (this rank's rows of k right-hand sides, checked): the columns solved one
    after another on one set-up, as PETSc's KSPMatSolve falls back to column by column: A's
    checks, its working copy and (cuda, graph) rows, halo and graph made once, in ``cache`` (a
    prepared system's, else one for this call, freed at its end), one transport. Each column
    is the one-shot solve of that column, bit for bit. The callback receives X (n_local, k):
    the columns before the one in progress final, those after it still x0. Returns (X, info)
    or (X, info, DistributedBlockReport); X of b's kind (NumPy or CuPy)."""
    from .prepared import SetupCache
    from .report import DistributedBlockReport
    own = cache is None
    if own:
        cache = SetupCache()
        cache.mags = mags
    tr, owned = make_transport(opts["transport"], A.comm)
    xp = array_module(B)
    k = B.shape[1]
    X = xp.zeros(B.shape, dtype)
    if X0 is not None:
        X[...] = _as_kind(X0, xp)
    info = np.zeros(k, dtype=np.int64)
    report = DistributedBlockReport()
    user_cb = opts["callback"]
    try:
        for j in range(k):
            cb = None
            if user_cb is not None:
                def cb(xk, j=j):
                    X[:, j] = _as_kind(xk, xp)
                    return user_cb(X)
            x0j = None if X0 is None else array_module(X0).ascontiguousarray(X0[:, j])
            x, info[j], rep = _solve(
                method, A, xp.ascontiguousarray(B[:, j]), x0j, opts["rtol"], opts["atol"],
                opts["maxiter"], opts["M"], cb, opts["variant"], tr, opts["format"], True,
                opts["energy"], opts["single_reduction"], time.perf_counter(), interrupts,
                cache)
            X[:, j] = x
            report.columns.append(rep)
    finally:
        if own:
            cache.drop_states()           # (before an owned NCCL transport's close: graphs)
        if owned:
            tr.close()
    report.wall_time = time.perf_counter() - t0
    return (X, info, report) if opts["full_output"] else (X, info)


def _as_kind(v, xp):
    """``v`` as an array of module ``xp`` (NumPy or CuPy), copied across only when it is not."""
    if array_module(v) is xp:
        return v
    return _host_array(v) if xp is np else xp.asarray(v)


def _scaled_matrix(comm, Aw, dtype, M, amax=None):
    """(A, f) as the solve runs it, as the single-GPU front end does (``_system.scale_matrix``):
    where the global max|A| leaves the window, A / 2^f (``_system.exponent_shift`` on the
    global exponents; exact), for M None or "jacobi" (a user's M approximates the unscaled
    A^-1: A is left as it is). One all-reduce (MAX of this rank's largest exponent; a second
    for the smallest on the rare path); every rank takes the same branch. ``amax``: this rank's
    max|component| of A (``_check``'s pass; the cast to the working dtype only widens), else
    read here."""
    from mpi4py import MPI
    if not (M is None or (isinstance(M, str) and M == "jacobi")):
        return Aw, 0
    data = [m.data for m in (Aw.local, Aw.remote) if m.nnz]
    if amax is None:
        amax = max(map(largest_magnitude, data), default=0.0)
    none = -(1 << 30)                        # (a rank with no nonzero value)
    hi = comm.allreduce(exponent_of(amax) if amax else none, op=MPI.MAX)
    if exponent_in_window(None if hi == none else hi, dtype):
        return Aw, 0
    los = [e[1] for e in (value_exponents(d) for d in data) if e]
    lo = -comm.allreduce(-min(los) if los else none, op=MPI.MAX)
    f = exponent_shift((hi, lo), dtype)
    return (Aw.times_power_of_two(-f), f) if f else (Aw, 0)


def _unscaled_check(outcome, job, A, tr, space, e):
    """The single-GPU front end's ``_frontend._unscaled_check`` over the ranks: where x * 2^e
    (the caller's x) rounds on some rank (entries below the normal range, or past the largest
    float), the true residual of the rounded x decides, not that of the x solved for: an x
    that comes back infinite is never "converged" (info maxiter, a NaN residual). Scaled
    solves only: one all-reduce, and a product with A where some rank's x rounds."""
    x = _host_array(outcome.x)
    back = times_power_of_two(times_power_of_two(x, e), -e)
    if not space.any(np.array([not np.array_equal(back, x)])):
        return
    rnorm = space.norm(_host_array(job.b) - A.matvec(back, tr))
    if outcome.info == 0 and not rnorm <= job.tol:
        outcome.info = job.maxiter
    outcome.residual_norm = rnorm


def _scaled_rhs(space, comm, bw):
    """(b, ||b||, e) as the solve runs them, as the single-GPU front end does
    (``_system.scale_rhs``): where the global ||b||^2 leaves the safe range of the working dtype,
    b is divided by 2^e, e the exponent of the global max|b| (exact; x0 follows through
    ``_system.solved_x0``), with one more collective on that rare path only; every rank takes
    the same branch (||b|| is global). ||b|| == 0 means b is exactly zero."""
    with np.errstate(over="ignore"):            # squares past the range sum to inf: scaled below
        bnorm = space.norm(bw)
    if in_safe_range(bnorm * bnorm, space.dtype):
        return bw, bnorm, 0
    from mpi4py import MPI
    vmax = comm.allreduce(abs_max(bw) if bw.size else 0.0, op=MPI.MAX)
    if vmax == 0:
        return bw, 0.0, 0
    e = exponent_of(vmax)
    bw = times_power_of_two(bw, -e)
    return bw, space.norm(bw), e


def _make(method):
    if method == "cg":
        def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
                   variant="host", transport="mpi", format="auto", full_output=False,
                   energy=False, single_reduction=False):
            return solve(method, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                         callback=callback, variant=variant, transport=transport, format=format,
                         full_output=full_output, energy=energy,
                         single_reduction=single_reduction)
    else:
        def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
                   variant="host", transport="mpi", format="auto", full_output=False,
                   energy=False):
            return solve(method, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                         callback=callback, variant=variant, transport=transport, format=format,
                         full_output=full_output, energy=energy)
    m = method_table.get(method)
    solver.__name__ = solver.__qualname__ = method
    solver.__module__ = "dpsolve.distributed"
    single = ("""
    single_reduction : run the single-reduction CG (Chronopoulos & Gear 1989; PETSc's
        ``-ksp_cg_single_reduction``, ``dpsolve/methods/cg1``): the inner products of an
        iteration in ONE all-reduce, where CG makes two (three with M). The same iterates in
        exact arithmetic; in rounding, counts within the spread rounding alone gives CG's
        (s3rmt3m3 with Jacobi: 12,420 against 12,421). Every rank must pass the same value;
        the report's ``single_reduction`` says it.""" if method == "cg"
              else "")
    solver.__doc__ = f"""Solve ``A x = b`` with {m.title}, distributed over the ranks of
    ``A.comm`` (collective: call it on every rank).

    A : DistributedMatrix
    b, x0 : this rank's rows of b and of the starting guess (length ``A.n_local``); never
        modified. A block b of shape (A.n_local, k), k != 1 (x0 None or the same shape): the k
        right-hand sides solved one after another on one set-up of A (PETSc's KSPMatSolve
        fallback), each column as its one-shot solve, bit for bit; every rank passes k
        columns; x is (A.n_local, k), ``info`` an int64 array of k codes, the report a
        DistributedBlockReport (a DistributedReport per column), ``callback`` gets X.
    rtol, atol, maxiter, callback : SciPy's, with the GLOBAL ||b|| in the tolerance
        ``max(atol, rtol * ||b||)`` and ``maxiter`` defaulting to ``10 * A.n``; ``callback(xk)``
        gets this rank's rows of x. Every rank must pass the same rtol, atol and maxiter.
    M : None, "jacobi", or a callable (or an object with ``.matvec``; for bicg also
        ``.rmatvec``) on this rank's vectors.
    variant : "host" (the reference solvers), "cuda" (the cuda variant's loops on each
        rank's GPU: all-reduces and halo exchanges through the transport) or "graph" (cg with
        transport "nccl": one CUDA graph per rank holding the kernels and the NCCL calls, the
        loop's control on the device; its communication is counted, not timed; on several
        ranks it needs NCCL's graph mixing off, as the nccl transport sets it: see
        ``NcclTransport``).
    transport : "mpi", "nccl" (variants "cuda" and "graph", one GPU per rank) or a Transport
        instance (left open; a named one is made for the call and closed at its end).
    format : the local part's SpMV format on the GPU ("auto": from its row statistics).
    full_output : also return a DistributedReport (the same on every rank).
    energy : measure GPU energy (NVML's total-energy counter, J) over the solve: the report's
        ``energy_joules`` (summed over the distinct GPUs: ranks sharing a GPU count it once,
        with the reading of the rank whose window was longest), ``energy_per_gpu`` (by NVML
        UUID) and ``energy_note`` (why there is no figure: no NVML, no counter, a solve
        shorter than 0.25 s). GPU variants only: variant "host" raises ValueError on every rank.
        Off by default (NVML reads cost milliseconds). Every rank must pass the same value.{single}

    Returns (x_local, info) or (x_local, info, report); ``info`` as ``dpsolve.{method}``, the
    same on every rank{m.breakdown}.
    """
    return solver


cg = _make("cg")
bicg = _make("bicg")
bicgstab = _make("bicgstab")
