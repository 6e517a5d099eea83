"""Exceptions and warnings raised by dpsolve."""


class DpsolveError(Exception):
    """Base class of every dpsolve error."""


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
