"""Time GEMMs, attention kernels and copies on one device with PyTorch, back to back as a training step runs them.

Each sample runs the kernel `inner` times between two timestamps (CUDA events on a GPU), with `inner` chosen so a
sample lasts about SAMPLE_TARGET_S: a GPU then stays busy and at the clock a training step holds it at, which a
single synchronised call does not (shared/reference/h100-measured.md: short timed calls ran at higher clocks).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from hgplan.documents import BenchAttention, BenchCopy, BenchFp8Gemm, BenchGemm
from hgplan.errors import InputError

SAMPLE_TARGET_S = 0.05
"""Length of one timed sample (seconds of back-to-back kernels)."""
WARMUP_CALLS = 3
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def llama_layer_gemms(tokens: int, hidden: int, kv_dim: int, ffn: int) -> list[tuple[int, int, int]]:
    """(m, n, k) of one Llama layer's forward GEMMs at `tokens` tokens: QKV, output projection, gated fc1, fc2."""
    return [(tokens, hidden + 2 * kv_dim, hidden), (tokens, hidden, hidden), (tokens, 2 * ffn, hidden),
            (tokens, hidden, ffn)]


GEMM_SHAPES = {
    "full": sorted({(2048, 2048, 2048), (8192, 8192, 8192), *llama_layer_gemms(4096, 4096, 1024, 14336),
                    *llama_layer_gemms(8192, 4096, 1024, 14336), *llama_layer_gemms(4096, 8192, 1024, 28672)}),
    "quick": sorted({(4096, 4096, 4096), *llama_layer_gemms(4096, 4096, 1024, 14336)}),
    "cpu": [(256, 256, 256), (256, 1024, 256), (512, 512, 512)],
}
"""Matmul shapes per mode: Llama-3.1-8B and -70B layer GEMMs (hidden 4096 / 8192, 8 KV heads of 128, SwiGLU) at
4096 and 8192 tokens, and squares; `cpu` is a smoke test of the harness, not a measurement worth calibrating on."""
ATTENTION_SHAPES = {
    "full": [(1, 32, 4096, 128), (2, 32, 4096, 128), (1, 32, 8192, 128), (1, 64, 4096, 128)],
    "quick": [(1, 32, 4096, 128)],
    "cpu": [(1, 4, 256, 64)],
}
"""(batch, heads, sequence, head dim) of the causal attention runs: Llama-3.1-8B and -70B heads."""
ATTENTION_BACKENDS = {"flash2": "FLASH_ATTENTION", "fused": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                      "unfused": "MATH"}
"""Kernel family (as the cost model names it) -> PyTorch SDPBackend."""
FP8_PASSES = {"fprop": ("float8_e4m3fn", True), "dgrad": ("float8_e5m2", False), "wgrad": ("float8_e5m2", False)}
"""Transformer Engine's fp8 GEMMs of a linear layer, pass -> (format of the first operand, fast accumulation); the
second operand is E4M3 (the weight, or the saved input for wgrad). The HYBRID format (Megatron's default) quantises
activations and weights to E4M3 and gradients to E5M2; transformer_engine/pytorch/module/base.py sets
_2X_ACC_FPROP = False and _2X_ACC_DGRAD = _2X_ACC_WGRAD = True, i.e. Hopper's fast fp8 accumulation in the forward
and split (promoted) accumulation in the backward GEMMs. Per-tensor scales, bf16 output."""
COPY_BYTES = {"full": [256 << 20, 1 << 30], "quick": [256 << 20], "cpu": [16 << 20]}


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """The torch device the kernels run on, and how to time it."""

    torch: Any
    device: Any
    dtype: Any
    cuda: bool
    repeats: int

    def with_precision(self, precision: str) -> "Device":
        """The same device, timing kernels in another precision."""
        return replace(self, dtype=getattr(self.torch, TORCH_DTYPES[precision]))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _elapsed_ms(self, fn: Callable[[], Any], inner: int) -> float:
        if self.cuda:
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / inner
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t0) * 1e3 / inner

    def time_ms(self, fn: Callable[[], Any]) -> list[float]:
        """Per-call milliseconds of `repeats` samples of back-to-back calls."""
        for _ in range(WARMUP_CALLS):
            fn()
        self.sync()
        first = self._elapsed_ms(fn, 1)
        inner = max(1, min(1000, math.ceil(SAMPLE_TARGET_S * 1e3 / max(first, 1e-3))))
        return [self._elapsed_ms(fn, inner) for _ in range(self.repeats)]


def open_device(kind: str, precision: str, repeats: int) -> Device:
    """The first CUDA/ROCm device, or the CPU. InputError when torch or the device is missing."""
    try:
        import torch
    except ImportError:
        raise InputError("hgplan bench needs PyTorch: pip install torch (any build for your GPU); planning does "
                         "not need it") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError("hgplan bench: torch sees no CUDA or ROCm device (torch.cuda.is_available() is False); "
                         "run it on a GPU machine, or give --device cpu to check the harness")
    device = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
    return Device(torch=torch, device=device, dtype=getattr(torch, TORCH_DTYPES[precision]), cuda=kind == "cuda",
                  repeats=repeats)


def time_gemms(dev: Device, shapes: list[tuple[int, int, int]]) -> list[BenchGemm]:
    out = []
    for m, n, k in shapes:
        a = dev.torch.randn(m, k, device=dev.device, dtype=dev.dtype)
        b = dev.torch.randn(k, n, device=dev.device, dtype=dev.dtype)
        runs = dev.time_ms(lambda: dev.torch.matmul(a, b))
        out.append(BenchGemm(m=m, n=n, k=k, ms=statistics.median(runs), runs_ms=[round(r, 6) for r in runs]))
    return out


def fp8_pass_shapes(m: int, n: int, k: int) -> list[tuple[str, tuple[int, int, int]]]:
    """The (m, n, k) of the three GEMMs of a forward (m x k) @ (k x n) as the cost model prices them: fprop, dgrad
    (m x n) @ (n x k), wgrad (k x m) @ (m x n)."""
    return [("fprop", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (k, n, m))]


def fp8_missing(torch: Any) -> str | None:
    """Why this torch build cannot time fp8 GEMMs (None when it can)."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e5m2"):
        return f"torch {torch.__version__} has no torch._scaled_mm with fp8 dtypes (PyTorch 2.4 or later)"
    return None


FP8_FORMATS = (("float8_e4m3fn", "float8_e5m2"), ("float8_e4m3fnuz", "float8_e5m2fnuz"))
"""(E4M3, E5M2) dtypes to try: the OCP formats (NVIDIA, MI355X), then the fnuz variants MI300-class GPUs take."""


def time_fp8_gemms(dev: Device, shapes: list[tuple[int, int, int]]) -> tuple[list[BenchFp8Gemm], list[str]]:
    """The three fp8 GEMMs of each forward shape (FP8_PASSES) with torch._scaled_mm, cuBLASLt's (hipBLASLt's) fp8 path
    (row-major first operand, column-major second, as cuBLASLt requires on Hopper), in the first of FP8_FORMATS the
    device takes; a GEMM it refuses in every format is listed as skipped with the error."""
    torch = dev.torch
    one = torch.ones((), device=dev.device, dtype=torch.float32)
    out, skipped = [], []
    formats = [f for f in FP8_FORMATS if all(hasattr(torch, name) for name in f)]
    for shape in shapes:
        for gemm_pass, (m, n, k) in fp8_pass_shapes(*shape):
            first, fast = FP8_PASSES[gemm_pass]
            error = None
            for e4m3, e5m2 in formats:
                a = torch.randn(m, k, device=dev.device).to(getattr(torch, e4m3 if first.endswith("e4m3fn") else e5m2))
                b = torch.randn(n, k, device=dev.device).to(getattr(torch, e4m3)).t()

                def run(a=a, b=b, fast=fast) -> Any:
                    return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)
                try:
                    runs = dev.time_ms(run)
                except RuntimeError as exc:  # the format, the layout or fp8 itself is not supported here
                    error = str(exc).splitlines()[0][:160]
                    continue
                out.append(BenchFp8Gemm(gemm_pass=gemm_pass, m=m, n=n, k=k, ms=statistics.median(runs),
                                        runs_ms=[round(r, 6) for r in runs]))
                break
            else:
                skipped.append(f"fp8 gemm {gemm_pass} {m}x{n}x{k}: {error or 'no fp8 dtype in this torch'}")
    return out, skipped


def time_attention(dev: Device, shapes: list[tuple[int, int, int, int]],
                   kernels: list[str]) -> tuple[list[BenchAttention], list[str]]:
    """Causal SDPA forward and forward+backward per backend; a backend the device or build lacks is skipped."""
    torch = dev.torch
    F = torch.nn.functional
    out, skipped = [], []
    for kernel in kernels:
        for b, h, s, d in shapes:
            q, k, v = (torch.randn(b, h, s, d, device=dev.device, dtype=dev.dtype, requires_grad=True)
                       for _ in range(3))
            grad = torch.randn(b, h, s, d, device=dev.device, dtype=dev.dtype)

            def fwd() -> Any:
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd() -> None:
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

            try:
                with _backend(torch, kernel):
                    f_ms = statistics.median(dev.time_ms(fwd))
                    fb_ms = statistics.median(dev.time_ms(fwd_bwd))
            except RuntimeError as exc:  # the backend does not support this device, dtype or shape
                skipped.append(f"attention {kernel} b{b} h{h} s{s} d{d}: {str(exc).splitlines()[0][:160]}")
                continue
            out.append(BenchAttention(kernel=kernel, batch=b, heads=h, seq=s, head_dim=d, fwd_ms=f_ms,
                                      fwd_bwd_ms=fb_ms))
    return out, skipped


def _backend(torch: Any, kernel: str) -> Any:
    """The context that restricts SDPA to one backend (none on the CPU: its default kernel is timed)."""
    if kernel == "cpu":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, ATTENTION_BACKENDS[kernel]))


def time_copies(dev: Device, sizes: list[int]) -> list[BenchCopy]:
    out = []
    for nbytes in sizes:
        src = dev.torch.empty(nbytes, dtype=dev.torch.uint8, device=dev.device).random_(0, 255)
        dst = dev.torch.empty_like(src)
        out.append(BenchCopy(bytes=nbytes, ms=statistics.median(dev.time_ms(lambda: dst.copy_(src)))))
    return out
