# ruff: noqa
# Kept as run for BENCHMARKS.md (issue 30, session 25). H200 2026-11-29: `python3 <this>`.
"""V-cycle time (graph of 20 V-cycles, median of 7) under device-module knobs, interleaved."""
import statistics, sys
import numpy as np, cupy, cupyx.scipy.sparse as csp
import dpsolve
import dpsolve.precond.amg.device as dev
from dpsolve.matrices import laplace_2d, laplace_3d

def vtime(P, reps=7, k=20):
    h = P.precond.hierarchy
    n = h.levels[0].n
    b = cupy.ones(n); z = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h.vcycle(b, z, s)
        s.begin_capture()
        for _ in range(k):
            h.vcycle(b, z, s)
        g = s.end_capture()
        g.launch(s); s.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            e0.record(s); g.launch(s); e1.record(s); e1.synchronize()
            ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / k)
    return statistics.median(ts)

CONFIGS = {
    "base": {},
    "sigma1": {"SELL_SIGMA": 1},
    "sigma32": {"SELL_SIGMA": 32},
    "sell_min_20k": {"SELL_MIN_ROWS": 20_000},
    "sell_off": {"SELL_MIN_ROWS": 1 << 40},
    "lane8": {"LANE_ENTRIES": 8},
    "nopdl": {"PDL": False},
}
defaults = {k: getattr(dev, k) for c in CONFIGS.values() for k in c}
for name, A in (("1024^2", laplace_2d(1024)), ("160^3", laplace_3d(160))):
    dA = csp.csr_matrix(A)
    Ps = {}
    for c, kv in CONFIGS.items():
        for k, v in defaults.items():
            setattr(dev, k, v)
        for k, v in kv.items():
            setattr(dev, k, v)
        Ps[c] = dpsolve.prepare(dA, "cg", M="amg", variant="graph")
        vtime(Ps[c], reps=1)
    res = {c: [] for c in CONFIGS}
    for rnd in range(3):
        for c in (list(CONFIGS) if rnd % 2 == 0 else list(CONFIGS)[::-1]):
            for k, v in defaults.items():
                setattr(dev, k, v)
            for k, v in CONFIGS[c].items():
                setattr(dev, k, v)
            res[c].append(vtime(Ps[c]))
    base = statistics.median(res["base"])
    for c in CONFIGS:
        m = statistics.median(res[c])
        print(f"KNOB {name} {c:14s} vcycle {m:7.1f} us ({m / base:.3f}) {[round(x, 1) for x in res[c]]}", flush=True)
    for k, v in defaults.items():
        setattr(dev, k, v)
