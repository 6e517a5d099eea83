"""Host-side measurement: process CPU time, RAPL host energy, and NVML GPU energy.

* CPU time is ``time.process_time()`` (user + system of this process).
* Host energy comes from RAPL under ``/sys/class/powercap`` only where it exists and is readable;
  counters wrap at ``max_energy_range_uj`` and the wrap is handled. Elsewhere it is ``None``.
* GPU energy comes from NVML's total-energy counter (mJ since driver load, Volta and newer).
"""
from __future__ import annotations

import functools
import glob
import os
import time

POWERCAP = "/sys/class/powercap"


# --------------------------------------------------------------------------- RAPL
def _rapl_domains(root=POWERCAP):
    """Top-level package domains (intel-rapl:0, intel-rapl:1, ...) that can be read."""
    out = []
    for d in sorted(glob.glob(os.path.join(root, "intel-rapl:*"))):
        if os.path.basename(d).count(":") != 1:       # skip sub-domains (core, uncore, dram)
            continue
        try:
            with open(os.path.join(d, "energy_uj")) as f:
                int(f.read())
            with open(os.path.join(d, "max_energy_range_uj")) as f:
                rng = int(f.read())
        except (OSError, ValueError):
            continue
        out.append((d, rng))
    return out


class RaplMeter:
    """Reads package energy from RAPL; ``available`` is False where it cannot be read."""

    def __init__(self, root=POWERCAP):
        self.domains = _rapl_domains(root)
        self.available = bool(self.domains)

    def read(self):
        vals = []
        for d, _ in self.domains:
            with open(os.path.join(d, "energy_uj")) as f:
                vals.append(int(f.read()))
        return vals

    def joules_between(self, before, after):
        total = 0
        for (_, rng), a, b in zip(self.domains, before, after):
            delta = b - a
            if delta < 0:               # the counter wrapped once
                delta += rng
            total += delta
        return total * 1e-6


# --------------------------------------------------------------------------- NVML
@functools.lru_cache(maxsize=None)
def _nvml():
    """The pynvml module, initialised, or None where NVML is unusable."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def nvml_handle(device_index=0):
    nv = _nvml()
    if nv is None:
        return None
    try:
        return nv.nvmlDeviceGetHandleByIndex(device_index)
    except Exception:
        return None


def nvml_at_pci(pci: str) -> tuple[int, str]:
    """NVML's (index, UUID) of the GPU at PCI bus id ``pci``. NVML numbers the host's GPUs in
    PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so a CUDA device index is not NVML's wherever
    a process sees a subset of the GPUs (one rank per GPU, a scheduler's allocation): the bus id
    is what both name alike. Raises where NVML is unusable or has no GPU there."""
    nv = _nvml()
    if nv is None:
        raise RuntimeError("NVML is not available")
    h = nv.nvmlDeviceGetHandleByPciBusId(pci)
    uuid = nv.nvmlDeviceGetUUID(h)
    return int(nv.nvmlDeviceGetIndex(h)), uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def nvml_index_of(cuda_device: int | None = None) -> int:
    """NVML's index of this process's CUDA device ``cuda_device`` (None: CuPy's current one; 0
    without CuPy), by PCI bus id (:func:`nvml_at_pci`); where that lookup is impossible, the CUDA
    index itself."""
    try:
        import cupy
    except ImportError:
        return cuda_device or 0
    if cuda_device is None:
        cuda_device = cupy.cuda.Device().id
    try:
        return nvml_at_pci(cupy.cuda.runtime.deviceGetPCIBusId(cuda_device))[0]
    except Exception:
        return cuda_device


def nvml_energy_support(device_index=0):
    """(supported, detail) for NVML's total-energy counter on this device."""
    nv = _nvml()
    if nv is None:
        return False, "NVML is not available (no NVIDIA driver, or nvidia-ml-py missing)"
    h = nvml_handle(device_index)
    if h is None:
        return False, f"NVML has no device {device_index}"
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
        return True, "total-energy counter (mJ)"
    except Exception as e:
        try:
            nv.nvmlDeviceGetPowerUsage(h)
            return False, f"no energy counter ({e}); power sampling available"
        except Exception as e2:
            return False, f"no energy counter and no power reading ({e2})"


class Stopwatch:
    """Wall time, process CPU time and (where readable) RAPL energy around a region."""

    def __init__(self, rapl: RaplMeter | None = None):
        self.rapl = rapl if rapl is not None else _default_rapl()

    def __enter__(self):
        self._e0 = self.rapl.read() if self.rapl.available else None
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._t0
        self.cpu = time.process_time() - self._c0
        self.host_energy = (self.rapl.joules_between(self._e0, self.rapl.read())
                            if self._e0 is not None else None)
        return False


@functools.lru_cache(maxsize=None)
def _default_rapl():
    return RaplMeter()


class _NoRapl:
    available = False


def no_rapl():
    """A RAPL meter that reads nothing: a Stopwatch of wall and CPU time only."""
    return _NoRapl()


@functools.lru_cache(maxsize=None)
def _energy_mode(device_index):
    """"counter", "sampling" or None for a device: probed once (an NVML read costs ms)."""
    nv, h = _nvml(), nvml_handle(device_index)
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
        return "counter"
    except Exception:
        try:
            nv.nvmlDeviceGetPowerUsage(h)
            return "sampling"
        except Exception:
            return None


class GpuEnergyMeter:
    """GPU energy over a region: NVML's total-energy counter where the GPU has one, else a
    background thread sampling NVML power every ``interval`` seconds (trapezoid rule).

    ``joules`` is None where neither works. The counter updates about every 100 ms: regions much
    shorter than that must be repeated inside one window (see :func:`measure_window`).
    """

    def __init__(self, device_index=0, interval=0.01):
        self.nv = _nvml()
        self.h = nvml_handle(device_index)
        self.interval = interval
        self.mode = _energy_mode(device_index) if self.h is not None else None

    def start(self):
        self.joules = None
        if self.mode == "counter":
            self._e0 = self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h)
        elif self.mode == "sampling":
            import threading
            self._samples = []
            self._stop = threading.Event()

            def sample():
                while not self._stop.is_set():
                    self._samples.append((time.perf_counter(),
                                          self.nv.nvmlDeviceGetPowerUsage(self.h) * 1e-3))
                    self._stop.wait(self.interval)
            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def stop(self):
        if self.mode == "counter":
            self.joules = (self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h) - self._e0) * 1e-3
        elif self.mode == "sampling":
            self._stop.set()
            self._thread.join()
            s = self._samples
            self.joules = (sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(s, s[1:]))
                           if len(s) > 1 else None)
        return self.joules


def measure_window(solve, seconds=2.0, warmup=1, sync=None, max_reps=100000, on_solve=None):
    """Repeat ``solve()`` until at least ``seconds`` of wall time are filled, and report per solve.

    ``sync`` (e.g. ``cupy.cuda.Device().synchronize``) is called before the window opens and after
    it closes. Returns a dict: reps, wall (s per solve), cpu (s per solve), gpu_energy (J per
    solve, None if unmeasurable), gpu_power (W mean), host_energy (J per solve or None), result
    (what the last call returned).

    ``on_solve(rep, wall, cpu, result)``, when given, is called after each solve inside the window
    with that solve's own wall and process CPU seconds (energy exists only for the whole window:
    NVML's counter is too coarse for one short solve).
    """
    result = None
    for _ in range(warmup):
        result = solve()
    if sync:
        sync()
    meter = GpuEnergyMeter(nvml_index_of())
    meter.start()
    reps = 0
    with Stopwatch() as sw:
        while True:
            if on_solve is None:
                result = solve()
            else:
                c0, t0 = time.process_time(), time.perf_counter()
                result = solve()
                on_solve(reps, time.perf_counter() - t0, time.process_time() - c0, result)
            reps += 1
            if reps >= max_reps or time.perf_counter() - sw._t0 >= seconds:
                break
        if sync:
            sync()
    joules = meter.stop()
    return {"reps": reps, "wall": sw.wall / reps, "cpu": sw.cpu / reps,
            "gpu_energy": None if joules is None else joules / reps,
            "gpu_power": None if joules is None else joules / sw.wall,
            "host_energy": None if sw.host_energy is None else sw.host_energy / reps,
            "result": result}
