"""Programmatic dependent launch (PDL) of the kernels captured into a CUDA graph.

In a graph, a kernel's blocks are normally scheduled only once the kernel before it has completed:
every boundary costs the launch's latency and the ramp of the new grid onto the SMs (~1-3 us on
Hopper, against 10-100 us of work per kernel in an iteration of a large solve). A kernel captured
with cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled as soon as the one before
has let it (``griddepcontrol.launch_dependents``): its blocks take SM slots as the earlier grid's
blocks retire, and wait (``griddepcontrol.wait``) for that grid to complete and flush before they
touch memory. common.cuh's ``DPS_PDL()`` does both, first thing in a kernel; a kernel without it
must not be launched this way (it would read what the kernel before is still writing).

Used where a stream is being captured: the iterations that variant graph captures into its
WHILE body (executor.Plan.run; the distributed graph's body too, where :func:`_after_kernels`
keeps the launches after NCCL's calls and the halo's stream ordinary), and the V-cycle captured
on its own (its timing). Kernels launched from the host (cuda, merge, cublas) and every set-up go
the ordinary way (:class:`Kernel` says why), and ``DPS_PDL()`` does nothing in them.
``ENABLED = False`` captures every kernel the ordinary way (the benchmarks' A/B; set it before a
graph is built).
"""
from __future__ import annotations

import ctypes

import numpy as np

ENABLED = True

# the sources whose every kernel starts with DPS_PDL() (tests/test_cuda_compile.py checks):
# get_kernel hands their kernels out as :class:`Kernel`
SOURCES = frozenset({"cg_merge", "bicg_merge", "bicgstab_merge", "blas1", "krylov", "graph",
                     "precond", "spmv"})
# and amg.cu's V-cycle kernels (vc_*, in every module of that file), as :class:`Kernel`s that go
# programmatic when called on their own (``direct``: the V-cycle captured alone)
DIRECT_FILE, DIRECT_PREFIX = "amg.cu", "vc_"


def wrap(raw, name: str, file: str, expression: str):
    """``raw``, kernel ``expression`` of source ``name`` (its file ``file``), as get_kernel hands
    it out: a :class:`Kernel` where it starts with DPS_PDL (a source of SOURCES; amg.cu's vc_*
    kernels, ``direct``), else as it is."""
    if name in SOURCES:
        return Kernel(raw)
    if file == DIRECT_FILE and expression.startswith(DIRECT_PREFIX):
        return Kernel(raw, direct=True)
    return raw


# the CUfunction handles of every Kernel made: kernels that start with DPS_PDL, after which a
# launch may go programmatic (_after_kernels)
_READY: set = set()


def capturing(stream) -> bool:
    """Whether launches into ``stream`` go with the attribute: it is being captured (and
    ENABLED)."""
    return ENABLED and stream is not None and stream.is_capturing()


class Kernel:
    """A CuPy kernel (``raw``) that starts with DPS_PDL(): launched with the programmatic-
    serialization attribute into a stream being captured, the ordinary way otherwise. Other
    attributes are the CuPy kernel's.

    Where: a replayed plan (executor.Plan.run: the iterations that variant graph captures) for
    every Kernel; a call of its own (``kernel(grid, block, args, stream=...)``) only where
    ``direct`` (amg.cu's vc_* kernels: the V-cycle captured on its own, as its timing does).
    The Krylov kernels' set-up launches go the ordinary way. Measured (H200, 12-01): with them
    programmatic too, graph_head of complex BiCG and BiCGStab read the previous solve's scalars
    (converged in 0 iterations, wrong) in 1-35 % of the solves while other processes kept the
    GPU busy (contexts time-sliced), in none in a process alone; it took graph_head and the set-up
    kernels before it programmatic together (either alone: none in ~1,400 solves), and
    ``launch_dependents`` (without it: none). The iterations, programmatic, gave the ordinary
    bits in 12,204 solves under the same load (tests/test_gpu_graph.py's load test). The cause
    is not found (not graph_head's edge into the WHILE node: the default one even then,
    benchmarks/pdl-graph-edges-2026-12-01.py); a set-up runs once a solve."""

    __slots__ = ("raw", "direct")

    def __init__(self, raw, direct: bool = False):
        self.raw = raw
        self.direct = direct
        function = getattr(raw, "kernel", None)        # CuPy's loaded function (stubs: none)
        if function is not None:
            _READY.add(int(function.ptr))

    def __call__(self, grid, block, args, stream=None, shared_mem=0):
        if self.direct and capturing(stream):
            self.programmatic(grid, block, args, stream, shared_mem)
        else:
            self.raw(grid, block, args, stream=stream, shared_mem=shared_mem)

    def programmatic(self, grid, block, args, stream, shared_mem=0) -> None:
        """Launch with the attribute (into a stream being captured: ``capturing(stream)``,
        which executor.Plan.run asks once a replay); arguments of a kind not handled here
        launch the ordinary way."""
        params = _kernel_params(args)
        if params is None or not _after_kernels(stream):
            self.raw(grid, block, args, stream=stream, shared_mem=shared_mem)
        else:
            _launch(self.raw, grid, block, params, stream, shared_mem)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def _after_kernels(stream) -> bool:
    """Whether every node the capture of ``stream`` now depends on is a kernel that starts with
    DPS_PDL (one of :data:`_READY`). After anything else the launch goes the ordinary way: a copy
    or a memset (griddepcontrol.wait waits for kernels only), the start of a conditional body (no
    node), or a kernel of CuPy's or of another source (which never lets the next one start early:
    nothing to gain, and one rule fewer to trust)."""
    from cuda.bindings import driver as cu
    res = cu.cuStreamGetCaptureInfo(cu.CUstream(stream.ptr))
    if res[0] != cu.CUresult.CUDA_SUCCESS:
        return False
    deps = next((v for v in res[1:] if isinstance(v, (list, tuple))), None)
    if not deps:
        return False
    kernel = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    for node in deps:
        err, kind = cu.cuGraphNodeGetType(node)
        if err != cu.CUresult.CUDA_SUCCESS or kind != kernel:
            return False
        err, params = cu.cuGraphKernelNodeGetParams(node)
        if err != cu.CUresult.CUDA_SUCCESS or int(params.func) not in _READY:
            return False
    return True


def _kernel_params(args):
    """(ctypes values, the void* array of their addresses) of a launch's arguments, or None where
    one is of a kind not handled here (that launch goes the ordinary way)."""
    import cupy
    values = []
    for a in args:
        if isinstance(a, cupy.ndarray):
            values.append(ctypes.c_void_p(a.data.ptr))
        elif isinstance(a, np.uint64):                   # ops._NULL, a graph's handle
            values.append(ctypes.c_void_p(int(a) or None))
        elif isinstance(a, np.int32):
            values.append(ctypes.c_int32(int(a)))
        elif isinstance(a, np.int64):
            values.append(ctypes.c_int64(int(a)))
        elif isinstance(a, np.float32):
            values.append(ctypes.c_float(float(a)))
        elif isinstance(a, np.float64):
            values.append(ctypes.c_double(float(a)))
        else:
            return None
    array = (ctypes.c_void_p * max(len(values), 1))(
        *[ctypes.addressof(v) for v in values])
    return values, array


def _launch(raw, grid, block, params, stream, shared_mem) -> None:
    from cuda.bindings import driver as cu
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = int(grid[0]), 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = int(block[0]), 1, 1
    cfg.sharedMemBytes = int(shared_mem)
    cfg.hStream = cu.CUstream(stream.ptr)
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    _values, array = params
    err, = cu.cuLaunchKernelEx(cfg, cu.CUfunction(raw.kernel.ptr), ctypes.addressof(array), 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent launch) failed: {err}")
