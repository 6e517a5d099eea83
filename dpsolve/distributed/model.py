"""A latency model of distributed CG on K GPUs: NCCL all-reduce, halo exchange, projection.

Pure Python (the module imports the standard library only; no GPU, no MPI):
``scripts/bench-scaling`` prints its projection with it, and ``scripts/bench-scaling
--model-only`` prints it on a machine with no GPU (issue 21).

Three parts:

* :class:`AllreduceModel`: the latency of an all-reduce of a small message (the one float64 of
  a CG inner product, plus the solvers' error slot) against the number of GPUs K, for NCCL's ring
  and tree algorithms, restated from NCCL's own cost model (below). NVLS (NVLink SHARP) and
  CollNet are left out (off here; NVLS is Simple-only, with a 25 us NVLink hardware latency, so
  NCCL's model would not pick it for a small message anyway).
* :class:`HaloModel`: the time of one halo exchange per iteration (one SpMV per CG iteration)
  for a slab or box partition of a 3-D 7-point grid: a fixed latency plus bytes over the link
  bandwidth, NVLink inside a node, InfiniBand between nodes.
* :func:`project`: time per iteration ``t(K) = t_local(K) + c_ar * L_ar(K) + L_halo(K)``, the
  weak-scaling efficiency ``t_local / t(K)`` (3-D Laplace, n^3 rows per GPU) and the strong-scaling
  speedup of A252 (252^3 = 16,003,008 rows, 7-point stencil), for ``c_ar`` = 2 (dpsolve's CG: two
  inner products per iteration, each its own all-reduce) and 1 (a single-reduction CG, which
  dpsolve does not have).

NCCL's cost model
-----------------
Source: ``src/graph/tuning.cc`` of github.com/NVIDIA/nccl: the table ``ncclTunerConstantsDefaults``
(``baseLatencies``, ``hwLatencies``; line 148 at tag v2.30.7-1), ``getNetOverhead`` (line 228),
``ncclTopoTuneModel`` (line 243; the ring's all-reduce steps at 289 and 411, the tree's latency at
416) and ``ncclTopoGetAlgoTime`` (line 630). The constants and formulas used here are the same in
tags v2.28.3-1 and v2.28.9-1 (NCCL 2.28 made the reference measurement) and v2.30.7-1 (the file
is unchanged on master at 5067397c). Latencies in microseconds. NCCL predicts a collective's time
as ``latency + bytes / bandwidth`` (``ncclTopoGetAlgoTime``) and runs the algorithm and protocol
with the smallest prediction; for 8-16 bytes the bandwidth term is below a nanosecond (LL bus
bandwidths are tens of GB/s or more) and is left out: the small-message time *is* the latency.

Base latency per algorithm and protocol (LL, LL128, Simple): tree 6.8, 14.0, 8.4; ring 6.6, 14.0,
8.4. Hardware latency per hop, NVLink: tree 0.6, 1.25, 4.0; ring 0.6, 1.9, 3.4. Network: tree 5.0,
8.5, 14; ring 2.7, 4.0, 14.0. Network post overhead (``getNetOverhead``): 1.0 us on x86 Intel and
by default, 2.0 us on x86 AMD, three times that for Simple.

With K ranks on N nodes, ``ppn = K / N`` ranks a node, an all-reduce has ``nsteps = 2 (K - 1)``:

* ring: ``base + (nsteps - nInter) * intra + nInter * inter`` with ``nInter = 2 (N - 1)`` network
  steps (0 on one node), ``intra`` the NVLink hop latency (on several nodes at least the network
  post overhead) and ``inter`` the network hop latency;
* tree: ``base + 2 ((ppn - 1) * intra + floor(log2 N) * inter)``: inside a node NCCL's tree is a
  chain (linear in ppn), across nodes a (double binary) tree, logarithmic in N;
* with one GPU a node (ppn = 1) ``inter`` is the tree's network latency for both algorithms; with
  K = 1 there is no communication (NCCL's cost table is 0).

So on one NVLink node both algorithms grow linearly, 1.2 us (LL) per added GPU, and ring LL is
NCCL's pick (0.2 us below tree LL); across nodes the ring grows with K, the tree with log2 N.

Calibration: the model's K = 2 NVLink figure (ring LL, 6.6 + 2 x 0.6 = 7.8 us) against the 6.95 us
measured by ``scripts/bench-scaling`` on two H200 on NV18 (NCCL 2.28, issue 20: one float64 from
device memory, host-timed to the stream's end). :meth:`AllreduceModel.calibrated` scales the *base*
latencies (every algorithm and protocol by the same factor; 6.6 -> 5.75 us, x0.871), on the
assumption that the fixed cost of a call (launch, set-up, the host's wait) is what differs between
NCCL's reference machines and ours, and keeps NCCL's per-hop hardware latencies. Scaling the hop
latency instead would need 0.175 us a hop (x0.29), far from NCCL's figures. One point fixes one
constant: how the latency grows with K is NCCL's model, not a measurement.

The halo model's inputs
-----------------------
* NVLink: 450 GB/s each way a GPU (H100 and H200 SXM: 18 fourth-generation NVLink links, the
  "900 GB/s" of NVIDIA's data sheets counts both directions; NVIDIA/nccl issue #1264 quotes 450
  GB/s theoretical one way and ~380 GB/s measured with p2pBandwidthLatencyTest on H100). Through
  the NVSwitches of an HGX/DGX board any pair of GPUs gets the whole of it; a rank's faces share it.
* InfiniBand: 400 Gb/s NDR = 50 GB/s each way, one ConnectX-7 a GPU (DGX H100 user guide: eight
  ConnectX-7 ports, each the default NIC of one GPU).
* Off-node latency: NCCL's network hop latency of a Simple step (the protocol of a 320 kB
  message) less its NVLink one, ring: 14.0 - 3.4 = 10.6 us, added once when any face leaves the
  node (the messages to different peers travel together).
* The fixed part: calibrated to the 11 us measured on two H200 (one face of 200 x 200 float64 each
  way: 320,000 bytes, 0.71 us of it at 450 GB/s, so 10.29 us fixed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("LL", "LL128", "Simple")
SOURCE = ("NVIDIA/nccl src/graph/tuning.cc (ncclTunerConstantsDefaults, getNetOverhead, "
          "ncclTopoTuneModel), v2.28.3-1 to v2.30.7-1")

# ncclTunerConstantsDefaults.baseLatencies (us)
BASE_LATENCY_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}
# ncclTunerConstantsDefaults.hwLatencies (us per hop): NCCL_HW_NVLINK and NCCL_HW_NET
HW_LATENCY_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
               "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
            "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
NET_OVERHEAD_US = 1.0          # getNetOverhead: x86 Intel and default (2.0 on x86 AMD)

# The measured inputs (BENCHMARKS.md, issue 20)
MEASURED_ALLREDUCE_US = 6.95   # NCCL all-reduce of one float64, two H200 on NV18 (K = 2)
MEASURED_HALO_US = 11.0        # one halo exchange, 200 x 200 float64 a face, the same two H200
MEASURED_T_LOCAL_US = 650.0    # CG per iteration, 3-D Laplace 200^3 float64, one H100, 1 rank
SMALL_SYSTEM_FLOOR_US = 9.0    # CG per iteration on a small system (persistent, 2-D 256^2: 9.5)

# Links (bytes per microsecond = 1e-3 GB/s; GB/s here are 1e9 bytes per second)
NVLINK_GBS = 450.0   # H100/H200 SXM: 18 NVLink-4 links, 900 GB/s both directions = 450 each way
IB_GBS = 50.0        # 400 Gb/s NDR InfiniBand (ConnectX-7), one NIC a GPU (DGX H100), each way
# a halo message over the network costs NCCL's network hop latency of a Simple-protocol step
# instead of an NVLink one (hwLatencies, ring Simple: 14.0 - 3.4)
NET_EXTRA_LATENCY_US = (HW_LATENCY_US["net"]["ring"]["Simple"]
                        - HW_LATENCY_US["nvlink"]["ring"]["Simple"])

A252_ROWS = 252 ** 3           # 16,003,008


def _nodes(k: int, gpus_per_node: int) -> int:
    if k < 1 or gpus_per_node < 1:
        raise ValueError(f"need K >= 1 and gpus_per_node >= 1, got {k}, {gpus_per_node}")
    if k <= gpus_per_node:
        return 1
    if k % gpus_per_node:
        raise ValueError(f"K = {k} GPUs do not fill nodes of {gpus_per_node}")
    return k // gpus_per_node


@dataclass(frozen=True)
class AllreduceModel:
    """NCCL's small-message all-reduce latency (the module docstring states the model).

    ``base_scale`` multiplies every base latency (1.0: NCCL's constants; see :meth:`calibrated`);
    ``gpus_per_node``: GPUs a node on NVLink (8: HGX/DGX H100 and H200); ``net_overhead_us``:
    NCCL's network post overhead (1.0 Intel, 2.0 AMD)."""
    base_scale: float = 1.0
    gpus_per_node: int = 8
    net_overhead_us: float = NET_OVERHEAD_US

    def nodes(self, k: int) -> int:
        return _nodes(k, self.gpus_per_node)

    def latency_us(self, k: int, algorithm: str, protocol: str | None = None) -> float:
        """Predicted latency of one small all-reduce on ``k`` GPUs with ``algorithm`` ("ring" or
        "tree") and ``protocol`` ("LL", "LL128", "Simple"; None: the fastest, as NCCL picks)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        if protocol is None:
            return min(self.latency_us(k, algorithm, p) for p in PROTOCOLS)
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        n_nodes = self.nodes(k)
        if k == 1:
            return 0.0
        ppn = k // n_nodes
        base = self.base_scale * BASE_LATENCY_US[algorithm][protocol]
        intra = HW_LATENCY_US["nvlink"][algorithm][protocol]
        inter = HW_LATENCY_US["net"]["tree" if ppn == 1 else algorithm][protocol]
        if algorithm == "ring":
            nsteps = 2 * (k - 1)
            n_inter = 2 * (n_nodes - 1)
            if n_nodes > 1:
                overhead = self.net_overhead_us * (3 if protocol == "Simple" else 1)
                intra = max(intra, overhead)
            return base + (nsteps - n_inter) * intra + n_inter * inter
        log_nodes = n_nodes.bit_length() - 1          # NCCL's log2i: floor(log2)
        return base + 2 * ((ppn - 1) * intra + log_nodes * inter)

    def best(self, k: int) -> tuple[str, str, float]:
        """(algorithm, protocol, latency) with the smallest predicted latency: NCCL's pick."""
        return min(((a, p, self.latency_us(k, a, p)) for a in ALGORITHMS for p in PROTOCOLS),
                   key=lambda t: t[2])

    @classmethod
    def calibrated(cls, measured_us: float = MEASURED_ALLREDUCE_US, k: int = 2,
                   algorithm: str = "ring", protocol: str = "LL", **kw) -> "AllreduceModel":
        """The model whose ``latency_us(k, algorithm, protocol)`` equals ``measured_us``, by
        scaling the base latencies (the hop latencies stay NCCL's). Default: the K = 2 NVLink
        ring LL figure against the 6.95 us measured on two H200."""
        raw = cls(**kw)
        hops = raw.latency_us(k, algorithm, protocol) - BASE_LATENCY_US[algorithm][protocol]
        scale = (measured_us - hops) / BASE_LATENCY_US[algorithm][protocol]
        if not scale > 0:
            raise ValueError(f"{measured_us} us is below the model's hop latencies at K = {k} "
                             f"({hops:.2f} us): no base latency fits")
        return cls(base_scale=scale, **kw)


def grid_dims(k: int, partition: str = "slab") -> tuple[int, int, int]:
    """The process grid (px, py, pz) of ``k`` GPUs: a slab partition cuts z only (what
    dpsolve's contiguous row blocks of the natural ordering are); a box partition the most
    cubic factorisation (the smallest surface)."""
    if partition == "slab":
        return (1, 1, k)
    if partition != "box":
        raise ValueError(f"partition must be 'slab' or 'box', got {partition!r}")
    best = None
    for px in range(1, k + 1):
        if k % px:
            continue
        for py in range(px, k // px + 1):
            if (k // px) % py:
                continue
            pz = k // px // py
            if pz < py:
                continue
            key = (px * py + py * pz + px * pz, (px, py, pz))
            best = key if best is None or key < best else best
    return best[1]


def _node_block(dims, per_node: int):
    """The sub-grid of ``dims`` one node holds: the most cubic factorisation of ``per_node``
    that tiles ``dims`` (for a slab, ``per_node`` consecutive slabs)."""
    if per_node >= math.prod(dims):
        return tuple(dims)
    if dims[0] == dims[1] == 1:
        return (1, 1, per_node)
    best = None
    for bx in range(1, per_node + 1):
        for by in range(1, per_node // bx + 1):
            if per_node % (bx * by):
                continue
            bz = per_node // (bx * by)
            b = (bx, by, bz)
            if any(d % e for d, e in zip(dims, b)):
                continue
            key = (bx * by + by * bz + bx * bz, b)
            best = key if best is None or key < best else best
    if best is None:
        raise ValueError(f"no block of {per_node} GPUs tiles the grid {dims}")
    return best[1]


@dataclass(frozen=True)
class HaloModel:
    """One halo exchange (one SpMV) per iteration of a 7-point stencil on a 3-D grid:

        t_halo = latency + (network latency if a face crosses nodes)
                 + max(NVLink bytes / NVLink bandwidth, network bytes / network bandwidth)

    for the slowest rank (the next all-reduce waits for it). A rank's faces to GPUs of its own
    node share its NVLink egress (through the NVSwitches), its faces to other nodes share its one
    NIC; the two overlap. ``latency_us``: the fixed part (pack, NCCL send/recv, add, launches),
    calibrated from a measurement by :meth:`calibrated`; ``value_bytes`` 8 (float64). The
    exchange is counted in full although the NCCL transport overlaps it with the local SpMV
    (an upper bound)."""
    latency_us: float
    nvlink_gbs: float = NVLINK_GBS
    net_gbs: float = IB_GBS
    net_extra_latency_us: float = NET_EXTRA_LATENCY_US
    gpus_per_node: int = 8
    value_bytes: int = 8

    def faces(self, k: int, global_shape, partition: str = "slab"):
        """Per rank: (NVLink bytes, network bytes) of one exchange, for a ``global_shape`` grid
        (nx, ny, nz) on ``k`` GPUs."""
        dims = grid_dims(k, partition)
        _nodes(k, self.gpus_per_node)
        block = _node_block(dims, self.gpus_per_node)
        local = [math.ceil(n / p) for n, p in zip(global_shape, dims)]
        out = []
        for r in range(k):
            c = (r % dims[0], (r // dims[0]) % dims[1], r // (dims[0] * dims[1]))
            node = tuple(ci // b for ci, b in zip(c, block))
            intra = inter = 0
            for d in range(3):
                area = math.prod(local[e] for e in range(3) if e != d) * self.value_bytes
                for step in (-1, 1):
                    nb = list(c)
                    nb[d] += step
                    if not 0 <= nb[d] < dims[d]:
                        continue
                    if tuple(ci // b for ci, b in zip(nb, block)) == node:
                        intra += area
                    else:
                        inter += area
            out.append((intra, inter))
        return out

    def time_us(self, k: int, global_shape, partition: str = "slab") -> float:
        """Halo time per iteration on ``k`` GPUs (0 for one GPU)."""
        if k == 1:
            return 0.0
        worst = 0.0
        for intra, inter in self.faces(k, global_shape, partition):
            if not intra and not inter:
                continue
            t = (self.latency_us + (self.net_extra_latency_us if inter else 0.0)
                 + max(intra / (self.nvlink_gbs * 1e3), inter / (self.net_gbs * 1e3)))
            worst = max(worst, t)
        return worst

    @classmethod
    def calibrated(cls, measured_us: float = MEASURED_HALO_US, k: int = 2,
                   global_shape=(200, 200, 400), partition: str = "slab", **kw) -> "HaloModel":
        """The model whose ``time_us(k, global_shape, partition)`` equals ``measured_us`` (on one
        node), by choosing the fixed latency. Default: 11 us measured on two H200, one face of
        200 x 200 float64 (320,000 bytes) each way."""
        probe = cls(latency_us=0.0, **kw)
        if probe.nodes_needed(k) > 1:
            raise ValueError("calibrate the halo on one node")
        transfer = probe.time_us(k, global_shape, partition)
        if not measured_us > transfer:
            raise ValueError(f"{measured_us} us is below the transfer time alone "
                             f"({transfer:.2f} us)")
        return cls(latency_us=measured_us - transfer, **kw)

    def nodes_needed(self, k: int) -> int:
        return _nodes(k, self.gpus_per_node)


def weak_shape(n: int, k: int, partition: str = "slab") -> tuple[int, int, int]:
    """The global grid of a weak-scaling run with n^3 rows per GPU: n x n x nK for a slab
    partition (scripts/bench-scaling --weak), n px x n py x n pz for a box."""
    return tuple(n * p for p in grid_dims(k, partition))


@dataclass
class Projection:
    """One row of :func:`project` (times in us)."""
    k: int
    nodes: int
    allreduce_us: dict = field(default_factory=dict)      # algorithm -> latency
    halo_weak_us: float = 0.0
    halo_strong_us: float = 0.0
    weak_efficiency: dict = field(default_factory=dict)   # (algorithm, c_ar) -> t_local / t(K)
    strong_speedup: dict = field(default_factory=dict)    # (algorithm, c_ar) -> t(1) / t(K)
    t_weak_us: dict = field(default_factory=dict)         # (algorithm, c_ar) -> t(K)
    t_strong_us: dict = field(default_factory=dict)


def t_iter_us(t_local_us: float, allreduce_us: float, halo_us: float,
              allreduces: int = 2) -> float:
    """Time per iteration: local work + all-reduces x latency + one halo exchange."""
    return t_local_us + allreduces * allreduce_us + halo_us


def strong_t_local_us(t_local_1_us: float, k: int,
                      floor_us: float = SMALL_SYSTEM_FLOOR_US) -> float:
    """Local work per iteration of a fixed system on ``k`` GPUs: bandwidth-bound, so 1/K of
    one GPU's, until the small-system floor (launches, host round trips) is reached."""
    return max(t_local_1_us / k, min(floor_us, t_local_1_us))


def project(ks=(1, 2, 4, 8, 16, 64), *, t_local_us: float = MEASURED_T_LOCAL_US, n: int = 200,
            local_rows: int | None = None, allreduce: AllreduceModel | None = None,
            halo: HaloModel | None = None, strong_rows: int = A252_ROWS,
            floor_us: float = SMALL_SYSTEM_FLOOR_US, partition: str = "slab",
            allreduces=(2, 1)) -> list[Projection]:
    """Weak scaling (an n x n face, ``local_rows`` rows per GPU, n^3 by default, local time
    ``t_local_us``) and strong scaling of a cubic grid of ``strong_rows`` rows (A252; its one-GPU
    local time ``t_local_us`` scaled by its rows over ``local_rows``, the local work being
    bandwidth-bound), for each K in ``ks``, ring and tree, with each count of all-reduces per
    iteration in ``allreduces``. Defaults: the calibrated models and the measured figures.

    Assumptions: the local work per iteration does not change with K in weak scaling and is
    1/K of one GPU's in strong scaling, down to ``floor_us`` (:func:`strong_t_local_us`); every
    all-reduce is exposed (CG needs its result before going on) and costs the model's latency;
    the halo is exposed in full (the NCCL transport overlaps it with the local SpMV, so this
    bounds it from above); nothing else is added per GPU (no load imbalance, no jitter: the
    slowest rank of a real run is slower than the model's)."""
    allreduce = allreduce or AllreduceModel.calibrated()
    halo = halo or HaloModel.calibrated()
    if not t_local_us > 0:
        raise ValueError(f"t_local_us must be positive, got {t_local_us}")
    side = round(strong_rows ** (1 / 3))
    if side ** 3 != strong_rows:
        raise ValueError(f"strong_rows must be a cube, got {strong_rows}")
    t_strong_1 = t_local_us * strong_rows / (local_rows or n ** 3)
    rows = []
    for k in ks:
        p = Projection(k=k, nodes=allreduce.nodes(k))
        p.halo_weak_us = halo.time_us(k, weak_shape(n, k, partition), partition)
        p.halo_strong_us = halo.time_us(k, (side, side, side), partition)
        t_loc_strong = strong_t_local_us(t_strong_1, k, floor_us)
        for a in ALGORITHMS:
            lat = p.allreduce_us[a] = allreduce.latency_us(k, a)
            for c in allreduces:
                tw = t_iter_us(t_local_us, lat, p.halo_weak_us, c)
                ts = t_iter_us(t_loc_strong, lat, p.halo_strong_us, c)
                p.t_weak_us[a, c], p.t_strong_us[a, c] = tw, ts
                p.weak_efficiency[a, c] = t_local_us / tw
                p.strong_speedup[a, c] = t_strong_1 / ts
        rows.append(p)
    return rows


def flat_allreduce_us(k: int, l_ar2_us: float = MEASURED_ALLREDUCE_US) -> float:
    """The earlier projection's all-reduce, L_ar(2) log2(K) (BENCHMARKS.md, issue 20)."""
    return l_ar2_us * math.log2(k)


# the targets (issue 21): K -> lower bound
WEAK_TARGETS = {2: 0.92, 8: 0.85}
STRONG_TARGETS = {2: 1.8, 8: 5.0}
