"""The set-up of a GPU solve, at the cost of a launch rather than of a chain of round trips.

What a call needs before its first iteration -- the matrix on the device and checked, ``||b||``,
``x0`` checked -- is queued on one stream and read back with **one** host wait:

* host arrays (a SciPy matrix, NumPy ``b`` and ``x0``) are copied to the device through pinned
  staging: small ones packed into one buffer and one copy, large ones in chunks, so that the host
  copy of one chunk overlaps the DMA of the previous one; large NumPy results come back by one
  DMA into pinned blocks that are recycled once the caller drops them (``PinnedResults``);
* a CSR matrix is checked by one kernel (``check.cu``'s ``csr_check``): row pointers, column
  ranges, sorted and duplicate-free rows, finite values, and its longest row (the format choice
  and ELL's width need it) -- instead of a chain of NumPy or CuPy reductions, each with its sync;
* ``||b||^2`` and ``||x0||^2`` by blas1's two-stage DOT; a non-finite result means NaN or Inf in
  the vector, or squares that overflow (entries near 1e+154 in float64): the rare slow path tells
  which. A sum outside the safe range (over- or underflowed squares) has the front end solve
  for b scaled by a power of two (``_system.scale_rhs``), again on the rare path only.

Per thread and device, the stream, the events, the pinned buffers and the scratch area are made
once and reused by every call (``resources()``); a prepared system has its own, taken from those a
dropped system left where there are any (``system_resources()``).
"""
from __future__ import annotations

import collections
import contextlib
import threading

import numpy as np

from ._errors import FormatError
from .cuda import abi

# csr_check's bits (abi.cuh's DPS_CHECK_*)
CHECK_INDPTR, CHECK_COLUMN, CHECK_UNSORTED, CHECK_NONFINITE, CHECK_ENDS = (
    abi.DPS_CHECK_INDPTR, abi.DPS_CHECK_COLUMN, abi.DPS_CHECK_UNSORTED, abi.DPS_CHECK_NONFINITE,
    abi.DPS_CHECK_ENDS)
INDEX_MAX = np.iinfo(np.int32).max
PACK_MAX = 4 << 20           # host arrays up to this many bytes in all go in one packed copy
CHUNK = 16 << 20             # larger ones move in chunks of this size, two pinned buffers
ALIGN = 256                  # byte alignment of each array inside a packed upload
SLOT = 16                    # bytes per readback slot (one complex128)
SLOTS = 8


class Resources:
    """One thread's long-lived CUDA objects on one device."""

    def __init__(self):
        import cupy
        self.device = cupy.cuda.runtime.getDevice()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        # host waits: a plain event (polling) and one made with cudaEventBlockingSync (blocking)
        self.wait_events = {"polling": cupy.cuda.Event(block=False, disable_timing=True),
                            "blocking": cupy.cuda.Event(block=True, disable_timing=True)}
        self.t_start, self.t_end = cupy.cuda.Event(), cupy.cuda.Event()
        self.caller_event = cupy.cuda.Event(disable_timing=True)
        self.return_event = cupy.cuda.Event(disable_timing=True)
        # readback: SLOTS slots of SLOT bytes on the device and in pinned host memory
        self.scratch = cupy.zeros(SLOTS * SLOT // 8, np.float64)
        self.scratch_mem = cupy.cuda.alloc_pinned_memory(SLOTS * SLOT)
        self.scratch_host = np.frombuffer(self.scratch_mem, np.uint8, SLOTS * SLOT)
        self._partials = {}
        self._slots = {}
        self._stage = None                       # pinned staging buffers, grown on demand
        self._stage_size = 0
        self.stage_done = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]

    def partials(self, dtype):
        """A DOT partials buffer of ``dtype`` (ops.DOT_MAX_PARTIALS values)."""
        from .cuda import ops
        dt = np.dtype(dtype)
        p = self._partials.get(dt)
        if p is None:
            import cupy
            p = self._partials[dt] = cupy.zeros(ops.DOT_MAX_PARTIALS, dt)
        return p

    def slot(self, k: int, dtype):
        """Device readback slot k, as a 1-element array of ``dtype`` (views made once)."""
        key = (k, np.dtype(dtype))
        v = self._slots.get(key)
        if v is None:
            v = self._slots[key] = self.scratch.view(np.uint8)[k * SLOT:(k + 1) * SLOT].view(
                dtype)[:1]
        return v

    def staging(self, nbytes: int):
        """Two pinned host buffers of at least ``nbytes`` each (reused; grown when too small)."""
        if self._stage_size < nbytes:
            import cupy
            size = max(nbytes, 1 << 20)
            for ev in self.stage_done:           # the old buffers may still be read by a DMA
                ev.synchronize()
            self._stage = [cupy.cuda.alloc_pinned_memory(size) for _ in range(2)]
            self._stage_size = size
        return self._stage


class _Local(threading.local):
    def __init__(self):
        self.by_device = {}
        self.override = None


_local = _Local()


def resources() -> Resources:
    """This thread's Resources for the current device (made on first use), or those ``using``
    put in place."""
    import cupy
    dev = cupy.cuda.runtime.getDevice()
    r = _local.override
    if r is not None and r.device == dev:
        return r
    r = _local.by_device.get(dev)
    if r is None:
        with cupy.cuda.Device(dev):
            r = _local.by_device[dev] = Resources()
    return r


# Resources that dropped prepared systems left, a deque a device, for the next system. CuPy's
# memory pool keeps a freed block for the stream that allocated it, and a prepared system
# allocates on its own stream: on a new stream a system could not use a dropped one's blocks, so
# each prepare went to cudaMalloc for all its memory and the pool grew by a whole system, never
# used again until an allocation failed (2-D 1024^2 with AMG: 36 cudaMalloc, +695 MiB a prepare;
# BENCHMARKS.md, 2026-12-02). At most SPARE_MAX are kept; older ones release their streams' free
# blocks to the driver when the next system is made (``_flush``).
_spare: dict = {}
SPARE_MAX = 4
RECYCLE = True                 # False: a new Resources for every prepared system (the A/B's switch)


def system_resources() -> Resources:
    """Resources for a new prepared system: the last that a dropped system left on this device
    (its stream's cached blocks serve the new system), else new ones."""
    import cupy
    dev = cupy.cuda.runtime.getDevice()
    q = _spare.setdefault(dev, collections.deque())
    while len(q) > SPARE_MAX:
        try:
            _flush(q.popleft())
        except IndexError:                  # another thread took it
            break
    try:
        return q.pop() if RECYCLE else Resources()
    except IndexError:
        return Resources()


def spare(res: Resources) -> None:
    """A dropped prepared system's Resources, for the next system (its finalizer: no CUDA call,
    no lock; deque.append is atomic)."""
    _spare.setdefault(res.device, collections.deque()).append(res)


def _flush(res: Resources) -> None:
    """Release the free blocks CuPy's pool keeps for ``res``'s stream (its owner is gone)."""
    import cupy
    with cupy.cuda.Device(res.device):
        res.stream.synchronize()
        cupy.get_default_memory_pool().free_all_blocks(stream=res.stream)


@contextlib.contextmanager
def using(res: Resources):
    """Run the block with ``res`` as this thread's Resources: a prepared system keeps its own
    (its stream, events and buffers), so that whichever thread solves with it -- one at a time,
    under its lock -- orders every step on the stream its state was built on."""
    prev, _local.override = _local.override, res
    try:
        yield res
    finally:
        _local.override = prev


def follow_caller(stream, res: Resources | None = None) -> None:
    """Order ``stream`` after the work the caller queued on its current stream (CuPy's current
    stream, the legacy default one unless the caller chose another): the caller's CuPy arrays may
    still be in flight there (a copy from pageable memory returns before its DMA lands), and
    dpsolve's stream is non-blocking, so nothing else orders the two. One event, no host wait."""
    import cupy
    ev = (res or resources()).caller_event
    ev.record(cupy.cuda.get_current_stream())
    stream.wait_event(ev)


def hand_to_caller(stream, res: Resources | None = None) -> None:
    """Order the caller's current stream after ``stream`` (``follow_caller``'s converse): an
    array dpsolve finished there and returns without a host wait after it (x multiplied back to
    b's scale) is complete before anything the caller queues next reads it. dpsolve's stream is
    non-blocking: without this the caller's ``x.get()`` on the legacy default stream could copy
    x before its last kernel wrote it. One event, no host wait."""
    import cupy
    ev = (res or resources()).return_event
    ev.record(stream)
    cupy.cuda.get_current_stream().wait_event(ev)


def wait(stream, sync: str = "polling", res: Resources | None = None) -> None:
    """Wait for ``stream`` as the sync mode says: spinning ("polling") or asleep ("blocking")."""
    ev = (res or resources()).wait_events[sync]
    ev.record(stream)
    ev.synchronize()


# --------------------------------------------------------------------------- uploads
def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def upload(arrays, stream, res: Resources | None = None) -> list:
    """Copy host arrays to the device on ``stream``; returns CuPy arrays (None stays None).

    Up to PACK_MAX bytes in all: packed into one pinned buffer and moved by one copy into one
    device allocation (the arrays are views of it). Larger arrays: each moved in CHUNK-byte pieces
    through two pinned buffers, the host copy of a piece overlapping the DMA of the one before.
    The arrays are only read. The copies are queued; a later wait on ``stream`` completes them.
    """
    import cupy
    res = res or resources()
    hosts = [None if a is None else np.ascontiguousarray(a) for a in arrays]
    small = [h for h in hosts if h is not None and h.nbytes <= PACK_MAX]
    total = sum(_aligned(h.nbytes) for h in small)
    out = {}
    if small and total <= PACK_MAX:
        bufs = res.staging(total)
        res.stage_done[0].synchronize()          # the previous user of buffer 0 is done
        host = np.frombuffer(bufs[0], np.uint8, total)
        dev = cupy.empty(total, np.uint8)
        off = 0
        for h in small:
            host[off:off + h.nbytes] = h.reshape(-1).view(np.uint8)
            out[id(h)] = (off, h)
            off += _aligned(h.nbytes)
        cupy.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, total,
                                      cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
        res.stage_done[0].record(stream)
        views = {k: dev[o:o + h.nbytes].view(h.dtype).reshape(h.shape) for k, (o, h) in out.items()}
    else:
        views = {}
    result = []
    for h in hosts:
        if h is None:
            result.append(None)
        elif id(h) in views:
            result.append(views[id(h)])
        else:
            result.append(_upload_chunked(h, stream, res))
    return result


_POOL = None
COPY_THREADS = 4             # host threads filling a pinned chunk (NumPy copies release the GIL)


def _copy_into(dst, src) -> None:
    """dst[:] = src, split over COPY_THREADS threads for large pieces."""
    global _POOL
    n = src.nbytes
    if n < (4 << 20) or COPY_THREADS <= 1:
        dst[:] = src
        return
    if _POOL is None:
        import concurrent.futures
        _POOL = concurrent.futures.ThreadPoolExecutor(COPY_THREADS, "dpsolve-upload")
    step = -(-n // COPY_THREADS)
    futures = [_POOL.submit(np.copyto, dst[i:i + step], src[i:i + step])
               for i in range(0, n, step)]
    for f in futures:
        f.result()


def upload_into(dev, h, stream, res: Resources | None = None) -> None:
    """Copy the contiguous host array ``h`` into the contiguous device array ``dev`` (the same
    number of bytes) on ``stream``, through the pinned staging buffers: queued, as ``upload``."""
    if dev.nbytes != h.nbytes:
        raise ValueError(f"upload_into: {h.nbytes} bytes into {dev.nbytes}")
    _upload_chunked(np.ascontiguousarray(h), stream, res or resources(), dev)


def _upload_chunked(h, stream, res: Resources, dev=None):
    import cupy
    if dev is None:
        dev = cupy.empty(h.shape, h.dtype)
    src = h.reshape(-1).view(np.uint8)
    bufs = res.staging(min(CHUNK, src.nbytes))
    size = min(CHUNK, res._stage_size)
    k = 0
    for off in range(0, src.nbytes, size):
        piece = src[off:off + size]
        i = k % 2
        res.stage_done[i].synchronize()          # its previous DMA has read it
        stage = np.frombuffer(bufs[i], np.uint8, piece.nbytes)
        _copy_into(stage, piece)
        cupy.cuda.runtime.memcpyAsync(dev.data.ptr + off, stage.ctypes.data, piece.nbytes,
                                      cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
        res.stage_done[i].record(stream)
        k += 1
    return dev


PINNED_RESULTS_MAX = 1 << 30  # bytes of pinned result blocks dpsolve holds, handed out or free
PINNED_LIVE_MAX = 2           # blocks of one size handed out at once, at most


class PinnedResults:
    """Pinned host blocks for large NumPy results, recycled (``download``).

    A DMA straight into a pinned block moves 32 MB in 0.6 ms on the H200 machines; copying it out
    of a staging buffer into fresh NumPy memory takes ~4 ms, most of it the first touch of the
    fresh pages (the kernel's page faults and zeroing). Pinning a new block costs more still
    (~14 ms for 32 MB), so it pays only when the block comes back: a result handed out here is a
    NumPy array over a block, and when the last array or view over it is gone the block returns
    to a free list for the next result of that size. So a size's first result takes the staged
    path (a one-off call pins nothing); its second and third are pinned, and a loop of
    ``x = solve(b)`` reuses those two blocks from its fourth call on. No more than
    PINNED_LIVE_MAX blocks of a size are pinned while all are in the caller's hands (results it
    keeps, in a list say, take the staged path then), and at most PINNED_RESULTS_MAX bytes are
    held in all (past it, free blocks of other sizes are released first). Thread-safe."""

    def __init__(self, limit: int = PINNED_RESULTS_MAX, live_max: int = PINNED_LIVE_MAX):
        self.limit, self.live_max = limit, live_max
        self.lock = threading.Lock()
        self.free = {}                  # nbytes -> free blocks (cupy PinnedMemory)
        self.live = {}                  # nbytes -> blocks handed out, not yet back
        self.held = 0                   # bytes of blocks handed out or free
        self.seen = set()               # sizes asked for before
        self._types = {}                # nbytes -> the ctypes array type over a block

    def array(self, shape, dtype) -> np.ndarray | None:
        """A NumPy array of ``shape``/``dtype`` over a pinned block (contents undefined), or None
        where the staged path should serve (the size's first ask, or no room)."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with self.lock:
            blocks = self.free.get(nbytes)
            if blocks:
                mem = blocks.pop()
            else:
                if nbytes not in self.seen or nbytes > self.limit:
                    if len(self.seen) > 1024:
                        self.seen.clear()
                    self.seen.add(nbytes)
                    return None
                if self.live.get(nbytes, 0) >= self.live_max:
                    return None
                if self.held + nbytes > self.limit:
                    self._release_free()
                    if self.held + nbytes > self.limit:
                        return None
                mem = None
                self.held += nbytes
            self.live[nbytes] = self.live.get(nbytes, 0) + 1
        if mem is None:
            mem = self._pin(nbytes)
            if mem is None:
                return None
        return np.frombuffer(self._holder(nbytes, mem), dtype).reshape(shape)

    def _pin(self, nbytes):
        import cupy
        try:                            # portable: a pinned block for every device's DMA
            return cupy.cuda.PinnedMemory(nbytes, getattr(cupy.cuda.runtime,
                                                          "hostAllocPortable", 1))
        except (cupy.cuda.runtime.CUDARuntimeError, MemoryError):
            with self.lock:
                self.held -= nbytes
                self.live[nbytes] -= 1
            return None

    def _holder(self, nbytes, mem):
        """A ctypes array over ``mem`` that keeps it alive: NumPy's arrays and views over it all
        name it as their base, so it dies with the last of them, and then ``mem`` goes back."""
        import ctypes
        import weakref
        kind = self._types.get(nbytes)
        if kind is None:
            if len(self._types) > 64:
                self._types.clear()
            kind = self._types[nbytes] = type("PinnedBlock", (ctypes.c_char * nbytes,), {})
        holder = kind.from_address(mem.ptr)
        holder.mem = mem
        weakref.finalize(holder, self._back, nbytes, mem)
        return holder

    @staticmethod
    def owns(a) -> bool:
        """Whether the NumPy array ``a`` (or the array it views) lies in one of these blocks."""
        while isinstance(a, np.ndarray):
            a = a.base
        return type(a).__name__ == "PinnedBlock"

    def _back(self, nbytes, mem) -> None:
        with self.lock:
            self.live[nbytes] -= 1
            self.free.setdefault(nbytes, []).append(mem)

    def _release_free(self) -> None:
        """Drop every free block (under the lock): cudaFreeHost when its last reference goes."""
        for size, blocks in self.free.items():
            self.held -= size * len(blocks)
        self.free.clear()


pinned_results = PinnedResults()


def queue_download(v, stream, res: Resources | None = None):
    """Queue the contiguous device array ``v``'s copy to the host on ``stream`` ahead of the wait
    that ends a call, so that one wait covers both; returns ``finish()``, to call after that
    wait, which gives the NumPy copy. PACK_MAX bytes or fewer: into staging buffer 1, copied out
    by ``finish``; larger: into a recycled pinned result block (``pinned_results``), or, where
    there is none, the staged copy in ``finish``."""
    import cupy
    rt = cupy.cuda.runtime
    res = res or resources()
    if v.nbytes <= PACK_MAX:
        buf = res.staging(v.nbytes)[1]
        res.stage_done[1].synchronize()          # an upload's DMA may still read buffer 1
        rt.memcpyAsync(buf.ptr, v.data.ptr, v.nbytes, rt.memcpyDeviceToHost, stream.ptr)
        res.stage_done[1].record(stream)
        return lambda: np.frombuffer(buf, v.dtype, v.size).reshape(v.shape).copy()
    out = _queue_pinned(v, stream)
    if out is None:                              # (not ``download``: it would ask again)
        return lambda: _download_staged(v, stream, res)
    return lambda: out


def _queue_pinned(v, stream) -> np.ndarray | None:
    """``v``'s copy queued on ``stream`` into a recycled pinned result block: the NumPy array
    over the block (complete after a wait on ``stream``), or None where ``pinned_results`` has
    none to give."""
    import cupy
    out = pinned_results.array(v.shape, v.dtype)
    if out is not None:
        cupy.cuda.runtime.memcpyAsync(out.ctypes.data, v.data.ptr, v.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
    return out


def download(v, stream=None, res: Resources | None = None) -> np.ndarray:
    """A NumPy copy of the device array ``v``, after the work queued on ``stream`` (default: the
    current one). Contiguous arrays over PACK_MAX bytes: by one DMA into a recycled pinned block
    where ``pinned_results`` has one (a NumPy array over it); else in CHUNK-byte pieces through
    the two pinned staging buffers, the host copy out of one piece overlapping the DMA of the next
    (a pageable copy, CuPy's ``get``, moved 3.6 GB/s on the H200 machines). Others by ``get``."""
    import cupy
    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    if v.nbytes <= PACK_MAX or not v.flags.c_contiguous:
        return v.get(stream=stream)
    out = _queue_pinned(v, stream)
    if out is not None:
        stream.synchronize()
        return out
    return _download_staged(v, stream, res or resources())


def _download_staged(v, stream, res: Resources) -> np.ndarray:
    """``download``'s staged path: a contiguous ``v`` over PACK_MAX bytes into fresh NumPy
    memory through the two pinned staging buffers."""
    import cupy
    out = np.empty(v.shape, v.dtype)
    dst = out.reshape(-1).view(np.uint8)
    bufs = res.staging(min(CHUNK, v.nbytes))
    size = min(CHUNK, res._stage_size)
    pending = None                               # (buffer, offset, bytes) of the piece in flight

    def land(i, off, n):
        res.stage_done[i].synchronize()          # its DMA is done
        _copy_into(dst[off:off + n], np.frombuffer(bufs[i], np.uint8, n))

    for k, off in enumerate(range(0, v.nbytes, size)):
        n, i = min(size, v.nbytes - off), k % 2
        res.stage_done[i].synchronize()          # an upload's DMA may still read buffer i
        cupy.cuda.runtime.memcpyAsync(bufs[i].ptr, v.data.ptr + off, n,
                                      cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        res.stage_done[i].record(stream)
        if pending is not None:
            land(*pending)                       # the piece before, while this one moves
        pending = (i, off, n)
    land(*pending)
    return out


# --------------------------------------------------------------------------- checks
class Readback:
    """Queue results into the readback slots; ``fetch()`` copies them all and waits once."""

    def __init__(self, stream, res: Resources | None = None):
        self.res = res or resources()
        self.stream = stream
        self.used = 0

    def take(self, dtype):
        """A fresh device slot of ``dtype`` (its index and the 1-element array)."""
        k = self.used
        if k >= SLOTS:
            raise RuntimeError("too many readback slots in one set-up")
        self.used += 1
        return k, self.res.slot(k, dtype)

    def fetch(self, sync="polling"):
        import cupy
        nbytes = self.used * SLOT
        if nbytes:
            cupy.cuda.runtime.memcpyAsync(self.res.scratch_host.ctypes.data,
                                          self.res.scratch.data.ptr, nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        wait(self.stream, sync, self.res)
        return self

    def value(self, k: int, dtype):
        return self.res.scratch_host[k * SLOT:(k + 1) * SLOT].view(dtype)[0]


def csr_check_queue(indptr, indices, data, n: int, out):
    """A function of a stream that queues csr_check over these device arrays into ``out`` (four
    int32 words, zeroed first: the DPS_CHECK_* flags, the longest row, and the values' largest
    and smallest binary exponents, biased: ``check_result``), its kernel and arguments bound
    once (a set-up's check; the default call's lane queues one every call)."""
    from .cuda import ops
    from .cuda._loader import get_kernel
    import cupy
    idx_t = "long long" if indices.dtype == np.int64 else "int"
    kern = get_kernel("check", f"csr_check<{{T}}, {idx_t}>", data.dtype)
    grid, block = (ops.grid_for(max(n, 1)),), (ops.BLOCK,)
    args = (np.int32(n), np.int64(data.shape[0]), indptr, indices, data, out)
    memset, ptr = cupy.cuda.runtime.memsetAsync, out.data.ptr

    def queue(stream):
        memset(ptr, 0, 16, stream.ptr)
        ops.launch(kern, grid, block, args, stream)
    return queue


def queue_csr_check(indptr, indices, data, n: int, rb: Readback) -> int:
    """Queue csr_check over device arrays; returns the readback slot of its four words."""
    k, ints = rb.take(np.int32)                  # the slot's 16 bytes: 4 ints
    csr_check_queue(indptr, indices, data, n, ints)(rb.stream)
    return k


def check_result(rb: Readback, k: int) -> tuple[int, int, tuple[int, int] | None]:
    """(flags, longest row, exponents) of a csr_check: exponents the (largest, smallest)
    binary exponent of the nonzero values' components (``_system.value_exponents``' form), None
    where every value is zero."""
    flags, longest, hi, lo = rb.res.scratch_host[k * SLOT:k * SLOT + 16].view(np.int32)
    exps = None if hi == 0 else (int(hi) - abi.DPS_EXP_BIAS, abi.DPS_EXP_BIAS - int(lo))
    return int(flags), int(longest), exps


def raise_for_flags(flags: int, n: int, nnz: int) -> None:
    """The error csr_check's flags call for (non-finite values and unsorted rows excepted: the
    caller reports the first and repairs the second)."""
    if flags & CHECK_ENDS:
        raise FormatError(f"CSR indptr must run from 0 to nnz={nnz}")
    if flags & CHECK_INDPTR:
        raise FormatError("CSR indptr is not non-decreasing (or points outside the "
                          f"{nnz} stored entries)")
    if flags & CHECK_COLUMN:
        raise FormatError(f"CSR column index out of range [0, {n})")


def queue_norm2(v, rb: Readback) -> int:
    """Queue ||v||^2 (blas1's two-stage DOT) into a readback slot; returns the slot."""
    from .cuda import ops
    k, slot = rb.take(v.dtype)
    ops.dot(v, v, slot, rb.res.partials(v.dtype), rb.stream)
    return k


def square_sum(rb: Readback, k: int, v, what: str, given=None) -> float:
    """||v||^2 from its slot, as the working dtype summed it. A non-finite sum is NaN/Inf in
    ``v`` (ValueError naming ``what``; ``given``: v before its cast to the working dtype, which
    tells a caller's NaN / Inf from a value past the dtype's largest) or squares that overflow
    (the caller then scales: see ``_system.in_safe_range``)."""
    sq = float(np.real(rb.value(k, v.dtype)))
    if not np.isfinite(sq):
        from ._system import _not_finite
        from .cuda import ops
        with rb.stream:
            if not ops.all_finite(v):
                raise ValueError(_not_finite(v if given is None else given, v.dtype, what))
    return sq


def scaled_norm(v, stream) -> float:
    """||v|| of a device vector whose squares under- or overflow (``_system.scaled_norm``, on
    ``stream``). The rare path behind a sum of squares outside the safe range."""
    import cupy
    from ._system import scaled_norm as scaled
    with stream:
        return scaled(v, cupy)


def host_part(v):
    """``v`` flattened when it is a host array (to upload), else None (a CuPy array, or None)."""
    from .formats.csr import _is_cupy
    return None if v is None or _is_cupy(v) else v.ravel()


class PendingVectors:
    """b and x0 (either may be None) on the device in ``dtype`` with ||b||^2 and ||x0||^2
    queued; ``finish()`` (after the readback) checks them and returns ||b||^2.

    ``up_b`` / ``up_x``: their uploads where they were host arrays (``host_part``), else None
    and the caller's CuPy arrays are used. Nothing is copied: from here on b and x0 are only
    read (a back end's state copies b in, ``initial_x`` copies x0), so the caller's arrays are
    never touched."""

    def __init__(self, b, x0, up_b, up_x, dtype, rb: Readback):
        self.rb = rb
        # b and x0 as given (uploaded), kept for the error's words until finish()
        self.given_b = None if b is None else (up_b if up_b is not None else b.ravel())
        self.given_x = None if x0 is None else (up_x if up_x is not None else x0.ravel())
        with rb.stream:
            self.b = None if b is None else self.given_b.astype(dtype, copy=False)
            self.x0 = None if x0 is None else self.given_x.astype(dtype, copy=False)
            self.kb = queue_norm2(self.b, rb) if self.b is not None else None
            self.kx = queue_norm2(self.x0, rb) if self.x0 is not None else None

    def finish(self):
        """||b||^2 as summed (None without b); NaN or Inf in b, then in x0, raise ValueError
        naming it."""
        sq = (square_sum(self.rb, self.kb, self.b, "b", self.given_b) if self.kb is not None
              else None)
        if self.kx is not None:
            square_sum(self.rb, self.kx, self.x0, "x0", self.given_x)
        self.given_b = self.given_x = None
        return sq


# --------------------------------------------------------------------------- matrices
def matrix_arrays(A):
    """(indptr, indices, data, n) of ``A`` as CSR arrays where A lives, without copying what is
    already CSR: a SciPy or cupyx CSR gives its own arrays (only read), other sparse formats and
    dense arrays are converted (COO and CSC sum their duplicates on the way). Other formats' index
    arrays are checked before the conversion reads them (``formats.validate``); a CSR's, in its
    own dtype, by csr_check."""
    from .formats.csr import _is_cupy
    from .formats.validate import check_indices
    if _is_cupy(A):
        import cupy
        import cupyx.scipy.sparse as csp
        if csp.issparse(A):
            check_indices(A, compressed=False)      # before tocsr reads them; a CSR: csr_check
            m = A if A.format == "csr" else A.tocsr()
        else:
            m = csp.csr_matrix(cupy.asarray(A))
        return m.indptr, m.indices, m.data, int(m.shape[0])
    import scipy.sparse as sp
    if sp.issparse(A):
        check_indices(A, compressed=False)
        m = A if A.format == "csr" else A.tocsr()
    else:
        m = sp.csr_array(np.asarray(A))
    nnz = int(m.indptr[-1]) if m.indptr.size else 0      # SciPy ignores entries past indptr[-1]
    return m.indptr, m.indices[:nnz], m.data[:nnz], int(m.shape[0])


def _index_types(indptr, indices):
    """Both index arrays in one type csr_check reads: int32, or int64 when either is wider."""
    wide = np.int64 if np.int64 in (indptr.dtype, indices.dtype) or indptr.dtype.itemsize > 4 \
        or indices.dtype.itemsize > 4 else np.int32
    return indptr.astype(wide, copy=False), indices.astype(wide, copy=False)


class PendingCSR:
    """A device CSR whose one-pass check is queued; ``finish()`` (after the readback) returns the
    checked CSR or raises the error that names the problem.

    ``copy``: the result never shares memory with the caller's arrays (a prepared system keeps a
    snapshot); otherwise a caller's cupyx CSR that is already valid is used as it is."""

    def __init__(self, indptr, indices, data, n, dtype, rb: Readback, copy: bool):
        if n > INDEX_MAX or data.shape[0] > INDEX_MAX:
            raise FormatError(f"matrix too large for 32-bit indices (n={n}, "
                              f"nnz={data.shape[0]})")
        self.n, self.dtype, self.rb = n, np.dtype(dtype), rb
        with rb.stream:
            shared = [indptr, indices, data]
            self.given = data                  # as passed: the error's words (finish)
            indptr, indices = _index_types(indptr, indices)
            data = data.astype(self.dtype, copy=False)
            if copy:          # whatever astype did not already copy
                indptr, indices, data = (a.copy() if any(a is s for s in shared) else a
                                         for a in (indptr, indices, data))
        self.indptr, self.indices, self.data = indptr, indices, data
        self.slot = queue_csr_check(indptr, indices, data, n, rb)

    def finish(self):
        """The checked CSR (int32 indices; sorted and de-duplicated in a copy where it was not),
        with its longest row known. NaN / Inf raise ValueError; a malformed CSR FormatError."""
        import cupy
        from .formats.csr import CSR, _checked
        flags, longest, exps = check_result(self.rb, self.slot)
        nnz = int(self.data.shape[0])
        raise_for_flags(flags, self.n, nnz)
        given, self.given = self.given, None
        if flags & CHECK_NONFINITE:             # a NaN / Inf, or a value past the dtype's
            from ._system import _not_finite    # largest in the cast
            with self.rb.stream:
                raise ValueError(_not_finite(given, self.dtype, "A"))
        with self.rb.stream:
            ip = self.indptr.astype(np.int32, copy=False)
            ix = self.indices.astype(np.int32, copy=False)
            if flags & CHECK_UNSORTED:       # the rare path: sum duplicates and sort, on a copy
                import cupyx.scipy.sparse as csp
                m = csp.csr_matrix((self.data.copy(), ix.copy(), ip.copy()),
                                   shape=(self.n, self.n))
                m.sum_duplicates()
                if not m.has_sorted_indices:
                    m.sort_indices()
                csr = _checked(m.indptr, m.indices, m.data, self.n, cupy)
                csr.exponents = exps or ()       # the values as passed, before the sums
                return csr
        csr = CSR(ip, ix, self.data, self.n)
        csr.max_row, csr.exponents = longest, exps or ()
        return csr
