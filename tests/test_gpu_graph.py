"""variant="graph": one launch of a conditional-WHILE CUDA graph per solve, its cache of prepared
systems, and its agreement with the merge variant whose kernels it captures (GPU machines only).
The reference / SciPy agreement of every method x format x dtype runs in the shared GPU suites
(test_gpu_cg, test_gpu_krylov, test_gpu_complex, test_parity), which pick the variant up from the
registry."""
import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.backends import get_backend, variant_info
from dpsolve.matrices import laplace_2d

pytestmark = pytest.mark.gpu

METHODS = ("cg", "bicg", "bicgstab")


@pytest.fixture(autouse=True)
def _need_graph():
    info = variant_info("graph")
    if not info.available:
        pytest.skip(info.reason)


def _system(method, side=24, seed=0):
    A = laplace_2d(side)
    if method != "cg":
        A = (A + sp.diags_array([-0.4 * np.ones(side * side - 1)], offsets=[-1])
             + 0.5 * sp.eye_array(side * side)).tocsr()
    b = np.random.default_rng(seed).standard_normal(A.shape[0])
    return A, b


@pytest.mark.parametrize("M", [None, "jacobi"])
@pytest.mark.parametrize("fmt", ["csr-scalar", "csr-vector", "ell"])
@pytest.mark.parametrize("method", METHODS)
def test_same_iterates_as_merge(method, fmt, M):
    """The graph captures merge's kernels: the same iterations and (bitwise: same kernels, same
    order) the same x."""
    A, b = _system(method)
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, M=M, variant="graph", format=fmt,
                                            full_output=True)
    xm, info_m, rep_m = getattr(dpsolve, method)(A, b, rtol=1e-8, M=M, variant="merge",
                                                 format=fmt, full_output=True)
    assert info == info_m == 0 and rep.iterations == rep_m.iterations
    np.testing.assert_array_equal(x, xm)
    assert rep.host_syncs == 1 and rep.host_launches <= 3        # copy in, graph, copy out
    assert rep.device_launches_per_iter == 0.0


@pytest.mark.parametrize("method", METHODS)
def test_cache_skips_the_build_for_a_new_b(method):
    backend = get_backend("graph")
    backend._cache.clear()
    A, b1 = _system(method, side=23)
    _, b2 = _system(method, side=23, seed=1)
    x1, info1, r1 = getattr(dpsolve, method)(A, b1, rtol=1e-10, variant="graph", full_output=True)
    x2, info2, r2 = getattr(dpsolve, method)(A, b2, rtol=1e-10, variant="graph", full_output=True)
    assert info1 == info2 == 0
    assert r1.build_time > 0 and r2.build_time == 0.0
    for x, b in ((x1, b1), (x2, b2)):
        assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    # a new tolerance and maxiter reach the cached graph through its buffers
    _, info3, r3 = getattr(dpsolve, method)(A, b2, rtol=1e-4, variant="graph", full_output=True)
    assert info3 == 0 and r3.build_time == 0.0 and r3.iterations < r2.iterations
    _, info4, r4 = getattr(dpsolve, method)(A, b2, rtol=1e-12, maxiter=3, variant="graph",
                                            full_output=True)
    assert info4 == 3 and r4.iterations == 3 and r4.build_time == 0.0
    # a matrix with other values is another system: rebuilt, and solved right
    A2 = A.copy()
    A2.data = A2.data * 2.0
    x5, info5, r5 = getattr(dpsolve, method)(A2, b2, rtol=1e-10, variant="graph", full_output=True)
    assert info5 == 0 and r5.build_time > 0
    assert np.linalg.norm(b2 - A2 @ x5) <= 1e-10 * np.linalg.norm(b2)


def test_x0_that_solves_takes_no_iteration():
    A, b = _system("cg")
    x_exact = np.linalg.solve(A.toarray(), b)
    x, info, rep = dpsolve.cg(A, b, x0=x_exact, rtol=1e-6, variant="graph", full_output=True)
    assert info == 0 and rep.iterations == 0


def test_callback_refused():
    A, b = _system("cg")
    with pytest.raises(ValueError, match="cannot call a Python callback"):
        dpsolve.cg(A, b, variant="graph", callback=lambda xk: None)


def test_fingerprint_waits_for_the_current_stream():
    """The cache key's sums on dpsolve's non-blocking stream see what the current stream queued
    (the matrix's upload), behind milliseconds of other work: the key a full sync gives."""
    import cupy

    from dpsolve._setup import resources
    from dpsolve.cuda import ops
    busy = cupy.ones(1 << 26, dtype=cupy.float32)
    for _ in range(3):
        for _ in range(20):                   # ~3 ms queued on the current stream
            cupy.sin(busy, out=busy)
        b = cupy.arange(1 << 20, dtype=cupy.float32) * 3      # then the array
        key = ops.fingerprint([b], stream=resources().stream)
        cupy.cuda.Device().synchronize()
        assert key == ops.fingerprint([b])


def _typed_system(method, dtype, seed):
    """_system's A and b (40^2) in ``dtype``; a complex b is b + i b reversed."""
    A, b = _system(method, side=40, seed=seed)
    b = b + 1j * b[::-1] if np.dtype(dtype).kind == "c" else b
    return A.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("method, M", [("cg", None), ("cg", "jacobi"), ("cg", "chebyshev"),
                                       ("bicg", "jacobi"), ("bicgstab", "jacobi")])
def test_programmatic_launch_gives_the_bits_of_ordinary_launches(method, M, dtype, monkeypatch):
    """The kernels of pdl.SOURCES captured with programmatic dependent launch (each lets the next
    be scheduled, then waits for the one before): the graph of every method, fused (Jacobi) or
    with M's kernels between (Chebyshev), is built with them, and gives the x, info and
    iterations of the same graph of ordinary launches, bit for bit."""
    from dpsolve.cuda import pdl
    if M == "chebyshev" and np.dtype(dtype).kind == "c":
        pytest.skip("Chebyshev is real-only")
    A, b = _typed_system(method, dtype, seed=3)
    rtol = 1e-5 if dtype == np.float32 else 1e-9
    launched = []
    ordinary = pdl._launch

    def spy(raw, *a):
        launched.append(raw)
        ordinary(raw, *a)
    monkeypatch.setattr(pdl, "_launch", spy)
    out = []
    for on in (True, False):
        monkeypatch.setattr(pdl, "ENABLED", on)
        get_backend("graph")._cache.clear()
        x, info, rep = getattr(dpsolve, method)(A, b, rtol=rtol, M=M, variant="graph",
                                                full_output=True)
        out.append((x, info, rep.iterations, len(launched)))
    (x1, info1, its1, n_on), (x0, info0, its0, n_total) = out
    # every iteration kernel but the body's first and those taking a struct (M's PrecondArgs):
    # CG's 5 kernels give 3; programmatic only while ENABLED
    assert n_on >= 3 and n_total == n_on
    assert info1 == info0 == 0 and its1 == its0 > 1
    np.testing.assert_array_equal(x1, x0)


_LOAD = """
import sys, time
import cupy
a = cupy.ones(1 << 24, cupy.float32)
cupy.sin(a, out=a)
cupy.cuda.Device().synchronize()
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        cupy.sin(a, out=a)
    cupy.cuda.Device().synchronize()
"""


def _gpu_load(processes, seconds=60.0):
    """Processes that keep the GPU busy with kernels of their own (so that it time-slices
    between their contexts and this one), each started and ready."""
    import subprocess
    import sys
    procs = [subprocess.Popen([sys.executable, "-c", _LOAD, str(seconds)],
                              stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            for q in procs:
                q.kill()
            pytest.fail("a GPU load process did not start")
    return procs


def test_programmatic_graphs_repeat_the_ordinary_bits_under_load(monkeypatch):
    """Prepared graphs captured with programmatic launches give, solve after solve, the x and
    info of the same systems captured with ordinary ones, while three other processes keep the GPU
    busy (its contexts time-sliced). That is where a wrong early start shows: with the set-ups'
    kernels launched programmatically too, 1 % to 35 % of the solves of complex BiCG and
    BiCGStab without M came back converged in 0 iterations under load (H200, 12-01), none in a
    process alone."""
    import cupy
    import cupyx.scipy.sparse as csp

    from dpsolve.cuda import pdl
    cases = [("bicg", None, np.complex128), ("bicgstab", None, np.complex64),
             ("bicgstab", "jacobi", np.complex128), ("cg", "jacobi", np.float64)]
    systems = []
    for method, M, dtype in cases:
        A, b = _typed_system(method, dtype, seed=5)
        A, b = csp.csr_matrix(sp.csr_matrix(A)), cupy.asarray(b)
        rtol = 1e-4 if dtype == np.complex64 else 1e-8
        P = {}
        for on in (False, True):
            monkeypatch.setattr(pdl, "ENABLED", on)
            P[on] = dpsolve.prepare(A, method, M=M, variant="graph")
            P[on].solve(b, rtol=rtol)                        # the graph is captured here
        x_ref, info_ref = P[False].solve(b, rtol=rtol)
        assert info_ref == 0
        systems.append((f"{method} {M} {np.dtype(dtype).name}", P, b, rtol, x_ref.get()))
    load = _gpu_load(processes=3)
    wrong = []
    try:
        for k in range(80):
            for name, P, b, rtol, x_ref in systems:
                for on in (True, False):
                    x, info = P[on].solve(b, rtol=rtol)
                    if info != 0 or not np.array_equal(x.get(), x_ref):
                        wrong.append((name, k, on, info))
    finally:
        for p in load:
            p.kill()
            p.wait()
    assert not wrong, (f"{len(wrong)} of {160 * len(systems)} solves differ from the first "
                       f"(system, solve, PDL, info): {wrong[:5]}")
