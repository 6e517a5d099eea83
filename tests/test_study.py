"""The energy study (dpsolve.study): a tiny run on the host variant, resume, failures, Table 2 on
synthetic rows with known variations, Figure 7, and the problems it is given."""
from __future__ import annotations

import csv
import re
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from dpsolve import backends, study
from dpsolve._device import status as device_status
from dpsolve.backends.host import HostBackend
from dpsolve.matrices import convdiff_2d, laplace_2d, shared_spd_matrices

TINY = dict(window=0.05, gap=0.0)


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _write_mtx(path, A):
    scipy.io.mmwrite(str(path), sp.coo_matrix(A))
    return path


def host_settings(**kw):
    return study.Settings(variants=("host",), **{**TINY, **kw})


def _problems(*specs):
    return [study.resolve_problem(s) for s in specs]


class _FakeGpu(HostBackend):
    """The host solver under a GPU variant's name, so Table 2 and Figure 7 can be formed on a
    machine without a GPU (only the study's bookkeeping is under test here)."""
    uses_format = False

    def __init__(self, name):
        self.name = name


@pytest.fixture
def no_nvml(monkeypatch):
    """NVML as on a machine without a GPU (no GPU energy), on any machine."""
    from dpsolve import measure
    monkeypatch.setattr(measure, "_nvml", lambda: None)


@pytest.fixture
def fake_gpu(monkeypatch, no_nvml):
    for name in ("cublas", "merge"):
        monkeypatch.setitem(backends._BACKENDS, name, _FakeGpu(name))


# --------------------------------------------------------------------------- a tiny study
def test_tiny_host_study_writes_csv_and_tables(tmp_path, no_nvml):
    mtx = _write_mtx(tmp_path / "small_spd.mtx", laplace_2d(6))
    out = tmp_path / "out"
    logs = []
    rows = study.run_study(_problems("laplace2d-8", "laplace3d-4", str(mtx)), host_settings(),
                           out, progress=False, log=logs.append)
    assert [r["matrix"] for r in rows] == ["laplace2d-8", "laplace3d-4", "small_spd"]
    assert {r["status"] for r in rows} == {"ok"}
    res = _csv(out / "results.csv")
    assert len(res) == 3
    for r in res:
        assert (r["method"], r["variant"], r["sync"], r["dtype"], r["format"]) == \
            ("cg", "host", "-", "float64", "-")
        assert int(r["reps"]) >= 1 and float(r["time_s"]) > 0 and r["info"] == "0"
        assert float(r["rel_residual"]) <= 1e-6
        assert float(r["host_cpu_s"]) >= 0 and r["gpu_energy_j"] == ""
    raw = _csv(out / "raw.csv")
    for r in res:                                      # one raw row per repetition
        mine = [x for x in raw if x["matrix"] == r["matrix"]]
        assert len(mine) == int(r["reps"])
        assert [int(x["rep"]) for x in mine] == list(range(len(mine)))
    t2 = (out / "table2.md").read_text()
    assert "cannot be formed" in t2
    if not device_status().ok:
        assert device_status().reason in t2             # says why: no GPU
    ab = (out / "absolute.md").read_text()
    for name in ("laplace2d-8", "laplace3d-4", "small_spd"):
        assert f"## {name}" in ab
    assert "n = 64, nnz = 288" in ab
    assert not list(out.glob("figure7_*.png"))          # no baseline, no figure
    assert (out / "study.json").is_file()


def test_resume_skips_completed_configurations(tmp_path):
    out = tmp_path / "out"
    study.run_study(_problems("laplace2d-8"), host_settings(), out, progress=False, log=print)
    before = (out / "results.csv").read_text(), (out / "raw.csv").read_text()
    logs = []
    study.run_study(_problems("laplace2d-8", "laplace1d-20"), host_settings(), out,
                    progress=False, log=logs.append)
    res = _csv(out / "results.csv")
    assert [r["matrix"] for r in res] == ["laplace2d-8", "laplace1d-20"]   # only the new one ran
    assert (out / "results.csv").read_text().startswith(before[0])
    assert (out / "raw.csv").read_text().startswith(before[1])
    assert any("1 of 2 configurations already done" in m for m in logs)
    # a third run does nothing at all
    txt = (out / "results.csv").read_text()
    study.run_study(_problems("laplace2d-8", "laplace1d-20"), host_settings(), out,
                    progress=False, log=lambda m: None)
    assert (out / "results.csv").read_text() == txt
    # start over
    study.run_study(_problems("laplace1d-20"), host_settings(), out, restart=True,
                    progress=False, log=lambda m: None)
    assert [r["matrix"] for r in _csv(out / "results.csv")] == ["laplace1d-20"]


def test_other_settings_are_not_mixed_into_a_folder(tmp_path):
    out = tmp_path / "out"
    study.run_study(_problems("laplace1d-10"), host_settings(), out, progress=False,
                    log=lambda m: None)
    with pytest.raises(ValueError, match="--restart"):
        study.run_study(_problems("laplace1d-10"), host_settings(rtol=1e-3), out,
                        progress=False, log=lambda m: None)


def test_a_failing_configuration_is_recorded_and_the_rest_go_on(tmp_path):
    # Jacobi needs a nonzero diagonal: the second matrix fails, the others run
    Z = sp.csr_array(np.array([[0.0, 1.0], [1.0, 2.0]]))
    bad = _write_mtx(tmp_path / "zero_diag.mtx", Z)
    corrupt = tmp_path / "corrupt.mtx"
    corrupt.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 oops\n")
    out = tmp_path / "out"
    study.run_study(_problems("laplace2d-8", str(bad), str(corrupt), "laplace1d-12"),
                    host_settings(preconds=("jacobi",)), out, progress=False, log=lambda m: None)
    res = {r["matrix"]: r for r in _csv(out / "results.csv")}
    assert res["laplace2d-8"]["status"] == res["laplace1d-12"]["status"] == "ok"
    assert res["zero_diag"]["status"] == "failed"
    assert "zero diagonal" in res["zero_diag"]["error"]
    assert res["corrupt"]["status"] == "failed"
    assert res["corrupt"]["error"].startswith("loading the matrix")
    ab = (out / "absolute.md").read_text()
    assert "failed" in ab and "zero diagonal" in ab
    # failed configurations are kept on resume, and run again when asked
    n = len(_csv(out / "results.csv"))
    study.run_study(_problems(str(bad)), host_settings(preconds=("jacobi",)), out, progress=False,
                    log=lambda m: None)
    assert len(_csv(out / "results.csv")) == n
    study.run_study(_problems(str(bad)), host_settings(preconds=("jacobi",)), out,
                    retry_failed=True, progress=False, log=lambda m: None)
    assert len(_csv(out / "results.csv")) == n + 1


def test_amg_beside_jacobi_and_plain_cg_with_the_set_up_apart(tmp_path):
    """--precond none,jacobi,amg: three configurations a matrix; the preconditioned ones are
    solved on a prepared system, their set-up timed apart (setup_s), plain CG as the paper's one
    call a solve (no setup_s); AMG needs far fewer iterations than Jacobi."""
    out = tmp_path / "out"
    study.run_study(_problems("laplace2d-24"), host_settings(preconds=("none", "jacobi", "amg")),
                    out, progress=False, log=lambda m: None)
    res = {r["precond"]: r for r in _csv(out / "results.csv")}
    assert set(res) == {"none", "jacobi", "amg"}
    assert all(r["status"] == "ok" and r["info"] == "0" for r in res.values())
    assert res["none"]["setup_s"] == ""
    assert float(res["jacobi"]["setup_s"]) > 0 and float(res["amg"]["setup_s"]) > 0
    assert int(res["amg"]["iterations"]) * 3 < int(res["jacobi"]["iterations"])
    raw = _csv(out / "raw.csv")
    assert {r["precond"] for r in raw} == {"none", "jacobi", "amg"}
    ab = (out / "absolute.md").read_text()
    assert "| cg+amg | float64 |" in ab and "| cg+jacobi | float64 |" in ab
    # a study of plain CG may resume into the same folder: the preconditioners are part of the key
    study.run_study(_problems("laplace2d-24"), host_settings(), out, progress=False,
                    log=lambda m: None)
    assert len(_csv(out / "results.csv")) == 3


def test_a_non_square_matrix_fails_with_a_clear_error(tmp_path):
    rect = _write_mtx(tmp_path / "rect.mtx", sp.random(3, 4, density=0.5, random_state=0))
    out = tmp_path / "out"
    study.run_study(_problems(str(rect), "laplace1d-5"), host_settings(), out, progress=False,
                    log=lambda m: None)
    res = {r["matrix"]: r for r in _csv(out / "results.csv")}
    assert res["rect"]["status"] == "failed" and res["laplace1d-5"]["status"] == "ok"
    assert f"{rect}: expected a square matrix, got 3 x 4" in res["rect"]["error"]
    assert "matmul" not in res["rect"]["error"]


def test_unsupported_and_unavailable_are_skipped_not_failed(tmp_path):
    out = tmp_path / "out"
    s = study.Settings(methods=("cg", "bicgstab"), variants=("host", "graph"), syncs=("polling",),
                       **TINY)
    study.run_study(_problems("convdiff2d-8", "laplace2d-6"), s, out, progress=False,
                    log=lambda m: None)
    res = {(r["matrix"], r["method"], r["variant"]): r for r in _csv(out / "results.csv")}
    assert res["convdiff2d-8", "cg", "host"]["status"] == "skipped"          # not SPD
    assert "not SPD" in res["convdiff2d-8", "cg", "host"]["error"]
    assert res["convdiff2d-8", "bicgstab", "host"]["status"] == "ok"
    assert res["laplace2d-6", "cg", "host"]["status"] == "ok"
    g = res["laplace2d-6", "cg", "graph"]
    if not backends.variant_info("graph").available:
        assert g["status"] == "skipped" and g["error"] == backends.variant_info("graph").reason
    # skipped configurations are looked at again on a re-run (the machine may have changed)
    n = len(_csv(out / "results.csv"))
    study.run_study(_problems("laplace2d-6"), s, out, progress=False, log=lambda m: None)
    added = _csv(out / "results.csv")[n:]
    if backends.variant_info("graph").available:           # nothing was skipped on laplace2d-6
        assert added == []
    else:
        assert {r["status"] for r in added} == {"skipped"}


def test_cg_on_a_nonsymmetric_matrix_is_skipped_with_the_reason(tmp_path, monkeypatch):
    """A file's symmetry is not known in advance: CG on one that is not symmetric is skipped,
    as the README says, with its Hermitian defect; the test runs once per matrix."""
    from dpsolve import matrices
    real, calls = matrices.hermitian_defect, []
    monkeypatch.setattr(matrices, "hermitian_defect", lambda A: calls.append(A.shape) or real(A))
    nonsym = _write_mtx(tmp_path / "nonsym.mtx", convdiff_2d(6))
    sym = _write_mtx(tmp_path / "sym.mtx", laplace_2d(5))
    s = study.Settings(methods=("cg", "bicgstab"), variants=("host",),
                       dtypes=("float64", "float32"), **TINY)
    study.run_study(_problems(str(nonsym), str(sym), "laplace1d-5"), s, tmp_path / "out",
                    progress=False, log=lambda m: None)
    res = {(r["matrix"], r["method"], r["dtype"]): r for r in _csv(tmp_path / "out/results.csv")}
    assert len(res) == 3 * 2 * 2
    for dtype in ("float64", "float32"):
        cg = res["nonsym", "cg", dtype]
        assert cg["status"] == "skipped" and cg["iterations"] == ""
        assert re.fullmatch(r"the matrix is not symmetric \(max\|A - A\^H\| / max\|A\| = "
                            r"[0-9.e+-]+ > 1e-10\): CG is run on symmetric \(Hermitian\) "
                            r"positive definite matrices only", cg["error"]), cg["error"]
        assert res["nonsym", "bicgstab", dtype]["status"] == "ok"
        assert res["sym", "cg", dtype]["status"] == res["laplace1d-5", "cg", dtype]["status"] \
            == "ok"
    assert calls == [(36, 36), (25, 25)]     # once per file; none for a generated SPD problem


@pytest.mark.skipif(device_status().ok, reason="checks the message on a machine without a GPU")
def test_gpu_variant_without_a_gpu_is_skipped_with_the_reason(tmp_path):
    out = tmp_path / "out"
    s = study.Settings(variants=("cublas",), **TINY)
    study.run_study(_problems("laplace2d-6"), s, out, progress=False, log=lambda m: None)
    res = _csv(out / "results.csv")
    assert {r["sync"] for r in res} == {"polling", "blocking"}
    assert all(r["status"] == "skipped" and r["error"] == device_status().reason for r in res)
    assert device_status().reason in (out / "table2.md").read_text()


def test_study_with_a_baseline_writes_table2_and_figure7(tmp_path, fake_gpu):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    s = study.Settings(variants=("cublas", "merge"), **TINY)
    study.run_study(_problems("laplace2d-8", "laplace1d-30"), s, out, progress=False,
                    log=lambda m: None)
    res = _csv(out / "results.csv")
    assert len(res) == 2 * 2 * 2 and {r["status"] for r in res} == {"ok"}
    t2 = (out / "table2.md").read_text()
    assert "## CG, float64, format auto (2 matrices with a baseline)" in t2
    assert "| polling | cublas | 0.00 | 0.00 | 0.00 | n/a | n/a | n/a | 2 |" in t2
    for sync, variant in (("polling", "merge"), ("blocking", "cublas"), ("blocking", "merge")):
        assert f"| {sync} | {variant} |" in t2
    png = out / "figure7_cg_float64_auto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"[{png.name}]({png.name})" in t2


def test_progress_bar_fallback_without_tqdm(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    study.run_study(_problems("laplace1d-10", "laplace1d-11"), host_settings(), tmp_path / "o",
                    progress=True, log=lambda m: None)
    out, err = capsys.readouterr()
    assert "[1/2] laplace1d-10 cg float64 host ..." in err            # progress: stderr
    assert "[2/2] laplace1d-11" in err and re.search(r"\d (s|ms|us)/solve", out)   # results


def test_progress_bar_with_tqdm(tmp_path, capsys):
    pytest.importorskip("tqdm")
    study.run_study(_problems("laplace1d-10"), host_settings(), tmp_path / "o", progress=True,
                    log=lambda m: None)
    out, err = capsys.readouterr()
    assert "1/1" in err and "laplace1d-10 cg float64 host: " in out


def test_progress_lines_print_human_times():
    row = {**{k: v for k, v in zip(study.KEY, ("m", "cg", "none", "cuda", "polling", "float64",
                                                "ell"))},
           "status": "ok", "time_s": 2.38, "iterations": 40, "gpu_energy_j": 1.5, "reps": 3}
    assert study._done_line(row) == \
        "m cg float64 cuda/polling ell: 2.38 s/solve, 40 it, 1.50 J/solve, 3 reps"
    row["time_s"], row["reps"] = 4.2e-5, 1
    assert study._done_line(row).endswith(": 42.0 us/solve, 40 it, 1.50 J/solve, 1 rep")
    row.update(precond="amg", setup_s=0.061)
    assert study._done_line(row) == ("m cg M=amg float64 cuda/polling ell: 42.0 us/solve, 40 "
                                     "it, 1.50 J/solve, 1 rep, set-up 61.0 ms")


# --------------------------------------------------------------------------- Table 2, Figure 7
def _row(matrix, variant, sync, t, e, method="cg", dtype="float32", fmt="csr-vector", **kw):
    return {"matrix": matrix, "method": method, "variant": variant, "sync": sync, "dtype": dtype,
            "format": fmt, "status": "ok", "time_s": str(t), "gpu_energy_j":
            "" if e is None else str(e), **kw}


def synthetic(pcts: dict, matrices=("m1", "m2", "m3"), base_t=2.0, base_e=50.0):
    """Rows whose variations against cublas + polling are exactly ``pcts``:
    {(variant, sync): [(time%, energy%) per matrix]}."""
    rows = []
    for i, m in enumerate(matrices):
        bt, be = base_t * (i + 1), base_e * (i + 1)
        rows.append(_row(m, "cublas", "polling", bt, be))
        for (v, s), vals in pcts.items():
            tp, ep = vals[i]
            rows.append(_row(m, v, s, bt * (1 + tp / 100), None if ep is None else
                             be * (1 + ep / 100)))
    return rows


def test_table2_on_known_variations():
    rows = synthetic({("dynamic", "blocking"): [(-1.5, -13.0), (-4.5, -14.5), (-3.0, -14.0)],
                      ("cuda", "polling"): [(0.1, 8.0), (0.4, -0.5), (0.25, 2.0)],
                      ("cublas", "blocking"): [(12.0, None), (-0.6, None), (7.0, None)]})
    rows.append(_row("m1", "host", "-", 100.0, None))               # not one of the paper's
    rows.append(_row("m1", "merge", "polling", 1.0, 1.0, status="failed"))
    t = study.table2(rows)
    assert list(t) == [("cg", "float32", "csr-vector")]
    got = {(sync, v): (ts, es, n) for sync, v, ts, es, n in t["cg", "float32", "csr-vector"]}
    assert list(got) == [("polling", "cublas"), ("polling", "cuda"), ("blocking", "cublas"),
                         ("blocking", "dynamic")]                # the paper's row order
    ts, es, n = got["blocking", "dynamic"]
    assert n == 3
    assert ts == pytest.approx((-1.5, -4.5, -3.0))     # min / max by absolute value, mean
    assert es == pytest.approx((-13.0, -14.5, -13.8333333))
    ts, es, _ = got["polling", "cuda"]
    assert ts == pytest.approx((0.1, 0.4, 0.25)) and es == pytest.approx((-0.5, 8.0, 3.1666667))
    ts, es, _ = got["blocking", "cublas"]
    assert ts == pytest.approx((-0.6, 12.0, 6.1333333)) and es is None
    assert got["polling", "cublas"][:2] == ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    md = study.table2_markdown(rows)
    assert "| blocking | dynamic | -1.50 | -4.50 | -3.00 | -13.00 | -14.50 | -13.83 | 3 |" in md
    assert "| blocking | cublas | -0.60 | 12.00 | 6.13 | n/a | n/a | n/a | 3 |" in md
    assert "host" not in md.split("## CG")[1]


def test_table2_total_energy_where_rapl_was_readable():
    rows = synthetic({("merge", "blocking"): [(-1.0, -10.0), (-2.0, -12.0), (-3.0, -14.0)]})
    for r in rows:
        r["host_energy_j"] = "0"            # host energy 0 J: total = GPU, so the same numbers
    md = study.table2_markdown(rows)
    assert "GPU + host (RAPL) energy" in md
    assert md.count("| blocking | merge "
                    "| -1.00 | -3.00 | -2.00 | -10.00 | -14.00 | -12.00 | 3 |") == 2


def test_table2_groups_and_missing_baselines(fake_gpu):
    rows = synthetic({("cuda", "polling"): [(1.0, 1.0)] * 3})
    rows += [_row("m1", "cuda", "polling", 1.0, 1.0, dtype="float64")]   # no baseline there
    assert set(study.table2(rows)) == {("cg", "float32", "csr-vector")}
    md = study.table2_markdown(rows)
    assert "## No table for cg, float64, format csr-vector" in md
    assert "`cublas` + polling was not in the plan" in md


def test_paper_min_max_avg():
    assert study.paper_min_max_avg([0.62, 12.88, 7.15]) == pytest.approx((0.62, 12.88, 6.8833333))
    assert study.paper_min_max_avg([-3.3, -13.48, 2.0]) == pytest.approx((2.0, -13.48, -4.9266667))
    assert study.paper_min_max_avg([None, None]) is None


def test_figure7_from_synthetic_rows(tmp_path):
    pytest.importorskip("matplotlib")
    pcts = {("cublas", "blocking"): [(7.0, -11.0)] * 7, ("cuda", "polling"): [(0.2, 1.8)] * 7,
            ("cuda", "blocking"): [(4.7, -10.7)] * 7, ("merge", "polling"): [(-1.7, 0.6)] * 7,
            ("merge", "blocking"): [(-1.1, -12.5)] * 7, ("dynamic", "polling"): [(-3.6, -2.6)] * 7,
            ("dynamic", "blocking"): [(-3.7, -14.2)] * 7}
    mats = ("bmw", "crank", "F1", "inline", "ldoor", "audi", "A252")
    rows = synthetic(pcts, mats)
    series = study.variations(rows)["cg", "float32", "csr-vector"]
    assert series["dynamic", "blocking"]["audi"] == pytest.approx((-3.7, -14.2))
    p = study.plot_figure7(series, tmp_path / "f.png", "CG")
    assert p.read_bytes()[:4] == b"\x89PNG"
    paths = study.write_figures(tmp_path, rows, log=lambda m: None)
    assert [x.name for x in paths] == ["figure7_cg_float32_csr-vector.png"]
    many = synthetic({("merge", "blocking"): [(-1.0, None)] * 13}, [f"m{i}" for i in range(13)])
    study.plot_figure7(study.variations(many)["cg", "float32", "csr-vector"], tmp_path / "g.png",
                       "no energy")
    assert (tmp_path / "g.png").stat().st_size > 0


def test_absolute_table_formats():
    rows = [_row("m1", "cublas", "polling", 0.0123, 1.5, n="100", nnz="500", iterations="41",
                 info="0", reps="80", gpu_power_w="120.0", host_cpu_s="0.012", source="x"),
            _row("m1", "dynamic", "blocking", "", None, n="100", nnz="500", status="skipped",
                 error="no GPU | at all")]
    md = study.absolute_markdown(rows)
    assert "## m1" in md and "n = 100, nnz = 500; x" in md
    assert "| cg | float32 | csr-vector | cublas | polling | ok | 0 | 41 | 12.3 | 300 | 1.50 | " \
           "120 | 0.0120 | n/a | - | 80 |" in md
    assert "| skipped |" in md and "no GPU / at all" in md
    amg = _row("m1", "cublas", "polling", 0.004, 0.5, precond="amg", setup_s="0.0615",
               iterations="12", info="0", reps="300")
    md = study.absolute_markdown(rows + [amg])
    assert "| cg+amg | float32 | csr-vector | cublas | polling | ok | 0 | 12 | 4.00 |" in md
    assert "| 61.5 | 300 |" in md


def test_preconditioned_methods_are_groups_of_their_own():
    """Table 2 and Figure 7 compare the variants of one method with one preconditioner: CG with
    AMG is its own group ("cg+amg"), against its own cublas + polling baseline."""
    rows = [_row("m1", "cublas", "polling", 0.010, 1.0), _row("m1", "graph", "polling", 0.005, 0.6),
            _row("m1", "cublas", "polling", 0.004, 0.5, precond="amg"),
            _row("m1", "graph", "polling", 0.003, 0.3, precond="amg")]
    var = study.variations(rows)
    assert set(var) == {("cg", "float32", "csr-vector"), ("cg+amg", "float32", "csr-vector")}
    assert var["cg+amg", "float32", "csr-vector"]["graph", "polling"]["m1"][0] == \
        pytest.approx(-25.0)
    assert var["cg", "float32", "csr-vector"]["graph", "polling"]["m1"][0] == pytest.approx(-50.0)
    assert "## CG+AMG, float32, format csr-vector" in study.table2_markdown(rows)


# --------------------------------------------------------------------------- problems
def test_resolve_problem_kinds(tmp_path):
    p = study.resolve_problem("laplace3d-5")
    assert p.spd and p.build().shape == (125, 125)
    assert study.resolve_problem("convdiff2d-6-pe50").spd is False
    a = study.resolve_problem("A252")
    assert (a.name, a.source, a.spd) == ("A252", "generated laplace3d-252", True)
    ld = study.resolve_problem("ldoor")
    assert (ld.name, ld.source) == ("LDOOR", "SuiteSparse GHS_psdef/ldoor")
    g = study.resolve_problem("Some_Group/some_name")
    assert (g.name, g.spd) == ("some_name", None)
    f = _write_mtx(tmp_path / "mine.mtx", laplace_2d(3))
    assert study.resolve_problem(str(f)).name == "mine"
    with pytest.raises(FileNotFoundError):
        study.resolve_problem(str(tmp_path / "missing.mtx"))
    with pytest.raises(ValueError, match="unknown matrix"):
        study.resolve_problem("nonsense")
    assert [q.name for q in study.paper_problems()] == \
        ["BMWCRA1_1", "CRANKSEG_2", "F1", "INLINE_1", "LDOOR", "AUDIKW_1", "A252"]


def test_make_plan_orders_by_matrix_and_gives_host_no_sync():
    s = study.Settings(methods=("cg",), variants=("host", "cublas", "dynamic"),
                       dtypes=("float64", "float32"))
    plan = study.make_plan(_problems("laplace1d-4", "laplace1d-5"), s)
    keys = [c.key for _, c in plan]
    assert len(keys) == len(set(keys)) == 2 * 2 * (1 + 2 * 2)
    assert keys[0] == ("laplace1d-4", "cg", "none", "host", "-", "float64", "-")
    assert keys[1] == ("laplace1d-4", "cg", "none", "cublas", "polling", "float64", "auto")
    assert [k[0] for k in keys] == ["laplace1d-4"] * 10 + ["laplace1d-5"] * 10
    s.preconds = ("none", "amg")                 # each preconditioner a configuration of its own
    keys = [c.key for _, c in study.make_plan(_problems("laplace1d-4"), s)]
    assert len(keys) == len(set(keys)) == 2 * 2 * (1 + 2 * 2)
    assert keys[5] == ("laplace1d-4", "cg", "amg", "host", "-", "float64", "-")


def test_default_problems_without_and_with_the_shared_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(study.plan._m, "shared_matrix_dir", lambda: None)
    assert [p.name for p in study.default_problems(gpu=False)] == list(study.DEFAULT_GENERATED)
    assert [p.name for p in study.default_problems(gpu=True)] == \
        list(study.DEFAULT_GENERATED + study.DEFAULT_GENERATED_GPU)


def test_default_problems_take_the_shared_spd_matrices(matrix_dir):
    names = [p.name for p in study.default_problems(gpu=False)]
    for spd in ("nos4", "bcsstk16", "FEM_3D_thermal1", "s3rmt3m3", "Laplace3D10"):
        assert spd in names
    for other in ("tuma1", "cage11", "bayer10", "BentPipe2D100"):
        assert other not in names
    assert len(shared_spd_matrices(matrix_dir)) == 10


def test_shared_spd_without_a_readme(tmp_path):
    import gzip
    spd = laplace_2d(4)
    for name, A, sym in (("spd", spd, "symmetric"), ("nonsym", convdiff_2d(4), "general"),
                         ("indef", spd - 5 * sp.eye_array(16), "symmetric")):
        buf = tmp_path / f"{name}.mtx"
        scipy.io.mmwrite(str(buf), sp.coo_matrix(A), symmetry=sym)
        with open(buf, "rb") as f, gzip.open(tmp_path / f"{name}.mtx.gz", "wb") as g:
            g.write(f.read())
        buf.unlink()
    # indef has a negative diagonal: the cheap test refuses it; a README would be exact
    assert [p.name for p in shared_spd_matrices(tmp_path)] == ["spd.mtx.gz"]


def test_convdiff_2d():
    import scipy.sparse.linalg as sla
    A = convdiff_2d(40, peclet=200.0)
    assert A.shape == (1600, 1600) and A.nnz == 5 * 1600 - 4 * 40
    assert abs(A - A.T).max() > 0.1                     # nonsymmetric
    off = A - sp.diags_array(A.diagonal())
    assert off.max() <= 0 and (A.diagonal() > 0).all()  # an M-matrix pattern (upwinding)
    assert abs(convdiff_2d(12, peclet=0.0) - laplace_2d(12)).max() == 0
    b = A @ np.ones(A.shape[0])
    x, info = sla.bicgstab(A, b, rtol=1e-10)
    assert info == 0 and np.allclose(x, 1.0, atol=1e-6)
    with pytest.raises(ValueError):
        convdiff_2d(4, peclet=-1.0)


def test_generators_scale_without_dense_intermediates():
    import time
    from dpsolve.matrices import generate
    t = time.perf_counter()
    A = generate("laplace3d-100")                       # 1e6 rows
    C = generate("convdiff2d-700-pe10")                 # 490,000 rows
    assert A.shape[0] == 10 ** 6 and A.nnz == 7 * 10 ** 6 - 6 * 10 ** 4
    assert C.shape[0] == 490_000
    assert time.perf_counter() - t < 30


def _kron_sum(dims, dtype):
    """The Laplacian as the Kronecker sum of 1-D ones (the textbook construction)."""
    def t(k):
        return sp.diags_array([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)],
                              offsets=[-1, 0, 1], shape=(k, k), dtype=dtype)
    A = None
    for i, k in enumerate(dims):
        left = sp.eye_array(int(np.prod(dims[i + 1:])), dtype=dtype)
        right = sp.eye_array(int(np.prod(dims[:i])), dtype=dtype)
        term = sp.kron(sp.kron(left, t(k)), right, format="csr")
        A = term if A is None else A + term
    A = sp.csr_array(A)
    A.sum_duplicates()
    return A


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
def test_generators_equal_the_kronecker_sums(dtype):
    from dpsolve import matrices
    for dims in ([1], [6], [1, 1], [3, 1], [1, 4], [5, 4], [1, 1, 1], [2, 3, 4], [4, 1, 3]):
        f = {1: matrices.laplace_1d, 2: matrices.laplace_2d, 3: matrices.laplace_3d}[len(dims)]
        A, K = f(*dims, dtype=dtype), _kron_sum(dims, dtype)
        assert A.dtype == dtype and A.shape == K.shape and A.has_canonical_format
        for attr in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(A, attr), getattr(K, attr)), (dims, attr)
    # convection-diffusion: Laplacian + I (x) U_x + U_y (x) I (upwind differences)
    for pe, angle in ((100.0, np.pi / 4), (37.0, 2.0), (5.0, -1.0), (0.0, 0.0)):
        C = matrices.convdiff_2d(5, 4, peclet=pe, angle=angle, dtype=dtype)
        h = 1 / 6
        cx, cy = pe * h * np.cos(angle), pe * h * np.sin(angle)

        def up(k, c):
            return sp.diags_array([abs(c) * np.ones(k), -abs(c) * np.ones(k - 1)],
                                  offsets=[0, -1 if c >= 0 else 1], shape=(k, k), dtype=dtype)
        K = (_kron_sum([5, 4], dtype) + sp.kron(sp.eye_array(4, dtype=dtype), up(5, cx))
             + sp.kron(up(4, cy), sp.eye_array(5, dtype=dtype))).tocsr()
        K.sum_duplicates()
        assert C.dtype == dtype and np.array_equal(C.indices, K.indices)
        assert np.array_equal(C.indptr, K.indptr) and np.array_equal(C.data, K.data.astype(dtype))


def test_generators_build_in_chunks_so_ctrl_c_gets_through(monkeypatch):
    """No NumPy call handles more than CHUNK_ROWS rows, and Python runs between chunks: a
    KeyboardInterrupt (Ctrl-C) raised there stops the build after that chunk."""
    from dpsolve import matrices
    calls = []

    def between():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(matrices, "CHUNK_ROWS", 100)
    monkeypatch.setattr(matrices, "_between_chunks", between)
    with pytest.raises(KeyboardInterrupt):
        matrices.generate("laplace3d-20")               # 8,000 rows: 80 chunks
    assert len(calls) == 3
    calls.clear()
    monkeypatch.setattr(matrices, "_between_chunks", lambda: calls.append(1))
    A = matrices.generate("laplace3d-20")
    assert len(calls) == 80 and A.nnz == 7 * 8000 - 6 * 400


def test_size_guard_in_the_api(monkeypatch):
    from dpsolve import matrices
    monkeypatch.delenv("DPSOLVE_NO_SIZE_GUARD", raising=False)
    monkeypatch.setattr(matrices, "available_memory", lambda: 24 * 10 ** 9)
    assert matrices.generated_size("laplace3d-500") == (125 * 10 ** 6, 873_500_000)
    with pytest.raises(matrices.ProblemTooLargeError, match=r"force=True .*NO_SIZE_GUARD=1"):
        matrices.generate("laplace3d-500")
    with pytest.raises(matrices.ProblemTooLargeError):
        study.resolve_problem("laplace3d-500")
    with pytest.raises(ValueError, match="more than a sparse matrix can index"):
        matrices.generate("laplace1d-99999999999999999999", force=True)
    for name in ("laplace1d-7", "laplace2d-5", "laplace3d-4", "convdiff2d-6-pe3", "A252"):
        n, nnz = matrices.generated_size(name)
        if n < 10 ** 6:
            A = matrices.generate(name)
            assert (A.shape[0], A.nnz) == (n, nnz)
    assert matrices.generated_size("A252") == (16_003_008, 111_640_032)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_generators_store_no_explicit_zeros(k):
    from dpsolve.matrices import generate
    for name, nnz in ((f"laplace1d-{k}", 3 * k - 2), (f"laplace2d-{k}", 5 * k * k - 4 * k),
                      (f"laplace3d-{k}", 7 * k ** 3 - 6 * k * k),
                      (f"convdiff2d-{k}", 5 * k * k - 4 * k)):
        A = generate(name)
        assert A.nnz == nnz and (A.data != 0).all(), name


def test_default_window_fits_the_budget():
    assert study.default_window(13 * 8) == 2.0                # the default plan keeps 2 s
    assert study.default_window(200) == pytest.approx(1.4)
    assert study.default_window(10_000) == 1.0                # never below 1 s
