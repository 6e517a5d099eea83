"""``_loader.compile_all`` on the CPU: the modules a path names compile side by side in threads,
each once, the ones already here not again, a lazy source by its one kernel, and a compile error
reaches the caller (``_module`` stubbed: no NVRTC here); ``_loader.compiling``, the same beside a
block; and the AMG set-up's list of modules."""
from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

from dpsolve.cuda import _loader


class Calls(list):
    barrier = None


@pytest.fixture
def stub(monkeypatch):
    """``_module`` recording (key, thread), a stand-in cupy on device 0, and an empty record of
    compiled modules. ``calls.barrier``, when set, makes every compile wait there for the others
    (a barrier of k parties is only passed by k compiles running at once)."""
    calls, lock = Calls(), threading.Lock()

    def module(*key):
        if key[1] == "broken":
            raise _loader.KernelCompileError("broken.cu: error")
        if calls.barrier is not None:
            calls.barrier.wait(timeout=30)
        with lock:
            calls.append((key, threading.current_thread().name))
        return types.SimpleNamespace(key=key)

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_loader, "_module", module)
    monkeypatch.setattr(_loader, "_COMPILED", set())
    monkeypatch.setattr(_loader, "_PENDING", {})
    return calls


def test_modules_compile_side_by_side_each_once(stub):
    specs = [("spmv", np.float64), ("blas1", np.float64), ("spmv", np.float64),
             ("check", np.float32), ("cg_persistent", np.float64,
                                     _loader.SOURCES["cg_persistent"].expressions[0])]
    stub.barrier = threading.Barrier(4)              # passed only by four at once
    _loader.compile_all(specs)
    stub.barrier = None
    keys = [c[0] for c in stub]
    assert len(keys) == 4 and len(set(keys)) == 4                   # spmv once
    assert {k[1] for k in keys} == {"spmv", "blas1", "check", "cg_persistent"}
    lazy = next(k for k in keys if k[1] == "cg_persistent")
    assert lazy[5] == _loader.SOURCES["cg_persistent"].expressions[0].format(T="double")
    assert all(c[1].startswith("dpsolve-nvrtc") for c in stub)       # in the pool's threads
    _loader.compile_all(specs)                                        # here already: nothing
    assert len(stub) == 4


def test_get_kernel_finds_what_compile_all_made(stub, monkeypatch):
    """get_kernel's module key is compile_all's: after compile_all, get_kernel compiles
    nothing more (its _module call is the cached one; here a stub with get_function)."""
    made = []

    def module(*key):
        made.append(key)
        return types.SimpleNamespace(get_function=lambda expr: ("kernel", expr))
    monkeypatch.setattr(_loader, "_module", module)
    monkeypatch.setattr(_loader, "_KERNELS", {})
    _loader.compile_all([("spmv", np.float32), ("blas1", np.float32)])
    assert len(made) == 2
    k = _loader.get_kernel("spmv", "spmv_ell<{T}>", np.float32)
    assert k.raw == ("kernel", "spmv_ell<float>")          # a pdl.Kernel: spmv is in pdl.SOURCES
    assert made[-1] in _loader._COMPILED and len(set(made)) == 2


def test_one_module_needs_no_thread(stub):
    _loader.compile_all([("spmv", np.float64)])
    assert len(stub) == 1 and stub[0][1] == threading.current_thread().name


def test_a_compile_error_reaches_the_caller(stub, monkeypatch):
    monkeypatch.setitem(_loader.SOURCES, "broken", _loader.Source("broken.cu", ("k<{T}>",)))
    with pytest.raises(_loader.KernelCompileError, match="broken.cu"):
        _loader.compile_all([("spmv", np.float64), ("broken", np.float64)])
    assert not any(k[1] == "broken" for k in _loader._COMPILED)


def test_a_lazy_source_needs_its_kernel(stub):
    with pytest.raises(ValueError, match="lazy"):
        _loader.compile_all([("cg_persistent", np.float64)])
    with pytest.raises(ValueError, match="registered"):
        _loader.compile_all([("cg_persistent", np.float64, "no_such<{T}>")])


def test_report_takes_each_module_and_its_error(stub, monkeypatch):
    """With report, every module the specs name is reported once in the caller's thread, the
    ones already compiled too, and a compile error is handed over, not raised."""
    monkeypatch.setitem(_loader.SOURCES, "broken", _loader.Source("broken.cu", ("k<{T}>",)))
    _loader.compile_all([("spmv", np.float64)])
    seen = []
    _loader.compile_all([("spmv", np.float64), ("broken", np.float64), ("blas1", np.float64),
                         ("blas1", np.float64)],
                        report=lambda key, e: seen.append((key[1], type(e).__name__,
                                                           threading.current_thread().name)))
    assert sorted(s[:2] for s in seen) == sorted(
        [("spmv", "NoneType"), ("broken", "KernelCompileError"), ("blas1", "NoneType")])
    assert {s[2] for s in seen} == {threading.current_thread().name}


@pytest.mark.parametrize("cooperative", [False, True])
@pytest.mark.parametrize("dtype,precision,single", [
    (np.float64, "auto", np.float32), (np.float64, "full", None),
    (np.float32, "auto", np.float32), (np.complex128, "mixed", np.complex64)])
def test_amg_setup_names_its_modules(monkeypatch, dtype, precision, single, cooperative):
    """Every spec of the AMG set-up's list is one compile_all takes (a registered source, a lazy
    one with a registered kernel), in the working, wide and single dtypes."""
    from dpsolve import _device
    from dpsolve.precond.amg import device
    monkeypatch.setattr(_device, "status",
                        lambda: types.SimpleNamespace(cooperative_launch=cooperative))
    specs = device._modules(np.dtype(dtype), precision)
    for spec in specs:
        _loader._module_key(0, *spec[:2], expression=spec[2] if len(spec) > 2 else None)
    modules = lambda name: {np.dtype(s[1]) for s in specs if s[0] == name}  # noqa: E731
    wide = np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    assert modules("amg") == {np.dtype(dtype), wide}                 # the set-up's
    assert modules("amg_vc") == {np.dtype(single if single else dtype)}    # the cycle's
    assert modules("amg_vc_low") == ({np.dtype(dtype)} if single else set())
    assert modules("spgemm") == {np.dtype(dtype), np.dtype(single if single else dtype)}
    assert any(s[0] == "amg_power" for s in specs) == cooperative


@pytest.fixture
def gate(stub, monkeypatch):
    """The stub's compiles held until ``gate.set()``: a block that passes with them held ran
    beside them (each test sets it before it ends, so no compile outlives it)."""
    opened, module = threading.Event(), _loader._module

    def held(*key):
        assert opened.wait(timeout=30)
        return module(*key)
    monkeypatch.setattr(_loader, "_module", held)
    yield opened
    opened.set()


def test_compiling_runs_beside_the_block_and_waits_at_its_end(stub, gate):
    specs = [("spmv", np.float64), ("blas1", np.float64), ("check", np.float64)]
    with _loader.compiling(specs):
        assert not stub and len(_loader._PENDING) == 3        # the block runs, they compile
        gate.set()
    assert {c[0][1] for c in stub} == {"spmv", "blas1", "check"}
    assert all(c[1].startswith("dpsolve-nvrtc") for c in stub)
    assert not _loader._PENDING and len(_loader._COMPILED) == 3
    with _loader.compiling(specs):                             # here already: nothing
        assert not _loader._PENDING
    assert len(stub) == 3


def test_a_kernel_fetched_in_the_block_waits_for_its_module(stub, gate, monkeypatch):
    """get_kernel inside the block takes the module compiling in the pool: compiled once."""
    monkeypatch.setattr(_loader, "_KERNELS", {})
    module = _loader._module
    monkeypatch.setattr(_loader, "_module", lambda *key: types.SimpleNamespace(
        module=module(*key), get_function=lambda expr: ("kernel", expr)))
    with _loader.compiling([("spmv", np.float32), ("blas1", np.float32)]):
        threading.Timer(0.2, gate.set).start()
        assert _loader.get_kernel("spmv", "spmv_ell<{T}>", np.float32).raw == (
            "kernel", "spmv_ell<float>")
    assert sorted(c[0][1] for c in stub) == ["blas1", "spmv"]


def test_compiling_raises_a_compile_error_at_the_blocks_end(stub, monkeypatch):
    monkeypatch.setitem(_loader.SOURCES, "broken", _loader.Source("broken.cu", ("k<{T}>",)))
    ran = []
    with pytest.raises(_loader.KernelCompileError, match="broken.cu"):
        with _loader.compiling([("spmv", np.float64), ("broken", np.float64)]):
            ran.append(True)
    assert ran and not _loader._PENDING
    assert [k[1] for k in _loader._COMPILED] == ["spmv"]


def test_the_blocks_own_error_is_raised_at_once(stub, gate):
    """An error of the block is raised while the compiles still run; they finish later and
    their modules are kept."""
    with pytest.raises(ZeroDivisionError):
        with _loader.compiling([("spmv", np.float64), ("blas1", np.float64)]):
            1 / 0
    assert len(_loader._PENDING) == 2 and not stub
    jobs = list(_loader._PENDING.values())
    gate.set()
    for job in jobs:
        job.result(timeout=30)
    assert {k[1] for k in _loader._COMPILED} == {"spmv", "blas1"}


def test_prefetch_returns_at_once_and_get_kernel_takes_its_module(stub, gate, monkeypatch):
    monkeypatch.setattr(_loader, "_KERNELS", {})
    module = _loader._module
    monkeypatch.setattr(_loader, "_module", lambda *key: types.SimpleNamespace(
        module=module(*key), get_function=lambda expr: ("kernel", expr)))
    _loader.prefetch([("spmv", np.float64), ("blas1", np.float64)])
    assert not stub and len(_loader._PENDING) == 2                   # compiling, not waited for
    threading.Timer(0.2, gate.set).start()
    assert _loader.get_kernel("spmv", "spmv_ell<{T}>", np.float64).raw == (
        "kernel", "spmv_ell<double>")
    for job in list(_loader._PENDING.values()):
        job.result(timeout=30)
    assert sorted(c[0][1] for c in stub) == ["blas1", "spmv"]        # each once


@pytest.mark.parametrize("a, b, dtype", [(np.float32, np.float32, np.float32),
                                         (np.float32, np.float64, np.float64),
                                         (np.int64, np.float32, np.float64),
                                         (np.complex64, np.float32, np.complex64)])
def test_the_first_call_prefetches_its_modules_in_its_dtype(monkeypatch, a, b, dtype):
    """The process's first GPU call of variant "auto" starts the checks', SpMV's and vector
    kernels' modules in the dtype the call coerces to, and the persistent variant's probe; a
    later call, or an input whose dtype cannot be read, prefetches nothing (the call itself
    then names the problem)."""
    import scipy.sparse as sp

    from dpsolve import _frontend
    from dpsolve.cuda import ops
    seen = []
    monkeypatch.setattr(_loader, "prefetch", lambda specs: seen.append(list(specs)))
    monkeypatch.setattr(_frontend, "_FIRST_CALL", [])
    A = sp.identity(4, dtype=a, format="csr")
    _frontend._prefetch_first_call(A, np.ones(4, b))
    assert seen == [[("check", np.dtype(dtype)), ("spmv", np.dtype(dtype)),
                     ("blas1", np.dtype(dtype)), ops.PROBE_SPEC]]
    for spec in seen[0]:                                  # each a spec the loader takes
        _loader._module_key(0, *spec[:2], expression=spec[2] if len(spec) > 2 else None)
    assert _frontend._FIRST_CALL
    monkeypatch.setattr(_frontend, "_FIRST_CALL", [])
    _frontend._prefetch_first_call(A, [1, 2, 3, 4])       # no dtype: left to the call
    assert len(seen) == 1 and _frontend._FIRST_CALL


def test_the_pool_takes_the_thread_count_set_before_its_compiles(stub, monkeypatch):
    """COMPILE_THREADS (``dpsolve warm --threads``) bounds the compiles at once, the pool made
    anew where it changed: 2 threads never run 3 at once; 4 pass a barrier of 4."""
    lock, running, most = threading.Lock(), [0], [0]
    module = _loader._module

    def counted(*key):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            if stub.barrier is None:
                threading.Event().wait(0.05)
            return module(*key)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(_loader, "_module", counted)
    monkeypatch.setattr(_loader, "COMPILE_THREADS", 2)
    _loader.compile_all([("spmv", np.float64), ("blas1", np.float64), ("check", np.float64),
                         ("krylov", np.float64)])
    assert most[0] == 2 and len(stub) == 4
    monkeypatch.setattr(_loader, "COMPILE_THREADS", 4)
    stub.barrier = threading.Barrier(4)                  # passed only by four at once
    _loader.compile_all([(name, np.float32) for name in ("spmv", "blas1", "check", "krylov")])
    assert most[0] == 4 and len(stub) == 8
