"""A prepared system's GPU memory after it is dropped: CuPy's pool keeps a freed block for the
stream that allocated it, so the next system takes the dropped one's stream (``_setup.
system_resources``) and uses its blocks again instead of growing the pool by a whole system."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import dpsolve
from dpsolve import _setup
from dpsolve.matrices import laplace_2d

pytestmark = pytest.mark.gpu

CASES = [("graph", "amg"), ("persistent", "jacobi"), ("merge", None)]


def _problem(k=96):
    import cupy
    import cupyx.scipy.sparse as csp
    A = csp.csr_matrix(laplace_2d(k))
    b = cupy.asarray(np.random.default_rng(0).standard_normal(A.shape[0]))
    return A, b


@pytest.mark.parametrize("variant, M", CASES)
def test_a_dropped_systems_memory_serves_the_next(variant, M):
    import cupy
    pool = cupy.get_default_memory_pool()
    A, b = _problem()
    P = dpsolve.prepare(A, "cg", M=M, variant=variant)
    x1, info = P.solve(b, rtol=1e-10)
    assert info == 0
    stream = P._res.stream
    del P
    gc.collect()
    total, used = pool.total_bytes(), pool.used_bytes()
    size = None                                  # one system's bytes
    for _ in range(4):
        P = dpsolve.prepare(A, "cg", M=M, variant=variant)
        assert P._res.stream is stream           # the dropped system's stream, taken again
        x, info = P.solve(b, rtol=1e-10)
        assert info == 0
        assert cupy.array_equal(x, x1)           # the same bits on the recycled resources
        size = size or pool.used_bytes() - used
        del P
    # without the recycling the pool grew by a whole system a prepare (4 x here)
    assert size > 0
    assert pool.total_bytes() - total < size


def test_live_systems_keep_their_own_resources():
    A, b = _problem(32)
    systems = [dpsolve.prepare(A, "cg", variant="merge") for _ in range(3)]
    assert len({id(P._res) for P in systems}) == 3
    xs = [P.solve(b)[0] for P in systems]
    assert all((x == xs[0]).all() for x in xs)


def test_the_spare_resources_are_bounded():
    import cupy
    A, b = _problem(32)
    systems = [dpsolve.prepare(A, "cg", variant="merge") for _ in range(_setup.SPARE_MAX + 3)]
    for P in systems:
        P.solve(b)
    del systems, P
    gc.collect()
    dev = cupy.cuda.runtime.getDevice()
    assert len(_setup._spare[dev]) >= _setup.SPARE_MAX + 3
    Q = dpsolve.prepare(A, "cg", variant="merge")        # takes one, flushes the oldest
    assert len(_setup._spare[dev]) <= _setup.SPARE_MAX
    x, info = Q.solve(b)
    assert info == 0
