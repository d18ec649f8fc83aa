"""fp8 against bf16 GEMMs on one NVIDIA GPU, alone and between HBM-bound copies, with the SM clock of each phase.

Needs a CUDA GPU with fp8 tensor cores (Hopper or later), PyTorch >= 2.4 and nvidia-ml-py (pynvml). Prints one row
per (pattern, precision, pass): median GEMM milliseconds, TFLOP/s, and the median SM clock (NVML, sampled every
20 ms) while that phase ran.

- `alone`: the GEMM back to back, as `hgplan bench` times it. On a 700 W H100 SXM this holds the card at its power
  cap (about 1300 MHz); a precision that draws more power per clock gets a lower clock there.
- `stepmix`: each GEMM followed by a copy of COPY_MIB through HBM (a training step's norms, casts and adds between
  its GEMMs), which lets the clock rise as it does in a training step (h100-measured: 1515-1965 MHz). Only the GEMM
  is timed (CUDA events around it).

The fp8 GEMMs are Transformer Engine's, as `hgplan bench` times them (hgplan/bench/kernels.py FP8_PASSES): fprop
E4M3 x E4M3 with fast accumulation; dgrad and wgrad E5M2 x E4M3 with split accumulation; per-tensor scales; bf16
output.
Ends with the summary per pattern: the bf16 GEMMs' summed time over the fp8 GEMMs' (every shape and pass) and each
pass's median speedup. `--summary FILE...` prints the summaries of saved outputs and their medians instead.
Usage: python benchmarks/fp8_gemm_clock.py [--seconds 3] | [--summary out1.txt out2.txt ...]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from hgplan.bench.kernels import FP8_PASSES, fp8_pass_shapes

COPY_MIB = 512
SHAPES = [(8192, 8192, 8192), (8192, 28672, 4096), (8192, 4096, 14336), (4096, 57344, 8192)]
"""Square, and Llama-3.1-8B/-70B MLP GEMMs (fc1 of 8B at 8192 tokens, fc2 of 8B, fc1 of 70B at 4096 tokens)."""


class ClockLog:
    """SM clock samples (MHz) from NVML in a background thread, read per phase by time window."""

    def __init__(self) -> None:
        import pynvml
        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[tuple[float, int]] = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            clock = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
            self.samples.append((time.perf_counter(), clock))
            time.sleep(0.02)

    def median_between(self, t0: float, t1: float) -> float:
        inside = [c for t, c in self.samples if t0 <= t <= t1]
        return statistics.median(inside) if inside else float("nan")


def gemm_fn(torch, precision: str, gemm_pass: str, m: int, n: int, k: int):
    """A callable running one (m x k) @ (k x n) GEMM in bf16 or as Transformer Engine's fp8 pass."""
    dev = torch.device("cuda")
    if precision == "bf16":
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b)
    first, fast = FP8_PASSES[gemm_pass]
    a = torch.randn(m, k, device=dev).to(getattr(torch, first))
    b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev, dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)


def phase(torch, fn, *, stepmix: bool, seconds: float, clocks: ClockLog) -> tuple[float, float]:
    """(median GEMM ms, median SM clock MHz) over `seconds` of the pattern."""
    src = torch.empty(COPY_MIB << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        events = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
            if stepmix:
                dst.copy_(src)
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) for s, e in events]
    return statistics.median(times), clocks.median_between(t0 + 0.3, time.perf_counter())


def summary(lines: list[str]) -> dict[str, tuple[float, dict[str, float]]]:
    """Per pattern: (summed bf16 ms / summed fp8 ms, the median speedup of each pass) of the rows in `lines`."""
    rows = [line.split() for line in lines if line.startswith(("alone ", "stepmix "))]
    out = {}
    for pattern in ("alone", "stepmix"):
        mine = [r for r in rows if r[0] == pattern]
        if mine:
            total = sum(float(r[3]) for r in mine) / sum(float(r[5]) for r in mine)
            out[pattern] = (total, {p: statistics.median(float(r[7]) for r in mine if r[2] == p)
                                    for p in ("fprop", "dgrad", "wgrad")})
    return out


def print_summary(name: str, found: dict[str, tuple[float, dict[str, float]]]) -> None:
    for pattern, (total, passes) in found.items():
        each = ", ".join(f"{p} {x:.3f}x" for p, x in passes.items())
        print(f"{name}: {pattern:8} fp8 over bf16 {total:.4f}x ({each})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each phase")
    ap.add_argument("--summary", nargs="+", metavar="FILE", help="summarise saved outputs of this script")
    args = ap.parse_args()
    if args.summary:
        found = {f: summary(open(f).read().splitlines()) for f in args.summary}
        for f, one in found.items():
            print_summary(f, one)
        for pattern in ("alone", "stepmix"):
            totals = [one[pattern][0] for one in found.values() if pattern in one]
            if totals:
                print(f"median of {len(totals)}: {pattern:8} fp8 over bf16 {statistics.median(totals):.4f}x")
        return
    import torch
    clocks = ClockLog()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    printed: list[str] = []
    print(f"{'pattern':8} {'shape':18} {'pass':6} {'bf16 ms':>8} {'MHz':>5} {'fp8 ms':>8} {'MHz':>5} "
          f"{'speedup':>7} {'per clock':>9}")
    for stepmix in (False, True):
        for m, n, k in SHAPES:
            for gemm_pass, shape in fp8_pass_shapes(m, n, k):
                bf_ms, bf_mhz = phase(torch, gemm_fn(torch, "bf16", gemm_pass, *shape), stepmix=stepmix,
                                      seconds=args.seconds, clocks=clocks)
                f8_ms, f8_mhz = phase(torch, gemm_fn(torch, "fp8", gemm_pass, *shape), stepmix=stepmix,
                                      seconds=args.seconds, clocks=clocks)
                speedup = bf_ms / f8_ms
                printed.append(f"{'stepmix' if stepmix else 'alone':8} {'x'.join(map(str, shape)):18} {gemm_pass:6} "
                               f"{bf_ms:8.4f} {bf_mhz:5.0f} {f8_ms:8.4f} {f8_mhz:5.0f} {speedup:7.3f} "
                               f"{speedup * bf_mhz / f8_mhz:9.3f}")
                print(printed[-1], flush=True)
                torch.cuda.empty_cache()
    clocks.stop = True
    print_summary("summary", summary(printed))


if __name__ == "__main__":
    main()
