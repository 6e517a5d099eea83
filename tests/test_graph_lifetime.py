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
