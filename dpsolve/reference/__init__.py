"""Pure-NumPy reference solvers: the specification every GPU back end is tested against.

Each solver takes callables rather than matrices:

    solver(matvec, b, x, *, atol, maxiter, psolve=None, callback=None, space=None)
        -> (x, info, iterations)

``x`` is updated in place and returned. ``info`` follows SciPy: 0 converged, ``maxiter`` when the
iteration budget ran out, negative on breakdown. ``iterations`` is the number of iterations run.
The convergence test is SciPy's: ``||r|| < atol`` on the recurrence residual, checked before each
iteration. The front end re-checks the true residual afterwards.

``space`` says where the inner products, norms and the ``x.any()`` test are reduced: by default
(``_util.LocalSpace``) NumPy's in this process; ``dpsolve.distributed`` passes a space that
all-reduces over MPI ranks, so the same solvers run on a row-partitioned system.

Which solver is which method's is the method table's knowledge (``dpsolve.methods``:
``get(name).reference_solver()``); a method in its own folder keeps its reference there.
"""
from .cg import cg
from .bicg import bicg
from .bicgstab import bicgstab

__all__ = ["cg", "bicg", "bicgstab"]
