"""Shared fixtures: GPU detection (tests marked ``gpu`` skip with the reason), the shared matrices,
and the skip summary (one line per distinct skip reason)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dpsolve._device import status as device_status
from dpsolve.matrices import shared_matrix_dir

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    dev = device_status()
    if dev.ok:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA device: {dev.reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def matrix_dir():
    d = shared_matrix_dir()
    if d is None:
        pytest.skip("no shared matrices (no *.mtx.gz in .matrices/ or ../shared/matrices "
                    "beside the checkout): set DPSOLVE_SHARED_MATRICES=/path/to/folder")
    return d


@pytest.fixture
def unscaled_rhs(monkeypatch):
    """dpsolve's scaling of an extreme b and A (``_system.scale_rhs``, ``scale_matrix``) turned
    off: the tests of the non-finite stop (tests/nonfinite_cases.py) reach an iteration's
    overflow through b's or A's scale, which dpsolve otherwise scales away (and then solves those
    systems)."""
    from dpsolve import _system
    monkeypatch.setattr(_system, "SCALE_RHS", False)
    monkeypatch.setattr(_system, "SCALE_MATRIX", False)


@pytest.fixture
def broken_kernel(tmp_path, monkeypatch):
    """A CUDA source "broken" registered with the loader, whose line 3 does not compile
    (an undefined symbol): the compile-error tests of nvcc and NVRTC."""
    from dpsolve.cuda import _loader
    bad = tmp_path / "broken.cu"
    bad.write_text("#include <dpsolve/common.cuh>\n"
                   "template <typename T> __global__ void k(T* x) {\n"
                   "    x[0] = undefined_symbol;\n"
                   "}\n")
    monkeypatch.setitem(_loader.SOURCES, "broken", _loader.Source(str(bad), ("k<{T}>",)))
    return bad


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per distinct skip reason, with its count (a CPU machine skips every GPU test for
    the same reason); ``-rs`` (or ``-ra``) lists each skipped test instead."""
    chars = config.getoption("reportchars") or ""
    if any(c in chars for c in "saA"):
        return
    counts = {}
    for rep in terminalreporter.stats.get("skipped", []):
        longrepr = rep.longrepr
        reason = (longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3
                  else str(longrepr))
        reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
        counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return
    terminalreporter.write_sep("=", "skipped, by reason (-rs lists each test)")
    width = len(str(max(counts.values())))
    for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{n:>{width}} {reason}")
