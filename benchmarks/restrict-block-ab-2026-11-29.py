"""Issue 30: the restriction into few, long rows a block a row (device.restriction_lanes, amg.cu's
vc_restrict_block) against 32 lanes a row, on the GPU: AMG-PCG prepared on graph, x* = ones, rtol
1e-8; per problem three hierarchies built (off: 32 lanes; few: the shipped rule, a block a row
into few rows; long: also into any rows of more than 512 entries on average), then A B C three
times: the V-cycle (AMGFace.time_vcycle, 40 graph launches) and the prepared solve (median of 9).
Also the levels whose restriction runs a block a row.
Usage: python3 benchmarks/restrict-block-ab-2026-11-29.py [2:1024,3:100,3:160]"""
import statistics
import sys
import time

import cupy
import cupyx.scipy.sparse as csp

import dpsolve
from dpsolve.matrices import laplace_2d, laplace_3d
from dpsolve.precond.amg import AMGFace, device

sync = cupy.cuda.Device().synchronize
shipped = device.restriction_lanes


def long_rows(level, nc, nnz):
    """The shipped rule, and a block a row into rows of more than 512 entries on average."""
    lanes = shipped(level, nc, nnz)
    if level > 0 and lanes == 32 and nnz > 512 * nc:
        return device.BLOCK
    return lanes


rules = {"off": lambda level, nc, nnz: device.cycle_lanes(nc, nnz), "few": shipped,
         "long": long_rows}
print("problem,rule,round,vcycle_us,solve_ms,block_levels", flush=True)
for item in (sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160").split(","):
    dim, size = item.split(":")
    A = csp.csr_matrix(laplace_2d(int(size)) if dim == "2" else laplace_3d(int(size)))
    b = A @ cupy.ones(A.shape[0])
    Ps = {}
    for rule, lanes in rules.items():
        device.restriction_lanes = lanes
        Ps[rule] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
        Ps[rule].solve(b, rtol=1e-8)
    device.restriction_lanes = shipped
    for rnd in range(3):
        for rule, P in Ps.items():
            h = P.precond.hierarchy
            hc = h.low if h.low is not None else h
            blocks = [i for i, lev in enumerate(hc.levels[:-1]) if lev.lanes_R == device.BLOCK]
            vc = AMGFace(h).time_vcycle(P._state, reps=40)
            times = []
            for _ in range(9):
                sync()
                t0 = time.perf_counter()
                P.solve(b, rtol=1e-8)
                sync()
                times.append(time.perf_counter() - t0)
            print(f"{dim}-D {size},{rule},{rnd},{vc * 1e6:.1f},"
                  f"{statistics.median(times) * 1e3:.3f},{' '.join(map(str, blocks))}",
                  flush=True)
