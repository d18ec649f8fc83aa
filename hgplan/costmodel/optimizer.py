"""HBM traffic of Megatron's optimizer step: the gradient norm, Adam, the bf16 copy of the updated weights, and the
main-gradient buffer zeroed before the next iteration (docs/cost-model.md, section 3)."""

from __future__ import annotations

from hgplan.domain import Runtime, TrainingSettings, TransformerImpl

GRAD_NORM_BYTES_PER_PARAM = 4
"""Gradient clipping's norm reads each fp32 main gradient once (Megatron computes it whenever `clip_grad` > 0, the
default 1.0; the gradients are rescaled, another 8 B/param, only in steps whose norm exceeds it)."""
FUSED_ADAM_BYTES_PER_PARAM = 28
"""A fused Adam kernel (Transformer Engine's or Apex's FusedAdam, torch's fused AdamW): reads the gradient (4) and
reads and writes the fp32 master weight, m and v (24)."""
TORCH_FOREACH_ADAMW_BYTES_PER_PARAM = 80
"""torch.optim.AdamW's default multi-tensor path (torch/optim/adam.py, _multi_tensor_adam with decoupled weight
decay), one fp32 pass per operation instead of one fused kernel: decay the weight (read, write: 8), lerp m towards
the gradient (12), scale v (8), add the squared gradient into it (12), sqrt of v into a new tensor (8), divide it by
the bias correction (8), add eps (8), and addcdiv into the weight (read weight, m and the denominator, write the
weight: 16)."""
FUSED_PARAM_COPY_BYTES_PER_PARAM = 4 + 2
"""The updated fp32 master weights copied into the bf16 model weights by Transformer Engine's or Apex's
multi_tensor_scale (read 4, write 2)."""
LOCAL_PARAM_COPY_BYTES_PER_PARAM = 4 + 4 + 4 + 2
"""The same copy where neither is installed: megatron-core's local_multi_tensor_scale (megatron/core/utils.py) runs
`dst.copy_(src * scale)` with scale 1.0, so each tensor is first multiplied into an fp32 temporary (read 4, write 4)
and that is copied into the bf16 weight (read 4, write 2)."""
OPTIMIZER_BYTES_PER_PARAM = GRAD_NORM_BYTES_PER_PARAM + FUSED_ADAM_BYTES_PER_PARAM + FUSED_PARAM_COPY_BYTES_PER_PARAM
"""HBM bytes per parameter of the optimizer's shard in one step with Transformer Engine or Apex: the gradient norm,
a fused Adam and the fused bf16 copy, 38. Zeroing the whole fp32 main-gradient buffer adds GRAD_ZERO_BYTES_PER_PARAM
over every parameter of the stage. h100-measured (torch's fused AdamW in a build without either, so with the local
copy: 4 + 28 + 14 = 46 B/param): 30.8 ms for 1.923 B parameters, 47 effective B/param at 2.96 TB/s; 0.1.0 charged
30."""
TORCH_ADAMW_BYTES_PER_PARAM = (GRAD_NORM_BYTES_PER_PARAM + TORCH_FOREACH_ADAMW_BYTES_PER_PARAM
                               + LOCAL_PARAM_COPY_BYTES_PER_PARAM)
"""The same step where neither Transformer Engine nor Apex is installed (`transformer_impl: local`): megatron-core
then falls back to torch.optim.AdamW (megatron/core/optimizer/__init__.py: "Transformer Engine and Apex are not
installed. Falling back to Torch optimizers.") and to its local multi-tensor copy: 4 + 80 + 14 = 98 B/param.
h100-measured: 66.4 ms for 1.923 B parameters, 102 effective bytes per parameter at 2.96 TB/s."""
GRAD_ZERO_BYTES_PER_PARAM = 4
"""Megatron zeroes the fp32 main-gradient buffer of every parameter before each iteration's first backward."""


def optimizer_bytes_per_param(train: TrainingSettings) -> int:
    """HBM bytes per parameter of the optimizer's shard in one step: a fused Adam (Transformer Engine's or Apex's),
    or, with Megatron's local spec (neither installed), PyTorch's multi-tensor AdamW."""
    local = train.transformer_impl is TransformerImpl.LOCAL and train.runtime is Runtime.MEGATRON
    return TORCH_ADAMW_BYTES_PER_PARAM if local else OPTIMIZER_BYTES_PER_PARAM
