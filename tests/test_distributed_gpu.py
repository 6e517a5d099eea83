"""Distributed solves on the GPU (variant ``cuda``): the GPU cases of tests/mpi_cases.py under
``mpirun -n K``, against the single-GPU solve of the same system, for every method, float32 and
float64 (and Jacobi, complex128, a 3-D Laplace over the halo, irregular partitions with empty
ranks, a NaN on one rank).

* transport ``mpi``, K = 2, 3, 4 ranks sharing this machine's GPU(s), and K = 1;
* transport ``nccl``, K = 1 (a one-rank communicator: its all-reduce and halo calls run), and
  K = 2, 4 marked ``multigpu``: NCCL refuses two ranks on one GPU, so those skip with the reason
  where the machine has fewer GPUs than ranks.

Skipped with the reason without a usable GPU, or without mpi4py and mpirun.
"""
import json
import sys

import pytest

import mpi_cases
from dpsolve._device import status as device_status
from test_distributed import NO_MPI, ROOT, launch, mpirun_command

GPU = device_status()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU.ok, reason=f"no usable CUDA device: {GPU.reason}"),
              pytest.mark.skipif(NO_MPI is not None, reason=f"{NO_MPI}")]


LAUNCH_TIMEOUT = 300          # s: a launch past it is killed and fails its test


def _gpus() -> int:
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


def run_gpu_cases(k, transport, out):
    """One launch of every GPU case on ``k`` ranks: (rc, stdout, stderr, seconds, records by
    case)."""
    out.unlink(missing_ok=True)
    rc, so, se, secs = launch(mpirun_command(k) + [
        sys.executable, str(ROOT / "tests" / "mpi_cases.py"), "--gpu", "--transport",
        transport, "--out", str(out)], timeout=LAUNCH_TIMEOUT)
    records = {}
    if out.exists():
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            records.setdefault(rec["case"], []).append(rec)
    print(f"\nmpirun -n {k} mpi_cases.py --gpu --transport {transport}: {secs:.1f} s",
          file=sys.stderr)
    return rc, so, se, secs, records


PARAMS = ([pytest.param(k, "mpi", id=f"mpi-{k}") for k in (1, 2, 3, 4)]
          + [pytest.param(1, "nccl", id="nccl-1")]
          + [pytest.param(k, "nccl", id=f"nccl-{k}", marks=pytest.mark.multigpu)
             for k in (2, 4)])


@pytest.mark.parametrize("k, transport", PARAMS)
def test_gpu_cases(k, transport, tmp_path):
    """Every GPU case of one ``mpirun -n k`` launch, reported on every rank and passed there, and
    the launch ends cleanly (every rank exits with status 0: the NCCL communicator destroyed,
    no hang). One test per launch, so that pytest-xdist never starts the same launch twice."""
    if transport == "nccl" and k > _gpus():
        pytest.skip(f"NCCL needs one GPU per rank: {k} ranks, {_gpus()} GPU(s) here")
    rc, so, se, secs, records = run_gpu_cases(k, transport, tmp_path / "cases.jsonl")
    problems = []
    for name in mpi_cases.GPU_CASES:
        recs = records.get(name, [])
        ranks = sorted(r["rank"] for r in recs)
        if ranks != list(range(k)):
            problems.append(f"{name}: ranks {ranks} of {k} reported")
        problems += [f"{name} rank {r['rank']}: {r['detail']}" for r in recs if not r["ok"]]
    if rc != 0:
        problems.append(f"the launch exited with {rc} after {secs:.0f} s")
    assert not problems, (f"{k} ranks ({transport}):\n" + "\n".join(problems)
                          + f"\n--- stdout\n{so[-3000:]}\n--- stderr\n{se[-3000:]}")
