"""Is there a usable CUDA device here, and if not, why not.

The probe runs once per process. It never raises: callers read ``status().ok`` and ``.reason``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

MIN_COMPUTE_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class DeviceStatus:
    ok: bool
    reason: str | None = None
    name: str | None = None
    compute_capability: tuple | None = None
    driver_cuda_version: str | None = None
    runtime_cuda_version: str | None = None
    cupy_version: str | None = None
    multiprocessors: int | None = None
    cooperative_launch: bool = False          # cudaDevAttrCooperativeLaunch (grid.sync kernels)


def _ver(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


@functools.lru_cache(maxsize=None)
def status() -> DeviceStatus:
    try:
        import cupy
    except ImportError as e:
        return DeviceStatus(False, f"CuPy is not installed ({e}); "
                                   "install dpsolve[cuda13] or dpsolve[cuda12]")
    except Exception as e:  # a broken CuPy install raises other things
        return DeviceStatus(False, f"CuPy failed to import: {e}")
    rt = cupy.cuda.runtime
    try:
        driver = rt.driverGetVersion()
    except Exception as e:
        return DeviceStatus(False, f"no NVIDIA driver found: {e}", cupy_version=cupy.__version__)
    runtime = rt.runtimeGetVersion()
    base = dict(driver_cuda_version=_ver(driver) if driver else None,
                runtime_cuda_version=_ver(runtime), cupy_version=cupy.__version__)
    if driver == 0:
        return DeviceStatus(False, "no NVIDIA driver is loaded", **base)
    if driver // 1000 < runtime // 1000:
        return DeviceStatus(False,
                            f"the NVIDIA driver is too old: it supports CUDA {_ver(driver)}, "
                            f"but this CuPy needs CUDA {runtime // 1000}.x", **base)
    try:
        count = rt.getDeviceCount()
    except Exception as e:
        msg = str(e)
        if "InsufficientDriver" in msg or "35" in msg.split(":")[0]:
            return DeviceStatus(False, f"the NVIDIA driver is too old for this CuPy: {msg}", **base)
        return DeviceStatus(False, f"no CUDA device found: {msg}", **base)
    if count == 0:
        return DeviceStatus(False, "no CUDA device found (the driver reports 0 devices)", **base)
    dev = cupy.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    cc = (props["major"], props["minor"])
    base.update(name=name, compute_capability=cc, multiprocessors=props["multiProcessorCount"],
                cooperative_launch=bool(props.get("cooperativeLaunch", 0)))
    if cc < MIN_COMPUTE_CAPABILITY:
        return DeviceStatus(False, f"{name} has compute capability {cc[0]}.{cc[1]}; dpsolve needs "
                            f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} or newer",
                            **base)
    return DeviceStatus(True, None, **base)
