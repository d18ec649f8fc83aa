"""Collective and point-to-point times (alpha-beta model, NCCL bus-bandwidth convention).

All-reduce of S bytes over n ranks: 2(n-1)/n * S / busbw; reduce-scatter and all-gather: (n-1)/n * S / busbw.
busbw is the per-rank bandwidth of the slowest hop the ring crosses.
"""

from __future__ import annotations

import math

from hgplan.domain import GpuType, NodeGroup, TransportProfile


NVLINK_HOP_S = 3.4e-6
"""Per-step latency of a ring step over NVLink (same source)."""
BASE_LATENCY_S = 8.4e-6
"""Fixed cost of one NCCL collective (ring, Simple protocol; NCCL's latency model in src/graph/tuning.cc)."""


def allreduce_s(nbytes: float, n: int, busbw_gbytes_per_s: float, *, latency_s: float) -> float:
    """Ring bandwidth term; latency of a tree (NCCL switches to trees where latency dominates)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (2.0 * (n - 1) / n * nbytes / (busbw_gbytes_per_s * 1e9) + BASE_LATENCY_S
            + 2 * math.ceil(math.log2(n)) * latency_s)


def ring_latency_s(n: int, latency_s: float) -> float:
    """Latency of one ring collective over n ranks: the fixed cost plus n - 1 steps."""
    return BASE_LATENCY_S + (n - 1) * latency_s if n > 1 else 0.0


def half_collective_s(nbytes: float, n: int, busbw_gbytes_per_s: float, *, latency_s: float) -> float:
    """Reduce-scatter or all-gather of nbytes (the full, unsharded size): a ring of n - 1 steps."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / (busbw_gbytes_per_s * 1e9) + ring_latency_s(n, latency_s)


def intra_node_busbw_gbytes_per_s(gpu: GpuType, intra_gbytes_per_s: float) -> float:
    """Vendors quote bidirectional per-GPU bandwidth; a ring uses one direction per hop."""
    return intra_gbytes_per_s / 2.0 * gpu.eff.collective_efficiency


def nic_gbytes_per_s(group: NodeGroup, transport: TransportProfile) -> float:
    """Achievable NIC bandwidth of one GPU (its share of the node's NICs), GB/s."""
    return group.nic_gbps_per_gpu / 8.0 * transport.efficiency


def group_busbw_gbytes_per_s(group: NodeGroup, transport: TransportProfile, *, members: int, stride: int) -> tuple[float, float]:
    """Bus bandwidth and per-step latency of a collective over `members` ranks spaced `stride` apart.

    Ranks of one stage fill nodes in order, so a group with stride x members <= GPUs per node stays on
    NVLink/xGMI. Otherwise each node holds k = GPUs per node / stride members and the node's NICs are shared
    by the stride groups that run at once: inter-node bus bandwidth per rank is k x (NIC share of one GPU).
    """
    intra = intra_node_busbw_gbytes_per_s(group.gpu, group.intra_node_gbytes_per_s)
    per_node = max(1, group.gpus_per_node // stride)
    if members <= per_node:
        return intra, NVLINK_HOP_S
    inter = nic_gbytes_per_s(group, transport) * per_node
    return min(intra, inter), transport.latency_us * 1e-6


def overlapped_s(compute_s: float, comm_s: float, *, sm_share: float, exposed_s: float = 0.0) -> float:
    """Time of compute that runs alongside a collective on another stream.

    `exposed_s` of the collective cannot overlap (nothing to run beside it yet). While the rest runs, its
    kernels hold a `sm_share` of the compute units, so compute slows by that share of the overlapped time;
    the whole never takes less than the collective itself.
    """
    hidden = max(0.0, comm_s - exposed_s)
    return max(compute_s + exposed_s + sm_share * min(hidden, compute_s), comm_s)
