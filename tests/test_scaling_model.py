"""dpsolve/distributed/model.py (issue 21): NCCL's all-reduce latency model, the halo model and
the projection, on the CPU; and scripts/bench-scaling --model-only as a subprocess. No timing:
every assertion is about the model's shape and its constants."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsolve.distributed import model as M

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench-scaling"
KS = (1, 2, 4, 8, 16, 32, 64, 128)


# --- the all-reduce model -------------------------------------------------------------------

def test_constants_restate_nccl_tuning_cc():
    # NCCL's own K = 2 NVLink figures: base + 2 (K - 1) x hop
    raw = M.AllreduceModel()
    assert raw.latency_us(2, "ring", "LL") == pytest.approx(6.6 + 2 * 0.6)
    assert raw.latency_us(2, "tree", "LL") == pytest.approx(6.8 + 2 * 0.6)
    assert raw.latency_us(2, "ring", "Simple") == pytest.approx(8.4 + 2 * 3.4)
    # one node: ring LL is NCCL's pick for a small message, 0.2 us under tree LL
    for k in (2, 4, 8):
        assert raw.best(k)[:2] == ("ring", "LL")
        assert raw.latency_us(k, "tree") - raw.latency_us(k, "ring") == pytest.approx(0.2)
    # two nodes of 8, LL: ring 6.6 + 28 x max(0.6, 1.0) + 2 x 2.7; tree 6.8 + 2 (7 x 0.6 + 5.0)
    assert raw.latency_us(16, "ring", "LL") == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)
    assert raw.latency_us(16, "tree", "LL") == pytest.approx(6.8 + 2 * (7 * 0.6 + 5.0))
    assert raw.best(16)[0] == raw.best(64)[0] == "tree"


@pytest.mark.parametrize("model", [M.AllreduceModel(), M.AllreduceModel.calibrated()],
                         ids=["nccl", "calibrated"])
@pytest.mark.parametrize("protocol", [None, *M.PROTOCOLS])
def test_ring_latency_increases_with_k(model, protocol):
    lat = [model.latency_us(k, "ring", protocol) for k in KS]
    assert all(b > a for a, b in zip(lat, lat[1:])), lat


@pytest.mark.parametrize("model", [M.AllreduceModel(), M.AllreduceModel.calibrated()],
                         ids=["nccl", "calibrated"])
def test_tree_grows_with_log2_of_the_nodes(model):
    # across nodes of 8 the tree adds the same latency per doubling of the nodes (log2 N),
    # while the ring's additions grow with K
    per_node = model.gpus_per_node
    ks = [per_node * 2 ** j for j in range(1, 7)]                 # 2 .. 64 nodes
    tree = [model.latency_us(k, "tree") for k in ks]
    ring = [model.latency_us(k, "ring") for k in ks]
    steps = [b - a for a, b in zip(tree, tree[1:])]
    assert all(s > 0 for s in steps)
    assert max(steps) - min(steps) < 1e-9, steps                 # linear in log2 N
    ring_steps = [b - a for a, b in zip(ring, ring[1:])]
    assert all(b > a for a, b in zip(ring_steps, ring_steps[1:]))
    assert all(t < r for t, r in zip(tree, ring))
    # log growth: from 2 to 64 nodes (32x the GPUs) the tree grows ~3x, the ring ~30x
    assert tree[-1] / tree[0] < 4 < 20 < ring[-1] / ring[0]


def test_tree_inside_a_node_is_a_chain():
    # NCCL's tree within a node is a chain: 2 (ppn - 1) hops, linear, like the ring
    m = M.AllreduceModel()
    hop = M.HW_LATENCY_US["nvlink"]["tree"]["LL"]
    for k in range(2, 9):
        assert m.latency_us(k, "tree", "LL") == pytest.approx(
            M.BASE_LATENCY_US["tree"]["LL"] + 2 * (k - 1) * hop)


@pytest.mark.parametrize("algorithm", M.ALGORITHMS)
@pytest.mark.parametrize("protocol", M.PROTOCOLS)
def test_one_gpu_has_no_communication(algorithm, protocol):
    assert M.AllreduceModel().latency_us(1, algorithm, protocol) == 0.0
    assert M.AllreduceModel.calibrated().latency_us(1, algorithm, protocol) == 0.0
    assert M.HaloModel.calibrated().time_us(1, (200, 200, 200)) == 0.0
    assert M.HaloModel.calibrated().time_us(1, (252, 252, 252), "box") == 0.0


def test_calibration_reproduces_the_measured_point():
    cal = M.AllreduceModel.calibrated()
    assert cal.latency_us(2, "ring", "LL") == pytest.approx(M.MEASURED_ALLREDUCE_US)
    assert cal.best(2) == ("ring", "LL", pytest.approx(M.MEASURED_ALLREDUCE_US))
    # the base latency is what was scaled: 5.75 / 6.6; the hops are NCCL's
    assert cal.base_scale == pytest.approx((6.95 - 1.2) / 6.6)
    assert cal.latency_us(8, "ring", "LL") - cal.latency_us(2, "ring", "LL") == pytest.approx(
        M.AllreduceModel().latency_us(8, "ring", "LL") - 7.8)
    halo = M.HaloModel.calibrated()
    assert halo.time_us(2, (200, 200, 400)) == pytest.approx(M.MEASURED_HALO_US)
    assert halo.latency_us == pytest.approx(11.0 - 200 * 200 * 8 / 450e3)


@settings(max_examples=60, deadline=None)
@given(k=st.sampled_from([2, 3, 4, 6, 8]), extra=st.floats(0.01, 50.0))
def test_calibration_at_any_point(k, extra):
    hops = M.AllreduceModel().latency_us(k, "ring", "LL") - M.BASE_LATENCY_US["ring"]["LL"]
    measured = hops + extra
    cal = M.AllreduceModel.calibrated(measured, k)
    assert cal.latency_us(k, "ring", "LL") == pytest.approx(measured)
    shape = (100, 100, 100 * k)
    halo = M.HaloModel.calibrated(measured + 5, k, shape)
    assert halo.time_us(k, shape) == pytest.approx(measured + 5)


def test_calibration_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="hop latencies"):
        M.AllreduceModel.calibrated(1.0)                         # below 2 x 0.6 us of hops
    with pytest.raises(ValueError, match="transfer time"):
        M.HaloModel.calibrated(0.5)                              # below 320 kB / 450 GB/s
    with pytest.raises(ValueError, match="one node"):
        M.HaloModel.calibrated(30.0, 16, (200, 200, 3200))
    with pytest.raises(ValueError, match="fill nodes"):
        M.AllreduceModel().latency_us(12, "ring")
    with pytest.raises(ValueError):
        M.AllreduceModel().latency_us(2, "nvls")


# --- the halo model -------------------------------------------------------------------------

def test_halo_faces():
    h = M.HaloModel(latency_us=0.0)
    face = 200 * 200 * 8
    slab = h.faces(8, (200, 200, 1600))
    assert slab[0] == (face, 0) and slab[3] == (2 * face, 0)     # end and interior slabs
    box = h.faces(8, (400, 400, 400), "box")                     # 2 x 2 x 2: 3 faces each
    assert all(f == (3 * face, 0) for f in box)
    # 16 slabs on two nodes of 8: ranks 7 and 8 each send one face over the network
    two = h.faces(16, (200, 200, 3200))
    assert two[7] == (face, face) and two[8] == (face, face) and two[6] == (2 * face, 0)
    assert M.grid_dims(64, "box") == (4, 4, 4) and M.grid_dims(16, "box") == (2, 2, 4)


def test_halo_grows_off_node_and_with_faces():
    h = M.HaloModel.calibrated()
    t = {k: h.time_us(k, M.weak_shape(200, k)) for k in (2, 4, 8, 16, 64)}
    assert t[2] < t[4] == t[8] < t[16] == t[64]                  # 1 face, 2 faces, off-node
    assert t[16] - t[8] > h.net_extra_latency_us
    assert (h.time_us(64, M.weak_shape(200, 64, "box"), "box")
            > h.time_us(64, M.weak_shape(200, 64)))              # 6 faces against 2


# --- the projection -------------------------------------------------------------------------

def test_projection_bounds():
    rows = M.project(KS)
    for r in rows:
        for key, e in r.weak_efficiency.items():
            assert 0 < e <= 1, (r.k, key, e)
            assert r.strong_speedup[key] > 0
            assert r.strong_speedup[key] <= r.k * (1 + 1e-12)   # never superlinear
        for a in M.ALGORITHMS:
            assert r.weak_efficiency[a, 1] >= r.weak_efficiency[a, 2]
            assert r.strong_speedup[a, 1] >= r.strong_speedup[a, 2]
    one = rows[0]
    assert one.k == 1 and set(one.weak_efficiency.values()) == {1.0}
    assert set(one.strong_speedup.values()) == {1.0}
    # weak efficiency falls with K for the ring (its latency and the halo only grow)
    ring = [r.weak_efficiency["ring", 2] for r in rows]
    assert all(b < a for a, b in zip(ring, ring[1:]))


def test_projection_inputs():
    base = {r.k: r for r in M.project((2, 8))}
    slower = {r.k: r for r in M.project((2, 8), t_local_us=325.0)}
    for k in (2, 8):               # half the local work: communication weighs twice as much
        assert slower[k].weak_efficiency["ring", 2] < base[k].weak_efficiency["ring", 2]
    # the strong-scaling floor caps the speedup: t(1) / floor at most
    t1 = M.MEASURED_T_LOCAL_US * M.A252_ROWS / 200 ** 3
    capped = M.project((64,), floor_us=100.0)[0]
    assert capped.strong_speedup["tree", 2] < t1 / 100.0
    assert M.strong_t_local_us(1000.0, 4) == 250.0
    assert M.strong_t_local_us(1000.0, 1000) == M.SMALL_SYSTEM_FLOOR_US
    assert M.flat_allreduce_us(8) == pytest.approx(3 * 6.95)
    with pytest.raises(ValueError):
        M.project((2,), strong_rows=1000 + 1)
    assert math.isclose(M.A252_ROWS, 16_003_008)


# --- scripts/bench-scaling --model-only -----------------------------------------------------

def _run(*args, tmp_path):
    # cupy and mpi4py made unimportable: --model-only needs neither
    block = tmp_path / "block"
    for name in ("cupy", "mpi4py"):
        (block / name).mkdir(parents=True, exist_ok=True)
        (block / name / "__init__.py").write_text(f"raise ImportError('{name} blocked')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(block)}
    return subprocess.run([sys.executable, str(SCRIPT), "--model-only", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_model_only_prints_the_table(tmp_path):
    res = _run("--json", str(tmp_path / "p.json"), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    summary = json.loads(lines[-1])
    assert json.loads((tmp_path / "p.json").read_text()) == summary
    rows = {r["k"]: r for r in summary["projection"]["rows"]}
    assert sorted(rows) == [1, 2, 4, 8, 16, 64]
    assert rows[2]["allreduce_us"]["ring"] == pytest.approx(6.95)
    assert rows[2]["allreduce_uncalibrated_us"]["ring"] == pytest.approx(7.8)
    assert rows[64]["pick"] == "tree"
    text = res.stdout
    assert "ring" in text and "tree" in text and "x0.871" in text
    assert ">= 92% " in text and ">= 85% " in text and ">= 1.8x " in text and ">= 5.0x " in text
    table = [ln.split() for ln in lines if ln.strip().split(" ")[0].isdigit()]
    assert [int(t[0]) for t in table] == [1, 2, 4, 8, 16, 64] * 2   # latencies, projection


def test_model_only_takes_the_figures(tmp_path):
    res = _run("--t-local-us", "325", "--allreduce-us", "10", "--halo-us", "20",
               tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    proj = json.loads(res.stdout.splitlines()[-1])["projection"]
    assert proj["t_local_us"] == 325.0
    rows = {r["k"]: r for r in proj["rows"]}
    assert rows[2]["allreduce_us"]["ring"] == pytest.approx(10.0)
    assert rows[2]["halo_weak_us"] == pytest.approx(20.0)
    assert rows[2]["weak_efficiency"]["ring/2"] == pytest.approx(325 / (325 + 20 + 20))
    bad = _run("--allreduce-us", "1", tmp_path=tmp_path)
    assert bad.returncode == 2 and "hop latencies" in bad.stderr


def test_the_measured_path_calibrates_at_its_own_k():
    # section 4 under mpirun: an all-reduce measured on 4 GPUs is the calibration point;
    # one the model cannot fit falls back to the reference figures
    loader = importlib.machinery.SourceFileLoader("bench_scaling", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    said = []
    proj = mod.projection(said.append, 640.0, 200, 200 ** 3, 12.0, 4, 15.0, (200, 200, 800),
                          9.0, 8, "test")
    rows = {r["k"]: r for r in proj["rows"]}
    assert rows[4]["allreduce_us"]["ring"] == pytest.approx(12.0)
    assert rows[4]["halo_weak_us"] == pytest.approx(15.0)
    said.clear()
    proj = mod.projection(said.append, 640.0, 200, 200 ** 3, 2.0, 4, 15.0, (200, 200, 800),
                          9.0, 8, "test")
    assert "cannot calibrate" in said[0]
    assert {r["k"]: r for r in proj["rows"]}[2]["allreduce_us"]["ring"] == pytest.approx(6.95)


# --- scripts/bench-scaling --summarize --------------------------------------------------------

def _summarize(tmp_path, *runs):
    files = []
    for i, r in enumerate(runs):
        f = tmp_path / f"run{i}.json"
        f.write_text("some line before\n" + json.dumps(r) + "\n")
        files.append(str(f))
    block = tmp_path / "block"
    for name in ("cupy", "mpi4py"):
        (block / name).mkdir(parents=True, exist_ok=True)
        (block / name / "__init__.py").write_text(f"raise ImportError('{name} blocked')\n")
    return subprocess.run([sys.executable, str(SCRIPT), "--summarize", *files],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(block)})


def _run_json(ranks, side, weak, t, t_graph=None, transport="nccl", method="cg", proj=None):
    n = side ** 3 * (ranks if weak else 1)
    return {"ranks": ranks, "transport": transport, "method": method, "weak": weak,
            "side": side, "n": n, "rows_per_rank": n // ranks, "t_iter_us": t,
            "t_iter_graph_us": t_graph, "projection": proj}


def test_summarize_sets_the_runs_side_by_side(tmp_path):
    proj = {"rows": [{"k": 2, "weak_efficiency": {"ring/2": 0.95},
                      "a252_speedup": {"ring/2": 1.9}}]}
    res = _summarize(tmp_path,
                     _run_json(1, 200, False, 480.0, 430.0, proj=proj),
                     _run_json(2, 200, True, 600.0, 440.0),         # weak: 80 %, 97.7 %
                     _run_json(1, 252, False, 960.0, 900.0, proj=proj),
                     _run_json(2, 252, False, 500.0, 540.0),        # A252: 1.92x, 1.67x
                     _run_json(2, 252, False, 700.0, transport="mpi"),  # t(1): nccl's
                     _run_json(2, 100, False, 50.0))                # no one-rank run
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout.splitlines()[-1])["summarize"]
    got = {(r["scaling"], r["transport"], r["variant"]): r for r in rows}
    weak = got["weak", "nccl", "cuda"]
    assert weak["measured"] == pytest.approx(0.8) and weak["target"] == 0.92
    assert weak["projected"] == pytest.approx(0.95)
    assert got["weak", "nccl", "graph"]["measured"] == pytest.approx(430 / 440)
    assert got["weak", "nccl", "graph"]["projected"] is None
    strong = got["strong", "nccl", "cuda"]
    assert strong["measured"] == pytest.approx(1.92) and strong["target"] == 1.8
    assert strong["projected"] == pytest.approx(1.9) and strong["n"] == 252 ** 3
    assert got["strong", "nccl", "graph"]["measured"] == pytest.approx(900 / 540)
    assert got["strong", "mpi", "cuda"]["t_iter_1_us"] == 960.0
    assert len(rows) == 5
    text = res.stdout
    assert ">= 92% MISSED" in text and ">= 92% met" in text and ">= 1.8x met" in text
    assert ">= 1.8x MISSED" in text and "(t(1): nccl)" in text
    assert "no one-rank run of this problem" in text


def test_summarize_refuses_what_is_not_a_run(tmp_path):
    res = _summarize(tmp_path, {"model_only": True, "n": 200})
    assert res.returncode == 2 and "--summarize" in res.stderr and "ranks" in res.stderr
