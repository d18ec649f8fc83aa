"""Per-GPU memory of one pipeline stage: weights, gradients, optimizer state, activations, overhead.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", Sec. 4), generalised from (MHA, F = 4h, GELU) to GQA, any FFN size and gated MLPs; with
MHA, F = 4h and dropout they reduce exactly to the paper's sbh(34 + 5as/h) and its TP/SP variants.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.domain import ACTIVATION_FFN_MATRICES, ModelArch, Precision
from hgplan.plan import ParallelConfig, Recompute

GIB = 1024 ** 3
FRAMEWORK_OVERHEAD_GIB = 2.0
"""CUDA context, NCCL buffers and allocator reserve (measured CUDA contexts are 0.5-1 GiB; NCCL adds ~0.5 GiB)."""
BYTES_BF16 = 2
FP8_WEIGHT_COPY_BYTES = 2
"""Transformer Engine keeps each fp8 layer's weight cast to E4M3 and its transpose (Hopper's fp8 GEMMs need both
layouts) across the micro-batches of an iteration: 1 + 1 bytes per parameter (TE docs, fp8 primer)."""
MXFP8_SCALE_BYTES = 1 / 32
"""MXFP8 (OCP MX) keeps one E8M0 scale byte per 32-element block of each fp8 copy (TE MXFP8BlockScaling)."""
FRAGMENTATION = 1.05
"""Allocator fragmentation on activations, as Megatron's theoretical_memory_usage applies (x1.05)."""
UNFUSED_BACKWARD_SCORE_TENSORS = 2
"""Score-sized tensors alive at once in the backward of unfused attention: bmm's gradient of the probabilities and the
softmax backward's gradient of the scores (the saved probabilities are counted with the layer; counted from PyTorch's
autograd, which frees each gradient once its consumer has run). Without them hgplan's peak was 8-31% low on the
unfused configurations of h100-measured, with them 1-7% low."""


def activation_bytes_per_layer(model: ModelArch, *, micro_batch: int, seq_length: int, tp: int, cp: int,
                               sequence_parallel: bool, recompute: Recompute, flash: bool, local: bool = False,
                               fp8: bool = False) -> float:
    """Bytes one layer keeps for backward for one micro-batch on one GPU.

    Transformer Engine's fused layers keep what Korthikanti et al. count (generalised to GQA and gated MLPs); the
    local spec's PyTorch fallbacks keep more (LOCAL_EXTRA_*): h100-measured, per Llama layer, 0.79-0.82 GiB at 8B
    s4096 against 0.56 counted without them."""
    s = seq_length / cp
    b, h, a = micro_batch, model.hidden_size, model.num_attention_heads
    q, kv, F = model.query_dim, model.kv_dim, model.ffn_hidden_size
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    sb = s * b
    if recompute is Recompute.FULL:
        return 2.0 * sb * h / (tp if sequence_parallel else 1)
    hid_mask = 1.0 if model.hidden_dropout > 0 else 0.0
    # Outside the TP region (replicated over TP ranks unless sequence parallel): 2 norm inputs (4h),
    # QKV input (2h), MLP input (2h), two dropout masks (1 byte each).
    replicated = 4 * h + 2 * h + 2 * h + 2 * hid_mask * h
    # Inside the TP region: Q, K, V, attention output (out-proj input), MLP up-projection output(s), activation output.
    sharded = 2 * q + 2 * kv + 2 * kv + 2 * q + 2 * (n_mat - 1) * F + 2 * F
    # --qk-layernorm keeps its inputs, the projected queries and keys, beside the normalised ones attention keeps
    sharded += (2 * q + 2 * kv) * model.qk_layernorm
    if fp8:
        # fp8 layers save their GEMM inputs as E4M3: the QKV and MLP inputs (2h -> h each) and the fc2 input
        # (2F -> F); the projection saves an fp8 copy of the attention output, which the attention kernel keeps too
        replicated -= 2 * h
        sharded += q - F
    out = sb * (replicated / (tp if sequence_parallel else 1) + sharded / tp)
    if local:
        # the unfused SwiGLU keeps silu(gate) besides gate and up; the unfused RMSNorms keep their normalised output
        # besides their input; SDPA's output is copied (transposed) before the output projection
        out += sb * (2 * F * model.gated / tp + 2 * 2 * h / (tp if sequence_parallel else 1) + (2 * q / tp if flash else 0))
    if flash:
        out += 4.0 * b * (a / tp) * s  # fp32 log-sum-exp per query
    elif recompute is Recompute.NONE:
        att_mask = 1.0 if model.attention_dropout > 0 else 0.0
        per_score = 2 + att_mask + (2 if att_mask else 0)  # softmax output, dropout mask, dropout output
        out += per_score * b * (a / tp) * s * seq_length  # scores of s/cp queries against all keys
    return out


def transient_layer_bytes(model: ModelArch, *, micro_batch: int, seq_length: int, tp: int, cp: int,
                          sequence_parallel: bool, flash: bool, local: bool = False, fp8: bool = False) -> float:
    """Extra peak while one layer is recomputed under full recompute: its full activations."""
    return activation_bytes_per_layer(model, micro_batch=micro_batch, seq_length=seq_length, tp=tp, cp=cp,
                                      sequence_parallel=sequence_parallel, recompute=Recompute.NONE, flash=flash,
                                      local=local, fp8=fp8)


def state_bytes_per_param(precision: Precision, zero_stage: int, dp: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter on one GPU.

    Megatron: bf16 weights (2), fp32 main gradients (4), fp32 master + Adam m, v (12) = 18 bytes, or
    6 + 12/d with the distributed optimizer; fp16: 2 + 2 + 16 = 20, or 4 + 16/d (docs/user-guide/features/
    dist_optimizer.md). ZeRO-2 also shards gradients, ZeRO-3 also the weights.
    """
    if precision in (Precision.BF16, Precision.FP8):
        w, g, o = 2.0, 4.0, 12.0
    else:
        w, g, o = 2.0, 2.0, 16.0
    if zero_stage >= 1:
        o /= dp
    if zero_stage >= 2:
        g /= dp
    if zero_stage >= 3:
        w /= dp
    return w, g, o


def training_state_gib(model: ModelArch, precision: Precision) -> float:
    """Weights, gradients and optimizer state of the whole model: every plan holds all of it somewhere, sharded or
    not, so no fleet with less usable memory (usable_memory_gib) can train it."""
    return model.num_params() * sum(state_bytes_per_param(precision, 0, 1)) / GIB


def usable_memory_gib(groups) -> float:
    """GPU memory of these node groups after the framework's overhead on every GPU."""
    return sum(g.num_gpus * max(0.0, g.gpu.hbm_gib - FRAMEWORK_OVERHEAD_GIB) for g in groups)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """Per-GPU memory of one stage by kind (GiB) and the activations' in-flight micro-batches."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float
    params: float
    """Parameters held by one GPU of this stage (before ZeRO sharding)."""
    inflight_microbatches: float

    @property
    def total_gib(self) -> float:
        """Everything together (GiB)."""
        return self.weights_gib + self.gradients_gib + self.optimizer_gib + self.activations_gib + self.overhead_gib


def inflight_layers(stage: int, num_stages: int, layers: int, vpp: int, num_microbatches: int) -> float:
    """Layer-microbatches of activations a stage holds at its peak under (interleaved) 1F1B.

    1F1B: stage i of p holds min(p - i, m) micro-batches. Interleaved with v chunks: the warm-up of rank i
    runs (p - i - 1) * 2 + (v - 1) * p + 1 chunk-forwards before its first backward, each of layers/v layers;
    for i = 0 this is Megatron's p * (1 + (p - 1) / (p v)) micro-batches of L/p layers.
    """
    if vpp <= 1:
        return layers * min(num_stages - stage, num_microbatches)
    chunks = min((num_stages - stage - 1) * 2 + (vpp - 1) * num_stages + 1, num_microbatches * vpp)
    return chunks * layers / vpp


def stage_memory(model: ModelArch, cfg: ParallelConfig, *, precision: Precision, seq_length: int, num_microbatches: int,
                 stage: int, layers: int, flash: bool, local: bool = False, mx_scales: bool = False) -> StageMemory:
    """Per-GPU memory of a stage holding `layers` layers: weights, gradients, optimizer state (sharded as the ZeRO
    stage says), in-flight activations and the framework's overhead. mx_scales: fp8 weight copies carry MXFP8's
    block scales (rowwise and columnwise); the saved fp8 activations' scales (under 1% of them) are left out."""
    p, t = cfg.pp, cfg.tp
    first, last = stage == 0, stage == p - 1
    vocab = model.padded_vocab(t)
    params = layers * model.layer_params() / t
    if first:
        pos = model.max_position_embeddings * model.hidden_size if model.position_embedding_type == "learned_absolute" else 0
        params += vocab * model.hidden_size / t + pos
    if last:
        params += model.norm_params
        if model.untie_embeddings_and_output_weights or p > 1:
            # untied output layer, or with PP > 1 the last stage's copy of the tied embedding
            params += vocab * model.hidden_size / t
    w, g, o = state_bytes_per_param(precision, cfg.zero_stage, cfg.dp * cfg.cp)
    zero3_buffer = 2 * 2 * model.layer_params() / t if cfg.zero_stage >= 3 else 0.0  # two gathered layers in flight
    act_layer = activation_bytes_per_layer(model, micro_batch=cfg.micro_batch_size, seq_length=seq_length, tp=t,
                                           cp=cfg.cp, sequence_parallel=cfg.sequence_parallel,
                                           recompute=cfg.recompute, flash=flash, local=local,
                                           fp8=precision is Precision.FP8)
    n_layer_mb = inflight_layers(stage, p, layers, cfg.vpp, num_microbatches)
    inflight_mb = n_layer_mb / layers if layers else 0.0
    acts = act_layer * n_layer_mb
    sb = cfg.micro_batch_size * seq_length / cfg.cp
    sp_div = t if cfg.sequence_parallel else 1
    if first:
        acts += inflight_mb * sb * model.hidden_size * 3 / sp_div  # embedding output + dropout mask
    # Full recompute re-runs one layer at a time in the backward: its activations are a transient. The last stage's
    # logits live from the end of its forward until the output layer's backward, before any layer is recomputed, so
    # the stage's peak holds the larger of the two, not both.
    transient = transient_layer_bytes(model, micro_batch=cfg.micro_batch_size, seq_length=seq_length, tp=t,
                                      cp=cfg.cp, sequence_parallel=cfg.sequence_parallel, flash=flash,
                                      local=local, fp8=precision is Precision.FP8) \
        if cfg.recompute is Recompute.FULL and layers else 0.0
    logits = 0.0
    if last:
        # output layer input + fp32 logits of one micro-batch; the local spec's unfused cross-entropy also keeps the
        # bf16 logits it casts from
        logit_bytes = 4 + (BYTES_BF16 if local else 0)
        logits = 4 * sb * model.hidden_size / sp_div + logit_bytes * sb * vocab / t
    score_bytes = BYTES_BF16 * cfg.micro_batch_size * model.num_attention_heads / t * (seq_length / cfg.cp) * seq_length
    if not flash and layers:
        # the unfused attention's backward holds the gradient of the probabilities and of the scores (each one score
        # tensor) beside the saved probabilities: the last layer's backward, after the logits are freed
        transient += UNFUSED_BACKWARD_SCORE_TENSORS * score_bytes
    acts += max(transient, logits)
    if local and not flash and layers:
        # the unfused path's persistent buffer for one layer's attention scores (megatron's global memory buffer)
        acts += score_bytes
    copy_bytes = FP8_WEIGHT_COPY_BYTES + (2 * MXFP8_SCALE_BYTES if mx_scales else 0.0)
    fp8_copies = copy_bytes * layers * model.layer_params() / t \
        if precision is Precision.FP8 and cfg.zero_stage < 3 else 0.0
    return StageMemory(weights_gib=(params * w + zero3_buffer + fp8_copies) / GIB, gradients_gib=params * g / GIB,
                       optimizer_gib=params * o / GIB, activations_gib=acts * FRAGMENTATION / GIB,
                       overhead_gib=FRAMEWORK_OVERHEAD_GIB, params=params, inflight_microbatches=inflight_mb)


def megatron_theoretical_gib(model: ModelArch, cfg: ParallelConfig, *, seq_length: int, num_microbatches: int) -> float:
    """Megatron-LM's own estimate for the first stage (megatron/training/theoretical_memory_usage.py), in GiB.

    Used only to cross-check hgplan's per-stage model in docs/cost-model.md: it assumes L/PP layers on every
    stage, bf16 with fp32 gradients, and it models full recompute as if nothing were recomputed.
    """
    h, L, n, g, d = model.hidden_size, model.num_layers, model.num_attention_heads, model.num_query_groups, model.kv_channels
    q, F = n * d, model.ffn_hidden_size
    t, p, v, b, s = cfg.tp, cfg.pp, cfg.vpp, cfg.micro_batch_size, seq_length
    ns = 2 if model.normalization == "LayerNorm" else 1
    gl = 1.5 if model.gated else 1.0
    V = model.padded_vocab(t)
    per_layer = 2 * h * h * ((1 + g / n) * q / h) + 2 * h * F * gl + 2 * h * ns
    emb = h * V
    sharded = per_layer * L / p + emb
    most_loaded = sharded / t
    if model.untie_embeddings_and_output_weights and p == 1:
        most_loaded += emb / t
    bytes_per = 6 + 12 / (cfg.dp * cfg.cp) if cfg.distributed_optimizer else 18
    weights = most_loaded * bytes_per
    if cfg.sequence_parallel and cfg.recompute is Recompute.SELECTIVE:
        act = s * b * h * (18 + 4 * F / h) * L
        act += 8 * s * b * p + s * b * h * p
        act *= (1 + (p - 1) / (p * v)) if v > 1 else (min(1.0, num_microbatches / p) if p > 1 else 1.0)
        if p == 1:
            act += s * b * h * 4 * (1 + V / h)
        act /= t
    else:
        act = s * b * h * (10 + 24 / t) * L
        act += 8 * s * b * p + s * b * h * p
        act *= (1 + (p - 1) / (p * v)) if v > 1 else (min(1.0, num_microbatches / p) if p > 1 else 1.0)
        if p == 1:
            act += 2 * (s * b * V / t + s * b * h)
        act *= FRAGMENTATION
    return (weights + act) / GIB
