"""Which levels fold: none / all / level 0 only / levels >= 1 only; V-cycle us ABCD rounds.
Runs on a tree with vcycle-fold-prolongation-2026-12-01.patch applied (not kept in dpsolve)."""
import sys
import statistics
sys.path.insert(0, "benchmarks")
import dpsolve
from dpsolve.precond.amg import device
import vcycle_ab

real = device._fold_copy
ALLOWED = {"set": None}
def fold_copy(lev, level, U, prev, weight):
    if ALLOWED["set"] is None or level in ALLOWED["set"]:
        return real(lev, level, U, prev, weight)
device._fold_copy = fold_copy
cases = [("apart", False, None), ("all", True, None), ("l0", True, {0}),
         ("l>=1", True, {1, 2, 3, 4})]
for item, A, b in vcycle_ab.systems(sys.argv[1] if len(sys.argv) > 1 else "2:1024,3:100,3:160"):
    Ps = {}
    for label, fold, allowed in cases:
        device.FOLD_PROLONGATION = fold
        ALLOWED["set"] = allowed
        Ps[label] = dpsolve.prepare(A, "cg", M="amg", variant="graph")
    us = {c[0]: [] for c in cases}
    for k in range(5):
        for c in (cases if k % 2 == 0 else cases[::-1]):
            us[c[0]].append(vcycle_ab.vcycle_us(Ps[c[0]]))
    print(item, "  ".join(f"{c[0]} {statistics.median(us[c[0]]):.1f}" for c in cases), flush=True)
