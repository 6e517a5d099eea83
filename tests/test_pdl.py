"""dpsolve/cuda/pdl.py on the CPU: which launches go with programmatic dependent launch. A
stub stream and stub kernels stand for CuPy's; the GPU tests (test_gpu_graph, test_gpu_precond)
check the bits of real launches."""
import types

import pytest

from dpsolve.cuda import executor, pdl


class _Stream:
    def __init__(self, capturing):
        self.capturing = capturing

    def is_capturing(self):
        return self.capturing


@pytest.fixture
def calls(monkeypatch):
    got = []
    monkeypatch.setattr(pdl, "_launch", lambda raw, *a: got.append(("programmatic", raw)))
    monkeypatch.setattr(pdl, "_kernel_params", lambda args: None if "odd" in args else ((), ()))
    monkeypatch.setattr(pdl, "_after_kernels", lambda stream: not getattr(stream, "after_copy",
                                                                            False))
    return got


def _raw(name, got):
    return lambda grid, block, args, stream=None, shared_mem=0: got.append(("ordinary", name))


@pytest.mark.parametrize("capturing, enabled, expected", [
    (True, True, "programmatic"), (False, True, "ordinary"), (True, False, "ordinary")])
def test_a_kernel_goes_programmatic_only_into_a_capture(calls, monkeypatch, capturing, enabled,
                                                        expected):
    monkeypatch.setattr(pdl, "ENABLED", enabled)
    k = pdl.Kernel(_raw("k", calls), direct=True)
    k((1,), (32,), (), stream=_Stream(capturing))
    k((1,), (32,), ())                                   # no stream: the ordinary way
    assert [c[0] for c in calls] == [expected, "ordinary"]


def test_a_krylov_kernel_called_on_its_own_goes_the_ordinary_way(calls):
    """Only a replayed plan launches get_kernel's kernels programmatically (their set-up's
    launches, captured too, go the ordinary way: pdl.Kernel's docstring says why)."""
    pdl.Kernel(_raw("k", calls))((1,), (32,), (), stream=_Stream(True))
    assert calls == [("ordinary", "k")]


def test_arguments_it_cannot_pass_go_the_ordinary_way(calls):
    k = pdl.Kernel(_raw("k", calls), direct=True)
    k((1,), (32,), ("odd",), stream=_Stream(True))
    assert calls == [("ordinary", "k")]


def test_after_a_copy_or_at_a_body_start_it_goes_the_ordinary_way(calls):
    """griddepcontrol.wait waits for kernels only: where the capture's last node is not one
    (pdl._after_kernels), the launch keeps the ordinary full dependency."""
    stream = _Stream(True)
    stream.after_copy = True
    pdl.Kernel(_raw("k", calls), direct=True)((1,), (32,), (), stream=stream)
    assert calls == [("ordinary", "k")]


def test_a_replayed_plan_asks_the_stream_once_and_wraps_only_pdl_kernels(calls, monkeypatch):
    asked = []
    stream = _Stream(True)
    monkeypatch.setattr(stream, "is_capturing", lambda: asked.append(1) or True)
    plain = _raw("plain", calls)
    plan = executor.Plan()
    plan.launches += [(pdl.Kernel(_raw("a", calls)), (1,), (32,), (), 0),
                      (plain, (1,), (32,), (), 0),
                      (pdl.Kernel(_raw("b", calls)), (1,), (32,), (), 0)]
    plan.run(stream)
    assert len(asked) == 1
    assert [c[0] for c in calls] == ["programmatic", "ordinary", "programmatic"]
    calls.clear()
    plan.run(_Stream(False))
    assert calls == [("ordinary", "a"), ("ordinary", "plain"), ("ordinary", "b")]


def test_other_attributes_are_the_cupy_kernels():
    raw = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=7), max_threads_per_block=256)
    k = pdl.Kernel(raw)
    assert k.kernel.ptr == 7 and k.max_threads_per_block == 256 and k.raw is raw


def test_the_sources_are_registered():
    from dpsolve.cuda import _loader
    assert pdl.SOURCES <= set(_loader.SOURCES)



def test_get_kernel_wraps_the_kernels_that_start_with_the_wait():
    """pdl.wrap (get_kernel's): every kernel of pdl.SOURCES as a Kernel that goes programmatic
    only in a replayed plan, amg.cu's vc_* kernels (whichever module holds them) as direct
    Kernels, and every other kernel as it is (amg.cu's set-up kernels among them)."""
    from dpsolve.cuda import _loader
    raw = object()
    k = pdl.wrap(raw, "spmv", "spmv.cu", "spmv_ell<{T}>")
    assert type(k) is pdl.Kernel and k.raw is raw and not k.direct
    for expression in ("vc_dense<{T}>", "vc_to_single<{T}>"):
        name = _loader.amg_source(expression)
        k = pdl.wrap(raw, name, _loader.SOURCES[name].file, expression)
        assert type(k) is pdl.Kernel and k.direct, expression
    for name, expression in (("amg_vc", "sell_fill<{T}>"), ("spgemm", "spgemm_bound<{T}>")):
        assert pdl.wrap(raw, name, _loader.SOURCES[name].file, expression) is raw
