"""Evaluate a plan: per-stage compute, communication and memory, then the pipeline schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from hgplan.costmodel.comm import (allreduce_s, flow_gbytes_per_s, group_busbw_gbytes_per_s, half_collective_s,
                                   intra_node_busbw, nic_gbytes_per_s, overlapped_s, ring_hop_gbytes_per_s,
                                   ring_latency_s)
from hgplan.costmodel.compute import BYTES, FLASH_BWD_RATIO, LayerTime, attention_kernel, compute_precision, embedding_time, hbm_s, head_time, layer_time
from hgplan.costmodel.flops import megatron_model_flops
from hgplan.costmodel.memory import StageMemory, stage_memory
from hgplan.costmodel.optimizer import GRAD_ZERO_BYTES_PER_PARAM, optimizer_bytes_per_param
from hgplan.costmodel.pipeline import Op, chunk_sends, closed_form, lower_bound_s, simulate
from hgplan.costmodel.reshard import (boundary_record, crosses_vendors, gloo_flow_gbytes_per_s, host_copies,
                                      host_copy_s, rank_slice_bytes)
from hgplan.domain import (Attention, Fleet, ModelArch, NetPath, NodeGroup, PathKind, Precision, Runtime, TrainingSettings,
                           TransformerImpl)
from hgplan.plan import ParallelConfig, Plan, Recompute

NVLINK_COLLECTIVE_LATENCY_S = 15e-6
"""Latency of one small tensor-parallel all-reduce inside an NVLink/xGMI node (NCCL's ring/tree start-up, as
nccl-tests shows for small messages on 8-GPU nodes)."""
INTRA_NODE_P2P_LATENCY_S = 5e-6
"""Latency of one point-to-point send between two GPUs of a node (a single NVLink/PCIe hop)."""
DEEPSPEED_ZERO3_GBYTES_PER_S = 24.3
"""What DeepSpeed's ZeRO-3 of 2021 (0.3.x, PyTorch 1.8) moved per GPU per second through its parameter collectives,
whatever the fabric: on one 8 x A100 NVLink node, gathering 5.1 B fp16 parameters took its forward from 60 ms
(ZeRO-2) to 480 ms, i.e. 10.2 GB in 420 ms (DeepSpeed issue #1174). Each gather synchronised the device and copied
its output (DeepSpeed PR #1188), so the bound is the runtime's, not the wire's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePrediction:
    """Predicted time and memory of one pipeline stage."""

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
    end_s: float
    """When the stage is done with the iteration: its last backward, then its exposed sync and optimizer step (the
    iteration ends with the latest stage, or with the pipeline's last backward)."""
    memory: StageMemory
    memory_capacity_gib: float

    @property
    def memory_gib(self) -> float:
        """Per-GPU memory of the stage (GiB)."""
        return self.memory.total_gib

    @property
    def fits(self) -> bool:
        """Whether the stage (or every stage) fits its GPUs' memory."""
        return self.memory.total_gib <= self.memory_capacity_gib

    @property
    def headroom_gib(self) -> float:
        """Memory left on each GPU of the stage (GiB, negative when over)."""
        return self.memory_capacity_gib - self.memory.total_gib


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """The cost model's prediction for a whole plan."""

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
        """Whether the stage (or every stage) fits its GPUs' memory."""
        return all(s.fits for s in self.stages)


def _tp_bandwidth(group: NodeGroup, cfg: ParallelConfig, fleet: Fleet) -> tuple[float, float]:
    if cfg.tp <= group.gpus_per_node:
        bw, hop_s = intra_node_busbw(group, span=cfg.tp)
        return bw, (hop_s if group.intra_node_kind == "pcie" else NVLINK_COLLECTIVE_LATENCY_S)
    transport = fleet.transports[group.nic_transport]
    return nic_gbytes_per_s(group, transport), transport.latency_us * 1e-6


def _scatters(cfg: ParallelConfig, train: TrainingSettings) -> bool:
    return train.pipeline_scatter_gather and not cfg.sequence_parallel and cfg.tp > 1


def p2p_message_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """Bytes one GPU sends across a stage boundary per micro-batch: the [s/CP, b, h] activations, of which each
    tensor-parallel rank holds (and sends) 1/TP only with sequence parallelism; without it every TP rank sends the
    whole tensor (megatron/core/pipeline_parallel/schedules.py, get_tensor_shapes), unless the runtime scatters it
    (`pipeline_scatter_gather`: Megatron-LM before megatron-core, SC'21 section 4.1)."""
    whole = cfg.micro_batch_size * train.seq_length / cfg.cp * model.hidden_size * BYTES
    return whole / cfg.tp if cfg.sequence_parallel or _scatters(cfg, train) else whole


def pipeline_gather_s(g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """With the scatter/gather of old Megatron-LM, the receiving stage all-gathers the TP pieces over its node's
    fabric before it can start (0 otherwise)."""
    if not _scatters(cfg, train):
        return 0.0
    bw, hop_s = intra_node_busbw(g, span=cfg.tp)
    return half_collective_s(p2p_message_bytes(model, cfg, train) * cfg.tp, cfg.tp, bw, latency_s=hop_s)


def p2p_seconds(fleet: Fleet, a: NodeGroup, b: NodeGroup, cfg: ParallelConfig, *, msg_bytes: float,
                crossings: int, link_bytes: float | None = None,
                host_copy: bool | None = None) -> tuple[float, float, NetPath | None]:
    """(sender-busy seconds, latency seconds, path) for one activation message between two stages.

    Every GPU of a stage sends its 1/TP shard at once; on a shared link (between islands or sites) all
    TP x CP x DP flows of the boundary, times the boundaries that cross the same link, share its bandwidth
    (`link_bytes`: what they carry together, when it is not msg_bytes x those flows). Over TCP each flow's sockets
    carry at most a window per round trip (TransportProfile.achieved_gbytes_per_s). Between GPUs of two vendors (or
    where `host_copy` says so: reshard.host_copies) each message is also copied through host memory at both ends and
    goes over gloo, one TCP connection per pair of ranks (reshard.gloo_flow_gbytes_per_s).
    """
    path = fleet.path(a, b)
    if path is None:
        return float("inf"), float("inf"), None
    if path.kind is PathKind.SAME_GROUP and cfg.gpus_per_stage < a.gpus_per_node:
        bw, _ = intra_node_busbw(a, span=min(a.gpus_per_node, 2 * cfg.gpus_per_stage))
        return msg_bytes / (bw * 1e9), INTRA_NODE_P2P_LATENCY_S, path
    per_gpu = flow_gbytes_per_s(path.profile, path)
    host = crosses_vendors(a, b) if host_copy is None else host_copy
    if host:  # over gloo: one TCP connection per pair of ranks
        per_gpu = min(per_gpu, gloo_flow_gbytes_per_s(fleet, path))
    t = msg_bytes / (per_gpu * 1e9)
    if path.shared:
        total = msg_bytes * cfg.gpus_per_stage * crossings if link_bytes is None else link_bytes
        t = max(t, total / (path.gbps / 8.0 * path.profile.efficiency * 1e9))
    if host:
        t += host_copy_s(msg_bytes)
    return t, path.latency_s, path


def mesh_boundary_s(fleet: Fleet, a: NodeGroup, b: NodeGroup, model: ModelArch, ca: ParallelConfig,
                    cb: ParallelConfig, train: TrainingSettings, *, crossings: int,
                    host_copy: bool | None = None) -> tuple[float, float, NetPath | None]:
    """(sender-busy seconds, latency seconds, path) of one micro-batch's activation (or gradient) across a mesh
    boundary (costmodel/reshard.py) from a stage of degrees ca on a to one of degrees cb on b: a rank is busy for the
    larger of what it sends and what its counterpart receives; a shared link carries the whole step's activation
    once per boundary crossing it; the messages are batched, so one latency is paid."""
    send, recv = rank_slice_bytes(model, ca, train), rank_slice_bytes(model, cb, train)
    return p2p_seconds(fleet, a, b, ca, msg_bytes=max(send, recv), crossings=crossings,
                       link_bytes=send * ca.tp * ca.dp * crossings, host_copy=host_copy)


def _tensors_per_layer(model: ModelArch) -> int:
    """Parameter tensors of one layer: QKV, output, MLP weights (+ biases, or the QKV bias alone), two norms (weight,
    + bias), and the query and key norms."""
    mats = 2 + (3 if model.gated else 2)
    norms = (2 + 2 * model.qk_layernorm) * model.norm_tensors
    return mats * (2 if model.add_bias_linear else 1) + (model.add_qkv_bias and not model.add_bias_linear) + norms


def grad_bytes(precision: Precision) -> float:
    """Bytes per gradient element in the data-parallel reduction: fp32 main grads with bf16 and fp8, fp16 with
    fp16."""
    return 2.0 if precision is Precision.FP16 else 4.0


def layer_cost(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig,
               train: TrainingSettings) -> tuple[LayerTime, float, float]:
    """(LayerTime, forward seconds, backward seconds) of one layer for one micro-batch, CP exposure included."""
    busbw, lat = _tp_bandwidth(g, cfg, fleet)
    lt = layer_time(model, g.gpu, cfg, train, tp_busbw_gbytes_per_s=busbw, tp_latency_s=lat)
    f_l, b_l = lt.fwd_s, lt.bwd_s
    t, c = cfg.tp, cfg.cp
    if c > 1:
        transport = fleet.transports[g.nic_transport]
        cp_bw, cp_lat = ring_hop_gbytes_per_s(g, transport, members=c, stride=t)
        kv_step = cfg.micro_batch_size * (train.seq_length / c) * 2 * model.kv_dim / t * BYTES
        cp_f = (c - 1) * (kv_step / (cp_bw * 1e9) + cp_lat)
        share = g.gpu.eff.comm_sm_share
        f_l += overlapped_s(lt.attention_fwd_s, cp_f, sm_share=share) - lt.attention_fwd_s
        attn_bwd = FLASH_BWD_RATIO * lt.attention_fwd_s
        b_l += overlapped_s(attn_bwd, 2 * cp_f, sm_share=share) - attn_bwd
    return lt, f_l, b_l


def edge_costs(g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float, float, float]:
    """(embedding fwd, embedding bwd, head fwd, head bwd incl. recompute) seconds for one micro-batch."""
    ef, eb = embedding_time(model, g.gpu, cfg, train)
    hf, hb = head_time(model, g.gpu, cfg, train)
    return ef, eb, hf, hb  # full recompute re-runs the transformer layers only, never the output layer


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
    return exposed, hbm_s(g.gpu, shard * optimizer_bytes_per_param(train) + params * GRAD_ZERO_BYTES_PER_PARAM)


def tied_embedding_sync_s(fleet: Fleet, first: NodeGroup, last: NodeGroup, model: ModelArch, cfg: ParallelConfig,
                          train: TrainingSettings, *, host_copy: bool | None = None) -> float:
    """All-reduce of the tied embedding's gradient between the first and last stage (0 when untied or PP = 1).

    A ring all-reduce of S bytes over two ranks sends 2 (n - 1) / n x S = S bytes each way in two steps (a
    reduce-scatter and an all-gather half): one message's worth of busy time and two latencies."""
    if cfg.pp <= 1 or model.untie_embeddings_and_output_weights:
        return 0.0
    emb_bytes = model.padded_vocab(cfg.tp) * model.hidden_size / cfg.tp * grad_bytes(train.precision)
    busy, latency, _ = p2p_seconds(fleet, first, last, cfg, msg_bytes=emb_bytes, crossings=1, host_copy=host_copy)
    return busy + 2 * latency


def plan_tied_sync_s(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings) -> float:
    """tied_embedding_sync_s between the plan's first and last stage, through host memory where host_copies says."""
    first, last = (fleet.group(plan.stages[i].node_group) for i in (0, -1))
    return tied_embedding_sync_s(fleet, first, last, model, plan.stage_config(0), train,
                                 host_copy=host_copies(plan, fleet)[1])


def _zero3_overlap(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings, *,
                   layers: int, params: float, fwd_s: float, bwd_s: float) -> tuple[float, float]:
    """A stage's forward and backward with ZeRO-3/FSDP parameter gathers and gradient scatters overlapped.

    Megatron-FSDP and PyTorch FSDP gather one flat buffer per layer; DeepSpeed ZeRO-3 one per module (each parameter
    tensor), each paying the ring's n - 1 step latency, and at most DEEPSPEED_ZERO3_GBYTES_PER_S. Gathers are
    prefetched one layer ahead on a side stream: only the first layer's waits."""
    members = cfg.dp * cfg.cp
    transport = fleet.transports[g.nic_transport]
    bw, lat = group_busbw_gbytes_per_s(g, transport, members=members, stride=cfg.tp)
    deepspeed = train.runtime is Runtime.DEEPSPEED
    calls = max(1, layers) * (_tensors_per_layer(model) if deepspeed else 1)
    latency = calls * ring_latency_s(members, lat)
    bandwidth = (members - 1) / members / (bw * 1e9)
    gbytes = grad_bytes(train.precision)
    gather = params * BYTES * bandwidth + latency
    scatter = params * gbytes * bandwidth + latency
    if deepspeed:
        gather = max(gather, params * BYTES / (DEEPSPEED_ZERO3_GBYTES_PER_S * 1e9))
        scatter = max(scatter, params * gbytes / (DEEPSPEED_ZERO3_GBYTES_PER_S * 1e9))
    # DeepSpeed releases each module's parameters after its forward, so full recompute gathers them again.
    recompute_gather = gather if cfg.recompute is Recompute.FULL and deepspeed else 0.0
    first_layer = gather / max(1, layers)
    share = g.gpu.eff.comm_sm_share
    return (overlapped_s(fwd_s, gather, sm_share=share, exposed_s=first_layer),
            overlapped_s(bwd_s, gather + scatter + recompute_gather, sm_share=share, exposed_s=first_layer))


@dataclass(frozen=True, slots=True, kw_only=True)
class _StageWork:
    """One stage's per-micro-batch forward and backward, its layer costs and its memory."""

    fwd_s: float
    bwd_s: float
    layer: LayerTime
    memory: StageMemory


def _stage_work(plan: Plan, fleet: Fleet, groups: list[NodeGroup], model: ModelArch,
                train: TrainingSettings) -> list[_StageWork]:
    """Compute time (edges and ZeRO-3 traffic included) and memory of every stage."""
    p = plan.config.pp
    m = plan.config.num_microbatches(train.global_batch_size)
    cache: dict[tuple, tuple[LayerTime, float, float]] = {}
    out = []
    for i, (st, g) in enumerate(zip(plan.stages, groups)):
        cfg = plan.stage_config(i)
        if (g.key, cfg) not in cache:
            cache[(g.key, cfg)] = layer_cost(fleet, g, model, cfg, train)
        lt, f_l, b_l = cache[(g.key, cfg)]
        f_s, b_s = st.num_layers * f_l, st.num_layers * b_l
        ef, eb, hf, hb = edge_costs(g, model, cfg, train)
        if i == 0:
            f_s, b_s = f_s + ef, b_s + eb
        if i == p - 1:
            f_s, b_s = f_s + hf, b_s + hb
        mem = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length, num_microbatches=m,
                           stage=i, layers=st.num_layers, flash=attention_kernel(train, g.gpu) is not Attention.UNFUSED,
                           local=train.transformer_impl is TransformerImpl.LOCAL, mx_scales=train.mxfp8)
        if cfg.zero_stage >= 3 and cfg.dp * cfg.cp > 1:
            f_s, b_s = _zero3_overlap(fleet, g, model, cfg, train, layers=st.num_layers, params=mem.params,
                                      fwd_s=f_s, bwd_s=b_s)
        out.append(_StageWork(fwd_s=f_s, bwd_s=b_s, layer=lt, memory=mem))
    return out


def _boundary_costs(fleet: Fleet, groups: list[NodeGroup], model: ModelArch, plan: Plan,
                    train: TrainingSettings) -> tuple[list[float], list[float], list[dict]]:
    """Per boundary k (stage k -> k+1, and the wrap-around one when interleaved): sender-busy seconds, latency,
    and its description. Boundaries that cross the same inter-island or inter-site link share it; a boundary
    between stages of different tp or dp (an asymmetric plan's mesh boundary) re-shards (costmodel/reshard.py)."""
    p, v = plan.config.pp, plan.config.vpp
    pairs = [(k, (k + 1) % p) for k in range(p if v > 1 else p - 1)]
    link_use: dict[int, int] = {}
    for a_i, b_i in pairs:
        path = fleet.path(groups[a_i], groups[b_i])
        if path is not None and path.link is not None:
            link_use[id(path.link)] = link_use.get(id(path.link), 0) + 1
    send, lat = [0.0] * p, [0.0] * p
    described, host = [], host_copies(plan, fleet)[0]
    for k, (a_i, b_i) in enumerate(pairs):
        path = fleet.path(groups[a_i], groups[b_i])
        crossings = link_use.get(id(path.link), 1) if path is not None and path.link is not None else 1
        ca, cb = plan.stage_config(a_i), plan.stage_config(b_i)
        reshard = (ca.tp, ca.dp) != (cb.tp, cb.dp)
        if not reshard:
            msg = p2p_message_bytes(model, ca, train)
            busy, latency, path = p2p_seconds(fleet, groups[a_i], groups[b_i], ca, msg_bytes=msg,
                                              crossings=crossings, host_copy=host[k])
            busy += pipeline_gather_s(groups[b_i], model, ca, train)
        else:
            msg = max(rank_slice_bytes(model, ca, train), rank_slice_bytes(model, cb, train))
            busy, latency, path = mesh_boundary_s(fleet, groups[a_i], groups[b_i], model, ca, cb, train,
                                                  crossings=crossings, host_copy=host[k])
        send[k], lat[k] = busy, latency
        described.append(boundary_record(a_i, b_i, path, busy, latency, msg, (ca, cb) if reshard else None,
                                         host_copy=host[k]))
    return send, lat, described


def _recomputed_flops(plan: Plan, work: list[_StageWork], m: int) -> float:
    """Hardware FLOPs that recomputation adds over the iteration (for HFU)."""
    extra = 0.0
    for i, (st, w) in enumerate(zip(plan.stages, work)):
        cfg = plan.stage_config(i)
        recomputed = {Recompute.FULL: w.layer.fwd_flops, Recompute.SELECTIVE: w.layer.attention_fwd_flops,
                      Recompute.NONE: 0.0}[cfg.recompute]
        extra += recomputed * st.num_layers * m * cfg.gpus_per_stage
    return extra


def fits_and_bound(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings) -> tuple[bool, float]:
    """evaluate(...).fits without timing the pipeline (whether every stage fits its GPUs' memory) and, when it fits, a
    proven lower bound of evaluate(...)'s iteration time without simulating the pipeline: the simulator's path terms
    over the plan's stage and boundary times, each stage's tail after it (costmodel/pipeline.lower_bound_s). The
    bound is inf for a plan that does not fit."""
    groups = [fleet.group(st.node_group) for st in plan.stages]
    work = _stage_work(plan, fleet, groups, model, train)
    if any(w.memory.total_gib > g.gpu.hbm_gib for w, g in zip(work, groups)):
        return False, float("inf")
    fwd, bwd = [w.fwd_s for w in work], [w.bwd_s for w in work]
    xf, lat, _ = _boundary_costs(fleet, groups, model, plan, train)
    tails = [sum(t) for t in _tails_s(plan, fleet, groups, model, train, work)]
    return True, lower_bound_s(fwd, bwd, xf, list(xf), lat, microbatches=plan.config.num_microbatches(
        train.global_batch_size), vpp=plan.config.vpp, tails_s=tails)


def _tails_s(plan: Plan, fleet: Fleet, groups: list[NodeGroup], model: ModelArch, train: TrainingSettings,
             work: list[_StageWork]) -> list[tuple[float, float]]:
    """Per stage, what follows its last backward: its exposed data-parallel sync (the first and last stage's with
    the tied embedding's sync) and its optimizer step."""
    p = plan.config.pp
    tied_sync = plan_tied_sync_s(plan, fleet, model, train)
    out = []
    for i, (st, g, w) in enumerate(zip(plan.stages, groups, work)):
        exposed, opt = dp_tail(fleet, g, plan.stage_config(i), train, params=w.memory.params, layers=st.num_layers,
                               fwd_s=w.fwd_s, bwd_s=w.bwd_s)
        out.append((exposed + (tied_sync if i in (0, p - 1) else 0.0), opt))
    return out


def evaluate(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
             use_simulator: bool = True, keep_ops: bool = False) -> Prediction:
    """Predict iteration time, throughput and per-stage memory. The plan must have passed check_plan.

    The pipeline simulator gives the iteration time that every command reports (search, explain, plan files, diff,
    the CI gate, what-ifs, baselines). `use_simulator=False` gives the closed form instead, the form the search's
    integer tables mirror; it is kept for tests and diagnostics, never reported."""
    cfg = plan.config
    p, v = cfg.pp, cfg.vpp
    m = cfg.num_microbatches(train.global_batch_size)
    groups = [fleet.group(st.node_group) for st in plan.stages]
    work = _stage_work(plan, fleet, groups, model, train)
    fwd, bwd = [w.fwd_s for w in work], [w.bwd_s for w in work]
    xf, lat, boundaries = _boundary_costs(fleet, groups, model, plan, train)
    xb = list(xf)
    ops: list[Op] = []
    if use_simulator:
        pipe, ops = simulate(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v, keep_ops=keep_ops)
    else:
        pipe = closed_form(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v)
    # data-parallel sync and optimizer, after each stage's last backward
    per_chunk = chunk_sends(p, v, xf, xb)
    stages, ends = [], []
    for i, (st, g, w, (exposed, opt)) in enumerate(zip(plan.stages, groups, work,
                                                       _tails_s(plan, fleet, groups, model, train, work))):
        ends.append(pipe.finish_s[i] + exposed + opt)
        stages.append(StagePrediction(
            index=i, node_group=g.key, site=g.site, gpu=g.gpu.id, gpus=plan.stage_gpus(i), layers=st.num_layers,
            fwd_s=fwd[i], bwd_s=bwd[i], compute_s=m * (fwd[i] + bwd[i]), p2p_s=m * v * per_chunk[i],
            dp_sync_s=exposed, optimizer_s=opt, end_s=ends[-1], memory=w.memory, memory_capacity_gib=g.gpu.hbm_gib))
    iteration = max(max(ends), pipe.iteration_s)
    model_flops = megatron_model_flops(model, global_batch_size=train.global_batch_size, seq_length=train.seq_length)
    extra = _recomputed_flops(plan, work, m)
    world = plan.world_size
    # MFU against the bf16 peak under fp8 too, so plans of either precision compare on one scale
    peak_sum = sum(g.gpu.peak_tflops(compute_precision(train)) * plan.stage_gpus(i)
                   for i, g in enumerate(groups)) * 1e12
    return Prediction(
        iteration_time_s=iteration, pipeline_s=pipe.iteration_s,
        tokens_per_s=train.global_batch_size * train.seq_length / iteration,
        model_tflops_per_gpu=model_flops / (iteration * world * 1e12),
        hardware_tflops_per_gpu=(model_flops + extra) / (iteration * world * 1e12),
        mfu=model_flops / (iteration * peak_sum), hfu=(model_flops + extra) / (iteration * peak_sum),
        bubble_fraction=pipe.bubble_fraction, num_microbatches=m, bottleneck_stage=pipe.bottleneck_stage,
        method="simulator" if use_simulator else "closed_form", stages=tuple(stages), boundaries=tuple(boundaries),
        ops=tuple(ops))
