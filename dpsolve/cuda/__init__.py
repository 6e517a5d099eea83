"""CUDA sources (``*.cu``, ``include/dpsolve/*.cuh``), the loader, and the host wrappers per
kernel. The loader's names are imported on first use, so that ``dpsolve.cuda.abi`` (the device
ABI's Python mirror) can be imported from anywhere in dpsolve without pulling the loader in."""

__all__ = ["SOURCES", "get_kernel", "nvcc_command", "source_text"]


def __getattr__(name):
    if name in __all__:
        from . import _loader
        return getattr(_loader, name)
    raise AttributeError(f"module 'dpsolve.cuda' has no attribute {name!r}")
