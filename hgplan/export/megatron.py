"""Megatron-LM export: pretrain_gpt.py arguments, per-node torchrun scripts, NCCL settings.

Flag names and rules: shared/reference/export-targets.md sections 1 and 5 (Megatron-LM main @ d98e8a64dd,
core_v0.13+ for --pipeline-model-parallel-layout); docs/export.md explains every value.
"""

from __future__ import annotations

import shlex

from hgplan.domain import Fleet, ModelArch, NodeGroup, TrainingSettings
from hgplan.enums import Attention, TransformerImpl
from hgplan.errors import PlanningError
from hgplan.export.common import Export, nccl_env, node_record, node_script, parallel_args, torchrun_command
from hgplan.export.layout import Layout, build_layout, vendor_warnings
from hgplan.plan import Plan, Recompute

def layout_string(plan: Plan) -> str:
    """--pipeline-model-parallel-layout: E on the first stage, L on the last, t per decoder layer.

    With v virtual stages the string lists chunk 0 of every rank, then chunk 1, ...; each rank's layers are
    split evenly over its chunks (the planner keeps them divisible by v).
    """
    p, v = plan.config.pp, plan.config.vpp
    chunks: list[str] = []
    for c in range(v):
        for s in range(p):
            n = plan.stages[s].num_layers // v
            body = f"t*{n}" if n > 1 else ("t" if n == 1 else "")
            if c == 0 and s == 0:
                body = "E" + body
            if c == v - 1 and s == p - 1:
                body = body + "L"
            chunks.append(body)
    return "|".join(chunks)


def unsupported_features(model: ModelArch) -> list[str]:
    """Model features Megatron-LM cannot express (each refuses the export)."""
    out = []
    if model.position_embedding_type == "alibi":
        out.append("ALiBi position embeddings (Megatron-LM's GPT model has none)")
    if model.embedding_layernorm:
        out.append("a LayerNorm after the embedding (BLOOM's embedding_layernorm)")
    if model.activation == "relu":
        out.append("plain ReLU activations (Megatron offers gelu, swiglu and squared ReLU)")
    return out


ROTARY_BASE, ROPE_SCALING_FACTOR, NORM_EPSILON = 10000, 8.0, 1e-5
"""Megatron-LM's defaults (d98e8a6: --rotary-base and --rope-scaling-factor in megatron/training/arguments.py:2418
and :2426, --norm-epsilon is TransformerConfig.layernorm_epsilon, transformer_config.py:201; Megatron-DeepSpeed's
--rotary-position-embeddings-theta and --layernorm-epsilon the same, megatron/arguments.py:635 and :652 at
4efb479d): a flag is written only where the model differs from them."""


def rope_args(model: ModelArch, *, deepspeed: bool = False) -> list[str]:
    """RoPE's flags: base and Llama 3.x scaling (Megatron-DeepSpeed has no scaling; export_deepspeed warns)."""
    if deepspeed:
        base = ["--rotary-position-embeddings-theta", str(model.rotary_base)] * (model.rotary_base != ROTARY_BASE)
        return ["--use-rotary-position-embeddings"] + base
    a = ["--position-embedding-type", "rope"] + ["--rotary-base", str(model.rotary_base)] * (
        model.rotary_base != ROTARY_BASE)
    if model.use_rope_scaling:
        a += ["--use-rope-scaling"] + ["--rope-scaling-factor", f"{model.rope_scaling_factor:g}"] * (
            model.rope_scaling_factor != ROPE_SCALING_FACTOR)
    return a


def model_args(model: ModelArch, train: TrainingSettings, *, deepspeed: bool = False) -> list[str]:
    """The model's architecture flags in Megatron-LM's spelling (Megatron-DeepSpeed's where it differs)."""
    a = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
         "--ffn-hidden-size", str(model.ffn_hidden_size), "--num-attention-heads", str(model.num_attention_heads)]
    if model.num_query_groups != model.num_attention_heads:
        a += (["--num-key-value-heads", str(model.num_query_groups)] if deepspeed
              else ["--group-query-attention", "--num-query-groups", str(model.num_query_groups)])
    if model.kv_channels * model.num_attention_heads != model.hidden_size:
        a += ["--kv-channels", str(model.kv_channels)]
    a += ["--seq-length", str(train.seq_length), "--max-position-embeddings", str(model.max_position_embeddings)]
    if model.position_embedding_type == "rope":
        a += rope_args(model, deepspeed=deepspeed)
    elif model.position_embedding_type == "none":
        a += ["--position-embedding-type", "none"]
    # Megatron-DeepSpeed's --normalization takes choices=['layernorm', 'rmsnorm'] (megatron/arguments.py:647 at
    # 4efb479d): its export wrote Megatron-LM's 'RMSNorm', which argparse refuses before training starts
    a += ["--normalization", model.normalization.lower() if deepspeed else model.normalization]
    if model.norm_epsilon != NORM_EPSILON:
        a += ["--layernorm-epsilon" if deepspeed else "--norm-epsilon", f"{model.norm_epsilon:g}"]
    if model.activation == "swiglu":
        a += ["--swiglu"]
    elif model.activation == "squared_relu":
        a += ["--squared-relu"]
    if model.untie_embeddings_and_output_weights:
        a += ["--untie-embeddings-and-output-weights"]
    if not model.add_bias_linear:
        a += ["--disable-bias-linear"] + (["--add-qkv-bias"] if model.add_qkv_bias else [])
    if model.qk_layernorm:
        a += ["--qk-layernorm"]
    a += ["--hidden-dropout", f"{model.hidden_dropout:g}", "--attention-dropout", f"{model.attention_dropout:g}",
          "--make-vocab-size-divisible-by", str(model.make_vocab_size_divisible_by)]
    return a


def recompute_args(plan: Plan) -> list[str]:
    """Activation recomputation flags for the plan's choice."""
    rc = plan.config.recompute
    if rc is Recompute.SELECTIVE:
        return ["--recompute-granularity", "selective"]
    if rc is Recompute.FULL:
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return []


def transport_cut(plan: Plan, fleet: Fleet) -> tuple[tuple[NodeGroup, NodeGroup] | None, bool]:
    """(the node groups of the first pipeline boundary, the wrap-around one too when interleaved, that one NCCL
    transport cannot carry, or None; whether the first and last stage's link is such a one): Fleet.one_transport."""
    groups = [fleet.group(s.node_group) for s in plan.stages]
    pairs = list(zip(groups, groups[1:])) + ([(groups[-1], groups[0])] if plan.config.vpp > 1 and len(groups) > 1
                                             else [])
    cut = next(((a, b) for a, b in pairs if not fleet.one_transport(a, b)), None)
    return cut, len(groups) > 1 and not fleet.one_transport(groups[0], groups[-1])


SPANNING_GROUPS = (
    ("pp", "pipeline sends (megatron/core/parallel_state.py, get_nccl_options(\"pp\"))"),
    ("mp", "model-parallel group, TP x PP: grad-norm and num-zeros without the distributed optimizer "
           "(parallel_state.py, get_nccl_options(\"mp\"), MODEL_PARALLEL_GROUP)"),
    ("tp_ep_pp", "expert x tensor x pipeline group, built for dense models too "
                 "(parallel_state.py, get_nccl_options(\"tp_ep_pp\"))"),
)
"""Process groups that span every pipeline stage, so cross any transport boundary the pipeline crosses."""


def _socket_groups(plan: Plan, fleet: Fleet, model: ModelArch, ex: Export) -> list[str]:
    """nccl_pg.yaml and its flag when the pipeline crosses a link without RDMA or between transports: every Megatron
    process group that spans the stages runs on sockets; the world group, which the file cannot reach, is named."""
    cut, embd_socket = transport_cut(plan, fleet)
    if cut is None:
        return []
    lines = ["# NCCL options per process group (--nccl-communicator-config-path).",
             "# The pipeline crosses a link without RDMA or between transports: NCCL cannot run one communicator",
             "# over InfiniBand/RoCE and TCP at once, so every group that spans the pipeline stages uses sockets",
             "# while TP and DP stay on the node group's RDMA fabric."]
    groups = list(SPANNING_GROUPS)
    if plan.config.zero_stage == 1:
        groups.append(("intra_dist_opt_instance", "grad-norm and num-zeros of the distributed optimizer over "
                       "the whole world (parallel_state.py, get_nccl_options(\"intra_dist_opt_instance\"); "
                       "megatron/core/optimizer/__init__.py sets it as grad_stats_parallel_group)"))
    if embd_socket and not model.untie_embeddings_and_output_weights:
        groups.append(("embd", "tied-embedding gradient between the first and last stage "
                       "(parallel_state.py, get_nccl_options(\"embd\"))"))
    for name, why in groups:
        lines += [f"# {why}", f"{name}: {{net_name: Socket}}"]
    ex.files["nccl_pg.yaml"] = "\n".join(lines) + "\n"
    ex.notes.append("do not export NCCL_NET: it overrides the per-communicator net_name in nccl_pg.yaml")
    ex.warnings.append("the default (world) process group spans both transports and nccl_pg.yaml cannot configure "
                       "it (torch.distributed.init_process_group, megatron/training/initialize.py); Megatron uses it "
                       "for barriers and small flags: check that NCCL initialises across the boundary (a two-node "
                       "all_reduce_perf with one node on each side) before the run")
    return ["--nccl-communicator-config-path", "nccl_pg.yaml"]


ATTENTION_BACKENDS = {Attention.FUSED: "fused", Attention.FLASH2: "flash", Attention.UNFUSED: "unfused"}
"""hgplan's attention kernels as Megatron-LM's --attention-backend (AttnBackend, megatron/core/transformer/enums.py;
the inverse of megatron_args.ATTENTION_BACKENDS)."""


def kernel_args(train: TrainingSettings) -> tuple[list[str], list[str]]:
    """The training settings' kernels, and warnings where no flag says what was priced: --transformer-impl local for
    megatron-core's local spec, --attention-backend for an attention kernel asked for (TransformerConfig fields at
    d98e8a6, transformer_config.py:1314 and :151; `auto`, Transformer Engine's own choice, is Megatron's default and
    what the cost model prices as fused). Until 2026-11-29 the export wrote neither, so such a plan ran Transformer
    Engine and its default attention, not what it was priced with; FlagScale's export writes them as model keys."""
    if train.transformer_impl is TransformerImpl.LOCAL:
        return ["--transformer-impl", "local"], []
    if train.attention is Attention.FLASH1:
        return [], ["the plan was priced with FlashAttention-1-class attention, which Megatron-LM has no backend for; "
                    "it runs Transformer Engine's own choice (--attention-backend auto) instead"]
    backend = ATTENTION_BACKENDS.get(train.attention)
    return (["--attention-backend", backend] if backend else []), []


def megatron_argv(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, ex: Export) -> list[str]:
    """pretrain_gpt.py's arguments for the plan (files it refers to are added to ex)."""
    c = plan.config
    argv = parallel_args(plan, train)
    if c.pp > 1:
        argv += ["--pipeline-model-parallel-layout", layout_string(plan)]
    kernels, warnings = kernel_args(train)
    ex.warnings += warnings
    argv += model_args(model, train) + kernels + recompute_args(plan)
    if c.zero_stage == 1:
        argv += ["--use-distributed-optimizer"]
        if c.overlap_grad_reduce:
            argv += ["--overlap-grad-reduce", "--overlap-param-gather"]
    elif c.overlap_grad_reduce:
        argv += ["--overlap-grad-reduce"]
    argv += _socket_groups(plan, fleet, model, ex)
    if any(fleet.group(a.node_group).site != fleet.group(b.node_group).site for a, b in zip(plan.stages, plan.stages[1:])):
        argv += ["--distributed-timeout-minutes", "60"]
    return argv


def export_megatron(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
                    script: str = "pretrain_gpt.py") -> Export:
    """Megatron-LM: arguments, a torchrun script per node with its node group's NCCL settings, the host list."""
    bad = unsupported_features(model)
    if bad:
        raise PlanningError(f"Megatron-LM cannot express {'; '.join(bad)}; export refused")
    if plan.config.zero_stage > 1:
        raise PlanningError(f"Megatron-LM's distributed optimizer is ZeRO stage 1; the plan uses stage "
                            f"{plan.config.zero_stage}: export to DeepSpeed instead")
    layout: Layout = build_layout(plan, fleet)
    ex = Export(format="megatron", warnings=vendor_warnings(plan, fleet))
    ex.argv = argv = megatron_argv(plan, fleet, model, train, ex)
    master, nnodes = layout.nodes[0].host, len(layout.nodes)
    nprocs = {n.local_gpus for n in layout.nodes}
    if len(nprocs) > 1:
        ex.warnings.append(f"nodes run different numbers of processes ({sorted(nprocs)}); torchrun's static rendezvous "
                           "assigns ranks by summing them in node-rank order, but its documentation only promises "
                           "homogeneous LOCAL_WORLD_SIZE; check the rank map after launch")
    envs: dict[str, dict[str, str]] = {}
    for node in layout.nodes:
        g = fleet.group(node.group)
        env = envs.setdefault(g.key, nccl_env(g))
        cmd = torchrun_command(node, nnodes=nnodes, master=master, script=script) + argv
        ex.nodes.append(node_record(node, env, cmd))
        comment = (f"# node {node.node_rank} of {nnodes}: {node.host} ({g.key}), global ranks "
                   f"{node.first_rank}-{node.first_rank + node.local_gpus - 1}")
        ex.files[f"launch_node{node.node_rank:03d}_{node.host}.sh"] = node_script(env, cmd, comment)
    ex.files["hosts.txt"] = "".join(f"{n.node_rank} {n.host} {n.local_gpus}\n" for n in layout.nodes)
    ex.files["megatron_args.txt"] = " \\\n  ".join(shlex.quote(x) for x in argv) + "\n"
    for key, env in envs.items():
        ex.files[f"nccl_env_{key.replace('/', '_')}.sh"] = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    ex.notes.append("NCCL_IB_HCA, NCCL_IB_GID_INDEX and NCCL_SOCKET_IFNAME are typical values: check them on your nodes "
                    "(ibv_devices, show_gids, ip link) or set them in each node's /etc/nccl.conf")
    return ex
