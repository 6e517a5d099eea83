"""dpsolve.cg, dpsolve.bicg and dpsolve.bicgstab: SciPy's signatures, defaults and info codes."""
from __future__ import annotations

from ._frontend import solve as _solve
from ._prepared import PreparedSystem


def solve(method, A, b, x0, **kw):
    """One call of cg / bicg / bicgstab: a PreparedSystem as ``A`` solves with what it holds."""
    if isinstance(A, PreparedSystem):
        if A.method != method:
            raise ValueError(f"this system was prepared for {A.method}, not {method}; use "
                             f"dpsolve.{A.method}(P, b) or P.solve(b)")
        for name, default in (("M", None), ("variant", "auto"), ("format", "auto"),
                              ("sync", "polling")):
            if kw[name] is not default and (default is None or kw[name] != default):
                raise ValueError(f"{name}= is fixed when a system is prepared; pass it to "
                                 f"dpsolve.prepare, not to dpsolve.{method}(P, b)")
        return A.solve(b, x0, rtol=kw["rtol"], atol=kw["atol"], maxiter=kw["maxiter"],
                       callback=kw["callback"], full_output=kw["full_output"],
                       energy=kw["energy"])
    return _solve(method, A, b, x0, **kw)

_COMMON_DOC = """
    Parameters
    ----------
    A : {{sparse matrix or array, ndarray, cupy.ndarray, cupyx sparse matrix, LinearOperator,
         PreparedSystem}}
        The real or complex N-by-N matrix of the linear system.{extra_A} A system prepared
        with :func:`dpsolve.prepare` solves with what it holds (its M, variant, format, sync).
    b : ndarray or cupy.ndarray
        Right hand side of the linear system. Has shape (N,) or (N,1).
    x0 : ndarray or cupy.ndarray, optional
        Starting guess for the solution. Never modified.
    rtol, atol : float, optional
        Parameters for the convergence test. For convergence,
        ``norm(b - A @ x) <= max(rtol*norm(b), atol)`` should be satisfied.
        The default is ``atol=0.`` and ``rtol=1e-5``.
    maxiter : integer, optional
        Maximum number of iterations (default ``10*N``). Iteration stops after maxiter steps even
        if the specified tolerance has not been achieved. Must be positive.
    M : {{sparse matrix or array, ndarray, LinearOperator, "jacobi", 1-D array}}, optional
        Preconditioner approximating the inverse of `A`. ``"jacobi"`` builds ``D^-1`` from the
        diagonal of `A` (a zero diagonal entry raises ``ValueError`` naming the row); a 1-D array
        is taken as ``D^-1`` itself.
    callback : function, optional
        User-supplied function to call after each iteration. It is called as ``callback(xk)``,
        where ``xk`` is the current solution vector.
    variant : str, optional
        Back end: ``"auto"`` (default), ``"host"``, or a GPU variant; see :func:`dpsolve.variants`.
        ``"auto"`` on a machine without a usable CUDA device runs ``"host"`` and warns once.
    sync : {{"polling", "blocking"}}, optional
        How the host thread waits for the GPU: spinning, or sleeping (lower CPU energy).
    format : {{"auto", "csr-scalar", "csr-vector", "ell", "csr-adaptive"}}, optional
        SpMV format on the GPU. ``"ell"`` refuses matrices whose padding would exceed 2x the
        nonzeros. Ignored by ``variant="host"``.
    full_output : bool, optional
        If True, also return a :class:`dpsolve.SolveReport`.
    energy : bool, optional
        Measure the solve's GPU energy (NVML) and host energy (RAPL, where readable). Off by
        default: a read of NVML's counter costs milliseconds, and the counter ticks every
        ~100 ms, so the report gives energy only for solves of at least 0.25 s. For short solves
        use :func:`dpsolve.measure.measure_window`, which reads it once at each edge of a window.

    Returns
    -------
    x : ndarray or cupy.ndarray
        The converged solution; a CuPy array exactly when `b` was one.
    info : integer
        Provides convergence information:
            0  : successful exit (the *true* residual meets the tolerance)
            >0 : convergence to tolerance not achieved, number of iterations
            <0 : breakdown{breakdown}
    report : SolveReport
        Only with ``full_output=True``.

    See Also
    --------
    scipy.sparse.linalg.{name}
"""


def cg(A, b, x0=None, *, rtol=1e-05, atol=0.0, maxiter=None, M=None, callback=None,
       variant="auto", sync="polling", format="auto", full_output=False, energy=False):
    return solve("cg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                 variant=variant, sync=sync, format=format, full_output=full_output, energy=energy)


def bicg(A, b, x0=None, *, rtol=1e-05, atol=0.0, maxiter=None, M=None, callback=None,
         variant="auto", sync="polling", format="auto", full_output=False, energy=False):
    return solve("bicg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                 variant=variant, sync=sync, format=format, full_output=full_output, energy=energy)


def bicgstab(A, b, x0=None, *, rtol=1e-05, atol=0.0, maxiter=None, M=None, callback=None,
             variant="auto", sync="polling", format="auto", full_output=False, energy=False):
    return solve("bicgstab", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                 callback=callback, variant=variant, sync=sync, format=format,
                 full_output=full_output, energy=energy)


cg.__doc__ = ("Solve ``Ax = b`` with the Conjugate Gradient method, for a Hermitian positive "
              "definite `A`.\n" + _COMMON_DOC.format(
                  name="cg", extra_A=" `A` must be Hermitian positive definite.",
                  breakdown=" (dpsolve: -10 when a step gives a non-finite scalar, i.e. A is "
                            "not positive definite)"))
_NONFINITE = (";\n                 dpsolve: also -10 when a step gives a non-finite scalar (an "
              "overflow), where\n                 SciPy iterates on NaN to maxiter; x is then the "
              "last finite iterate")
bicg.__doc__ = ("Solve ``Ax = b`` with the BIConjugate Gradient method.\n" + _COMMON_DOC.format(
    name="bicg", extra_A=" A LinearOperator must provide ``rmatvec`` (A^H x).",
    breakdown=": -10 rho breakdown, -11 <p~, A p> == 0 (SciPy's codes)" + _NONFINITE))
bicgstab.__doc__ = ("Solve ``Ax = b`` with the BIConjugate Gradient STABilized method.\n"
                    + _COMMON_DOC.format(name="bicgstab", extra_A="",
                                         breakdown=": -10 rho breakdown, -11 omega or <r~, v> "
                                                   "breakdown (SciPy's codes)" + _NONFINITE))
