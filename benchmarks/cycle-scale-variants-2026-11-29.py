"""Where the single-precision cycle's scaling in its kernels cost (2026-11-29; a tried design, not
kept: amg.cu then had AMG_CAST_SCALE and the vc_*_low kernels a `cs` argument, see the log):
the V-cycle of prepared AMG systems with amg.cu built as tried (AMG_CAST_SCALE 1: a branch on k,
plain loops at k = 1), with 0 (never scaled: cs unread) and 2 (always the scaled loops), in one
process, rounds alternating. python3 this.py PROBLEMS ROUNDS. csv: problem,build,round,vcycle_us"""
import statistics
import sys

import dpsolve
from vcycle_ab import kernels_built_with, systems, vcycle_us

BUILDS = {"shipped": (), "never": ("-DAMG_CAST_SCALE=0",), "always": ("-DAMG_CAST_SCALE=2",)}
for item, A, b in systems(sys.argv[1]):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    for rnd in range(int(sys.argv[2])):
        for name, defines in (BUILDS.items() if rnd % 2 == 0 else reversed(BUILDS.items())):
            with kernels_built_with(defines):
                us = statistics.median([vcycle_us(P) for _ in range(3)])
            print(f"{item},{name},{rnd},{us:.1f}", flush=True)
