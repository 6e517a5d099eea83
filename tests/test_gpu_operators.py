"""A as a LinearOperator and a general preconditioner M on the GPU variants that call them every
iteration (GPU machines only). NumPy in: the operator gets NumPy copies; CuPy in: CuPy arrays."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.sparse.linalg import LinearOperator

import dpsolve
from dpsolve import methods
from dpsolve.backends import VARIANT_NAMES, get_backend

pytestmark = pytest.mark.gpu

METHODS = methods.names()     # the method table: every method
TAKES_A = [v for v in VARIANT_NAMES[1:] if getattr(get_backend(v), "takes_operator_A", False)]
TAKES_M = [v for v in VARIANT_NAMES[1:] if getattr(get_backend(v), "takes_operator_M", False)]
# (method, variant) pairs of the table, the variants taking an operator A / a general M
A_PAIRS = [(m, v) for m in METHODS for v in TAKES_A if methods.implemented(m, v)]
M_PAIRS = [(m, v) for m in METHODS for v in TAKES_M if methods.implemented(m, v)]
REFUSE_A = [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None and v not in TAKES_A]
REFUSE_M = [v for v in VARIANT_NAMES[1:] if get_backend(v) is not None and v not in TAKES_M]


def _system(method, n=400):
    side = int(round(n ** 0.5))
    L = sp.diags_array([-np.ones(side - 1), np.full(side, 2.0), -np.ones(side - 1)],
                       offsets=[-1, 0, 1])
    A = (sp.kron(sp.eye_array(side), L) + sp.kron(L, sp.eye_array(side))).tocsr()
    if method != "cg":     # nonsymmetric: convection, and a shift that keeps BiCG's count stable
        conv = sp.kron(sp.eye_array(side), sp.diags_array([-0.5 * np.ones(side - 1)], offsets=[-1]))
        # (unshifted: 226-296 its under 1e-15 noise)
        A = (A + conv + sp.eye_array(side * side)).tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    return A, b


class Counting:
    """A LinearOperator-like object over A, counting its calls and the array types it got."""

    def __init__(self, A, xp):
        self.A, self.shape, self.dtype = A, A.shape, A.dtype
        self.calls, self.types = 0, set()
        if xp == "cupy":
            import cupyx.scipy.sparse as csp
            self.dev, self.devH = csp.csr_matrix(A), csp.csr_matrix(A.conj().T.tocsr())

    def matvec(self, v):
        self.calls += 1
        self.types.add(type(v).__module__.split(".")[0])
        return (self.dev @ v) if hasattr(self, "dev") else self.A @ v

    def rmatvec(self, v):
        self.calls += 1
        return (self.devH @ v) if hasattr(self, "devH") else self.A.conj().T @ v


@pytest.mark.parametrize("xp", ["numpy", "cupy"])
@pytest.mark.parametrize("method, variant", A_PAIRS)
def test_A_as_operator_matches_the_matrix(variant, method, xp):
    import cupy
    A, b = _system(method)
    op = Counting(A, xp)
    bb = cupy.asarray(b) if xp == "cupy" else b
    x, info, rep = getattr(dpsolve, method)(op, bb, rtol=1e-8, variant=variant, full_output=True)
    xm, info_m, rep_m = getattr(dpsolve, method)(A, b, rtol=1e-8, variant=variant, full_output=True)
    assert info == info_m == 0 and rep.variant == variant and rep.format is None
    assert type(x).__module__.split(".")[0] == xp
    assert op.types == {xp}, "the operator got the wrong kind of array"
    assert abs(rep.iterations - rep_m.iterations) <= 1
    assert op.calls >= rep.iterations
    xh = x.get() if xp == "cupy" else x
    np.testing.assert_allclose(xh, xm, rtol=1e-6, atol=1e-9)
    assert np.linalg.norm(b - A @ xh) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("method, variant", M_PAIRS)
def test_general_preconditioner(variant, method):
    """An incomplete-LU preconditioner (SciPy's spilu), as SciPy takes it: the same iteration
    count as the host reference with that M (+-1), and far fewer than without it."""
    A, b = _system(method, 900)
    ilu = sla.spilu(A.tocsc(), drop_tol=1e-3)
    M = LinearOperator(A.shape, matvec=ilu.solve, rmatvec=lambda v: ilu.solve(v, "H"),
                       dtype=A.dtype)
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, M=M, variant=variant, full_output=True)
    _, info_h, ref = getattr(dpsolve, method)(A, b, rtol=1e-8, M=M, variant="host",
                                              full_output=True)
    _, _, plain = getattr(dpsolve, method)(A, b, rtol=1e-8, variant=variant, full_output=True)
    assert info == info_h == 0
    assert abs(rep.iterations - ref.iterations) <= 1 and rep.iterations < plain.iterations / 2
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("variant", ["cuda", "merge"])
def test_a_slow_cupy_operator_is_ordered_with_the_solve(variant):
    """A CuPy operator whose own work is slow (a kernel that spins ~0.5 ms first): every kernel
    of the solve after it, the true residual's norm included, sees its result (the user's
    function runs with the solve's stream current: OperatorMatrix.apply). The final residual's
    product once ran on the caller's stream and raced that norm."""
    import cupy
    import cupyx.scipy.sparse as csp
    A, b = _system("bicgstab")
    dev = csp.csr_matrix(A)
    spin = cupy.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
    }""", "spin")

    def matvec(v):
        spin((1,), (1,), (np.int64(1_000_000),))
        return dev @ v
    op = LinearOperator(A.shape, matvec=matvec, dtype=A.dtype)
    x, info, rep = dpsolve.bicgstab(op, cupy.asarray(b), rtol=1e-8, variant=variant,
                                    full_output=True)
    true = np.linalg.norm(b - A @ x.get())
    assert info == 0 and rep.restarts == 0
    assert abs(rep.residual_norm - true) <= 1e-6 * np.linalg.norm(b)


def test_merge_cg_applies_a_general_M_once_an_iteration():
    """Variant merge's CG with a general M applies it once an iteration and not in the set-up
    (the test on ||r|| comes before the next M: merge.py's _cg_program_general, which graph
    captures), with the iterates of the host reference (the same count)."""
    variant = "merge"
    A, b = _system("cg", 900)
    ilu = sla.spilu(A.tocsc(), drop_tol=1e-3)
    calls = []

    def apply(v):
        calls.append(1)
        return ilu.solve(v)
    M = LinearOperator(A.shape, matvec=apply, dtype=A.dtype)
    x, info, rep = dpsolve.cg(A, b, rtol=1e-8, M=M, variant=variant, full_output=True)
    its = len(calls)
    _, _, ref = dpsolve.cg(A, b, rtol=1e-8, M=M, variant="host", full_output=True)
    assert info == 0 and rep.restarts == 0
    assert rep.iterations == ref.iterations and its == rep.iterations
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("method, variant", M_PAIRS)
def test_exact_inverse_converges_at_once(variant, method):
    A, b = _system(method, 100)
    M = np.linalg.inv(A.toarray())                        # dense: applied as an operator
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, M=M, variant=variant, full_output=True)
    assert info == 0 and rep.iterations <= 2


@pytest.mark.parametrize("variant", REFUSE_A)
def test_variants_that_cannot_call_A_say_which_can(variant):
    A, b = _system("cg", 100)
    with pytest.raises(ValueError, match="variants that call an operator every iteration: 'host'"):
        dpsolve.cg(sla.aslinearoperator(A), b, variant=variant)


@pytest.mark.parametrize("variant", REFUSE_M)
def test_variants_that_fuse_M_say_which_take_it(variant):
    A, b = _system("cg", 100)
    M = np.linalg.inv(A.toarray())
    with pytest.raises(ValueError, match="a general preconditioner runs on 'host'"):
        dpsolve.cg(A, b, M=M, variant=variant)


def test_auto_takes_operators_on_a_gpu_variant():
    A, b = _system("bicgstab", 100)
    _, info, rep = dpsolve.bicgstab(sla.aslinearoperator(A), b, full_output=True)
    assert info == 0 and rep.variant in TAKES_A
    M = np.linalg.inv(A.toarray())
    _, info, rep = dpsolve.bicgstab(A, b, M=M, full_output=True)
    assert info == 0 and rep.variant in TAKES_M


@pytest.mark.parametrize("variant", TAKES_A)
def test_operator_with_a_wrong_shape_is_named(variant):
    A, b = _system("cg", 100)
    bad = LinearOperator(A.shape, matvec=lambda v: np.zeros(5), dtype=A.dtype)

    class Raw:                                             # SciPy would check shape; a raw object
        shape, dtype = A.shape, A.dtype                    # with matvec is called as it is

        def matvec(self, v):
            return np.zeros(5)
    with pytest.raises(ValueError):
        dpsolve.cg(bad, b, variant=variant)
    with pytest.raises(ValueError, match=r"A.matvec returned an array of shape \(5,\)"):
        import cupy
        dpsolve.cg(Raw(), cupy.asarray(b), variant=variant)
