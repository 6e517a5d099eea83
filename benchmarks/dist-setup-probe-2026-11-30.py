"""Probe: what a repeated distributed GPU solve pays outside its iterations (2 ranks, nccl)."""
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
for n in [int(v) for v in sys.argv[1:]] or [100, 200]:
    A = dd.DistributedMatrix.laplace3d(n, n, n * size, comm)
    b = A.matvec(np.ones(A.n_local), dd.MpiTransport(comm))
    for variant in ("cuda", "graph"):
        for call in range(3):
            comm.Barrier()
            t0 = time.perf_counter()
            x, info, rep = dd.cg(A, b, rtol=1e-8, variant=variant, transport=tr,
                                 format="csr-scalar", full_output=True)
            t = time.perf_counter() - t0
            t = max(comm.allgather(t))
            if rank == 0:
                print(f"{n}^3 a rank {variant:5s} call {call}: host {t * 1e3:8.1f} ms, wall "
                      f"{rep.wall_time * 1e3:8.1f}, solve (min) {rep.solve_time * 1e3:8.1f}, "
                      f"solves {[round(v * 1e3, 1) for v in rep.solve_times]}, its "
                      f"{rep.iterations}, info {info}", flush=True)
tr.close()
