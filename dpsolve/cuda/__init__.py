"""CUDA sources (``*.cu``, ``include/dpsolve/*.cuh``), the loader, and the host wrappers per
kernel."""
from ._loader import SOURCES, get_kernel, nvcc_command, source_text

__all__ = ["SOURCES", "get_kernel", "nvcc_command", "source_text"]
