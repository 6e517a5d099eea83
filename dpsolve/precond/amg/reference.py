"""Smoothed-aggregation algebraic multigrid on the host: the specification of dpsolve's GPU AMG.

What it is for. A multigrid preconditioner M ~ A^-1 for conjugate gradients on large sparse
symmetric positive definite systems (discretised diffusion, heat, elasticity). ``setup`` builds a
hierarchy of ever smaller matrices A_0 = A, A_1, ..., A_L; ``vcycle`` applies M to a vector by
smoothing on each level and solving the smallest one exactly. This module is written for reading
and testing: NumPy and SciPy only, every rule spelled out, and deterministic, so that the GPU
implementation can be written to the same rules and checked against it (identical aggregates,
the same matrices up to rounding).

The set-up, level by level (A_l is n x n, B_l its n x k near-null-space, ones by default):

a. Strength of connection ("symmetric", as pyamg's): the off-diagonal entry a_ij is strong when
   a_ij != 0 and |a_ij| >= theta * sqrt(|a_ii| |a_jj|), compared in float64. With theta = 0
   every stored nonzero off-diagonal entry is strong. The strength graph is then made
   undirected: i and j are neighbours when (i, j) or (j, i) is strong.

b. Aggregation in three deterministic passes (``aggregate``): the roots of a distance-2 maximal
   independent set (MIS-2, ``mis_states``) with their neighbours; second roots, an MIS-1 of the
   nodes left, with their left neighbours; the rest join a neighbouring aggregate. The
   aggregates are numbered in the order of their roots (``in_root_order``).

c. Tentative prolongator T (n x n_agg*k): on each aggregate, the thin QR factorisation of B's rows
   there; T holds the Q factors and the coarse B_{l+1} the R factors (``tentative_prolongator``).

d. Smoothed prolongator P = T - (4/3 / rho) D^-1 A T, with rho the estimate of rho(D^-1 A)
   (``smoothers.spectral_radius``), and restriction R = P^H.

e. Galerkin coarse matrix A_{l+1} = R (A P), SciPy's sparse products in that order, CSR with
   sorted indices and no explicit zeros.

f. Stop when n <= max_coarse, when a level below the finest has n <= max_dense rows
   (``MAX_DENSE``), when the hierarchy has max_levels levels, or when aggregation would not make
   the level smaller (n_agg * k >= n); the last level is solved with a dense pseudo-inverse
   (``_pseudo_inverse``).

Data types. The "working dtype" is A's (float32, float64, complex64 or complex128; integer and
boolean A become float64), or ``dtype`` when given. Every level's matrices and vectors are stored
in it and the sparse products run in it. Spectral radii, strength comparisons, the aggregate
norms and QR factorisations of (c), and the coarse pseudo-inverse are computed in float64
(complex128) and cast once.

Complex matrices are supported: Hermitian positive definite ones are what the V-cycle is a CG
preconditioner for. Magnitudes |a_ij| decide strength, the QR is complex, R = P^H (the conjugate
transpose), and a diagonal entry must have a positive real part.

The V-cycle (``vcycle``) uses the same smoother before and after the coarse correction, so for a
symmetric (Hermitian) A the preconditioner is symmetric (Hermitian) to rounding: a valid CG
preconditioner.

The smoothed restriction (smoother "jacobi"). The Jacobi pre-smoothing from zero is x = S b, with
S = (omega / rho) D^-1, so the coarse right-hand side R (b - A x) is RS b with
RS = R (I - A S) = R - (R A) S, one sparse matrix (``smoothed_restriction``, ``Level.RS``). The
V-cycle runs it so: b_c = RS b (one pass over RS in place of the pre-smoothing, a pass over A for
the residual and one over R), then x = S b + P z_c and the post-smoothing: the same operator as
the three steps, to rounding. For a Hermitian A, RS = ((I - S A) P)^H, so the cycle stays
symmetric: ``setup`` builds RS on the hierarchy the V-cycle runs on, from that hierarchy's own
values (``add_smoothed_restrictions``: under "half" from the float16-rounded A and R, kept in
float32, so that RS matches the A and P of the post-smoothing). RS holds nnz(R A) entries (on
2-D and 3-D Poisson 1.0-1.4 nnz(A) on the finest level, fewer than nnz(A) + nnz(R) below it).

Precision of the V-cycle (``precision``). A float64 (complex128) hierarchy is built in its own
dtype; with "mixed" (and "auto", the default, wherever it fits) the V-cycle then runs on a copy of
it cast once to float32 (complex64): ``lowered``, kept as ``Hierarchy.low``. ``vcycle`` casts r
down, cycles and casts z back; the Krylov solver around it stays in float64. A preconditioner
only has to approximate A^-1: CG to rtol 1e-8 took the same iterations (within one) with the
float32 V-cycle on every quality-test problem and shared SPD matrix (bcsstk13 486 / 485, bcsstk26
665 / 666; 1e-12 alike), while it moves a third fewer bytes. "auto" keeps the working dtype where
a value of the hierarchy does not fit float32 (overflows it); "mixed" then raises; "full" never
casts. A hierarchy of one level (the exact dense solve) stays in its dtype.

"half" (and "auto", wherever it fits, for float64 and float32 hierarchies alike) also stores the
cycle's matrices in float16, each scaled by a power of two (``half_round``; the vectors and the
arithmetic stay float32): a quarter fewer bytes for every matrix entry the device reads from its
2-byte copies (level 0's ELL and the SELL copies of the large levels; the small levels' CSR
kernels read the same values in float32). It fits where every power of two and its reciprocal are
normal float32s (``half_scales_fit``: no matrix whose largest magnitude is below 2^-112) and no
row's diagonal lies below float16's normal range once scaled (``half_small_rows``); "auto" keeps
float32 values elsewhere, "half" raises. Complex hierarchies keep complex64 values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from dpsolve.precond.diagonal import reciprocal, refusal
from dpsolve.precond.smoothers import _positive_rho, chebyshev, jacobi_sweep, spectral_radius

__all__ = ["Level", "Hierarchy", "setup", "vcycle", "as_operator", "levels_table",
           "vcycle_bytes", "strength_graph", "node_keys", "wang_hash", "mis_states", "mis2_states",
           "aggregate", "tentative_prolongator", "smooth_prolongator", "smoothed_restriction",
           "galerkin", "add_smoothed_restrictions",
           "PROLONGATION_OMEGA", "SMOOTHER_OMEGA", "MAX_DENSE_COARSE", "MAX_DENSE", "PRECISIONS",
           "lowered"]

PROLONGATION_OMEGA = 4.0 / 3.0
"""The weight of the prolongator smoothing step (d): P = T - (4/3 / rho) D^-1 A T.

It is fixed (pyamg's default), independent of ``setup``'s ``omega``, which weights the
V-cycle's Jacobi smoother."""

SMOOTHER_OMEGA = 1.5
"""The default weight of the V-cycle's Jacobi sweeps: omega / rho (rho of D^-1 A on that level).

1.5 rather than pyamg's 4/3 (host reference, CG to rtol 1e-8, x* random): 2-D Poisson 1024^2
14 -> 13 iterations, 3-D 100^3 10 (residual 5.4e-9 -> 2.2e-9); on the quality tests' problems
(tests/test_amg_reference.py) equal or fewer everywhere (bcsstk26 703 -> 665, bcsstk13 527 -> 486,
2-D 200^2 12 -> 11); 1.6 was worse on bcsstk13 (547) and 3-D 24^3, 1.9 on 2-D (21). It stays
below 2, where the sweep stops converging (a rho estimated at least 3/4 of the true one)."""

MAX_DENSE_COARSE = 10_000
"""The largest coarsest level ``setup`` inverts densely (an n x n pseudo-inverse: 800 MB and
minutes of SVD at this size). Beyond it, ``setup`` raises rather than hang: a coarsest level that
big means aggregation stopped working (theta too large, max_levels too small)."""

MAX_DENSE = 2_500
"""The default ``max_dense``: a level below the finest of at most this many rows is the coarsest,
solved by its dense inverse, rather than coarsened further.

Below a few thousand rows a level's kernels are bound by launch latency: at 2-D Poisson 1024^2
(H200, float32 cycle, benchmarks/max-dense-2026-11-29.py against max_dense 0) levels 3-4 (2,009
and 154 rows) cost what one 16 MB dense product over level 3 costs (V-cycle 116.5 against 116.2
us), and the exact solve there saves two CG iterations (14 -> 12; 2.86 -> 2.51 ms a prepared
solve; host reference 2-D 512^2: 13 -> 11). 3-D 160^3 stops at 484 rows instead of 13 (481
against 491 us, 9.10 against 9.21 ms, the same iterations); 3-D 100^3 and 64^3 keep their
hierarchies (their levels of 3,149-4,102 rows are above it). The finest level keeps
``max_coarse``: a small system still gets its hierarchy. A float32 copy at 2,500 rows reads
25 MB a V-cycle; the device inverts such a level by LU (``device.CoarseInverse``), where eigh
took 28 ms of set-up at 2,009 rows."""

SECOND_DISTANCE = "auto"
"""The default distance of the aggregation's second pass (``aggregate``), level by level: 2 on a
level of at least SECOND_DISTANCE_ROWS rows, 1 on a smaller one (``second_distance``).

Distance 2 makes larger second aggregates, so coarser levels with fewer entries, for one or two
more iterations. Where a level is large, the V-cycle's time and power go into those entries: at
3-D 160^3 distance 1 made a level 1 of 38.6M entries, more than level 0's 28.5M, its kernels at
650-720 W on an H200. Host reference, Jacobi smoother, CG to rtol 1e-8, x* = ones; iterations,
operator complexity and the V-cycle's bytes x iterations, "auto" against 1 everywhere: 2-D Poisson
1024^2 13 -> 14, 1.89 -> 1.59, 0.980; 3-D Laplace 100^3 10 -> 12, 2.83 -> 1.84, 0.928; 160^3 10
-> 12, 2.87 -> 1.85, 0.923 (these three are (2, 2, 1)); 3-D 64^3 9 -> 10, 2.77 -> 1.99, 0.912
((2, 1)). Measured (H200, prepared graph solve, benchmarks/second-pass-levels-2026-11-29.py): as
fast or faster at all three sizes (160^3 9.55 against 9.79 ms), the set-up 12-37 % shorter, and
less power drawn. On a small level the kernels are bound by latency, not by its entries, and the
iterations decide: distance 1 there (distance 2 on level 0 of the shared structural matrices:
bcsstk13 527 -> 579 iterations, s3rmt3m3 1491 -> 1752). 2 everywhere coarsens too far (2-D
1024^2 16 iterations, 3-D 100^3 14)."""

SECOND_DISTANCE_ROWS = 100_000
"""The fewest rows of a level on which ``SECOND_DISTANCE`` "auto" takes distance 2: above the
coarse levels of the three sizes measured (their third levels: 16k-21k rows), below their second
ones (155k-632k)."""

# The node states of the MIS-2 iteration: the top bits of the value v(i) = state << 60 | key(i).
IN, UNDECIDED, OUT = 2, 1, 0
_STATE_SHIFT = 60
_MASK27 = 0x7FFFFFF
_MASK32 = 0xFFFFFFFF

_WORKING = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)}


@dataclass
class Level:
    """One level of the hierarchy: its matrix, the smoother's data, and the way down.

    ``A``: n_l x n_l CSR array (sorted indices), working dtype.
    ``inv_diag``: 1 / diag(A), working dtype (D^-1 of the smoothers).
    ``rho``: ``spectral_radius(A, inv_diag)``, the estimate of rho(D^-1 A) (float64).
    ``P``: n_l x n_{l+1} smoothed prolongator (CSR, sorted); None on the coarsest level.
    ``R``: P^H as CSR (sorted); None on the coarsest level.
    ``aggregates``: int64, node -> aggregate id (0..n_agg-1); None on the coarsest level.
    ``RS``: the smoothed restriction R (I - A S), S = rs_weight D^-1 (``smoothed_restriction``),
    which the V-cycle runs where the smoother is "jacobi" of weight rs_weight (omega / rho); None
    otherwise (Chebyshev, the coarsest level): R then follows the pre-smoothing and the residual.
    """
    A: sp.csr_array
    inv_diag: np.ndarray
    rho: float
    P: sp.csr_array | None = None
    R: sp.csr_array | None = None
    aggregates: np.ndarray | None = None
    RS: sp.csr_array | None = None
    rs_weight: float | None = None


@dataclass
class Hierarchy:
    """The whole multigrid hierarchy that ``vcycle`` applies.

    ``levels``: finest first; the last one is the coarsest (P, R, aggregates None).
    ``coarse_inv``: dense pseudo-inverse of the coarsest A (``np.linalg.pinv``; made exactly
    Hermitian for a Hermitian A, see ``_pseudo_inverse``), working dtype.
    ``smoother``: "jacobi" or "chebyshev".
    ``omega``: the damped-Jacobi weight; a sweep applies omega / rho (rho of that level).
    ``degree``: the Chebyshev degree (steps per smoothing), 2..4.
    ``B``: the near-null-space vectors of every level (n_l x k arrays), the coarsest included.
    ``low``: the same hierarchy cast to single precision, on which ``vcycle`` runs (precision
    "mixed", "half", see the module docstring); None: the V-cycle runs in the working dtype.
    ``half``: (of a ``low``) its matrices' values are float16's, scaled (``half_round``).
    """
    levels: list[Level]
    coarse_inv: np.ndarray
    smoother: str = "jacobi"
    omega: float = SMOOTHER_OMEGA
    degree: int = 3
    B: list[np.ndarray] = field(default_factory=list)
    low: Hierarchy | None = field(default=None, repr=False, compare=False)
    cast_exps: tuple = (-57, 108)      # with ``low``: ``cast_exponents`` (b's safe window)
    half: bool = False          # the matrices' values rounded through float16 (``lowered``)

    def operator_complexity(self) -> float:
        """sum over levels of nnz(A_l), divided by nnz(A_0): the V-cycle's memory and work relative
        to one product by A (1.2 to 1.6 is typical of smoothed aggregation in 2-D and 3-D)."""
        return sum(lev.A.nnz for lev in self.levels) / self.levels[0].A.nnz

    def grid_complexity(self) -> float:
        """sum over levels of n_l, divided by n_0: the vectors' share of the same."""
        return sum(lev.A.shape[0] for lev in self.levels) / self.levels[0].A.shape[0]


# ---------------------------------------------------------------------------------------------
# input checks


def _working_dtype(A_dtype, dtype) -> np.dtype:
    """The hierarchy's dtype: ``dtype`` when given, else A's; integers and booleans become float64.

    Only the four types the GPU kernels exist for are accepted; casting complex data to a real
    type would silently drop the imaginary part, so it is refused."""
    A_dtype = np.dtype(A_dtype)
    if dtype is None:
        wd = np.dtype(np.float64) if A_dtype.kind in "biu" else A_dtype
    else:
        wd = np.dtype(dtype)
    if wd not in _WORKING:
        raise ValueError(f"AMG supports float32, float64, complex64 and complex128 matrices, got "
                         f"{wd} (pass dtype=... to choose one)")
    if A_dtype.kind == "c" and wd.kind != "c":
        raise ValueError(f"A is complex ({A_dtype}) but dtype={wd} is real: casting would drop the "
                         f"imaginary part")
    return wd


def level_name(level: int) -> str:
    """How errors name level ``level``'s matrix (the host's set-up and the GPU's)."""
    return "A" if level == 0 else f"the level-{level} coarse matrix (R A P)"


def _check_level(A: sp.csr_array, level: int) -> np.ndarray:
    """Raise a ValueError naming the rows where A cannot be smoothed; else return 1 / diag(A).

    A must be finite, and its diagonal nonzero and positive (a positive real part for complex
    data): damped Jacobi and Chebyshev divide by it and assume D^-1 A has a positive spectrum.
    Coarse levels are checked too, since a nonsymmetric or indefinite A can produce a bad R A P.
    """
    name = level_name(level)
    bad = ~np.isfinite(A.data)
    if bad.any():
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))[bad]
        raise ValueError(refusal("nonfinite", np.unique(rows), "AMG", name, A.dtype))
    d = A.diagonal()
    for problem, idx in (("zero", np.flatnonzero(d == 0)),
                         ("negative", np.flatnonzero(d.real <= 0))):
        if idx.size:
            raise ValueError(refusal(problem, idx, "AMG", name, A.dtype))
    inv, big = reciprocal(d, A.dtype)
    if big.size:
        raise ValueError(refusal("reciprocal", big, "AMG", name, A.dtype))
    return inv


def _as_csr(A, wd) -> sp.csr_array:
    """A canonical CSR copy of A in the working dtype: duplicates summed, indices sorted.

    Explicit zeros of the caller's matrix are kept (they are not strong connections, rule a), so
    that level 0 is the matrix as given."""
    A = sp.csr_array(A, dtype=wd, copy=True)
    A.sum_duplicates()
    A.sort_indices()
    return A


def _check_B(B, n: int, wd: np.dtype) -> np.ndarray:
    """B as an n x k array of the working dtype (a 1-D B is one column), or a clear ValueError."""
    if B is None:
        return np.ones((n, 1), dtype=wd)
    B = np.asarray(B)
    if B.ndim == 1:
        B = B[:, None]
    if B.ndim != 2 or B.shape[0] != n or B.shape[1] < 1:
        raise ValueError(f"B must be an n x k array of near-null-space vectors with n = {n} (A's "
                         f"size) and k >= 1, got shape {B.shape}")
    if B.dtype.kind == "c" and wd.kind != "c":
        raise ValueError(f"B is complex ({B.dtype}) but the hierarchy is real ({wd})")
    if B.dtype.kind not in "biufc":
        raise ValueError(f"B must be numeric, got dtype {B.dtype}")
    if not np.isfinite(B).all():
        raise ValueError("B has NaN or Inf entries")
    return B.astype(wd)


# ---------------------------------------------------------------------------------------------
# (a) strength and (b) aggregation


def strength_graph(A: sp.csr_array, theta: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The undirected strength graph of A with self loops, as CSR (indptr, indices) int64 arrays.

    Rule (a): the off-diagonal a_ij is strong when a_ij != 0 and
    |a_ij| >= theta * sqrt(|a_ii| * |a_jj|) (magnitudes, product, root and comparison in float64).
    Row i of the result lists i itself and every j with (i, j) or (j, i) strong, sorted. The self
    loop makes every row non-empty (the segmented maxima of the MIS-2 need that) and puts i in
    its own neighbourhood {i} u N(i).
    """
    n = A.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(A.indptr))
    cols = A.indices.astype(np.int64)
    strong = (rows != cols) & (A.data != 0)
    if theta != 0:
        mag = np.abs(A.data).astype(np.float64)
        d = np.abs(A.diagonal()).astype(np.float64)
        strong &= mag >= theta * np.sqrt(d[rows] * d[cols])
    r, c = rows[strong], cols[strong]
    diag = np.arange(n, dtype=np.int64)
    G = sp.coo_array((np.ones(2 * r.size + n, dtype=np.int8),
                      (np.concatenate([r, c, diag]), np.concatenate([c, r, diag]))),
                     shape=(n, n)).tocsr()
    G.sum_duplicates()
    G.sort_indices()
    return G.indptr.astype(np.int64), G.indices.astype(np.int64)


def wang_hash(i: np.ndarray) -> np.ndarray:
    """Thomas Wang's 32-bit integer hash of each i (mod 2^32), as uint64 values below 2^32.

    h = i mod 2^32; h = (h ^ 61) ^ (h >> 16); h = 9 h mod 2^32; h = h ^ (h >> 4);
    h = 0x27d4eb2d h mod 2^32; h = h ^ (h >> 15). It scatters the node numbers so that the MIS-2
    priorities are not the grid's ordering (which would make long chains of decisions)."""
    m = np.uint64(_MASK32)
    h = np.asarray(i).astype(np.uint64) & m
    h = (h ^ np.uint64(61)) ^ (h >> np.uint64(16))
    h = (h * np.uint64(9)) & m
    h = h ^ (h >> np.uint64(4))
    h = (h * np.uint64(0x27D4EB2D)) & m
    h = h ^ (h >> np.uint64(15))
    return h


def node_keys(n: int) -> np.ndarray:
    """The MIS-2 priority of each node: key(i) = (wang_hash(i) & 0x7FFFFFF) << 32 | i (int64).

    Distinct for distinct i (the low 32 bits are i itself, so ``key & 0xFFFFFFFF`` gives the node
    back), and below 2^59, leaving bits 60..62 for the state."""
    if n > 2**32:
        raise ValueError(f"AMG aggregation numbers nodes in 32 bits; this level has {n} rows")
    i = np.arange(n, dtype=np.uint64)
    return (((wang_hash(i) & np.uint64(_MASK27)) << np.uint64(32)) | i).astype(np.int64)


def _segmented_max(values: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """For every row i of the graph, the maximum of ``values`` over the row's column indices.

    No row is empty (each holds its own self loop), which is what ``np.maximum.reduceat`` needs."""
    return np.maximum.reduceat(values[indices], indptr[:-1])


def mis_states(indptr: np.ndarray, indices: np.ndarray, keys: np.ndarray | None = None,
               distance: int = 2, active: np.ndarray | None = None) -> np.ndarray:
    """A maximal independent set of the graph at ``distance`` 1 or 2: each node's final state,
    IN or OUT. ``active``: the nodes taking part (default all); an inactive node is neither a
    candidate nor a neighbour (it ends OUT).

    Every active node starts UNDECIDED; its value is v(i) = state(i) << 60 | key(i) (inactive
    nodes: -1). Each round, with N(i) the neighbours of i (the graph has self loops, so the rows
    are {i} u N(i)):

        m1(i) = max of v over {i} u N(i)
        m2(i) = max of m1 over {i} u N(i)          (distance 2 only: the maximum within 2 edges)
        for every UNDECIDED i, all from this round's maximum m:
            if m(i) == v(i):            i becomes IN    (largest priority within the distance)
            elif m(i) >> 60 == IN:      i becomes OUT   (an IN node within the distance)

    until no node is UNDECIDED. Two nodes that become IN in the same round are each the maximum
    of the other's neighbourhood, so they are more than ``distance`` edges apart; each round
    decides at least the undecided node of largest key, so the loop ends (in O(log n) rounds for
    hashed keys); a node with no neighbours becomes IN in the first round.
    """
    n = indptr.size - 1
    if keys is None:
        keys = node_keys(n)
    state = np.full(n, UNDECIDED, dtype=np.int64)
    if active is not None:
        state[~active] = OUT
    shift = np.int64(_STATE_SHIFT)
    while True:
        undecided = state == UNDECIDED
        if not undecided.any():
            return state
        v = (state << shift) | keys
        if active is not None:
            v[~active] = -1
        m = _segmented_max(v, indptr, indices)
        if distance == 2:
            m = _segmented_max(m, indptr, indices)
        new_in = undecided & (m == v)
        new_out = undecided & ~new_in & ((m >> shift) == IN)
        state[new_in] = IN
        state[new_out] = OUT


def mis2_states(indptr: np.ndarray, indices: np.ndarray, keys: np.ndarray | None = None
                ) -> np.ndarray:
    """The distance-2 maximal independent set of the graph (``mis_states`` at distance 2)."""
    return mis_states(indptr, indices, keys, 2)


def check_max_dense(max_dense) -> None:
    """A ValueError naming ``max_dense`` unless it is an int from 0 to MAX_DENSE_COARSE."""
    if (isinstance(max_dense, bool) or not isinstance(max_dense, (int, np.integer))
            or not 0 <= max_dense <= MAX_DENSE_COARSE):
        raise ValueError(f"AMG max_dense must be an integer from 0 to {MAX_DENSE_COARSE} (the "
                         f"rows of a coarsest level solved densely), got {max_dense!r}")


def check_second_pass(second_pass):
    """``second_pass`` as "auto" or a tuple of distances, one a level (the last repeats): "auto",
    an int 0, 1 or 2, or a non-empty sequence of them. Raises a ValueError naming anything else."""
    if isinstance(second_pass, str) and second_pass == "auto":
        return "auto"
    values = second_pass if isinstance(second_pass, (tuple, list)) else (second_pass,)
    if not values or any(isinstance(v, (bool, str)) or v not in (0, 1, 2) for v in values):
        raise ValueError(f"AMG second_pass must be 'auto', 0, 1 or 2, or a non-empty sequence "
                         f"of 0, 1 and 2 (one a level, the last repeated), got {second_pass!r}")
    return tuple(int(v) for v in values)


def second_distance(second_pass, level: int, n: int) -> int:
    """The second pass's distance on ``level`` (0 the finest) of n rows: "auto", 2 where n >=
    SECOND_DISTANCE_ROWS and else 1; a sequence's entry there, its last entry below
    (``check_second_pass``)."""
    values = check_second_pass(second_pass)
    if values == "auto":
        return 2 if n >= SECOND_DISTANCE_ROWS else 1
    return values[min(level, len(values) - 1)]


def _join(agg, indptr, indices, keys, candidates):
    """Every node without an aggregate that has a neighbour in ``candidates`` joins the aggregate
    of the candidate neighbour of largest key (all decided at once); returns how many joined."""
    low = np.int64(_MASK32)
    m = _segmented_max(np.where(candidates, keys, -1), indptr, indices)
    join = (agg < 0) & (m >= 0)
    agg[join] = agg[m[join] & low]
    return int(np.count_nonzero(join))


def aggregate(indptr: np.ndarray, indices: np.ndarray, second_pass: int = 1
              ) -> tuple[np.ndarray, np.ndarray]:
    """Aggregates of the strength graph, in three passes: (node -> aggregate id int64, root mask).

    1. Roots: the IN nodes of the graph's MIS-2 (``mis2_states``). Each root and its neighbours
       form an aggregate (in an MIS-2 a node has at most one neighbouring root; were there
       several, the root of largest key would win).
    2. Among the nodes still without an aggregate (the "leftovers"), the MIS-1 of the leftover
       graph (``mis_states`` at distance 1, leftovers only) gives second roots: each that has a
       leftover neighbour starts an aggregate with its leftover neighbours (the neighbouring
       second root of largest key, where several).
       This pass is what keeps the aggregates near pyamg's size: with the MIS-2 alone (random
       priorities pack the roots loosely) the aggregates grow to ~7 nodes in 2-D and CG on 2-D
       Poisson 512^2 took 21 iterations against pyamg's 11; with it, 14. Its aggregates can be
       single nodes, so it is skipped (``second_pass=0``) for a B of k > 1 columns, whose
       QR needs k nodes per aggregate. ``second_pass=2`` takes the MIS-2 of the leftovers
       instead: fewer, larger second aggregates (3-D Laplace 100^3: operator complexity 2.83 ->
       1.84, CG 10 -> 14 iterations; 2-D Poisson 1024^2: 1.89 -> 1.59, 14 -> 17). ``setup``
       takes the distance level by level (``SECOND_DISTANCE``: 2 on large levels, 1 on small).
    3. Every node still without an aggregate joins the aggregate of its aggregated neighbour of
       largest key, all decided at once; passes repeat while any is left (maximality of the
       MIS-2 puts every node within two edges of a root, so one pass ends it).

    The aggregates are numbered in the order of their roots' indices (``in_root_order``). Each
    aggregate is connected in the strength graph. Every decision is a maximum of keys over
    a neighbourhood, so a parallel implementation (dpsolve/cuda/amg.cu) forms the same aggregates.
    """
    n = indptr.size - 1
    keys = node_keys(n)
    roots = mis2_states(indptr, indices, keys) == IN
    agg = np.full(n, -1, dtype=np.int64)
    n_agg = int(np.count_nonzero(roots))
    agg[roots] = np.arange(n_agg, dtype=np.int64)
    _join(agg, indptr, indices, keys, roots)                          # pass 1

    left = agg < 0                                                    # pass 2
    second, k = np.zeros(n, dtype=bool), 0
    if second_pass and left.any():
        second = mis_states(indptr, indices, keys, int(second_pass), active=left) == IN
        # leftover neighbours of each node (the row holds the node itself: not counted)
        counts = np.add.reduceat(left[indices].astype(np.int64), indptr[:-1]) - left
        second &= counts > 0
        k = int(np.count_nonzero(second))
        agg[second] = n_agg + np.arange(k, dtype=np.int64)
        n_agg += k
        _join(agg, indptr, indices, keys, second)   # only leftovers lack an aggregate here

    while (agg < 0).any():                                            # pass 3
        if not _join(agg, indptr, indices, keys, agg >= 0):
            raise RuntimeError("AMG aggregation left nodes unaggregated (internal error)")
    return (in_root_order(agg, roots | second) if ROOT_ORDER else agg), roots


# Number the aggregates in their roots' order (``in_root_order``); False: in the passes' order
# (the first aggregates, then the second ones: the numbering before 2026-11-29; the benchmarks'
# A/B; set it before a set-up, it holds for the host and the device alike)
ROOT_ORDER = True


def in_root_order(agg: np.ndarray, all_roots: np.ndarray) -> np.ndarray:
    """The aggregates renumbered in the order of their roots' indices (``all_roots``: the first
    and the second roots; each root is in its own aggregate): the same aggregates, only their
    numbers. The passes number the second aggregates after all the first ones, so a coarse row's
    neighbours lay in two sheets n_first apart (2-D 1024^2's level 1: a slice of 32 rows spanned
    147k columns at the 99th percentile), and the V-cycle's gathers touched more 32-byte sectors
    than in root order: 1.69x through A_1, 1.37x through P_0 and 1.34x through R_0 at 1024^2;
    1.08x, 1.36x and 1.10x at 3-D 160^3, whose 3-D neighbours spread anyway
    (benchmarks/aggregate-root-order-cpu-2026-11-29.csv)."""
    new = np.empty(int(agg.max()) + 1 if agg.size else 0, dtype=np.int64)
    new[agg[all_roots]] = np.arange(int(np.count_nonzero(all_roots)), dtype=np.int64)
    return new[agg]


# ---------------------------------------------------------------------------------------------
# (c) tentative prolongator, (d) smoothing, (e) Galerkin product


def _wide(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def tentative_prolongator(agg: np.ndarray, n_agg: int, B: np.ndarray, level: int = 0
                          ) -> tuple[sp.csr_array, np.ndarray]:
    """T (n x n_agg*k, CSR) and the coarse near-null-space B_c (n_agg*k x k): rule (c).

    On aggregate a with nodes i_1 < ... < i_m (B_a their m x k rows of B), the thin QR
    B_a = Q_a R_a, with R_a's diagonal made real and non-negative (a column of Q_a and the row of
    R_a are multiplied by the unit phase that does it). T's rows i_1..i_m hold Q_a in columns
    a*k .. a*k+k-1, and B_c's rows a*k .. a*k+k-1 hold R_a, so that T B_c = B: the coarse space
    represents B exactly. T's columns are orthonormal.

    For k = 1 this is T_i = B_i / ||B_a|| and B_c[a] = ||B_a|| (the squared norm is accumulated in
    float64 over the aggregate's nodes in index order). For k > 1 the QR is NumPy's (LAPACK
    Householder, in float64/complex128), batched over aggregates of the same size. The factors
    are cast to the working dtype at the end.

    Refused with a ValueError: an aggregate with fewer nodes than B has columns (its Q could not
    have k orthonormal columns; pyamg pads with zero columns, which gives coarse rows with a zero
    diagonal), and for k = 1, a B that is zero on a whole aggregate.
    """
    n, k = B.shape
    wd = B.dtype
    sizes = np.bincount(agg, minlength=n_agg)
    if k == 1:
        b = B[:, 0].astype(_wide(wd))
        norms = np.sqrt(np.bincount(agg, weights=(b.real ** 2 + b.imag ** 2) if b.dtype.kind == "c"
                                    else b * b, minlength=n_agg))
        zero = np.flatnonzero(norms == 0)
        if zero.size:
            raise ValueError(f"B is zero on every node of {zero.size} aggregate(s) of level "
                             f"{level} (first: aggregate {int(zero[0])}): the coarse space cannot "
                             f"represent it. Give B a nonzero entry near every node")
        q = (b / norms[agg]).astype(wd)
        Bc = norms.astype(wd)[:, None]
        T = sp.csr_array((q, agg.copy(), np.arange(n + 1, dtype=np.int64)), shape=(n, n_agg))
        return T, Bc

    small = np.flatnonzero(sizes < k)
    if small.size:
        a = int(small[0])
        raise ValueError(f"aggregate {a} of level {level} has {int(sizes[a])} node(s), fewer than "
                         f"B's {k} columns ({small.size} such aggregates): smoothed aggregation "
                         f"needs at least k nodes per aggregate. Use fewer near-null-space vectors "
                         f"or a smaller theta")
    order = np.argsort(agg, kind="stable")           # nodes grouped by aggregate, index order
    starts = np.concatenate([[0], np.cumsum(sizes)])
    Q_all = np.empty((n, k), dtype=_wide(wd))
    R_all = np.empty((n_agg, k, k), dtype=_wide(wd))
    for m in np.unique(sizes):
        aggs = np.flatnonzero(sizes == m)
        nodes = order[starts[aggs][:, None] + np.arange(m)]      # (count, m)
        Q, R = np.linalg.qr(B[nodes].astype(_wide(wd)), mode="reduced")
        r = np.diagonal(R, axis1=1, axis2=2)
        mag = np.abs(r)
        phase = np.where(mag == 0, 1, r / np.where(mag == 0, 1, mag))
        Q = Q * phase[:, None, :]
        R = R * np.conj(phase)[:, :, None]
        Q_all[nodes] = Q
        R_all[aggs] = R
    cols = (agg[:, None] * k + np.arange(k)).ravel()
    T = sp.csr_array((Q_all.astype(wd).ravel(), cols, np.arange(0, n * k + 1, k, dtype=np.int64)),
                     shape=(n, n_agg * k))
    return T, R_all.astype(wd).reshape(n_agg * k, k)


def _canonical(M) -> sp.csr_array:
    """M as a CSR array with summed duplicates, sorted indices and no explicit zeros."""
    M = sp.csr_array(M)
    M.sum_duplicates()
    M.eliminate_zeros()
    M.sort_indices()
    return M


def smooth_prolongator(A: sp.csr_array, inv_diag: np.ndarray, rho: float, T: sp.csr_array
                       ) -> sp.csr_array:
    """Rule (d): P = T - (4/3 / rho) * (D^-1 (A T)), one damped-Jacobi step applied to T's columns.

    The smoothing spreads each aggregate's basis function over the aggregate's neighbours and
    makes it smoother, which is what gives smoothed aggregation its convergence rate. The
    coefficient 4/3 / rho is computed in float64 and cast once to the working dtype's real type;
    the row scaling by D^-1 is applied to A T's values. CSR, sorted, explicit zeros removed.
    """
    rho = _positive_rho(rho, "the prolongator smoothing")
    AT = _canonical(A @ T)
    AT.data *= np.repeat(inv_diag, np.diff(AT.indptr))
    c = np.finfo(A.dtype).dtype.type(PROLONGATION_OMEGA / rho)
    return _canonical(T - c * AT)


def jacobi_weights(inv_diag: np.ndarray, weight: float) -> np.ndarray:
    """S's diagonal, weight D^-1, in the working dtype (the device's Jacobi weights, its
    ``DeviceLevel.scale``): what the smoothed restriction is built from and the V-cycle adds."""
    return inv_diag * np.finfo(inv_diag.dtype).dtype.type(weight)


def smoothed_restriction(R: sp.csr_array, A: sp.csr_array, inv_diag: np.ndarray,
                         weight: float) -> sp.csr_array:
    """RS = R (I - A S) = R - (R A) S with S = weight D^-1 (weight: the Jacobi sweep's
    omega / rho): the pre-smoothing from zero, the residual and the restriction as one matrix
    (the module docstring). SciPy's product R A, its columns scaled by s = (D^-1 weight) in the
    working dtype (the device's Jacobi weights), then subtracted from R; canonical CSR."""
    s = jacobi_weights(inv_diag, weight)
    RA = sp.csr_array(R @ A)
    return _canonical(R - RA @ sp.diags_array(s))


def rs_pays(n: int, nnz_A: int, nnz_R: int, nnz_RS: int, value_bytes: int, half: bool) -> bool:
    """Whether a level's smoothed restriction moves fewer bytes than what it replaces: one read
    of RS (its values in the cycle's type, V bytes, and 4-byte indices) and of b against a read of
    A and of R (2-byte values under "half", else V), of x (the residual's), and the writes of x
    and of the residual and its read (vcycle_bytes: b's read is common). Measured (H200, float16
    matrices): level 0 of 2-D 1024^2 (RS 1.04 nnz(A), 8 bytes an entry against A's and R's 6)
    paid, level 0 of 3-D 160^3 (RS 1.43 nnz(A)) cost 2 % of the V-cycle."""
    stored = 2 if half else value_bytes
    return (nnz_RS * (value_bytes + 4)
            < (nnz_A + nnz_R) * (stored + 4) + 3 * n * value_bytes)


def add_smoothed_restrictions(h: Hierarchy) -> None:
    """Give the levels of h above the coarsest their smoothed restriction (``Level.RS``), from
    h's own values, where h's smoother is "jacobi" and it pays (``rs_pays``); h is the hierarchy
    the V-cycle runs on (a lowered copy where there is one: its RS from its rounded A and R, so
    that the cycle stays symmetric to its own precision, and in float32 under "half")."""
    if h.smoother != "jacobi":
        return
    V = np.dtype(h.levels[0].A.dtype).itemsize
    for lev in h.levels[:-1]:
        weight = h.omega / lev.rho
        RS = smoothed_restriction(lev.R, lev.A, lev.inv_diag, weight)
        if rs_pays(lev.A.shape[0], lev.A.nnz, lev.R.nnz, RS.nnz, V, h.half):
            lev.RS, lev.rs_weight = RS, weight


def uses_rs(h, lev) -> bool:
    """Whether the V-cycle of h (host or device hierarchy) runs level ``lev``'s smoothed
    restriction: it has one, and h's smoother is the Jacobi sweep it was built for."""
    return (lev.RS is not None and h.smoother == "jacobi"
            and lev.rs_weight == h.omega / lev.rho)


def galerkin(R: sp.csr_array, A: sp.csr_array, P: sp.csr_array) -> sp.csr_array:
    """Rule (e): the coarse matrix R (A P), SciPy's products in that order, in CSR with sorted
    indices and no explicit zeros (SciPy's product already drops exact cancellations). pyamg
    forms (R A) P; the device forms R (A P) because a row of A P is short enough for its
    per-row hash table in shared memory where a row of R A is not (3-D Laplace, level 1: ~150
    against ~700 columns), and the reference keeps its order so both give the same bits."""
    return _canonical(R @ (A @ P))


# ---------------------------------------------------------------------------------------------
# set-up


def setup(A, *, theta: float = 0.0, B=None, smoother: str = "jacobi", omega: float = SMOOTHER_OMEGA,
          degree: int = 3, max_coarse: int = 300, max_levels: int = 10, dtype=None,
          max_dense: int = MAX_DENSE,
          second_pass=SECOND_DISTANCE, precision: str = "auto") -> Hierarchy:
    """Build the smoothed-aggregation hierarchy of the square matrix A (rules a-f of the module).

    A: anything ``scipy.sparse.csr_array`` accepts (a SciPy sparse matrix or array, a dense
    array). theta: the strength threshold (0 = every nonzero is strong). B: n x k near-null-space
    vectors (default ones: the constants, right for diffusion; elasticity adds rigid-body modes).
    smoother / omega / degree: the V-cycle's smoother, "jacobi" (one sweep of weight omega / rho
    before and after the coarse correction) or "chebyshev" (``degree`` steps). max_coarse: a
    level with at most this many rows is the coarsest. max_dense: a level below the finest with
    at most this many rows is the coarsest (``MAX_DENSE``). max_levels: the most levels. dtype: the
    working dtype (default A's, see the module docstring). second_pass: the distance of the
    aggregation's second pass (``aggregate``; 0: none): "auto" (by each level's size), an int, or
    one a level with the last repeated (``SECOND_DISTANCE``, ``second_distance``). precision: the
    V-cycle's, "auto", "mixed" or "full" (the module docstring).

    Raises a ValueError naming the problem for a non-square or empty A, NaN/Inf in A, a zero,
    missing or non-positive diagonal entry (rows named, on any level), a B of the wrong shape or
    with NaN/Inf, an aggregate smaller than B's k, and a coarsest level too large to invert
    densely (``MAX_DENSE_COARSE``).
    """
    if smoother not in ("jacobi", "chebyshev"):
        raise ValueError(f"smoother must be 'jacobi' or 'chebyshev', got {smoother!r}")
    if not (math.isfinite(omega) and omega > 0):
        raise ValueError(f"omega must be positive and finite, got {omega!r}")
    if smoother == "chebyshev" and int(degree) not in (2, 3, 4):
        raise ValueError(f"the Chebyshev degree must be 2, 3 or 4, got {degree!r}")
    if not (math.isfinite(theta) and theta >= 0):
        raise ValueError(f"theta must be a finite number >= 0, got {theta!r}")
    check_second_pass(second_pass)
    check_precision(precision)
    if int(max_coarse) < 1 or int(max_levels) < 1:
        raise ValueError(f"max_coarse and max_levels must be >= 1, got {max_coarse}, "
                         f"{max_levels}")
    check_max_dense(max_dense)
    try:
        A0 = sp.csr_array(A)
    except Exception as exc:
        raise ValueError(f"AMG needs an explicit matrix (SciPy sparse or a dense 2-D array), got "
                         f"{type(A).__name__}: {exc}") from None
    if A0.shape[0] != A0.shape[1]:
        raise ValueError(f"AMG needs a square matrix, A is {A0.shape[0]} x {A0.shape[1]}")
    if A0.shape[0] == 0:
        raise ValueError("A is empty (0 x 0)")
    wd = _working_dtype(A0.dtype, dtype)
    A_l = _as_csr(A0, wd)
    B_l = _check_B(B, A_l.shape[0], wd)

    levels: list[Level] = []
    Bs: list[np.ndarray] = []
    while True:
        level = len(levels)
        inv_diag = _check_level(A_l, level)
        rho = spectral_radius(A_l, inv_diag)
        n = A_l.shape[0]
        Bs.append(B_l)
        coarsest = (n <= max_coarse or (level > 0 and n <= max_dense)
                    or level + 1 >= max_levels)
        if not coarsest:
            _positive_rho(rho, f"level {level}'s smoothing")
            agg, _ = aggregate(*strength_graph(A_l, theta),
                               second_pass=(second_distance(second_pass, level, n)
                                            if B_l.shape[1] == 1 else 0))
            n_agg = int(agg.max()) + 1
            coarsest = n_agg * B_l.shape[1] >= n      # aggregation would not reduce n
        if coarsest:
            levels.append(Level(A=A_l, inv_diag=inv_diag, rho=rho))
            break
        T, B_c = tentative_prolongator(agg, n_agg, B_l, level)
        P = smooth_prolongator(A_l, inv_diag, rho, T)
        R = _canonical(P.conj().T)
        levels.append(Level(A=A_l, inv_diag=inv_diag, rho=rho, P=P, R=R, aggregates=agg))
        A_l, B_l = galerkin(R, A_l, P), B_c

    n_c = A_l.shape[0]
    if n_c > MAX_DENSE_COARSE:
        raise ValueError(f"the coarsest level (level {len(levels) - 1}) has {n_c} rows, more than "
                         f"the {MAX_DENSE_COARSE} a dense pseudo-inverse is built for: aggregation "
                         f"stopped reducing the problem (try a smaller theta or more max_levels)")
    coarse_inv = _pseudo_inverse(A_l).astype(wd)
    h = Hierarchy(levels=levels, coarse_inv=coarse_inv, smoother=smoother, omega=float(omega),
                  degree=int(degree), B=Bs)
    h.low = lowered(h, precision)
    add_smoothed_restrictions(h.low if h.low is not None else h)
    return h


PRECISIONS = ("auto", "half", "mixed", "full")
SINGLE = {np.dtype(np.float64): np.dtype(np.float32),
          np.dtype(np.complex128): np.dtype(np.complex64)}


def check_precision(precision) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"AMG precision must be one of {', '.join(map(repr, PRECISIONS))}, got "
                         f"{precision!r}")


def single_of(dtype) -> np.dtype | None:
    """The single precision of a double working dtype (float32, complex64), else None."""
    return SINGLE.get(np.dtype(dtype))


def lowering(h, precision: str):
    """The single dtype the V-cycle of h (a host or device hierarchy) would run in, or None:
    precision "full" or a single level (the V-cycle is then the exact dense solve, kept exact),
    and a working dtype already single where its values stay in it ("mixed", or a complex64 h).
    A float32 h under "auto" or "half" gets float32: the candidate of a float16-valued copy
    (``lowered`` keeps it only where its values fit float16)."""
    check_precision(precision)
    dt = np.dtype(h.levels[0].A.dtype)
    if precision == "full" or len(h.levels) == 1:
        return None
    if precision == "half" and dt.kind != "f":
        raise ValueError(f"AMG precision='half' needs a real hierarchy (float32 or float64), "
                         f"got {dt.name}; use precision='auto' or 'mixed'")
    return lowered_dtype(dt, precision)


def lowered_dtype(dtype, precision: str) -> np.dtype | None:
    """``lowering``'s rule on a working dtype alone (a hierarchy of more than one level): None
    for "full"; float32 itself under "auto" or "half"; else ``single_of``."""
    dt = np.dtype(dtype)
    if precision == "full":
        return None
    if dt == np.float32 and precision in ("auto", "half"):
        return dt
    return single_of(dt)


# Precision "half": the V-cycle in float32, each of its matrices (A_l above the coarsest, P_l,
# R_l = P_l^T) stored in float16 as v / 2^e, with the power of two 2^e chosen so that the largest
# magnitude lands in [2^14, 2^15) (float16's largest is 65504) and folded back into each row's sum
# (exact). The hierarchy fits where every A_l's diagonal, once scaled, is a normal float16
# (>= 2^-14): each value then moves by at most 2^-11 of itself or of its row's diagonal (the
# smaller ones, such as the Galerkin products' cancellation noise at 1e-16 of the largest, round
# to float16's subnormals or zero: at most 2^-25 of the scale). P_l has no such bound to keep: any
# P (R = P^T) gives an SPD V-cycle, a poorer P only a poorer one. M stays symmetric
# (R and P rounded alike) and positive definite (a V-cycle with damped-Jacobi smoothing and an SPD
# coarse solve is, for any symmetric A_l). Measured (H100, level 1 of 3-D 160^3 alone): 12 %
# less time and 17 % fewer joules than float32 values; CG iterations to 1e-8: the same on the
# generated problems, 1-3 more (of 96-669) on four of the shared matrices.
HALF_TOP_EXPONENT = 15
HALF_MIN_NORMAL = 2.0 ** -14
HALF_MIN_SCALE = 2.0 ** -126     # float32's smallest normal: the kernels fold 2^e in as a float32,
                                 # and round by its reciprocal (at most 2^126 then)


def half_matrices(h) -> list:
    """(level, "A" | "P", matrix) of every matrix the float16 copy holds: A_l above the
    coarsest (its own A is not cycled: the dense inverse is) and P_l; R_l = P_l^H takes P_l's
    power of two (the same values). The smoothed restrictions are made from these rounded
    values afterwards, in float32 (``add_smoothed_restrictions``)."""
    out = []
    for index, lev in enumerate(h.levels[:-1]):
        out += [(index, "A", lev.A), (index, "P", lev.P)]
    return out


def half_scale(top: float) -> float:
    """The power of two 2^e that brings a matrix's largest magnitude ``top`` into
    [2^14, 2^15) (1 for a zero matrix)."""
    if not top > 0:
        return 1.0
    return math.ldexp(1.0, math.frexp(top)[1] - HALF_TOP_EXPONENT)


def half_bits(values, scale: float):
    """values / scale (a power of two: exact) rounded to the nearest float16, as float16 (NumPy
    or CuPy): what the device's 2-byte copies hold."""
    return (values * values.dtype.type(1.0 / scale)).astype(np.float16)


def half_values(values, scale: float):
    """values rounded through float16 at ``scale``, in their own dtype (NumPy or CuPy):
    ``half_bits`` times scale, exact."""
    return half_bits(values, scale).astype(values.dtype) * values.dtype.type(scale)


def half_round(M, scale: float):
    """M (a SciPy CSR, float32) with its values rounded through float16 at ``scale``
    (``half_values``); the pattern arrays are shared."""
    return type(M)((half_values(M.data, scale), M.indices, M.indptr), shape=M.shape)


def half_scales_fit(scales) -> bool:
    """Whether every power of two in ``scales`` is a normal float32 whose reciprocal is one too
    (the kernels take both as float32s): false only for a matrix whose largest magnitude lies
    below 2^-112 (~1.9e-34), whose reciprocal scale would overflow float32 to inf."""
    return all(HALF_MIN_SCALE <= s <= 1.0 / HALF_MIN_SCALE for s in scales)


def half_scale_refused(precision) -> str | None:
    """The error text where "half" was asked and a matrix's power of two is out of float32's
    normal range (``half_scales_fit``); None for "auto" (float32 values then)."""
    if precision != "half":
        return None
    return ("AMG precision='half': a matrix of the hierarchy has its largest magnitude below "
            "2^-112 (~1.9e-34): its float16 scale would leave float32's normal range; scale A, "
            "or use precision='auto' or 'mixed'")


def half_refused(precision, small: int) -> str | None:
    """The error text where "half" was asked and ``small`` rows of the matrices have a diagonal
    below float16's normal range once scaled (None for "auto": float32 values then; the report
    says which ran)."""
    if precision != "half" or not small:
        return None
    return (f"AMG precision='half': {small} rows of the hierarchy's matrices have a diagonal too "
            f"small beside their matrix's largest magnitude for float16 (2^-28 of it or less: "
            f"the row would lose its precision); use precision='auto' or 'mixed'")


def half_small_rows(inv_diag, scale: float):
    """The rows of A_l whose diagonal falls below float16's normal range at ``scale``
    (|1 / d_i| above 2^14 / scale), as a bool array (NumPy or CuPy). A bound beyond the dtype's
    range is infinity (no row: 1 / d_i was checked to fit it)."""
    real = inv_diag.real.dtype
    bound = 1.0 / (HALF_MIN_NORMAL * scale)
    return abs(inv_diag) > real.type(bound if bound <= float(np.finfo(real).max) else math.inf)


def cycle_arrays(h) -> list:
    """((what, level), values) of every array (NumPy or CuPy) a single-precision copy of h
    casts: the coarse inverse ("coarse", None; unless None: the device set-up's, still being
    made), every level's A ("A", l), D^-1 ("d", l) and P ("P", l; R is P's transpose), the
    empty ones left out. The device's ``lowered`` reads each one's largest magnitude by key."""
    keyed = [] if h.coarse_inv is None else [(("coarse", None), h.coarse_inv)]
    for l, lev in enumerate(h.levels):                  # noqa: E741
        keyed += [(("A", l), lev.A.data), (("d", l), lev.inv_diag)]
        keyed += [] if lev.P is None else [(("P", l), lev.P.data)]
    return [(key, a) for key, a in keyed if a.size]


def cycle_values(h) -> list:
    """The value arrays of ``cycle_arrays``, without their keys."""
    return [a for _, a in cycle_arrays(h)]


def fits(top: float, single, precision: str) -> bool:
    """Whether the largest magnitude ``top`` of a hierarchy's values fits ``single`` (NaN does
    not); where it does not, "mixed" raises ValueError naming the problem, "auto" keeps the
    working dtype."""
    if top <= float(np.finfo(single).max):
        return True
    text = precision_refused(precision, single)
    if text:
        raise ValueError(text)
    return False


def precision_refused(precision, dtype) -> str | None:
    """The error text for a hierarchy that does not fit ``dtype`` where "mixed" or "half" was
    asked (None for "auto": the working dtype is kept silently, the report says which ran)."""
    if precision not in ("mixed", "half"):
        return None
    return (f"AMG precision={precision!r}: a value of the hierarchy overflows "
            f"{np.dtype(dtype).name} "
            f"(entries beyond {np.finfo(dtype).max:.2e} in A or on a coarse level); use "
            f"precision='full' or 'auto'")


def half_fit(low: Hierarchy, precision: str) -> dict | None:
    """The powers of two of low's matrices (``half_matrices``), keyed (level, "A" | "P"), where
    they all fit float16 (``half_scales_fit``, then no row in ``half_small_rows``), else None
    ("half" raises ValueError naming the problem; "auto" keeps float32 values)."""
    scales = {(index, which): half_scale(float(np.abs(M.data).max()) if M.nnz else 0.0)
              for index, which, M in half_matrices(low)}
    if not half_scales_fit(scales.values()):
        text = half_scale_refused(precision)
        if text:
            raise ValueError(text)
        return None
    out = sum(int(np.count_nonzero(half_small_rows(low.levels[index].inv_diag, scale)))
              for (index, which), scale in scales.items() if which == "A")
    text = half_refused(precision, out)
    if text:
        raise ValueError(text)
    return None if out else scales


# The range a single-precision cycle of a float64 (complex128) system needs of b. float32's normal
# numbers span 2^-126 .. 2^128; the cycle's input is a residual, from ||b|| = 2^e (e: the exponent,
# ||b|| in [2^(e-1), 2^e)) down to ~2^(e-70) (entries ||b|| / sqrt(n), n < 2^32, and a solve to
# rtol 1e-16), and its result is about the input / |A| (2^e_A: A_0's largest magnitude), up to
# 2^20 more (the condition). Both stay inside float32's normal range for lo < e <= hi,
# lo = max(-57, e_A - 57), hi = min(108, e_A + 107); elsewhere the front end solves for b times a
# power of two that brings e 8 inside the nearer end (exact: every iterate is the unscaled one's
# times that power of two, and x, the residual and the callback's iterates go back:
# dpsolve._frontend.fit_rhs). The least shift, as b itself is the methods' business (BiCGStab's
# breakdown test on rho = <r~, r> is absolute, SciPy's). A float64 A and b of 1e-35 (SI units)
# put the cycle's residuals below float32's normal range: CG stopped with -10.
CAST_LOW, CAST_HIGH = -57, 108


def cast_exponents(top_A0: float) -> tuple:
    """(lo, hi) of the window above for a hierarchy whose A_0's largest magnitude is ``top_A0``
    ((-57, 108) for a zero or non-finite one)."""
    if not 0 < top_A0 < math.inf:
        return (CAST_LOW, CAST_HIGH)
    e_a = math.frexp(top_A0)[1]
    return (max(CAST_LOW, e_a + CAST_LOW), min(CAST_HIGH, e_a + CAST_HIGH - 1))


def lowered(h: Hierarchy, precision: str = "auto") -> Hierarchy | None:
    """h cast to the single precision of its working dtype (its V-cycle's hierarchy under
    "mixed"/"auto"/"half"), its matrices rounded through float16 under "half" and, where they
    fit, "auto" (``half_round``; ``Hierarchy.half``), or None where ``lowering`` says so or
    (under "auto") a value does not fit; "mixed" and "half" raise ValueError there."""
    single = lowering(h, precision)
    if single is None:
        return None
    top = float(np.max([np.abs(a).max() for a in cycle_values(h)]))     # NaN propagates
    if not fits(top, single, precision):
        return None

    def cast(M):
        return None if M is None else M.astype(single)
    levels = [Level(A=cast(lev.A), inv_diag=lev.inv_diag.astype(single), rho=lev.rho,
                    P=cast(lev.P), R=cast(lev.R)) for lev in h.levels]
    low = Hierarchy(levels=levels, coarse_inv=h.coarse_inv.astype(single), smoother=h.smoother,
                    omega=h.omega, degree=h.degree,
                    cast_exps=cast_exponents(float(np.abs(h.levels[0].A.data).max(initial=0.0))))
    if precision in ("auto", "half") and single.kind == "f":
        scales = half_fit(low, precision)
        if scales is not None:
            for index, lev in enumerate(low.levels[:-1]):
                lev.A = half_round(lev.A, scales[index, "A"])
                lev.P = half_round(lev.P, scales[index, "P"])
                lev.R = half_round(lev.R, scales[index, "P"])
            low.half = True
    if not low.half and single == np.dtype(h.levels[0].A.dtype):
        return None                     # "auto" on a float32 h: its own values, no copy
    return low


def _pseudo_inverse(A: sp.csr_array) -> np.ndarray:
    """The dense pseudo-inverse of the coarsest matrix, in float64 (complex128).

    For a Hermitian A (to rounding, ``_is_hermitian``) it is ``np.linalg.pinv(H, hermitian=True)``
    of the Hermitian part H = (A + A^H) / 2, averaged with its conjugate transpose so that it is
    exactly Hermitian: the SVD-based pinv of an ill-conditioned matrix is Hermitian only to
    eps * cond (1e-7 relative on bcsstk16's coarsest level), which would make the V-cycle visibly
    nonsymmetric and spoil it as a CG preconditioner. Any other A gets ``np.linalg.pinv(A)``.
    """
    dense = A.toarray().astype(_wide(A.dtype))
    if not _is_hermitian(A):
        return np.linalg.pinv(dense)
    inv = np.linalg.pinv((dense + dense.conj().T) / 2, hermitian=True)
    return (inv + inv.conj().T) / 2


# ---------------------------------------------------------------------------------------------
# the V-cycle


def _smooth(h: Hierarchy, lev: Level, x, b):
    """The level's smoother once, from x (None = zero)."""
    if h.smoother == "jacobi":
        return jacobi_sweep(lev.A, lev.inv_diag, h.omega / lev.rho, x, b)
    return chebyshev(lev.A, lev.inv_diag, lev.rho, h.degree, x, b)


def _cycle(h: Hierarchy, l: int, b: np.ndarray) -> np.ndarray:  # noqa: E741
    if l == len(h.levels) - 1:
        return h.coarse_inv @ b
    lev = h.levels[l]
    if uses_rs(h, lev):                                 # R (b - A S b) as RS b
        x = jacobi_weights(lev.inv_diag, lev.rs_weight) * b + lev.P @ _cycle(h, l + 1, lev.RS @ b)
        return _smooth(h, lev, x, b)
    x = _smooth(h, lev, None, b)                        # pre-smoothing from x = 0
    res = b - lev.A @ x
    x = x + lev.P @ _cycle(h, l + 1, lev.R @ res)       # coarse-grid correction
    return _smooth(h, lev, x, b)                        # post-smoothing, the same smoother


def vcycle(h: Hierarchy, r) -> np.ndarray:
    """z = M r: one V-cycle for A z = r from z = 0.

    On each level l above the coarsest, with right-hand side b (r on level 0):
    pre-smooth from zero (Jacobi: x = (omega / rho) D^-1 b, no SpMV; Chebyshev: ``chebyshev``
    with x=None); the residual res = b - A x; the coarse correction x += P vcycle_{l+1}(R res);
    post-smooth from x with the same smoother. On the coarsest level z = coarse_inv @ b. A level
    that runs its smoothed restriction (``uses_rs``) makes the coarse right-hand side as RS b
    and x as S b + P vcycle_{l+1}(RS b): the same steps, the first three in one product.

    The result's dtype is the common type of the hierarchy's and r's (a float32 hierarchy keeps a
    float32 r in float32). With ``h.low`` (precision "mixed") the cycle runs on it: r cast to
    its dtype, the result cast back.
    """
    r = np.asarray(r)
    n = h.levels[0].A.shape[0]
    if r.shape != (n,):
        raise ValueError(f"vcycle needs a vector of length {n}, got shape {r.shape}")
    dt = np.result_type(h.levels[0].A.dtype, r.dtype)
    if h.low is not None:          # h's smoother settings (a replaced h may carry others)
        low = replace(h.low, smoother=h.smoother, omega=h.omega, degree=h.degree)
        return _cycle(low, 0, r.astype(low.levels[0].A.dtype)).astype(dt)
    return _cycle(h, 0, r.astype(dt, copy=False))


def _is_hermitian(A: sp.csr_array) -> bool:
    """A == A^H up to sqrt(eps) relative to A's largest entry (assembled matrices are often
    symmetric only to rounding)."""
    if A.nnz == 0:
        return True
    diff = A - A.conj().T
    if diff.nnz == 0:
        return True
    tol = math.sqrt(np.finfo(A.dtype).eps) * float(np.abs(A.data).max())
    return float(np.abs(diff.data).max()) <= tol


def as_operator(h: Hierarchy) -> LinearOperator:
    """The V-cycle as a SciPy LinearOperator, usable as ``M`` of ``scipy.sparse.linalg.cg``.

    matvec is ``vcycle``. For a symmetric (Hermitian) A the V-cycle is self-adjoint, so rmatvec is
    ``vcycle`` too; for any other A the adjoint V-cycle is not built and rmatvec raises
    NotImplementedError (a silent wrong adjoint would mislead BiCG-type solvers).
    """
    A = h.levels[0].A
    shape = A.shape
    hermitian = _is_hermitian(A)

    def matvec(x):
        x = np.asarray(x)
        return vcycle(h, x.reshape(-1)).reshape(x.shape)

    def rmatvec(x):
        if not hermitian:
            raise NotImplementedError("the AMG V-cycle's adjoint is only provided for a symmetric "
                                      "(Hermitian) A, where it is the V-cycle itself")
        return matvec(x)

    return LinearOperator(shape, matvec=matvec, rmatvec=rmatvec, dtype=A.dtype)


# ---------------------------------------------------------------------------------------------
# sizes and traffic


def levels_table(h: Hierarchy) -> list[tuple[int, int]]:
    """(rows, nonzeros) of every level's A, finest first."""
    return [(lev.A.shape[0], lev.A.nnz) for lev in h.levels]


def _matrix_bytes(M, value_bytes: int, index_bytes: int, column_bytes: int | None = None) -> int:
    """One read of a CSR matrix: values and column indices of the nonzeros (``column_bytes``
    each, index_bytes where None), and row pointers."""
    column_bytes = index_bytes if column_bytes is None else column_bytes
    return M.nnz * (value_bytes + column_bytes) + (M.shape[0] + 1) * index_bytes


def _smoothing_bytes(h: Hierarchy, a: int, nv: int, from_zero: bool) -> int:
    """The bytes of one smoothing (pre: from_zero, post: from x) on a level; see vcycle_bytes."""
    steps = 1 if h.smoother == "jacobi" else h.degree
    # from zero, Chebyshev's first two steps are one launch (device.chebyshev_launches): step 2
    # gathers step 1's x from b and D^-1, so step 1 moves nothing and step 2 reads no x or d
    fused = from_zero and steps > 1
    total = 0
    for k in range(2 if fused else 1, steps + 1):
        if k > 1 or not from_zero:
            total += a + (0 if fused and k == 2 else nv)   # A, and x (read once, A x and x)
        total += 2 * nv              # b and D^-1
        total += nv                  # write x
        if k > 1 and not (fused and k == 2):
            total += nv              # read d (Chebyshev)
        if k < steps:
            total += nv              # write d (Chebyshev; the last step's d is not needed)
    return total


# the longest mean row on which the Jacobi pre-smoothing is fused into the residual (H100,
# scripts/profile-amg: fused = unfused at 5-7 entries a row, 1.1-1.7x slower at 13-37)
FUSE_MAX_ROW = 8


def fuse_presmoothing(n: int, nnz: int) -> bool:
    """Whether the device V-cycle fuses the Jacobi pre-smoothing into the residual on a level of
    n rows and nnz entries (its mean row is at most FUSE_MAX_ROW)."""
    return nnz <= FUSE_MAX_ROW * max(n, 1)


def vcycle_bytes(h: Hierarchy, value_bytes: int, index_bytes: int = 4,
                 stored: dict | None = None, narrow: set = frozenset()) -> int:
    """The bytes one V-cycle as specified must move: its bandwidth floor at the copy bandwidth.

    With V = value_bytes, I = index_bytes, and on a level of n rows, N = n V (one vector) and
    a = nnz(A) (V + I) + (n + 1) I (one read of A in CSR), each array read or written once per
    step (as fused kernels would):

    * a smoothing step that performs an SpMV reads A and x (a + N), and every step reads b and
      D^-1 (2N) and writes x (N). A Chebyshev step k > 1 also reads d (N), and a step k < degree
      writes d (N). Jacobi is one step; Chebyshev ``degree`` steps. The pre-smoothing's first
      step starts from zero and has no SpMV (Jacobi pre: 3N; post: a + 4N).
    * the residual reads A, x and b and writes res: a + 3N. With the Jacobi smoother, on a level
      whose rows are short (``fuse_presmoothing``), the pre-smoothing from zero is fused into it
      (dpsolve/cuda/amg.cu's vc_presmooth_residual: x is s .* b, gathered from s and b rather
      than read back): b and D^-1 read, x and res written, a + 4N for both; on longer rows the
      two gathers per entry cost more than they save, and the two run apart: 3N + a + 3N, where
      on a level below the finest x = s .* b is written by the restriction that makes b (b not
      read again): 2N + a + 3N.
    * the restriction reads R (nnz(R) (V + I) + (n_c + 1) I) and res, and writes the coarse
      right-hand side: + N + n_c V.
    * the prolongation reads P (likewise, n + 1 row pointers) and the coarse solution (n_c V), and
      reads and writes x: + 2N.
    * the coarsest level reads coarse_inv (n_c^2 V) and its right-hand side, and writes z:
      n_c^2 V + 2 n_c V.
    * a level that runs its smoothed restriction (``uses_rs``) has none of the pre-smoothing,
      the residual and the restriction: b_c = RS b reads RS and b and writes b_c (RS's bytes +
      N + n_c V), and the prolongation writes x = S b + P z_c, reading S and b rather than x
      (+ 3N in place of 2N).

    ``stored``: {(level, "A" | "R" | "P" | "RS"): bytes a value} for matrices whose values the
    run stores in another size than V (float16 copies, precision "half"); ``narrow``: the
    (level, which) whose column indices the run reads as 2-byte offsets (the device's
    ``narrow``; their row pointers stay I bytes).
    """
    V, Ib = int(value_bytes), int(index_bytes)
    stored = stored or {}
    total = 0

    def matrix(index, which, M):
        return _matrix_bytes(M, stored.get((index, which), V), Ib,
                             2 if (index, which) in narrow else Ib)
    for index, lev in enumerate(h.levels[:-1]):
        n = lev.A.shape[0]
        n_c = lev.P.shape[1]
        a = matrix(index, "A", lev.A)
        nv = n * V
        if uses_rs(h, lev):
            total += matrix(index, "RS", lev.RS) + nv + n_c * V
            total += matrix(index, "P", lev.P) + n_c * V + 3 * nv
            total += _smoothing_bytes(h, a, nv, from_zero=False)
            continue
        if h.smoother == "jacobi" and fuse_presmoothing(n, lev.A.nnz):
            total += a + 4 * nv      # the pre-smoothing fused into the residual (see above)
        elif h.smoother == "jacobi":
            total += (2 if index else 3) * nv + a + 3 * nv
        else:
            total += _smoothing_bytes(h, a, nv, from_zero=True)
            total += a + 3 * nv
        total += matrix(index, "R", lev.R) + nv + n_c * V
        total += matrix(index, "P", lev.P) + n_c * V + 2 * nv
        total += _smoothing_bytes(h, a, nv, from_zero=False)
    n_c = h.levels[-1].A.shape[0]
    return total + n_c * n_c * V + 2 * n_c * V
