"""Probe: a repeated distributed GPU solve, one-shot dd.cg against dd.prepare's solve (2 ranks,
nccl, rtol 1e-8): each call's host time, ABAB."""
import sys
import time

import numpy as np
from mpi4py import MPI

import dpsolve.distributed as dd
from dpsolve.distributed import gpu

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
gpu.select_device(comm)
tr = dd.TRANSPORTS["nccl"](comm)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
A = dd.DistributedMatrix.laplace3d(n, n, n * size, comm)
b = A.matvec(np.ones(A.n_local), dd.MpiTransport(comm))
for variant in ("cuda", "graph"):
    P = dd.prepare(A, "cg", variant=variant, transport=tr, format="csr-scalar")
    for rnd in range(2):
        for how in ("one-shot", "prepared"):
            for call in range(3):
                comm.Barrier()
                t0 = time.perf_counter()
                if how == "prepared":
                    x, info, rep = P.solve(b, rtol=1e-8, full_output=True)
                else:
                    x, info, rep = dd.cg(A, b, rtol=1e-8, variant=variant, transport=tr,
                                         format="csr-scalar", full_output=True)
                t = max(comm.allgather(time.perf_counter() - t0))
                if rank == 0:
                    print(f"{n}^3 a rank, {variant:5s} round {rnd} {how:8s} call {call}: host "
                          f"{t * 1e3:7.1f} ms, solve (min) {rep.solve_time * 1e3:6.1f}, its "
                          f"{rep.iterations}, info {info}, x[0] {x[0]!r}", flush=True)
    P.close()
tr.close()
