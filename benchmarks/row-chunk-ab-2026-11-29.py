"""Issue 30: the V-cycle's row loops a chunk of entries a round (amg.cu's strided_sum:
AMG_ROW_CHUNK 4, AMG_SMOOTH_CHUNK 8) against the unrolled loop they replaced (both 0), on the
GPU: per problem one system prepared per build (AMG-PCG on graph, x* = ones, rtol 1e-8, the
build's kernels captured into its solve), then old new / new old five times: the prepared solve
and the V-cycle (benchmarks/vcycle_ab.vcycle_us); with the set-up's own V-cycle timing.
Output: csv rows (problem, build, round, metric, value).
Usage: python3 benchmarks/row-chunk-ab-2026-11-29.py [2:1024,3:160,3:100]"""
import sys
from pathlib import Path

import dpsolve

sys.path.insert(0, str(Path(__file__).parent))
from vcycle_ab import kernels_built_with, solve_ms, systems, vcycle_us  # noqa: E402

BUILDS = {"old": ("-DAMG_ROW_CHUNK=0", "-DAMG_SMOOTH_CHUNK=0"), "new": ()}
print("problem,build,round,metric,value", flush=True)
for item, A, b in systems(sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:160,3:100"):
    Ps = {}
    for build, defines in BUILDS.items():
        with kernels_built_with(defines):
            Ps[build] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
            Ps[build].solve(b, rtol=1e-8)
        print(f"{item},{build},0,setup_vcycle_us,{Ps[build].precond.vcycle_time * 1e6:.1f}")
    for r in range(5):
        for build in (list(BUILDS) if r % 2 == 0 else list(BUILDS)[::-1]):
            with kernels_built_with(BUILDS[build]):
                ms, its = solve_ms(Ps[build], b)
                us = vcycle_us(Ps[build])
            print(f"{item},{build},{r + 1},solve_ms,{ms:.3f}")
            print(f"{item},{build},{r + 1},iterations,{its}")
            print(f"{item},{build},{r + 1},vcycle_us,{us:.1f}", flush=True)
