#!/usr/bin/env python3
"""The edges of a prepared graph solve's captured graph (issue 30, session 62; H200 2026-12-01):
complex BiCG without M (2-D 64^2 plus 0.3i on the diagonal and 0.2 above it) prepared on
variant graph and solved once; every edge of the root graph with its two nodes' kinds and its
edge data (type 1, from_port 1: a programmatic edge).

    DPS_PDL_SETUP=all PYTHONPATH=<a tree with pdl-setup-experiment-2026-12-01.patch> \
        python3 benchmarks/pdl-graph-edges-2026-12-01.py

Run with the set-up's launches programmatic (the patch, DPS_PDL_SETUP=all) and without: 15
edges each; with them, the six edges between the set-up's last seven kernels (graph_head the
last) are programmatic and the one from graph_head into the WHILE node is the default (type 0,
ports 0), as are all 15 without. So the WHILE node is not entered on graph_head's trigger: the
set-up race (BENCHMARKS.md, 12-01) is not in the edge that capture_while hands the node.
(cudaFuncGetName is not in this cuda-bindings: kernels print as "K:?".)"""
import os

import cupy
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp
from cuda.bindings import runtime as rt

import dpsolve
from dpsolve.matrices import laplace_2d

print("dpsolve from", dpsolve.__file__, "DPS_PDL_SETUP", os.environ.get("DPS_PDL_SETUP"))
A = sp.csr_matrix(laplace_2d(64), dtype=np.complex128)
A = (A + sp.diags(np.full(A.shape[0], 0.3j)) + sp.eye(A.shape[0], k=1) * 0.2).tocsr()
A = csp.csr_matrix(A)
b = A @ cupy.ones(A.shape[0], np.complex128)
P = dpsolve.prepare(A, "bicg", variant="graph")
P.solve(b, rtol=1e-6)
st = P._state
g = st.graph
out = rt.cudaGraphGetEdges(g, 0)
print("first call:", [type(x).__name__ for x in out])
n = out[-1]
out = rt.cudaGraphGetEdges(g, n)
err, frm, to, data, n = out[0], out[1], out[2], out[3], out[-1]
print("edges", n, err)


def kind(node):
    t = rt.cudaGraphNodeGetType(node)[1]
    name = str(t).split(".")[-1]
    if "Kernel" in name:
        p = rt.cudaGraphKernelNodeGetParams(node)[1]
        try:
            fn = rt.cudaFuncGetName(p.func)[1]
        except Exception as e:
            fn = f"? {e}"
        return f"K:{fn.decode() if isinstance(fn, bytes) else fn}"
    return name


for i in range(n):
    d = data[i] if data is not None else None
    desc = "default" if d is None else f"type={d.type} from_port={d.from_port} to_port={d.to_port}"
    print(f"{kind(frm[i])[:60]:60s} -> {kind(to[i])[:60]:60s} {desc}")
