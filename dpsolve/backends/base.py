"""What every back end provides."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..methods import methods_of


@dataclass
class Run:
    """What one ``Backend.run`` returns: the iterate, SciPy's info code, iterations run, and the
    report fields the back end measured (keys of ``SolveReport``)."""
    x: object
    info: int
    iterations: int
    stats: dict = field(default_factory=dict)
    residual: float | None = None    # the true ||b - A x|| when the back end computed it


class Backend:
    name = "?"
    device_driven = False      # the loop runs on the device: no Python callback mid-solve
    uses_format = True         # reads format= (the host variant does not)

    @property
    def methods(self) -> tuple:
        """The methods this variant runs: its entries in the method table (dpsolve.methods)."""
        return methods_of(self.name)

    def availability(self):
        """(True, None) if this back end can run here, else (False, reason)."""
        raise NotImplementedError

    def why_not(self, system) -> str | None:
        """None if this back end can take ``system`` (method, dtype, preconditioner kind), else
        the reason, for a clear error."""
        return None

    def supports(self, system) -> bool:
        """Whether this back end can take this system (``why_not``)."""
        return self.why_not(system) is None

    def refuse(self, system) -> None:
        """Raise ValueError with ``why_not``'s reason where this back end cannot take ``system``
        (``prepare``'s first check; the front end's too where b = 0 needs no state)."""
        reason = self.why_not(system)
        if reason:
            raise ValueError(reason)

    def initial_x(self, system):
        """The starting iterate, a private copy of x0 (or zeros) where this back end computes."""
        raise NotImplementedError

    def prepare(self, system, fmt):
        """Per-system state (device matrix, buffers, kernels): built once per one-shot call, or
        once for every solve of a prepared system (``dpsolve.prepare``). ``system.b`` may be
        None here: each solve's b comes through ``load``."""
        raise NotImplementedError

    def load(self, state, system):
        """Take one solve's right-hand side (and array kind) into the prepared state."""

    def run(self, state, system, x, *, atol, maxiter, callback, sync, energy=False) -> Run:
        """Run at most ``maxiter`` iterations from the iterate ``x`` (updated in place).
        ``energy``: measure energy (NVML, RAPL) around the run; off by default, as a read of
        NVML's counter costs milliseconds."""
        raise NotImplementedError

    def residual_norm(self, state, system, x) -> float:
        """The true ||b - A x||, computed once at exit."""
        raise NotImplementedError

    def to_output(self, x, system):
        """Convert the iterate to the caller's array type (NumPy or CuPy, following b)."""
        raise NotImplementedError
