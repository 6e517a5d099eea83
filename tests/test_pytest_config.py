"""The test suite's own configuration: skip reasons are grouped, one line per distinct reason
(``-rs`` shows each skipped test)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEMO = '''
import pytest

@pytest.mark.skip(reason="reason A")
def test_a1(): pass
@pytest.mark.skip(reason="reason A")
def test_a2(): pass
@pytest.mark.skip(reason="reason A")
def test_a3(): pass
def test_b1(): pytest.skip("reason B")
def test_b2(): pytest.skip("reason B")
def test_ok(): pass
'''


def _pytest(tmp_path, *extra):
    """Run the project's pytest configuration (pyproject.toml and tests/conftest.py) on a demo
    file with five skips at five places, for two reasons."""
    (tmp_path / "test_demo.py").write_text(DEMO)
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                        "--rootdir", str(tmp_path), "-p", "no:cacheprovider", *extra,
                        str(tmp_path / "test_demo.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_skip_reasons_are_grouped(tmp_path):
    out = _pytest(tmp_path)
    assert "SKIPPED [" not in out                       # no line per skipped test
    lines = out.splitlines()
    assert sum("reason A" in ln for ln in lines) == 1
    assert sum("reason B" in ln for ln in lines) == 1
    assert any(ln.split() == ["3", "reason", "A"] for ln in lines)
    assert any(ln.split() == ["2", "reason", "B"] for ln in lines)
    assert "-rs" in out                                 # says how to see each one


def test_dash_rs_shows_every_skip(tmp_path):
    out = _pytest(tmp_path, "-rs")
    assert out.count("SKIPPED [1]") == 5
