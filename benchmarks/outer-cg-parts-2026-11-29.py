# Run on the device: python3 benchmarks/outer-cg-parts-2026-11-29.py (prints one line a problem;
# benchmarks/outer-cg-parts-2026-11-29.csv is that printout of 2026-11-29, H200, transcribed).
"""What the outer CG's one-block kernels and its dot cost an AMG-PCG iteration (merge's general
program, as graph captures it): iteration bodies with parts left out, each captured into a CUDA
graph and replayed; us a replay (timing only: the left-out scalars are stale)."""
import statistics

import cupy as cp
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.backends._gpu import ALPHA, BETA, PV, RR, SIGMA, STATUS, TAU, ZETA
from dpsolve.cuda import ops
from dpsolve.matrices import laplace_2d, laplace_3d

CASES = {"all": {"M", "outer", "dot", "one"}, "no one-block": {"M", "outer", "dot"},
         "no one-block, no dot": {"M", "outer"}, "outer only": {"outer", "dot", "one"},
         "V-cycle only": {"M"}}


def body(st, parts_on):
    """One iteration of merge's _cg_program_general, the parts not in ``parts_on`` left out."""
    s, stream = st.s, st.stream
    sigma, pv, alpha, zeta, rrs, beta, tau, status = (s(SIGMA), s(PV), s(ALPHA), s(ZETA), s(RR),
                                                      s(BETA), s(TAU), s(STATUS))
    P = st.partials
    if "M" in parts_on:
        st.psolve(st.r, st.z)
    if "outer" not in parts_on:
        return
    n = ops.dot_partials(st.n)
    if "dot" in parts_on:
        n = ops.dot_partial(st.r, st.z, P, stream)
    if "one" in parts_on:
        ops.merge_beta(n, P, False, sigma, zeta, rrs, beta, tau, stream)
    ops.xpay(st.z, beta, st.p, stream)
    n = ops.merge_spmv_dot(st.A, st.p, st.v, P, stream)
    if "one" in parts_on:
        ops.merge_alpha(n, P, sigma, pv, alpha, status, stream)
    n = ops.merge_update(alpha, st.p, st.v, st._xx, st.r, st.pc_args, None, P, stream)
    if "one" in parts_on:
        ops.nrm2_final(n, P, tau, stream)


for name, A in (("1024^2", laplace_2d(1024, 1024)), ("160^3", laplace_3d(160, 160, 160))):
    dA = csp.csr_matrix(A)
    b = dA @ cp.ones(A.shape[0])
    Pr = dpsolve.prepare(dA, "cg", M="amg", variant="merge")
    x, info = Pr.solve(b, rtol=1e-8)
    st = Pr._state
    st._xx = cp.zeros_like(st.r)
    st.r[...] = b
    st.z[...] = 0
    st.p[...] = 0
    cp.cuda.Device().synchronize()
    graphs = {}
    for c, on in CASES.items():
        with st.stream:
            st.stream.begin_capture()
            try:
                for _ in range(10):
                    body(st, on)
            finally:
                graphs[c] = st.stream.end_capture()
    res = {c: [] for c in CASES}
    for rnd in range(7):
        for c in (list(CASES) if rnd % 2 == 0 else list(CASES)[::-1]):
            g = graphs[c]
            st.r[...] = b
            st.p[...] = 0
            g.launch(st.stream)
            g.launch(st.stream)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(st.stream)
            for _ in range(20):
                g.launch(st.stream)
            e1.record(st.stream)
            e1.synchronize()
            res[c].append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / 200)
    print(name, " | ".join(f"{c}: {statistics.median(v):.1f} us" for c, v in res.items()),
          flush=True)
