"""Exceptions and warnings raised by dpsolve."""


def _rebuild(cls, args, state):
    """Unpickle an exception without calling its __init__ (whose arguments need not be its
    ``args``): the arguments and the attributes as they were. The __new__ is that of the base
    the class takes its layout from (OSError's for an OSError): another builtin base's
    (MemoryError's, found first) refuses the subclass."""
    e = cls.__base__.__new__(cls, *args)
    e.args = args
    e.__dict__.update(state)
    return e


class DpsolveError(Exception):
    """Base class of every dpsolve error. Every one pickles (a process pool sends exceptions
    between processes), whatever its __init__ takes: rebuilt from its ``args`` and attributes."""

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


class BackendUnavailableError(DpsolveError, RuntimeError):
    """A variant was asked for that cannot run here; ``reason`` says why."""

    def __init__(self, variant, reason):
        self.variant = variant
        self.reason = reason
        super().__init__(f"variant {variant!r} cannot run here: {reason}")


class FormatError(DpsolveError, ValueError):
    """A sparse format cannot hold this matrix (for example ELL padding too large)."""


class KernelCompileError(DpsolveError, RuntimeError):
    """NVRTC rejected a CUDA source; the message carries the compiler log."""


class DistributedError(DpsolveError, RuntimeError):
    """A distributed solve failed on some rank(s) (a user callback or preconditioner raised
    there): raised on every rank, naming each failing rank and its exception. ``errors`` maps
    rank -> description, ``ranks`` lists them; on a rank that failed, ``__cause__`` is the
    original exception."""

    errors: dict
    ranks: tuple


class DpsolveWarning(UserWarning):
    """Warnings dpsolve emits (for example: no GPU, falling back to the host)."""
