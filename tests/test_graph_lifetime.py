"""variant="graph" frees what it captures (CPU: CUDA's two destroy calls recorded by a stand-in
runtime). CUDA frees neither a graph nor its executable on its own: before this, a state evicted
from the cache or a solve's state not cached leaked both, and a distributed graph holding NCCL
calls kept ncclCommDestroy waiting for ever (two H200, 2026-11-30)."""
import gc

import pytest

from dpsolve.backends import graph


class _Runtime:
    def __init__(self):
        self.freed = []

    def cudaGraphExecDestroy(self, e):
        self.freed.append(("exec", e))

    def cudaGraphDestroy(self, g):
        self.freed.append(("graph", g))


@pytest.fixture
def rt(monkeypatch):
    fake = _Runtime()
    monkeypatch.setattr(graph, "_rt", lambda: fake)
    return fake


def _state():
    st = graph.GraphState.__new__(graph.GraphState)   # no GPU: only the graph's bookkeeping
    st.graph = st.exec = st._free = None
    return st


def test_a_new_capture_frees_the_one_before(rt):
    st = _state()
    st.adopt_graph("g1", "e1")
    assert rt.freed == [] and (st.graph, st.exec) == ("g1", "e1")
    st.adopt_graph("g2", "e2")
    assert rt.freed == [("exec", "e1"), ("graph", "g1")]
    st.release()
    assert rt.freed[2:] == [("exec", "e2"), ("graph", "g2")]
    assert st.graph is None and st.exec is None
    st.release()                                      # once only
    assert len(rt.freed) == 4


def test_a_dropped_state_frees_its_graph(rt):
    st = _state()
    st.adopt_graph("g", "e")
    del st
    gc.collect()
    assert rt.freed == [("exec", "e"), ("graph", "g")]


def test_a_failed_instantiation_frees_the_graph(rt, monkeypatch):
    # capture_while's last step: the captured graph is freed when CUDA refuses it
    calls = []

    class Rt(_Runtime):
        def cudaGraphInstantiate(self, g, flags):
            calls.append(g)
            return (1,)                               # cudaErrorInvalidValue

    fake = Rt()
    monkeypatch.setattr(graph, "_rt", lambda: fake)
    st = _state()
    with pytest.raises(RuntimeError, match="cudaGraphInstantiate"):
        graph._instantiate(st, "g")
    assert calls == ["g"] and fake.freed == [("graph", "g")] and st.exec is None


def _nccl_transport(log):
    """An NcclTransport without NCCL (CPU): its close's order of work recorded in ``log``."""
    import weakref
    from types import SimpleNamespace

    from dpsolve.distributed.gpu import NcclTransport
    tr = NcclTransport.__new__(NcclTransport)
    tr.comm = SimpleNamespace(destroy=lambda: log.append("ncclCommDestroy"))
    tr.stream = SimpleNamespace(synchronize=lambda: None)
    tr._holders = weakref.WeakSet()
    return tr


class _Holder:
    """A prepared system's part that NcclTransport.close touches: its cache's drop_states."""

    def __init__(self, log, name):
        self.cache = type("Cache", (), {"drop_states": lambda _: log.append(name)})()


def test_closing_an_nccl_transport_first_frees_the_prepared_systems_graphs():
    """A prepared distributed system keeps graphs that captured the communicator, and
    ncclCommDestroy waits for every such graph: the transport's close frees them first (each
    system noted by ``held_by``), and holds no system alive."""
    log = []
    tr = _nccl_transport(log)
    a, b, gone = _Holder(log, "a"), _Holder(log, "b"), _Holder(log, "gone")
    for h in (a, b, gone):
        tr.held_by(h)
    del gone, h                                 # (the loop variable held it too)
    gc.collect()
    tr.close()
    assert sorted(log[:2]) == ["a", "b"] and log[2:] == ["ncclCommDestroy"]
    tr.close()                                  # closed: nothing more
    assert len(log) == 3


def test_a_prepared_system_is_held_by_its_nccl_transport():
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    import dpsolve.distributed as dd
    log = []
    tr = _nccl_transport(log)
    A = dd.DistributedMatrix.laplace3d(3, 3, 3, MPI.COMM_SELF)
    P = dd.prepare(A, "cg", variant="cuda", transport=tr)
    assert list(tr._holders) == [P]
    tr.close()
    assert log == ["ncclCommDestroy"] and not P.cache.states
    P.close()                                   # the caller's transport: not closed again
    assert log == ["ncclCommDestroy"]
