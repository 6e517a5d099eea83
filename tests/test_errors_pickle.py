"""Every exception (and warning) class dpsolve defines survives pickling: a process pool sends
exceptions between processes by pickle, and one that cannot be rebuilt breaks the pool.

The classes are discovered, not listed: every module of the package that imports on this machine
is searched, so a new class is covered without touching this file."""
from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import pkgutil

import pytest

import dpsolve

# modules that need what a CPU machine may lack (CuPy, mpi4py, a CUDA device) import or not;
# the error classes live in modules that always import, which the test checks
ALWAYS = ("dpsolve._errors", "dpsolve.matrices", "dpsolve.fetch", "dpsolve.distributed.solvers")


def _modules():
    names = [m.name for m in pkgutil.walk_packages(dpsolve.__path__, "dpsolve.")
             if not m.name.endswith(".__main__")]          # that one runs the command line
    mods = []
    for name in names:
        try:
            mods.append(importlib.import_module(name))
        except Exception:               # an optional dependency missing here
            assert name not in ALWAYS, f"{name} did not import"
    return mods


def _classes():
    found = {}
    for mod in _modules():
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("dpsolve"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


CLASSES = _classes()


def test_the_discovery_finds_the_known_classes():
    for name in ("dpsolve._errors.BackendUnavailableError", "dpsolve.matrices.MatrixFileError",
                 "dpsolve.matrices.ProblemTooLargeError", "dpsolve.fetch.FetchError",
                 "dpsolve._errors.DistributedError", "dpsolve._errors.DpsolveWarning"):
        assert name in CLASSES


def _instance(cls):
    """An instance made through the class's own __init__, each required argument a distinct
    value (a line number where the parameter is one)."""
    params = [p for p in inspect.signature(cls.__init__).parameters.values()][1:]
    args = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        args.append(7 if p.name == "line" else f"<{p.name}>")
    if not args and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        args = ["the message"]
    e = cls(*args)
    e.extra = {"set": "after construction"}      # as dpsolve.distributed's everywhere() does
    return e


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_round_trip(name):
    e = _instance(CLASSES[name])
    for again in (pickle.loads(pickle.dumps(e)), copy.copy(e)):
        assert type(again) is type(e)
        assert str(again) == str(e) and again.args == e.args
        assert vars(again) == vars(e)


def test_round_trip_keeps_every_argument():
    from dpsolve.matrices import MatrixFileError
    e = MatrixFileError("/x/m.tar.gz", "invalid value", line=4, member=True)
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == "/x/m.tar.gz (its .mtx member), line 4: invalid value"
    assert (again.path, again.line, again.detail, again.member) == ("/x/m.tar.gz", 4,
                                                                     "invalid value", True)
    b = pickle.loads(pickle.dumps(dpsolve.BackendUnavailableError("cublas", "no device")))
    assert (b.variant, b.reason, str(b)) == ("cublas", "no device",
                                             "variant 'cublas' cannot run here: no device")
