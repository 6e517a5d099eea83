"""Distributed graph CG on one rank (nccl, 200^3 default): the WHILE body captured with ordinary
launches (pdl.ENABLED False at capture) against programmatic ones; prepared solves alternated.
As run (H200, 12-01; argv: n, format):
    mpirun -n 1 python3 dist-graph-pdl-2026-12-01.py 100 auto    # and 200 auto, 200 csr-scalar"""
import sys

import numpy as np
from mpi4py import MPI

import dpsolve.distributed as dd
from dpsolve.cuda import pdl
from dpsolve.distributed import gpu

comm = MPI.COMM_WORLD
gpu.select_device(comm)
tr = dd.TRANSPORTS["nccl"](comm)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
fmt = sys.argv[2] if len(sys.argv) > 2 else "auto"
A = dd.DistributedMatrix.laplace3d(n, n, n * comm.size, comm)
b = A.matvec(np.ones(A.n_local), dd.MpiTransport(comm))
P, xs = {}, {}
for mode in ("ordinary", "pdl"):
    pdl.ENABLED = mode == "pdl"
    P[mode] = dd.prepare(A, "cg", M="jacobi", variant="graph", transport=tr, format=fmt)
    xs[mode] = P[mode].solve(b, rtol=1e-8)[0]          # captures
pdl.ENABLED = True
res = {m: [] for m in P}
for rnd in range(4):
    for mode in (("ordinary", "pdl") if rnd % 2 == 0 else ("pdl", "ordinary")):
        for _ in range(4):
            x, info, rep = P[mode].solve(b, rtol=1e-8, full_output=True)
            res[mode].append(rep.solve_time / rep.iterations * 1e6)
            same = np.array_equal(x, xs[mode])
            if not same:
                print("x differs", mode)
if comm.rank == 0:
    o, q = np.median(res["ordinary"]), np.median(res["pdl"])
    print(f"dist graph 1 rank {n}^3 {fmt}: us/it ordinary {o:.1f} (min {min(res['ordinary']):.1f}) "
          f"pdl {q:.1f} (min {min(res['pdl']):.1f}) ratio {o / q:.4f}; its {rep.iterations}; "
          f"x ordinary == pdl: {np.array_equal(xs['ordinary'], xs['pdl'])}", flush=True)
for p in P.values():
    p.close()
tr.close()
