"""The Python mirror of ``dpsolve/cuda/include/dpsolve/abi.cuh``: every number the kernels and the
Python side must agree on, with the header's names.

``tests/test_abi.py`` parses the header and fails when a value differs or a name is on one side
only (``compare``). Change a value here and in the header together; everything else in dpsolve
takes these numbers from this module.
"""
from __future__ import annotations

import re
from pathlib import Path

HEADER = Path(__file__).resolve().parent / "include" / "dpsolve" / "abi.cuh"

# launch geometry
DPS_BLOCK = 256
DPS_WARP = 32
DPS_CHUNK = 4096

# W, the row mapping of the dynamic / persistent kernels (CSR-vector passes its lane width)
DYN_ELL = 0
DYN_CSR_SCALAR = 1
DYN_ADAPTIVE = 64

# the result area of a device-driven solve (doubles)
DYN_STATUS_WORDS = 8
DYN_INFO = 0
DYN_ITERS = 1
DYN_STATE = 2
DYN_ERROR = 3
DYN_TAU = 4
DYN_RUNNING = 0.0
DYN_DONE = 1.0
DYN_LAUNCH_FAILED = 2.0

# csr-adaptive's row-bin descriptor: 64-bit words
DPS_BINS_WORDS = 11

# the step status of the host-driven loops
DPS_OK = 0
DPS_MID_STEP = 2
DPS_BREAKDOWN = -10

# check.cu's csr_check flags
DPS_CHECK_INDPTR = 1
DPS_CHECK_COLUMN = 2
DPS_CHECK_UNSORTED = 4
DPS_CHECK_NONFINITE = 8
DPS_CHECK_ENDS = 16

# the device scalar slots of a GPU solve (STATUS must be TAU + 1: graph.cu reads them as a pair)
DPS_SLOTS = 32
DPS_SLOT_SIGMA = 0
DPS_SLOT_PV = 1
DPS_SLOT_ALPHA = 2
DPS_SLOT_ZETA = 3
DPS_SLOT_RR = 4
DPS_SLOT_BETA = 5
DPS_SLOT_TAU = 6
DPS_SLOT_STATUS = 7
DPS_SLOT_ONE = 8
DPS_SLOT_RHO = 9
DPS_SLOT_RHO_PREV = 10
DPS_SLOT_RV = 11
DPS_SLOT_BI_ALPHA = 12
DPS_SLOT_BI_BETA = 13
DPS_SLOT_OMEGA = 14
DPS_SLOT_TS = 15
DPS_SLOT_TT = 16
DPS_SLOT_SS = 17
DPS_SLOT_PENDING = 18

_DEFINE = re.compile(r"^\s*#define\s+([A-Z][A-Z0-9_]*)\s+(\S+)")


def parse(text: str) -> dict:
    """{name: value} of the header's ``#define NAME value`` lines (int or float values)."""
    out = {}
    for line in text.splitlines():
        m = _DEFINE.match(line)
        if m:
            name, value = m.groups()
            out[name] = float(value) if any(c in value for c in ".eE") else int(value, 0)
    return out


def mirror() -> dict:
    """{name: value} of this module's constants (the names the header defines)."""
    return {k: v for k, v in globals().items()
            if k.isupper() and isinstance(v, (int, float)) and not isinstance(v, bool)}


def compare(header: dict, python: dict) -> list[str]:
    """The disagreements between the header's defines and the Python mirror, one line each."""
    problems = []
    for name in sorted(header.keys() | python.keys()):
        if name not in python:
            problems.append(f"{name} is defined in abi.cuh but not in abi.py")
        elif name not in header:
            problems.append(f"{name} is defined in abi.py but not in abi.cuh")
        elif header[name] != python[name] or type(header[name]) is not type(python[name]):
            problems.append(f"{name}: abi.cuh says {header[name]!r}, abi.py says "
                            f"{python[name]!r}")
    if python.get("DPS_SLOT_STATUS") != python.get("DPS_SLOT_TAU", -2) + 1:
        problems.append("DPS_SLOT_STATUS must be DPS_SLOT_TAU + 1 (graph.cu reads them as a pair)")
    slots = [v for k, v in python.items() if k.startswith("DPS_SLOT_")]
    if len(set(slots)) != len(slots) or any(not 0 <= s < python.get("DPS_SLOTS", 0)
                                            for s in slots):
        problems.append("the DPS_SLOT_* values must be distinct and below DPS_SLOTS")
    return problems
