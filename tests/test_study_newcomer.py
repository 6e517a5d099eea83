"""What a newcomer meets (issue 29, item 17): without the shared matrices the study and the tests
say where they looked and which variable to set; on a machine without a GPU the study draws the
host results (time and energy per solve per matrix, energy only where it was measured), and
table2.md links only files that exist."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_study import TINY, _problems, host_settings

from dpsolve import matrices, measure, study

ROOT = matrices.ROOT


def test_the_study_says_where_it_looked_for_the_shared_matrices(monkeypatch, capsys):
    monkeypatch.setattr(matrices, "shared_matrix_dir", lambda: None)
    assert [p.name for p in study.default_problems(gpu=False)] == list(study.DEFAULT_GENERATED)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    assert "DPSOLVE_SHARED_MATRICES" in lines[0]
    assert str(ROOT / ".matrices") in lines[0]
    assert str(ROOT.parent / "shared" / "matrices") in lines[0]


def test_the_study_says_nothing_when_the_shared_matrices_are_there(matrix_dir, capsys):
    study.default_problems(gpu=False)
    assert capsys.readouterr().out == ""


def test_the_tests_skip_reason_names_the_variable(tmp_path):
    """The ``matrix_dir`` fixture of tests/conftest.py, where no shared folder is found."""
    (tmp_path / "no_shared_matrices.py").write_text(
        "import dpsolve.matrices\ndpsolve.matrices.shared_matrix_dir = lambda: None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no_shared_matrices", "-p", "no:cacheprovider",
         "-q", "-rs", "tests/test_study.py::test_default_problems_take_the_shared_spd_matrices"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "1 skipped" in p.stdout, p.stdout + p.stderr
    assert "DPSOLVE_SHARED_MATRICES" in p.stdout, p.stdout


def _links(md: str) -> set:
    """The files a Markdown text points at: [text](file) links and bare *.png / *.md names."""
    return set(re.findall(r"\]\(([^)\s]+)\)", md)) | set(re.findall(r"[\w*.-]+\.(?:png|md)\b", md))


def test_a_host_study_draws_its_results_and_links_only_files_that_exist(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(measure, "_default_rapl", measure.no_rapl)      # no energy, anywhere
    monkeypatch.setattr(measure, "_nvml", lambda: None)
    out = tmp_path / "out"
    study.run_study(_problems("laplace2d-8", "laplace1d-30"), host_settings(), out,
                    progress=False, log=lambda m: None)
    png = out / study.HOST_FIGURE
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    for name in ("table2.md", "absolute.md"):
        md = (out / name).read_text()
        assert _links(md) and all((out / f).is_file() for f in _links(md)), (name, _links(md))
    assert f"[{study.HOST_FIGURE}]({study.HOST_FIGURE})" in (out / "table2.md").read_text()
    assert "not measured on this machine" in (out / "absolute.md").read_text()
    # start over: the figure goes with the results it drew
    study.run_study(_problems("laplace1d-5"), study.Settings(variants=("cublas",), **TINY), out,
                    restart=True, progress=False, log=lambda m: None)
    assert not png.exists() and study.HOST_FIGURE not in (out / "table2.md").read_text()


def _texts(ax):
    return " ".join(t.get_text() for t in ax.texts)


def test_the_host_figure_draws_energy_only_where_it_was_measured():
    pytest.importorskip("matplotlib")
    series = {("cg", "float64"): {"a": (0.002, None), "b": (0.5, None)},
              ("bicgstab", "float64"): {"a": (0.001, None), "b": (0.3, None)}}
    fig = study.host_figure(series)
    t, e = fig.axes
    assert [round(p.get_height(), 9) for p in t.patches] == [1.0, 300.0, 2.0, 500.0]   # ms
    assert t.get_ylabel() == "time per solve (ms, log scale)" and t.get_yscale() == "log"
    assert not e.patches and "not measured on this machine" in _texts(e)
    assert [x.get_text() for x in fig.legends[0].get_texts()] == ["BICGSTAB float64",
                                                                  "CG float64"]
    assert fig.get_suptitle().startswith("Host variant")
    series[("cg", "float64")] = {"a": (0.002, 0.05), "b": (0.5, 12.0)}
    e = study.host_figure(series).axes[1]
    assert [p.get_height() for p in e.patches] == [0.05, 12.0]
    assert "J" in e.get_ylabel() and "not measured" not in _texts(e)
    assert _texts(e).split().count("n/a") == 2            # BiCGStab's energy, on a and b


def test_table2_links_the_figures_it_is_given():
    md = study.table2_markdown([], figures=["figure7_cg_float64_auto.png"])
    assert "[figure7_cg_float64_auto.png](figure7_cg_float64_auto.png)" in md
    assert _links(md) == {"figure7_cg_float64_auto.png", "absolute.md"}
    assert _links(study.table2_markdown([])) == {"absolute.md"}
