"""``dpsolve warm`` on the CPU: the modules it names (every source, a lazy one kernel by kernel),
its steps and their progress lines with ``compile_all`` stubbed, a failing step counted and
named, and the command line's errors (no GPU here: one line, exit status 1)."""
from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from dpsolve import _device, warm
from dpsolve.cuda import _loader


def test_every_module_once_a_dtype():
    specs = warm.module_specs(["float64", "complex64"])
    per_dtype = sum(len(s.expressions) if s.lazy else 1 for s in _loader.SOURCES.values())
    assert len(specs) == 2 * per_dtype and len(set(specs)) == len(specs)
    keys = [_loader._module_key(0, *spec[:2], expression=spec[2] if len(spec) > 2 else None)
            for spec in specs]                 # each a spec compile_all takes
    assert len(keys) == len(set(keys)) == len(specs)     # a module a spec: progress counts modules
    assert {s[0] for s in specs} == set(_loader.SOURCES)


class Parts(list):
    threads = None


@pytest.fixture
def on_a_gpu(monkeypatch):
    monkeypatch.setattr(_device, "status", lambda: types.SimpleNamespace(ok=True, reason=""))
    monkeypatch.setattr(_loader, "COMPILE_THREADS", _loader.COMPILE_THREADS)
    parts = Parts()

    def compile_all(part, report=None):
        parts.append(list(part))
        parts.threads = _loader.COMPILE_THREADS             # the pool's size while it runs
        for s in part:
            error = _loader.KernelCompileError("broken.cu: an error") if s[0] == "broken" else None
            report((0, s[0], s[1].str, False, (), None), error)
    monkeypatch.setattr(_loader, "compile_all", compile_all)
    return parts


def test_warm_compiles_every_module_with_progress(on_a_gpu):
    lines, before = [], _loader.COMPILE_THREADS
    assert warm.warm(["float32"], threads=3, samples=False, say=lines.append) == 0
    compiled = [s for part in on_a_gpu for s in part]
    assert compiled == warm.module_specs(["float32"])
    assert on_a_gpu.threads == 3 and _loader.COMPILE_THREADS == before != 3    # for warm alone
    assert lines[0].startswith(f"compiling {len(compiled)} modules (float32) on 3 threads")
    assert len(on_a_gpu) == 1                 # one pool for them all: no wait a tenth
    progress = [line for line in lines if "modules," in line]
    assert 10 <= len(progress) <= 11          # a line a tenth, and the last
    assert progress[-1].strip().startswith(f"{len(compiled)}/{len(compiled)} modules")
    assert lines[-1].startswith("warm: ") and lines[-1].endswith("0 step(s) failed")


def test_a_failing_step_is_named_and_counted(on_a_gpu, monkeypatch):
    monkeypatch.setitem(_loader.SOURCES, "broken", _loader.Source("broken.cu", ("k<{T}>",)))
    lines = []
    assert warm.warm(["float64"], samples=False, say=lines.append) == 1
    assert any("FAILED" in line and "broken.cu: an error" in line for line in lines)
    assert lines[-1].endswith("1 step(s) failed")


def test_no_gpu_is_one_line_and_status_1():
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed: the command would compile every kernel")
    except ImportError:
        pass
    res = subprocess.run([sys.executable, "-m", "dpsolve", "warm"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().startswith("dpsolve warm: error: no usable CUDA device")
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["--dtypes", "float16"], ["--threads", "0"]])
def test_bad_arguments_are_status_2(argv):
    res = subprocess.run([sys.executable, "-m", "dpsolve", "warm", *argv], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "dpsolve warm: error: argument" in res.stderr


def test_dtypes_default_to_the_real_ones():
    from dpsolve.cli import build_parser
    args = build_parser().parse_args(["warm"])
    assert tuple(args.dtypes) == warm.DEFAULT_DTYPES and args.threads is None
    assert not args.no_samples
    assert np.dtype(args.dtypes[0]) == np.float64
