"""AMG and Chebyshev on the GPU (dpsolve/precond), and Jacobi's D^-1 made there: the device
set-up forms the reference's
aggregates, the device V-cycle equals the NumPy reference V-cycle on the same hierarchy, M is
symmetric, two set-ups are identical, every variant that runs them solves, the others refuse by
name, and a re-set-up keeps the aggregates (GPU machines only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.backends import VARIANT_NAMES, get_backend
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import device as amg_device
from dpsolve.precond.amg import reference

pytestmark = pytest.mark.gpu

STREAM_VARIANTS = [v for v in VARIANT_NAMES[1:] if getattr(get_backend(v), "takes_stream_M",
                                                          False)]
FUSING_VARIANTS = [v for v in VARIANT_NAMES[1:] if v not in STREAM_VARIANTS]
DTYPES = [np.float32, np.float64]
EPS = {np.float32: 1e-4, np.float64: 1e-11}
# (dtype, AMG precision) of the V-cycle tests: float32 (its matrices in float16: "auto"); float64
# with its V-cycle in float64 ("full"), in float32 ("mixed"), and in float32 with float16
# matrices (the default, "auto")
CYCLES = [(np.float32, "auto"), (np.float64, "full"), (np.float64, "mixed"),
          (np.float64, "auto")]
CYCLE_IDS = ["float32-half", "float64-full", "float64-mixed", "float64-half"]


def _cycling(h_dev):
    """The hierarchy the V-cycle runs on (its single-precision copy under "mixed"), and the
    relative tolerance of a comparison with the reference V-cycle."""
    hc = h_dev.low if h_dev.low is not None else h_dev
    return hc, EPS[np.dtype(hc.dtype).type]


def _mixed_expected(h_dev, dtype, precision):
    """The cycle's hierarchy is a single-precision copy except under "full" (a float32 system:
    only for float16 matrices), its matrices float16's under "auto" and "half"."""
    assert (h_dev.low is not None) == (precision != "full")
    assert h_dev.low is None or h_dev.low.half == (precision in ("auto", "half"))


# reference.MAX_DENSE as shipped (the fixture below sets it to 0 for this module's tests)
SHIPPED_MAX_DENSE = reference.MAX_DENSE


@pytest.fixture(autouse=True)
def _deep_hierarchies(monkeypatch):
    """These tests check the V-cycle's kernels level by level on small problems: they keep the
    hierarchies they had before reference.MAX_DENSE (by which a level below the finest of up to
    2,500 rows is the coarsest; test_a_large_coarsest_level_is_inverted_as_the_reference passes
    the shipped value, and the solver tests elsewhere run the default)."""
    monkeypatch.setattr(reference, "MAX_DENSE", 0)


def _cp():
    import cupy
    return cupy


def _problem(kind="2d", n=40, dtype=np.float64):
    A = laplace_2d(n) if kind == "2d" else laplace_3d(n)
    A = sp.csr_array(A).astype(dtype)
    rng = np.random.default_rng(1)
    return A, (A @ rng.random(A.shape[0])).astype(dtype)


@pytest.fixture(params=["csr-vector", "sell"])
def coarse_format(request, monkeypatch):
    """The format of the V-cycle's matrices below level 0 (and of R and P): dpsolve's
    CSR-vector kernels (these test problems are below device.SELL_MIN_ROWS) or, with that
    threshold at 0 and any row length or padding allowed, SELL-32 for every one."""
    if request.param == "sell":
        from dpsolve.precond.amg import device
        monkeypatch.setattr(device, "SELL_MIN_ROWS", 0)
        monkeypatch.setattr(device, "SELL_MAX_PADDING", float("inf"))
        monkeypatch.setattr(device, "SELL_MAX_MEAN_ROW", float("inf"))
    return request.param


def _sell_copies(h) -> list:
    """The V-cycle's SELL-32 copies that exist: R and P on every level, A below level 0."""
    return [m for i, lev in enumerate(h.levels[:-1])
            for m in (lev.sell_R, lev.sell_P) + ((lev.sell_A,) if i else ()) if m is not None]


def _graph_sell(A, precision, coarse_format):
    """(P, the cycling hierarchy, its SELL copies) of A prepared for graph over ELL with AMG at
    ``precision``; SELL copies exist exactly under the "sell" coarse_format fixture."""
    import cupyx.scipy.sparse as csp
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M=dpsolve.precond.AMG(precision=precision),
                        variant="graph", format="ell")
    hc, _ = _cycling(P.precond.hierarchy)
    mats = _sell_copies(hc)
    assert (len(mats) > 0) == (coarse_format == "sell")
    return P, hc, mats


def _uses_sell(h) -> bool:
    """Whether the V-cycle runs SELL-32 (then on every level's A below 0, R and P), or not at
    all; anything between is an error."""
    mats = [m for i, lev in enumerate(h.levels[:-1])
            for m in ((lev.sell_R, lev.sell_P) + ((lev.sell_A,) if i else ()))]
    assert mats and len({m is None for m in mats}) == 1
    return mats[0] is not None


def _apply_once(P, r, dtype=np.float64) -> np.ndarray:
    """z = M r on the host: prepared system P's preconditioner as its solve runs it (the stream
    face, on P's own stream and executor), r a host vector, z NaN-filled first in ``dtype``."""
    cp = _cp()
    st = P._state
    with st.stream:
        z = cp.full(P.n, np.nan, dtype)
        st.pc.apply(st.ex, cp.asarray(r), z)
        return z.get()


def _prepared(A, variant, M="amg", method="cg"):
    import cupyx.scipy.sparse as csp
    return dpsolve.prepare(csp.csr_matrix(A), method, M=M, variant=variant)


@pytest.mark.parametrize("root_order", [True, False])
@pytest.mark.parametrize("kind, size", [("2d", 48), ("3d", 14), ("2d", 320), ("3d", 47)])
def test_device_aggregates_are_the_references(kind, size, root_order, monkeypatch):
    """On every level, the device's aggregates are the reference's aggregation of that level's
    own matrix (the device hierarchy, copied to the host); the two large sizes take the second
    pass at distance 2 on level 0 (second_pass "auto", reference.SECOND_DISTANCE_ROWS). Both
    numberings: in the roots' order (the default) and the passes' (reference.ROOT_ORDER)."""
    monkeypatch.setattr(reference, "ROOT_ORDER", root_order)
    A, _ = _problem(kind, size)
    P = _prepared(A, "merge")
    h = P.precond.hierarchy.to_host()
    assert len(h.levels) >= 2
    for level, lev in enumerate(h.levels[:-1]):
        agg, _ = reference.aggregate(
            *reference.strength_graph(lev.A, 0.0),
            reference.second_distance(reference.SECOND_DISTANCE, level, lev.A.shape[0]))
        assert np.array_equal(lev.aggregates, agg)


@pytest.mark.parametrize("boundary", ["dirichlet", "neumann", "neumann-raise"])
def test_a_large_coarsest_level_is_inverted_as_the_reference(boundary):
    """A coarsest level of more than device.LU_INVERSE_ROWS rows (2-D 90^2: level 1, 2,040
    rows <= reference.MAX_DENSE) is inverted by LU where that passes the residual check, and by
    the eigendecomposition where it does not (a Neumann Laplacian: singular; also where CuPy is
    told to raise on it): the reference's pseudo-inverse either way, and the V-cycle the
    reference's."""
    import contextlib

    import cupyx

    from dpsolve.precond.amg import device
    A, _ = _problem("2d", 90)
    if boundary != "dirichlet":                     # rows summing to 0: the constants' null space
        A = sp.csr_array(A - sp.diags_array(np.asarray(A.sum(axis=1)).ravel()))
    # "neumann-raise": CuPy's inv raising on the singular level rather than returning Inf/NaN
    errors = (cupyx.errstate(linalg="raise") if boundary.endswith("raise")
              else contextlib.nullcontext())
    with errors:
        P = _prepared(A, "merge", M=dpsolve.precond.AMG(precision="full",
                                                      max_dense=SHIPPED_MAX_DENSE))
    h = P.precond.hierarchy.to_host()
    nc = h.levels[-1].A.shape[0]
    assert len(h.levels) == 2 and device.LU_INVERSE_ROWS < nc <= SHIPPED_MAX_DENSE
    expect = reference._pseudo_inverse(h.levels[-1].A)
    assert np.abs(h.coarse_inv - expect).max() <= 1e-9 * np.abs(expect).max()
    assert np.array_equal(h.coarse_inv, h.coarse_inv.T)
    r = np.random.default_rng(3).random(A.shape[0])
    st = P._state
    cp = _cp()
    with st.stream:
        zd = cp.full_like(cp.asarray(r), np.nan)
        st.pc.apply(st.ex, cp.asarray(r), zd)
        z = zd.get()
    zr = reference.vcycle(h, r)
    assert np.linalg.norm(z - zr) <= 1e-9 * np.linalg.norm(zr)


@pytest.mark.parametrize("kind", ["spd", "spd-complex", "indefinite", "indefinite-raise",
                                  "nonsymmetric"])
def test_the_coarse_inverse_takes_cholesky_then_lu_and_is_the_inverse(kind, monkeypatch):
    """device.CoarseInverse above LU_INVERSE_ROWS rows: a Hermitian positive definite level
    (real or complex) by ``_cholesky_inverse`` (its check passes); a symmetric indefinite one's
    Cholesky fails its check (under cupyx.errstate(linalg="raise") too) and LU makes it;
    a nonsymmetric one by LU alone. Each the inverse to rounding, exactly Hermitian where A
    is, and its largest magnitude reported."""
    import contextlib

    import cupyx
    import cupyx.scipy.sparse as csp
    cp = _cp()
    n = 150                                        # > LU_INVERSE_ROWS
    assert n > amg_device.LU_INVERSE_ROWS
    A = sp.csr_array(laplace_2d(10, 15))
    if kind == "spd-complex":                      # Hermitian: i on one off-diagonal, -i on its
        up = sp.triu(A, 1) * 1j                    # mirror; still positive definite (diagonal
        A = sp.csr_array(sp.diags_array(A.diagonal() + 2.0) + up + up.conj().T)   # dominant)
    elif kind.startswith("indefinite"):            # eigenvalues on both sides of 0, none near
        A = sp.csr_array(A - 3.3 * sp.eye_array(n))
    elif kind == "nonsymmetric":
        A = sp.csr_array(A + sp.diags_array(np.full(n - 1, 0.5), offsets=1))
    dtype = np.complex128 if kind == "spd-complex" else np.float64
    way = []
    chol = amg_device._cholesky_inverse
    monkeypatch.setattr(amg_device, "_cholesky_inverse",
                        lambda H, eye: way.append("cholesky") or chol(H, eye))
    inv = cp.linalg.inv
    monkeypatch.setattr(cp.linalg, "inv", lambda H: way.append("lu") or inv(H))
    errors = (cupyx.errstate(linalg="raise") if kind.endswith("raise")
              else contextlib.nullcontext())
    stream = cp.cuda.Stream(non_blocking=True)
    with errors:
        X, top = amg_device.CoarseInverse(csp.csr_matrix(A.astype(dtype)), dtype,
                                          stream).result()
    stream.synchronize()
    expect = {"spd": ["cholesky"], "spd-complex": ["cholesky"], "nonsymmetric": ["lu"]}
    assert way == expect.get(kind, ["cholesky", "lu"])
    X = X.get()
    ref = np.linalg.inv(A.toarray().astype(dtype))
    assert X.dtype == dtype
    assert np.abs(X - ref).max() <= 1e-12 * np.abs(ref).max()
    assert abs(top - np.abs(X).max()) <= 1e-14 * np.abs(X).max()
    if kind != "nonsymmetric":
        assert np.array_equal(X, X.conj().T)


def _apply(P, r):
    """z = M r by the prepared system's preconditioner on its stream (a host array)."""
    cp = _cp()
    st = P._state
    with st.stream:
        zd = cp.full_like(cp.asarray(r), np.nan)
        st.pc.apply(st.ex, cp.asarray(r), zd)
        z = zd.get()
    return z


@pytest.mark.parametrize("precision", ["auto", "full"])
def test_the_coarse_inverse_made_beside_the_set_up_is_the_same(precision, monkeypatch):
    """device.CoarseInverse on its side stream (COARSE_OVERLAP) while the set-up goes on, against
    made on the set-up's stream and waited for at once: the same coarse inverse and float32 copy
    bit for bit, the same V-cycle, through a set-up and a numeric re-set-up; the "coarse" phase
    timed on the side stream."""
    import cupyx.scipy.sparse as csp
    A, _ = _problem("2d", 90)
    A2 = sp.csr_array(A + sp.diags_array(np.linspace(0.1, 0.5, A.shape[0])))
    M = dpsolve.precond.AMG(precision=precision, max_dense=SHIPPED_MAX_DENSE)
    r = np.random.default_rng(4).random(A.shape[0])
    got = {}
    for overlap in (False, True):
        monkeypatch.setattr(amg_device, "COARSE_OVERLAP", overlap)
        P = dpsolve.prepare(csp.csr_matrix(A), "cg", M=M, variant="merge")
        out = []
        for step in range(2):
            h = P.precond.hierarchy
            assert h.coarse_inv.shape[0] > amg_device.LU_INVERSE_ROWS
            assert h.resetup == ("full", "numeric")[step]
            assert h.setup_times["coarse"] > 0
            out += [h.coarse_inv.get(), _apply(P, r)]
            if h.low is not None:
                out.append(h.low.coarse_inv.get())
            P.update(csp.csr_matrix(A2))
        got[overlap] = out
    assert len(got[True]) == len(got[False]) == (6 if precision == "auto" else 4)
    for a, b in zip(got[False], got[True]):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_a_coarse_inverse_past_the_single_range_keeps_the_working_dtype(monkeypatch):
    """Where the coarse inverse's values do not fit the V-cycle's single type (checked when the
    inverse is made, after the single-precision copy of the rest), the hierarchy cycles in its
    own dtype: the V-cycle of precision "full"."""
    import cupyx.scipy.sparse as csp
    A, _ = _problem("2d", 60)
    full = dpsolve.prepare(csp.csr_matrix(A), "cg", M=dpsolve.precond.AMG(precision="full"),
                           variant="merge")
    fits = reference.fits
    calls = []

    def coarse_too_big(top, single, precision):       # the second call: the coarse inverse's
        calls.append(top)
        return fits(top, single, precision) and len(calls) == 1
    monkeypatch.setattr(reference, "fits", coarse_too_big)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="merge")
    h = P.precond.hierarchy
    assert len(calls) == 2 and h.low is None and h.levels[0].A.dtype == np.float64
    r = np.random.default_rng(2).random(A.shape[0])
    z, zf = _apply(P, r), _apply(full, r)
    assert np.linalg.norm(z - zf) <= 1e-12 * np.linalg.norm(zf)
    x, info = P.solve(A @ np.ones(A.shape[0]), rtol=1e-8)
    assert info == 0 and np.allclose(x, 1.0, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_the_coarsest_levels_dense_product_is_numpys(dtype):
    """vc_dense (a block a row): y = M b as NumPy's product at every row length, shorter than a
    block, longer than one pass of its chunked loads (amg::block_row_sum) and in between; the
    same bits twice."""
    cp = _cp()
    from dpsolve.cuda.executor import launch
    kernel = amg_device.vc_kernel("vc_dense<{T}>", dtype)
    rng = np.random.default_rng(5)
    real = np.empty(0, dtype).real.dtype
    for n in (1, 2, 3, 31, 33, 255, 257, 487, 1998, 2001, 2049):
        M = rng.standard_normal((n, n)).astype(real)
        b = rng.standard_normal(n).astype(real)
        if np.dtype(dtype).kind == "c":
            M = M + 1j * rng.standard_normal((n, n)).astype(real)
            b = b + 1j * rng.standard_normal(n).astype(real)
        M, b = M.astype(dtype), b.astype(dtype)
        expect = M.astype(np.complex128) @ b.astype(np.complex128)
        dM, db = cp.asarray(M), cp.asarray(b)
        ys = []
        for _ in range(2):
            y = cp.full(n, np.nan, dtype)
            launch(kernel, (n,), (amg_device.BLOCK,),
                   (np.int32(n), dM, db, y), None)
            ys.append(y.get())
        scale = np.abs(M).astype(np.float64) @ np.abs(b).astype(np.float64)
        tol = EPS[real.type]
        assert np.all(np.abs(ys[0] - expect) <= tol * scale), (n, dtype)
        assert np.array_equal(ys[0], ys[1], equal_nan=True)


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
@pytest.mark.parametrize("variant", STREAM_VARIANTS)
def test_device_vcycle_equals_the_reference_vcycle(variant, smoother, dtype, precision,
                                                   coarse_format):
    cp = _cp()
    A, _ = _problem("2d", 37, dtype)
    P = _prepared(A, variant, M=dpsolve.precond.AMG(smoother=smoother, precision=precision))
    st = P._state
    h_dev = P.precond.hierarchy
    _mixed_expected(h_dev, dtype, precision)
    hc, eps = _cycling(h_dev)
    assert _uses_sell(hc) == (coarse_format == "sell")
    h = h_dev.to_host()
    r = np.random.default_rng(2).random(A.shape[0]).astype(dtype)
    with st.stream:
        rd = cp.asarray(r)
        zd = cp.full_like(rd, np.nan)
        st.pc.apply(st.ex, rd, zd)
        z = zd.get()
    zr = reference.vcycle(h, r)
    assert z.dtype == zr.dtype == dtype
    assert np.linalg.norm(z - zr) <= eps * np.linalg.norm(zr)


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
@pytest.mark.parametrize("kind, size", [("2d", 37), ("3d", 15)])
def test_restriction_a_block_a_row_equals_the_reference(kind, size, smoother, dtype, precision,
                                                        monkeypatch):
    """With every restriction below level 0 over its CSR run a block a row (vc_restrict_block:
    device.restriction_lanes, forced here), by R (Chebyshev) or by the smoothed restriction RS
    (Jacobi, where it pays), the V-cycle is the reference's to rounding."""
    from dpsolve.precond.amg import device
    cp = _cp()
    monkeypatch.setattr(device, "LANES_MIN_THREADS", 1 << 40)
    monkeypatch.setattr(device, "RESTRICT_BLOCK_MEAN", 0)
    A, _ = _problem(kind, size, dtype)
    P = _prepared(A, "graph", M=dpsolve.precond.AMG(smoother=smoother, precision=precision))
    st = P._state
    hc, eps = _cycling(P.precond.hierarchy)
    blocks = [lev.lanes_R == device.BLOCK for lev in hc.levels[1:-1]]
    assert blocks and all(blocks) and hc.levels[0].lanes_R != device.BLOCK
    r = np.random.default_rng(3).random(A.shape[0]).astype(dtype)
    with st.stream:
        zd = cp.full(A.shape[0], np.nan, dtype)
        st.pc.apply(st.ex, cp.asarray(r), zd)
        z = zd.get()
    zr = reference.vcycle(P.precond.hierarchy.to_host(), r)
    assert np.linalg.norm(z - zr) <= eps * np.linalg.norm(zr)


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
@pytest.mark.parametrize("fmt", ["ell", "csr-vector", "csr-scalar"])
def test_level_0_runs_on_the_solves_ell_and_equals_the_reference(fmt, smoother, dtype, precision,
                                                                  coarse_format):
    """Level 0's smoothing runs over the solve's own ELL arrays when the solve holds A in ELL
    (else over A_0's CSR), with either smoother; both V-cycles are the reference's, on a 3-D
    problem whose level 1 has long rows (Jacobi: the pre-smoothing apart from the residual
    there: with SELL, level 0's restriction writes level 1's pre-smoothing). Only the Jacobi
    cycle fuses the casts of a single-precision cycle into level 0's kernels."""
    import cupyx.scipy.sparse as csp
    cp = _cp()
    A, _ = _problem("3d", 15, dtype)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg",
                        M=dpsolve.precond.AMG(precision=precision, smoother=smoother),
                        variant="graph", format=fmt)
    h_dev = P.precond.hierarchy
    _mixed_expected(h_dev, dtype, precision)
    hc, eps = _cycling(h_dev)
    assert _uses_sell(hc) == (coarse_format == "sell")
    assert (hc.ell0 is not None) == (fmt == "ell")
    assert h_dev.casts_fused() == (fmt == "ell" and smoother == "jacobi"
                                   and h_dev.low is not None)
    if hc.ell0 is not None:                   # the cycle's own copy of the solve's ELL values
        packed = np.uint32 if amg_device.PACK_ELL else np.float16    # the words (PACK_ELL)
        assert hc.ell0[2].dtype == (packed if hc.half else hc.dtype)
    assert not hc.levels[1].fused and hc.levels[0].fused
    r = np.random.default_rng(4).random(A.shape[0]).astype(dtype)
    st = P._state
    with st.stream:
        zd = cp.full(A.shape[0], np.nan, dtype)
        st.pc.apply(st.ex, cp.asarray(r), zd)
        z = zd.get()
    zr = reference.vcycle(h_dev.to_host(), r)
    assert np.linalg.norm(z - zr) <= eps * np.linalg.norm(zr)


def test_fused_casts_give_the_cast_kernels_values():
    """The float32 cycle of a float64 system whose level 0 runs on the solve's ELL reads b and
    writes z in float64 inside level 0's kernels (``casts_fused``): z is bit for bit that of the
    cycle with the two cast kernels, and ``vcycle_bytes`` counts 2n (8 + 4) bytes of casts less
    and 3n (8 - 4) more for level 0's wide b and z."""
    import cupyx.scipy.sparse as csp

    from dpsolve.precond.amg import device
    A, _ = _problem("3d", 15, np.float64)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="graph", format="ell")
    h = P.precond.hierarchy
    assert h.low is not None and h.casts_fused()
    r = np.random.default_rng(5).random(A.shape[0])
    outs, nbytes = [], []
    try:
        for fuse in (True, False):
            device.FUSE_CASTS = fuse
            assert h.casts_fused() == fuse
            outs.append(_apply_once(P, r))
            nbytes.append(P.precond.vcycle_bytes)
    finally:
        device.FUSE_CASTS = True
    assert np.isfinite(outs[0]).all() and np.array_equal(outs[0], outs[1])
    n = A.shape[0]
    assert nbytes[1] - nbytes[0] == 2 * n * (8 + 4) - 3 * n * (8 - 4)


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
def test_sell_rows_sorted_within_windows_give_the_same_bits(dtype, precision, monkeypatch):
    """SELL-C-sigma (device.SELL_SIGMA: a matrix's rows sorted by length within windows, slot q
    holding row perm[q]) gives the V-cycle of the unsorted SELL-32 (SELL_SIGMA = 1) bit for bit,
    with no more slots; perm is a permutation that keeps every row in its window, longest first."""
    from dpsolve.precond.amg import device
    monkeypatch.setattr(device, "SELL_MIN_ROWS", 0)
    monkeypatch.setattr(device, "SELL_MAX_PADDING", float("inf"))
    monkeypatch.setattr(device, "SELL_MAX_MEAN_ROW", float("inf"))
    A, _ = _problem("2d", 61, dtype)
    r = np.random.default_rng(7).random(A.shape[0]).astype(dtype)
    zs, slots = [], []
    for sigma in (16, 1):
        monkeypatch.setattr(device, "SELL_SIGMA", sigma)
        P = _prepared(A, "cuda", M=dpsolve.precond.AMG(precision=precision))
        hc, _ = _cycling(P.precond.hierarchy)
        assert _uses_sell(hc)
        mats = [m for i, lev in enumerate(hc.levels[:-1])
                for m in (lev.sell_R, lev.sell_P) + ((lev.sell_A,) if i else ())]
        slots.append(sum(int(m.val.size) for m in mats))
        for m in mats:
            if sigma == 1:
                assert m.perm is None
                continue
            perm = m.perm.get()
            n = perm.size
            assert np.array_equal(np.sort(perm), np.arange(n))
            assert np.array_equal(perm // sigma, np.arange(n) // sigma)
            lengths = np.diff(m.indptr.get())[perm]
            for w in range(0, n, sigma):
                assert np.all(np.diff(lengths[w:w + sigma]) <= 0)
        zs.append(_apply_once(P, r, dtype))
    assert np.isfinite(zs[0]).all() and np.array_equal(zs[0], zs[1])
    assert slots[0] <= slots[1]


@pytest.mark.parametrize("sigma", [2, 16, 256, 5000])
def test_sell_order_is_the_stable_sort_of_window_and_length(sigma):
    """amg.cu's sell_order (device.sell_of's row order) equals NumPy's stable argsort of (window,
    longest first), ties in row order: rows of few distinct lengths (many ties), empty rows, a
    last window cut short, a window wider than the matrix."""
    cp = _cp()
    rng = np.random.default_rng(sigma)
    n = 3 * 256 + 77
    lengths = rng.choice([0, 1, 3, 3, 7, 9, 9, 9], size=n)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    M = sp.csr_matrix((np.ones(int(indptr[-1])), np.zeros(int(indptr[-1]), np.int32), indptr),
                      shape=(n, 1))
    key = (np.arange(n, dtype=np.int64) // sigma) * (1 << 32) - lengths
    want = np.argsort(key, kind="stable")
    perm = cp.empty(n, cp.int32)
    amg_device.launch(amg_device.get_kernel("amg_vc", "sell_order<{T}>", np.float64),
                      (amg_device._grid(n),), (amg_device.BLOCK,),
                      (np.int32(n), np.int32(sigma), cp.asarray(M.indptr), perm), None)
    assert np.array_equal(perm.get(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("rank_max", [1024, 3])
def test_device_transpose_is_the_sorted_transpose_bit_for_bit(dtype, rank_max, monkeypatch):
    """device.transpose (counts, a scatter and ranks, no sort) gives sparse.transpose's arrays on
    the same CuPy input bit for bit, the order too: empty rows and columns, a column of 400
    entries among short ones, NaN values, conjugated or not; with TRANSPOSE_RANK_MAX below the
    longest column it takes sparse.transpose's sort."""
    from dpsolve.precond.amg import sparse as sps
    cp = _cp()
    monkeypatch.setattr(amg_device, "TRANSPOSE_RANK_MAX", rank_max)
    rng = np.random.default_rng(5)
    m, k = 2_003, 517
    M = sp.random_array((m, k), density=0.01, format="lil", random_state=rng)
    M[:400, 7] = 1.5                                  # a long column
    M[9, :] = 0                                       # an empty row
    M[:, 11] = 0                                      # an empty column
    M = sp.csr_array(M)
    M.eliminate_zeros()
    M.sort_indices()
    data = M.data.astype(dtype)
    if np.dtype(dtype).kind == "c":
        data = data * (1 - 2j)
    data[::97] = np.nan
    args = (cp.asarray(M.indptr.astype(np.int32)), cp.asarray(M.indices.astype(np.int32)),
            cp.asarray(data), M.shape)
    for conj in (False, True):
        got = amg_device.transpose(*args, conj=conj, with_order=True)
        want = sps.transpose(*args, conj=conj, with_order=True)
        for g, w in zip(got, want):
            g, w = g.get(), w.get()
            assert g.shape == w.shape and np.array_equal(g.view(np.uint8), w.astype(
                g.dtype).view(np.uint8))
        assert got[0].dtype == cp.int32 and got[1].dtype == cp.int32 and got[3].dtype == cp.int32


def test_narrow_indices_decode_to_the_columns_or_refuse():
    """device.narrow stores each SELL-32 slice's columns as uint16 offsets from the slice's least
    column, padding (-1) as 0xFFFF, and refuses (None) where a slice spans more than 65,534
    columns; slots past n are padding whatever idx holds there. The offsets decode to the int32
    indices exactly, at a span of exactly 65,534."""
    from dpsolve.precond.amg import device
    cp = _cp()
    rng = np.random.default_rng(11)
    n = 100                                           # 4 slices, the last of 4 slots
    widths = np.array([5, 2, 5, 3])
    ptr = np.concatenate([[0], np.cumsum(32 * widths)]).astype(np.int32)
    flat = np.full(int(ptr[-1]), 7, np.int32)         # slots past n hold 7: padding all the same
    cols, at = {}, {}
    for s in range(4):
        lo = int(rng.integers(0, 100_000))
        for q in range(32 * s, min(32 * s + 32, n)):
            for k in range(int(widths[s])):
                c = -1 if rng.random() < 0.2 else lo + int(rng.integers(0, 65_535))
                at[q, k] = ptr[s] + q % 32 + 32 * k
                cols[q, k] = flat[at[q, k]] = c
        first = 32 * s
        flat[at[first, 0]] = cols[first, 0] = lo        # the span: exactly 65,534 in slice 0
        flat[at[first, 1]] = cols[first, 1] = lo + (65_534 if s == 0 else 17)
    sptr = cp.asarray(ptr)
    out = device.narrow(cp.asarray(flat), n, np.float64, sptr)
    assert out is not None
    offsets, base = out[0].get(), out[1].get()
    assert offsets.dtype == np.uint16 and base.shape == (4,)
    for (q, k), a in at.items():
        d = int(offsets[a])
        assert (d == 0xFFFF and cols[q, k] == -1) or base[q // 32] + d == cols[q, k]
    past = [ptr[3] + q % 32 + 32 * k for q in range(n, 128) for k in range(int(widths[3]))]
    assert len(past) == 84 and (offsets[past] == 0xFFFF).all()
    flat[at[32, 0]], flat[at[40, 1]] = 0, 65_535      # slice 1 spans one column too many
    assert device.narrow(cp.asarray(flat), n, np.float64, sptr) is None


@pytest.mark.parametrize("narrow", [True, False], ids=["narrow", "int32"])
def test_sell_slots_past_n_are_padding(narrow, monkeypatch):
    """sell_of's last slice: the slots of rows at or beyond n (never read) hold padding (index
    -1 or 0xFFFF, value 0), made over memory the pool filled with other bytes just before, in a
    fresh layout and in a refill over a kept one, so that two copies of one matrix are equal bit
    for bit; the rows' own slots hold their CSR entries."""
    from dpsolve.precond.amg import device
    cp = _cp()
    import cupyx.scipy.sparse as csp
    monkeypatch.setattr(device, "SELL_MIN_ROWS", 1)
    monkeypatch.setattr(device, "NARROW_INDICES", narrow)
    n = 1_000 + 7                                     # the last slice: 15 rows, 17 slots past n
    A = sp.random_array((n, n), density=0.01, format="csr", dtype=np.float64,
                        random_state=np.random.default_rng(3)) + sp.eye_array(n)
    M = csp.csr_matrix(sp.csr_matrix(A))
    copies = []
    for refill in (False, True):
        junk = cp.full(1 << 20, 0x5A5A5A5A, cp.uint32)   # memory the copy's arrays may reuse
        del junk
        if refill:
            M.data *= 2
        m = device.sell_of(M, copies[0] if refill else None)
        assert m is not None and (m.base is not None) == narrow
        sptr, idx, val = m.sptr.get(), m.idx.get(), m.val.get()
        width = (sptr[-1] - sptr[-2]) // 32
        past = [sptr[-2] + q % 32 + 32 * k for q in range(n, 1_024) for k in range(width)]
        assert (idx[past] == (0xFFFF if narrow else -1)).all() and (val[past] == 0).all()
        perm = m.perm.get()
        for q in (0, 517, n - 1):                     # rows' own slots: their entries
            r, s = int(perm[q]), q // 32
            row = A[[r]]
            vals = val[sptr[s] + q % 32 + 32 * np.arange(row.nnz)]
            assert np.array_equal(vals, (2.0 if refill else 1.0) * row.data)
        copies.append(m)
    again = device.sell_of(M)                         # a second fresh copy: equal bit for bit
    for a in ("sptr", "idx", "val"):
        assert np.array_equal(getattr(again, a).get(), getattr(copies[1], a).get())


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
def test_narrow_indices_give_the_same_bits(dtype, precision, coarse_format, monkeypatch):
    """With the SELL copies' column indices as 16-bit offsets (device.NARROW_INDICES) the cycle
    is bit for bit the one over int32 indices, every SELL copy is narrow on these sizes, and the
    floor counts 2 bytes less per entry of each."""
    from dpsolve.precond.amg import device
    A, _ = _problem("3d", 15, dtype)
    r = np.random.default_rng(8).random(A.shape[0]).astype(dtype)
    zs, floors = [], []
    for on in (True, False):
        monkeypatch.setattr(device, "NARROW_INDICES", on)
        P, hc, mats = _graph_sell(A, precision, coarse_format)
        assert all((m.base is not None) == on                 # (a packed copy keeps no idx)
                   and (m.packed or (m.idx.dtype == np.uint16) == on) for m in mats)
        assert len(hc.narrow_matrices() - {(0, "A")}) == (len(mats) if on else 0)
        zs.append(_apply_once(P, r, dtype))
        floors.append(P.precond.vcycle_bytes)
    assert np.isfinite(zs[0]).all() and np.array_equal(zs[0], zs[1])
    assert (floors[0] < floors[1]) == (coarse_format == "sell")


def test_narrow_ell_decodes_to_the_columns_or_refuses():
    """device.narrow_ell stores level 0's column-major ELL indices as uint16 offsets from each 32
    rows' least column, padding (-1) as 0xFFFF, and refuses (None) where 32 rows span more than
    65,534 columns; a last group of fewer rows decodes too."""
    from dpsolve.precond.amg import device
    cp = _cp()
    rng = np.random.default_rng(12)
    n, width = 70, 5                                  # 3 groups, the last of 6 rows
    cols = np.where(rng.random((width, n)) < 0.2, -1,
                    rng.integers(0, 65_535, (width, n)) + 1000 * (np.arange(n) // 32))
    cols[0, 0], cols[1, 0] = 1000 * 0, 65_534         # group 0 spans exactly 65,534
    flat = cp.asarray(cols.astype(np.int32).ravel())  # entry k of row r at k n + r
    out = device.narrow_ell(flat, n, width)
    assert out is not None
    offsets, base = out[0].get().reshape(width, n), out[1].get()
    assert offsets.dtype == np.uint16 and base.shape == (3,)
    decoded = np.where(offsets == 0xFFFF, -1, base[np.arange(n) // 32] + offsets.astype(np.int64))
    assert np.array_equal(decoded, cols)
    cols[2, 40] = cols[:, 32:64][cols[:, 32:64] >= 0].min() + 65_535    # group 1: one too many
    assert device.narrow_ell(cp.asarray(cols.astype(np.int32).ravel()), n, width) is None


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
def test_packed_words_give_the_same_bits(dtype, precision, coarse_format, monkeypatch):
    """With the float16 matrices' values and 16-bit column offsets packed into one word an entry
    (device.PACK_SELL: the SELL copies; PACK_ELL: level 0's ELL) the cycle and graph's solve are
    bit for bit those of the separate arrays; every SELL copy that has both is packed, and level
    0 under precision "half"; each word holds the separate arrays' offset above its value's
    bits, and a packed copy keeps no idx array (its memory freed); the floor is
    2 bytes an entry of A_0 less, the SELL copies' the same (a re-set-up's packing:
    test_a_numeric_resetup_equals_a_fresh_set_up)."""
    from dpsolve.precond.amg import device
    cp = _cp()
    A, b = _problem("3d", 15, dtype)
    r = np.random.default_rng(8).random(A.shape[0]).astype(dtype)
    zs, xs, floors, offsets = [], [], [], []
    for on in (True, False):
        monkeypatch.setattr(device, "PACK_SELL", on)
        monkeypatch.setattr(device, "PACK_ELL", on)
        P, hc, mats = _graph_sell(A, precision, coarse_format)
        halves = [m for m in mats if m.half == "true" and m.base is not None]
        assert (len(halves) > 0) == (coarse_format == "sell" and hc.half)
        assert all(m.packed == on for m in halves)
        assert not any(m.packed for m in mats if all(m is not h for h in halves))
        for m in halves:                # the packed words' offsets: the two arrays' idx
            assert (m.idx is None) == on and (m.val.dtype == np.uint32) == on
        offsets.append([(m.val.get() >> 16) if on else m.idx.get() for m in halves])
        assert (hc.ell0[2].dtype == np.uint32) == (on and hc.half)
        assert ((0, "A") in hc.narrow_matrices()) == (on and hc.half)
        zs.append(_apply_once(P, r, dtype))
        x, info = P.solve(cp.asarray(b), rtol=1e-5 if dtype == np.float32 else 1e-8)
        assert info == 0
        xs.append(x.get())
        floors.append(P.precond.vcycle_bytes)
    assert np.isfinite(zs[0]).all() and np.array_equal(zs[0], zs[1])
    assert np.array_equal(xs[0], xs[1])
    assert len(offsets[0]) == len(offsets[1])
    assert all(np.array_equal(a, b) for a, b in zip(*offsets))
    saved = floors[1] - floors[0]                      # A_0's reads: 4 bytes an entry, not 6
    assert (saved > 0 and saved % (2 * A.nnz) == 0) if hc.half else saved == 0


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
def test_programmatic_dependent_launch_gives_the_same_solve(smoother, dtype, precision,
                                                            monkeypatch):
    """The V-cycle's kernels captured with programmatic dependent launch (pdl.ENABLED: each lets
    the next be scheduled, then waits for the one before) give, in a captured V-cycle and in
    graph's whole solve, the bits of ordinary launches."""
    from dpsolve.cuda import pdl
    cp = _cp()
    A, b = _problem("2d", 150, dtype)
    r = cp.asarray(np.random.default_rng(8).random(A.shape[0]).astype(dtype))
    zs, xs, its = [], [], []
    for on in (True, False):
        monkeypatch.setattr(pdl, "ENABLED", on)
        P = _prepared(A, "graph", M=dpsolve.precond.AMG(smoother=smoother, precision=precision))
        assert len(P.precond.hierarchy.levels) >= 3
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            z = cp.full(A.shape[0], np.nan, dtype)
            stream.begin_capture()
            P.precond.hierarchy.vcycle(r, z, stream)
            graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
        zs.append(z.get())
        x, info, rep = P.solve(cp.asarray(b), rtol=1e-6, full_output=True)
        assert info == 0
        xs.append(x.get())
        its.append(rep.iterations)
    assert np.isfinite(zs[0]).all() and np.array_equal(zs[0], zs[1])
    assert its[0] == its[1] and np.array_equal(xs[0], xs[1])


@pytest.mark.parametrize("precision", ["full", "auto"])
@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
def test_device_M_is_symmetric_and_two_set_ups_are_identical(smoother, precision):
    """<M x, y> = <x, M y> to the rounding of the dtype the V-cycle runs in (float32 under
    "auto": R is P^T cast, the same smoothing before and after)."""
    cp = _cp()
    A, _ = _problem("3d", 12)
    P1 = _prepared(A, "cuda", M=dpsolve.precond.AMG(smoother=smoother, precision=precision))
    P2 = _prepared(A, "cuda", M=dpsolve.precond.AMG(smoother=smoother, precision=precision))
    h1, h2 = P1.precond.hierarchy.to_host(), P2.precond.hierarchy.to_host()
    for a, b in zip(h1.levels, h2.levels):
        for name in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(a.A, name), getattr(b.A, name))
    assert np.array_equal(h1.coarse_inv, h2.coarse_inv)
    st = P1._state
    rng = np.random.default_rng(3)
    x, y = (cp.asarray(rng.random(A.shape[0])) for _ in range(2))
    Mx, My = cp.empty_like(x), cp.empty_like(y)
    cp.cuda.Device().synchronize()      # x, y were made on CuPy's stream; the solve's is its own
    with st.stream:
        st.pc.apply(st.ex, x, Mx)
        st.pc.apply(st.ex, y, My)
    st.stream.synchronize()             # (a race here failed this test once on the H100)
    lhs, rhs = float(cp.vdot(Mx, y)), float(cp.vdot(x, My))
    tol = 1e-12 if precision == "full" else 1e-5
    assert abs(lhs - rhs) <= tol * float(cp.linalg.norm(Mx) * cp.linalg.norm(y))


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("M", ["amg", "chebyshev"])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", STREAM_VARIANTS)
def test_every_stream_variant_solves_with_it(variant, method, M, dtype):
    cp = _cp()
    A, b = _problem("2d", 45, dtype)
    rtol = 1e-5 if dtype == np.float32 else 1e-8
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=rtol, M=M, variant=variant,
                                            full_output=True)
    xh, info_h, rep_h = getattr(dpsolve, method)(A, b, rtol=rtol, M=M, variant="host",
                                                 full_output=True)
    seen = (f"{variant} {method} M={M} {np.dtype(dtype)}: info {info} / host {info_h}, "
            f"iterations {rep.iterations} / host {rep_h.iterations}, relative residual "
            f"{np.linalg.norm(b - A @ x) / np.linalg.norm(b):.2e}")
    assert info == 0 and info_h == 0, seen
    assert np.linalg.norm(b - A @ x) <= 1.01 * rtol * np.linalg.norm(b), seen
    # CG's count is stable under rounding; BiCGStab's moves with the order of the sums
    slack = 2 if method == "cg" else max(3, rep_h.iterations // 3)
    assert abs(rep.iterations - rep_h.iterations) <= slack, seen
    assert rep.preconditioner["precond"] == M
    if M == "amg":
        assert rep.preconditioner["levels"][0] == (A.shape[0], A.nnz)
        assert rep.preconditioner["vcycle_time"] > 0
        # the set-up's split, from events on its stream: every phase inside the total
        times = rep.preconditioner["setup_times"]
        phases = ("aggregation", "products", "smoothers", "coarse")
        assert set(times) == {*phases, "total"}, times
        assert all(times[k] > 0 for k in phases), times
        assert sum(times[k] for k in phases) <= times["total"], times
    # CuPy in, CuPy out
    import cupyx.scipy.sparse as csp
    xd, info_d = getattr(dpsolve, method)(csp.csr_matrix(A), cp.asarray(b), rtol=rtol, M=M,
                                          variant=variant)
    assert info_d == 0 and isinstance(xd, cp.ndarray)


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("kind, size", [("2d", 45), ("3d", 15)])
def test_the_set_up_names_every_amg_module_its_solve_fetches(kind, size, dtype, precision,
                                                            monkeypatch):
    """The modules the set-up compiles beside its own steps (``_modules``, ``_loader.compiling``)
    are the ones its solve fetches kernels from: each amg.cu module (set-up, V-cycle, lowered
    finest level) and spgemm.cu's that a set-up and a solve fetch is listed, in its dtype. One
    not listed would compile alone at its first kernel, after the set-up."""
    from dpsolve.cuda import _loader
    fetched = []
    compiled = _loader._compiled
    monkeypatch.setattr(_loader, "_KERNELS", {})               # every kernel fetched anew

    def record(*key):
        fetched.append(key)
        return compiled(*key)
    monkeypatch.setattr(_loader, "_compiled", record)
    A, b = _problem(kind, size, dtype)
    x, info = dpsolve.cg(A, b, M=dpsolve.precond.AMG(precision=precision), variant="cuda",
                         rtol=1e-5 if dtype == np.float32 else 1e-8)
    assert info == 0
    dev = _cp().cuda.runtime.getDevice()
    listed = {_loader._module_key(dev, *s[:2], expression=s[2] if len(s) > 2 else None)
              for s in amg_device._modules(np.dtype(dtype), precision)}
    names = {"amg", "amg_vc", "amg_vc_low", "spgemm"}
    used = {k[:5] for k in fetched if k[1] in names}
    assert {k[1] for k in used} >= {"amg", "amg_vc", "spgemm"}, used
    assert used <= {k[:5] for k in listed}, sorted(used - {k[:5] for k in listed})


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("fmt", ["ell", "csr-vector"])
def test_chebyshev_runs_on_the_solves_ell_and_equals_the_reference(fmt, dtype):
    """M="chebyshev" takes its steps over the solve's own ELL arrays when the solve holds A in
    ELL (vc_cheb_ell), else over A's CSR; z = M r is the host recurrence's to rounding either
    way, with the rho the device estimated."""
    import cupyx.scipy.sparse as csp

    from dpsolve.precond import smoothers
    cp = _cp()
    A, _ = _problem("3d", 15, dtype)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="chebyshev", variant="cuda", format=fmt)
    st = P._state
    assert (st.pc.ell is not None) == (fmt == "ell")
    r = np.random.default_rng(9).random(A.shape[0]).astype(dtype)
    with st.stream:
        zd = cp.full(A.shape[0], np.nan, dtype)
        st.pc.apply(st.ex, cp.asarray(r), zd)
        z = zd.get()
    inv = (1.0 / A.diagonal()).astype(dtype)
    zr = smoothers.chebyshev(A, inv, P.precond.rho, P.precond.degree, None, r)
    assert np.linalg.norm(z - zr) <= EPS[dtype] * np.linalg.norm(zr)


@pytest.mark.parametrize("variant", FUSING_VARIANTS)
@pytest.mark.parametrize("M", ["amg", "chebyshev"])
@pytest.mark.parametrize("zero_b", [False, True])
def test_fusing_variants_refuse_by_name(variant, M, zero_b):
    A, b = _problem("2d", 20)
    if zero_b:                        # no iteration needed: refused all the same
        b = np.zeros_like(b)
    with pytest.raises(ValueError, match=f"variant '{variant}' fuses pointwise.*M='{M}'"):
        dpsolve.cg(A, b, M=M, variant=variant)


def test_auto_picks_a_variant_that_runs_amg():
    A, b = _problem("2d", 30)
    x, info, rep = dpsolve.cg(A, b, M="amg", rtol=1e-8, full_output=True)
    assert info == 0 and rep.variant in STREAM_VARIANTS


def test_update_with_the_same_pattern_keeps_the_aggregates():
    cp = _cp()
    import cupyx.scipy.sparse as csp
    A, b = _problem("2d", 50)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="graph")
    agg0 = [lev.aggregates.copy() for lev in P.precond.hierarchy.levels[:-1]]
    t0 = P.precond.vcycle_time
    P.update(csp.csr_matrix(2.0 * A))
    h = P.precond.hierarchy
    assert all(a is b or bool(cp.array_equal(a, b.aggregates))
               for a, b in zip(agg0, h.levels[:-1]))
    assert h.resetup == "numeric"                        # the numbers only, over kept patterns
    assert t0 > 0 and P.precond.vcycle_time == t0        # the same kernels: not timed again
    # its split, read at the first look (the re-set-up did not wait for its own end)
    times = P.precond.setup_times
    assert isinstance(times, amg_device.SetupTimes) and times._times is None
    assert set(times) == {"aggregation", "products", "smoothers", "coarse", "total"}
    assert times["aggregation"] == 0 and 0 < times["products"] < times["total"], dict(times)
    x, info = P.solve(cp.asarray(2.0 * b), rtol=1e-8)
    assert info == 0
    assert np.allclose(x.get(), dpsolve.cg(2.0 * A, 2.0 * b, rtol=1e-10, variant="host",
                                           M="amg")[0], rtol=1e-6)
    # a changed pattern: a full set-up
    A2 = sp.csr_array(A + sp.eye_array(A.shape[0], k=3))
    P.update(csp.csr_matrix(A2 + A2.T))
    assert P.precond.hierarchy.levels[0].A.nnz == (A2 + A2.T).nnz
    assert P.precond.hierarchy.resetup == "full" and P.precond.vcycle_time > 0


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
def test_a_numeric_resetup_equals_a_fresh_set_up(dtype, precision, coarse_format):
    """update(A') with A's pattern recomputes the numbers over the kept patterns: every level's
    matrices, and so the V-cycle, are a fresh set-up's of A' (to rounding). SELL copies keep
    their layout and take the new values; the device V-cycles agree too."""
    cp = _cp()
    import cupyx.scipy.sparse as csp
    A, _ = _problem("3d", 14, dtype)
    A2 = sp.csr_array(A + sp.diags_array(np.linspace(0.1, 0.5, A.shape[0]))).astype(dtype)
    M = dpsolve.precond.AMG(precision=precision)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M=M, variant="cuda")
    before = _cycling(P.precond.hierarchy)[0].levels[1].sell_A
    before_ell = _cycling(P.precond.hierarchy)[0].ell0
    P.update(csp.csr_matrix(A2))
    fresh = dpsolve.prepare(csp.csr_matrix(A2), "cg", M=M, variant="cuda")
    h, hf = P.precond.hierarchy, fresh.precond.hierarchy
    assert h.resetup == "numeric" and hf.resetup == "full"
    _mixed_expected(h, dtype, precision)
    (hc, eps), hfc = _cycling(h), _cycling(hf)[0]
    assert _uses_sell(hc) == _uses_sell(hfc) == (coarse_format == "sell")
    if before is not None:
        after = hc.levels[1].sell_A
        assert after.sptr is before.sptr and after.idx is before.idx     # the layout kept
        packs = hc.half and before.base is not None and amg_device.PACK_SELL
        assert after.packed == before.packed == packs and (after.idx is None) == packs
        if packs:                   # the kept offsets under the new values: a fresh set-up's
            assert np.array_equal(after.val.get(), hfc.levels[1].sell_A.val.get())
    if before_ell is not None and hc.half and amg_device.PACK_ELL:     # level 0 packed
        assert before_ell[2].dtype == hc.ell0[2].dtype == np.uint32
        assert hc.ell0[1] is before_ell[1]                     # its bases kept, no narrow_ell
        assert np.array_equal(hc.ell0[2].get(), hfc.ell0[2].get())   # a fresh set-up's words
    rd = cp.asarray(np.random.default_rng(6).random(A.shape[0]).astype(dtype))
    cp.cuda.Device().synchronize()      # rd was made on CuPy's stream; the solves' are their own
    zs = []
    for Q in (P, fresh):
        st = Q._state
        with st.stream:
            zd = cp.full_like(rd, np.nan)
            st.pc.apply(st.ex, rd, zd)
            zs.append(zd.get())
        st.stream.synchronize()
    assert np.linalg.norm(zs[0] - zs[1]) <= 10 * eps * np.linalg.norm(zs[1])
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for a, b in zip(h.levels, hf.levels):
        da, db = a.A.toarray().get(), b.A.toarray().get()
        assert np.abs(da - db).max() <= tol * np.abs(db).max()
    r = np.random.default_rng(5).random(A.shape[0]).astype(dtype)
    z = reference.vcycle(h.to_host(), r)
    zf = reference.vcycle(hf.to_host(), r)
    assert np.linalg.norm(z - zf) <= 10 * eps * np.linalg.norm(zf)
    x, info = P.solve(cp.asarray(A2 @ np.ones(A.shape[0], dtype)), rtol=1e-5)
    assert info == 0


def _hierarchy_bits(h) -> list:
    """Every array of a device hierarchy's levels that a re-set-up makes (A, D^-1, P, R), its rho
    values and its coarse inverse, as host arrays (``_same_bits`` compares them)."""
    out = [h.coarse_inv.get(), np.array([lev.rho for lev in h.levels])]
    for lev in h.levels:
        out += [lev.A.data.get(), lev.inv_diag.get()]
        out += [] if lev.P is None else [lev.P.data.get(), lev.R.data.get()]
    return out


def _same_bits(a, b) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                           np.ascontiguousarray(y).view(np.uint8)) for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_a_resetup_read_once_is_the_one_read_level_by_level(dtype, monkeypatch):
    """A numeric re-set-up launched with no host wait until its end (device._numeric_levels: the
    checks counted on the device, rho left there for the prolongator's smoothing) makes the
    hierarchy of the re-set-up a level at a time, bit for bit; a check that counts something
    (here an A T product made to report an entry outside its pattern) sends it to the level at a
    time one, which gives the same hierarchy."""
    import cupyx.scipy.sparse as csp
    A, _ = _problem("3d", 14, dtype)
    if np.dtype(dtype).kind == "c":
        A = sp.csr_array(A + 1j * (sp.triu(A, 1) - sp.tril(A, -1)) * 0.1).astype(dtype)
    A2 = sp.csr_array(A + sp.diags_array(np.linspace(0.1, 0.5, A.shape[0]))).astype(dtype)
    got = {}
    for unread in (False, True):
        monkeypatch.setattr(amg_device, "RESETUP_UNREAD", unread)
        P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="cuda")
        P.update(csp.csr_matrix(A2))
        assert P.precond.hierarchy.resetup == "numeric"
        got[unread] = _hierarchy_bits(P.precond.hierarchy)
    assert _same_bits(got[False], got[True])
    real = amg_device.spgemm_pattern
    deferred = []

    def first_misses(A, B, C, missing=None):            # the first unread product: 1 outside
        out = real(A, B, C, missing)
        if missing is not None and not deferred:
            deferred.append(True)
            missing += 1
        return out
    monkeypatch.setattr(amg_device, "spgemm_pattern", first_misses)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="cuda")
    P.update(csp.csr_matrix(A2))
    assert deferred and P.precond.hierarchy.resetup == "numeric"
    assert _same_bits(got[False], _hierarchy_bits(P.precond.hierarchy))


def test_a_resetup_read_once_raises_as_the_level_by_level_one(monkeypatch):
    """A re-set-up whose matrix has a non-positive diagonal entry raises the level-at-a-time
    re-set-up's error (its level and rows), and the prepared system keeps its last matrix."""
    import cupyx.scipy.sparse as csp
    cp = _cp()
    A, b = _problem("2d", 40)
    bad = sp.lil_array(A)
    bad[7, 7] = -bad[7, 7]
    texts = []
    for unread in (False, True):
        monkeypatch.setattr(amg_device, "RESETUP_UNREAD", unread)
        P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="graph")
        with pytest.raises(ValueError) as err:
            P.update(csp.csr_matrix(sp.csr_array(bad)))
        texts.append(str(err.value))
        x, info = P.solve(cp.asarray(b), rtol=1e-8)
        assert info == 0 and np.allclose(A @ x.get(), b, rtol=1e-6)
    assert texts[0] == texts[1] and "negative diagonal" in texts[0] and "7" in texts[0]


def test_awkward_inputs():
    # n below the coarse size: one level, the V-cycle is the pseudo-inverse solve
    A, b = _problem("2d", 10)
    x, info, rep = dpsolve.cg(A, b, M="amg", variant="merge", rtol=1e-10, full_output=True)
    assert info == 0 and len(rep.preconditioner["levels"]) == 1 and rep.iterations <= 2
    # an isolated row
    A2 = sp.lil_array(laplace_2d(30))
    A2[5, :] = 0
    A2[:, 5] = 0
    A2[5, 5] = 3.0
    A2 = sp.csr_array(A2)
    x, info = dpsolve.cg(A2, A2 @ np.ones(A2.shape[0]), M="amg", variant="cuda", rtol=1e-8)
    assert info == 0
    # zero and negative diagonals: clear errors
    A3 = sp.lil_array(laplace_2d(30))
    A3[7, 7] = 0
    with pytest.raises(ValueError, match=r"nonzero diagonal.*\(row 7\)"):
        dpsolve.cg(sp.csr_array(A3), np.ones(900), M="amg", variant="cuda")
    A3[7, 7] = -4
    with pytest.raises(ValueError, match=r"positive diagonal.*\(row 7\)"):
        dpsolve.cg(sp.csr_array(A3), np.ones(900), M="amg", variant="cuda")
    # complex Hermitian
    Ac = sp.csr_array(laplace_2d(30)).astype(np.complex128)
    bc = Ac @ (np.ones(900) * (1 + 1j))
    x, info = dpsolve.cg(Ac, bc, M="amg", variant="merge", rtol=1e-8)
    assert info == 0 and np.allclose(x, 1 + 1j)
    # BiCG needs M^H
    with pytest.raises(ValueError, match="bicg needs M\\^H"):
        dpsolve.bicg(A, b, M="amg", variant="cuda")


def test_mixed_precision_keeps_float64_where_float32_overflows():
    """A float64 system whose values overflow float32: "auto" keeps the V-cycle in float64
    (the report says so) and solves; "mixed" refuses by name; the default elsewhere runs the
    V-cycle in float32 and reaches a float64 tolerance."""
    A, b = _problem("2d", 40)
    x, info, rep = dpsolve.cg(A, b, M="amg", variant="cuda", rtol=1e-10, full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_dtype"] == "float32"
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    big = sp.csr_array(A * 1e39)
    x, info, rep = dpsolve.cg(big, b * 1e39, M="amg", variant="cuda", rtol=1e-8,
                              full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_dtype"] == "float64"
    with pytest.raises(ValueError, match="precision='mixed'.*overflows float32"):
        dpsolve.cg(big, b, M=dpsolve.precond.AMG(precision="mixed"), variant="cuda")


def test_half_precision_on_the_device_falls_back_or_refuses():
    """The default "auto" stores the cycle's matrices in float16 (the report says so); a system
    with a row whose diagonal would leave float16's normal range (row and column 7 scaled by
    2^-20) gets float32 matrices under "auto" and solves, and "half" refuses it naming the rows,
    as the host reference does; so does A * 1e-35, whose float16 scales would leave float32's
    normal range (CG stopped with -10 before)."""
    A, b = _problem("2d", 40)
    x, info, rep = dpsolve.cg(A, b, M="amg", variant="cuda", rtol=1e-10, full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_values"] == "float16"
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    s = np.ones(A.shape[0])
    s[7] = 2.0**-20
    W = sp.csr_array(sp.diags_array(s) @ A @ sp.diags_array(s))
    bw = W @ np.ones(A.shape[0])
    x, info, rep = dpsolve.cg(W, bw, M="amg", variant="cuda", rtol=1e-8, full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_dtype"] == "float32"
    assert "vcycle_values" not in rep.preconditioner
    with pytest.raises(ValueError, match="precision='half': 1 rows.*diagonal.*float16"):
        dpsolve.cg(W, bw, M=dpsolve.precond.AMG(precision="half"), variant="cuda")
    tiny = sp.csr_array(A * 1e-35)               # its powers of two would leave float32's range
    x, info, rep = dpsolve.cg(tiny, b * 1e-35, M="amg", variant="cuda", rtol=1e-10,
                              full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_dtype"] == "float32"
    assert "vcycle_values" not in rep.preconditioner
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    with pytest.raises(ValueError, match="precision='half'.*below 2\\^-112"):
        dpsolve.cg(tiny, b, M=dpsolve.precond.AMG(precision="half"), variant="cuda")


@pytest.mark.parametrize("variant", STREAM_VARIANTS)
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_the_float32_cycle_of_a_float64_system_solves_at_any_scale(variant, method):
    """A float64 A and b at 2^-116 (~1e-35, as in SI units), A alone there, and b alone at
    2^-140: the front end solves for b times a power of two that keeps the default float32
    V-cycle's residuals and results inside float32's range (``_frontend.fit_rhs``), and each
    solve converges in the unscaled one's iterations (within one) to the same accuracy; the
    float32 residuals of an unscaled cycle fell below float32's normal range (CG stopped with
    -10). NumPy and CuPy inputs, one-shot calls and (graph) a prepared system's one-launch
    path, which hands such a b to the general path. BiCGStab takes A alone: with b at 1e-35
    its rho = <r~, r> falls below SciPy's absolute breakdown bound (eps^2), whose -10 dpsolve
    keeps."""
    A, b = _problem("2d", 40)
    u = np.linalg.solve(A.toarray(), b)
    x, info, rep = getattr(dpsolve, method)(A, b, M="amg", variant=variant, rtol=1e-10,
                                            full_output=True)
    assert info == 0 and rep.preconditioner["vcycle_dtype"] == "float32"
    s = 2.0 ** -116
    cases = [(A * s, b, u / s)]
    if method == "cg":
        cases += [(A * s, b * s, u), (A, b * 2.0 ** -140, u * 2.0 ** -140)]
    for As, bs, expect in cases:
        As = sp.csr_array(As)
        for cupy_in in (False, True):
            args = (_cp().asarray(bs),) if cupy_in else (bs,)
            xs, info_s, rep_s = getattr(dpsolve, method)(As, *args, M="amg", variant=variant,
                                                         rtol=1e-10, full_output=True)
            xs = xs.get() if cupy_in else xs
            assert info_s == 0, (info_s, rep_s.iterations)
            assert abs(rep_s.iterations - rep.iterations) <= 1
            assert rep_s.preconditioner["vcycle_dtype"] == "float32"
            assert np.linalg.norm(xs - expect) <= 1e-8 * np.linalg.norm(expect)
        if variant == "graph":
            P = dpsolve.prepare(As, method, M="amg", variant="graph")
            for _ in range(2):
                xs, info_s = P.solve(_cp().asarray(bs), rtol=1e-10)
                assert info_s == 0
                assert np.linalg.norm(xs.get() - expect) <= 1e-8 * np.linalg.norm(expect)


def test_a_cached_graph_state_reports_its_hierarchy():
    """variant graph reuses a cached state for the same A: the second one-shot call's report
    still carries the hierarchy it ran with (Preconditioner.adopt)."""
    A, b = _problem("2d", 40)
    reps = [dpsolve.cg(A, b, M="amg", variant="graph", rtol=1e-8, full_output=True)[2]
            for _ in range(2)]
    assert reps[1].build_time == 0.0                       # the cached state
    assert reps[0].preconditioner["levels"] == reps[1].preconditioner["levels"]


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
@pytest.mark.parametrize("symmetric", [True, False], ids=["hermitian", "nonsymmetric"])
def test_smoothed_restrictions_are_the_references(dtype, precision, symmetric, monkeypatch):
    """Every level that runs its smoothed restriction (reference.rs_pays) holds the reference's
    R - (R A) S of its own matrices to rounding, whichever product made it (a Hermitian A:
    ((I - S A) P)^H from A P; a nonsymmetric one, BiCGStab's: R A); and the V-cycle with
    device.FUSE_RESTRICTION off (the pre-smoothing, the residual and R apart) is the same
    operator to rounding."""
    from dpsolve.precond.amg import device
    cp = _cp()
    A, _ = _problem("2d", 37, dtype)
    method = "cg"
    if not symmetric:      # an upwind convection term (at 0.2 a coarse diagonal turns negative)
        A = sp.csr_array(A + sp.diags_array([-0.1 * np.ones(A.shape[0] - 1)], offsets=[1])
                         .astype(dtype))
        method = "bicgstab"
    r = np.random.default_rng(8).random(A.shape[0]).astype(dtype)
    zs = []
    for fuse in (True, False):
        monkeypatch.setattr(device, "FUSE_RESTRICTION", fuse)
        P = _prepared(A, "merge", M=dpsolve.precond.AMG(precision=precision), method=method)
        hc, eps = _cycling(P.precond.hierarchy)
        used = [lev for lev in hc.levels[:-1] if lev.RS is not None]
        assert bool(used) == fuse
        assert device.is_hermitian(hc.levels[0].A) == symmetric
        for lev in hc.to_host().levels[:-1]:
            if lev.RS is None:
                continue
            expect = reference.smoothed_restriction(lev.R, lev.A, lev.inv_diag, lev.rs_weight)
            diff = abs(lev.RS - expect).max() if (lev.RS - expect).nnz else 0.0
            assert diff <= eps * abs(expect).max()
        st = P._state
        with st.stream:
            zd = cp.full(A.shape[0], np.nan, dtype)
            st.pc.apply(st.ex, cp.asarray(r), zd)
            zs.append(zd.get())
    assert np.isfinite(zs[0]).all()
    assert np.linalg.norm(zs[0] - zs[1]) <= eps * np.linalg.norm(zs[1])


def test_half_round_is_the_references_rounding():
    """device.half_round (one kernel) gives reference.half_bits' float16s and half_values' float32s
    bit for bit: ties to even, values that round into float16's subnormals or to 0, negatives,
    and a scale of 2^-20 as well as 2^3."""
    from dpsolve.precond.amg import device
    cp = _cp()
    rng = np.random.default_rng(14)
    for scale in (2.0 ** -20, 8.0):
        base = rng.standard_normal(20_000).astype(np.float32) * np.float32(scale * 2.0 ** 14)
        k = np.arange(1024, 1624, dtype=np.float32) + np.float32(0.5)   # spacing 1 there: ties
        ties = np.concatenate([k, -k]) * np.float32(scale)
        tiny = rng.standard_normal(2_000).astype(np.float32) * np.float32(scale * 2.0 ** -20)
        v = np.concatenate([base, ties, tiny, np.float32([0.0, -0.0])])
        bits = device.half_round(cp.asarray(v), scale, bits=True).get()
        vals = device.half_round(cp.asarray(v), scale).get()
        assert bits.dtype == np.float16 and vals.dtype == np.float32
        with np.errstate(over="ignore"):    # a few of base past float16's largest: Inf on both
            want_bits, want = reference.half_bits(v, scale), reference.half_values(v, scale)
        assert np.array_equal(bits.view(np.uint16), want_bits.view(np.uint16))
        assert np.array_equal(vals.view(np.uint32), want.view(np.uint32))


def test_power_steps_over_the_solves_ell_give_the_references_rho():
    """Level 0's power steps run over the solve's ELL where the solve holds A in ELL in float64
    (amg.cu's power_step_ell): rho is smoothers.spectral_radius's to rounding, as over CSR, and
    the set-up's level 0 took it."""
    import cupyx.scipy.sparse as csp

    from dpsolve.precond import smoothers
    from dpsolve.precond.amg import device
    cp = _cp()
    A, _ = _problem("3d", 15)
    P = dpsolve.prepare(csp.csr_matrix(A), "cg", M="amg", variant="graph", format="ell")
    ell = device.ell_of(P._state.A, A.shape[0], np.float64)
    assert ell is not None
    inv = 1.0 / A.diagonal()
    expect = smoothers.spectral_radius(A, inv)
    for way in (None, ell):
        rho = device.spectral_radius(csp.csr_matrix(A), cp.asarray(inv), ell=way)
        assert abs(rho - expect) <= 1e-12 * expect
    assert abs(P.precond.hierarchy.levels[0].rho - expect) <= 1e-12 * expect
    assert device.ell_of(P._state.A, A.shape[0], np.float32) is None      # not of its type


@pytest.mark.parametrize("kind, size", [("2d", 48), ("3d", 14), ("2d", 3), ("2d", 400)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_power_steps_in_one_launch_equal_the_launched_ones(kind, size, dtype, monkeypatch):
    """A small level's power steps in one cooperative launch (amg.cu's power_iterate) give the
    launched steps' rho to rounding and the host reference's, also where the level has more
    blocks of work than the GPU holds at once (2-D 400: the grid-stride loop between the
    grid.syncs); the one launch is the path taken and POWER_ONE_LAUNCH_NNZ = 0 turns it off."""
    import cupyx.scipy.sparse as csp

    from dpsolve.precond import smoothers
    from dpsolve.precond.amg import device
    cp = _cp()
    A, _ = _problem(kind, size)
    A = A.astype(dtype)
    if np.dtype(dtype).kind == "c":                        # Hermitian, not real
        A = sp.csr_array(A + 1j * sp.triu(A, 1) - 1j * sp.tril(A, -1))
    M = csp.csr_matrix(A)
    inv = cp.asarray(1.0 / A.diagonal())
    calls = []
    real = device._one_launch
    monkeypatch.setattr(device, "_one_launch",
                        lambda *a: (lambda r: (calls.append(r), r)[1])(real(*a)))
    got = device.spectral_radius(M, inv)
    assert calls[0] is not None
    assert len(calls) == 1
    monkeypatch.setattr(device, "POWER_ONE_LAUNCH_NNZ", 0)
    want = device.spectral_radius(M, inv)
    assert len(calls) == 2 and calls[1] is None
    host = smoothers.spectral_radius(A, 1.0 / A.diagonal())
    assert got == pytest.approx(want, rel=1e-13) and got == pytest.approx(host, rel=1e-11)


def test_power_start_is_the_references_start_vector():
    """amg.cu's power_start writes smoothers.start_vector's values bit for bit (float64, and
    complex128 with a zero imaginary part), past 2^32 / 2654435761 where i * 2654435761 needs
    64 bits."""
    from dpsolve.cuda._loader import get_kernel
    from dpsolve.precond import smoothers
    cp = _cp()
    n = 300_001
    want = smoothers.start_vector(n)
    for dt in (np.float64, np.complex128):
        v = cp.full(n, np.nan, dt)
        get_kernel("amg", "power_start<{T}>", dt)((64,), (256,), (np.int32(n), v))
        assert np.array_equal(v.get(), want.astype(dt))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_level_check_in_one_pass(dtype):
    """_check_level (amg.cu's diag_check): D^-1 equal to 1 / A.diagonal() bit for bit, and the
    reference's errors for a missing, zero, NaN and infinite diagonal and a negative (or, for a
    complex A, negative real part) one, naming the rows."""
    import cupyx.scipy.sparse as csp

    from dpsolve.precond.amg import device
    cp = _cp()
    A = sp.csr_array(laplace_2d(20)).astype(dtype)
    A.sort_indices()
    got = device._check_level(csp.csr_matrix(A), 0)
    want = (1.0 / cp.asarray(A.diagonal())).astype(dtype)
    assert got.dtype == np.dtype(dtype) and cp.array_equal(got, want)
    cases = [(0.0, "nonzero diagonal.*rows 3, 11"), (np.nan, "finite values.*rows 3, 11"),
             (np.inf, "finite values"), (-1.0, "positive diagonal.*rows 3, 11")]
    if np.dtype(dtype).kind == "c":
        cases.append((-1.0 + 5j, "positive diagonal"))
    for value, match in cases:                              # stored
        B = A.copy()
        for r in (3, 11):
            lo, hi = B.indptr[r], B.indptr[r + 1]
            B.data[lo + np.flatnonzero(B.indices[lo:hi] == r)] = value
        with pytest.raises(ValueError, match=match):
            device._check_level(csp.csr_matrix(B), 2)
    B = sp.lil_array(A)
    B[5, 5] = 0                                              # not stored at all
    B = sp.csr_array(B)
    B.eliminate_zeros()
    assert B[5, 5] == 0 and 5 not in B.indices[B.indptr[5]:B.indptr[6]]
    with pytest.raises(ValueError,
                       match=r"the level-1 coarse matrix \(R A P\) has 1 zero.*\(row 5\)"):
        device._check_level(csp.csr_matrix(B), 1)
    # a diagonal entry whose reciprocal is past the largest float (before: Inf in D^-1); in
    # float32 one just above the edge, 2^-127, a subnormal whose reciprocal fits (CuPy's
    # division read it as 0): kept, 2^127 as NumPy's
    real = np.finfo(dtype).dtype
    B = A.copy()
    tiny = 2.0 ** (-130 if real == np.float32 else -1030)
    B.data[B.indptr[7] + np.flatnonzero(B.indices[B.indptr[7]:B.indptr[8]] == 7)] = tiny
    with pytest.raises(ValueError, match=r"reciprocal is past the largest .*\(row 7\)"):
        device._check_level(csp.csr_matrix(B), 0)
    if dtype == np.float32:
        B.data[B.indptr[7] + np.flatnonzero(B.indices[B.indptr[7]:B.indptr[8]] == 7)] = 2.0 ** -127
        got = device._check_level(csp.csr_matrix(B), 0).get()
        assert got[7] == np.float32(2.0 ** 127)
        np.testing.assert_array_equal(np.delete(got, 7), np.delete(want.get(), 7))


@pytest.mark.parametrize("M", ["amg", "chebyshev"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_diagonal_whose_reciprocal_overflows_is_refused_on_the_device(dtype, M):
    """M="amg" and M="chebyshev" on the GPU (device._check_level) refuse a diagonal entry whose
    reciprocal is past the largest float, naming the row, as the host variant does
    (tests/test_validation.py); before, D^-1 held Inf and the solve broke down."""
    import dpsolve
    A = laplace_2d(20).toarray().astype(dtype)
    A[3, 3] = 1e-39 if dtype == np.float32 else 1e-310
    with pytest.raises(ValueError, match=r"reciprocal is past the largest .*\(row 3\)"):
        dpsolve.cg(sp.csr_array(A), np.ones(400, dtype), M=M, variant="cuda")


@pytest.mark.parametrize("M", ["amg", "chebyshev"])
@pytest.mark.parametrize("problem, value", [("zero", 0.0), ("negative", -4.0),
                                            ("reciprocal", 1e-39), ("missing", None)])
def test_the_device_refuses_a_diagonal_in_the_hosts_words(M, problem, value):
    """device._check_level words a bad diagonal as the host variant does, to the letter
    (dpsolve.precond.diagonal.refusal, naming M and the rows), for AMG and Chebyshev; Chebyshev
    takes a negative diagonal on both (-A solves). Before, the GPU said "AMG needs a nonzero,
    finite diagonal" to M="chebyshev", and named AMG's levels otherwise than the host."""
    A = sp.lil_array(laplace_2d(20).astype(np.float32))
    for r in (3, 17):
        A[r, r] = 0 if value is None else value
    A = sp.csr_array(A)
    if value is None:
        A.eliminate_zeros()                                   # not stored at all
    b = np.ones(400, np.float32)
    if problem == "negative" and M == "chebyshev":
        for variant in ("host", "cuda"):
            x, info = dpsolve.bicgstab(sp.csr_array(-laplace_2d(20).astype(np.float32)), b,
                                       M=M, rtol=1e-5, variant=variant)
            assert info == 0, variant
        return
    words = []
    for variant in ("host", "cuda"):
        with pytest.raises(ValueError) as e:
            dpsolve.bicgstab(A, b, M=M, variant=variant)
        words.append(str(e.value))
    assert words[0] == words[1] and "rows 3, 17)" in words[0], words
    assert ("AMG" if M == "amg" else "M='chebyshev'") in words[0]


@pytest.mark.parametrize("dtype, precision", CYCLES, ids=CYCLE_IDS)
def test_a_numeric_resetup_keeps_a_nonsymmetric_smoothed_restriction(dtype, precision):
    """A nonsymmetric A (BiCGStab's) makes RS as R - (R A) S; update(A') with A's pattern makes
    R A' over the kept RS's pattern (device.smoothed_restriction's ``prev``): every level's RS
    is a fresh set-up's of A' to rounding, over the same pattern arrays as before, and the
    V-cycles agree."""
    cp = _cp()
    import cupyx.scipy.sparse as csp
    A, _ = _problem("2d", 37, dtype)
    A = sp.csr_array(A + sp.diags_array([-0.1 * np.ones(A.shape[0] - 1)], offsets=[1])
                     .astype(dtype))
    A2 = sp.csr_array(A + sp.diags_array(np.linspace(0.1, 0.5, A.shape[0]))).astype(dtype)
    M = dpsolve.precond.AMG(precision=precision)
    P = dpsolve.prepare(csp.csr_matrix(A), "bicgstab", M=M, variant="cuda")
    before = [lev.RS for lev in _cycling(P.precond.hierarchy)[0].levels[:-1]]
    assert any(rs is not None for rs in before)
    P.update(csp.csr_matrix(A2))
    fresh = dpsolve.prepare(csp.csr_matrix(A2), "bicgstab", M=M, variant="cuda")
    assert P.precond.hierarchy.resetup == "numeric"
    (hc, eps), hf = _cycling(P.precond.hierarchy), _cycling(fresh.precond.hierarchy)[0]
    for old, lev, levf in zip(before, hc.levels[:-1], hf.levels[:-1]):
        assert (lev.RS is None) == (old is None) == (levf.RS is None)
        if lev.RS is None:
            continue
        assert lev.RS.indices is old.indices and lev.RS.indptr is old.indptr   # kept pattern
        a, b = lev.RS.toarray().get(), levf.RS.toarray().get()
        assert np.abs(a - b).max() <= eps * np.abs(b).max()
    r = np.random.default_rng(15).random(A.shape[0]).astype(dtype)
    zs = []
    for Q in (P, fresh):
        st = Q._state
        with st.stream:
            zd = cp.full(A.shape[0], np.nan, dtype)
            st.pc.apply(st.ex, cp.asarray(r), zd)
            zs.append(zd.get())
    assert np.linalg.norm(zs[0] - zs[1]) <= 10 * eps * np.linalg.norm(zs[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_jacobi_binds_on_the_device_with_the_hosts_bits(dtype):
    """Jacobi's bind of a device CSR makes D^-1 on the device (precond.cu's inverse_diagonal,
    one host read) with the bits of the host's ``inverse_diagonal``: diagonals of every sign and
    of magnitudes across the dtype's range. The rows it cannot answer on the device (a float32
    subnormal diagonal, CuPy's -ftz=true reading it as 0; a quotient below the normal range,
    written as 0) take the host's path, whose answer is kept; complex keeps the host's path
    (NumPy's complex division is the specification)."""
    from dpsolve.formats import to_csr
    from dpsolve.precond.diagonal import inverse_diagonal
    from dpsolve.precond.jacobi import Jacobi
    cp = _cp()
    n = 400
    A = sp.lil_array(laplace_2d(20).astype(dtype))
    rng = np.random.default_rng(5)
    real = np.finfo(dtype).dtype
    top = 100 if real == np.float32 else 900
    for r in range(n):
        A[r, r] = (rng.choice([-1.0, 1.0]) * rng.random() * 2.0 ** rng.integers(-top, top)
                   + (1j * rng.random() if np.dtype(dtype).kind == "c" else 0))
    A = sp.csr_array(A)
    want, why = inverse_diagonal(A.diagonal(), dtype)
    assert why is None
    got = Jacobi().bind(to_csr(A, dtype).to_device(), n, dtype).inv_diag
    assert isinstance(got, cp.ndarray) == (np.dtype(dtype).kind == "f")
    got = got.get() if isinstance(got, cp.ndarray) else got
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if real == np.float32:
        for value, expect in ((2.0 ** -127, 2.0 ** 127), (2.0 ** 127, 2.0 ** -127),
                              (2.0 ** 126 * 1.5, None)):
            B = A.copy()
            B[7, 7] = value
            B = sp.csr_array(B)
            d = Jacobi().bind(to_csr(B, dtype).to_device(), n, dtype).inv_diag
            d = d.get() if isinstance(d, cp.ndarray) else d
            host = inverse_diagonal(B.diagonal(), dtype)[0]
            np.testing.assert_array_equal(d.view(np.uint32), host.view(np.uint32))
            assert expect is None or d[7] == np.float32(expect)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("problem, value", [("zero", 0.0), ("missing", None),
                                            ("reciprocal", "tiny")])
def test_jacobi_refuses_on_the_device_in_the_hosts_words(dtype, problem, value):
    """M="jacobi" on the GPU (D^-1 made there) refuses a zero, a missing and a diagonal entry
    whose reciprocal is past the largest float in the host variant's words, to the letter,
    naming the rows; a negative diagonal is taken by both, and the solves agree."""
    A = sp.lil_array(laplace_2d(20).astype(dtype))
    tiny = 1e-39 if dtype == np.float32 else 1e-310
    for r in (3, 17):
        A[r, r] = 0 if value is None else tiny if value == "tiny" else value
    A = sp.csr_array(A)
    if value is None:
        A.eliminate_zeros()                                   # not stored at all
    b = np.ones(400, dtype)
    words = []
    for variant in ("host", "cuda", "graph"):
        with pytest.raises(ValueError) as e:
            dpsolve.cg(A, b, M="jacobi", variant=variant)
        words.append(str(e.value))
    assert words[0] == words[1] == words[2] and "rows 3, 17)" in words[0], words
    assert "Jacobi" in words[0]
    B = sp.lil_array(laplace_2d(20).astype(dtype))
    B[3, 3] = -4.0                                            # indefinite: BiCGStab takes it
    B = sp.csr_array(B)
    xs = [dpsolve.bicgstab(B, b, M="jacobi", rtol=1e-5, variant=v) for v in ("host", "cuda")]
    assert xs[0][1] == 0 and xs[1][1] == 0
    np.testing.assert_allclose(xs[1][0], xs[0][0], rtol=1e-3 if dtype == np.float32 else 1e-8)
