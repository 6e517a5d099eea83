"""Probe: where a NumPy b / x's transfer time goes on this machine (32 and 128 MB): DMA alone
(pinned), host copies into fresh vs resident memory (1 and 4 threads), dpsolve's upload and
download, CuPy's, a pinned-pool-backed output, fresh memory with MADV_HUGEPAGE, hostRegister.
Then prepared AMG-PCG 160^3 with NumPy and CuPy b. Medians of 7 (min in brackets), ms."""
import cProfile
import io
import mmap
import pstats
import statistics as st
import time

import cupy as cp
import numpy as np

import dpsolve
from dpsolve import _setup
from dpsolve.matrices import laplace_3d

sync = cp.cuda.Device().synchronize
rt = cp.cuda.runtime
print("THP:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
      "| defrag:", open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip())


def timeit(name, f, reps=7, setup=None):
    ts = []
    for _ in range(reps):
        arg = setup() if setup else None
        sync()
        t = time.perf_counter()
        f(arg) if setup else f()
        ts.append((time.perf_counter() - t) * 1e3)
    print(f"{name:44s} {st.median(ts):8.3f} [{min(ts):8.3f}]", flush=True)
    return st.median(ts)


res = _setup.resources()
stream = res.stream
pool = cp.cuda.PinnedMemoryPool()
for mb in (32, 128):
    nb = mb << 20
    n = nb // 8
    print(f"--- {mb} MB")
    d = cp.random.standard_normal(n)
    h = d.get()
    pin = cp.cuda.alloc_pinned_memory(nb)
    ph = np.frombuffer(pin, np.float64, n)
    sync()

    def d2h_pinned():
        rt.memcpyAsync(ph.ctypes.data, d.data.ptr, nb, rt.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()

    def h2d_pinned():
        rt.memcpyAsync(d.data.ptr, ph.ctypes.data, nb, rt.memcpyHostToDevice, stream.ptr)
        stream.synchronize()
    timeit("DMA D2H pinned", d2h_pinned)
    timeit("DMA H2D pinned", h2d_pinned)
    resident = np.empty_like(h)
    resident[:] = 1
    timeit("host copy, resident dst, 1 thread", lambda: np.copyto(resident, h))
    timeit("host copy, resident dst, 4 threads", lambda: _setup._copy_into(resident, h))
    timeit("host copy, fresh dst, 1 thread", lambda: np.copyto(np.empty_like(h), h))
    timeit("host copy, fresh dst, 4 threads", lambda: _setup._copy_into(np.empty_like(h), h))
    timeit("np.empty + fill 0 (first touch)", lambda: np.empty_like(h).fill(0))

    def huge():
        m = mmap.mmap(-1, nb)
        m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.float64, n)
        _setup._copy_into(a, h)
        return a
    timeit("fresh mmap MADV_HUGEPAGE + copy 4 threads", huge)
    timeit("dpsolve _setup.download", lambda: _setup.download(d, stream))
    timeit("cupy get", lambda: d.get())

    def pinned_out():
        mem = pool.malloc(nb)
        a = np.frombuffer(mem, np.float64, n)
        rt.memcpyAsync(a.ctypes.data, d.data.ptr, nb, rt.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        return a
    timeit("pinned pool out (reused) + DMA", pinned_out)
    keep = [pinned_out() for _ in range(3)]
    timeit("pinned pool out, 3 held (new alloc)", lambda: keep.append(pinned_out()), reps=3)
    keep.clear()
    pool.free_all_blocks()

    def up():
        v = _setup.upload([h], stream)[0]
        stream.synchronize()
        return v
    timeit("dpsolve _setup.upload", up)
    timeit("cupy asarray (pageable)", lambda: cp.asarray(h))

    def registered():
        rt.hostRegister(h.ctypes.data, nb, 0)
        rt.memcpyAsync(d.data.ptr, h.ctypes.data, nb, rt.memcpyHostToDevice, stream.ptr)
        stream.synchronize()
        rt.hostUnregister(h.ctypes.data)
    try:
        timeit("hostRegister + DMA + unregister", registered)
    except Exception as e:
        print("hostRegister failed:", e)

    def reg_only():
        rt.hostRegister(h.ctypes.data, nb, 0)
        rt.hostUnregister(h.ctypes.data)
    try:
        timeit("hostRegister + unregister only", reg_only)
    except Exception as e:
        print("hostRegister failed:", e)

A = laplace_3d(160).tocsr()
b = A @ np.ones(A.shape[0])
bd = cp.asarray(b)
P = dpsolve.prepare(A, "cg", M="amg")
for rhs in (bd, b):
    P.solve(rhs, rtol=1e-8)
timeit("prepared AMG 160^3, CuPy b", lambda: P.solve(bd, rtol=1e-8))
timeit("prepared AMG 160^3, NumPy b", lambda: P.solve(b, rtol=1e-8))
pr = cProfile.Profile()
pr.enable()
for _ in range(5):
    P.solve(b, rtol=1e-8)
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
print(s.getvalue()[-3500:])
