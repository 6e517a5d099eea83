# ruff: noqa
# Kept as run for the closing note of session 27 (2026-11-29, H200): a wrong x READ BACK after the
# default call under GPU contention. `python3 <this> two-calls REPS none|sync_b|sync_x` (the pattern of
# tests/test_gpu_lane.py::test_on_the_callers_stream as it was: a first call, then a second one with
# b made on a non-blocking stream s, y = 2 x queued on s, and y read with y.get() AFTER the `with s`
# block) and `python3 <this> one-call REPS VARIANT` (one call a matrix, no stream context), each as
# 6-8 processes at once: two-calls gave 60-127 of 80-150 wrong y (mostly all zeros) in every mode,
# the general path each time; one-call 0 of 30 wrong; one process alone 0 of 150. The cause is the
# read, not dpsolve: CuPy's get() copies on the current stream, which outside the block is the
# legacy default stream, and it does not wait for a non-blocking stream, so y could be copied
# before 2 x was written on s (sync_x synchronized the device before y = 2 x was queued, so it did
# not help). The test now reads y inside the block (on s); not yet run on a GPU.
import sys

def two_calls():
    import sys, collections, numpy as np, cupy, cupyx.scipy.sparse as csp, scipy.sparse as sp
    import dpsolve
    from dpsolve import _fast, _frontend as fe
    from dpsolve.matrices import laplace_2d
    A = sp.csr_array(laplace_2d(31)); n = A.shape[0]
    ev = []
    ls = _fast.lane_solve
    def lane_solve(*a, **k):
        out = ls(*a, **k); ev.append("lane" if out is not None else "nolane"); return out
    _fast.lane_solve = lane_solve
    zs = fe.zero_solution
    def zero_solution(*a, **k):
        ev.append("zero"); return zs(*a, **k)
    fe.zero_solution = zero_solution
    mode = sys.argv[3]
    stats = collections.Counter()
    for k in range(int(sys.argv[2])):
        dA = csp.csr_matrix(A)
        b = cupy.asarray(np.random.default_rng(k).standard_normal(n))
        dpsolve.cg(dA, b)
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            b2 = cupy.asarray(A @ np.arange(n, dtype=float))
            if mode == "sync_b":
                s.synchronize()
            ev.clear()
            x, info = dpsolve.cg(dA, b2, rtol=1e-10)
            if mode == "sync_x":
                cupy.cuda.Device().synchronize()
            y = x * 2
        yy = y.get() / 2
        ok = info == 0 and np.allclose(yy, np.arange(n), rtol=1e-6, atol=1e-6)
        stats[("ok" if ok else "bad", "+".join(ev), "allzero" if not np.abs(yy).max() else "some")] += 1
    print(f"RACE2 mode {mode} {dict(stats)}", flush=True)


def one_call():
    import sys, collections, numpy as np, cupy, cupyx.scipy.sparse as csp, scipy.sparse as sp
    import dpsolve
    from dpsolve.matrices import laplace_2d
    A = sp.csr_array(laplace_2d(31)); n = A.shape[0]
    variant = sys.argv[3]
    stats = collections.Counter()
    for k in range(int(sys.argv[2])):
        dA = csp.csr_matrix(A)
        b2 = cupy.asarray(A @ np.arange(n, dtype=float))
        x, info, rep = dpsolve.cg(dA, b2, rtol=1e-10, variant=variant, full_output=True)
        yy = x.get()
        ok = info == 0 and np.allclose(yy, np.arange(n), rtol=1e-6, atol=1e-6)
        stats[("ok" if ok else "bad", rep.variant, rep.format, rep.iterations, "allzero" if not np.abs(yy).max() else "some")] += 1
    print(f"RACE3 {variant} {dict(stats)}", flush=True)


if __name__ == '__main__':
    two_calls() if sys.argv[1] == 'two-calls' else one_call()
