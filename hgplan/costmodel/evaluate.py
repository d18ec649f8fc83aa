"""Evaluate a plan: per-stage compute, communication and memory, then the pipeline schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from hgplan.costmodel.comm import (allreduce_s, group_busbw_gbytes_per_s, half_collective_s,
                                   intra_node_busbw_gbytes_per_s, nic_gbytes_per_s, overlapped_s, ring_latency_s)
from hgplan.costmodel.compute import BYTES, LayerTime, embedding_time, hbm_s, head_time, layer_time
from hgplan.costmodel.flops import megatron_model_flops
from hgplan.costmodel.memory import StageMemory, stage_memory
from hgplan.costmodel.pipeline import Op, closed_form, simulate
from hgplan.domain import Attention, Fleet, ModelArch, NetPath, NodeGroup, PathKind, Precision, Runtime, TrainingSettings
from hgplan.plan import ParallelConfig, Plan, Recompute

OPTIMIZER_BYTES_PER_PARAM = 4 + 12 + 12 + 2
"""Adam step: read fp32 grad and master/m/v, write master/m/v and the 16-bit weight."""
DEEPSPEED_ZERO3_GBYTES_PER_S = 24.3
"""What DeepSpeed's ZeRO-3 of 2021 (0.3.x, PyTorch 1.8) moved per GPU per second through its parameter collectives,
whatever the fabric: on one 8 x A100 NVLink node, gathering 5.1 B fp16 parameters took its forward from 60 ms
(ZeRO-2) to 480 ms, i.e. 10.2 GB in 420 ms (DeepSpeed issue #1174). Each gather synchronised the device and copied
its output (DeepSpeed PR #1188), so the bound is the runtime's, not the wire's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePrediction:
    index: int
    node_group: str
    site: str
    gpu: str
    gpus: int
    layers: int
    fwd_s: float
    """One micro-batch forward through the stage (all its chunks)."""
    bwd_s: float
    compute_s: float
    """Forward + backward over all micro-batches of the iteration."""
    p2p_s: float
    """Time this stage spends sending activations and gradients over the iteration."""
    dp_sync_s: float
    """Exposed data-parallel (and tied-embedding) synchronisation after the pipeline flush."""
    optimizer_s: float
    memory: StageMemory
    memory_capacity_gib: float

    @property
    def memory_gib(self) -> float:
        return self.memory.total_gib

    @property
    def fits(self) -> bool:
        return self.memory.total_gib <= self.memory_capacity_gib

    @property
    def headroom_gib(self) -> float:
        return self.memory_capacity_gib - self.memory.total_gib


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    iteration_time_s: float
    pipeline_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    """Megatron's logged figure: model FLOPs / (iteration time x world size)."""
    hardware_tflops_per_gpu: float
    mfu: float
    """Model FLOPs / (iteration time x sum of the used GPUs' peaks)."""
    hfu: float
    bubble_fraction: float
    num_microbatches: int
    bottleneck_stage: int
    method: str
    stages: tuple[StagePrediction, ...]
    boundaries: tuple[dict, ...]
    ops: tuple[Op, ...] = field(default=(), repr=False)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)


def _tp_bandwidth(group: NodeGroup, cfg: ParallelConfig, fleet: Fleet) -> tuple[float, float]:
    if cfg.tp <= group.gpus_per_node:
        return intra_node_busbw_gbytes_per_s(group.gpu, group.intra_node_gbytes_per_s), 15e-6
    transport = fleet.transports[group.nic_transport]
    return nic_gbytes_per_s(group, transport), transport.latency_us * 1e-6


def p2p_message_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """Bytes one GPU sends across a stage boundary per micro-batch: its 1/TP shard of [s/CP, b, h] activations."""
    return cfg.micro_batch_size * train.seq_length / cfg.cp * model.hidden_size * BYTES / cfg.tp


def p2p_seconds(fleet: Fleet, a: NodeGroup, b: NodeGroup, cfg: ParallelConfig, *, msg_bytes: float,
                crossings: int) -> tuple[float, float, NetPath | None]:
    """(sender-busy seconds, latency seconds, path) for one activation message between two stages.

    Every GPU of a stage sends its 1/TP shard at once; on a shared link (between islands or sites) all
    TP x CP x DP flows of the boundary, times the boundaries that cross the same link, share its bandwidth.
    """
    path = fleet.path(a, b)
    if path is None:
        return float("inf"), float("inf"), None
    if path.kind is PathKind.SAME_GROUP and cfg.gpus_per_stage < a.gpus_per_node:
        bw = intra_node_busbw_gbytes_per_s(a.gpu, a.intra_node_gbytes_per_s)
        return msg_bytes / (bw * 1e9), 5e-6, path
    per_gpu = path.per_gpu_gbps / 8.0 * path.efficiency * 1e9
    t = msg_bytes / per_gpu
    if path.shared:
        flows = cfg.gpus_per_stage * crossings
        t = max(t, msg_bytes * flows / (path.gbps / 8.0 * path.efficiency * 1e9))
    return t, path.latency_s, path


def _tensors_per_layer(model: ModelArch) -> int:
    """Parameter tensors of one layer: QKV, output, MLP weights (+ biases), two norms (weight, + bias)."""
    mats = 2 + (3 if model.gated else 2)
    norms = 2 * (2 if model.normalization == "LayerNorm" else 1)
    return mats * (2 if model.add_bias_linear else 1) + norms


def grad_bytes(precision: Precision) -> float:
    """Bytes per gradient element in the data-parallel reduction: fp32 main grads with bf16, fp16 with fp16."""
    return 4.0 if precision is Precision.BF16 else 2.0


def layer_cost(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig,
               train: TrainingSettings) -> tuple[LayerTime, float, float]:
    """(LayerTime, forward seconds, backward seconds) of one layer for one micro-batch, CP exposure included."""
    busbw, lat = _tp_bandwidth(g, cfg, fleet)
    lt = layer_time(model, g.gpu, cfg, train, tp_busbw_gbytes_per_s=busbw, tp_latency_s=lat)
    f_l, b_l = lt.fwd_s, lt.bwd_s
    t, c = cfg.tp, cfg.cp
    if c > 1:
        transport = fleet.transports[g.nic_transport]
        cp_bw, cp_lat = group_busbw_gbytes_per_s(g, transport, members=c, stride=t)
        kv_step = cfg.micro_batch_size * (train.seq_length / c) * 2 * model.kv_dim / t * BYTES
        cp_f = (c - 1) * (kv_step / (cp_bw * 1e9) + cp_lat)
        share = g.gpu.eff.comm_sm_share
        f_l += overlapped_s(lt.attention_fwd_s, cp_f, sm_share=share) - lt.attention_fwd_s
        b_l += overlapped_s(2.5 * lt.attention_fwd_s, 2 * cp_f, sm_share=share) - 2.5 * lt.attention_fwd_s
    return lt, f_l, b_l


def edge_costs(g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float, float, float]:
    """(embedding fwd, embedding bwd, head fwd, head bwd incl. recompute) seconds for one micro-batch."""
    ef, eb = embedding_time(model, g.gpu, cfg, train)
    hf, hb = head_time(model, g.gpu, cfg, train)
    if cfg.recompute is Recompute.FULL:
        hb += hf
    return ef, eb, hf, hb


def dp_tail(fleet: Fleet, g: NodeGroup, cfg: ParallelConfig, train: TrainingSettings, *, params: float, layers: int,
            fwd_s: float, bwd_s: float) -> tuple[float, float]:
    """(exposed data-parallel sync seconds, optimizer-step seconds) of one stage after its last backward."""
    t, c, d, v = cfg.tp, cfg.cp, cfg.dp, cfg.vpp
    transport = fleet.transports[g.nic_transport]
    members = d * c
    bw, lat_dp = group_busbw_gbytes_per_s(g, transport, members=members, stride=t)
    grads = params * grad_bytes(train.precision)
    if cfg.zero_stage == 0:
        reduce = allreduce_s(grads, members, bw, latency_s=lat_dp)
        gather = 0.0
    elif cfg.zero_stage < 3:
        reduce = half_collective_s(grads, members, bw, latency_s=lat_dp)
        gather = half_collective_s(params * BYTES, members, bw, latency_s=lat_dp)
    else:
        reduce = gather = 0.0  # ZeRO-3 traffic is per micro-batch, inside fwd/bwd
    if cfg.overlap_grad_reduce and layers:
        # the reduction hides behind the last micro-batch's backward but for the first layer's bucket, the
        # parameter all-gather behind the next forward; what they overlap slows by the SMs they hold
        window = bwd_s / v * (layers - 1) / layers
        share = g.gpu.eff.comm_sm_share
        exposed = (overlapped_s(window, reduce, sm_share=share, exposed_s=reduce / layers) - window
                   + overlapped_s(fwd_s / v, gather, sm_share=share) - fwd_s / v)
    else:
        exposed = reduce + gather
    shard = params / (members if cfg.zero_stage >= 1 else 1)
    return exposed, hbm_s(g.gpu, shard * OPTIMIZER_BYTES_PER_PARAM)


def tied_embedding_sync_s(fleet: Fleet, first: NodeGroup, last: NodeGroup, model: ModelArch, cfg: ParallelConfig,
                          train: TrainingSettings) -> float:
    """All-reduce of the tied embedding's gradient between the first and last stage (0 when untied or PP = 1)."""
    if cfg.pp <= 1 or model.untie_embeddings_and_output_weights:
        return 0.0
    emb_bytes = model.padded_vocab(cfg.tp) * model.hidden_size / cfg.tp * grad_bytes(train.precision)
    busy, latency, _ = p2p_seconds(fleet, first, last, cfg, msg_bytes=emb_bytes, crossings=1)
    return 2 * busy + 2 * latency


def evaluate(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
             use_simulator: bool = False, keep_ops: bool = False) -> Prediction:
    """Predict iteration time, throughput and per-stage memory. The plan must have passed validate_plan."""
    cfg = plan.config
    p, v, t, c, d = cfg.pp, cfg.vpp, cfg.tp, cfg.cp, cfg.dp
    m = cfg.num_microbatches(train.global_batch_size)
    groups = [fleet.group(st.node_group) for st in plan.stages]
    flash = train.attention is Attention.FLASH
    gbytes = grad_bytes(train.precision)
    # --- per-stage compute
    fwd, bwd, layer_times, params = [], [], [], []
    memories = []
    cache: dict[str, tuple[LayerTime, float, float]] = {}
    for i, (st, g) in enumerate(zip(plan.stages, groups)):
        if g.key not in cache:
            cache[g.key] = layer_cost(fleet, g, model, cfg, train)
        lt, f_l, b_l = cache[g.key]
        f_s, b_s = st.num_layers * f_l, st.num_layers * b_l
        ef, eb, hf, hb = edge_costs(g, model, cfg, train)
        if i == 0:
            f_s, b_s = f_s + ef, b_s + eb
        if i == p - 1:
            f_s, b_s = f_s + hf, b_s + hb
        mem = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length, num_microbatches=m,
                           stage=i, layers=st.num_layers, flash=flash)
        if cfg.zero_stage >= 3 and d * c > 1:
            transport = fleet.transports[g.nic_transport]
            bw, lat = group_busbw_gbytes_per_s(g, transport, members=d * c, stride=t)
            # Megatron-FSDP and PyTorch FSDP gather one flat buffer per layer; DeepSpeed ZeRO-3 one per module
            # (each parameter tensor), each paying the ring's n - 1 step latency.
            deepspeed = train.runtime is Runtime.DEEPSPEED
            calls = max(1, st.num_layers) * (_tensors_per_layer(model) if deepspeed else 1)
            latency = calls * ring_latency_s(d * c, lat)
            bandwidth = (d * c - 1) / (d * c) / (bw * 1e9)
            gather = mem.params * BYTES * bandwidth + latency
            scatter = mem.params * gbytes * bandwidth + latency
            if deepspeed:
                gather = max(gather, mem.params * BYTES / (DEEPSPEED_ZERO3_GBYTES_PER_S * 1e9))
                scatter = max(scatter, mem.params * gbytes / (DEEPSPEED_ZERO3_GBYTES_PER_S * 1e9))
            # DeepSpeed releases each module's parameters after its forward, so full recompute gathers them again.
            recompute_gather = gather if cfg.recompute is Recompute.FULL and deepspeed else 0.0
            # Gathers are prefetched one layer ahead on a side stream: only the first layer's waits.
            first_layer = gather / max(1, st.num_layers)
            share = g.gpu.eff.comm_sm_share
            f_s = overlapped_s(f_s, gather, sm_share=share, exposed_s=first_layer)
            b_s = overlapped_s(b_s, gather + scatter + recompute_gather, sm_share=share, exposed_s=first_layer)
        fwd.append(f_s)
        bwd.append(b_s)
        layer_times.append(lt)
        params.append(mem.params)
        memories.append(mem)
    # --- point-to-point between stages
    msg = p2p_message_bytes(model, cfg, train)
    n_bound = p if v > 1 else p - 1
    pairs = [(k, (k + 1) % p) for k in range(n_bound)]
    link_use: dict[int, int] = {}
    for a_i, b_i in pairs:
        path = fleet.path(groups[a_i], groups[b_i])
        if path is not None and path.link is not None:
            link_use[id(path.link)] = link_use.get(id(path.link), 0) + 1
    xf = [0.0] * p
    xb = [0.0] * p
    lat = [0.0] * p
    boundaries = []
    for k, (a_i, b_i) in enumerate(pairs):
        path = fleet.path(groups[a_i], groups[b_i])
        crossings = link_use.get(id(path.link), 1) if path is not None and path.link is not None else 1
        busy, latency, path = p2p_seconds(fleet, groups[a_i], groups[b_i], cfg, msg_bytes=msg, crossings=crossings)
        xf[k] = xb[k] = busy
        lat[k] = latency
        boundaries.append({"from_stage": a_i, "to_stage": b_i, "path": path.kind if path else "none",
                           "transport": path.transport.value if path else None, "send_s": busy, "latency_s": latency,
                           "message_mib": msg / 2 ** 20})
    # --- pipeline
    ops: list[Op] = []
    if use_simulator:
        pipe, ops = simulate(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v, keep_ops=keep_ops)
        method = "simulator"
    else:
        pipe = closed_form(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v)
        method = "closed_form"
    # --- data-parallel sync and optimizer, after each stage's last backward
    stages = []
    ends = []
    tied_sync = tied_embedding_sync_s(fleet, groups[0], groups[-1], model, cfg, train)
    for i, (st, g) in enumerate(zip(plan.stages, groups)):
        exposed, opt = dp_tail(fleet, g, cfg, train, params=params[i], layers=st.num_layers, fwd_s=fwd[i], bwd_s=bwd[i])
        if i in (0, p - 1):
            exposed += tied_sync
        ends.append(pipe.finish_s[i] + exposed + opt)
        stages.append(StagePrediction(
            index=i, node_group=g.key, site=g.site, gpu=g.gpu.id, gpus=cfg.gpus_per_stage, layers=st.num_layers,
            fwd_s=fwd[i], bwd_s=bwd[i], compute_s=m * (fwd[i] + bwd[i]),
            p2p_s=m * v * ((xf[i] if (i < p - 1 or v > 1) else 0.0) + (xb[i - 1] if i > 0 else (xb[p - 1] if v > 1 else 0.0))),
            dp_sync_s=exposed, optimizer_s=opt, memory=memories[i], memory_capacity_gib=g.gpu.hbm_gib))
    iteration = max(max(ends), pipe.iteration_s)
    # --- metrics
    model_flops = megatron_model_flops(model, global_batch_size=train.global_batch_size, seq_length=train.seq_length)
    extra = 0.0
    for st, lt in zip(plan.stages, layer_times):
        recomputed = {Recompute.FULL: lt.fwd_flops, Recompute.SELECTIVE: lt.attention_fwd_flops,
                      Recompute.NONE: 0.0}[cfg.recompute]
        extra += recomputed * st.num_layers * m * cfg.gpus_per_stage
    world = cfg.world_size
    peak_sum = sum(g.gpu.peak_tflops(train.precision) for g in groups) * cfg.gpus_per_stage * 1e12
    tokens = train.global_batch_size * train.seq_length
    return Prediction(
        iteration_time_s=iteration, pipeline_s=pipe.iteration_s, tokens_per_s=tokens / iteration,
        model_tflops_per_gpu=model_flops / (iteration * world * 1e12),
        hardware_tflops_per_gpu=(model_flops + extra) / (iteration * world * 1e12),
        mfu=model_flops / (iteration * peak_sum), hfu=(model_flops + extra) / (iteration * peak_sum),
        bubble_fraction=pipe.bubble_fraction, num_microbatches=m, bottleneck_stage=pipe.bottleneck_stage,
        method=method, stages=tuple(stages), boundaries=tuple(boundaries), ops=tuple(ops))


