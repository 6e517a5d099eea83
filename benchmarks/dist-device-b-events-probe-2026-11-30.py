"""Probe: graph's prepared distributed solve, the graph's device time (CUDA events around
launch_graph on the solve's stream) beside the report's solve_time, NumPy and CuPy b."""
import sys
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

import dpsolve.backends.graph as bg
import dpsolve.distributed as dd
from dpsolve.distributed import gpu

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
gpu.select_device(comm)
tr = dd.TRANSPORTS["nccl"](comm)
n, tree = int(sys.argv[1]), sys.argv[2]
A = dd.DistributedMatrix.laplace3d(n, n, n * size, comm)
b = A.matvec(np.ones(A.n_local), dd.MpiTransport(comm))
bd = cp.asarray(b)
orig = bg.launch_graph
events = []


def timed(st, x, atol, maxiter):
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(st.stream)
    fin = orig(st, x, atol, maxiter)
    e1.record(st.stream)
    events.append((e0, e1))
    return fin


bg.launch_graph = timed
P = dd.prepare(A, "cg", variant="graph", transport=tr, format="csr-scalar")
P.solve(b, rtol=1e-8)
for how in ("prepared", "one-shot"):
    for kind, rhs in (("numpy", b), ("cupy", bd)):
        for call in range(3):
            events.clear()
            comm.Barrier()
            t0 = time.perf_counter()
            if how == "prepared":
                x, info, rep = P.solve(rhs, rtol=1e-8, full_output=True)
            else:
                x, info, rep = dd.cg(A, rhs, rtol=1e-8, variant="graph", transport=tr,
                                     format="csr-scalar", full_output=True)
            t = max(comm.allgather(time.perf_counter() - t0))
            dev = sum(cp.cuda.get_elapsed_time(a, z) for a, z in events)
            devs = comm.allgather(dev)
            if rank == 0:
                print(f"{tree},{how},{kind},{call},{t * 1e3:.1f},"
                      + ",".join(f"{s * 1e3:.2f}" for s in rep.solve_times) + ","
                      + ",".join(f"{d:.2f}" for d in devs), flush=True)
P.close()
tr.close()
