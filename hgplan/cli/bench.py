"""bench: time the kernels and collectives the cost model prices on this machine (an optional extra: PyTorch)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, err, file_to_stdout, handles_errors, out, warn, wrote
from hgplan.errors import InputError


class BenchDeviceKind(StrEnum):
    cuda = "cuda"
    cpu = "cpu"


class BenchPrecision(StrEnum):
    auto = "auto"
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


def _catalog_gpu(name: str, gpu: str | None):
    """The catalog GpuType the device is: --gpu, or the one its name matches (exit 2 when none or several do)."""
    from hgplan.bench import match_gpu
    from hgplan.io import catalog

    cat = catalog()
    if gpu is None:
        found = match_gpu(name, sorted(cat.gpus))
        if len(found) != 1:
            raise InputError(f"hgplan bench: the device {name!r} matches {len(found)} catalog GPUs "
                             f"({', '.join(found) or 'none'}); give --gpu ID (`hgplan profiles list gpus`)")
        gpu = found[0]
    if gpu not in cat.gpus:
        raise InputError(f"--gpu {gpu}: not in the catalog; `hgplan profiles list gpus` lists the ids")
    return cat.gpu_type(cat.gpus[gpu])


def _device_record(dev, ranks: int):
    from hgplan.documents import BenchDevice

    torch = dev.torch
    if not dev.cuda:
        return BenchDevice(name="cpu", backend="cpu", count=ranks, torch_version=torch.__version__)
    props = torch.cuda.get_device_properties(dev.device)
    rocm = getattr(torch.version, "hip", None)
    return BenchDevice(name=props.name, backend="rocm" if rocm else "cuda", count=ranks,
                       torch_version=torch.__version__, runtime_version=rocm or torch.version.cuda,
                       sm_count=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 3))


def _fp8_skip(dev, gpu_type) -> str | None:
    """Why the bench does not time fp8 GEMMs here (None: it does)."""
    from hgplan.bench.kernels import fp8_missing
    from hgplan.domain import Precision

    if gpu_type is not None and not gpu_type.supports(Precision.FP8):
        return f"fp8 GEMMs: {gpu_type.id} has no fp8 tensor-core peak in the catalog"
    missing = fp8_missing(dev.torch)
    return f"fp8 GEMMs: {missing}" if missing else None


def _measure(dev, *, mode: str, kernels: list[str], ranks: int, fp8_skip: str | None) -> dict:
    from hgplan.bench import collectives, kernels as k

    warn(f"timing {len(k.GEMM_SHAPES[mode])} GEMM shapes", "bench")
    parts: dict = {"gemms": k.time_gemms(dev, k.GEMM_SHAPES[mode])}
    skipped = [fp8_skip] if fp8_skip else []
    if not fp8_skip:
        warn(f"timing {len(k.GEMM_SHAPES[mode])} GEMM shapes in fp8 (fprop, dgrad, wgrad)", "bench")
        parts["fp8_gemms"], not_timed = k.time_fp8_gemms(dev, k.GEMM_SHAPES[mode])
        skipped += not_timed
    warn(f"timing attention ({', '.join(kernels)})", "bench")
    parts["attention"], not_timed = k.time_attention(dev, k.ATTENTION_SHAPES[mode], kernels)
    skipped += not_timed
    warn("timing copies", "bench")
    parts["copies"] = k.time_copies(dev, k.COPY_BYTES[mode])
    if ranks >= 2:
        warn(f"timing all-reduce and send/recv over {ranks} ranks", "bench")
        parts["collectives"] = collectives.time_collectives(ranks=ranks, cuda=dev.cuda, repeats=dev.repeats,
                                                            sizes=collectives.COLLECTIVE_BYTES[mode])
    else:
        skipped.append("collectives: one device (give --ranks N with N >= 2 devices on this node)")
    return {**parts, "skipped": skipped}


@app.command()
@handles_errors
def bench(
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the report (JSON) here, for "
                                                                    "`hgplan calibrate --bench` ('-': standard "
                                                                    "output).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Catalog GPU id of this machine's GPU (default: matched "
                                                          "from the device's name).")] = None,
    device: Annotated[BenchDeviceKind, typer.Option("--device", help="cuda (also ROCm builds of torch), or cpu to "
                                                                     "check the harness only.")] = BenchDeviceKind.cuda,
    precision: Annotated[BenchPrecision, typer.Option(
        "--precision", help="auto: bf16 where the GPU has it, else fp16; fp32 on the CPU.")] = BenchPrecision.auto,
    ranks: Annotated[int | None, typer.Option(
        "--ranks", min=1, help="Devices of this node the collectives run over (default: all it has; 1 on the "
                               "CPU).")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=1000, help="Timed samples per kernel (medians "
                                                                            "are reported).")] = 10,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer shapes and sizes: 4 GEMMs, one attention shape, two "
                                                        "message sizes.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Time GEMMs, attention kernels, copies and NCCL collectives on this machine; `calibrate --bench` turns the
    report into cost-model constants. Needs PyTorch; planning never does."""
    from hgplan import __version__
    from hgplan.bench.kernels import open_device
    from hgplan.documents import BenchReport
    from hgplan.domain import Precision
    from hgplan.io import check_writable_file, write_file_atomic

    if output is not None:
        check_writable_file(output)
    to_stdout = file_to_stdout(output, as_json=as_json)
    cuda = device is BenchDeviceKind.cuda
    if gpu is not None and not cuda:
        raise InputError("--gpu names the GPU a bench on --device cuda measures; drop it with --device cpu")
    dev = open_device(device.value, "fp32", repeats)
    gpu_type = _catalog_gpu(dev.torch.cuda.get_device_name(dev.device), gpu) if cuda else None
    prec = precision.value
    if prec == "auto":
        prec = "fp32" if gpu_type is None else ("bf16" if gpu_type.eff.bf16 else "fp16")
    if gpu_type is not None and (prec == "fp32" or not gpu_type.supports(Precision(prec))):
        raise InputError(f"--precision {prec}: {gpu_type.id} has no {prec} tensor-core peak in the catalog, so its "
                         "timings could not calibrate it; leave --precision auto")
    dev = dev.with_precision(prec)
    available = dev.torch.cuda.device_count() if cuda else 1
    n = ranks if ranks is not None else available
    if cuda and n > available:
        raise InputError(f"--ranks {n}: torch sees {available} GPUs on this node")
    mode = "cpu" if not cuda else ("quick" if quick else "full")
    kernels = ["cpu"] if not cuda else ["flash2", "fused", "efficient"]
    parts = _measure(dev, mode=mode, kernels=kernels, ranks=n, fp8_skip=_fp8_skip(dev, gpu_type))
    report = BenchReport(hgplan_version=__version__, gpu=gpu_type.id if gpu_type else None,
                         device=_device_record(dev, n), precision=prec, repeats=repeats, **parts)
    doc = report.to_json_dict()
    if output is not None:
        write_file_atomic(output, json.dumps(doc, indent=2) + "\n")
        wrote(output, "bench report")
    for line in report.skipped:
        warn(line, "skipped")
    if as_json:
        emit_json(doc)
        return
    _print_report(report, err if to_stdout else out)


def _print_report(report, console) -> None:
    from rich.table import Table

    from hgplan.costmodel.compute import FLASH_BWD_RATIO, causal_attention_flops

    console.print(f"{report.device.name} ({report.gpu or 'no catalog GPU'}), {report.precision}, "
                  f"medians of {report.repeats}")
    t = Table("kernel", "shape", "ms", "rate")
    for g in report.gemms:
        t.add_row("gemm", f"{g.m}x{g.n}x{g.k}", f"{g.ms:.4f}", f"{2 * g.m * g.n * g.k / g.ms / 1e9:.1f} TFLOP/s")
    for g in report.fp8_gemms:
        t.add_row(f"gemm fp8 {g.gemm_pass}", f"{g.m}x{g.n}x{g.k}", f"{g.ms:.4f}",
                  f"{2 * g.m * g.n * g.k / g.ms / 1e9:.1f} TFLOP/s")
    for a in report.attention:
        flops = (1 + FLASH_BWD_RATIO) * causal_attention_flops(a.batch * a.heads, a.seq, a.seq, a.head_dim)
        t.add_row(f"attention {a.kernel}", f"b{a.batch} h{a.heads} s{a.seq} d{a.head_dim}", f"{a.fwd_bwd_ms:.4f}",
                  f"{flops / a.fwd_bwd_ms / 1e9:.1f} TFLOP/s (causal, fwd+bwd)")
    for c in report.copies:
        t.add_row("copy", f"{c.bytes >> 20} MiB", f"{c.ms:.4f}", f"{2 * c.bytes / c.ms / 1e6:.1f} GB/s (r+w)")
    for c in report.collectives:
        t.add_row(c.op, f"{c.bytes >> 20} MiB x {c.ranks}", f"{c.ms:.4f}",
                  f"{c.bus_gbytes_per_s:.1f} GB/s ({'bus' if c.op == 'all_reduce' else 'link'})")
    console.print(t)
