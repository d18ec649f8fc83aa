"""What a pipeline boundary costs when the two stages differ: FlagScale's re-sharding between process meshes, and
the host-memory hop between GPUs of two vendors.

FlagScale (flagscale/train/hetero/parallel_context.py, get_inter_mesh_tensor_slices, at the commit in
docs/export.md) cuts the activation [s, B, h] of a micro-batch step (B = dp x micro-batch samples, the same on
every mesh) along the sequence over each side's tp (sequence-parallel layout; not cut when tp = 1) and along the
batch over its dp. Every source rank sends each destination rank the piece where their segments overlap, so a
source rank sends its whole slice once, cut into lcm(tp_a, tp_b) / tp_a x lcm(dp_a, dp_b) / dp_a messages, and a
destination rank receives its whole slice. The backward gradient goes the same way back.
"""

from __future__ import annotations

import math

from hgplan.costmodel.compute import BYTES
from hgplan.domain import Fleet, ModelArch, NetPath, NodeGroup, TrainingSettings
from hgplan.plan import ParallelConfig

HOST_COPY_GBYTES_PER_S = 12.0
"""A device-to-host or host-to-device copy of a pageable tensor (torch's `.cpu()` / `.to(device)` without pinned
memory): PCIe 4.0 x16 moves 25 GB/s pinned, and the driver's staging through a pinned bounce buffer halves that
(CUDA's bandwidthTest reports 10-13 GB/s pageable on PCIe 4.0 hosts). Physics only; not measured here."""


def rank_slice_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """Bytes of the boundary activation one rank of a stage holds: the micro-batch step's [s, B, h] over tp x dp
    (over dp alone at tp = 1, where the sequence is not cut)."""
    step = cfg.micro_batch_size * cfg.dp * train.seq_length / cfg.cp * model.hidden_size * BYTES
    return step / (cfg.tp * cfg.dp)


def messages_per_rank(a: ParallelConfig, b: ParallelConfig) -> int:
    """Point-to-point messages one source rank sends at a boundary between meshes of degrees a and b."""
    return (math.lcm(a.tp, b.tp) // a.tp) * (math.lcm(a.dp, b.dp) // a.dp)


def host_copy_s(nbytes: float) -> float:
    """Device-to-host plus host-to-device copy of nbytes (the two ends of a host-memory hop)."""
    return 2 * nbytes / (HOST_COPY_GBYTES_PER_S * 1e9)


def crosses_vendors(a: NodeGroup, b: NodeGroup) -> bool:
    """Whether a boundary joins GPUs of two vendors: their collective libraries (NCCL, RCCL) share no
    communicator, so every send goes through host memory (FlagScale's hetero_use_cpu_communication)."""
    return a.gpu.vendor != b.gpu.vendor


def mesh_boundary_s(fleet: Fleet, a: NodeGroup, b: NodeGroup, model: ModelArch, ca: ParallelConfig,
                    cb: ParallelConfig, train: TrainingSettings, *,
                    crossings: int) -> tuple[float, float, NetPath | None]:
    """(sender-busy seconds, latency seconds, path) of one micro-batch's activation (or gradient) across a mesh
    boundary from a stage of degrees ca on a to one of degrees cb on b.

    A rank's time is the larger of what it sends and what its counterpart receives at the slower end's per-GPU
    rate; on a shared link (between islands or sites) the whole step's activation, times the boundaries crossing
    it, shares the link. The messages are issued together (batched isend/irecv), so one latency is paid, plus a
    host-memory copy at each end when the boundary crosses vendors."""
    path = fleet.path(a, b)
    if path is None:
        return float("inf"), float("inf"), None
    send, recv = rank_slice_bytes(model, ca, train), rank_slice_bytes(model, cb, train)
    per_rank = max(send, recv)
    t = per_rank / (path.profile.achieved_gbytes_per_s(path.per_gpu_gbps) * 1e9)
    if path.shared:
        whole = send * ca.tp * ca.dp * crossings
        t = max(t, whole / (path.gbps / 8.0 * path.profile.efficiency * 1e9))
    if crosses_vendors(a, b):
        t += host_copy_s(per_rank)
    return t, path.latency_s, path
