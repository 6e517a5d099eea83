"""Shared fixtures: GPU detection (tests marked ``gpu`` skip with the reason) and the shared matrices."""
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
        pytest.skip("the shared matrices (../shared/matrices) are not present")
    return d
