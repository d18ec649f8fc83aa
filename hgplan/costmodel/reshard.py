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

from hgplan.costmodel.compute import BYTES
from hgplan.domain import ModelArch, NodeGroup, TrainingSettings
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


def host_copy_s(nbytes: float) -> float:
    """Device-to-host plus host-to-device copy of nbytes (the two ends of a host-memory hop)."""
    return 2 * nbytes / (HOST_COPY_GBYTES_PER_S * 1e9)


def crosses_vendors(a: NodeGroup, b: NodeGroup) -> bool:
    """Whether a boundary joins GPUs of two vendors: their collective libraries (NCCL, RCCL) share no
    communicator, so every send goes through host memory (FlagScale's hetero_use_cpu_communication)."""
    return a.gpu.vendor != b.gpu.vendor


def cross_vendor_message(groups: list[NodeGroup], *, flagscale: bool) -> str | None:
    """What a pipeline over GPUs of several vendors needs to run, or None when it stays on one vendor's GPUs."""
    vendors = sorted({g.gpu.vendor for g in groups})
    if len(vendors) < 2:
        return None
    head = f"the pipeline spans {' and '.join(vendors)} GPUs: "
    if flagscale:
        return head + ("FlagScale sends across each vendor boundary through host memory over gloo "
                       "(hetero_use_cpu_communication), and the plan prices that copy; TP and DP stay inside one "
                       "vendor's node group")
    return head + ("a stock PyTorch build uses NCCL on NVIDIA and RCCL on AMD, which cannot share a communicator; "
                   "the cross-vendor pipeline boundary needs a library both support (for example a gloo process "
                   "group for those point-to-point transfers, or a unified communicator as HETHUB built) and a "
                   "PyTorch build per vendor; TP and DP stay inside one vendor's node group")

