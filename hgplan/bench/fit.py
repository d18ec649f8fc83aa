"""Cost-model constants from an `hgplan bench` report (pure; `hgplan calibrate --bench`).

Each measurement implies the value of one constant: the value with which the cost model's own formula for that
kernel (compute.gemm_compute_s, compute.flash_attention_s, compute.hbm_s, comm.allreduce_s) reproduces the measured
time. A constant takes the median of what its measurements imply; its spread and the model's median error before and
after are reported. The training-step clock (sustained_clock_fraction) is not separable from gemm_efficiency by
kernel timings: the fit keeps the catalog's clock and folds the difference into gemm_efficiency.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from hgplan.costmodel.comm import NVLINK_HOP_S, allreduce_s, switched_busbw
from hgplan.costmodel.compute import flash_attention_s, gemm_compute_s, gemm_efficiency, gemm_memory_s, hbm_s
from hgplan.documents import BenchConstant, BenchReport
from hgplan.domain import Attention, GpuType, Precision
from hgplan.errors import InputError

GEMM_MEMORY_SHARE_MAX = 0.5
"""A GEMM whose HBM time (at the catalog's HBM efficiency) is half its measured time or more says little about the
tensor cores; it is not used."""
COPY_MIN_BYTES = 64 << 20
"""Copies below this are launch-bound, not bandwidth-bound."""
COLLECTIVE_MIN_BYTES = 64 << 20
"""All-reduces below this are latency-bound (nccl-tests reach their bus bandwidth above tens of MiB)."""
FITTED_ATTENTION = {"flash2": ("attention_efficiency", Attention.FLASH2),
                    "fused": ("fused_attention_efficiency", Attention.FUSED)}
"""SDPA backend -> (the constant its timings set, the cost model's kernel family)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured time and the model's time for it as a function of one constant's value."""

    constant: str
    measured_s: float
    model_s: Callable[[GpuType], float]
    inverse: bool = True
    """The model's time is exactly proportional to 1 / the constant (else it is solved for by bisection)."""


def _with(gpu: GpuType, constant: str, value: float) -> GpuType:
    return replace(gpu, eff=replace(gpu.eff, **{constant: value}))


def _implied(o: Observation, gpu: GpuType) -> float | None:
    """The constant's value with which the model reproduces the measurement (None when none in (0, 3] does)."""
    if o.inverse:
        return o.model_s(_with(gpu, o.constant, 1.0)) / o.measured_s
    lo, hi = 1e-3, 3.0
    if o.model_s(_with(gpu, o.constant, hi)) > o.measured_s:
        return None  # slower than the model at any efficiency: latency-bound
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if o.model_s(_with(gpu, o.constant, mid)) > o.measured_s else (lo, mid)
    return (lo * hi) ** 0.5


def _observations(report: BenchReport, gpu: GpuType, prec: Precision) -> tuple[list[Observation], list[str]]:
    obs, notes = [], []
    for g in report.gemms:
        if gemm_memory_s(gpu, g.m, g.n, g.k) >= GEMM_MEMORY_SHARE_MAX * g.ms / 1e3:
            notes.append(f"gemm {g.m}x{g.n}x{g.k}: memory-bound, not used")
            continue
        obs.append(Observation("gemm_efficiency", g.ms / 1e3,
                               lambda t, g=g: gemm_compute_s(t, prec, g.m, g.n, g.k)))
    if report.fp8_gemms and not gpu.supports(Precision.FP8):
        notes.append(f"fp8 GEMMs: {gpu.id} has no fp8 peak in the catalog; not fitted")
    for g in report.fp8_gemms if gpu.supports(Precision.FP8) else ():
        if gemm_memory_s(gpu, g.m, g.n, g.k, operand_bytes=1) >= GEMM_MEMORY_SHARE_MAX * g.ms / 1e3:
            notes.append(f"gemm fp8 {g.gemm_pass} {g.m}x{g.n}x{g.k}: memory-bound, not used")
            continue
        obs.append(Observation("fp8_gemm_efficiency", g.ms / 1e3,
                               lambda t, g=g: gemm_compute_s(t, Precision.FP8, g.m, g.n, g.k)))
    for a in report.attention:
        if a.kernel not in FITTED_ATTENTION:
            notes.append(f"attention {a.kernel} b{a.batch} s{a.seq}: reported, not fitted (the cost model prices "
                         "that path from its GEMMs and HBM traffic)")
            continue
        constant, family = FITTED_ATTENTION[a.kernel]

        def attention(t: GpuType, a=a, family=family) -> float:
            fwd, bwd, _ = flash_attention_s(t, prec, family, tokens_heads=a.batch * a.heads, q_len=a.seq,
                                            k_len=a.seq, head_dim=a.head_dim)
            return fwd + bwd
        obs.append(Observation(constant, a.fwd_bwd_ms / 1e3, attention))
    for c in report.copies:
        if c.bytes >= COPY_MIN_BYTES:
            obs.append(Observation("hbm_efficiency", c.ms / 1e3, lambda t, c=c: hbm_s(t, 2 * c.bytes)))
    for c in report.collectives:
        if c.op != "all_reduce" or c.bytes < COLLECTIVE_MIN_BYTES:
            continue
        if gpu.intra_node_kind == "pcie":
            notes.append(f"all_reduce {c.bytes >> 20} MiB over {c.ranks} GPUs: bus bandwidth "
                         f"{c.bus_gbytes_per_s:.1f} GB/s "
                         "measured; not fitted (PCIe bandwidth comes from the node's PCIe topology, docs/inputs.md)")
            continue
        obs.append(Observation(
            "collective_efficiency", c.ms / 1e3, inverse=False,
            model_s=lambda t, c=c: allreduce_s(c.bytes, c.ranks, switched_busbw(
                t.intra_node_gbytes_per_s, t.eff.collective_efficiency), latency_s=NVLINK_HOP_S)))
    return obs, notes


def _catalog_value(gpu: GpuType, constant: str) -> float:
    """The value the cost model uses today: the constant, or what stands in for it when the catalog leaves it out."""
    if constant == "fp8_gemm_efficiency":
        return gemm_efficiency(gpu, Precision.FP8)
    value = getattr(gpu.eff, constant)
    return gpu.eff.attention_efficiency if value is None else value


def _median_abs_error(obs: list[Observation], gpu: GpuType) -> float:
    return statistics.median(abs(o.model_s(gpu) / o.measured_s - 1.0) for o in obs)


def bench_constants(report: BenchReport, gpu: GpuType | None,
                    source: str = "<bench>") -> tuple[list[BenchConstant], list[str]]:
    """The constants the report measures for `gpu` (the catalog's GpuType of report.gpu; None for a CPU report), and
    notes on the measurements not used. InputError for a report that cannot calibrate a GPU."""
    if report.device.backend == "cpu" or report.gpu is None or gpu is None:
        raise InputError(f"{source}: the bench ran on the CPU (device {report.device.name!r}); constants are per GPU "
                         "type: run `hgplan bench` on the GPU (without --device cpu)")
    if report.precision == "fp32":
        raise InputError(f"{source}: the bench timed fp32 kernels; the cost model's GEMM and attention constants are "
                         "for tensor-core bf16/fp16: run `hgplan bench --precision bf16` (fp16 on Volta and Turing)")
    prec = Precision(report.precision)
    if not gpu.supports(prec):
        raise InputError(f"{source}: {gpu.id} has no {report.precision} tensor-core peak in the catalog; run the "
                         "bench with a precision it has")
    obs, notes = _observations(report, gpu, prec)
    out = []
    for constant in sorted({o.constant for o in obs}):
        mine = [o for o in obs if o.constant == constant]
        implied = [v for v in (_implied(o, gpu) for o in mine) if v is not None]
        if not implied:
            notes.append(f"{constant}: every measurement is latency-bound; not fitted")
            continue
        value = round(statistics.median(implied), 5)
        out.append(BenchConstant(
            gpu=gpu.id, constant=constant, value=value, measurements=len(implied),
            implied_min=round(min(implied), 5), implied_max=round(max(implied), 5),
            catalog_value=_catalog_value(gpu, constant),
            median_abs_error_before=round(_median_abs_error(mine, gpu), 6),
            median_abs_error_after=round(_median_abs_error(mine, _with(gpu, constant, value)), 6)))
    return out, notes
