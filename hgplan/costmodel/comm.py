"""Collective and point-to-point times (alpha-beta model, NCCL bus-bandwidth convention).

All-reduce of S bytes over n ranks: 2(n-1)/n * S / busbw; reduce-scatter and all-gather: (n-1)/n * S / busbw.
busbw is the per-rank bandwidth of the slowest hop the ring crosses.
"""

from __future__ import annotations

import math

from hgplan.domain import NetPath, NodeGroup, TransportProfile


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


PCIE_NCCL_FRACTION = 0.75
"""Share of a PCIe link's raw per-direction rate NCCL's topology model counts on: lane rate x width / 80 GB/s
(src/graph/topo.cc; Gen3 x16 12 GB/s of 16 raw, Gen4 x16 24, Gen5 x16 48). Four RTX 4090s with P2P enabled
measured 25.7 GB/s all-reduce bus bandwidth on Gen4 x16 (tinygrad/open-gpu-kernel-modules#36)."""
PCIE_HOP_S = 5.7e-6
"""Per-step latency of a ring over PCIe (NCCL src/graph/tuning.cc, hwLatencies, PCI ring Simple)."""


def switched_busbw(bidirectional_gbytes_per_s: float, collective_efficiency: float) -> float:
    """Bus bandwidth of a ring over NVLink/xGMI: one direction of the vendor's bidirectional per-GPU figure, at the
    collective efficiency."""
    return bidirectional_gbytes_per_s / 2.0 * collective_efficiency


def intra_node_busbw(group: NodeGroup, *, span: int) -> tuple[float, float]:
    """(bus bandwidth GB/s, per-step latency s) of a ring over GPUs of one node covering `span` consecutive GPUs.

    NVLink/xGMI: vendors quote bidirectional per-GPU bandwidth; a ring uses one direction per hop, at the
    architecture's collective efficiency. PCIe (docs/cost-model.md, PCIe collectives): NCCL uses GPU-to-GPU P2P
    only up to GPUs behind PCIe switches of one socket (default NCCL_P2P_LEVEL=PXB, src/graph/paths.cc) and where
    the driver allows it; otherwise its SHM transport stages every byte through host memory (written once, read
    once) while all the socket's GPUs stream at once, and a ring spanning sockets crosses their link.
    """
    if group.intra_node_kind != "pcie":
        return switched_busbw(group.intra_node_gbytes_per_s, group.gpu.eff.collective_efficiency), NVLINK_HOP_S
    topo = group.pcie
    link = group.intra_node_gbytes_per_s / 2.0 * PCIE_NCCL_FRACTION
    per_socket = max(1, group.gpus_per_node // topo.sockets)
    crosses = topo.sockets > 1 and span > per_socket
    if topo.p2p and not crosses:
        return link, PCIE_HOP_S
    bw = min(link, topo.host_memory_gbytes_per_s / (2 * per_socket))
    if crosses:
        bw = min(bw, topo.inter_socket_gbytes_per_s)
    return bw, PCIE_HOP_S


def nic_gbytes_per_s(group: NodeGroup, transport: TransportProfile) -> float:
    """Achievable NIC bandwidth of one GPU (its share of the node's NICs), GB/s."""
    return transport.achieved_gbytes_per_s(group.nic_gbps_per_gpu)


def members_per_node(group: NodeGroup, stride: int) -> int:
    """How many ranks of a group spaced `stride` apart one node holds: a group of at most that many members stays
    inside a node (on NVLink, xGMI or PCIe); a larger one reduces over the NICs."""
    return max(1, group.gpus_per_node // stride)


def group_busbw_gbytes_per_s(group: NodeGroup, transport: TransportProfile, *, members: int, stride: int) -> tuple[float, float]:
    """Bus bandwidth and per-step latency of a collective over `members` ranks spaced `stride` apart.

    Ranks of one stage fill nodes in order, so a group with stride x members <= GPUs per node stays on
    NVLink/xGMI. Otherwise each node holds k = GPUs per node / stride members and the node's NICs are shared
    by the stride groups that run at once: inter-node bus bandwidth per rank is k x (NIC share of one GPU).
    """
    per_node = members_per_node(group, stride)
    intra, hop_s = intra_node_busbw(group, span=min(members, per_node) * stride)
    if members <= per_node:
        return intra, hop_s
    inter = nic_gbytes_per_s(group, transport) * per_node
    return min(intra, inter), transport.latency_us * 1e-6


def ring_hop_gbytes_per_s(group: NodeGroup, transport: TransportProfile, *, members: int,
                          stride: int) -> tuple[float, float]:
    """Bandwidth and latency of one step of a ring of point-to-point sends over `members` ranks spaced `stride` apart
    (CP's K/V ring): every rank sends to the next at once, so a step lasts as long as its slowest hop. Inside a node
    that is the intra-node figure. Across nodes each node's last member sends off the node, one send per ring, and
    the `stride` rings of a stage (one per TP rank) run at once: a send gets the node's NICs shared by them, but no
    more than the NICs local to its GPU (NCCL spreads a peer's channels over those alone: ncclTopoGetLocalNet, NVIDIA/
    nccl src/graph/topo.cc; one NIC per GPU on rail-optimised nodes)."""
    per_node = members_per_node(group, stride)
    intra, hop_s = intra_node_busbw(group, span=min(members, per_node) * stride)
    if members <= per_node:
        return intra, hop_s
    rings = max(1, group.gpus_per_node // per_node)
    own = group.nic_gbps * max(1, -(-group.nic_count // group.gpus_per_node))
    send = transport.achieved_gbytes_per_s(min(own, group.node_nic_gbps / rings))
    return min(intra, send), transport.latency_us * 1e-6


def overlapped_s(compute_s: float, comm_s: float, *, sm_share: float, exposed_s: float = 0.0) -> float:
    """Time of compute that runs alongside a collective on another stream.

    `exposed_s` of the collective cannot overlap (nothing to run beside it yet). While the rest runs, its
    kernels hold a `sm_share` of the compute units, so compute slows by that share of the overlapped time;
    the whole never takes less than the collective itself.
    """
    hidden = max(0.0, comm_s - exposed_s)
    return max(compute_s + exposed_s + sm_share * min(hidden, compute_s), comm_s)


def flow_gbytes_per_s(profile: TransportProfile, path: NetPath) -> float:
    """What one GPU's flow over `path` carries at most with `profile`'s sockets (or RDMA), GB/s: its share of the
    path's line rate per GPU, and over TCP at most a window (the link's tcp_window_mib, else the profile's) per round
    trip of the path."""
    return profile.achieved_gbytes_per_s(path.per_gpu_gbps, rtt_s=2 * path.latency_s,
                                         window_mib=path.link.tcp_window_mib if path.link else None)
