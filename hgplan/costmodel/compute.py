"""Time of one micro-batch's forward and backward through one layer (and the edge layers) on one GPU type.

Matrix multiplies run at the architecture's achievable matmul fraction of peak, reduced for small
GEMM dimensions, and never faster than HBM allows (roofline). Attention runs at the architecture's
fused-attention efficiency (or as two roofline GEMMs plus softmax traffic when unfused). Elementwise
operations move bytes through HBM. Tensor-parallel collectives run on the intra-node link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hgplan.costmodel.comm import allreduce_s
from hgplan.costmodel.memory import MXFP8_SCALE_BYTES
from hgplan.domain import (ACTIVATION_FFN_MATRICES, Attention, Fp8Recipe, GpuType, ModelArch, Precision, Runtime,
                           TrainingSettings, TransformerImpl)
from hgplan.plan import ParallelConfig, Recompute

RUNTIME_EFFICIENCY = {Runtime.MEGATRON: 1.0, Runtime.DEEPSPEED: 0.80, Runtime.FSDP: 0.85}
"""Share of GPU time a framework spends in useful kernels, relative to Megatron-LM's fused path.

PyTorch-eager FSDP (FULL_SHARD with autocast) loses time to per-module hooks, dtype casts, unfused
element-wise kernels and allocator synchronisation. 0.85 is the one constant estimated from the whole
MosaicML llm-foundry family of the calibration set (124 rows); see docs/cost-model.md."""


BYTES = 2  # bf16 / fp16 activations and weights
TILE_M, TILE_N = 128, 256
"""Output tile of cuBLAS's large bf16/fp16 GEMM kernels on Ampere and Hopper (128 x 256 CTA tiles). A GEMM runs
ceil(M / 128) x ceil(N / 256) tiles in waves of one tile per SM: partial tiles and a partial last wave are wasted
work, a multiple of the tile wastes none (h100-measured: 4096-wide GEMMs ran as fast as 16k-wide ones)."""
SMOOTH_TILE_MN, SMOOTH_TILE_K = 256.0, 128.0
"""0.1.0's small-shape penalty M/(M+256) x N/(N+256) x K/(K+128), kept for architectures whose gemm_efficiency is a
best-shape MAMF figure (it was validated with them on the calibration set); h100-measured shows the form is wrong on
Hopper, where whole tiles and waves replace it."""
MAIN_GRAD_BYTES_PER_PARAM = 2 + 4 + 4
"""Without gradient-accumulation fusion (the local spec, or Megatron without TE/Apex) every backward adds each
parameter's bf16 gradient into its fp32 main gradient: read 2 B, read 4 B, write 4 B. h100-measured: 4.2-4.4 ms per
1 B parameters per micro-batch, 10 B/param at about 2.4 TB/s. Transformer Engine fuses it into the wgrad GEMM."""
LOCAL_ELEMENTWISE_PASSES = {"norm": 7, "rope": 10, "residual": 5, "swiglu": 5, "attention_layout": 2}
"""Element-wise traffic of the local spec's PyTorch fallbacks, forward, in passes over each tensor (reads + writes,
2-byte elements), counted from megatron-core 0.16.1's local layer: an unfused RMSNorm (pow, mean, mul by the inverse
root, mul by the weight: 7 passes over h); unfused RoPE on q and k (neg and cat of rotate_half, two muls, an add: 10
passes over q + kv); each residual add with its p = 0 dropout (5 passes over h); SwiGLU as silu then mul (5 passes
over F); SDPA's layout copies of q, k, v in and of the output out (2 passes). The backward moves about twice the
forward's bytes. h100-measured per layer (8B, s4096): 2.9 ms of element-wise and copy kernels, of which 0.77 ms is
the main-grad add; these passes give 2.1 ms."""
LOCAL_CROSS_ENTROPY_BYTES = (2 + 4 + 4 + 8 + 8 + 4, 8 + 4 + 2)
"""(forward, backward) bytes per logit of the local spec's unfused fp32 cross-entropy: cast to fp32 (read 2, write
4), max (read 4), subtract (read/write 8), exp (read/write 8), sum (read 4); backward: softmax minus one-hot
(read/write 8), scale (4), cast back (2). Megatron's fused cross-entropy reads the logits once and writes fp32
softmax once (BYTES + 4 + 4)."""
FLASH_BWD_RATIO = 2.5
"""FlashAttention's backward over its forward: 5 matmuls (it recomputes QK^T) against 2 (Dao, FlashAttention-2,
section 3.1)."""
DROPOUT_BYTES = 2.5
"""Attention-dropout traffic per score element, in activation-element units: read and write the scores (2) and
write a 1-byte mask (0.5)."""
LOCAL_UNFUSED_SCORE_PASSES = (11, 20)
"""(forward, backward) passes over the 2-byte s x s score tensor of the local spec's unfused attention (in-place
mask fill, unfused softmax, p = 0 dropout, their backward, and the score layouts' copies). h100-measured: the
unfused configurations' non-matmul kernels exceed those of their flash twins by 30-33 passes per layer (10
configurations, 8B and 70B, s4096-8192, b1-2), and by 41-43 under full recompute, which re-runs the forward: about
11 forward and 20 backward. Megatron's fused softmax (TE or Apex) makes 2 and 4."""
FP8_CAST_BYTES_FWD, FP8_CAST_BYTES_BWD = 3, 4
"""Transformer Engine's fp8 casts, per element: forward, the projection's input is cast on its own (read 2 bytes,
write 1; the QKV and MLP inputs and the activation output are cast inside the fused norm and activation kernels);
backward, each linear layer's output gradient is cast to E5M2 and transposed for the wgrad GEMM (read 2, write
1 + 1)."""
FP8_CAST_TRANSPOSE_BYTES = 4
"""A stand-alone Transformer Engine `Linear` under fp8 (what PyTorch-FSDP models such as llm-foundry's MPT with
`fc_type: te` are built from; there is no norm to fuse the cast into) casts its input and writes the transpose the
wgrad GEMM needs (read 2, write 1 + 1), for each of the four linear layers. Its weight gets the same cast and
transpose on every forward: FSDP re-gathers the bf16 weight for each micro-batch and the module is not told which
micro-batch is the first (TE caches the weight cast only when it is; Megatron tells it)."""
TENSORWISE_AMAX_BYTES = 2
"""Current scaling (`fp8_recipe: tensorwise`, TE Float8CurrentScaling) computes each tensor's amax before its cast:
a stand-alone cast first reads its bf16 input once more (nvte_compute_amax in transformer_engine/pytorch/csrc/
extensions/cast.cpp)."""
UNFUSED_NORM_CAST_BYTES = 3
"""Where the norm (or activation) cannot write fp8 itself, it writes bf16 and a quantize kernel reads it back (2)
and writes fp8 (1): current scaling's norms and activation compute the output in bf16 fused with its amax, then
quantize (FUSED_NORM_AMAX_FP8 and FUSED_DACT_AMAX_FP8 in TE's normalization.cpp and activation.cpp); MXFP8's norms
do the same unless NVTE_NORM_FWD_USE_CUDNN is set (its activation quantizes in the fused kernel)."""
KERNELS_PER_LAYER_FWD = 14
"""Kernel launches charged to one transformer layer's forward (0.1.0's count for Megatron's fused path: two norms,
four GEMMs, rotary, attention, activation, two bias-dropout-adds and the TP collectives), one launch overhead each."""
KERNELS_PER_LAYER_BWD = 2 * KERNELS_PER_LAYER_FWD
"""The backward launches about two kernels per forward one (dgrad and wgrad)."""


def sustained_peak_flops(gpu: GpuType, precision: Precision) -> float:
    """Tensor-core FLOP/s the GPU sustains in training: datasheet peak x the training-step clock's share."""
    return gpu.peak_tflops(precision) * 1e12 * gpu.eff.sustained_clock_fraction


def tile_efficiency(gpu: GpuType, m: float, n: float, k: float) -> float:
    """Share of the tiles' work that is useful: whole 128 x 256 tiles in whole waves over the SMs where the
    architecture is priced that way (gemm_waves), else 0.1.0's smooth penalty for dimensions near a tile."""
    if not gpu.eff.gemm_waves:
        return (m / (m + SMOOTH_TILE_MN)) * (n / (n + SMOOTH_TILE_MN)) * (k / (k + SMOOTH_TILE_K))
    if not gpu.sm_count:
        return 1.0
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    waves = math.ceil(tiles / gpu.sm_count)
    return (m * n) / (waves * gpu.sm_count * TILE_M * TILE_N)


def gemm_compute_s(gpu: GpuType, precision: Precision, m: float, n: float, k: float) -> float:
    """Tensor-core time of an (m x k) @ (k x n) matmul at the per-clock efficiency and training clock, in whole tiles
    and waves (inversely proportional to gemm_efficiency)."""
    peak = sustained_peak_flops(gpu, precision)
    return 2.0 * m * n * k / (peak * gemm_efficiency(gpu, precision) * tile_efficiency(gpu, m, n, k))


def gemm_efficiency(gpu: GpuType, precision: Precision) -> float:
    """The architecture's GEMM efficiency in this precision: fp8_gemm_efficiency for fp8 where it is known."""
    if precision is Precision.FP8 and gpu.eff.fp8_gemm_efficiency is not None:
        return gpu.eff.fp8_gemm_efficiency
    return gpu.eff.gemm_efficiency


def gemm_memory_s(gpu: GpuType, m: float, n: float, k: float, operand_bytes: int = BYTES) -> float:
    """HBM time of reading both operands and writing the (2-byte) result once."""
    return hbm_s(gpu, operand_bytes * (m * k + k * n) + BYTES * m * n)


def gemm_s(gpu: GpuType, precision: Precision, m: float, n: float, k: float) -> float:
    """Roofline time of an (m x k) @ (k x n) matmul: tensor cores (gemm_compute_s), never faster than HBM (fp8
    operands are one byte each; the result is bf16)."""
    operand_bytes = 1 if precision is Precision.FP8 else BYTES
    return max(gemm_compute_s(gpu, precision, m, n, k), gemm_memory_s(gpu, m, n, k, operand_bytes))


def attention_kernel(train: TrainingSettings, gpu: GpuType) -> Attention:
    """The attention family that runs on this GPU: the one asked for if the GPU has it, else what the runtime uses
    (fused with Transformer Engine, FlashAttention-2 with FSDP, unfused with DeepSpeed of 2021 or the local spec);
    GPUs without FlashAttention-class kernels (Volta, Turing) run the unfused path."""
    if not gpu.eff.flash_attention:
        return Attention.UNFUSED
    if train.attention is not Attention.AUTO:
        return train.attention
    if train.transformer_impl is TransformerImpl.LOCAL or train.runtime is Runtime.DEEPSPEED:
        return Attention.UNFUSED
    return Attention.FLASH2 if train.runtime is Runtime.FSDP else Attention.FUSED


def attention_rate(gpu: GpuType, precision: Precision, kernel: Attention) -> float:
    """FLOP/s (causal FLOPs counted) of a FlashAttention-class kernel, forward and backward alike."""
    eff = gpu.eff.attention_efficiency
    if kernel is Attention.FUSED and gpu.eff.fused_attention_efficiency is not None:
        eff = gpu.eff.fused_attention_efficiency
    if kernel is Attention.FLASH1 and gpu.eff.flash1_attention_efficiency is not None:
        eff = gpu.eff.flash1_attention_efficiency
    return sustained_peak_flops(gpu, precision) * eff


def causal_attention_flops(tokens_heads: float, q_len: float, k_len: float, head_dim: float) -> float:
    """Forward FLOPs of causal attention over `tokens_heads` (micro-batch x heads) sequences: the causal half of
    4 q k d (QK^T and PV), the blocks above the diagonal skipped."""
    return 4.0 * tokens_heads * q_len * k_len * head_dim * 0.5


def flash_attention_s(gpu: GpuType, precision: Precision, kernel: Attention, *, tokens_heads: float, q_len: float,
                      k_len: float, head_dim: float) -> tuple[float, float, float]:
    """(forward s, backward s, forward FLOPs) of a causal FlashAttention-class kernel over `tokens_heads` (micro-batch
    x heads) sequences of q_len queries against k_len keys: causal_attention_flops at the kernel family's rate, the
    backward FLASH_BWD_RATIO times the forward."""
    flops = causal_attention_flops(tokens_heads, q_len, k_len, head_dim)
    rate = attention_rate(gpu, precision, kernel)
    return flops / rate, FLASH_BWD_RATIO * flops / rate, flops


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


def _attention_s(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings,
                 kernel: Attention) -> tuple[float, float, float, float]:
    """(forward s, backward s, score bytes written by the unfused path, forward FLOPs) of the attention core on one
    GPU: heads / tp heads, s / cp queries against s keys."""
    t, c, b, s = cfg.tp, cfg.cp, cfg.micro_batch_size, train.seq_length
    heads, d, prec = model.num_attention_heads / t, model.kv_channels, compute_precision(train)
    q_len, k_len = s / c, s
    if kernel is not Attention.UNFUSED:
        fwd, bwd, flops = flash_attention_s(gpu, prec, kernel, tokens_heads=b * heads, q_len=q_len, k_len=k_len,
                                            head_dim=d)
        return fwd, bwd, 0.0, flops
    per_head = b * heads
    qk = gemm_s(gpu, prec, q_len, k_len, d)
    av = gemm_s(gpu, prec, q_len, d, k_len)
    scores = per_head * q_len * k_len
    if train.transformer_impl is TransformerImpl.LOCAL:
        fwd_bytes, bwd_bytes = (scores * BYTES * n for n in LOCAL_UNFUSED_SCORE_PASSES)
    else:  # fused scale+mask+softmax (read, write) and dropout (read, write, 1-byte mask); the backward twice that
        fwd_bytes = scores * BYTES * (2 + (DROPOUT_BYTES if model.attention_dropout > 0 else 0))
        bwd_bytes = 2 * fwd_bytes
    return (per_head * (qk + av) + hbm_s(gpu, fwd_bytes), per_head * 2 * (qk + av) + hbm_s(gpu, bwd_bytes),
            fwd_bytes, 4.0 * b * heads * q_len * k_len * d)


def _elementwise_fwd_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> float:
    """Element-wise bytes per token of one layer's forward (the backward moves twice as many).

    Transformer Engine (Megatron's fused path): norms, bias+dropout+residual, activation and rotary each read and
    write once. The local spec: its PyTorch fallbacks, pass by pass (LOCAL_ELEMENTWISE_PASSES)."""
    t = cfg.tp
    h, q, kv, F = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    h_sp = h / t if cfg.sequence_parallel else h
    rope = model.position_embedding_type == "rope"
    if train.transformer_impl is TransformerImpl.LOCAL:
        n = LOCAL_ELEMENTWISE_PASSES
        act_passes = n["swiglu"] if model.gated else 2  # silu + mul, or one activation pass
        elems = (2 * n["norm"] * h_sp + 2 * n["residual"] * h_sp + act_passes * F / t
                 + (n["rope"] * (q + kv) / t if rope else 0.0) + n["attention_layout"] * (2 * q + 2 * kv) / t)
        return elems * BYTES
    dropout_mask = 0.5 if model.hidden_dropout > 0 else 0.0
    elems = (2 * 2 * h_sp + 2 * (3 + dropout_mask) * h_sp + n_mat * F / t + (2 * (q + kv) / t if rope else 0.0))
    return elems * BYTES


def main_grad_s(gpu: GpuType, train: TrainingSettings, params: float) -> float:
    """The fp32 main-gradient add of one backward over `params` parameters (zero with gradient-accumulation
    fusion, i.e. Transformer Engine)."""
    if train.transformer_impl is not TransformerImpl.LOCAL:
        return 0.0
    return hbm_s(gpu, params * MAIN_GRAD_BYTES_PER_PARAM)


def compute_precision(train: TrainingSettings) -> Precision:
    """The precision of everything but fp8's linear layers: bf16 under fp8, else the training precision."""
    return Precision.BF16 if train.precision is Precision.FP8 else train.precision


def _fp8_cast_bytes(model: ModelArch, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float, float]:
    """(forward bytes per token, backward bytes per token, forward bytes per micro-batch) of fp8 casts in one layer.

    Megatron's Transformer Engine layers fuse the QKV and MLP input casts into their norms and the fc2 input cast into
    the activation (FP8_CAST_BYTES_*); PyTorch FSDP runs stand-alone TE Linear modules (FP8_CAST_TRANSPOSE_BYTES).
    Current scaling adds an amax read to every stand-alone cast and unfuses the norms' and activation's casts; MXFP8
    unfuses the norms' and writes one scale byte per 32 fp8 elements (docs/cost-model.md, Precision)."""
    t = cfg.tp
    h, q, kv, F = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    recipe = train.fp8_recipe
    grad_outputs = (q + 2 * kv) / t + h + (n_mat - 1) * F / t + h  # QKV, proj, fc1, fc2 outputs
    norm_outputs = 2 * (h / t if cfg.sequence_parallel else h)  # QKV and fc1 inputs, cast where the norm runs
    if train.runtime is Runtime.FSDP:
        inputs = h + q / t + h + F / t  # QKV, proj, fc1, fc2 inputs
        fwd, bwd, weights = (FP8_CAST_TRANSPOSE_BYTES * inputs, FP8_CAST_BYTES_BWD * grad_outputs,
                             FP8_CAST_TRANSPOSE_BYTES * model.layer_params() / t)
        if recipe is Fp8Recipe.TENSORWISE:
            fwd += TENSORWISE_AMAX_BYTES * inputs
            weights += TENSORWISE_AMAX_BYTES * model.layer_params() / t
    else:
        fwd, bwd, weights = FP8_CAST_BYTES_FWD * q / t, FP8_CAST_BYTES_BWD * grad_outputs, 0.0
        if recipe is Fp8Recipe.TENSORWISE:
            fwd += TENSORWISE_AMAX_BYTES * q / t + UNFUSED_NORM_CAST_BYTES * (norm_outputs + F / t)
        elif recipe is Fp8Recipe.MXFP8:
            fwd += UNFUSED_NORM_CAST_BYTES * norm_outputs
    if recipe is Fp8Recipe.TENSORWISE:
        bwd += TENSORWISE_AMAX_BYTES * grad_outputs
    elif recipe is Fp8Recipe.MXFP8:  # the scales of every fp8 copy written: rowwise and columnwise
        fwd += 2 * MXFP8_SCALE_BYTES * (norm_outputs + q / t + F / t)
        bwd += 2 * MXFP8_SCALE_BYTES * grad_outputs
        weights += 2 * MXFP8_SCALE_BYTES * model.layer_params() / t if train.runtime is Runtime.FSDP else 0.0
    return fwd, bwd, weights


def layer_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings,
               *, tp_busbw_gbytes_per_s: float, tp_latency_s: float) -> LayerTime:
    """Forward and backward seconds of one transformer layer for one micro-batch on one GPU: GEMMs, attention, element-
    wise traffic, the main-gradient add, TP collectives and recomputation. Under fp8 the four linear layers run at the
    fp8 rate and pay their casts; attention and element-wise work stay bf16."""
    t, c, b, s = cfg.tp, cfg.cp, cfg.micro_batch_size, train.seq_length
    prec = train.precision  # the linear layers' precision
    h, q, kv, F = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    tok = b * s / c  # tokens on this GPU
    # Linear layers (forward); backward does dgrad and wgrad of the same shapes.
    gemms = [(tok, (q + 2 * kv) / t, h), (tok, h, q / t), (tok, (n_mat - 1) * F / t, h), (tok, h, F / t)]
    lin_fwd = sum(gemm_s(gpu, prec, *g) for g in gemms)
    lin_bwd = sum(gemm_s(gpu, prec, m, k, n) + gemm_s(gpu, prec, k, n, m) for m, n, k in gemms)
    attn_fwd, attn_bwd, score_bytes, attn_flops = _attention_s(model, gpu, cfg, train, attention_kernel(train, gpu))
    elt_fwd = hbm_s(gpu, tok * _elementwise_fwd_bytes(model, cfg, train))
    elt_bwd = 2.0 * elt_fwd + main_grad_s(gpu, train, model.layer_params() / t)
    if prec is Precision.FP8:
        cast_fwd, cast_bwd, cast_weights = _fp8_cast_bytes(model, cfg, train)
        elt_fwd += hbm_s(gpu, tok * cast_fwd + cast_weights)
        elt_bwd += hbm_s(gpu, tok * cast_bwd)
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
    fwd_flops = sum(2.0 * m * n * k for m, n, k in gemms) + attn_flops  # hardware FLOPs on this GPU
    return LayerTime(fwd_s=fwd, bwd_s=bwd_plain + recompute, attention_fwd_s=attn_fwd, fwd_flops=fwd_flops,
                     attention_fwd_flops=attn_flops)


def head_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float]:
    """Forward and backward seconds of final norm, output projection and cross-entropy (last stage)."""
    t, b, s = cfg.tp, cfg.micro_batch_size, train.seq_length
    tok = b * s / cfg.cp
    vocab = model.padded_vocab(t) / t
    prec = compute_precision(train)  # the output layer stays bf16 under fp8 (Transformer Engine's recipes)
    fwd = gemm_s(gpu, prec, tok, vocab, model.hidden_size)
    bwd = gemm_s(gpu, prec, tok, model.hidden_size, vocab) + gemm_s(gpu, prec, model.hidden_size, vocab, tok)
    if train.transformer_impl is TransformerImpl.LOCAL:
        ce_fwd, ce_bwd = (hbm_s(gpu, tok * vocab * n) for n in LOCAL_CROSS_ENTROPY_BYTES)
    else:
        ce_fwd = ce_bwd = hbm_s(gpu, tok * vocab * (BYTES + 4 + 4))  # logits read, fp32 softmax write/read
    return fwd + ce_fwd, bwd + ce_bwd + main_grad_s(gpu, train, vocab * model.hidden_size)


def embedding_time(model: ModelArch, gpu: GpuType, cfg: ParallelConfig, train: TrainingSettings) -> tuple[float, float]:
    """Forward and backward seconds of the embedding lookup (first stage): memory-bound gathers/scatters."""
    tok = cfg.micro_batch_size * train.seq_length / cfg.cp
    fwd = hbm_s(gpu, tok * model.hidden_size * BYTES * 3)
    return fwd, 2 * fwd + main_grad_s(gpu, train, model.padded_vocab(cfg.tp) / cfg.tp * model.hidden_size)
