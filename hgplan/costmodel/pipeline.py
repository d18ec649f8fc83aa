"""Iteration time of a pipeline whose stages differ in speed: closed form and discrete-event simulator.

Inputs per stage s (seconds, one micro-batch, all of the stage's chunks): fwd[s], bwd[s]. Per boundary k
(stage k -> k+1; index p-1 is the wrap from the last stage back to the first, used by interleaving):
xf[k], xb[k] = time the sender is busy pushing activations forward / gradients backward, lat[k] = latency.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    iteration_s: float
    """From the first forward to the last backward."""
    finish_s: tuple[float, ...]
    """When each stage finishes its last backward."""
    cycle_s: float
    """Steady-state time per micro-batch (the bottleneck)."""
    bottleneck_stage: int
    bubble_fraction: float
    """Share of the bottleneck stage's time that is idle."""


def _sends(p: int, v: int, xf: list[float], xb: list[float]) -> list[float]:
    out = []
    for s in range(p):
        f = xf[s] if (s < p - 1 or v > 1) else 0.0
        b = xb[s - 1] if s > 0 else (xb[p - 1] if v > 1 else 0.0)
        out.append(v * (f + b) if v > 1 else f + b)
    return out


def closed_form(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
                *, microbatches: int, vpp: int = 1) -> PipelineResult:
    """T = (m - 1/v) * C + fill / v, C = max over stages of (F + B + sends), fill = sum(F + B) + boundary transfers.

    For uniform stages without communication this is Megatron's (m + (p - 1) / v) (F + B), i.e. bubble (p-1)/(v m).
    With slow links, 1F1B also cannot cycle faster than a round trip from stage s to the end and back divided by
    the p - s micro-batches it may have in flight; C includes that bound.
    """
    p, m, v = len(fwd), microbatches, vpp
    sends = _sends(p, v, xf, xb)
    cycles = [fwd[s] + bwd[s] + sends[s] for s in range(p)]
    transfers = [xf[k] + xb[k] + 2 * lat[k] for k in range(p - 1)]
    fill = sum(fwd) + sum(bwd) + sum(transfers)
    cycle = max(cycles)
    bottleneck = cycles.index(cycle)
    if v == 1:
        for s in range(p - 1):
            round_trip = sum(fwd[s:]) + sum(bwd[s:]) + sum(transfers[s:])
            if round_trip / (p - s) > cycle and m > p - s:
                cycle, bottleneck = round_trip / (p - s), s
    total = (m - 1.0 / v) * cycle + fill / v
    finish = []
    for s in range(p):
        slack = sum(bwd[k] / v + xb[k] + lat[k] for k in range(s))
        finish.append(total - slack)
    busy = m * (fwd[bottleneck] + bwd[bottleneck])
    return PipelineResult(iteration_s=total, finish_s=tuple(finish), cycle_s=cycle, bottleneck_stage=bottleneck,
                          bubble_fraction=max(0.0, 1.0 - busy / total) if total > 0 else 0.0)


@dataclass(frozen=True, slots=True)
class Op:
    stage: int
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


def schedule_order(stage: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron's (interleaved) 1F1B order for one stage: (kind, micro-batch, chunk)."""
    if v == 1:
        warm = min(p - stage - 1, m)
        seq = [("F", i, 0) for i in range(warm)]
        for j in range(m - warm):
            seq.append(("F", warm + j, 0))
            seq.append(("B", j, 0))
        seq += [("B", i, 0) for i in range(m - warm, m)]
        return seq
    total = m * v

    def fwd_id(k: int) -> tuple[int, int]:
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, chunk

    def bwd_id(k: int) -> tuple[int, int]:
        mb, chunk = fwd_id(k)
        return mb, v - 1 - chunk

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    seq = [("F", *fwd_id(k)) for k in range(warm)]
    for j in range(total - warm):
        seq.append(("F", *fwd_id(warm + j)))
        seq.append(("B", *bwd_id(j)))
    seq += [("B", *bwd_id(k)) for k in range(total - warm, total)]
    return seq


def simulate(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
             *, microbatches: int, vpp: int = 1, keep_ops: bool = False) -> tuple[PipelineResult, list[Op]]:
    """Discrete-event simulation of every forward, backward and transfer of one iteration.

    A stage runs its ops in schedule order; an op starts when the stage is free and its input has arrived.
    After each op the stage pushes the result to its neighbour and is busy for the send (synchronous p2p,
    as Megatron's non-overlapped schedule); the data lands one link latency later.
    """
    p, m, v = len(fwd), microbatches, vpp
    orders = [schedule_order(s, p, m, v) for s in range(p)]
    pos = [0] * p
    free = [0.0] * p
    done: dict[tuple[str, int, int, int], float] = {}  # (kind, stage, mb, chunk) -> arrival time at the consumer
    ops: list[Op] = []
    finish = [0.0] * p

    def dependency(stage: int, kind: str, mb: int, chunk: int) -> tuple[str, int, int, int] | None:
        if kind == "F":
            if stage > 0:
                return ("F", stage - 1, mb, chunk)
            return ("F", p - 1, mb, chunk - 1) if chunk > 0 else None
        if stage == p - 1 and chunk == v - 1:
            return ("Fself", stage, mb, chunk)
        if stage < p - 1:
            return ("B", stage + 1, mb, chunk)
        return ("B", 0, mb, chunk + 1)

    heap: list[tuple[float, int]] = []

    def ready_time(s: int) -> float | None:
        kind, mb, chunk = orders[s][pos[s]]
        dep = dependency(s, kind, mb, chunk)
        if dep is None:
            return free[s]
        if dep not in done:
            return None
        return max(free[s], done[dep])

    def push(s: int) -> None:
        if pos[s] < len(orders[s]):
            t = ready_time(s)
            if t is not None:
                heapq.heappush(heap, (t, s))

    for s in range(p):
        push(s)
    remaining = sum(len(o) for o in orders)
    queued = set(s for _, s in heap)
    while remaining:
        if not heap:
            raise AssertionError("pipeline simulation deadlocked: schedule order is inconsistent")
        _, s = heapq.heappop(heap)
        queued.discard(s)
        start = ready_time(s)
        if start is None:
            continue
        kind, mb, chunk = orders[s][pos[s]]
        dur = (fwd[s] if kind == "F" else bwd[s]) / v
        end = start + dur
        if kind == "F":
            last_fwd = s == p - 1 and chunk == v - 1
            if last_fwd:
                done[("Fself", s, mb, chunk)] = end
                busy_until = end
            else:
                k = s  # boundary s -> s+1 (or wrap p-1 -> 0)
                busy_until = end + xf[k]
                done[("F", s, mb, chunk)] = busy_until + lat[k]
        else:
            first_bwd = s == 0 and chunk == 0
            if first_bwd:
                busy_until = end
            else:
                k = s - 1 if s > 0 else p - 1
                busy_until = end + xb[k]
                done[("B", s, mb, chunk)] = busy_until + lat[k]
        if keep_ops:
            ops.append(Op(s, kind, mb, chunk, start, end))
        free[s] = busy_until
        finish[s] = max(finish[s], end)
        pos[s] += 1
        remaining -= 1
        for t in range(p):
            if t not in queued and pos[t] < len(orders[t]):
                rt = ready_time(t)
                if rt is not None:
                    heapq.heappush(heap, (rt, t))
                    queued.add(t)
    total = max(finish)
    sends = _sends(p, v, xf, xb)
    cycles = [fwd[s] + bwd[s] + sends[s] for s in range(p)]
    bottleneck = cycles.index(max(cycles))
    busy = m * (fwd[bottleneck] + bwd[bottleneck])
    return (PipelineResult(iteration_s=total, finish_s=tuple(finish), cycle_s=max(cycles), bottleneck_stage=bottleneck,
                           bubble_fraction=max(0.0, 1.0 - busy / total) if total > 0 else 0.0), ops)
