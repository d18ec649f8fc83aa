"""Time of one micro-batch's forward and backward through one layer (and the edge layers) on one GPU type.

Matrix multiplies run at the architecture's achievable matmul fraction of peak, reduced for small
GEMM dimensions, and never faster than HBM allows (roofline). Attention runs at the architecture's
fused-attention efficiency (or as two roofline GEMMs plus softmax traffic when unfused). Elementwise
operations move bytes through HBM. Tensor-parallel collectives run on the intra-node link.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.costmodel.comm import allreduce_s
from hgplan.domain import ACTIVATION_FFN_MATRICES, Attention, GpuType, ModelArch, Precision, Runtime, TrainingSettings
from hgplan.plan import ParallelConfig, Recompute

RUNTIME_EFFICIENCY = {Runtime.MEGATRON: 1.0, Runtime.DEEPSPEED: 0.80, Runtime.FSDP: 0.85}
"""Share of GPU time a framework spends in useful kernels, relative to Megatron-LM's fused path.

PyTorch-eager FSDP (FULL_SHARD with autocast) loses time to per-module hooks, dtype casts, unfused
element-wise kernels and allocator synchronisation. 0.85 is the one constant estimated from the whole
MosaicML llm-foundry family of the calibration set (124 rows); see docs/cost-model.md."""


BYTES = 2  # bf16 / fp16 activations and weights
TILE_MN = 256.0  # GEMM output tile edge (cuBLAS uses 256-wide tiles for large bf16 GEMMs): partial tiles waste work
TILE_K = 128.0  # main-loop prologue/epilogue, in k elements
FLASH_BWD_RATIO = 2.5
"""FlashAttention's backward over its forward: 5 matmuls (it recomputes QK^T) against 2 (Dao, FlashAttention-2,
section 3.1)."""
DROPOUT_BYTES = 2.5
"""Attention-dropout traffic per score element, in activation-element units: read and write the scores (2) and
write a 1-byte mask (0.5)."""
KERNELS_PER_LAYER_FWD = 14
"""Kernel launches charged to one transformer layer's forward (0.1.0's count for Megatron's fused path: two norms,
four GEMMs, rotary, attention, activation, two bias-dropout-adds and the TP collectives), one launch overhead each."""
KERNELS_PER_LAYER_BWD = 2 * KERNELS_PER_LAYER_FWD
"""The backward launches about two kernels per forward one (dgrad and wgrad)."""


def sustained_peak_flops(gpu: GpuType, precision: Precision) -> float:
    """Tensor-core FLOP/s the GPU sustains in training: datasheet peak x sustained clock share."""
    return gpu.peak_tflops(precision) * 1e12 * gpu.eff.sustained_clock_fraction


def gemm_s(gpu: GpuType, precision: Precision, m: float, n: float, k: float) -> float:
    """Roofline time of an (m x k) @ (k x n) matmul."""
    peak = sustained_peak_flops(gpu, precision)
    shape = (m / (m + TILE_MN)) * (n / (n + TILE_MN)) * (k / (k + TILE_K))
    compute = 2.0 * m * n * k / (peak * gpu.eff.gemm_efficiency * shape)
    memory = BYTES * (m * k + k * n + m * n) / (gpu.hbm_gbytes_per_s * 1e9 * gpu.eff.hbm_efficiency)
    return max(compute, memory)


def hbm_s(gpu: GpuType, nbytes: float) -> float:
    """Seconds to move `nbytes` through HBM at the architecture's achievable bandwidth."""
    return nbytes / (gpu.hbm_gbytes_per_s * 1e9 * gpu.eff.hbm_efficiency)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerTime:
    """Seconds for one micro-batch through one transformer layer on one GPU."""

    fwd_s: float
    bwd_s: float
    """Backward including any recomputation."""
    attention_fwd_s: float
    fwd_flops: float
    """Forward FLOPs done by this GPU (hardware FLOPs, not the model count)."""
    attention_fwd_flops: float


def layer_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings,
               *, tp_busbw_gbytes_per_s: float, tp_latency_s: float) -> LayerTime:
    """Forward and backward seconds of one transformer layer for one micro-batch on one GPU: GEMMs, attention, element-
    wise traffic, TP collectives and recomputation."""
    t, c, b, s = cfg.tp, cfg.cp, cfg.micro_batch_size, train.seq_length
    prec = train.precision
    h, q, kv, F, d = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size, model.kv_channels
    heads = model.num_attention_heads / t
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    tok = b * s / c  # tokens on this GPU
    # Linear layers (forward); backward does dgrad and wgrad of the same shapes.
    gemms = [(tok, (q + 2 * kv) / t, h), (tok, h, q / t), (tok, (n_mat - 1) * F / t, h), (tok, h, F / t)]
    lin_fwd = sum(gemm_s(gpu, prec, *g) for g in gemms)
    lin_bwd = sum(gemm_s(gpu, prec, m, k, n) + gemm_s(gpu, prec, k, n, m) for m, n, k in gemms)
    # Attention core: per GPU, heads/t heads, s/c queries against s keys.
    q_len, k_len = s / c, s
    if train.attention is Attention.FLASH:
        flops = 4.0 * b * heads * q_len * k_len * d * 0.5  # causal blocks skipped
        rate = sustained_peak_flops(gpu, prec) * gpu.eff.attention_efficiency
        attn_fwd = flops / rate
        attn_bwd = FLASH_BWD_RATIO * flops / rate
        score_bytes = 0.0
    else:
        per_head = b * heads
        qk = gemm_s(gpu, prec, q_len, k_len, d)
        av = gemm_s(gpu, prec, q_len, d, k_len)
        scores = per_head * q_len * k_len
        # scale+mask+softmax (fused: read, write) and dropout (read, write, 1-byte mask)
        softmax_bytes = scores * BYTES * (2 + (DROPOUT_BYTES if model.attention_dropout > 0 else 0))
        attn_fwd = per_head * (qk + av) + hbm_s(gpu, softmax_bytes)
        attn_bwd = per_head * 2 * (qk + av) + hbm_s(gpu, 2 * softmax_bytes)
        score_bytes = softmax_bytes
    # Elementwise traffic per token (elements): norms, bias+dropout+residual, activation, rotary.
    h_sp = h / t if cfg.sequence_parallel else h
    dropout_mask = 0.5 if model.hidden_dropout > 0 else 0.0
    elems = (2 * 2 * h_sp + 2 * (3 + dropout_mask) * h_sp + (n_mat) * F / t
             + (2 * (q + kv) / t if model.position_embedding_type == "rope" else 0.0))
    elt_fwd = hbm_s(gpu, tok * elems * BYTES)
    elt_bwd = 2.0 * elt_fwd
    # Tensor-parallel collectives: 2 all-reduces (or reduce-scatter + all-gather) per direction.
    msg = tok * h * BYTES
    tp_fwd = 2 * allreduce_s(msg, t, tp_busbw_gbytes_per_s, latency_s=tp_latency_s) if t > 1 else 0.0
    tp_bwd = tp_fwd
    launch = gpu.eff.kernel_overhead_us * 1e-6
    runtime = RUNTIME_EFFICIENCY[train.runtime]
    fwd = (lin_fwd + attn_fwd + elt_fwd + KERNELS_PER_LAYER_FWD * launch) / runtime + tp_fwd
    bwd_plain = (lin_bwd + attn_bwd + elt_bwd + KERNELS_PER_LAYER_BWD * launch) / runtime + tp_bwd
    if cfg.recompute is Recompute.FULL:
        recompute = fwd
    elif cfg.recompute is Recompute.SELECTIVE:
        recompute = (attn_fwd + (hbm_s(gpu, score_bytes) if score_bytes else 0.0)) / runtime
    else:
        recompute = 0.0
    # Hardware FLOPs of the forward on this GPU.
    attn_flops = 4.0 * b * heads * q_len * k_len * d * (0.5 if train.attention is Attention.FLASH else 1.0)
    fwd_flops = sum(2.0 * m * n * k for m, n, k in gemms) + attn_flops
    return LayerTime(fwd_s=fwd, bwd_s=bwd_plain + recompute, attention_fwd_s=attn_fwd, fwd_flops=fwd_flops, attention_fwd_flops=attn_flops)


def head_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float]:
    """Forward and backward seconds of final norm, output projection and cross-entropy (last stage)."""
    t, b, s = cfg.tp, cfg.micro_batch_size, train.seq_length
    tok = b * s / cfg.cp
    vocab = model.padded_vocab(t) / t
    fwd = gemm_s(gpu, train.precision, tok, vocab, model.hidden_size)
    bwd = gemm_s(gpu, train.precision, tok, model.hidden_size, vocab) + gemm_s(gpu, train.precision, model.hidden_size, vocab, tok)
    ce = hbm_s(gpu, tok * vocab * (BYTES + 4 + 4))  # logits read, fp32 softmax write/read
    return fwd + ce, bwd + ce


def embedding_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float]:
    """Forward and backward seconds of the embedding lookup (first stage): memory-bound gathers/scatters."""
    tok = cfg.micro_batch_size * train.seq_length / cfg.cp
    fwd = hbm_s(gpu, tok * model.hidden_size * BYTES * 3)
    return fwd, 2 * fwd
