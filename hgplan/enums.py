"""The named choices of the domain (precisions, transports, attention kernels, fp8 recipes, runtimes, targets, export
formats, path kinds). hgplan.domain re-exports them; import them from there."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    """Training precision of weights and activations."""

    BF16 = "bf16"
    """bfloat16 compute, fp32 main gradients and master weights (Megatron default)."""
    FP16 = "fp16"
    """float16 compute with loss scaling, fp32 master weights."""
    FP8 = "fp8"
    """Transformer Engine fp8 (E4M3 forward, E5M2 gradients, per-tensor scaling) for the transformer layers'
    linear layers; attention, embedding, output layer and master weights as with bf16."""


class Transport(StrEnum):
    """The fabric a node group's NICs speak."""

    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"


class Attention(StrEnum):
    """The attention kernel family the cost model prices (docs/cost-model.md, attention)."""

    AUTO = "auto"
    """What the runtime and the GPU choose: see costmodel.compute.attention_kernel."""
    FUSED = "fused"
    """cuDNN / Transformer Engine fused attention (FlashAttention-3 class on Hopper); never stores the scores."""
    FLASH2 = "flash2"
    """FlashAttention-2 (flash-attn, PyTorch SDPA's flash backend); never stores the scores."""
    FLASH1 = "flash1"
    """FlashAttention-1-class kernels: flash-attn 1.x and the Triton FlashAttention port (llm-foundry's MPT with
    `attn_impl: triton`, the one that takes an ALiBi bias); never stores the scores."""
    UNFUSED = "unfused"
    """Megatron's unfused softmax path: the scores are materialised."""


ATTENTION_ALIASES = {"flash": "flash2"}
"""0.1.0's `attention: flash` was priced as FlashAttention-2; it still means that."""


class Fp8Recipe(StrEnum):
    """How Transformer Engine scales fp8 tensors (Megatron-LM's `--fp8-recipe`; megatron/core/fp8_utils.py)."""

    DELAYED = "delayed"
    """One scale per tensor from the amax history of earlier steps (TE DelayedScaling; Megatron's default)."""
    TENSORWISE = "tensorwise"
    """One scale per tensor from its own amax, computed before each cast (TE Float8CurrentScaling)."""
    MXFP8 = "mxfp8"
    """OCP MX block scaling: one E8M0 scale per 32 elements, rowwise and columnwise copies (TE MXFP8BlockScaling);
    needs Blackwell's tensor cores."""


class TransformerImpl(StrEnum):
    """How Megatron builds its layers (`--transformer-impl`)."""

    TRANSFORMER_ENGINE = "transformer_engine"
    """Transformer Engine: fused norm+GEMM, fused attention, gradient-accumulation fusion (Megatron's default)."""
    LOCAL = "local"
    """Megatron-core's local spec: PyTorch fallbacks (unfused norms, RoPE, SwiGLU, residual adds, an fp32 main-grad
    add per parameter, an fp32 cross-entropy in several passes)."""


class Runtime(StrEnum):
    """The training framework whose behaviour the cost model follows."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    """DeepSpeed's ZeRO-3 of 2021 (docs/cost-model.md)."""
    FSDP = "fsdp"


class Target(StrEnum):
    """The framework a searched plan must run on (it narrows the plan family)."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    FLAGSCALE = "flagscale"
    """FlagScale's heterogeneous runtime: the stock family plus asymmetric plans (per-mesh tp, dp, recompute)."""


class ExportFormat(StrEnum):
    """The launch targets `hgplan export --format` writes."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    TORCHRUN = "torchrun"
    FLAGSCALE = "flagscale"


class PathKind(StrEnum):
    """How traffic between two node groups flows."""

    SAME_GROUP = "same_group"
    SAME_FABRIC = "same_fabric"
    """Same site and transport: one fabric."""
    GROUP_LINK = "group_link"
    """A link between two groups of one site."""
    SITE_LINK = "site_link"
    """A link between sites."""
