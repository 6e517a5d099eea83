"""Probe: a repeated distributed GPU solve's host time per call against its solve time,
NumPy b and CuPy b, prepared and one-shot (2 ranks, nccl, rtol 1e-8)."""
import sys
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

import dpsolve.distributed as dd
from dpsolve.distributed import gpu

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
gpu.select_device(comm)
tr = dd.TRANSPORTS["nccl"](comm)
n = int(sys.argv[1])
tree = sys.argv[2]
A = dd.DistributedMatrix.laplace3d(n, n, n * size, comm)
b = A.matvec(np.ones(A.n_local), dd.MpiTransport(comm))
bd = cp.asarray(b)
pad = cp.zeros(A.n_local + 4096) if len(sys.argv) > 3 else None   # shifts the pool's blocks
tree += "-pad" if pad is not None else ""
for variant in ("graph",) if pad is not None else ("graph", "cuda"):
    P = dd.prepare(A, "cg", variant=variant, transport=tr, format="csr-scalar")
    P.solve(b, rtol=1e-8)
    for how in ("prepared", "one-shot"):
        for kind, rhs in (("numpy", b), ("cupy", bd)):
            for call in range(2 if how == "one-shot" else 3):
                comm.Barrier()
                t0 = time.perf_counter()
                if how == "prepared":
                    x, info, rep = P.solve(rhs, rtol=1e-8, full_output=True)
                else:
                    x, info, rep = dd.cg(A, rhs, rtol=1e-8, variant=variant, transport=tr,
                                         format="csr-scalar", full_output=True)
                t = max(comm.allgather(time.perf_counter() - t0))
                x0 = float(x[0])
                if rank == 0:
                    print(f"{tree},{n},{variant},{how},{kind},{call},{t * 1e3:.1f},"
                          f"{rep.solve_time * 1e3:.1f},{rep.iterations},{info},{x0!r},"
                          f"{type(x).__module__.split('.')[0]}", flush=True)
    P.close()
tr.close()
