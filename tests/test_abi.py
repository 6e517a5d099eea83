"""The device ABI: dpsolve/cuda/include/dpsolve/abi.cuh and its Python mirror dpsolve/cuda/abi.py
name every number the kernels and the Python side share, once each. These tests fail when the two
disagree, when a kernel source defines one of those names again, or when a Python module keeps a
number of its own instead of taking it from the mirror. Runs everywhere (no GPU)."""
import re

import pytest

from dpsolve.cuda import abi
from dpsolve.cuda._loader import CUDA_DIR

HEADER_TEXT = abi.HEADER.read_text()


def test_header_and_mirror_agree():
    header = abi.parse(HEADER_TEXT)
    assert len(header) >= 40
    assert abi.compare(header, abi.mirror()) == []


@pytest.mark.parametrize("name", sorted(abi.parse(HEADER_TEXT)))
def test_a_changed_header_value_is_caught(name):
    """Mutation: change one define's value in the header text; compare() names it."""
    value = abi.parse(HEADER_TEXT)[name]
    new = value + 1 if isinstance(value, int) else value + 0.5
    pattern = re.compile(rf"^(\s*#define\s+{name}\s+)\S+", re.M)
    text, k = pattern.subn(lambda m: m.group(1) + repr(new), HEADER_TEXT)
    assert k == 1
    problems = abi.compare(abi.parse(text), abi.mirror())
    assert any(p.startswith(f"{name}:") for p in problems), problems


@pytest.mark.parametrize("name", sorted(abi.mirror()))
def test_a_changed_mirror_value_is_caught(name):
    """Mutation: change one value on the Python side; compare() names it."""
    mirror = abi.mirror()
    mirror[name] = mirror[name] + (1 if isinstance(mirror[name], int) else 0.5)
    problems = abi.compare(abi.parse(HEADER_TEXT), mirror)
    assert any(name in p for p in problems), problems


def test_a_name_on_one_side_only_is_caught():
    text = HEADER_TEXT.replace("#define DPS_CHUNK 4096", "")
    assert "DPS_CHUNK is defined in abi.py but not in abi.cuh" in abi.compare(
        abi.parse(text), abi.mirror())
    extra = dict(abi.mirror(), DPS_NEW_THING=3)
    assert "DPS_NEW_THING is defined in abi.py but not in abi.cuh" in abi.compare(
        abi.parse(HEADER_TEXT), extra)


def test_slot_rules_are_checked():
    bad = dict(abi.mirror(), DPS_SLOT_STATUS=abi.DPS_SLOT_TAU + 2)
    assert any("TAU + 1" in p for p in abi.compare(abi.parse(HEADER_TEXT), bad))
    bad = dict(abi.mirror(), DPS_SLOT_PENDING=abi.DPS_SLOT_RHO)
    assert any("distinct" in p for p in abi.compare(abi.parse(HEADER_TEXT), bad))


def test_no_kernel_source_defines_an_abi_name_again():
    names = set(abi.parse(HEADER_TEXT))
    again = []
    for path in sorted(CUDA_DIR.rglob("*.cu*")):
        if path == abi.HEADER:
            continue
        for m in re.finditer(r"^\s*#define\s+(\w+)", path.read_text(), re.M):
            if m.group(1) in names:
                again.append(f"{path.name}: {m.group(1)}")
    assert again == []


def test_python_modules_take_their_numbers_from_the_mirror():
    from dpsolve import _setup
    from dpsolve.backends import _gpu
    from dpsolve.cuda import _loader, ops
    from dpsolve.formats import adaptive
    assert ops.BLOCK == abi.DPS_BLOCK
    assert adaptive.CHUNK == abi.DPS_CHUNK
    assert (ops.DYNAMIC_STATUS, ops.DYNAMIC_DONE, ops.DYNAMIC_LAUNCH_FAILED) == (
        abi.DYN_STATUS_WORDS, abi.DYN_DONE, abi.DYN_LAUNCH_FAILED)
    assert (_loader.DYN_ELL, _loader.DYN_CSR_SCALAR, _loader.DYN_ADAPTIVE) == (
        abi.DYN_ELL, abi.DYN_CSR_SCALAR, abi.DYN_ADAPTIVE)
    for name in ("INDPTR", "COLUMN", "UNSORTED", "NONFINITE", "ENDS"):
        assert getattr(_setup, f"CHECK_{name}") == getattr(abi, f"DPS_CHECK_{name}")
    for name in ("SIGMA", "PV", "ALPHA", "ZETA", "RR", "BETA", "TAU", "STATUS", "ONE", "RHO",
                 "RHO_PREV", "RV", "BI_ALPHA", "BI_BETA", "OMEGA", "TS", "TT", "SS", "PENDING"):
        assert getattr(_gpu, name) == getattr(abi, f"DPS_SLOT_{name}")
    assert _gpu.GpuState.N_SCALARS == abi.DPS_SLOTS
    assert (_gpu.OK, _gpu.CONVERGED_MID_STEP) == (abi.DPS_OK, abi.DPS_MID_STEP)
    assert _gpu.BREAKDOWN == abi.DPS_BREAKDOWN    # every method's step status (no graph modes)


def test_a_header_change_changes_the_compiled_text(tmp_path, monkeypatch):
    """CuPy's kernel cache keys on the source text: the text carries a hash of the headers."""
    from dpsolve.cuda import _loader
    before = _loader.source_text("graph")
    inc = tmp_path / "include" / "dpsolve"
    inc.mkdir(parents=True)
    for p in (CUDA_DIR / "include" / "dpsolve").glob("*.cuh"):
        (inc / p.name).write_text(p.read_text())
    (inc / "abi.cuh").write_text(HEADER_TEXT.replace("#define DPS_BLOCK 256",
                                                     "#define DPS_BLOCK 128"))
    monkeypatch.setattr(_loader, "INCLUDE_DIR", tmp_path / "include")
    _loader.headers_digest.cache_clear()
    try:
        assert _loader.source_text("graph") != before
    finally:
        _loader.headers_digest.cache_clear()


# --- the by-value argument structs of the device-driven solves (args.cuh <-> abi.ARGS) ------------

ARGS_TEXT = abi.ARGS_HEADER.read_text()


def test_argument_structs_agree():
    header = abi.parse_structs(ARGS_TEXT)
    assert set(header) == {"PrecondArgs", "CgArgs", "BicgArgs", "StabArgs"}
    # the solves' structs nest the preconditioner's device face
    assert all(("pc", "PrecondArgs") in header[s] for s in ("CgArgs", "BicgArgs", "StabArgs"))
    assert abi.compare_structs(header, abi.ARGS) == []
    for name, fields in abi.ARGS.items():
        dt = abi.args_dtype(name)
        assert dt.names == tuple(f for f, _ in fields)
        # C layout: ints packed, the double and every pointer 8-byte aligned, size a multiple of 8
        assert all(dt.fields[f][1] % 8 == 0 for f, k in fields if k != "i4")
        assert dt.itemsize % 8 == 0


@pytest.mark.parametrize("name", sorted(set(abi.ARGS) - {"PrecondArgs"}))
def test_a_changed_struct_is_caught(name):
    """Mutations of either side: two fields swapped in the header, a field dropped from the
    mirror, a field's kind changed; compare_structs names the struct each time."""
    header = abi.parse_structs(ARGS_TEXT)
    body = ARGS_TEXT[ARGS_TEXT.index(f"struct {name} {{"):]
    body = body[:body.index("};")]
    lines = [ln for ln in body.splitlines() if re.match(r"\s+T\* \w+;", ln)]
    a, b = lines[0], lines[1]
    swapped = ARGS_TEXT.replace(body, body.replace(a, "@@").replace(b, a).replace("@@", b))
    assert any(p.startswith(f"{name} field") for p in
               abi.compare_structs(abi.parse_structs(swapped), abi.ARGS))
    dropped = dict(abi.ARGS, **{name: abi.ARGS[name][:-1]})
    assert any(p.startswith(f"{name} field") for p in abi.compare_structs(header, dropped))
    retyped = dict(abi.ARGS, **{name: (("n", "f8"),) + abi.ARGS[name][1:]})
    assert any(p.startswith(f"{name} field 0") for p in abi.compare_structs(header, retyped))


def test_a_changed_nested_struct_is_caught():
    """A field added to PrecondArgs on one side only, or the nested field's kind changed, is
    caught; the nested record is laid out where C puts it (8-byte aligned, its own size)."""
    header = abi.parse_structs(ARGS_TEXT)
    field = "    const T* inv_diag;"
    grown = ARGS_TEXT.replace(field, field + "\n    const T* extra;")
    assert any(p.startswith("PrecondArgs field 1") for p in
               abi.compare_structs(abi.parse_structs(grown), abi.ARGS))
    flat = dict(abi.ARGS, CgArgs=tuple((f, "ptr" if k == "PrecondArgs" else k)
                                       for f, k in abi.ARGS["CgArgs"]))
    assert any(p.startswith("CgArgs field") for p in abi.compare_structs(header, flat))
    dt = abi.args_dtype("CgArgs")
    assert dt.fields["pc"][0] == abi.args_dtype("PrecondArgs") and dt.fields["pc"][1] % 8 == 0


def test_pack_lays_out_every_field():
    import numpy as np
    x = np.arange(3.0)
    vals = {f: (x if k == "ptr" else 7) for f, k in abi.ARGS["StabArgs"]}
    vals.update(atol=0.5, hist=None, bins=np.uint64(0), pc=abi.pack("PrecondArgs", inv_diag=x))
    rec = abi.pack("StabArgs", **vals)
    assert rec["n"] == 7 and rec["atol"] == 0.5 and rec["x"] == x.ctypes.data
    assert rec["hist"] == 0 and rec["bins"] == 0
    assert rec["pc"]["inv_diag"] == x.ctypes.data
    assert abi.pack("StabArgs", **dict(vals, pc=None))["pc"]["inv_diag"] == 0
    with pytest.raises(TypeError, match="expected a PrecondArgs record"):
        abi.pack("StabArgs", **dict(vals, pc=x))
    with pytest.raises(TypeError, match="missing fields.*'x'"):
        abi.pack("StabArgs", **{k: v for k, v in vals.items() if k != "x"})
    with pytest.raises(TypeError, match="StabArgs.x: expected a device array"):
        abi.pack("StabArgs", **dict(vals, x="not an array"))
