"""The Python mirror of ``dpsolve/cuda/include/dpsolve/abi.cuh``: every number the kernels and the
Python side must agree on, with the header's names.

``tests/test_abi.py`` parses the header and fails when a value differs or a name is on one side
only (``compare``). Change a value here and in the header together; everything else in dpsolve
takes these numbers from this module.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

HEADER = Path(__file__).resolve().parent / "include" / "dpsolve" / "abi.cuh"
ARGS_HEADER = HEADER.with_name("args.cuh")

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
DYN_TOL = 5
DYN_RES2 = 6
DYN_BB = 7
DYN_RUNNING = 0.0
DYN_DONE = 1.0
DYN_LAUNCH_FAILED = 2.0

# CgArgs.flags: the prepared call's fast path
DPS_FAST_ZERO_X = 1
DPS_FAST_TOL = 2
DPS_FAST_RESID = 4

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
# csr_check's exponent words (biased), and the window of A's largest exponent solved unscaled
DPS_EXP_BIAS = 4096
DPS_MATRIX_WINDOW_F32 = 32
DPS_MATRIX_WINDOW_F64 = 256

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
# the single-reduction CG's (cg1.cu): reduced by one all-reduce of the three, so adjacent
DPS_SLOT_CG1_GAMMA = 19
DPS_SLOT_CG1_DELTA = 20
DPS_SLOT_CG1_RR = 21

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
    g = python.get("DPS_SLOT_CG1_GAMMA", -3)
    if (python.get("DPS_SLOT_CG1_DELTA"), python.get("DPS_SLOT_CG1_RR")) != (g + 1, g + 2):
        problems.append("DPS_SLOT_CG1_DELTA and DPS_SLOT_CG1_RR must follow DPS_SLOT_CG1_GAMMA "
                        "(cg1 all-reduces the three as one view)")
    slots = [v for k, v in python.items() if k.startswith("DPS_SLOT_")]
    if len(set(slots)) != len(slots) or any(not 0 <= s < python.get("DPS_SLOTS", 0)
                                            for s in slots):
        problems.append("the DPS_SLOT_* values must be distinct and below DPS_SLOTS")
    return problems


# --- the device-driven solves' by-value argument structs (args.cuh), field for field: "i4" an int,
# "f8" a double, "ptr" any pointer (a 64-bit word; None packs as nullptr), or the name of another
# struct here, nested (PrecondArgs: the device face of a pointwise preconditioner, dpsolve/precond)
_PRECOND = "inv_diag:ptr"
_CG = ("n:i4 width:i4 maxiter:i4 flags:i4 atol:f8 rtol:f8 indptr:ptr indices:ptr data:ptr "
       "b:ptr pc:PrecondArgs x:ptr r:ptr z:ptr p0:ptr p1:ptr v:ptr part_pv:ptr part_rz:ptr "
       "part_rr:ptr status:ptr hist:ptr bins:ptr guard:ptr")
_BICG = ("n:i4 width:i4 width_h:i4 maxiter:i4 atol:f8 indptr:ptr indices:ptr data:ptr "
         "h_indptr:ptr h_indices:ptr h_data:ptr b:ptr pc:PrecondArgs x:ptr r:ptr rt:ptr z:ptr "
         "zt:ptr p0:ptr p1:ptr pt0:ptr pt1:ptr q:ptr qt:ptr part_rho:ptr part_rr:ptr part_rv:ptr "
         "status:ptr hist:ptr bins:ptr h_bins:ptr")
_STAB = ("n:i4 width:i4 maxiter:i4 atol:f8 indptr:ptr indices:ptr data:ptr b:ptr pc:PrecondArgs "
         "x:ptr r:ptr rt:ptr p0:ptr p1:ptr v0:ptr v1:ptr s:ptr t:ptr part_rho:ptr part_rr:ptr "
         "part_rv:ptr part_ss:ptr part_ts:ptr part_tt:ptr status:ptr hist:ptr bins:ptr")
ARGS = {name: tuple(tuple(f.split(":")) for f in spec.split())
        for name, spec in (("PrecondArgs", _PRECOND), ("CgArgs", _CG), ("BicgArgs", _BICG),
                           ("StabArgs", _STAB))}

_STRUCT = re.compile(r"struct\s+(\w+Args)\s*\{(.*?)\n\};", re.S)


def parse_structs(text: str) -> dict:
    """{struct: ((field, kind), ...)} of args.cuh: kind "ptr" for a pointer, "i4" (int), "f8"
    (double), or the name of a struct defined earlier in the file (``PrecondArgs<T> pc;``,
    nested); anything else is a ValueError naming the line."""
    out = {}
    code_only = re.sub(r"//[^\n]*", "", text)
    for name, body in _STRUCT.findall(code_only):
        fields = []
        for line in body.splitlines():
            code = line.strip()
            if not code:
                continue
            if not code.endswith(";"):
                raise ValueError(f"args.cuh: {name}: cannot read {code!r}")
            code = code[:-1].removeprefix("const ").strip()
            if "*" in code:                                     # `T* x`, `const int* indptr`
                ctype, _, names = code.rpartition("*")
                kind = "ptr"
            else:                                               # `int n, width`, `double atol`
                ctype, _, names = code.partition(" ")
                kind = {"int": "i4", "double": "f8"}.get(ctype)
                if kind is None and ctype.split("<")[0] in out:        # a nested struct
                    kind = ctype.split("<")[0]
            if kind is None or not ctype.strip():
                raise ValueError(f"args.cuh: {name}: unsupported field type {ctype!r}")
            fields += [(nm.strip(), kind) for nm in names.split(",")]
        out[name] = tuple(fields)
    return out


def compare_structs(header: dict, python: dict) -> list[str]:
    """The disagreements between args.cuh's structs and ARGS, one line each."""
    problems = []
    for name in sorted(header.keys() | python.keys()):
        if name not in python or name not in header:
            where = "args.cuh" if name in header else "abi.py"
            problems.append(f"struct {name} is only in {where}")
            continue
        h, p = header[name], python[name]
        for i in range(max(len(h), len(p))):
            hf = h[i] if i < len(h) else None
            pf = p[i] if i < len(p) else None
            if hf != pf:
                problems.append(f"{name} field {i}: args.cuh has {hf}, abi.py has {pf}")
                break
    return problems


@functools.lru_cache(maxsize=None)
def args_dtype(name: str):
    """The NumPy record type of struct ``name``, laid out as the C compiler lays it out."""
    import numpy as np
    return np.dtype([(f, np.uint64 if k == "ptr" else args_dtype(k) if k in ARGS else k)
                     for f, k in ARGS[name]], align=True)


def pack(name: str, **values):
    """One by-value kernel argument: struct ``name`` with every field given (device arrays for
    pointers, None for nullptr; a nested struct as a record ``pack`` made, or None for all zeros);
    a missing or unknown field is a TypeError. (~10 us: once per device-driven solve.)"""
    import numpy as np
    fields = ARGS[name]
    if len(values) != len(fields) or any(f not in values for f, _ in fields):
        known = {f for f, _ in fields}
        raise TypeError(f"{name}: missing fields {sorted(known - values.keys())}, unknown "
                        f"{sorted(values.keys() - known)}")
    row = tuple(_address(values[f], name, f) if k == "ptr" else
                (_nested(values[f], k) if k in ARGS else values[f]) for f, k in fields)
    return np.array(row, args_dtype(name))[()]


def _nested(v, struct):
    """A nested struct field's value: a record of ``struct`` (from ``pack``), None = all zeros."""
    import numpy as np
    if v is None:
        return np.zeros((), args_dtype(struct))[()]
    if getattr(v, "dtype", None) != args_dtype(struct):
        raise TypeError(f"expected a {struct} record (dpsolve.cuda.abi.pack), got {v!r}")
    return v


def _address(v, struct, field):
    """A pointer field's value: None -> nullptr, a CuPy array's address (or any
    ``__cuda_array_interface__``), an integer as it is; a NumPy array's (the CPU tests' stand-ins
    for device arrays)."""
    if v is None:
        return 0
    try:
        return v.data.ptr                      # CuPy: the fast path (once per field per solve)
    except AttributeError:
        pass
    import numpy as np
    if isinstance(v, (int, np.integer)):
        return int(v)
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    if isinstance(v, np.ndarray):
        return v.ctypes.data
    raise TypeError(f"{struct}.{field}: expected a device array or None, got {type(v).__name__}")
