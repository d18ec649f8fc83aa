"""Time the parts of Megatron's optimizer step on one GPU and set each beside the bytes hgplan counts for it.

Usage (needs torch and a CUDA GPU; megatron-core for its local multi-tensor copy and norm, else their PyTorch
equivalents):  python benchmarks/optimizer_bytes.py [--scale 1.0] [--json FILE]

The parameters are Llama-3.1-8B's tensors (four layers and the untied embedding and output layer: 1.923 B, the
configuration of shared/reference/h100-measured.json whose optimizer steps were timed), as fp32 master weights
with fp32 gradients, Adam's m and v, and bf16 model weights. Timed, median of five after two warm-ups:

- `copy`: one 1 GiB device copy (read + write), the HBM rate every part is set against;
- `grad_norm`: the gradient norm as megatron-core computes it without Transformer Engine or Apex (a torch.norm per
  tensor: 4 B/param);
- `adam_fused`: torch's fused AdamW step (28 B/param), the stand-in for TE's or Apex's FusedAdam;
- `adam_foreach`: torch's default multi-tensor AdamW step (80 B/param), megatron-core's fallback;
- `copy_local`: megatron-core's local multi_tensor_scale from fp32 master to bf16 model weights, `dst.copy_(src *
  1.0)` (14 B/param);
- `copy_fused_equivalent`: `dst.copy_(src)`, the 6 B/param that TE's or Apex's fused multi_tensor_scale moves;
- `zero_grad`: zeroing the fp32 gradient buffer (4 B/param).

Printed per part: milliseconds, effective bytes per parameter at the measured copy rate, and hgplan's count
(hgplan/costmodel/optimizer.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from hgplan.costmodel.optimizer import (FUSED_ADAM_BYTES_PER_PARAM, FUSED_PARAM_COPY_BYTES_PER_PARAM,
                                        GRAD_NORM_BYTES_PER_PARAM, GRAD_ZERO_BYTES_PER_PARAM,
                                        LOCAL_PARAM_COPY_BYTES_PER_PARAM, TORCH_FOREACH_ADAMW_BYTES_PER_PARAM)

HGPLAN_BYTES = {"grad_norm": GRAD_NORM_BYTES_PER_PARAM, "adam_fused": FUSED_ADAM_BYTES_PER_PARAM,
                "adam_foreach": TORCH_FOREACH_ADAMW_BYTES_PER_PARAM, "copy_local": LOCAL_PARAM_COPY_BYTES_PER_PARAM,
                "copy_fused_equivalent": FUSED_PARAM_COPY_BYTES_PER_PARAM, "zero_grad": GRAD_ZERO_BYTES_PER_PARAM}
LLAMA8B = {"hidden": 4096, "ffn": 14336, "kv": 1024, "vocab": 128256, "layers": 4}


def shapes(scale: float) -> list[tuple[int, ...]]:
    """Llama-3.1-8B's parameter tensors (four layers, untied embedding and output layer), each dimension scaled."""
    h, f, kv, vocab = (max(1, int(LLAMA8B[k] * scale)) for k in ("hidden", "ffn", "kv", "vocab"))
    layer = [(h + 2 * kv, h), (h, h), (2 * f, h), (h, f), (h,), (h,)]
    return [(vocab, h)] + layer * LLAMA8B["layers"] + [(h,), (vocab, h)]


def timed(torch, fn, device: str, reps: int = 5, warm: int = 2) -> float:
    """Median milliseconds of fn() over `reps` runs after `warm` warm-ups."""
    out = []
    for i in range(warm + reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            import time
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
        if i >= warm:
            out.append(ms)
    return statistics.median(out)


def local_ops(torch, device: str):
    """megatron-core's local multi-tensor copy and l2 norm (its fallbacks without TE or Apex), or the same code (on
    a CPU, where megatron-core's norm puts its result on a GPU)."""
    try:
        from megatron.core.utils import local_multi_tensor_l2_norm, local_multi_tensor_scale
        if device == "cuda":
            return local_multi_tensor_scale, local_multi_tensor_l2_norm, "megatron.core.utils"
        raise ImportError
    except ImportError:
        def scale(chunk_size, noop_flag, tensor_lists, s):
            for src, dst in zip(tensor_lists[0], tensor_lists[1]):
                dst.copy_(src * s)

        def l2(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
            norms = [[torch.norm(t) for t in ts] for ts in tensor_lists]
            return torch.tensor([float(torch.norm(torch.tensor(norms)))]), None
        return scale, l2, "local copy of megatron-core 0.16.1's code"


def measure(torch, device: str, scale: float) -> dict:
    """Milliseconds of each part over the scaled Llama parameters, and the parameter count."""
    block = torch.empty(2 ** 28, device=device, dtype=torch.float32)  # 1 GiB
    other = torch.empty_like(block)
    copy_ms = timed(torch, lambda: other.copy_(block), device)
    copy_bytes = 2 * block.numel() * 4
    block = other = None  # freed before the parameters are made
    params = [torch.randn(s, device=device, dtype=torch.float32) * 0.02 for s in shapes(scale)]
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    model = [p.to(torch.bfloat16) for p in params]
    n = sum(p.numel() for p in params)
    scale_op, l2_op, source = local_ops(torch, device)
    fused = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), fused=device == "cuda")
    fused.step()  # creates m and v
    ms = {"grad_norm": timed(torch, lambda: l2_op(2048 * 32, None, [grads], False), device),
          "adam_fused": timed(torch, fused.step, device)}
    state = fused.state
    for st in state.values():  # the multi-tensor path keeps its step counts on the host, as a fresh one would
        st["step"] = st["step"].cpu()
    foreach = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), foreach=True)
    foreach.state = state  # the same m and v: no second copy of the state
    ms["adam_foreach"] = timed(torch, foreach.step, device)
    ms["copy_local"] = timed(torch, lambda: scale_op(2048 * 32, None, [params, model], 1.0), device)
    ms["copy_fused_equivalent"] = timed(torch, lambda: [m.copy_(p) for p, m in zip(params, model)], device)
    ms["zero_grad"] = timed(torch, lambda: [g.zero_() for g in grads], device)
    return {"params": n, "ms": ms, "copy_ms": copy_ms, "copy_bytes": copy_bytes, "ops_from": source}


STEPS = {"fused": ("grad_norm", "adam_fused", "copy_local"), "foreach": ("grad_norm", "adam_foreach", "copy_local")}
"""The parts of `opt.step()` in megatron-core without Transformer Engine or Apex, by which AdamW it runs (the
zeroing is outside the step mcore_bench.py times)."""


def copy_rate(res: dict) -> float:
    """Bytes per second (read + write) of the measured 1 GiB copy."""
    return res["copy_bytes"] / (res["copy_ms"] * 1e-3)


def effective_bytes(res: dict, ms: float) -> float:
    """Bytes per parameter that `ms` milliseconds move at the measured copy rate."""
    return ms * 1e-3 * copy_rate(res) / res["params"]


def report(res: dict) -> list[str]:
    """Per part: ms, effective bytes per parameter at the copy rate, hgplan's bytes."""
    lines = [f"{res['params'] / 1e9:.3f} B parameters; 1 GiB copy {res['copy_ms']:.3f} ms = "
             f"{copy_rate(res) / 1e9:.0f} GB/s (read + write); local ops from {res['ops_from']}",
             f"{'part':<24}{'ms':>9}{'B/param at copy rate':>24}{'hgplan B/param':>16}"]
    for part, ms in res["ms"].items():
        lines.append(f"{part:<24}{ms:>9.2f}{effective_bytes(res, ms):>24.1f}{HGPLAN_BYTES[part]:>16}")
    for adam, parts in STEPS.items():
        total = sum(res["ms"][p] for p in parts)
        counted = sum(HGPLAN_BYTES[p] for p in parts)
        lines.append(f"step as timed, {adam} AdamW: parts sum to {total:.2f} ms ({effective_bytes(res, total):.1f} "
                     f"B/param at the copy rate; hgplan counts {counted})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="scale every dimension (0.05 for a quick CPU check)")
    ap.add_argument("--json", help="also write the measurements to this file")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("optimizer_bytes: needs torch (pip install 'hgplan[bench]')", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = measure(torch, device, args.scale)
    res["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    res["torch"] = torch.__version__
    print(f"device: {res['device']}, torch {res['torch']}")
    print("\n".join(report(res)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
