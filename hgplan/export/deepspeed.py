"""DeepSpeed / Megatron-DeepSpeed export: ds_config.json, hostfile in rank order, launcher command, partition.

Rules (export-targets.md section 3): train_batch_size = micro x GAS x DP; ZeRO stage <= 1 with pipeline
parallelism; the hostfile's line order is the node rank; GPTModelPipe hard-codes partition_method
'type:transformer' (even layers), so an uneven plan needs the patch described in partition.md.
"""

from __future__ import annotations

import json
import shlex

from hgplan.costmodel.compute import attention_kernel
from hgplan.domain import Fleet, ModelArch, Precision, TrainingSettings
from hgplan.enums import Attention
from hgplan.errors import PlanningError
from hgplan.export.common import MASTER_PORT, Export, nccl_env, node_record, parallel_args
from hgplan.export.layout import build_layout, vendor_warnings
from hgplan.export.megatron import model_args, recompute_args, transport_cut, unsupported_features
from hgplan.plan import Plan


def ds_config(plan: Plan, train: TrainingSettings) -> dict:
    """DeepSpeed's ds_config.json for the plan (batch identity micro x GAS x DP = global batch)."""
    c = plan.config
    gas = train.global_batch_size // (c.micro_batch_size * c.dp)
    zero = min(c.zero_stage, 1) if c.pp > 1 else c.zero_stage
    cfg: dict = {"train_batch_size": train.global_batch_size, "train_micro_batch_size_per_gpu": c.micro_batch_size,
                 "gradient_accumulation_steps": gas, "zero_optimization": {"stage": zero}}
    if train.precision is Precision.BF16:
        cfg["bf16"] = {"enabled": True}
    else:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
    if c.pp > 1:
        cfg["pipeline"] = {"pipe_partitioned": True, "grad_partitioned": True}
    return cfg


FLASH_FLAGS = {Attention.FLASH2: "--use-flash-attn-v2", Attention.FUSED: "--use-flash-attn-v2",
               Attention.FLASH1: "--use-flash-attn-v1"}
"""Megatron-DeepSpeed's FlashAttention flags (megatron/arguments.py:927-930 at 4efb479d) for the kernel a plan was
priced with; it has no cuDNN/Transformer Engine fused attention, FlashAttention-2 is the nearest."""


def attention_args(plan: Plan, fleet: Fleet, train: TrainingSettings) -> tuple[list[str], list[str]]:
    """The FlashAttention flag the plan's attention needs, with warnings where Megatron-DeepSpeed runs another kernel:
    without a flag its attention materialises the scores (megatron/model/transformer.py, CoreAttention), which a plan
    priced with a FlashAttention-class kernel has no memory for."""
    kernels = {attention_kernel(train, fleet.group(s.node_group).gpu) for s in plan.stages}
    flags = {FLASH_FLAGS[k] for k in kernels if k in FLASH_FLAGS}
    if not flags:
        return [], []
    if len(flags) > 1 or Attention.UNFUSED in kernels:
        return [], [f"the plan's GPUs were priced with different attention kernels ({', '.join(sorted(kernels))}); "
                    "Megatron-DeepSpeed takes one for all ranks, so this export sets none and every rank runs the "
                    "unfused path, which stores the attention scores: re-plan with --target deepspeed --attention "
                    "unfused, or check memory with `hgplan explain` and that setting"]
    fused = ([f"the plan was priced with fused attention (cuDNN / Transformer Engine), which Megatron-DeepSpeed "
              f"lacks; it runs FlashAttention-2 ({next(iter(flags))}), so expect its attention to be slower than "
              "predicted: search with --target deepspeed, which prices FlashAttention-2"]
             if Attention.FUSED in kernels else [])
    return sorted(flags), fused


def partition_bounds(plan: Plan) -> list[int]:
    """PipelineModule 'parts' in transformer-layer index space: stage i owns layers [parts[i], parts[i+1])."""
    out = [0]
    for s in plan.stages:
        out.append(out[-1] + s.num_layers)
    return out


def _one_transport_pipeline(plan: Plan, fleet: Fleet, model: ModelArch) -> None:
    """Refuse a pipeline whose stage boundary (or tied-embedding pair) one NCCL transport cannot carry (megatron.py's
    transport_cut): Megatron-DeepSpeed and DeepSpeed build their groups without per-communicator NCCL settings (no
    --nccl-communicator-config-path at 4efb479d)."""
    cut, ends = transport_cut(plan, fleet)
    if cut is None and ends and not model.untie_embeddings_and_output_weights:
        cut = (fleet.group(plan.stages[0].node_group), fleet.group(plan.stages[-1].node_group))
    if cut is not None:
        a, b = cut
        via = fleet.path(a, b)
        raise PlanningError(
            f"the pipeline joins {a.key} ({a.nic_transport}) and {b.key} ({b.nic_transport}) over "
            f"{via.transport if via else 'no path'}, which one NCCL transport cannot carry. Megatron-LM crosses "
            "such a boundary with NCCL on sockets for the groups that span the stages (--format megatron); "
            "Megatron-DeepSpeed has no per-communicator NCCL settings, and NCCL_NET=Socket on every node would "
            "move all its traffic, the data-parallel reduction included, to TCP, which this plan was not priced "
            "with: re-plan with --target deepspeed, which keeps the pipeline on one transport")


def export_deepspeed(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
                     script: str = "pretrain_gpt.py") -> Export:
    """Megatron-DeepSpeed: ds_config.json, a rank-ordered hostfile, the launcher, NCCL settings per node group and, for
    uneven stages, partition.json with the patch it needs."""
    c = plan.config
    # Megatron-DeepSpeed (4efb479d, megatron/arguments.py) has no --add-qkv-bias, --qk-layernorm or
    # --position-embedding-type (only rotary turns the learned positions off)
    bad = unsupported_features(model) + [what for what, used in (
        ("a bias on the QKV projection alone (Megatron-LM's --add-qkv-bias)", model.add_qkv_bias and not
         model.add_bias_linear), ("query and key norms (Megatron-LM's --qk-layernorm)", model.qk_layernorm),
        ("no position embedding (Megatron-LM's --position-embedding-type none)",
         model.position_embedding_type == "none")) if used]
    if bad:
        raise PlanningError(f"Megatron-DeepSpeed cannot express {'; '.join(bad)}; export refused")
    if train.precision is Precision.FP8:
        raise PlanningError("the plan trains in fp8 (Transformer Engine); Megatron-DeepSpeed has no fp8 path: export "
                            "to Megatron-LM (--format megatron) or re-plan with --precision bf16")
    if c.vpp > 1:
        raise PlanningError(f"the plan interleaves {c.vpp} virtual stages per rank; DeepSpeed's pipeline engine has no "
                            "interleaved schedule: re-plan with --target deepspeed")
    if c.cp > 1:
        raise PlanningError("context parallelism is a Megatron-LM feature; Megatron-DeepSpeed uses Ulysses "
                            "(--ds-sequence-parallel-size) instead: re-plan with --target deepspeed")
    if c.pp > 1 and c.zero_stage > 1:
        raise PlanningError(f"ZeRO stage {c.zero_stage} cannot be combined with pipeline parallelism in DeepSpeed")
    _one_transport_pipeline(plan, fleet, model)
    layout = build_layout(plan, fleet)
    ex = Export(format="deepspeed", warnings=vendor_warnings(plan, fleet))
    cfg = ds_config(plan, train)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * c.dp
    ex.files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
    ex.files["hostfile"] = "".join(f"{n.host} slots={n.local_gpus}\n" for n in layout.nodes)
    argv = parallel_args(plan, train, deepspeed=True)
    flash, flash_warnings = attention_args(plan, fleet, train)
    argv += model_args(model, train, deepspeed=True) + flash + recompute_args(plan)
    argv += ["--deepspeed", "--deepspeed_config", "ds_config.json", "--zero-stage", str(cfg["zero_optimization"]["stage"])]
    ex.argv = argv
    master = layout.nodes[0].host
    launcher = ["deepspeed", "--hostfile", "hostfile", "--master_addr", master, "--master_port", str(MASTER_PORT),
                script] + argv
    # Megatron-DeepSpeed refuses sequence parallelism unless every rank has CUDA_DEVICE_MAX_CONNECTIONS=1
    # (megatron/arguments.py:403 at 4efb479d); DeepSpeed's multi-node launcher passes on only NCCL_*, PYTHON*, UCX*,
    # MV2* and MLFLOW* variables and the lines of .deepspeed_env in the directory it runs in (deepspeed/launcher/
    # runner.py, EXPORT_ENVS, DEEPSPEED_ENVIRONMENT_PATHS), a single node this shell's environment: both are set
    ex.files[".deepspeed_env"] = "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    ex.files["launch.sh"] = ("#!/usr/bin/env bash\nset -euo pipefail\n"
                             "# DeepSpeed exports every NCCL_* variable of this shell to all nodes (pdsh launcher):\n"
                             "# keep per-node-group NCCL settings in each node's /etc/nccl.conf (nccl_conf_*.conf).\n"
                             "# Run from this directory: DeepSpeed reads .deepspeed_env here and passes its\n"
                             "# CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-DeepSpeed needs it) to every node.\n"
                             "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
                             + " ".join(shlex.quote(x) for x in launcher) + ' "$@"\n')
    for key in sorted({n.group for n in layout.nodes}):
        env = nccl_env(fleet.group(key))
        ex.files[f"nccl_conf_{key.replace('/', '_')}.conf"] = "".join(f"{k}={v}\n" for k, v in env.items()
                                                                      if k.startswith("NCCL_"))
    ex.nodes = [node_record(n) for n in layout.nodes]
    layers = [s.num_layers for s in plan.stages]
    if c.pp > 1 and len(set(layers)) > 1:
        parts = partition_bounds(plan)
        ex.files["partition.json"] = json.dumps({"layers_per_stage": layers, "parts": parts}, indent=2) + "\n"
        ex.files["partition.md"] = (
            "# Uneven pipeline stages in Megatron-DeepSpeed\n\n"
            f"The plan gives the stages {layers} transformer layers. Megatron-DeepSpeed's GPTModelPipe hard-codes\n"
            "`partition_method='type:transformer'`, which splits the layers evenly, and has no flag to change it.\n"
            "To run the plan as planned, subclass GPTModelPipe and override `_partition_layers` so that it sets\n"
            f"`self.parts` to the transformer-layer boundaries {parts} (offset by the index of the first\n"
            "transformer layer spec) and calls `self._set_bounds(...)`. Without the patch DeepSpeed runs an even\n"
            "split, which hgplan predicts to be slower (see `hgplan explain` with --layers).\n")
        ex.warnings.append(f"DeepSpeed cannot take per-stage layer counts from the command line: the plan's layers "
                           f"{layers} are in partition.json; without the GPTModelPipe patch in partition.md DeepSpeed "
                           "splits the layers evenly")
    ex.warnings += flash_warnings
    if model.use_rope_scaling:
        ex.warnings.append("Megatron-DeepSpeed has no Llama 3.x RoPE scaling (Megatron-LM's --use-rope-scaling; "
                           f"none at 4efb479d): the run uses RoPE of base {model.rotary_base} without it, which costs "
                           "the same but is not the model file's position encoding (its low frequencies are not "
                           "scaled)")
    ex.notes.append("the deepspeed launcher passes --local_rank; Megatron-DeepSpeed accepts it (stock Megatron-LM "
                    "would need --no_local_rank)")
    return ex
