"""GPU energy of a distributed solve (``energy=True``): each rank's GPU, found in NVML by its
PCI bus id (NVML numbers the host's GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so a
CUDA device index is not NVML's), and the rank's window on NVML's total-energy counter. The
report's :func:`~dpsolve.distributed.report.aggregate_energy` then counts each GPU once."""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from ..measure import GpuEnergyMeter, nvml_at_pci, nvml_energy_support
from ._collective import describe as _describe


@dataclass
class RankGpu:
    """This rank's GPU, as its energy window needs it: ``gpu`` its name, the same on every rank
    that uses it (NVML's UUID; ``host:PCI bus id`` where NVML cannot name it: a bus id alone
    repeats across hosts); ``nvml_index`` its NVML index, or None (``reason`` then says why);
    ``synchronize`` waits for this process's work on it."""
    gpu: str
    nvml_index: int | None
    reason: str | None
    synchronize: object


def rank_gpu(comm) -> RankGpu:
    """This rank's GPU: the GPU variants' (``gpu.select_device`` makes it the current CuPy
    device; collective over ``comm``: call it on every rank), looked up in NVML by its PCI bus
    id. NVML numbers every GPU of the host in PCI order and ignores ``CUDA_VISIBLE_DEVICES``,
    so the CUDA device index (``cupy.cuda.Device().id``) is not NVML's. Tests replace this."""
    import cupy

    from ..measure import _nvml
    from .gpu import select_device
    dev = select_device(comm)
    pci = cupy.cuda.runtime.deviceGetPCIBusId(dev)
    sync = cupy.cuda.Device(dev).synchronize
    where = f"{socket.gethostname()}:{pci}"
    nv = _nvml()
    if nv is None:
        return RankGpu(where, None, nvml_energy_support()[1], sync)
    try:
        index, uuid = nvml_at_pci(pci)
    except Exception as e:
        return RankGpu(where, None, f"NVML has no GPU at PCI bus id {pci} (CUDA device {dev}): "
                                    f"{_describe(e)}", sync)
    return RankGpu(uuid, index, None, sync)


class EnergyWindow:
    """One rank's GPU energy over its solve: NVML's total-energy counter
    (:class:`dpsolve.measure.GpuEnergyMeter` in its counter mode; a GPU without the counter
    gives no reading, not a power-sampled estimate) read at ``start`` and ``stop``, each after
    a wait for the GPU. Never raises: a failure becomes the record's ``reason``.

    Construct it on every rank at the same point (:func:`rank_gpu` is collective);
    ``record()`` is this rank's entry for :func:`~.report.aggregate_energy`."""

    def __init__(self, comm):
        self.gpu, self.reason = f"rank {comm.Get_rank()}'s GPU", None
        self.meter = self.sync = self.joules = self.t_start = self.t_end = None
        try:
            g = rank_gpu(comm)
            self.gpu, self.reason, self.sync = g.gpu, g.reason, g.synchronize
            if g.nvml_index is not None:
                meter = GpuEnergyMeter(g.nvml_index)
                if meter.mode == "counter":
                    self.meter = meter
                else:
                    self.reason = (f"{nvml_energy_support(g.nvml_index)[1]}; a distributed "
                                   f"solve reads only NVML's total-energy counter")
        except Exception as e:
            self.reason = f"could not find this rank's GPU in NVML: {_describe(e)}"

    def _fail(self, e):
        self.meter, self.joules = None, None
        self.reason = f"reading NVML's energy counter failed: {_describe(e)}"

    def start(self):
        if self.meter is not None:
            try:
                self.sync()                 # the window opens on an idle GPU
                self.meter.start()
            except Exception as e:
                self._fail(e)
        self.t_start = time.perf_counter()
        return self

    def stop(self):
        if self.meter is not None:
            try:
                self.sync()
                self.t_end = time.perf_counter()
                self.joules = self.meter.stop()
            except Exception as e:
                self._fail(e)
        if self.t_end is None:
            self.t_end = time.perf_counter()
        return self

    def record(self) -> dict:
        if self.t_start is None or self.t_end is None:
            return {"gpu": self.gpu, "joules": None, "t_start": 0.0, "t_end": 0.0,
                    "reason": self.reason or "the solve did not run"}
        return {"gpu": self.gpu, "joules": self.joules, "t_start": self.t_start,
                "t_end": self.t_end, "reason": self.reason}
