"""The auto rule (dpsolve/autotune.py) on synthetic measurements, and the committed rule file."""
import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import aslinearoperator

from dpsolve import autotune
from dpsolve._system import make_system
from dpsolve.backends import VARIANT_NAMES
from dpsolve.formats import FORMATS

RULE = {"points": [
    {"problem": "small", "method": "cg", "n": 4096, "mean_row": 5.0,
     "us_per_iter": {"persistent/csr-scalar": 7.0, "graph/ell": 9.0, "merge/csr-scalar": 60.0}},
    {"problem": "big", "method": "cg", "n": 4_000_000, "mean_row": 7.0,
     "us_per_iter": {"persistent/ell": 380.0, "dynamic/csr-scalar": 287.0,
                     "persistent/csr-scalar": 268.0}},
    {"problem": "long rows", "method": "cg", "n": 200_000, "mean_row": 65.0,
     "us_per_iter": {"graph/csr-vector": 30.0, "persistent/ell": 25.0}},
    {"problem": "small", "method": "bicgstab", "n": 4096, "mean_row": 5.0,
     "us_per_iter": {"graph/ell": 12.0, "persistent/csr-scalar": 14.0}},
]}


def stats(n, mean, fill=1.0):
    return {"n": n, "mean": mean, "ell_fill": fill, "nnz": int(n * mean), "max": int(mean * fill)}


def test_nearest_point_by_size_and_row_length():
    assert autotune.ranking(RULE, "cg", stats(5000, 5.0))[0] == ("persistent", "csr-scalar")
    assert autotune.ranking(RULE, "cg", stats(3_000_000, 7.0))[0] == ("persistent", "csr-scalar")
    assert autotune.ranking(RULE, "cg", stats(3_000_000, 7.0))[-1] == ("persistent", "ell")
    assert autotune.ranking(RULE, "cg", stats(150_000, 80.0))[0] == ("persistent", "ell")


def test_method_points_are_used_and_cg_is_the_fallback():
    assert autotune.ranking(RULE, "bicgstab", stats(4096, 5.0))[0] == ("graph", "ell")
    assert autotune.ranking(RULE, "bicg", stats(4096, 5.0))[0] == ("persistent", "csr-scalar")


def test_ell_is_never_ranked_for_padded_rows():
    r = autotune.ranking(RULE, "cg", stats(150_000, 80.0, fill=3.0))
    assert ("persistent", "ell") not in r and r[0] == ("graph", "csr-vector")


def test_choose_falls_back_without_rule_or_matrix():
    A = sp.csr_array(np.diag([2.0, 3.0]))
    system = make_system("cg", A, np.ones(2), None, None)
    assert autotune.choose(system, "auto", "auto", None, rule={"points": []}) is None
    op = make_system("cg", aslinearoperator(A), np.ones(2), None, None)
    assert autotune.choose(op, "auto", "auto", None, rule=RULE) is None


def test_committed_rule_is_complete_and_consistent():
    """The committed evidence: one point per sample problem and method, every variant x format
    key a real one, every time positive; the recorded command re-derives it."""
    rule = autotune.load_rule()
    if rule is None:
        pytest.skip("dpsolve/auto_rule.json is not there")
    assert rule["command"] == "scripts/bench-auto --write" and rule["device"]
    assert {p["method"] for p in rule["points"]} >= {"cg"}
    for p in rule["points"]:
        assert p["n"] > 0 and p["mean_row"] > 0 and p["us_per_iter"]
        for key, us in p["us_per_iter"].items():
            v, f = key.split("/", 1)
            assert v in VARIANT_NAMES and f in FORMATS and us > 0
    json.dumps(rule)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_auto_takes_the_measured_best_on_this_gpu(method):
    """On a sample problem of the committed rule, auto runs that point's fastest available pair
    (and, with a callback, the fastest host-driven one)."""
    import dpsolve
    from dpsolve._device import status
    from dpsolve.backends import get_backend
    from dpsolve.formats import row_stats, to_csr
    from dpsolve.matrices import laplace_2d
    if not status().ok:
        pytest.skip(status().reason)
    rule = autotune.load_rule()
    if rule is None:
        pytest.skip("dpsolve/auto_rule.json is not there")
    A = laplace_2d(64)
    if method != "cg":
        A = (A + 0.5 * sp.eye_array(A.shape[0])).tocsr()
    b = np.ones(A.shape[0])
    want = [pair for pair in autotune.ranking(rule, method, row_stats(to_csr(A, np.float64)))
            if get_backend(pair[0]).availability()[0]]
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, full_output=True)
    assert info == 0 and (rep.variant, rep.format) == want[0]
    calls = []
    x, info, rep = getattr(dpsolve, method)(A, b, rtol=1e-8, callback=calls.append,
                                            full_output=True)
    host_driven = [p for p in want if not get_backend(p[0]).device_driven]
    assert info == 0 and (rep.variant, rep.format) == host_driven[0] and calls
