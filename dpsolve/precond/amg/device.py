"""Smoothed-aggregation AMG on the GPU: the set-up and the V-cycle (the stream face).

The rules are the host reference's (``reference.py``, the specification), step for step:
strength, the MIS-2 aggregation (``dpsolve/cuda/amg.cu``: the same keys and decisions, so the
same aggregates), the tentative prolongator, its smoothing, R = P^H, the Galerkin product R (A P)
(dpsolve's own sparse products, ``spgemm``: ``dpsolve/cuda/spgemm.cu``) and the coarsest level's
dense pseudo-inverse (cuSOLVER). Everything stays on the device; the host reads a few counters
(the MIS-2 rounds, the sizes of each level). ``PreparedSystem.update`` with the same pattern
re-sets up over the kept patterns (``setup(reuse=...)``, ``spgemm_pattern``).

The V-cycle runs as kernels on the solve's executor (``apply``), so the host-driven variants call
it between their own kernels and variant ``graph`` captures it into its WHILE body: one launch
for a whole AMG-PCG solve. Per level above the coarsest (Jacobi smoothing; Chebyshev adds its
steps; level 0 runs the ``_ell`` kernels over the solve's ELL arrays when it holds A in ELL):

    vc_presmooth_residual   X = (omega / rho) D^-1 b (pre-smoothing from zero) and
                            res = b - A X, in one kernel (rows of mean <= 8 entries; on longer
                            rows vc_scale, or the restriction above, writes X, then vc_residual)
    spmv (R)      b_{l+1} = R res                          dpsolve's CSR-vector SpMV, or
                  vc_restrict_scale, which also writes X_{l+1} where that level needs it
                  (vc_restrict_block into few, long rows: ``restriction_lanes``)
    ...           the coarser levels, then the coarsest: vc_dense  x_c = pinv(A_c) b_c
    vc_prolong    X += P x_{l+1}
    vc_jacobi     out = X + (omega / rho) D^-1 (b - A X)    post-smoothing (the same smoother)

A level's A (below level 0), R and P run the ``_sell`` kernels instead, a thread a row, where
``sell_of`` keeps a SELL-32 copy of them (rows enough, padding small), its column indices as
16-bit offsets from each slice's base where they fit (``narrow``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...cuda import ops, pdl
from ...cuda._loader import CSR_VECTOR_WIDTHS, amg_source, compiling, get_kernel
from ...cuda.device_matrix import vector_width
from ...cuda.executor import launch
from .. import smoothers
from . import reference
from . import sparse as sps

BLOCK = ops.BLOCK
FUSE_CASTS = True      # False: the single-precision cycle casts b and z in kernels of their own
# The Jacobi cycle's smoothed restriction (reference.smoothed_restriction): b_{l+1} = RS_l b_l in
# one kernel over RS = R (I - A S), in place of the pre-smoothing, the residual and the restriction
# (two kernels, a pass over A and one over R), and the pre-smoothing's S b added by the
# prolongation. False: the three steps (the benchmarks' A/B; set it before ``prepare``).
FUSE_RESTRICTION = True


def _grid(work: int) -> int:
    return ops.grid_for(work)


def vc_kernel(expression: str, dtype) -> pdl.Kernel:
    """amg.cu's V-cycle kernel ``expression`` at ``dtype`` from the module that holds it
    (``_loader.amg_source``): a pdl.Kernel (``direct``), launched with programmatic dependent
    launch where it is captured into a graph (dpsolve/cuda/pdl.py; every vc_* kernel starts
    with DPS_PDL)."""
    return get_kernel(amg_source(expression), expression, dtype)


# amg.cu's CSR kernels take `rows` rows a group of lanes at a time (1 to MAX_ROWS): several where
# a level has rows enough to fill the GPU that many times over (their loads in flight together),
# one where it has few (every group is needed) or where its rows take several passes of the
# lanes (the one-row loop unrolls them). Chosen from scripts/profile-amg's timings of each
# V-cycle kernel at 1, 2 and 4 (H100, 2-D 1024^2, 3-D 100^3 and 160^3; BENCHMARKS.md).
MAX_ROWS = 4
ROWS_TWO_LANES = 400_000         # rows x lanes from which 2 rows a group pay
ROWS_FOUR_LANES = 4 << 20        # and 4


def rows_at_once(n: int, lanes: int, nnz: int = 0, restriction: bool = False) -> int:
    """Rows a group of ``lanes`` takes at a time in a V-cycle CSR kernel over n rows holding
    nnz entries (0: short rows). The restriction (R's rows: its gathers from the fine level's
    residual spread wide) ran fastest one row at a time on every level measured."""
    if restriction or nnz > 1.5 * lanes * max(n, 1):
        return 1                               # rows of several passes (lanes = 32)
    work = n * lanes
    return MAX_ROWS if work >= ROWS_FOUR_LANES else 2 if work >= ROWS_TWO_LANES else 1


# Lanes a row of a V-cycle CSR kernel: the fewest that leave each lane at most LANE_ENTRIES of
# the mean row and the kernel at least LANES_MIN_THREADS threads (else 32). vector_width's nearest
# power of two to the mean row gave 32 lanes to 2-D 1024^2's level 2 (41k rows of 27): its
# residual and Jacobi sweep took 8.9 and 9.2 us at 32 lanes, 5.8 at 4 (float32, H100, each
# alone); where rows are few (level 3: 3.4k rows of 36) or long (3-D 160^3's level 2: 86k of
# 164), 32 stayed the fastest, as this rule gives. LANES_BY_THREADS = False: vector_width's rule.
# LANE_ENTRIES 8 -> 4 (lanes [2, 2, 4] -> [2, 4, 8] at 2-D 1024^2, [2, 8] -> [2, 16] at 3-D):
# the V-cycle, three A/B pairs interleaved (graph, float32 cycle, H100), 1024^2 161.8-162.5 ->
# 159.0-159.3 us (1.51x -> 1.48x its floor), 100^3 254.6-256.6 -> 253.5-255.6, 160^3 unchanged
# (894.5-896.5 vs 895.7-897.2); 16 was level or slower.
LANE_ENTRIES = 4
LANES_MIN_THREADS = 150_000
LANES_BY_THREADS = True


def cycle_lanes(n: int, nnz: int) -> int:
    """Lanes a row of the V-cycle's CSR kernels over n rows of nnz entries (see above)."""
    mean = nnz / max(n, 1)
    if not LANES_BY_THREADS:
        return vector_width(mean)
    for w in CSR_VECTOR_WIDTHS:
        if mean <= LANE_ENTRIES * w and n * w >= LANES_MIN_THREADS:
            return w
    return CSR_VECTOR_WIDTHS[-1]


# A restriction over its CSR into few, long rows runs a block a row (amg.cu's vc_restrict_block;
# lanes_R = BLOCK) where 32 lanes a row would leave the kernel fewer than LANES_MIN_THREADS threads
# and its rows hold more than RESTRICT_BLOCK_MEAN entries on average (half a block); below level
# 0 only (level 0 of a single-precision cycle reads b in the system's type: vc_restrict_low).
# Measured (H200, graph-captured V-cycles, one process): 3-D 100^3 (levels 1 and 2: 4,053 rows of
# 759, 142 of 840) 137.2 -> 130.1 us, 160^3 (level 2: ~500 rows of ~1,100) 432.8 -> 423.8; 2-D
# 1024^2's 1,998 rows of 121 lost at a mean threshold of 64 (95.4 -> 95.9) and keep 32 lanes; a
# block a row for 160^3's level 1 too (16k rows of 809: threads enough) lost (423.8 -> 430.6).
RESTRICT_BLOCK_MEAN = BLOCK // 2


def restriction_lanes(level: int, nc: int, nnz: int) -> int:
    """Lanes a row of a level's restriction over its CSR into nc rows of nnz entries (BLOCK: a
    block a row)."""
    lanes = cycle_lanes(nc, nnz)
    if (level > 0 and lanes == CSR_VECTOR_WIDTHS[-1] and nc * lanes < LANES_MIN_THREADS
            and nnz > RESTRICT_BLOCK_MEAN * nc):
        return BLOCK
    return lanes


def rows_launch(n: int, lanes: int, nnz: int = 0, restriction: bool = False):
    """(grid, rows as the kernel's last argument) of a V-cycle CSR kernel over n rows and nnz
    entries (``rows_at_once``)."""
    rows = rows_at_once(n, lanes, nnz, restriction)
    return (_grid(-(-n // rows) * lanes),), np.int32(rows)


# SELL-32 copies of the V-cycle's matrices (amg.cu's sell_row: a thread a row, the loads of a slice
# coalesced) where a matrix has rows enough to fill the GPU with threads and its padding is small.
# Measured on the H100 (each kernel alone, CSR-vector -> SELL, us): level 1's A at 2-D 1024^2
# (269k rows of 12.8) 25.4 -> 20.5, at 3-D 160^3 (1.04M of 37) 225 -> 216; R_0 at 160^3 (1.04M of
# 17) 166 -> 140; P_0 at 3-D 100^3 31.0 -> 26.7. Fewer rows, longer rows lost: A_2 at 2-D (41k
# rows of 27) 11.2 -> 15.9, at 3-D 160^3 (86k of 164) 69 -> 118: too few threads for their loops.
SELL_MIN_ROWS = 100_000
SELL_SIGMA = 256                # rows sorted by length within windows of this many (1: unsorted)
SELL_MAX_MEAN_ROW = 48
SELL_MAX_PADDING = 2.0          # slots (entries and padding) per stored entry: a padding slot
                                # reads 4 bytes (its index), an entry 12 (P_1 at 1.54-1.61: 2-D
                                # V-cycle 241.5 -> 240.2 us, 160^3 1438 -> 1412)


# The SELL copies' column indices as 16-bit offsets from a base column per slice of 32 slots
# (amg.cu's col_t) where every slice's columns span at most 65,534: 2 bytes an entry rather than
# 4. Aggregates in their roots' order keep the spans small (32 consecutive rows of a V-cycle
# matrix span at most 8,372 columns at 2-D 1024^2, 57,644 at 3-D 100^3, on the host reference's
# hierarchies; a slice's rows, sorted within SELL_SIGMA windows, may span more). Measured (H200,
# graph-captured V-cycles, against int32 indices, one process): 1024^2 96.9 -> 95.0 us, 100^3
# 138.0 -> 137.2, 160^3 440.5 -> 432.7. Level 0's ELL (the solve's own int32 indices) keeps them:
# a narrow copy of it ran the fused pre-smoothing slower at 160^3 (ncu: 108 -> 120 us), and the
# V-cycle took 435.9 us there.
NARROW_INDICES = True
# A SELL copy with narrow indices and float16 values (precision "half") as one 32-bit word an
# entry, the offset above the value's bits (amg.cu's packed_sum): one load an entry, not two.
PACK_SELL = True


def _narrowed(kernel: str, n: int, size: int, args: tuple, dtype=np.float32):
    """Run amg.cu's ``kernel`` (narrow_index or narrow_ell: a warp per group of 32 slots or rows,
    amg::narrow_group) over n slots, ``args`` its arguments before (out, base, overflow): the
    (offsets, base) it makes, or None where a group spans more than 65,534 columns. One host
    wait."""
    import cupy
    groups = -(-n // 32)
    out = cupy.empty(size, cupy.uint16)
    base = cupy.zeros(groups, cupy.int32)
    overflow = cupy.zeros(1, cupy.int32)
    launch(get_kernel("amg_vc", f"{kernel}<{{T}}>", np.dtype(dtype)), (_grid(groups * 32),),
           (BLOCK,), (*args, out, base, overflow), None)
    if int(overflow.get()[0]):
        return None
    return out, base


def narrow(idx, n: int, dtype, sptr):
    """(offsets, base) of ``idx``, the int32 column indices of a SELL-32 layout over ``sptr`` and
    n slots: uint16 offsets from a base column per slice, 0xFFFF for padding (amg.cu's
    narrow_index), or None where NARROW_INDICES is off or a slice's columns span more than
    65,534. One host wait."""
    if not NARROW_INDICES or n == 0:
        return None
    return _narrowed("narrow_index", n, int(idx.size), (np.int32(n), sptr, idx), dtype)


# Level 0's ELL in a cycle of float16 matrices as one 32-bit word an entry (amg.cu's ell_sum):
# 16-bit column offsets from a base per 32 rows above the values' bits, 4 bytes an entry where the
# solve's int32 indices and the float16 copy read 6, in one load rather than two. A copy: the
# solve's indices stay its own.
PACK_ELL = True


def narrow_ell(indices, n: int, width: int):
    """(offsets, base) of level 0's column-major ELL ``indices`` (n rows of ``width``): uint16
    offsets from each 32 rows' least column, 0xFFFF for padding (amg.cu's narrow_ell), or None
    where 32 rows span more than 65,534 columns. One host wait."""
    if n == 0 or width == 0:
        return None
    return _narrowed("narrow_ell", n, n * width, (np.int32(n), np.int32(width), indices))


def ell_of(A, n: int, dtype) -> tuple | None:
    """(width, indices, data) of ``A``, the solve's own matrix on the device, where it is held
    in ELL (``dpsolve.formats``) with n rows of ``dtype``; else None."""
    ell = getattr(A, "ell", None)
    if (getattr(A, "format", None) == "ell" and ell is not None and ell.n == n
            and np.dtype(ell.dtype) == np.dtype(dtype)):
        return (np.int32(ell.width), ell.indices, ell.data)
    return None


def half_round(values, scale: float, bits: bool = False, offsets=None, kept=None):
    """``reference.half_values`` of float32 values (CuPy), or with ``bits`` their float16s
    (``reference.half_bits``), in one kernel (amg.cu's half_round): the same values. With
    ``offsets`` (uint16 column offsets, float32 values only), or ``kept`` (packed words over the
    same pattern, whose offsets are taken): the packed words offset << 16 | float16 bits
    (uint32: ``PACK_SELL``, ``PACK_ELL``)."""
    import cupy
    if values.dtype != np.float32:
        return (reference.half_bits if bits else reference.half_values)(values, scale)
    n = int(values.size)
    pack = offsets is not None or kept is not None
    words = cupy.empty(n, cupy.uint32) if pack else None
    out = None if pack else cupy.empty(n, np.float16 if bits else np.float32)
    null = ops._NULL
    launch(get_kernel("amg_vc", "half_round<{T}>", np.dtype(np.float32)), (_grid(n),), (BLOCK,),
           (np.int32(n), values, np.float32(1.0 / scale), np.float32(scale),
            out if bits and not pack else null, out if not bits and not pack else null,
            null if offsets is None else offsets, null if kept is None else kept,
            null if words is None else words), None)
    return words if pack else out


def half_arg(values) -> str:
    """The V-cycle kernels' HALF template argument for a matrix's stored values: "true" where
    they are float16's (precision "half": dps::mat_value), else "false"."""
    return "true" if values.dtype == np.float16 else "false"


@dataclass
class SellMatrix:
    """A CSR matrix in SELL-32 (amg.cu's sell_row): slice pointers, indices (-1: padding) and
    values of its slots, and ``perm``, the row of each slot (None: slot q is row q); ``indptr``
    and ``indices`` are the CSR arrays it was made from: a matrix over those same arrays (a
    numeric re-set-up keeps every pattern) refills only the values. With ``base``, ``idx`` holds
    uint16 offsets from each slice's base column (``narrow``). A packed copy (``halved``) keeps
    no ``idx`` (None: its words hold the offsets, and its kernels read only them); ``kept``: the
    packed words whose offsets a copy refilled over a packed one's layout packs again."""
    sptr: object
    idx: object
    val: object
    indptr: object
    indices: object
    perm: object = None
    scale: float = 1.0          # the power of two of float16 values (precision "half")
    base: object = None         # each slice's base column (narrow indices), or None
    kept: object = None         # the previous copy's packed words (sell_of's refill of one)

    @property
    def rows(self):
        """The kernels' argument for ``perm`` (a null pointer where unsorted)."""
        return ops._NULL if self.perm is None else self.perm

    @property
    def packed(self) -> bool:
        """Whether ``val`` holds uint32 words, idx's offsets above float16 bits (PACK_SELL)."""
        return self.val.dtype == np.uint32

    @property
    def half(self) -> str:
        """The kernels' HALF template argument (``half_arg``; packed words hold float16s)."""
        return "true" if self.packed else half_arg(self.val)

    @property
    def tmpl(self) -> str:
        """The kernels' HALF, NARROW (and PACKED) template arguments."""
        return (f"{self.half}, {'false' if self.base is None else 'true'}"
                + (", true" if self.packed else ""))

    def args(self, dtype) -> tuple:
        """The kernels' (sptr, idx, base, val, scale, perm) arguments at the cycle's dtype."""
        return (self.sptr, ops._NULL if self.idx is None else self.idx,
                ops._NULL if self.base is None else self.base, self.val,
                np.dtype(dtype).type(self.scale), self.rows)

    def packs(self) -> bool:
        """Whether ``halved`` packs this copy's values with its offsets (``PACK_SELL``: float32
        values over narrow offsets)."""
        return PACK_SELL and self.base is not None and self.val.dtype == np.float32

    def halved(self, scale: float) -> "SellMatrix":
        """The same layout with its values in float16 at ``scale`` (values already rounded
        through float16 at that scale: exact); packed with the offsets where they are narrow
        (``packs``: the offsets from ``idx``, or from the ``kept`` words of a refilled copy),
        and then without ``idx`` (the words hold it: 2 bytes a slot fewer kept)."""
        if not self.packs():
            return SellMatrix(self.sptr, self.idx, half_round(self.val, scale, bits=True),
                              self.indptr, self.indices, self.perm, scale, self.base)
        words = half_round(self.val, scale, bits=True, offsets=self.idx,
                           kept=self.kept if self.idx is None else None)
        return SellMatrix(self.sptr, None, words, self.indptr, self.indices, self.perm, scale,
                          self.base)


def sell_of(M, prev: SellMatrix | None = None, pack: bool = False) -> SellMatrix | None:
    """M (a CuPy CSR) in SELL-32, or None where it would not pay: fewer than SELL_MIN_ROWS rows,
    rows of more than SELL_MAX_MEAN_ROW entries on average, or more than SELL_MAX_PADDING slots
    per entry. Its rows are sorted by length (longest first, ties in row order: a stable sort)
    within windows of SELL_SIGMA rows, so that the 32 rows of a slice are of like length (the
    padding slots are read too). ``prev``: the copy of a matrix over M's own pattern arrays (the
    same objects), whose layout is kept: one kernel, no host wait. A packed ``prev`` (no
    ``idx``) serves only where the copy is packed again (``pack``: its caller halves it): its
    words' offsets are ``kept`` for that."""
    import cupy
    n, nnz = int(M.shape[0]), int(M.nnz)
    if n < SELL_MIN_ROWS or nnz == 0 or nnz > SELL_MAX_MEAN_ROW * n:
        return None
    dt = np.dtype(M.dtype)
    fill = get_kernel("amg_vc", "sell_fill<{T}>", dt)
    if prev is not None and prev.idx is None and not (pack and PACK_SELL):
        prev = None                                # its offsets are in words it cannot use
    if prev is not None and prev.indptr is M.indptr and prev.indices is M.indices:
        val = cupy.empty(prev.val.size, dt)
        launch(fill, (_grid(n),), (BLOCK,), (np.int32(n), M.indptr, ops._NULL, M.data,
                                            prev.rows, prev.sptr, ops._NULL, val), None)
        return SellMatrix(prev.sptr, prev.idx, val, M.indptr, M.indices, prev.perm,
                          base=prev.base, kept=prev.val if prev.idx is None else None)
    slices = -(-n // 32)
    perm = None
    if SELL_SIGMA > 1:                  # by window, then the row's length, longest first
        perm = cupy.empty(n, cupy.int32)
        launch(get_kernel("amg_vc", "sell_order<{T}>", dt), (_grid(n),), (BLOCK,),
               (np.int32(n), np.int32(SELL_SIGMA), M.indptr, perm), None)
    rows = ops._NULL if perm is None else perm
    sptr = cupy.zeros(slices + 1, cupy.int64)
    widths = cupy.empty(slices, cupy.int32)
    launch(get_kernel("amg_vc", "sell_widths<{T}>", dt), (_grid(slices),), (BLOCK,),
           (np.int32(n), M.indptr, rows, widths), None)
    cupy.cumsum(widths, dtype=cupy.int64, out=sptr[1:])
    total = int(sptr[-1])                                               # one host wait
    if total > SELL_MAX_PADDING * nnz or total >= 2**31:
        return None
    sptr = sptr.astype(cupy.int32)
    idx, val = cupy.empty(total, cupy.int32), cupy.empty(total, dt)
    launch(fill, (_grid(n),), (BLOCK,), (np.int32(n), M.indptr, M.indices, M.data, rows, sptr,
                                        idx, val), None)
    short = narrow(idx, n, dt, sptr)                                   # one host wait
    if short is not None:
        return SellMatrix(sptr, short[0], val, M.indptr, M.indices, perm, base=short[1])
    return SellMatrix(sptr, idx, val, M.indptr, M.indices, perm)


@dataclass
class DeviceLevel:
    """One level on the device: A_l (CuPy CSR), D^-1, rho, P and R (None on the coarsest), the
    lanes per row of its products, and the V-cycle's work vectors."""
    A: object
    inv_diag: object
    rho: float
    P: object = None
    R: object = None
    aggregates: object = None
    T: object = None                         # the tentative prolongator (B of one column)
    R_order: object = None                   # R.data = conj(P.data[R_order]): R's pattern kept
    AP_counts: object = None                 # A P's symbolic pass (SpgemmCounts), kept likewise
    RS: object = None                        # R (I - A S): the smoothed restriction (Jacobi)
    rs_weight: float = None                  # its S's omega / rho (reference.uses_rs)
    RS_order: object = None                  # RS.data = conj(((I - S A) P).data[RS_order])
    rs_missing: int | None = None            # M's entries outside RS's product (its patterns')
    scale: object = None                     # (omega / rho) D^-1: the Jacobi sweep's weights
    cheb: tuple = ()                         # Chebyshev (c1, c2) per step
    lanes: int = 2
    lanes_P: int = 2
    lanes_R: int | None = 2                  # R's lanes a row (None where the SELL copy runs)
    fused: bool = True                       # the Jacobi pre-smoothing fused into the residual
    sell_A: SellMatrix = None                # SELL-32 copies (sell_of; None: CSR-vector kernels)
    sell_R: SellMatrix = None
    sell_P: SellMatrix = None
    half: tuple = None                       # (A's, P's) powers of two: values float16's
    X: object = None
    Wb: object = None
    res: object = None
    d: object = None
    b_in: object = None                      # the level's right-hand side (levels below 0)
    out: object = None                       # and its result

    @property
    def n(self) -> int:
        return int(self.A.shape[0])


@dataclass
class DeviceHierarchy:
    levels: list
    coarse_inv: object
    smoother: str
    omega: float
    degree: int
    dtype: np.dtype
    setup_times: dict = field(default_factory=dict)
    B: list = field(default_factory=list)
    ell0: tuple = None            # (width, indices, data): level 0 in the solve's ELL arrays
    resetup: str = "full"         # "full", "aggregates" (kept) or "numeric" (patterns kept too)
    low: "DeviceHierarchy" = None  # the V-cycle's hierarchy in single precision (``lowered``)
    half: bool = False            # its matrices' values float16's (reference.half_round)
    b_top: object = None          # with ``low``: the V-cycle's input and output cast to its
    z_top: object = None          # dtype (vc_to_single, vc_from_single)
    cast_exps: tuple = (-57, 108)  # (of ``low``) reference.cast_exponents: b's safe window

    def use_ell(self, A, reuse: "DeviceHierarchy | None" = None) -> None:
        """Run level 0's smoothing and residual over ``A``, the solve's own matrix on the device,
        when it is in ELL (regular rows: a thread a row, coalesced, and no second copy of A_0;
        on the H100 the CSR-vector kernels reached 64-69 % of the copy bandwidth on 5- and
        7-entry rows). Both smoothers; other formats keep A_0's CSR. ``reuse``: the
        hierarchy before a numeric re-set-up (A's pattern kept), whose packed copy's offsets
        serve again (no narrow_ell, no host wait)."""
        self.ell0 = ell_of(A, self.levels[0].n, self.dtype)
        low = self.low
        if low is None:
            return
        if self.ell0 is None:
            low.ell0 = None
            return
        width, indices, data = self.ell0
        data = data.astype(low.dtype)        # the single-precision cycle: a cast copy
        if low.half:                         # rounded as A_0's copy (reference.half_round)
            scale = low.levels[0].half[0]
            old = getattr(getattr(reuse, "low", None), "ell0", None)
            if (PACK_ELL and old is not None and old[2].dtype == np.uint32
                    and int(old[0]) == int(width) and old[2].size == data.size):
                low.ell0 = (width, old[1], half_round(data, scale, bits=True, kept=old[2]))
                return
            short = narrow_ell(indices, self.levels[0].n, int(width)) if PACK_ELL else None
            if short is not None:            # packed: (width, each 32 rows' base, words)
                words = half_round(data, scale, bits=True, offsets=short[0])
                low.ell0 = (width, short[1], words)
                return
            data = half_round(data, scale, bits=True)
        low.ell0 = (width, indices, data)

    def stored_value_bytes(self) -> dict:
        """{(level, "A" | "R" | "RS" | "P"): 2} for the matrices whose kernels read float16 values
        (the SELL copies and level 0's ELL under precision "half"): ``reference.vcycle_bytes``'s
        ``stored``."""
        out = {}
        for index, lev in enumerate(self.levels[:-1]):
            restriction = "RS" if reference.uses_rs(self, lev) else "R"
            for which, S in (("A", lev.sell_A), (restriction, lev.sell_R), ("P", lev.sell_P)):
                if S is not None and S.half == "true":
                    out[index, which] = 2
        if self.ell0 is not None and self.ell_args()[1] != "false":
            out[0, "A"] = 2
        return out

    def narrow_matrices(self) -> set:
        """{(level, "A" | "R" | "RS" | "P")} of the matrices whose SELL kernels read 2-byte
        column offsets (``narrow``): ``reference.vcycle_bytes``'s ``narrow``."""
        out = set()
        for index, lev in enumerate(self.levels[:-1]):
            restriction = "RS" if reference.uses_rs(self, lev) else "R"
            for which, S in (("A", lev.sell_A), (restriction, lev.sell_R), ("P", lev.sell_P)):
                if S is not None and S.base is not None:
                    out.add((index, which))
        if self.ell0 is not None and self.ell_args()[1] == "true, true":
            out.add((0, "A"))
        return out

    def ell_args(self) -> tuple:
        """Level 0's ELL kernel arguments (width, indices, data, its values' power of two), and
        the kernels' HALF template argument ("true, true": HALF and PACKED, ``PACK_ELL``)."""
        width, indices, data = self.ell0
        half = "true, true" if data.dtype == np.uint32 else half_arg(data)
        scale = self.levels[0].half[0] if half != "false" else 1.0
        return (width, indices, data, self.dtype.type(scale)), half

    # (its levels, complexities and V-cycle bytes: reference.levels_table / vcycle_bytes, which
    # read only each level's shapes and nnz, serve the device hierarchy as they are)

    def to_host(self) -> "reference.Hierarchy":
        """The same hierarchy as the host reference's objects (SciPy CSR, NumPy): the tests run
        the reference V-cycle on it and compare."""
        import scipy.sparse as sp

        def host(M):
            return None if M is None else sp.csr_array(M.get())
        levels = [reference.Level(A=host(lev.A), inv_diag=lev.inv_diag.get(), rho=lev.rho,
                                  P=host(lev.P), R=host(lev.R),
                                  aggregates=None if lev.aggregates is None
                                  else lev.aggregates.get().astype(np.int64),
                                  RS=host(lev.RS), rs_weight=lev.rs_weight)
                  for lev in self.levels]
        out = reference.Hierarchy(levels=levels, coarse_inv=self.coarse_inv.get(),
                                  smoother=self.smoother, omega=self.omega, degree=self.degree,
                                  B=[b.get() for b in self.B])
        out.low = None if self.low is None else self.low.to_host()
        return out

    # --- the V-cycle: kernels on the executor's stream ----------------------------------------
    def vcycle(self, b, out, stream) -> None:
        """Issue out = M b (b, out: the finest level's vectors; out is not read). With ``low``
        (precision "mixed"): b cast to single precision, the cycle on ``low``, the result cast
        back into out."""
        low = self.low
        if low is None:
            self._cycle(0, b, out, stream)
            return
        if self.casts_fused():
            low._cycle(0, b, out, stream, wide=self.dtype)
            return
        n = np.int32(self.levels[0].n)
        launch(vc_kernel("vc_to_single<{T}>", self.dtype), (_grid(n),), (BLOCK,),
               (n, b, self.b_top), stream)
        low._cycle(0, self.b_top, self.z_top, stream)
        launch(vc_kernel("vc_from_single<{T}>", self.dtype), (_grid(n),), (BLOCK,),
               (n, self.z_top, out), stream)

    def casts_fused(self) -> bool:
        """Whether the single-precision cycle reads b and writes its result in this hierarchy's
        dtype inside level 0's kernels (``vc_*_ell_low``: level 0 on the solve's ELL with the
        pre-smoothing fused, more than one level) rather than through the two cast kernels."""
        low = self.low
        return (FUSE_CASTS and low is not None and low.ell0 is not None and len(low.levels) > 1
                and self.smoother == "jacobi"
                and (low.levels[0].fused or reference.uses_rs(low, low.levels[0])))

    def _cycle(self, l, b, out, stream, scaled=False, wide=None):  # noqa: E741
        """Level l's part of the V-cycle: out = M_l b. ``scaled``: the restriction that made b
        also wrote X = s .* b, the Jacobi pre-smoothing from zero (levels of long rows).
        ``wide`` (level 0 of a single-precision cycle, ``casts_fused``): b and out are of that
        dtype, cast inside level 0's kernels."""
        levels = self.levels
        if l == len(levels) - 1:
            nc = levels[l].n
            launch(vc_kernel("vc_dense<{T}>", self.dtype),      # a block a row
                   (min(nc, 65535),), (BLOCK,), (np.int32(nc), self.coarse_inv, b, out), stream)
            return
        lev = levels[l]
        nxt = levels[l + 1]
        if reference.uses_rs(self, lev):
            self._cycle_rs(l, b, out, stream, wide)
            return
        ell = self.ell0 if l == 0 and self.smoother == "jacobi" else None
        if ell is not None:                                    # level 0 in the solve's ELL
            X, n = lev.X, np.int32(lev.n)
            args, half = self.ell_args()
            if wide is not None:
                launch(vc_kernel(f"vc_presmooth_residual_ell_low<{{T}}, {half}>", wide),
                       (_grid(lev.n),), (BLOCK,), (n, *args, lev.scale, b, X, lev.res), stream)
            elif lev.fused:
                launch(vc_kernel(f"vc_presmooth_residual_ell<{{T}}, {half}>", self.dtype),
                       (_grid(lev.n),), (BLOCK,), (n, *args, lev.scale, b, X, lev.res), stream)
            else:
                launch(vc_kernel("vc_scale<{T}>", self.dtype), (_grid(lev.n),),
                       (BLOCK,), (n, lev.scale, b, X), stream)
                self._residual(lev, X, b, stream)              # over the same ELL
        elif self.smoother == "jacobi" and lev.fused and lev.sell_A is not None:
            X, S = lev.X, lev.sell_A
            launch(vc_kernel(f"vc_presmooth_residual_sell<{{T}}, {S.tmpl}>", self.dtype),
                   (_grid(lev.n),), (BLOCK,),
                   (np.int32(lev.n), *S.args(self.dtype), lev.scale, b, X, lev.res), stream)
        elif self.smoother == "jacobi" and lev.fused:          # X = s .* b; res = b - A X
            A, X = lev.A, lev.X
            grid, rows = rows_launch(lev.n, lev.lanes, lev.A.nnz)
            launch(vc_kernel(f"vc_presmooth_residual<{{T}}, {lev.lanes}>", self.dtype),
                   grid, (BLOCK,),
                   (np.int32(lev.n), A.indptr, A.indices, A.data, lev.scale, b, X, lev.res, rows),
                   stream)
        elif self.smoother == "jacobi":                        # the same, in two kernels
            X = lev.X
            if not scaled:
                launch(vc_kernel("vc_scale<{T}>", self.dtype), (_grid(lev.n),),
                       (BLOCK,), (np.int32(lev.n), lev.scale, b, X), stream)
            self._residual(lev, X, b, stream)
        else:
            X = self._smooth(lev, None, b, lev.X, stream)      # pre-smoothing from zero
            self._residual(lev, X, b, stream)                  # res = b - A X
        # b_{l+1} = R res; where level l+1 pre-smooths apart from its residual, the same kernel
        # writes its X = s .* b_{l+1} (one launch fewer)
        scale_next = (self.smoother == "jacobi" and not nxt.fused and l + 1 < len(levels) - 1
                      and not reference.uses_rs(self, nxt))
        sc, xc = (nxt.scale, nxt.X) if scale_next else (ops._NULL, ops._NULL)  # null: R res only
        if lev.sell_R is not None:
            S = lev.sell_R
            launch(vc_kernel(f"vc_restrict_sell<{{T}}, {S.tmpl}>", self.dtype), (_grid(nxt.n),),
                   (BLOCK,), (np.int32(nxt.n), *S.args(self.dtype), lev.res, sc, nxt.b_in, xc),
                   stream)
        else:
            self._restrict(lev, lev.R, nxt.n, (lev.res, sc, nxt.b_in, xc), stream)
        self._cycle(l + 1, nxt.b_in, nxt.out, stream, scaled=scale_next)
        if lev.sell_P is not None:
            S = lev.sell_P
            launch(vc_kernel(f"vc_prolong_sell<{{T}}, {S.tmpl}>", self.dtype), (_grid(lev.n),),
                   (BLOCK,), (np.int32(lev.n), *S.args(self.dtype), nxt.out, ops._NULL,
                              ops._NULL, X), stream)
        else:
            P = lev.P
            grid, rows = rows_launch(lev.n, lev.lanes_P, lev.P.nnz)
            launch(vc_kernel(f"vc_prolong<{{T}}, {lev.lanes_P}>", self.dtype), grid,
                   (BLOCK,), (np.int32(lev.n), P.indptr, P.indices, P.data, nxt.out, ops._NULL,
                              ops._NULL, X, rows), stream)
        self._post_smooth(l, X, b, out, stream, wide)

    def _post_smooth(self, l, X, b, out, stream, wide):  # noqa: E741
        """Level l's post-smoothing from X into out: over the solve's ELL on level 0 where the
        cycle has it (with the casts to and from ``wide`` fused), else ``_smooth``."""
        lev = self.levels[l]
        if l == 0 and self.ell0 is not None and self.smoother == "jacobi":
            args, half = self.ell_args()
            name = "vc_jacobi_ell<{T}, " if wide is None else "vc_jacobi_ell_low<{T}, "
            launch(vc_kernel(name + half + ">", self.dtype if wide is None else wide),
                   (_grid(lev.n),), (BLOCK,), (np.int32(lev.n), *args, lev.scale, X, b, out),
                   stream)
        else:
            self._smooth(lev, X, b, out, stream)

    def _cycle_rs(self, l, b, out, stream, wide=None):  # noqa: E741
        """Level l's part of the V-cycle over its smoothed restriction (``reference.uses_rs``):
        b_{l+1} = RS b in one kernel, the coarse cycle, X = S b + P z_{l+1} (the pre-smoothing
        from zero added by the prolongation), the post-smoothing into out. ``wide``: as
        ``_cycle``'s, b and out of that dtype (the ``*_low`` kernels cast where they read b)."""
        lev, nxt = self.levels[l], self.levels[l + 1]
        kdt = self.dtype if wide is None else wide            # the kernels' template type
        low = "" if wide is None else "_low"
        n, nc, X = np.int32(lev.n), np.int32(nxt.n), lev.X
        # b_{l+1} = RS b: the *_low kernels take (b, b_c), the others (res, sc, bc, xc)
        tail = (b, nxt.b_in) if wide is not None else (b, ops._NULL, nxt.b_in, ops._NULL)
        if lev.sell_R is not None:
            S = lev.sell_R
            launch(vc_kernel(f"vc_restrict_sell{low}<{{T}}, {S.tmpl}>", kdt), (_grid(nxt.n),),
                   (BLOCK,), (nc, *S.args(self.dtype), *tail), stream)
        else:
            self._restrict(lev, lev.RS, nxt.n, tail, stream, wide)
        self._cycle(l + 1, nxt.b_in, nxt.out, stream)
        if lev.sell_P is not None:
            S = lev.sell_P
            launch(vc_kernel(f"vc_prolong_sell{low}<{{T}}, {S.tmpl}>", kdt), (_grid(lev.n),),
                   (BLOCK,), (n, *S.args(self.dtype), nxt.out, lev.scale, b, X), stream)
        else:
            P = lev.P
            grid, rows = rows_launch(lev.n, lev.lanes_P, P.nnz)
            launch(vc_kernel(f"vc_prolong{low}<{{T}}, {lev.lanes_P}>", kdt), grid, (BLOCK,),
                   (n, P.indptr, P.indices, P.data, nxt.out, lev.scale, b, X, rows), stream)
        self._post_smooth(l, X, b, out, stream, wide)

    def _restrict(self, lev, M, nc, tail, stream, wide=None):
        """b_c = M r over M's CSR (the level's restriction without a SELL copy):
        vc_restrict_scale (tail: r, sc, b_c, xc), vc_restrict_low where ``wide`` (tail: b, b_c),
        or vc_restrict_block where lanes_R is BLOCK (a block a row: ``restriction_lanes``)."""
        if lev.lanes_R == BLOCK:
            launch(vc_kernel("vc_restrict_block<{T}>", self.dtype), (min(nc, 65535),), (BLOCK,),
                   (np.int32(nc), M.indptr, M.indices, M.data, *tail), stream)
            return
        grid, rows = rows_launch(nc, lev.lanes_R, M.nnz, restriction=True)
        name = "vc_restrict_low" if wide is not None else "vc_restrict_scale"
        launch(vc_kernel(f"{name}<{{T}}, {lev.lanes_R}>", self.dtype if wide is None else wide),
               grid, (BLOCK,), (np.int32(nc), M.indptr, M.indices, M.data, *tail, rows), stream)

    def _residual(self, lev, x, b, stream):
        if lev is self.levels[0] and self.ell0 is not None:   # the solve's ELL
            args, half = self.ell_args()
            launch(vc_kernel(f"vc_residual_ell<{{T}}, {half}>", self.dtype), (_grid(lev.n),),
                   (BLOCK,), (np.int32(lev.n), *args, x, b, lev.res), stream)
            return
        if lev.sell_A is not None:
            S = lev.sell_A
            launch(vc_kernel(f"vc_residual_sell<{{T}}, {S.tmpl}>", self.dtype), (_grid(lev.n),),
                   (BLOCK,), (np.int32(lev.n), *S.args(self.dtype), x, b, lev.res), stream)
            return
        A = lev.A
        grid, rows = rows_launch(lev.n, lev.lanes, lev.A.nnz)
        launch(vc_kernel(f"vc_residual<{{T}}, {lev.lanes}>", self.dtype), grid,
               (BLOCK,), (np.int32(lev.n), A.indptr, A.indices, A.data, x, b, lev.res, rows),
               stream)

    def _smooth(self, lev, x, b, out, stream):
        """The level's smoother from x (None: zero, Chebyshev only: the Jacobi pre-smoothing from
        zero is fused into the residual), its last step written into ``out``; returns out.
        Out-of-place steps alternate between out and the level's Wb."""
        A, n, dt = lev.A, np.int32(lev.n), self.dtype
        grid, rows = rows_launch(lev.n, lev.lanes, lev.A.nnz)
        if self.smoother == "jacobi" and lev.sell_A is not None:
            S = lev.sell_A
            launch(vc_kernel(f"vc_jacobi_sell<{{T}}, {S.tmpl}>", dt), (_grid(lev.n),), (BLOCK,),
                   (n, *S.args(dt), lev.scale, x, b, out), stream)
            return out
        if self.smoother == "jacobi":
            launch(vc_kernel(f"vc_jacobi<{{T}}, {lev.lanes}>", dt), grid, (BLOCK,),
                   (n, A.indptr, A.indices, A.data, lev.scale, x, b, out, rows), stream)
            return out
        csr = vc_kernel(f"vc_cheb<{{T}}, {lev.lanes}>", dt)
        for src, dst, c0, c1, c2, product in chebyshev_steps(lev.cheb, x, out, lev.Wb):
            tail = (lev.inv_diag, ops._NULL if src is None else src, b, lev.d, c0, c1, c2, dst)
            if product and lev is self.levels[0] and self.ell0 is not None:
                args, half = self.ell_args()                           # the solve's ELL
                launch(vc_kernel(f"vc_cheb_ell<{{T}}, {half}>", dt), (_grid(lev.n),),
                       (BLOCK,), (n, *args, *tail), stream)
            elif product and lev.sell_A is not None:
                S = lev.sell_A
                launch(vc_kernel(f"vc_cheb_sell<{{T}}, {S.tmpl}>", dt), (_grid(lev.n),),
                       (BLOCK,), (n, *S.args(dt), *tail), stream)
            else:                              # CSR, or the first step alone (no product)
                launch(csr, grid, (BLOCK,), (n, A.indptr, A.indices, A.data, *tail, rows), stream)
        return out


# --- set-up -------------------------------------------------------------------------------------

class _Phases:
    """The set-up's split (``setup_times``, seconds) from CUDA events on its stream: ``mark()``
    records one where a phase starts, ``add(name, start)`` where it ends, and ``times()`` reads
    them after one wait at the end. A phase's time is the stream's between its events: its
    kernels, and the host's launches where the stream waited for them. It replaced a host wait
    at every boundary (30 a set-up; an A/B on an H200 found them costing no wall time, the phases
    ending in host waits of their own, but a measurement should not add any)."""

    def __init__(self, stream):
        self.stream, self.spans = stream, []
        self.first = self.mark()

    def mark(self):
        import cupy
        event = cupy.cuda.Event()
        event.record(self.stream)
        return event

    def add(self, name: str, start):
        end = self.mark()
        self.spans.append((name, start, end))
        return end

    def times(self, names) -> "SetupTimes":
        """The phases' seconds, and "total", as a mapping read when first asked (the set-up
        returns with its last kernels still running: a re-set-up's graph capture goes on beside
        them)."""
        return SetupTimes(self, names, self.mark())

    def read(self, names, last) -> dict:
        import cupy
        last.synchronize()
        out = dict.fromkeys(names, 0.0)
        for name, start, end in self.spans:
            out[name] += cupy.cuda.get_elapsed_time(start, end) * 1e-3
        out["total"] = cupy.cuda.get_elapsed_time(self.first, last) * 1e-3
        return out


class SetupTimes(Mapping):
    """``_Phases.times``: a set-up's split, read from its events (one wait for the set-up's last
    one) at the first look, then kept. Before, the set-up waited for its own end to read them,
    and a re-set-up, which times no V-cycle, held its graph's capture back that long."""

    def __init__(self, phases: _Phases, names, last):
        self._args, self._times = (phases, tuple(names), last), None

    def _read(self) -> dict:
        if self._times is None:
            phases, names, last = self._args
            self._times, self._args = phases.read(names, last), None
        return self._times

    def __getitem__(self, key):
        return self._read()[key]

    def __iter__(self):
        return iter(self._read())

    def __len__(self):
        return len(self._read())

    def __repr__(self):
        return repr(self._read())


def _csr(data, indices, indptr, shape, canonical=None):
    """A cupyx CSR over the set-up's own arrays (nothing copied). CuPy 14's constructor checks a
    user's (data, indices, indptr) by reading indptr's ends back: a host wait each, ~28 a set-up
    at 10^6 rows. The set-up's arrays are consistent by construction (data and indices of
    indptr[-1] entries, one index dtype), so CuPy's internal ``_from_parts``, which builds the
    same matrix without the wait, is used where it exists; the public constructor otherwise.
    ``canonical=True``: rows sorted without duplicates, known (the levels' A: cupyx's
    ``diagonal`` would otherwise test it, a kernel and a wait)."""
    import cupyx.scipy.sparse as csp
    make = getattr(csp.csr_matrix, "_from_parts", None)
    if make is not None and indices.dtype == indptr.dtype and data.size == indices.size:
        return make(data, indices, indptr, shape, has_canonical_format=canonical)
    return csp.csr_matrix((data, indices, indptr), shape=shape)


def _canonical(M, has_zero=None):
    """CSR without explicit zeros (the reference's ``_canonical``). The set-up's products, sums
    and transposes already give sorted rows without duplicates; the zeros are dropped here with
    CuPy's array operations. (cupyx's sum_duplicates / eliminate_zeros / sort_indices sequence
    lost entries with CuPy 14.2 on CUDA 13: P had 401 of its 1,063 nonzeros on 2-D Poisson
    20^2; which of the three is not pinned down, so none is used.) ``has_zero``: whether M
    stores a zero, where the caller read it back already (None: read here, one host wait)."""
    import cupy
    M = M.tocsr()
    if has_zero is False:
        return M
    if has_zero is None and not ops.any_zero(M.data):
        return M
    keep = M.data != 0
    n = M.shape[0]
    rows = sps.row_ids(M.indptr, int(M.nnz))
    counts = sps.bin_counts(rows[keep], n)
    indptr = cupy.zeros(n + 1, cupy.int32)
    indptr[1:] = cupy.cumsum(counts).astype(cupy.int32)
    return _csr(M.data[keep], M.indices[keep], indptr, M.shape,
                canonical=getattr(M, "_has_canonical_format", None))


# the longest column that transpose puts in order by ranks (transpose_rank: length^2 / 32 steps a
# warp); a matrix with a longer one takes sparse.transpose's sort
TRANSPOSE_RANK_MAX = 1024


def transpose(indptr, indices, data, shape, conj=False, with_order=False):
    """``sparse.transpose`` on the device without its sort, the same arrays bit for bit (order
    int32): the columns counted, the entries scattered into their columns, each column put in
    row order by its entries' ranks (amg.cu's transpose_count, transpose_fill, transpose_rank;
    5 operations and one host wait, the longest column, against the sort's 20-odd). Int32
    indices only, columns of at most TRANSPOSE_RANK_MAX entries; ``sparse.transpose`` else."""
    import cupy
    m, k = shape
    nnz = int(indices.shape[0])

    def sorted_():
        out = sps.transpose(indptr, indices, data, shape, conj=conj, with_order=with_order)
        return out[:3] + (out[3].astype(cupy.int32),) if with_order else out
    if nnz == 0 or indptr.dtype != cupy.int32 or indices.dtype != cupy.int32:
        return sorted_()
    wide = smoothers._wide(data.dtype)              # the "amg" module's dtypes include it
    counts = cupy.zeros(k + 1, cupy.int32)          # and the longest column, last
    launch(get_kernel("amg", "transpose_count<{T}>", wide), (_grid(nnz),), (BLOCK,),
           (np.int32(nnz), indices, counts, counts[k:]), None)
    t_ptr = cupy.zeros(k + 1, cupy.int32)
    cupy.cumsum(counts[:k], out=t_ptr[1:])
    if int(counts[k:].get()[0]) > TRANSPOSE_RANK_MAX:
        return sorted_()
    src, src_row, order, t_idx = (cupy.empty(nnz, cupy.int32) for _ in range(4))
    launch(get_kernel("amg", "transpose_fill<{T}>", wide), (_grid(m),), (BLOCK,),
           (np.int32(m), indptr, indices, t_ptr, counts, src, src_row), None)
    launch(get_kernel("amg", "transpose_rank<{T}>", wide), (ops.grid_for(k * 32),), (BLOCK,),
           (np.int32(k), t_ptr, src, src_row, order, t_idx), None)
    t_data = data[order]
    out = (t_ptr, t_idx, t_data.conj() if conj else t_data)
    return out + (order,) if with_order else out


def _spmv(M, x, magnitude=False):
    """M x (|M| x with ``magnitude``) with dpsolve's own CSR-vector SpMV, M a CuPy CSR of any
    shape: the aggregate norms."""
    import cupy

    from ...cuda.device_matrix import CsrVectorMatrix
    from ...formats import CSR
    data = cupy.abs(M.data) if magnitude else M.data
    y = cupy.empty(M.shape[0], x.dtype)
    ops.spmv(CsrVectorMatrix(CSR(M.indptr, M.indices, data.astype(x.dtype), M.shape[0])), x, y)
    return y


SPGEMM_BLOCK = 128
SPGEMM_WARPS = SPGEMM_BLOCK // 32
SPGEMM_SHARED_SLOTS = 512        # spgemm.cu's shared table (slots a warp)
SPGEMM_GLOBAL_SLOTS = 1 << 26    # global hash-table slots per launch for the rows that overflow
SPGEMM_DENSE_MAX_COLS = 1 << 13  # long rows of a C this narrow are made as dense rows
SPGEMM_DENSE_SLOTS = 1 << 23     # dense-row slots (ncols a warp) of one launch: >= 1,024 warps
SPGEMM_SHARED_DENSE_BYTES = 48 << 10   # a block's dense rows in shared memory (no opt-in needed)
SPGEMM_SMALL_SLOTS = 128         # spgemm.cu: rows of tsize <= this take 8 lanes, not a warp
SPGEMM_SMALL_LANES = 8


def _dense_shared(ncols: int, dtype):
    """(warps a block, bytes a warp) of spgemm.cu's dense rows in shared memory for a C of
    ``ncols`` columns (a row's values and flags), or None where a row does not fit
    SPGEMM_SHARED_DENSE_BYTES."""
    row_bytes = ncols * (4 + np.dtype(dtype).itemsize)
    if row_bytes > SPGEMM_SHARED_DENSE_BYTES:
        return None
    return min(SPGEMM_WARPS, SPGEMM_SHARED_DENSE_BYTES // row_bytes), row_bytes


def spgemm(A, B):
    """C = A @ B: :func:`spgemm_counted`'s product."""
    return spgemm_counted(A, B)[0]


def spgemm_counted(A, B, counts=None):
    """C = A @ B (CuPy CSR matrices of one dtype, rows sorted without duplicates) with dpsolve's
    own kernels (dpsolve/cuda/spgemm.cu: a warp and a hash table per row, a symbolic pass that
    counts, a numeric pass that writes): sorted rows, no duplicates, and each entry summed in
    A's column order, as SciPy's product does -- the same bits every run. cuSPARSE's SpGEMM
    (through cupyx) returned wrong products and faulted on CUDA 13 / CuPy 14.2 (issue 30).

    Where C has at most SPGEMM_DENSE_MAX_COLS columns, the rows whose tables would neither fit
    the shared memory nor be smaller than a row of C, and the rows that overflow their shared
    table, are made as dense rows of C: in shared memory where a row's values and flags fit
    SPGEMM_SHARED_DENSE_BYTES, else in global scratch; on a wider C, the rows that overflow get
    global hash tables. Returns (C, its
    :class:`SpgemmCounts`); ``counts``: those of an earlier product with the same patterns (a
    re-set-up's A P): the symbolic pass is skipped."""
    import cupy
    m, k = A.shape
    if B.shape[0] != k:
        raise ValueError(f"spgemm: shapes {A.shape} and {B.shape} do not multiply")
    dt = np.dtype(A.dtype)
    if np.dtype(B.dtype) != dt:
        raise TypeError(f"spgemm: dtypes {A.dtype} and {B.dtype} differ")
    ncols = B.shape[1]
    if m == 0 or A.nnz == 0 or B.nnz == 0:
        return _csr(cupy.empty(0, dt), cupy.empty(0, cupy.int32),
                    cupy.zeros(m + 1, cupy.int32), (m, ncols)), None
    a_ptr, a_idx = A.indptr.astype(cupy.int32, copy=False), A.indices.astype(cupy.int32,
                                                                              copy=False)
    b_ptr, b_idx = B.indptr.astype(cupy.int32, copy=False), B.indices.astype(cupy.int32,
                                                                              copy=False)
    dense_flags = []          # the dense rows' stamps, -1 at first: shared by this call's passes
    kernels = [get_kernel("spgemm", f"spgemm_rows<{{T}}, {numeric}>", dt)
               for numeric in (0, 1)]                        # symbolic, numeric
    dense_shared = [get_kernel("spgemm", f"spgemm_dense_shared<{{T}}, {numeric}>", dt)
                    for numeric in (0, 1)]
    small = [get_kernel("spgemm", f"spgemm_rows_small<{{T}}, {numeric}>", dt)
             for numeric in (0, 1)]
    if counts is None:
        tsize, overflow = cupy.empty(m, cupy.int32), cupy.empty(m, cupy.int32)
        # on a narrow C, a row whose table would not fit shared memory and would be at least as
        # large as a dense row is a dense row at once (overflow_i = 1 from the start): capped at
        # SPGEMM_SHARED_SLOTS, its shared table could fill past half and probe long (R (A P)
        # with 573 such rows took 4.9 ms at 3-D 100^3). Rows of a smaller table stay in shared
        # memory (A P at 160^3, 86,065 rows into 2,278 columns: 3.8 ms there, 9.4 as dense
        # rows, whose read-out scans every column)
        dense_cols = ncols if ncols <= SPGEMM_DENSE_MAX_COLS else 0
        launch(get_kernel("spgemm", "spgemm_bound<{T}>", dt), (_grid(m),), (BLOCK,),
               (np.int32(m), a_ptr, a_idx, b_ptr, tsize, overflow,
                np.int32(SPGEMM_SHARED_SLOTS), np.int32(dense_cols)), None)
        counts = SpgemmCounts(tsize=tsize, overflow=overflow)
        count = cupy.zeros(m, cupy.int32)
    operands = (a_ptr, a_idx, A.data, b_ptr, b_idx, B.data, counts.tsize)
    null3 = (ops._NULL,) * 3

    def shared_pass(numeric, tail):
        """Every row not flagged, in shared memory: rows of at most 64 products (tables of up
        to SPGEMM_SMALL_SLOTS) 8 lanes a row, the others a warp a row."""
        if SPGEMM_SMALL_SLOTS:                   # (at most spgemm.cu's table for them)
            launch(small[numeric], (ops.grid_for(m * SPGEMM_SMALL_LANES, SPGEMM_BLOCK),),
                   (SPGEMM_BLOCK,), (np.int32(m), *operands, *tail,
                                     np.int32(min(SPGEMM_SMALL_SLOTS, 128))), None)
        launch(kernels[numeric], (ops.grid_for(m * 32, SPGEMM_BLOCK),), (SPGEMM_BLOCK,),
               (np.int32(m), ops._NULL, *operands, *null3, np.int32(ncols), *null3[:2],
                counts.overflow, *tail, np.int32(min(SPGEMM_SMALL_SLOTS, 128))), None)

    def big_pass(numeric, tail):
        """The rows that overflowed the shared tables: dense rows of C where C is narrow (in
        shared memory, up to 4 warps a block, where they fit), else global hash tables of their
        own, in chunks of at most SPGEMM_GLOBAL_SLOTS slots."""
        big = counts.big
        if big.size == 0:
            return
        shared = _dense_shared(ncols, dt) if ncols <= SPGEMM_DENSE_MAX_COLS else None
        if shared is not None:
            per_block, row_bytes = shared
            launch(dense_shared[numeric], (-(-int(big.size) // per_block),), (32 * per_block,),
                   (np.int32(big.size), big, *operands[:6], np.int32(ncols), *tail),
                   None, shared_mem=per_block * row_bytes)
            return
        if ncols <= SPGEMM_DENSE_MAX_COLS:
            warps = max(1, min(int(big.size), SPGEMM_DENSE_SLOTS // max(ncols, 1)))
            blocks = -(-warps // SPGEMM_WARPS)
            slots = blocks * SPGEMM_WARPS * ncols
            if not dense_flags:
                dense_flags.append(cupy.full(slots, -1, cupy.int32))
            vals = cupy.empty(slots, dt) if numeric else ops._NULL
            launch(kernels[numeric], (blocks,), (SPGEMM_BLOCK,),
                   (np.int32(big.size), big, *operands, *null3, np.int32(ncols),
                    dense_flags[0], vals, counts.overflow, *tail, np.int32(0)), None)
            return
        if counts.ends is None:
            counts.ends = cupy.cumsum(counts.tsize[big].astype(cupy.int64)).get()
        ends = counts.ends
        start = 0
        while start < big.size:                   # chunks of rows whose tables fit the cap
            base = int(ends[start - 1]) if start else 0
            stop = max(start + 1, int(np.searchsorted(ends, base + SPGEMM_GLOBAL_SLOTS,
                                                      side="right")))
            rows = big[start:stop]
            off = cupy.asarray(np.concatenate([[0], ends[start:stop - 1] - base]))
            slots = int(ends[stop - 1]) - base
            g_keys = cupy.empty(slots, cupy.int32)
            g_vals = cupy.empty(slots, dt) if numeric else ops._NULL
            launch(kernels[numeric], (ops.grid_for(rows.size * 32, SPGEMM_BLOCK),),
                   (SPGEMM_BLOCK,), (np.int32(rows.size), rows, *operands, off, g_keys, g_vals,
                                     np.int32(ncols), *null3[:2], counts.overflow, *tail,
                                     np.int32(0)), None)
            start = stop

    if counts.c_ptr is None:                      # the symbolic pass: C's row lengths
        tail = (count, *null3)
        shared_pass(0, tail)
        counts.big = cupy.flatnonzero(counts.overflow).astype(cupy.int32)
        big_pass(0, tail)
        c_ptr = cupy.zeros(m + 1, cupy.int32)
        cupy.cumsum(count, dtype=cupy.int32, out=c_ptr[1:])
        counts.c_ptr, counts.nnz = c_ptr, int(c_ptr[-1])
    c_idx = cupy.empty(counts.nnz, cupy.int32)
    c_val = cupy.empty(counts.nnz, dt)
    tail = (ops._NULL, counts.c_ptr, c_idx, c_val)
    shared_pass(1, tail)
    big_pass(1, tail)
    return _csr(c_val, c_idx, counts.c_ptr, (m, ncols), canonical=True), counts


@dataclass
class SpgemmCounts:
    """What a product's symbolic pass found, kept for a product with the same patterns (a
    re-set-up's A P): each row's table size, the rows that overflow the shared tables (flags and
    list), C's row pointers and nnz, and the global tables' offsets."""
    tsize: object
    overflow: object
    big: object = None
    c_ptr: object = None
    nnz: int = 0
    ends: object = None


# device bytes a hierarchy takes, per byte of A in CSR (the levels at an operator complexity up to
# ~3, P and R, and the sparse products' intermediates; the SELL-32 copies of A_1, R_0, P_0 and
# P_1, up to ~4 more at 3-D 160^3; the smoothed restrictions where they pay, 1.0-1.5 nnz(A) a
# level) and per vector (the V-cycle's work vectors, the set-up's): on the safe side of what the
# H100 runs showed (operator complexity 1.9-2.9; 1.6-1.9 since second_pass "auto")
HIERARCHY_PER_MATRIX_BYTE, HIERARCHY_VECTORS = 12, 24


def check_memory(n: int, nnz: int, dtype, precision: str = "full") -> None:
    """The size guard for the hierarchy: ProblemTooLargeError, before any work, when its
    estimate exceeds the device's free memory (DPSOLVE_NO_SIZE_GUARD=1 to try anyway). A
    single-precision V-cycle (``precision`` not "full", a double dtype) adds its cast values
    (half the values' bytes again) and keeps its work vectors in single precision."""
    import os

    import cupy

    from ...matrices import SIZE_GUARD_ENV, ProblemTooLargeError, human_bytes
    if os.environ.get(SIZE_GUARD_ENV, "") not in ("", "0"):
        return
    item = np.dtype(dtype).itemsize
    values = item if precision == "full" or reference.single_of(dtype) is None else 1.5 * item
    need = int(HIERARCHY_PER_MATRIX_BYTE * (nnz * (values + 4) + (n + 1) * 4)
               + HIERARCHY_VECTORS * n * item)
    free, _ = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    free += pool.total_bytes() - pool.used_bytes()     # CuPy's cached blocks are reusable
    if need > free:
        raise ProblemTooLargeError(
            f"M='amg': n = {n:,}, nnz = {nnz:,} ({np.dtype(dtype).name}) needs about "
            f"{human_bytes(need)} of device memory for its hierarchy, more than the "
            f"{human_bytes(free)} free; set {SIZE_GUARD_ENV}=1 to try anyway")


# spgemm_pattern's dense rows need at least this many warps a block (the block's dense rows in
# shared memory: 12 bytes a column in float64): at one warp a block (3-D 100^3's A_1 T_1, 154,768
# rows into 4,053 columns) four warps an SM were resident and the product took 4.9-5.0 ms,
# against the search kernel's 0.30 at 4,102 columns (the passes' numbering: a row too wide).
SPGEMM_PATTERN_DENSE_WARPS = 4


def spgemm_pattern(A, B, C, missing=None):
    """A @ B over C's pattern (CuPy CSR, sorted rows): a new C with C's indptr and indices and
    the product's values there (spgemm.cu's spgemm_pattern, or spgemm_pattern_dense where C's
    dense rows fit shared memory at SPGEMM_PATTERN_DENSE_WARPS a block: the same sums, in the
    same order, as ``spgemm``), or None
    when a product falls outside the pattern (an entry of A @ B that C lacks: the caller makes
    the product anew). ``missing``: a zeroed int32 device slot that takes the count of those
    products, with nothing read back (the new C is returned whatever it holds)."""
    import cupy
    m = A.shape[0]
    dt = np.dtype(A.dtype)
    c_val = cupy.zeros(int(C.nnz), dt)
    deferred = missing is not None
    missing = cupy.zeros(1, cupy.int32) if missing is None else missing
    ncols = int(C.shape[1])
    shared = _dense_shared(ncols, dt)
    if shared is not None and shared[0] < SPGEMM_PATTERN_DENSE_WARPS:
        shared = None                    # too few rows resident: the search kernel (see above)
    if m and A.nnz and B.nnz:
        if shared is not None:                                                # dense rows
            per_block, row_bytes = shared
            launch(get_kernel("spgemm", "spgemm_pattern_dense<{T}>", dt),
                   (-(-m // per_block),), (32 * per_block,),
                   (np.int32(m), A.indptr, A.indices, A.data, B.indptr, B.indices, B.data,
                    np.int32(ncols), C.indptr, C.indices, c_val, missing), None,
                   shared_mem=per_block * row_bytes)
        else:
            # rows of few products (A T and A P on the fine levels): 8 lanes a row, else a warp
            few = (A.nnz / m) * (B.nnz / max(int(B.shape[0]), 1)) <= SPGEMM_SMALL_SLOTS // 2
            launch(get_kernel("spgemm", "spgemm_pattern_small<{T}>" if few else
                              "spgemm_pattern<{T}>", dt),
                   (ops.grid_for(m * (SPGEMM_SMALL_LANES if few else 32), SPGEMM_BLOCK),),
                   (SPGEMM_BLOCK,),
                   (np.int32(m), A.indptr, A.indices, A.data, B.indptr, B.indices, B.data,
                    C.indptr, C.indices, c_val, missing), None)
        if not deferred and int(missing.get()[0]):
            return None
    return _csr(c_val, C.indices, C.indptr, C.shape,
                canonical=getattr(C, "_has_canonical_format", None))


def _check_level(A, level: int, who: str = "AMG", positive: bool = True, bad=None):
    """D^-1 of A_l, or the reference's errors in its words (``diagonal.refusal``: a zero or
    non-finite diagonal entry, a non-positive one where ``positive``, or one whose reciprocal is
    past the largest float): the diagonal and the count of bad rows in one pass (amg.cu's
    diag_check), one host wait. ``who`` names the preconditioner (M="chebyshev" runs here too,
    and takes a negative diagonal: ``positive`` False, as its host face). Before, a float32
    diagonal entry below ~3e-39 beside values near 1 left Inf in D^-1 (CuPy's 1 / d also read a
    float32 subnormal as 0: ``_system.widened``). ``bad``: a zeroed int32 device slot that takes
    the count of bad rows, with nothing read back (the re-set-up's: the caller reads it, and
    calls again where it is not 0, for the error)."""
    import cupy

    from ..._system import narrowed, widened
    from ..diagonal import refusal
    n = int(A.shape[0])
    d = cupy.empty(n, A.dtype)
    deferred = bad is not None
    bad = cupy.zeros(1, cupy.int32) if bad is None else bad
    launch(get_kernel("amg", "diag_check<{T}>", np.dtype(A.dtype)), (_grid(n),), (BLOCK,),
           (np.int32(n), A.indptr, A.indices, A.data, d, bad), None)
    dw = widened(d)                             # float32: its subnormals as they are
    # a real float32 1 / d through float64 is the correctly rounded quotient (CuPy's division,
    # bit for bit, where d is normal); complex64 keeps CuPy's division
    inv = narrowed(1.0 / dw, A.dtype) if d.dtype.char == "f" else (1.0 / d).astype(A.dtype)
    big = ~cupy.isfinite(inv)
    # added to diag_check's count (its zero, non-finite and non-positive rows): one read for
    # both (not big.sum(): CuPy compiles a CUB reduction for each size class, 1-2 s each on a
    # first call)
    ops.count_true(big, out=bad)
    if deferred or not int(bad.get()[0]):
        return inv
    checks = [("nonfinite", ~cupy.isfinite(dw)), ("zero", dw == 0)]     # the reference's order
    if positive:
        checks.append(("negative", dw.real <= 0))
    for problem, mask in checks + [("reciprocal", big)]:
        rows = cupy.flatnonzero(mask)
        if rows.size:
            raise ValueError(refusal(problem, rows.get(), who, reference.level_name(level),
                                     A.dtype))
    return inv                                  # a row diag_check counted, passed here


# A level of at most this many entries runs its power steps in one cooperative launch (amg.cu's
# power_iterate) where the GPU has cooperative launches: 40 launches from Python took 0.6-0.9 ms
# whatever the level's size, so the small levels were bound by the host. Over a big level the
# one launch loses: every step's gathers go through L2 (L1 is not coherent across a grid.sync).
# H200, a level's spectral_radius, launched -> one launch (ms): 2-D 1024^2's levels of 434k and
# 59k entries 0.75 -> 0.59, 0.72 -> 0.38, 3-D 100^3's of 357k and 9.6k 0.59 -> 0.47, 0.58 ->
# 0.37, 160^3's of 52k 0.94 -> 0.59; but 160^3's level of 1.5M (rows of 94) 0.92 -> 1.00, 100^3's
# of 5.5M 1.31 -> 1.64, 160^3's of 22.6M 3.2 -> 4.7. 0: never.
POWER_ONE_LAUNCH_NNZ = 1_000_000
# Lanes a row of the power steps over CSR, at most: a level's spectral_radius at 8 lanes against
# vector_width's (H200, ms): 2-D 1024^2 level 1 (rows of 12) 0.93 against 16 lanes' 0.98, 3-D
# 100^3 level 1 (35) 0.96 against 32's 1.12, 160^3 level 1 (36) 3.06 against 3.27; the levels of
# longer rows level at 8-32.
POWER_MAX_LANES = 8


def spectral_radius(A, inv_diag, iterations: int = 20, ell=None, out=None) -> float | None:
    """``smoothers.spectral_radius`` on the device: the same start vector and steps, in float64
    (complex128), a kernel a step (amg.cu's power_step: the normalisation by the previous norm
    is folded into the next product, and its last block sums the norm), or every step in one
    cooperative launch on a small level (power_iterate, ``POWER_ONE_LAUNCH_NNZ``), and one host
    read at the end.
    ``ell``: A in ELL, (width, indices, data) (``ell_of``), whose steps run a thread a row
    (power_step_ell) where its values are of the steps' type. ``out``: a float64 device slot
    that takes the estimate (a non-finite one as it is), with nothing read back (returns None)."""
    import cupy
    n = A.shape[0]
    wide = np.dtype(np.complex128 if A.dtype.kind == "c" else np.float64)
    data = A.data.astype(wide, copy=False)
    d64 = inv_diag.astype(wide, copy=False)
    # vector_width's lanes, at most POWER_MAX_LANES: the V-cycle's rule (cycle_lanes, tuned on
    # float32 and float16 values) gave 160^3's level 0 2 lanes, 252 us a float64 step against 8
    # lanes' 200 (ncu)
    lanes = min(POWER_MAX_LANES, vector_width(A.nnz / max(n, 1)))
    (grid,), rows = rows_launch(n, lanes, A.nnz)
    if ell is not None and ell[2].dtype == wide:
        grid = _grid(n)
    else:
        ell = None
    v = cupy.empty(n, wide)                       # smoothers.start_vector's values
    launch(get_kernel("amg", "power_start<{T}>", wide), (_grid(n),), (BLOCK,), (np.int32(n), v),
           None)
    v /= cupy.linalg.norm(v)
    w = [cupy.empty_like(v), cupy.empty_like(v)]
    norm = cupy.zeros(1, cupy.float64) if out is None else out
    one = _one_launch(A.nnz, lanes, wide) if ell is None else None
    if one is not None:
        kernel, blocks = one
        partials = cupy.empty(2 * min(blocks, grid), cupy.float64)
        launch(kernel, (min(blocks, grid),), (BLOCK,),
               (np.int32(n), A.indptr, A.indices, data, d64, v, w[0], w[1], partials,
                np.int32(iterations), rows, norm), None)
        return None if out is not None else _estimate(norm)
    partials = cupy.empty(grid, cupy.float64)
    done = cupy.zeros(1, cupy.uint32)            # the steps' count of finished blocks
    scales = cupy.empty(2, cupy.float64)         # 1 / norm of the steps, alternately
    step = (get_kernel("amg", f"power_step<{{T}}, {lanes}>", wide) if ell is None
            else get_kernel("amg", "power_step_ell<{T}>", wide))
    src, sc = v, ops._NULL
    for k in range(iterations):
        dst, sc_out = w[k % 2], scales[k % 2:k % 2 + 1]
        if ell is None:
            args = (A.indptr, A.indices, data, d64, src, sc, dst, partials, rows)
        else:
            args = (*ell, d64, src, sc, dst, partials)
        launch(step, (grid,), (BLOCK,), (np.int32(n), *args, done, norm, sc_out), None)
        src, sc = dst, sc_out
    return None if out is not None else _estimate(norm)


def _estimate(norm) -> float:
    """The power iteration's estimate in its float64 device slot, as ``_finite`` takes it: one
    host wait."""
    return _finite(float(norm.get()[0]))


def _finite(est: float) -> float:
    """A power iteration's estimate on the host: NaN where it is not finite."""
    return est if math.isfinite(est) else float("nan")


def _one_launch(nnz: int, lanes: int, wide):
    """(power_iterate, a kernel of the cooperative module amg_power, and the most of its blocks
    resident at once) for a level of nnz entries, or None where its steps are launched one by
    one (``POWER_ONE_LAUNCH_NNZ``, or no cooperative launch here)."""
    from ..._device import status
    if nnz > POWER_ONE_LAUNCH_NNZ or not status().cooperative_launch:
        return None
    kernel = get_kernel("amg_power", f"power_iterate<{{T}}, {lanes}>", wide)
    blocks = ops._max_active_blocks(kernel) * ops._sm_count()
    return (kernel, blocks) if blocks >= 1 else None


def strength_graph(A, theta: float):
    """The reference's undirected strength graph with self loops, as (indptr, indices) int32.
    With theta = 0, no stored zero, a diagonal entry in every row and a symmetric pattern (the
    usual SPD matrix), it is A's own pattern: no work beyond the checks."""
    import cupy
    indptr = A.indptr
    if theta == 0:                 # the asymmetry count and "a stored zero", in one host wait
        n = A.shape[0]
        flags = cupy.zeros(2, cupy.int32)
        launch(get_kernel("amg", "pattern_asymmetry<{T}>", A.dtype), (_grid(n),), (BLOCK,),
               (np.int32(n), indptr, A.indices, flags[:1]), None)
        ops.any_zero(A.data, out=flags[1:])
        if not flags.get().any():
            return indptr, A.indices
    gp, gj = sps.strength(indptr, A.indices, A.data, A.diagonal(), theta)   # the reference's
    return gp.astype(cupy.int32), gj.astype(cupy.int32)


def _mis(gp, gj, dtype, distance: int, agg=None):
    """``reference.mis_states`` on the device: the values v (state << 60 | key; -1 inactive)
    after the rounds (amg.cu's mis_init, then a round's mis2_max and mis2_max_decide at
    distance 2, mis2_max and mis2_decide at distance 1: two launches a round, the first
    zeroing the round's count)."""
    import cupy
    n = gp.size - 1
    grid = (_grid(n),)
    k = lambda name: get_kernel("amg", name + "<{T}>", dtype)    # noqa: E731
    v = cupy.empty(n, cupy.int64)
    m1 = cupy.empty(n, cupy.int64)
    count = cupy.empty(1, cupy.int32)
    k("mis_init")(grid, (BLOCK,), (np.int32(n), agg if agg is not None else ops._NULL, v))
    for rnd in range(1000):
        k("mis2_max")(grid, (BLOCK,), (np.int32(n), gp, gj, v, m1, count))
        if distance == 2:
            k("mis2_max_decide")(grid, (BLOCK,), (np.int32(n), gp, gj, m1, v, count))
        else:
            k("mis2_decide")(grid, (BLOCK,), (np.int32(n), v, m1, count))
        # the host looks every second round (a round after the set has settled changes nothing:
        # only undecided nodes are decided), one wait instead of two
        if rnd % 2 == 1 and int(count.get()[0]) == 0:
            return v
    raise RuntimeError("AMG aggregation: the independent set did not settle in 1000 rounds")


def aggregate(gp, gj, dtype, second_pass: int = 1):
    """``reference.aggregate``'s three passes on the device: (node -> aggregate int32, n_agg).
    ``second_pass``: the second pass's distance, as the reference's (0: none). A pass's new
    roots are flagged, numbered after the aggregates so far by the flags' inclusive sum
    (amg.cu's agg_flags, agg_number) and joined by their neighbours (agg_join), the leftovers
    and the new roots' count read back in one wait; the aggregates are renumbered in their
    roots' order at the end (agg_root_order)."""
    import cupy
    n = gp.size - 1
    grid = (_grid(n),)
    k = lambda name: get_kernel("amg", name + "<{T}>", dtype)    # noqa: E731
    count = cupy.zeros(2, cupy.int32)          # the join's leftovers, a pass's new roots

    def rooted(v, agg, base):
        """(flags, their inclusive sum, the aggregates with the new roots numbered from base):
        pass 1 (agg None) the IN nodes of v, pass 2 those of the leftovers with a leftover
        neighbour; their count into count[1]."""
        flag = cupy.empty(n, cupy.int32)
        k("agg_flags")(grid, (BLOCK,), (np.int32(n), gp, gj, v,
                                        ops._NULL if agg is None else agg, flag))
        csum = cupy.cumsum(flag, dtype=cupy.int32)
        out = cupy.empty(n, cupy.int32)
        k("agg_number")(grid, (BLOCK,), (np.int32(n), flag, csum, np.int32(base),
                                         ops._NULL if agg is None else agg, out, count[1:]))
        return flag, csum, out

    def joined(agg, v, roots_only):
        """(the join's result, the nodes it left out, count[1]), read back in one wait."""
        out = cupy.empty_like(agg)
        count[:1].fill(0)
        k("agg_join")(grid, (BLOCK,), (np.int32(n), np.int32(roots_only), gp, gj, v, agg, out,
                                       count[:1]))
        missing, new = (int(c) for c in count.get())
        return out, missing, new

    # pass 1: the MIS-2's roots and their neighbours
    v = _mis(gp, gj, dtype, 2)
    flag1, csum1, agg = rooted(v, None, 0)
    agg, missing, n_agg = joined(agg, v, 1)
    flag2 = csum2 = ops._NULL
    # pass 2: second roots, the MIS-1 of the leftovers that have a leftover neighbour
    if missing and second_pass:
        v2 = _mis(gp, gj, dtype, int(second_pass), agg)
        flag2, csum2, agg = rooted(v2, agg, n_agg)
        agg, missing, new = joined(agg, v2, 1)
        n_agg += new
    # pass 3: the rest join their aggregated neighbour of largest key
    for _ in range(n + 1):
        if not missing:
            if not reference.ROOT_ORDER:
                return agg, n_agg
            # numbered in the order of their roots (reference.in_root_order)
            renumber = cupy.empty(n_agg, cupy.int32)
            k("agg_root_order")(grid, (BLOCK,), (np.int32(n), flag1, csum1, flag2, csum2, agg,
                                                 renumber))
            return renumber[agg], n_agg
        agg, missing, _ = joined(agg, v, 0)
    raise RuntimeError("AMG aggregation left nodes unaggregated (internal error)")


def tentative(agg, n_agg: int, B, level: int, dtype, ones: bool = False,
              check_zero: bool = True):
    """T (CuPy CSR, n x n_agg*k) and the coarse B: the reference's rule (c). k = 1 on the device
    (the squared norms summed per aggregate by a CSR product in index order); k > 1 through the
    reference's batched QR on the host (rigid-body modes: small next to the products).
    ``check_zero``: raise for an aggregate where B is zero (one host wait); the set-up skips it
    where B cannot be zero there (the constants, or a coarse B: the positive norms of the level
    above)."""
    import cupy
    n, kcols = B.shape
    if kcols > 1:
        T, Bc = reference.tentative_prolongator(agg.get().astype(np.int64), n_agg, B.get(), level)
        return _csr(cupy.asarray(T.data), cupy.asarray(T.indices.astype(np.int32)),
                    cupy.asarray(T.indptr.astype(np.int32)), T.shape), cupy.asarray(Bc)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    b = B[:, 0].astype(wide)
    sq = (b.real ** 2 + b.imag ** 2) if b.dtype.kind == "c" else b * b
    rows = cupy.arange(n + 1, dtype=cupy.int32)
    if ones:
        # B = the constants (the default, level 0): ||B_agg||^2 is the aggregate's size, which
        # the reference's float64 sum of ones gives exactly
        norms = cupy.sqrt(sps.bin_counts(agg, n_agg).astype(cupy.float64))
    else:
        # ||B_agg||^2: T0^T (aggregates x nodes, nodes in index order) times B's squares, with
        # dpsolve's own SpMV (deterministic: a fixed order of the sums)
        t_ptr, t_idx, t_val = transpose(rows, agg, cupy.ones(n, cupy.float64), (n, n_agg))
        norms = cupy.sqrt(_spmv(_csr(t_val, t_idx, t_ptr, (n_agg, n)),
                                sq.astype(cupy.float64)))
    zero = cupy.flatnonzero(norms == 0) if check_zero else ()
    if len(zero):
        raise ValueError(f"B is zero on every node of {int(zero.size)} aggregate(s) of level "
                         f"{level} (first: aggregate {int(zero[0])}): the coarse space cannot "
                         f"represent it. Give B a nonzero entry near every node")
    q = (b / norms[agg]).astype(dtype)
    return _csr(q, agg.copy(), rows, (n, n_agg)), norms.astype(dtype)[:, None]


def smooth_prolongator(A, inv_diag, rho: float, T, dtype, one_per_row: bool = False):
    """P = T - (4/3 / rho) D^-1 (A T) (the reference's rule (d)). A T holds T's pattern (A has
    its diagonal), so for a T of one entry a row (``one_per_row``: the caller knows it, as
    ``tentative`` makes T from a B of one column) the sum is made in place over A T's pattern
    (amg.cu's smooth_tentative); other T (B of k > 1 columns) through ``sparse.add``."""
    AT = spgemm(A, T)
    n = AT.shape[0]
    if one_per_row:
        missing, has_zero = _smooth_in_place(AT, inv_diag, rho, T, dtype)
        if not missing:
            return _canonical(AT, has_zero)
        raise RuntimeError("AMG set-up: A T lacks an entry of T's pattern (internal error)")
    c = np.finfo(dtype).dtype.type(reference.PROLONGATION_OMEGA / rho)
    AT = _canonical(AT)
    launch(get_kernel("amg", "csr_scale_rows<{T}>", dtype), (_grid(n),), (BLOCK,),
           (np.int32(n), AT.indptr, AT.data, inv_diag), None)
    p, i, d = sps.add((T.indptr, T.indices, T.data), (AT.indptr, AT.indices, -(AT.data * c)),
                      T.shape)
    return _canonical(_csr(d, i, p, T.shape))


def _smooth_in_place(AT, inv_diag, rho, T, dtype, zeros=True, flags=None):
    """AT's values become P = T - (4/3 / rho) D^-1 (A T) over AT's pattern, for a T of one entry
    a row (amg.cu's smooth_tentative). Returns (missing, has_zero), read back in one wait:
    whether a row lacks T's column (AT is then unusable), and whether P stores a zero (an
    entry that cancelled: ``_canonical`` drops it; False unless ``zeros`` asks). ``rho``: a
    float, or a device float64 slot (the re-set-up's, c made from it on the device, the same
    bits); ``flags``: a zeroed int32 device slot that takes the missing rows' count, with nothing
    read back (returns None)."""
    import cupy
    n = AT.shape[0]
    real = np.finfo(dtype).dtype.type
    on_device = isinstance(rho, cupy.ndarray)
    c = real(0 if on_device else reference.PROLONGATION_OMEGA / rho)
    out = cupy.zeros(2, cupy.int32) if flags is None else flags
    launch(get_kernel("amg", "smooth_tentative<{T}>", dtype), (_grid(n),), (BLOCK,),
           (np.int32(n), AT.indptr, AT.indices, AT.data, inv_diag, T.indices, T.data,
            np.dtype(dtype).type(c), rho if on_device else ops._NULL,
            np.float64(reference.PROLONGATION_OMEGA), out[:1]), None)
    if flags is not None:
        return None
    if zeros:
        ops.any_zero(AT.data, out=out[1:])
    missing, has_zero = (int(f) for f in out.get())
    return bool(missing), bool(has_zero)


# A coarsest level of more rows than this is inverted by Cholesky where it is Hermitian
# (``_cholesky_inverse``), else or where that fails by LU (getrf/getrs), rather than by an
# eigendecomposition (eigh took 28 ms of a set-up at 2,009 rows on an H200; reference.MAX_DENSE):
# an inverse is kept where ||A X - I||_max <= INVERSE_CHECK, which an indefinite (Cholesky), a
# singular or a nearly singular level fails (its pseudo-inverse then as below). For a nonsingular
# level the inverse is the pseudo-inverse, to rounding. Cholesky against LU (H200, best of 3):
# 2,009 rows 3.6 against 7.5 ms, 484 rows 0.8 against 1.5, the same inverse to 1.1e-15. The
# threshold 500 -> 64 (H200, best of 3): 3-D 160^3's 484 rows 5.3 -> 1.9 ms (LU), 100^3's 130
# rows 1.8 -> 0.9 ms, the same inverse to 2.4e-15.
LU_INVERSE_ROWS = 64
INVERSE_CHECK = 1e-9


def _cholesky_inverse(H, eye):
    """H^-1 for a Hermitian positive definite H (float64 or complex128; ``eye`` its identity,
    not written): its Cholesky factor L (cuSOLVER's potrf on a column-major copy), L^-1 by one
    triangular solve against the identity (cuBLAS's trsm), then H^-1 = L^-H L^-1 by one GEMM;
    no host wait (the libraries called directly, on the current stream: cupy.linalg.cholesky and
    cupyx's solve_triangular took 4.38 ms for the same steps). At 1,998 rows on an H200, timed
    where the set-up runs it, 2.58 ms against 3.52 for cuSOLVER's posv with the identity
    (potrf, then two triangular solves of n columns each); alone, the residual ||H X - I||_max
    9.7e-15 against 2.9e-15 (benchmarks/coarse-inverse-ways-2026-12-02.py,
    coarse-inverse-ab-2026-12-02.py). Where H is not positive definite potrf stops early and L
    is no factor: the caller's check fails the result."""
    import cupy
    from cupy.cuda import cusolver, device as cuda_device
    from cupy_backends.cuda.libs import cublas
    n, z = H.shape[0], H.dtype == np.complex128
    L = cupy.array(H, order="F")                     # column-major: cuSOLVER reads H itself
    handle = cuda_device.get_cusolver_handle()
    size, potrf = ((cusolver.zpotrf_bufferSize, cusolver.zpotrf) if z
                   else (cusolver.dpotrf_bufferSize, cusolver.dpotrf))
    lower = left = no_op = non_unit = 0              # cuBLAS's enums (cublas_api.h)
    work = cupy.empty(max(size(handle, lower, n, L.data.ptr, n), 1), H.dtype)
    info = cupy.empty(1, np.int32)
    potrf(handle, lower, n, L.data.ptr, n, work.data.ptr, work.size, info.data.ptr)
    Li = cupy.array(eye, order="F")
    one = np.ones(1, H.dtype)
    (cublas.ztrsm if z else cublas.dtrsm)(
        cuda_device.get_cublas_handle(), left, lower, no_op, non_unit, n, n, one.ctypes.data,
        L.data.ptr, n, Li.data.ptr, n)               # Li = L^-1, lower
    return Li.conj().T @ Li


def _exact(X, herm: bool, dtype):
    """X in the cycle's dtype, exactly Hermitian where A is."""
    return ((X + X.conj().T) / 2 if herm else X).astype(dtype)


def _eigen_inverse(H, herm: bool, dtype):
    """The pseudo-inverse by eigendecomposition (Hermitian H) or SVD: the last way; host waits."""
    import cupy
    if not herm:
        return cupy.linalg.pinv(H).astype(dtype)
    w, V = cupy.linalg.eigh(H)
    cutoff = ops.max_abs(w) * max(H.shape) * np.finfo(np.float64).eps
    winv = cupy.where(cupy.abs(w) > cutoff, 1.0 / w, 0.0)
    return _exact((V * winv) @ V.conj().T, herm, dtype)


_SIDE_STREAMS: dict = {}
# Whether the coarse inverse is made on a side stream while the set-up goes on (False: on the
# set-up's stream, waited for at once, as before: the A/B's switch)
COARSE_OVERLAP = True


def _side_stream(stream):
    """The device's stream for the coarse inverse (``CoarseInverse``): one a device, made once
    (CuPy's memory pool keeps the blocks freed on a stream for that stream); ``stream`` itself
    without COARSE_OVERLAP."""
    import cupy
    if not COARSE_OVERLAP:
        return stream
    dev = cupy.cuda.Device().id
    side = _SIDE_STREAMS.get(dev)
    if side is None:
        side = _SIDE_STREAMS.setdefault(dev, cupy.cuda.Stream(non_blocking=True))
    return side


class CoarseInverse:
    """The coarsest level's dense pseudo-inverse on the device (cuSOLVER), as the reference's: a
    Hermitian A through its Hermitian part's eigendecomposition, made exactly Hermitian; above
    LU_INVERSE_ROWS rows, its Cholesky (Hermitian A) or LU inverse where that passes
    INVERSE_CHECK. Made on a side stream (``_side_stream``, after ``stream``'s work so far) so
    that the host goes on with the set-up while cuSOLVER works (2-D 1024^2's 1,998 rows: 3.5 ms
    of Cholesky on an H200 by posv, 2.6 by ``_cholesky_inverse``, which the set-up had waited
    for): the first way is launched with no host wait, its check ||A X - I||_max and the
    inverse's largest magnitude left on the device.
    ``result()`` makes ``stream`` wait for the side stream and reads both (one host wait); where
    the check fails it takes the other ways then, as before. The same inverse, bit for bit."""

    def __init__(self, A, dtype, stream):
        import cupy
        self.dtype, self.stream = np.dtype(dtype), stream
        self.side = side = _side_stream(stream)
        if side is not stream:
            side.wait_event(stream.record())
        with side:
            self.start = cupy.cuda.Event()
            self.start.record(side)
            wide = np.complex128 if self.dtype.kind == "c" else np.float64
            dense = sps.dense(A.indptr, A.indices, A.data, A.shape).astype(wide)
            self.herm = sps.is_hermitian_dense(dense)     # (host waits for the dense alone)
            self.H = (dense + dense.conj().T) / 2 if self.herm else dense
            self.tops = cupy.zeros(2, cupy.uint64)         # the check's residual, the top
            self.out, self.ways, self.eye = None, [], None
            if self.H.shape[0] > LU_INVERSE_ROWS:
                H = self.H
                self.eye = cupy.eye(H.shape[0], dtype=H.dtype)
                self.ways = ([lambda: _cholesky_inverse(H, self.eye)] if self.herm
                             else []) + [lambda: cupy.linalg.inv(H)]
                self.out = self._next_way()
            if self.out is None:
                self.out = _eigen_inverse(self.H, self.herm, self.dtype)
            ops.max_abs(self.out, out=self.tops[1:2])

    def _next_way(self):
        """The next way's inverse (its check's residual in tops[0], not read), or None when every
        way left raised (only under cupyx.errstate(linalg="raise"))."""
        while self.ways:
            try:
                X = self.ways.pop(0)()
            except np.linalg.LinAlgError:
                continue
            self.tops[0:1] = 0                    # (a failed way's residual before)
            ops.max_abs(self.H @ X - self.eye, out=self.tops[0:1])    # NaN: fails
            return _exact(X, self.herm, self.dtype)
        return None

    def result(self):
        """(the inverse, its largest magnitude); ``stream`` waits for it from here on. One host
        wait (the side stream's alone), more where the check fails."""
        while True:
            residual, top = (float(t) for t in self.tops.get(stream=self.side).view(np.float64))
            if residual <= INVERSE_CHECK:
                break
            with self.side:                       # the check failed: the next way, now
                out = self._next_way()
                if out is None:                   # none left: the last, unchecked
                    out = _eigen_inverse(self.H, self.herm, self.dtype)
                    self.tops[0:1] = 0
                self.out = out
                self.tops[1:2] = 0
                ops.max_abs(out, out=self.tops[1:2])
        self.done = self.side.record()
        self.stream.wait_event(self.done)
        self.H = self.eye = None
        return self.out, top


def chebyshev_coefficients(rho: float, degree: int, dtype, lower=1.0 / 30.0, upper=1.1):
    """(c1, c2) of each step of ``smoothers.chebyshev``'s recurrence (vc_cheb: d = c1 d + c2 q,
    c1 = 0 on the first step, where d = q / theta)."""
    lmin, lmax = lower * rho, upper * rho
    theta, delta = (lmax + lmin) / 2, (lmax - lmin) / 2
    sigma = theta / delta
    rho_k = 1 / sigma
    t = np.dtype(dtype).type
    out = [(t(0), t(1 / theta))]
    for _ in range(2, degree + 1):
        rho_next = 1 / (2 * sigma - rho_k)
        out.append((t(rho_next * rho_k), t(2 * rho_next / delta)))
        rho_k = rho_next
    return tuple(out)


def chebyshev_launches(coeffs, from_zero: bool):
    """The vc_cheb* launches of one Chebyshev application with ``coeffs`` (``chebyshev_
    coefficients``): (k, c0, c1, c2) each, k the step it ends with. From zero with two steps or
    more, the first two in one launch (x null, c0 the first step's c2: amg::cheb_step); c0 = 0
    otherwise (and, from zero with one step, x null: the first step alone)."""
    zero = type(coeffs[0][1])(0)
    first = 0
    if from_zero and len(coeffs) > 1:
        yield (1, coeffs[0][1], *coeffs[1])
        first = 2
    for k in range(first, len(coeffs)):
        yield (k, zero, *coeffs[k])


def chebyshev_steps(coeffs, x, out, work):
    """One Chebyshev application from ``x`` (None: zero) as its vc_cheb* launches
    (``chebyshev_launches``), each (src, dst, c0, c1, c2, product): the step reads src (None: the
    first from zero) and writes dst, alternating between ``out`` and ``work`` so that the last
    lands in out; product: whether the launch multiplies by A (src given, or c0 != 0: the first
    two steps from zero in one). The AMG smoother's and ``M="chebyshev"``'s launch loops."""
    steps, src = len(coeffs), x
    for k, c0, c1, c2 in chebyshev_launches(coeffs, x is None):
        dst = (out, work)[(steps - 1 - k) % 2]
        yield src, dst, c0, c1, c2, src is not None or c0 != 0
        src = dst


def _modules(dtype, precision: str) -> list:
    """The modules a set-up and its V-cycle compile on a first call, for ``compiling``: amg.cu's
    set-up kernels in the working dtype and in the power steps' wide one, its V-cycle kernels in
    the cycle's dtype (single precision unless "full") and, for a lowered cycle, its finest
    level's casting kernels in the working dtype (``_loader``'s amg, amg_vc and amg_vc_low), the
    products (spgemm.cu; in the cycle's dtype too, for the smoothed restrictions, made on the
    cycle's copies), the reductions (check.cu), and the small levels' cooperative power
    steps at POWER_MAX_LANES (the lanes of most coarse levels). A module listed here and not
    used costs a thread's compile beside the others; one used and not listed (a cycle kept in
    the working dtype where its values do not fit single precision), a compile at its first
    use."""
    from ..._device import status
    wide = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    specs = [("amg", dtype), ("amg", wide), ("spgemm", dtype), ("check", dtype),
             ("check", np.float64)]
    single = reference.lowered_dtype(dtype, precision)
    specs.append(("amg_vc", dtype if single is None else single))
    if single is not None:      # the smoothed restrictions' products; the finest level's casts
        specs += [("spgemm", single), ("amg_vc_low", dtype)]
    if status().cooperative_launch:
        specs.append(("amg_power", wide, f"power_iterate<{{T}}, {POWER_MAX_LANES}>"))
    return specs


def setup(csr, dtype, stream, *, theta=0.0, B=None, smoother="jacobi",
          omega=reference.SMOOTHER_OMEGA,
          degree=3, max_coarse=300, max_levels=10, second_pass=reference.SECOND_DISTANCE,
          precision="auto", reuse=None, max_dense=reference.MAX_DENSE,
          ell=None) -> DeviceHierarchy:
    """The hierarchy of A (``csr``: a dpsolve CSR on the device) on ``stream``. ``reuse``: a
    hierarchy of a matrix with the same sparsity pattern (``PreparedSystem.update``'s re-set-up,
    AmgX's "re-setup"): its aggregates and B are kept, and with a B of one column every level's
    patterns too (T, P, R and the coarse matrices): only the numbers are recomputed, the products
    over the kept patterns (``spgemm_pattern``). A level whose new products leave its kept
    pattern (an entry that cancelled exactly before) is made anew from its kept aggregates.
    ``precision``: the V-cycle's (reference.py's module docstring; ``lowered``). ``ell``: A in
    the solve's ELL (``ell_of``), for level 0's power steps."""
    import cupy
    dtype = np.dtype(dtype)
    reference.check_precision(precision)
    check_memory(csr.n, csr.nnz, dtype, precision)
    with stream, compiling(_modules(dtype, precision)):
        phases = _Phases(stream)
        # a dpsolve CSR is sorted without duplicates (its check repairs others in a copy)
        A_l = _csr(csr.data.astype(dtype, copy=False), csr.indices, csr.indptr, (csr.n, csr.n),
                   canonical=True)
        n0 = csr.n
        if B is None:
            B_l = cupy.ones((n0, 1), dtype)
        else:
            B_l = cupy.asarray(B, dtype)
        levels, Bs = [], []
        numeric = 0                                   # levels re-set-up over kept patterns

        def stops(level, n):                          # the coarsest by size or depth
            return n <= max_coarse or (level > 0 and n <= max_dense) or level + 1 >= max_levels
        unread = (None if reuse is None or not RESETUP_UNREAD
                  else _numeric_levels(A_l, reuse, dtype, ell, phases, stops))
        if unread is not None:                        # every level over its kept patterns
            levels, Bs = unread, [B_l] + list(reuse.B[1:len(unread)])
            A_l, numeric = levels[-1].A, len(levels) - 1
        while unread is None:                         # (the set-up, or a level at a time)
            level = len(levels)
            t = phases.mark()
            inv_diag = _check_level(A_l, level)
            rho = spectral_radius(A_l, inv_diag, ell=ell if level == 0 else None)
            t = phases.add("smoothers", t)
            n = A_l.shape[0]
            Bs.append(B_l)
            coarsest = stops(level, n)
            if not coarsest:
                smoothers._positive_rho(rho, f"level {level}'s smoothing")
                if reuse is not None and level < len(reuse.levels) - 1:
                    agg = reuse.levels[level].aggregates
                    n_agg = int(reuse.levels[level].P.shape[1]) // B_l.shape[1]
                else:
                    agg, n_agg = aggregate(
                        *strength_graph(A_l, theta), dtype,
                        second_pass=(reference.second_distance(second_pass, level, n)
                                     if B_l.shape[1] == 1 else 0))
                t = phases.add("aggregation", t)
                coarsest = n_agg * B_l.shape[1] >= n
            if coarsest:
                levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=rho))
                break
            kept = (_numeric_level(A_l, inv_diag, rho, reuse.levels[level],
                                   reuse.levels[level + 1].A, dtype)
                    if reuse is not None and level < len(reuse.levels) - 1 else None)
            if kept is not None:                      # the re-set-up over the kept patterns
                P, R, A_next = kept
                prev = reuse.levels[level]
                levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=rho, P=P, R=R,
                                          aggregates=agg, T=prev.T, R_order=prev.R_order,
                                          AP_counts=prev.AP_counts))
                A_l, B_l = A_next, reuse.B[level + 1]
                numeric += 1
            else:
                T, B_c = tentative(agg, n_agg, B_l, level, dtype, ones=B is None and not level,
                                   check_zero=B is not None and not level)
                P = smooth_prolongator(A_l, inv_diag, rho, T, dtype,
                                       one_per_row=B_l.shape[1] == 1)
                r_ptr, r_idx, r_val, order = transpose(P.indptr, P.indices, P.data, P.shape,
                                                       conj=True, with_order=True)
                R = _csr(r_val, r_idx, r_ptr, (P.shape[1], P.shape[0]))   # P^H
                single = B_l.shape[1] == 1
                AP, ap_counts = spgemm_counted(A_l, P)
                levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=rho, P=P, R=R,
                                          aggregates=agg, T=T if single else None,
                                          R_order=order if single else None,
                                          AP_counts=ap_counts if single else None))
                A_l, B_l = _canonical(spgemm(R, AP)), B_c                 # R (A P)
            phases.add("products", t)
        n_c = A_l.shape[0]
        if n_c > reference.MAX_DENSE_COARSE:
            raise ValueError(f"the coarsest level (level {len(levels) - 1}) has {n_c} rows, more "
                             f"than the {reference.MAX_DENSE_COARSE} a dense pseudo-inverse is "
                             f"built for: aggregation stopped reducing the problem (try a "
                             f"smaller theta or more max_levels)")
        coarse = CoarseInverse(A_l, dtype, stream)     # on a side stream, while the host goes on
        made = None if COARSE_OVERLAP else coarse.result()
        h = DeviceHierarchy(levels=levels, coarse_inv=made and made[0], smoother=smoother,
                            omega=float(omega), degree=int(degree), dtype=dtype, B=Bs,
                            resetup="full" if reuse is None else
                            "numeric" if numeric == len(levels) - 1 else "aggregates")
        h.low = lowered(h, precision, None if reuse is None else reuse.low)   # (coarse: below)
        if h.low is None:
            _prepare_cycle(h, reuse)
        h.coarse_inv, top = made or coarse.result()
        phases.spans.append(("coarse", coarse.start, coarse.done))
        if h.low is not None and reference.fits(top, h.low.dtype, precision):
            if h.low.coarse_inv is None:
                h.low.coarse_inv = h.coarse_inv.astype(h.low.dtype)
        elif h.low is not None:        # the inverse's values past the single type's: h cycles
            h.low = None
            _prepare_cycle(h, reuse)
        if h.low is not None:          # the casts' vectors: the cycle's own are low's
            h.b_top, h.z_top = (cupy.full(n0, np.nan, h.low.dtype) for _ in range(2))
        h.setup_times = phases.times(("aggregation", "products", "smoothers", "coarse"))
    return h


# Whether a re-set-up over every kept pattern runs with no host wait until its end
# (``_numeric_levels``; False: a level at a time, with its checks' waits: the A/B's switch)
RESETUP_UNREAD = True


def _numeric_levels(A_0, reuse: DeviceHierarchy, dtype, ell, phases, stops) -> list | None:
    """The levels of a re-set-up over every kept pattern of ``reuse`` (a hierarchy of A's
    pattern: its aggregates, T, P, R and coarse patterns, and A P's counts), launched with no
    host wait until the end: each level's checks (the diagonal's bad rows, products outside a
    kept pattern) counted into one device array, and its rho left on the device, where the
    prolongator's smoothing takes it (smooth_tentative). Then one read: the levels, with their
    rho, where every count is 0 and every rho (but the coarsest's) positive and finite; None
    otherwise (and where ``reuse`` kept no T: B of k > 1 columns, or its coarsest level is not
    one by ``stops(level, rows)``, the set-up's rule, but because its aggregation stopped
    reducing), and the caller re-sets-up a level at a time, which raises the error or makes a
    level anew as before. The same numbers as ``_numeric_level``'s, bit for bit. Before, a level
    waited 4 times (its diagonal, rho, and the two products' patterns)."""
    import cupy
    last = len(reuse.levels) - 1
    if (last < 1 or any(lev.T is None or lev.R_order is None for lev in reuse.levels[:last])
            or not stops(last, reuse.levels[last].n)):
        return None
    flags = cupy.zeros((last + 1, 4), cupy.int32)  # bad rows; A T, P, R (A P) outside patterns
    rhos = cupy.zeros(last + 1, cupy.float64)
    levels, A_l = [], A_0
    for level, prev in enumerate(reuse.levels):
        t = phases.mark()
        inv_diag = _check_level(A_l, level, bad=flags[level, 0:1])
        spectral_radius(A_l, inv_diag, ell=ell if level == 0 else None,
                        out=rhos[level:level + 1])
        t = phases.add("smoothers", t)
        if level == last:
            levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=None))
            break
        P, R, A_next = _numeric_level(A_l, inv_diag, rhos[level:level + 1], prev,
                                      reuse.levels[level + 1].A, dtype, flags=flags[level, 1:])
        levels.append(DeviceLevel(A=A_l, inv_diag=inv_diag, rho=None, P=P, R=R,
                                  aggregates=prev.aggregates, T=prev.T, R_order=prev.R_order,
                                  AP_counts=prev.AP_counts))
        A_l = A_next
        phases.add("products", t)
    counts, rho = flags.get(), rhos.get()             # the one wait
    if counts.any():
        return None
    for level, lev in enumerate(levels):
        lev.rho = _finite(float(rho[level]))
        if level < last and not lev.rho > 0:          # (NaN too): _positive_rho's refusal
            return None
    return levels


def _numeric_level(A_l, inv_diag, rho, prev, next_A, dtype, flags=None):
    """One level of a re-set-up over ``prev``'s kept patterns: (P, R, A_{l+1}) with P = T - c D^-1
    (A T) over P's pattern (the kept T), R = P^H through the kept permutation, A_{l+1} = R (A P)
    over the kept coarse pattern (A P without its symbolic pass: the kept counts); None when
    ``prev`` kept no T (B of k > 1 columns) or a new product leaves a kept pattern. ``flags``: a
    zeroed int32 device array of 3 that takes the three checks' counts (A T's, P's and R (A P)'s
    entries outside their patterns) with nothing read back, the products returned whatever they
    hold (``_numeric_levels``; ``rho`` then a device slot)."""
    if prev.T is None or prev.R_order is None:
        return None
    T = prev.T

    def slot(k):
        return None if flags is None else flags[k:k + 1]
    P = spgemm_pattern(A_l, T, prev.P, missing=slot(0))
    if P is None:
        return None
    missing = _smooth_in_place(P, inv_diag, rho, T, dtype, zeros=False, flags=slot(1))
    if missing is not None and missing[0]:
        return None
    r_val = P.data[prev.R_order]
    R = _csr(r_val.conj() if np.dtype(dtype).kind == "c" else r_val, prev.R.indices,
             prev.R.indptr, prev.R.shape)
    A_next = spgemm_pattern(R, spgemm_counted(A_l, P, prev.AP_counts)[0], next_A,
                            missing=slot(2))
    if A_next is None:
        return None
    return P, R, A_next


def lowered(h: DeviceHierarchy, precision: str = "auto",
            reuse: DeviceHierarchy | None = None) -> DeviceHierarchy | None:
    """The V-cycle's hierarchy in single precision (``reference.lowered``'s rules): h's matrices
    over the same pattern arrays with their values cast, and rounded through float16 where
    ``_halve`` says so, ready to cycle (``_prepare_cycle``, over ``reuse``'s SELL layouts: the
    previous set-up's ``low``), or None where h keeps its own dtype and values. One host wait
    (every cycled array's largest magnitude: their largest against the single type's range,
    A_0's for ``cast_exponents``, and the float16 copy's scales and diagonals from them), and one
    more where "half" refuses a diagonal (its count). An h whose coarse inverse is None
    (``setup``'s, still being made: ``CoarseInverse``) gives a low whose coarse inverse is
    None: the caller casts it, and checks its range, when made."""
    import cupy
    single = reference.lowering(h, precision)
    if single is None:
        return None
    keyed = reference.cycle_arrays(h)
    tops = cupy.zeros(max(1, len(keyed)), cupy.uint64)
    for k, (_, a) in enumerate(keyed):
        ops.max_abs(a, out=tops[k:k + 1])
    got = tops.get().view(np.float64)
    maxima = {key: float(t) for (key, _), t in zip(keyed, got)}
    top = float(np.max(got))                            # NaN propagates
    top_a0 = maxima.get(("A", 0), 0.0)
    if not reference.fits(top, single, precision):
        return None

    def cast(M, canonical=None):
        return None if M is None else _csr(M.data.astype(single), M.indices, M.indptr, M.shape,
                                           canonical=canonical)
    levels = [DeviceLevel(A=cast(lev.A, True), inv_diag=lev.inv_diag.astype(single),
                          rho=lev.rho, P=cast(lev.P), R=cast(lev.R), AP_counts=lev.AP_counts)
              for lev in h.levels]                    # (A P's counts: the same patterns)
    low = DeviceHierarchy(levels=levels, coarse_inv=(None if h.coarse_inv is None else
                                                     h.coarse_inv.astype(single)),
                          smoother=h.smoother, omega=h.omega, degree=h.degree, dtype=single,
                          resetup=h.resetup, cast_exps=reference.cast_exponents(top_a0))
    if precision in ("auto", "half") and single.kind == "f":
        _halve(low, precision, maxima)
    if not low.half and single == h.dtype:
        return None                     # "auto" on a float32 h: its own values, no copy
    _prepare_cycle(low, reuse)
    return low


def _halve(low: DeviceHierarchy, precision: str, maxima: dict) -> None:
    """Round low's matrices through float16 (``reference.half_values``, the same values) where
    every one fits (``reference.half_fit``'s rules; "half" raises where one does not) and record
    their powers of two (``DeviceLevel.half``, ``DeviceHierarchy.half``). ``maxima``: the
    largest magnitude of each array of the hierarchy low was cast from, by
    ``reference.cycle_arrays``' keys: rounding to the nearest is monotone, so the cast array's
    largest is the largest cast, and the scales and the diagonals' test need no wait of their
    own. One host wait only where a diagonal falls below float16's normal range and "half" was
    asked (the refusal's count)."""
    import cupy
    real = np.dtype(low.dtype).type
    mats = reference.half_matrices(low)
    scales = [reference.half_scale(float(real(maxima.get((which, index), 0.0))))
              for index, which, _ in mats]
    if not reference.half_scales_fit(scales):
        text = reference.half_scale_refused(precision)
        if text:
            raise ValueError(text)
        return
    # a row below the range where the diagonal's largest |1 / d_i| is (half_small_rows' test)
    small = any(which == "A" and bool(reference.half_small_rows(
        np.array([real(maxima.get(("d", index), 0.0))]), scale)[0])
        for (index, which, _), scale in zip(mats, scales))
    if small and precision == "half":                   # the refusal counts them
        count = cupy.zeros(1, cupy.int32)
        for (index, which, _), scale in zip(mats, scales):
            if which == "A":
                ops.count_true(reference.half_small_rows(low.levels[index].inv_diag, scale),
                               out=count)
        raise ValueError(reference.half_refused(precision, int(count.get()[0])))
    if small:
        return
    def rounded(M, scale, canonical=None):
        return _csr(half_round(M.data, scale), M.indices, M.indptr, M.shape,
                    canonical=canonical)
    for (index, which, M), scale in zip(mats, scales):
        lev = low.levels[index]
        if which == "A":
            lev.A = rounded(M, scale, canonical=True)
            lev.half = (scale, None)
        else:                                    # R = P^H: the same values, P's power of two
            lev.P, lev.R = rounded(M, scale), rounded(lev.R, scale)
            lev.half = (lev.half[0], scale)
    low.half = True


def is_hermitian(A) -> bool:
    """Whether A (CuPy CSR, rows sorted) equals its conjugate transpose to sqrt(eps) of its
    largest magnitude (reference._is_hermitian's test): amg.cu's hermitian_misses, which reads
    the largest magnitude on the device; one host wait."""
    import cupy
    n = int(A.shape[0])
    if A.nnz == 0:
        return True
    top = cupy.zeros(1, cupy.uint64)
    ops.max_abs(A.data, out=top)
    misses = cupy.zeros(1, cupy.int32)
    launch(get_kernel("amg_vc", "hermitian_misses<{T}>", np.dtype(A.dtype)), (_grid(n),), (BLOCK,),
           (np.int32(n), A.indptr, A.indices, A.data,
            np.float64(math.sqrt(np.finfo(A.dtype).eps)), top, misses), None)
    return not int(misses.get()[0])


def smoothed_restriction(lev, hermitian: bool, prev=None):
    """The level's RS = R (I - A S) (reference.smoothed_restriction, S = diag(lev.scale)): for a
    Hermitian A (``is_hermitian`` of level 0: every Galerkin level is then Hermitian to rounding)
    as ((I - S A) P)^H, from A P, whose rows are short (P - S (A P) by amg.cu's subtract_scaled,
    then the conjugate transpose); otherwise R - (R A) S, from R A, whose rows are long (3-D 160^3
    level 1: 44 ms against 2 ms for A P). Explicit zeros kept. ``prev``: the level of a
    re-set-up that kept every pattern (``resetup`` "numeric"), whose RS (and its transpose's
    order) this one's takes: the numbers only. Returns (RS, the order, None for R A's route).
    One host wait (the count of P's or R's entries outside the product's pattern: none where A
    stores its diagonal, as every level's does; ``sparse.add`` takes them otherwise), none
    where ``prev`` counted none: a count of the patterns alone, kept (``lev.rs_missing``)."""
    import cupy
    s = lev.scale
    M = lev.P if hermitian else lev.R

    def product():
        """(the product, whether its pattern is prev's: A P over the kept counts, or R A over
        RS's kept pattern)"""
        if not hermitian:
            kept = None if prev is None else spgemm_pattern(lev.R, lev.A, prev.RS)
            return (kept, True) if kept is not None else (spgemm(lev.R, lev.A), False)
        return (spgemm_counted(lev.A, lev.P, lev.AP_counts)[0],    # the set-up's counts, if kept
                prev is not None and lev.AP_counts is prev.AP_counts)
    X, same = product()
    rows = int(X.shape[0])
    missing = cupy.zeros(1, cupy.int32)
    launch(get_kernel("amg_vc", "subtract_scaled<{T}>", np.dtype(X.dtype)), (_grid(rows),),
           (BLOCK,), (np.int32(rows), X.indptr, X.indices, X.data, s, np.int32(hermitian), M.indptr,
            M.indices, M.data, missing), None)
    lev.rs_missing = 0 if same and prev.rs_missing == 0 else int(missing.get()[0])
    if lev.rs_missing:                                 # M's own entries added apart
        X = product()[0]
        k = X.indices if not hermitian else sps.row_ids(X.indptr, int(X.nnz))
        p, i, d = sps.add((M.indptr, M.indices, M.data), (X.indptr, X.indices, -(X.data * s[k])),
                          M.shape)
        X = _csr(d, i, p, M.shape)
        prev = None                                    # (a pattern of its own)
    if not hermitian:
        return X, None
    if (prev is not None and prev.RS_order is not None
            and int(prev.RS_order.size) == int(X.nnz)):   # the same pattern: the numbers only
        val = X.data[prev.RS_order]
        return _csr(val.conj() if val.dtype.kind == "c" else val, prev.RS.indices,
                    prev.RS.indptr, prev.RS.shape), prev.RS_order
    ptr, idx, val, order = transpose(X.indptr, X.indices, X.data, X.shape, conj=True,
                                     with_order=True)
    return _csr(val, idx, ptr, (X.shape[1], X.shape[0])), order     # (int32: transpose's)


def _prepare_cycle(h: DeviceHierarchy, reuse: DeviceHierarchy | None = None) -> None:
    """The V-cycle's per-level data: smoother weights, the smoothed restrictions (Jacobi,
    ``FUSE_RESTRICTION``), lanes per row (of A, the restriction and P), the SELL-32 copies of A
    (below level 0), the restriction and P where they pay (``sell_of``; over ``reuse``'s layouts
    where a re-set-up kept a pattern) and the work vectors (NaN-poisoned, as every dpsolve work
    vector)."""
    import cupy

    dt = h.dtype
    real = np.finfo(dt).dtype.type
    hermitian = None                    # level 0's (is_hermitian), where a level asks
    for l, lev in enumerate(h.levels):  # noqa: E741
        n = lev.n
        lev.lanes = cycle_lanes(n, int(lev.A.nnz))
        lev.fused = reference.fuse_presmoothing(n, int(lev.A.nnz))
        lev.scale = (lev.inv_diag * real(h.omega / lev.rho)).astype(dt)
        if h.smoother == "chebyshev":
            lev.cheb = chebyshev_coefficients(lev.rho, h.degree, dt)
        lev.b_in = cupy.full(n, np.nan, dt) if l > 0 else None
        lev.out = cupy.full(n, np.nan, dt) if l > 0 else None
        if lev.P is None:
            continue
        lev.lanes_P = cycle_lanes(n, int(lev.P.nnz))
        prev = reuse.levels[l] if reuse is not None and l < len(reuse.levels) else None
        lev.RS = lev.rs_weight = None
        if h.smoother == "jacobi" and FUSE_RESTRICTION:
            if hermitian is None:
                hermitian = is_hermitian(h.levels[0].A)

            def pays(nnz_RS):
                return reference.rs_pays(n, int(lev.A.nnz), int(lev.R.nnz), nnz_RS,
                                         dt.itemsize, h.half)
            # nnz(RS) is nnz(A P) on the Hermitian route: known beforehand from the set-up's
            # counts where they were kept, so that RS is not made where it would not pay
            known = lev.AP_counts.nnz if hermitian and lev.AP_counts is not None else None
            kept = (prev if prev is not None and h.resetup == "numeric"
                    and prev.RS is not None else None)
            RS, order = (smoothed_restriction(lev, hermitian, kept)
                         if known is None or pays(known) else (None, None))
            if RS is not None and pays(int(RS.nnz)):
                lev.RS, lev.rs_weight, lev.RS_order = RS, h.omega / lev.rho, order
        restriction = lev.RS if lev.RS is not None else lev.R
        # (pack: the copies halved below, which a packed previous copy's layout can serve)
        if l > 0:
            lev.sell_A = sell_of(lev.A, None if prev is None else prev.sell_A, pack=h.half)
        lev.sell_R = sell_of(restriction, None if prev is None else prev.sell_R,
                             pack=h.half and lev.RS is None)
        lev.sell_P = sell_of(lev.P, None if prev is None else prev.sell_P, pack=h.half)
        if h.half:                      # the SELL copies' values in float16 (dps::mat_value)
            sA, sP = lev.half           # (RS keeps float32 values: reference.half_matrices)
            lev.sell_A = lev.sell_A and lev.sell_A.halved(sA)
            lev.sell_R = lev.sell_R and (lev.sell_R if lev.RS is not None
                                         else lev.sell_R.halved(sP))
            lev.sell_P = lev.sell_P and lev.sell_P.halved(sP)
        # the restriction runs over its CSR (vc_restrict_scale) where it has no SELL copy
        lev.lanes_R = (restriction_lanes(l, int(restriction.shape[0]), int(restriction.nnz))
                       if lev.sell_R is None else None)
        lev.X, lev.Wb, lev.res = (cupy.full(n, np.nan, dt) for _ in range(3))
        lev.d = cupy.full(n, np.nan, dt) if h.smoother == "chebyshev" else None
