"""The public solvers: one function per method of the method table (``dpsolve.methods``), with
SciPy's signature, defaults and info codes, then dpsolve's own keywords. ``dpsolve.cg`` is
``make_solver("cg")``; a new method gets its function without an edit here.
"""
from __future__ import annotations

import inspect

from . import _block
from . import methods as method_table
from ._frontend import solve as _solve
from ._prepared import PreparedSystem


def solve(method, A, b, x0, options=None, **kw):
    """One call of a method's function: a PreparedSystem as ``A`` solves with what it holds; a
    block B of shape (n, k), k != 1, solves its columns (``dpsolve/_block.py``)."""
    if _block.is_block(b) and not isinstance(A, PreparedSystem):
        return _block.solve(method, A, b, x0, options, **kw)
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
                       energy=kw["energy"], **(options or {}))
    return _solve(method, A, b, x0, options=options, **kw)

_COMMON_DOC = """
    Parameters
    ----------
    A : {{sparse matrix or array, ndarray, cupy.ndarray, cupyx sparse matrix, LinearOperator,
         PreparedSystem}}
        The real or complex N-by-N matrix of the linear system.{extra_A} A system prepared
        with :func:`dpsolve.prepare` solves with what it holds (its M, variant, format, sync).
    b : ndarray or cupy.ndarray
        Right hand side of the linear system. Has shape (N,) or (N,1). dpsolve: a block of K
        right-hand sides, shape (N, K), returns x of shape (N, K), ``info`` as an array of K codes
        and a ``BlockReport`` (one report per column); each column meets its own tolerance.
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
        diagonal of `A` (a zero diagonal entry, or one whose reciprocal is past the largest
        float, raises ``ValueError`` naming the row); a 1-D array
        is taken as ``D^-1`` itself.
    callback : function, optional
        User-supplied function to call after each iteration. It is called as ``callback(xk)``,
        where ``xk`` is the current solution vector.{options}
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



# dpsolve's keywords after SciPy's, in this order (tests/test_frontend.py holds them to it)
_EXTRAS = (("variant", "auto"), ("sync", "polling"), ("format", "auto"), ("full_output", False),
           ("energy", False))
_COMMON_DEFAULTS = {"rtol": 1e-05, "atol": 0.0, "maxiter": None, "M": None, "callback": None}


def make_solver(name: str):
    """The public function of method ``name``: SciPy's signature (``scipy_keywords``, the
    method's options among them at SciPy's place) plus dpsolve's keywords, checked once."""
    m = method_table.get(name)
    opts = m.option_defaults()

    def solver(A, b, x0=None, *, rtol=1e-05, atol=0.0, maxiter=None, M=None, callback=None,
               variant="auto", sync="polling", format="auto", full_output=False, energy=False,
               **options):
        return solve(name, A, b, x0, options, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                     callback=callback, variant=variant, sync=sync, format=format,
                     full_output=full_output, energy=energy)

    P, K = inspect.Parameter, inspect.Parameter.KEYWORD_ONLY
    params = [P("A", P.POSITIONAL_OR_KEYWORD), P("b", P.POSITIONAL_OR_KEYWORD),
              P("x0", P.POSITIONAL_OR_KEYWORD, default=None)]
    params += [P(k, K, default=opts[k] if k in opts else _COMMON_DEFAULTS[k])
               for k in m.scipy_keywords]
    params += [P(k, K, default=opts[k]) for k in opts if k not in m.scipy_keywords]
    params += [P(k, K, default=d) for k, d in _EXTRAS]
    solver.__signature__ = inspect.Signature(params)
    solver.__name__ = solver.__qualname__ = name
    solver.__module__ = "dpsolve"
    option_docs = "".join(f"\n    {o.name} : {o.doc}" for o in m.options)
    solver.__doc__ = (f"Solve ``Ax = b`` with {m.title}.\n"
                      + _COMMON_DOC.format(name=name, extra_A=m.doc_A, breakdown=m.breakdown,
                                           options=option_docs))
    return solver


for _name in method_table.names():
    globals()[_name] = make_solver(_name)
