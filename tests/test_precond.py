"""The preconditioner package (dpsolve/precond): the registry, binding, the faces, and which
variants take which preconditioner. GPU behaviour is in the GPU suites (every variant with
M="jacobi" and with an operator M); here, what holds without a device."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

import dpsolve
from dpsolve import methods as method_table
from dpsolve import precond
from dpsolve.backends import VARIANT_NAMES, get_backend


def _poisson(n=12):
    return sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n), format="csr")


def test_the_registry_names_what_M_accepts():
    assert "jacobi" in precond.names()
    with pytest.raises(ValueError, match="unknown preconditioner M='ilu'; expected 'jacobi'"):
        dpsolve.cg(_poisson(), np.ones(12), M="ilu", variant="host")


def test_a_preconditioner_object_is_bound_not_modified():
    A = _poisson()
    user = precond.Jacobi()
    x, info = dpsolve.cg(A, np.ones(12), M=user, variant="host")
    assert info == 0 and user.inv_diag is None and not user.bound
    xr, info_r = dpsolve.cg(A, np.ones(12), M="jacobi", variant="host")
    assert info_r == 0 and np.array_equal(x, xr)


def test_a_preconditioner_class_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"M=Jacobi is a class; pass an instance, Jacobi\(\)"):
        dpsolve.cg(_poisson(), np.ones(12), M=precond.Jacobi, variant="host")


def test_make_turns_every_form_of_M_into_a_bound_preconditioner():
    A = _poisson()
    from dpsolve.formats import to_csr
    csr = to_csr(A, np.float64)
    d = 1.0 / A.diagonal()
    cases = [(None, "none"), ("jacobi", "jacobi"), (d, "jacobi"), (sp.diags_array(d), "jacobi"),
             (A, "operator"), (LinearOperator((12, 12), matvec=lambda r: r), "operator")]
    for M, kind in cases:
        pc = precond.make(M, csr, 12, np.float64)
        assert pc.bound and pc.kind == kind
    inv = precond.make("jacobi", csr, 12, np.float64).inv_diag
    assert np.array_equal(inv, d)


def test_a_registered_preconditioner_runs_on_the_host_through_its_host_face():
    """The seam: a subclass with a host face, registered by name, needs no other edit to run on
    variant host (and is refused by name where its faces are missing)."""

    @precond.register
    class Scaled(precond.Preconditioner):
        name = "test-scaled"

        def __init__(self, factor=0.5):
            self.factor = factor

        def options(self):
            return {"factor": self.factor}

        def bind(self, csr, n, dtype, *, snapshot=False):
            out = Scaled(self.factor)
            out.bound = True
            return out

        def host(self):
            return (lambda r: self.factor * r), (lambda r: self.factor * r)

    try:
        A, b = _poisson(), np.ones(12)
        x, info = dpsolve.cg(A, b, M="test-scaled", variant="host")
        x2, info2 = dpsolve.cg(A, b, M=Scaled(2.0), variant="host")
        assert info == info2 == 0
        assert np.linalg.norm(b - A @ x) <= 1e-5 * np.linalg.norm(b)
        assert repr(Scaled(2.0)) == "Scaled(factor=2.0)"
        # a preconditioner of kernels (not pointwise) is refused by name where it cannot run
        system = dpsolve._system.make_system("cg", A, b, None, Scaled())
        for v in ("dynamic", "persistent"):
            why = get_backend(v).why_not(system)
            assert "cannot run M='test-scaled'" in why and "'graph'" in why and "'merge'" in why
        for v in ("cublas", "cuda", "merge", "graph"):
            assert get_backend(v).why_not(system) is None
    finally:
        precond.REGISTRY.pop("test-scaled")


def test_a_python_operator_M_is_refused_by_device_driven_variants():
    A, b = _poisson(), np.ones(12)
    system = dpsolve._system.make_system("cg", A, b, None, A)
    for v in ("dynamic", "persistent", "graph"):
        assert "a general preconditioner runs on 'host', 'cublas', 'cuda', 'merge'" in \
            get_backend(v).why_not(system)


def test_a_variant_registers_only_the_methods_its_class_defines():
    """The method table's GPU entries are functions of the variant's own class (or entered by a
    method's own folder through ``implement``), never one inherited from a parent variant."""
    for v in VARIANT_NAMES[1:]:
        cls = type(get_backend(v))
        for m in method_table.methods_of(v):
            fn = method_table.TABLE[(m, v)]
            # a method folder's own implementation: its "module:function" name, or the function
            # once a solve has resolved it (method_table.implementation replaces the entry)
            if isinstance(fn, str) or fn.__module__.startswith("dpsolve.methods."):
                continue
            assert cls.__dict__.get(m) is fn, (m, v)


def test_every_preconditioner_module_is_imported_with_the_package():
    import pkgutil
    mods = {m.name for m in pkgutil.iter_modules(precond.__path__)}
    import sys
    assert all(f"dpsolve.precond.{m}" in sys.modules for m in mods)


def test_the_cli_offers_every_registered_preconditioner():
    from dpsolve import cli
    assert set(cli.PRECONDS) == set(precond.names())


@pytest.mark.parametrize("M", ["chebyshev", "amg"])
def test_kernel_preconditioners_on_the_host(M):
    """The host faces: CG converges in far fewer iterations than with Jacobi, the report says
    what M was, BiCG is refused by name (no M^H) and BiCGStab takes it."""
    from dpsolve.matrices import laplace_2d
    A = sp.csr_array(laplace_2d(60))
    b = A @ np.random.default_rng(0).random(A.shape[0])
    _, info_j, rep_j = dpsolve.cg(A, b, rtol=1e-8, M="jacobi", variant="host", full_output=True)
    x, info, rep = dpsolve.cg(A, b, rtol=1e-8, M=M, variant="host", full_output=True)
    assert info == info_j == 0 and rep.iterations < rep_j.iterations / 2
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert rep.preconditioner["precond"] == M
    with pytest.raises(ValueError, match=f"bicg needs M\\^H, which M='{M}' does not provide"):
        dpsolve.bicg(A, b, M=M, variant="host")
    assert dpsolve.bicgstab(A, b, rtol=1e-8, M=M, variant="host")[1] == 0
    with pytest.raises(ValueError, match=f"M='{M}' needs A as a matrix"):
        dpsolve.cg(LinearOperator(A.shape, matvec=lambda v: A @ v, dtype=A.dtype), b, M=M,
                   variant="host")


def test_readme_states_the_preconditioners_default_options():
    """README's table of M= gives each name's defaults as the constructors have them (the
    Chebyshev default degree moved from 3 to 5; a table left behind would mislead)."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"`Chebyshev(degree={precond.Chebyshev().degree})`" in readme
    amg = precond.AMG()
    assert (f"`AMG(theta={amg.theta:g}, B=None, smoother=\"{amg.smoother}\", omega={amg.omega:g}, "
            f"degree={amg.degree}, max_coarse={amg.max_coarse}, max_levels={amg.max_levels}, "
            f"second_pass=\"{amg.second_pass}\", precision=\"{amg.precision}\", "
            f"max_dense={amg.max_dense})`"
            ) in readme


def test_preconditioner_options_are_checked():
    with pytest.raises(ValueError, match="Chebyshev degree must be an integer in 1..16"):
        precond.Chebyshev(degree=0)
    with pytest.raises(ValueError, match="AMG smoother must be 'jacobi' or 'chebyshev'"):
        precond.AMG(smoother="gauss-seidel")
    with pytest.raises(ValueError, match="AMG max_coarse must be a positive integer"):
        precond.AMG(max_coarse=0)
    A = _poisson(30)
    with pytest.raises(ValueError, match=r"AMG's B must have shape \(30, k\)"):
        dpsolve.cg(A, np.ones(30), M=precond.AMG(B=np.ones((29, 1))), variant="host")
    B = np.ones((30, 1))
    P = dpsolve.prepare(A, "cg", M=precond.AMG(B=B), variant="host")
    B[:] = np.nan                                # the prepared system keeps its own copy
    assert P.solve(np.ones(30))[1] == 0


@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev"])
def test_the_report_names_the_levels_of_the_smoothed_restriction(smoother):
    """report.preconditioner["smoothed_restriction"]: the levels that restrict by R (I - A S)
    in one product (every level of 2-D Poisson with the Jacobi smoother, none with Chebyshev),
    and the CLI's hierarchy marks them."""
    from dpsolve import cli
    from dpsolve.matrices import laplace_2d
    A = sp.csr_array(laplace_2d(60))
    b = A @ np.ones(A.shape[0])
    M = precond.AMG(smoother=smoother, max_coarse=40, max_dense=0, precision="full")
    x, info, rep = dpsolve.cg(A, b, rtol=1e-8, M=M, variant="host", full_output=True)
    levels = rep.preconditioner["levels"]
    assert info == 0 and len(levels) >= 3
    expect = list(range(len(levels) - 1)) if smoother == "jacobi" else []
    assert rep.preconditioner["smoothed_restriction"] == expect
    rows = [line for line in cli.hierarchy_lines(rep.preconditioner) if line.endswith(
        ("R", "R (I - A S)", "(dense solve)"))]
    assert len(rows) == len(levels) and rows[-1].endswith("(dense solve)")
    assert sum(r.endswith("R (I - A S)") for r in rows) == len(expect)


def test_amg_compares_a_patterns_two_arrays_at_once():
    """AMG.inherit's test of an unchanged pattern (amg._equal, here on host arrays): equal where
    indptr and indices both are; not where a column moved, a row's length changed, or an array
    is shorter."""
    from dpsolve.precond.amg import _equal
    ptr, idx = np.array([0, 2, 3]), np.array([0, 1, 1])
    assert _equal((ptr, idx), (ptr.copy(), idx.copy()))
    assert not _equal((ptr, idx), (ptr, np.array([0, 1, 0])))
    assert not _equal((ptr, idx), (np.array([0, 1, 3]), idx))
    assert not _equal((ptr, idx), (ptr, idx[:2]))
