"""GPU energy of a distributed solve (``energy=True``), on the CPU: the aggregation over the
ranks' records (each physical GPU once), the report's summary, and one-rank solves on
MPI.COMM_SELF with the rank's GPU and NVML's meter replaced by fakes, so that what a meter reads
flows through to the report.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from dpsolve.distributed.report import DistributedReport, aggregate_energy

needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                  reason="mpi4py is not installed: pip install -e '.[mpi]'")


def rec(gpu, joules, t_start=0.0, t_end=1.0, reason=None):
    return {"gpu": gpu, "joules": joules, "t_start": t_start, "t_end": t_end, "reason": reason}


# --------------------------------------------------------------------------- aggregation
def test_distinct_gpus_are_summed():
    total, per_gpu, note = aggregate_energy([rec("GPU-a", 10.0), rec("GPU-b", 2.5),
                                             rec("GPU-c", 0.25)])
    assert total == 12.75 and note is None
    assert per_gpu == (("GPU-a", 10.0), ("GPU-b", 2.5), ("GPU-c", 0.25))


def test_a_shared_gpu_counts_once_with_its_longest_window():
    # ranks 0 and 2 share GPU-a; rank 2's window is the longest, so its reading is GPU-a's
    records = [rec("GPU-a", 10.0, 5.0, 6.0), rec("GPU-b", 4.0, 5.0, 6.0),
               rec("GPU-a", 11.0, 4.9, 6.1), rec("GPU-b", 3.0, 5.1, 5.9)]
    total, per_gpu, note = aggregate_energy(records)
    assert per_gpu == (("GPU-a", 11.0), ("GPU-b", 4.0))
    assert total == 15.0 and note is None


def test_a_tie_takes_the_lowest_rank():
    total, per_gpu, _ = aggregate_energy([rec("GPU-a", 7.0), rec("GPU-a", 9.0)])
    assert per_gpu == (("GPU-a", 7.0),) and total == 7.0


def test_four_ranks_on_one_gpu_are_one_gpu():
    total, per_gpu, note = aggregate_energy([rec("GPU-a", 5.0, 0.0, 2.0 + r / 10)
                                             for r in range(4)])
    assert total == 5.0 and per_gpu == (("GPU-a", 5.0),) and note is None


def test_unsupported_is_none_with_the_reason_never_zero():
    why = "NVML is not available (no NVIDIA driver, or nvidia-ml-py missing)"
    total, per_gpu, note = aggregate_energy([rec("h:0000:01:00.0", None, reason=why),
                                             rec("h:0000:02:00.0", None, reason=why)])
    assert total is None
    assert per_gpu == (("h:0000:01:00.0", None), ("h:0000:02:00.0", None))
    assert note == f"ranks 0, 1: {why}"


def test_one_gpu_without_a_reading_makes_no_partial_sum():
    total, per_gpu, note = aggregate_energy([rec("GPU-a", 10.0),
                                             rec("GPU-b", None, reason="no energy counter")])
    assert total is None
    assert per_gpu == (("GPU-a", 10.0), ("GPU-b", None))
    assert note == "rank 1: no energy counter"


def test_a_sharing_rank_with_a_reading_covers_one_without():
    # rank 0 failed to read GPU-a, rank 1 (same GPU) did: GPU-a has rank 1's reading
    total, per_gpu, note = aggregate_energy([rec("GPU-a", None, 0.0, 3.0, reason="read failed"),
                                             rec("GPU-a", 6.0, 0.0, 2.0)])
    assert total == 6.0 and per_gpu == (("GPU-a", 6.0),) and note is None


def test_a_window_under_the_counter_resolution_gives_no_reading():
    total, per_gpu, note = aggregate_energy([rec("GPU-a", 0.0, 1.0, 1.05),
                                             rec("GPU-b", 3.0, 1.0, 1.5)], min_seconds=0.25)
    assert total is None and per_gpu == (("GPU-a", None), ("GPU-b", 3.0))
    assert note.startswith("rank 0: the solve took 0.05 s on GPU-a") and "0.25 s" in note


def test_an_unnamed_gpu_is_the_ranks_own():
    total, per_gpu, _ = aggregate_energy([rec(None, 1.0), rec(None, 2.0)])
    assert total == 3.0 and [g for g, _ in per_gpu] == ["rank 0's GPU", "rank 1's GPU"]


# --------------------------------------------------------------------------- the report
def report(**kw):
    return DistributedReport(method="cg", variant="cuda", transport="mpi", ranks=2,
                             dtype="float64", n=100, nnz=460, iterations=12, info=0,
                             wall_time=1.0, comm_time=0.1, **kw)


def test_summary_shows_the_energy_when_present():
    r = report(energy_joules=123.4, energy_per_gpu=(("GPU-a", 100.0), ("GPU-b", 23.4)))
    assert r.summary().endswith(" E_gpu=123 J (2 GPUs)")
    one = report(energy_joules=5.0, energy_per_gpu=(("GPU-a", 5.0),))
    assert one.summary().endswith(" E_gpu=5 J (1 GPU)")
    assert r.as_dict()["energy_per_gpu"] == (("GPU-a", 100.0), ("GPU-b", 23.4))


def test_summary_gives_the_reason_or_nothing():
    r = report(energy_per_gpu=(("GPU-a", None),), energy_note="rank 0: no energy counter")
    assert r.summary().endswith(" E_gpu=n/a (rank 0: no energy counter)")
    assert "E_gpu" not in report().summary()


# --------------------------------------------------------------------------- one rank, in process
class FakeMeter:
    """GpuEnergyMeter's interface: ``mode``, ``start()``, ``stop() -> J``."""
    made = []
    mode = "counter"
    reading = 42.5

    def __init__(self, device_index=0):
        self.device_index, self.started = device_index, False
        FakeMeter.made.append(self)

    def start(self):
        self.started = True
        return self

    def stop(self):
        assert self.started
        self.joules = type(self).reading
        return self.joules


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU variant ("fake-gpu": the host variant's code) on a fake GPU with NVML index 3, so
    that ``energy=True`` runs its whole path on the CPU. Returns the synchronize calls' list."""
    import dpsolve._device
    from dpsolve._device import DeviceStatus
    from dpsolve.distributed import energy as energy_mod
    from dpsolve.distributed import solvers
    syncs = []
    FakeMeter.made = []
    monkeypatch.setitem(solvers.VARIANTS, "fake-gpu", solvers.run_host)
    monkeypatch.setattr(solvers, "GPU_VARIANTS", solvers.GPU_VARIANTS + ("fake-gpu",))
    monkeypatch.setattr(dpsolve._device, "status", lambda: DeviceStatus(True, name="fake"))
    monkeypatch.setattr(energy_mod, "rank_gpu", lambda comm: energy_mod.RankGpu(
        "GPU-fake-uuid", 3, None, lambda: syncs.append(comm.Get_rank())))
    monkeypatch.setattr(energy_mod, "GpuEnergyMeter", FakeMeter)
    monkeypatch.setattr(solvers, "ENERGY_MIN_SECONDS", 0.0)   # the solve is short
    return syncs


def _system():
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(4, 4, 4, MPI.COMM_SELF)
    return dd, D, np.ones(D.n_local)


@needs_mpi4py
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_energy_flows_to_the_report(fake_gpu, method):
    dd, D, b = _system()
    x, info, rep = getattr(dd, method)(D, b, rtol=1e-8, variant="fake-gpu", energy=True,
                                       full_output=True)
    assert info == 0 and rep.converged
    assert len(FakeMeter.made) == 1 and FakeMeter.made[0].device_index == 3
    assert rep.energy_joules == 42.5 and rep.energy_note is None
    assert rep.energy_per_gpu == (("GPU-fake-uuid", 42.5),)
    assert fake_gpu == [0, 0]               # one wait for the GPU at each edge of the window
    assert rep.summary().endswith(" E_gpu=42.5 J (1 GPU)")
    # the same solve without energy: no meter, no energy fields
    FakeMeter.made = []
    x2, _, rep2 = getattr(dd, method)(D, b, rtol=1e-8, variant="fake-gpu", full_output=True)
    assert FakeMeter.made == [] and np.array_equal(x, x2)
    assert (rep2.energy_joules, rep2.energy_per_gpu, rep2.energy_note) == (None, (), None)
    assert "E_gpu" not in rep2.summary()


@needs_mpi4py
def test_a_gpu_without_the_counter_reports_why(fake_gpu, monkeypatch):
    from dpsolve.distributed import energy as energy_mod
    monkeypatch.setattr(FakeMeter, "mode", "sampling")
    monkeypatch.setattr(energy_mod, "nvml_energy_support",
                        lambda i: (False, f"no energy counter on device {i}"))
    dd, D, b = _system()
    _, info, rep = dd.cg(D, b, variant="fake-gpu", energy=True, full_output=True)
    assert info == 0 and rep.energy_joules is None
    assert rep.energy_per_gpu == (("GPU-fake-uuid", None),)
    assert rep.energy_note == ("rank 0: no energy counter on device 3; a distributed solve "
                               "reads only NVML's total-energy counter")
    assert "E_gpu=n/a (rank 0: no energy counter on device 3" in rep.summary()


def _energy_note(dd, D, b):
    """energy=True on the fake GPU: the solve converges with no energy figure; its note."""
    x, info, rep = dd.cg(D, b, variant="fake-gpu", energy=True, full_output=True)
    assert info == 0 and rep.energy_joules is None
    return rep.energy_note


@needs_mpi4py
def test_no_nvml_and_a_failing_lookup_report_why(fake_gpu, monkeypatch):
    from dpsolve.distributed import energy as energy_mod
    dd, D, b = _system()
    monkeypatch.setattr(energy_mod, "rank_gpu", lambda comm: energy_mod.RankGpu(
        "node7:0000:3B:00.0", None, "NVML is not available", lambda: None))
    _, _, rep = dd.cg(D, b, variant="fake-gpu", energy=True, full_output=True)
    assert FakeMeter.made == []
    assert rep.energy_joules is None and rep.energy_note == "rank 0: NVML is not available"
    assert rep.energy_per_gpu == (("node7:0000:3B:00.0", None),)

    def broken(comm):
        raise RuntimeError("no CUDA device")
    monkeypatch.setattr(energy_mod, "rank_gpu", broken)
    assert _energy_note(dd, D, b) == ("rank 0: could not find this rank's GPU in NVML: "
                                      "RuntimeError: no CUDA device")


@needs_mpi4py
def test_a_meter_that_fails_mid_solve_reports_why(fake_gpu, monkeypatch):
    def fail(self):
        raise OSError("NVML_ERROR_GPU_IS_LOST")
    monkeypatch.setattr(FakeMeter, "stop", fail)
    dd, D, b = _system()
    assert _energy_note(dd, D, b) == ("rank 0: reading NVML's energy counter failed: "
                                      "OSError: NVML_ERROR_GPU_IS_LOST")


@needs_mpi4py
def test_the_counter_resolution_rule_applies(fake_gpu, monkeypatch):
    from dpsolve.distributed import solvers
    monkeypatch.setattr(solvers, "ENERGY_MIN_SECONDS", 1e9)     # no solve is that long
    dd, D, b = _system()
    _, _, rep = dd.cg(D, b, variant="fake-gpu", energy=True, full_output=True)
    assert rep.energy_joules is None and rep.energy_per_gpu == (("GPU-fake-uuid", None),)
    assert rep.energy_note.startswith("rank 0: the solve took ") and "1e+09 s" in rep.energy_note


@needs_mpi4py
def test_host_variant_and_bad_values_are_refused():
    dd, D, b = _system()
    with pytest.raises(ValueError, match="rank 0: energy=True measures each rank's GPU energy "
                                         "\\(NVML\\), but variant 'host' runs on no GPU: use "
                                         "variant 'cuda'"):
        dd.cg(D, b, energy=True)
    with pytest.raises(ValueError, match="rank 0: energy must be True or False, got 'yes'"):
        dd.bicgstab(D, b, energy="yes")
    x, info = dd.cg(D, b, energy=False)          # the default, said explicitly
    assert info == 0


# --------------------------------------------------------------------------- the device lookup
class FakeNvml:
    """The few pynvml calls rank_gpu makes: two GPUs, NVML index by PCI bus id."""
    GPUS = {"0000:3B:00.0": (0, b"GPU-aaaa"), "0000:5E:00.0": (1, b"GPU-bbbb")}

    def nvmlDeviceGetHandleByPciBusId(self, pci):
        if pci not in self.GPUS:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return pci

    def nvmlDeviceGetIndex(self, h):
        return self.GPUS[h][0]

    def nvmlDeviceGetUUID(self, h):
        return self.GPUS[h][1]


@pytest.fixture
def fake_cupy(monkeypatch):
    """CuPy as rank_gpu uses it: this rank's CUDA device 0 (CUDA_VISIBLE_DEVICES shows it one
    GPU) is the host's second GPU, at PCI 0000:5E:00.0."""
    import sys
    from types import SimpleNamespace

    import dpsolve.distributed.gpu as dgpu
    buses = {0: "0000:5E:00.0"}
    synced = []
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(deviceGetPCIBusId=lambda d: buses[d]),
        Device=lambda d: SimpleNamespace(synchronize=lambda: synced.append(d))))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(dgpu, "select_device", lambda comm: 0)
    return buses, synced


def test_rank_gpu_finds_the_nvml_index_by_pci_bus_id(fake_cupy, monkeypatch):
    import dpsolve.measure
    from dpsolve.distributed.energy import rank_gpu
    buses, synced = fake_cupy
    monkeypatch.setattr(dpsolve.measure, "_nvml", lambda: FakeNvml())
    g = rank_gpu(None)
    # NVML's index 1, not the CUDA index 0; the UUID as a str
    assert (g.gpu, g.nvml_index, g.reason) == ("GPU-bbbb", 1, None)
    g.synchronize()
    assert synced == [0]
    buses[0] = "0000:AF:00.0"                      # a bus NVML does not list
    g = rank_gpu(None)
    assert g.nvml_index is None and g.gpu.endswith(":0000:AF:00.0")
    assert g.reason.startswith("NVML has no GPU at PCI bus id 0000:AF:00.0 (CUDA device 0)")


def test_rank_gpu_without_nvml(fake_cupy, monkeypatch):
    import socket

    import dpsolve.measure
    from dpsolve.distributed.energy import rank_gpu
    monkeypatch.setattr(dpsolve.measure, "_nvml", lambda: None)
    g = rank_gpu(None)
    assert g.nvml_index is None and g.gpu == f"{socket.gethostname()}:0000:5E:00.0"
    assert g.reason.startswith("NVML is not available")


def test_single_gpu_meter_index_is_nvml_s_by_pci_bus_id(fake_cupy, monkeypatch):
    """The single-GPU energy meter's device (measure.nvml_index_of): CUDA device 0 of a
    process that sees only the host's second GPU is NVML's index 1; a bus NVML does not list,
    or no NVML, falls back to the CUDA index."""
    from types import SimpleNamespace

    import dpsolve.measure
    buses, _ = fake_cupy
    import sys
    sys.modules["cupy"].cuda.Device = lambda d=None: SimpleNamespace(id=0)
    monkeypatch.setattr(dpsolve.measure, "_nvml", lambda: FakeNvml())
    assert dpsolve.measure.nvml_index_of(0) == 1
    assert dpsolve.measure.nvml_index_of() == 1               # CuPy's current device
    buses[0] = "0000:AF:00.0"
    assert dpsolve.measure.nvml_index_of(0) == 0
    monkeypatch.setattr(dpsolve.measure, "_nvml", lambda: None)
    assert dpsolve.measure.nvml_index_of(0) == 0
