"""Upper bound of folding each level's post-smoothing into its prolongation: the V-cycle with
the prolongation kernels (or the sweeps) left out, by level, graph-captured as vcycle_ab."""
import sys
import statistics
sys.path.insert(0, "benchmarks")
import dpsolve
from dpsolve.precond.amg import device
import vcycle_ab

real_launch = device.launch
real_vc = device.vc_kernel
SKIP = {"names": (), "levels": None}
names = {}

def vc_kernel(expression, dtype):
    k = real_vc(expression, dtype)
    names[id(k)] = expression
    return k

def launch(kernel, grid, block, args, stream, *a, **kw):
    name = names.get(id(kernel), "")
    if any(s in name for s in SKIP["names"]):
        n = int(args[0])
        if SKIP["levels"] is None or n in SKIP["levels"]:
            return
    return real_launch(kernel, grid, block, args, stream, *a, **kw)

device.vc_kernel = vc_kernel
device.launch = launch
rows = []
for item, A, b in vcycle_ab.systems(sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160"):
    P = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    h = P.precond.hierarchy
    hl = h.low or h
    ns = [lev.n for lev in hl.levels]
    cases = [("base", (), None), ("no prolong", ("vc_prolong",), None),
             ("no prolong l0", ("vc_prolong",), {ns[0]}),
             ("no prolong l>=1", ("vc_prolong",), set(ns[1:-1])),
             ("no sweep", ("vc_jacobi",), None)]
    res = {c[0]: [] for c in cases}
    for r in range(5):
        for label, nm, lv in (cases if r % 2 == 0 else cases[::-1]):
            SKIP["names"], SKIP["levels"] = nm, lv
            res[label].append(vcycle_ab.vcycle_us(P))
    SKIP["names"] = ()
    print(item, "levels", ns, flush=True)
    for label in res:
        print(f"  {label:16s} {statistics.median(res[label]):8.1f} us", flush=True)
