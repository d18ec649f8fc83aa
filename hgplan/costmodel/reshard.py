"""What a pipeline boundary moves when the two stages differ: FlagScale's re-sharding between process meshes, and
the host-memory hop between GPUs of two vendors (priced by evaluate.mesh_boundary_s and p2p_seconds).

FlagScale (flagscale/train/hetero/parallel_context.py, get_inter_mesh_tensor_slices, at the commit in
docs/export.md) cuts the activation [s, B, h] of a micro-batch step (B = dp x micro-batch samples, the same on
every mesh) along the sequence over each side's tp (sequence-parallel layout; not cut when tp = 1) and along the
batch over its dp. Every source rank sends each destination rank the piece where their segments overlap, so a
source rank sends its whole slice once, cut into lcm(tp_a, tp_b) / tp_a x lcm(dp_a, dp_b) / dp_a messages, and a
destination rank receives its whole slice. The backward gradient goes the same way back.
"""

from __future__ import annotations

from dataclasses import replace

from hgplan.costmodel.comm import flow_gbytes_per_s
from hgplan.costmodel.compute import BYTES
from hgplan.domain import Fleet, ModelArch, NetPath, NodeGroup, TrainingSettings, Transport
from hgplan.plan import ParallelConfig, Plan

HOST_COPY_GBYTES_PER_S = 12.0
"""A device-to-host or host-to-device copy of a pageable tensor (torch's `.cpu()` / `.to(device)` without pinned
memory): PCIe 4.0 x16 moves 25 GB/s pinned, and the driver's staging through a pinned bounce buffer halves that
(CUDA's bandwidthTest reports 10-13 GB/s pageable on PCIe 4.0 hosts). Physics only; not measured here."""


def rank_slice_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """Bytes of the boundary activation one rank of a stage holds: the micro-batch step's [s, B, h] over tp x dp
    (over dp alone at tp = 1, where the sequence is not cut)."""
    step = cfg.micro_batch_size * cfg.dp * train.seq_length / cfg.cp * model.hidden_size * BYTES
    return step / (cfg.tp * cfg.dp)


def host_copy_s(nbytes: float) -> float:
    """Device-to-host plus host-to-device copy of nbytes (the two ends of a host-memory hop)."""
    return 2 * nbytes / (HOST_COPY_GBYTES_PER_S * 1e9)


def gloo_flow_gbytes_per_s(fleet: Fleet, path: NetPath) -> float:
    """What one rank's sends over gloo carry at most on `path`, GB/s: gloo's TCP transport joins two ranks by one
    connection (gloo/transport/tcp/pair.cc: a Pair holds one socket per peer rank, on one device per interface in
    GLOO_SOCKET_IFNAME), over TCP whatever the NICs (PyTorch's gloo devices are TCP), and sets the send buffer but not
    the receive buffer, so the window is Linux's autotuned one (the ethernet transport's window_mib, or the link's
    tcp_window_mib). So: one socket of the ethernet profile, at most a window per round trip, within the path's share
    of line rate per GPU. FlagScale sends a rank's slices to its destination ranks one after another
    (flagscale/train/hetero/p2p_communication.py, send_forward_hetero), so one connection carries at a time."""
    return flow_gbytes_per_s(replace(fleet.transports[Transport.ETHERNET], socket_streams=1), path)


def crosses_vendors(a: NodeGroup, b: NodeGroup) -> bool:
    """Whether a boundary joins GPUs of two vendors: their collective libraries (NCCL, RCCL) share no
    communicator, so every send goes through host memory (FlagScale's hetero_use_cpu_communication)."""
    return a.gpu.vendor != b.gpu.vendor


def one_communicator(fleet: Fleet, a: NodeGroup, b: NodeGroup) -> bool:
    """Whether one NCCL communicator can join GPUs of a and b: one vendor's library (NCCL or RCCL) and one
    transport (Fleet.one_transport)."""
    return not crosses_vendors(a, b) and fleet.one_transport(a, b)


def mesh_host_path(plan: Plan, fleet: Fleet) -> bool:
    """Whether FlagScale runs the plan's meshes with hetero_use_cpu_communication: some boundary between meshes
    that one NCCL communicator cannot join. FlagScale builds the groups that cross meshes (pipeline, model-parallel,
    embedding) without per-communicator NCCL options, on the default backend
    (flagscale/train/hetero/parallel_context.py, build_global_process_groups), so such a boundary can only go through
    host memory over gloo, which that switch makes the default for every one of them."""
    meshes = plan.meshes()
    return any(not one_communicator(fleet, fleet.group(plan.stages[first - 1].node_group),
                                    fleet.group(plan.stages[first].node_group)) for first, _ in meshes[1:])


def host_copies(plan: Plan, fleet: Fleet) -> tuple[list[bool], bool]:
    """Which sends go through host memory: per stage boundary k -> k+1, and the tied embedding's all-reduce between
    the first and last stage. A mesh plan (asymmetric, FlagScale's) that needs the host path (mesh_host_path) sends
    across every boundary between meshes, and between its first and last mesh, that way; otherwise only sends
    between GPUs of two vendors do (what a stock plan needs there: a gloo group)."""
    groups = [fleet.group(st.node_group) for st in plan.stages]
    p = len(groups)
    pairs = [(k, (k + 1) % p) for k in range(p if plan.config.vpp > 1 else p - 1)]
    if plan.asymmetric and mesh_host_path(plan, fleet):
        mesh_of = [i for i, (_, count) in enumerate(plan.meshes()) for _ in range(count)]
        return [mesh_of[a] != mesh_of[b] for a, b in pairs], mesh_of[0] != mesh_of[-1]
    return [crosses_vendors(groups[a], groups[b]) for a, b in pairs], crosses_vendors(groups[0], groups[-1])


def cross_vendor_message(groups: list[NodeGroup], *, flagscale: bool) -> str | None:
    """What a pipeline over GPUs of several vendors needs to run, or None when it stays on one vendor's GPUs."""
    vendors = sorted({g.gpu.vendor for g in groups})
    if len(vendors) < 2:
        return None
    head = f"the pipeline spans {' and '.join(vendors)} GPUs: "
    if flagscale:
        return head + ("FlagScale sends across each vendor boundary through host memory over gloo "
                       "(hetero_use_cpu_communication), and the plan prices that copy and gloo's one TCP connection "
                       "per pair of ranks; TP and DP stay inside one vendor's node group")
    return head + ("a stock PyTorch build uses NCCL on NVIDIA and RCCL on AMD, which cannot share a communicator; "
                   "the cross-vendor pipeline boundary needs a library both support (for example a gloo process "
                   "group for those point-to-point transfers, or a unified communicator as HETHUB built) and a "
                   "PyTorch build per vendor; the plan prices gloo there (host copies, one TCP connection per pair "
                   "of ranks); TP and DP stay inside one vendor's node group")


def boundary_record(a_i: int, b_i: int, path: NetPath | None, busy: float, latency: float, msg: float,
                    reshard: tuple[ParallelConfig, ParallelConfig] | None, *, host_copy: bool) -> dict:
    """What explain reports of one boundary; a mesh boundary (reshard: the two stages' degrees) names the degrees it
    re-shards between, and a boundary whose sends go through host memory (host_copies) says so."""
    out = {"from_stage": a_i, "to_stage": b_i, "path": path.kind if path else "none",
           "transport": path.transport.value if path else None, "send_s": busy, "latency_s": latency,
           "message_mib": msg / 2 ** 20}
    if reshard is not None:
        ca, cb = reshard
        out["reshard"] = {"from_tp": ca.tp, "from_dp": ca.dp, "to_tp": cb.tp, "to_dp": cb.dp}
    if host_copy:
        out["host_copy"] = True
    return out
