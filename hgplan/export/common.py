"""What every export target shares: the result type, NCCL settings per node group, torchrun commands, node
scripts and the parallelism arguments (pure: plans in, file texts out)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from hgplan.documents import ExportNode, ExportReport
from hgplan.domain import NodeGroup, Precision, TrainingSettings, Transport
from hgplan.export.layout import NodeSlot
from hgplan.plan import Plan

MASTER_PORT = 29500
"""torchrun's and DeepSpeed's default rendezvous port."""


@dataclass(slots=True, kw_only=True)
class Export:
    """The files, arguments and per-node commands of one export target."""

    format: str
    files: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    nodes: list[ExportNode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def report(self) -> ExportReport:
        """`hgplan export --json`: everything, file contents included, in a stable order."""
        return ExportReport(format=self.format, argv=self.argv, nodes=self.nodes, files=sorted(self.files),
                            warnings=self.warnings, notes=self.notes, file_contents=dict(sorted(self.files.items())))


SOCKET_NTHREADS = 4
"""NCCL_SOCKET_NTHREADS on Ethernet nodes; with NCCL_NSOCKS_PERTHREAD the sockets the cost model counts on
(profiles/nics.yaml, ethernet socket_streams = their product)."""
NSOCKS_PERTHREAD = 4


def nccl_env(group: NodeGroup) -> dict[str, str]:
    """Per-node-group NCCL environment (NCCL user guide, env.html). Device names are placeholders to check."""
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    if group.nic_transport is Transport.INFINIBAND:
        env["NCCL_IB_HCA"] = "mlx5"
        env["NCCL_CROSS_NIC"] = "0"
    elif group.nic_transport is Transport.ROCE:
        env["NCCL_IB_HCA"] = "mlx5"
        env["NCCL_IB_GID_INDEX"] = "3"
        env["NCCL_IB_TC"] = "106"
    else:
        env["NCCL_IB_DISABLE"] = "1"
        env["NCCL_SOCKET_IFNAME"] = "eth0"
        env["NCCL_SOCKET_NTHREADS"] = str(SOCKET_NTHREADS)
        env["NCCL_NSOCKS_PERTHREAD"] = str(NSOCKS_PERTHREAD)
    return env


def torchrun_command(node: NodeSlot, *, nnodes: int, master: str, script: str) -> list[str]:
    """torchrun with a static rendezvous on the first node (export-targets.md, torchrun)."""
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(node.local_gpus), "--node-rank",
            str(node.node_rank), "--master-addr", master, "--master-port", str(MASTER_PORT), script]


def node_script(env: dict[str, str], cmd: list[str], comment: str | None = None) -> str:
    """A node's launch script: strict bash, its environment, then the command (extra arguments passed on)."""
    lines = ["#!/usr/bin/env bash"] + ([comment] if comment else []) + ["set -euo pipefail"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(" ".join(shlex.quote(x) for x in cmd) + ' "$@"')
    return "\n".join(lines) + "\n"


def node_record(node: NodeSlot, env: dict[str, str] | None = None, argv: list[str] | None = None) -> ExportNode:
    """A node as listed in the export report."""
    extra = {} if env is None else {"env": env, "argv": argv}
    return ExportNode(host=node.host, node_rank=node.node_rank, node_group=node.group, nproc=node.local_gpus,
                      first_rank=node.first_rank, **extra)


def parallel_args(plan: Plan, train: TrainingSettings, *, deepspeed: bool = False) -> list[str]:
    """Degrees, batch sizes and precision, in Megatron-LM's spelling (Megatron-DeepSpeed adds
    --no-pipeline-parallel for a single stage). fp8 is bf16 with Transformer Engine's fp8 linear layers."""
    c = plan.config
    a = ["--tensor-model-parallel-size", str(c.tp), "--pipeline-model-parallel-size", str(c.pp)]
    if deepspeed and c.pp == 1:
        a += ["--no-pipeline-parallel"]
    if c.cp > 1:
        a += ["--context-parallel-size", str(c.cp)]
    if c.sequence_parallel:
        a += ["--sequence-parallel"]
    a += ["--micro-batch-size", str(c.micro_batch_size), "--global-batch-size", str(train.global_batch_size)]
    a += ["--fp16"] if train.precision is Precision.FP16 else ["--bf16"]
    if train.precision is Precision.FP8:
        a += ["--fp8-format", "hybrid"]  # Transformer Engine: E4M3 forward, E5M2 gradients (export-targets.md 1.4)
        a += ["--fp8-recipe", train.fp8_recipe.value]  # Megatron-LM's default is delayed; said, so it cannot drift
    return a
