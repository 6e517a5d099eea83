"""Shared fixtures: GPU detection (tests marked ``gpu`` skip with the reason) and the shared matrices."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpsolve._device import status as device_status

ROOT = Path(__file__).resolve().parents[1]


def shared_matrix_dir() -> Path | None:
    """../shared/matrices beside the checkout, or a copy named by DPSOLVE_SHARED_MATRICES
    (the GPU machine gets a git-ignored copy at .matrices/)."""
    for cand in (os.environ.get("DPSOLVE_SHARED_MATRICES"), ROOT / ".matrices",
                 ROOT.parent / "shared" / "matrices"):
        if cand and Path(cand).is_dir() and any(Path(cand).glob("*.mtx.gz")):
            return Path(cand)
    return None


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
        pytest.skip("the shared matrices (../shared/matrices) are not present")
    return d
