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
    """Iteration time of the pipeline part, each stage's finish, the cycle, the bottleneck and the bubble."""

    iteration_s: float
    """From the first forward to the last backward."""
    finish_s: tuple[float, ...]
    """When each stage finishes its last backward."""
    cycle_s: float
    """Steady-state time per micro-batch (the bottleneck)."""
    bottleneck_stage: int
    bubble_fraction: float
    """Share of the bottleneck stage's time that is idle."""


def chunk_sends(p: int, v: int, xf: list[float], xb: list[float]) -> list[float]:
    """Per stage, what one virtual chunk sends per micro-batch: its activations forward and its gradients back
    (the wrap-around boundary counts when interleaved)."""
    out = []
    for s in range(p):
        f = xf[s] if (s < p - 1 or v > 1) else 0.0
        b = xb[s - 1] if s > 0 else (xb[p - 1] if v > 1 else 0.0)
        out.append(f + b)
    return out


def _sends(p: int, v: int, xf: list[float], xb: list[float]) -> list[float]:
    """Per stage, what it sends per micro-batch over all its chunks (its part of the cycle)."""
    return [v * x if v > 1 else x for x in chunk_sends(p, v, xf, xb)]


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
    """One forward or backward of one micro-batch chunk on one stage, as the simulator ran it."""

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
        """(micro-batch, chunk) of the k-th forward in interleaved order."""
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, chunk

    def bwd_id(k: int) -> tuple[int, int]:
        """(micro-batch, chunk) of the k-th backward (chunks in reverse)."""
        mb, chunk = fwd_id(k)
        return mb, v - 1 - chunk

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    seq = [("F", *fwd_id(k)) for k in range(warm)]
    for j in range(total - warm):
        seq.append(("F", *fwd_id(warm + j)))
        seq.append(("B", *bwd_id(j)))
    seq += [("B", *bwd_id(k)) for k in range(total - warm, total)]
    return seq


class _Simulation:
    """State of one discrete-event run: each stage's position in its schedule, when it is free, what has arrived."""

    def __init__(self, fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
                 *, microbatches: int, vpp: int, keep_ops: bool):
        self.fwd, self.bwd, self.xf, self.xb, self.lat = fwd, bwd, xf, xb, lat
        self.p, self.v, self.keep_ops = len(fwd), vpp, keep_ops
        self.orders = [schedule_order(s, self.p, microbatches, vpp) for s in range(self.p)]
        self.pos = [0] * self.p
        self.free = [0.0] * self.p
        self.finish = [0.0] * self.p
        self.done: dict[tuple[str, int, int, int], float] = {}  # (kind, stage, mb, chunk) -> arrival at the consumer
        self.ops: list[Op] = []

    def dependency(self, stage: int, kind: str, mb: int, chunk: int) -> tuple[str, int, int, int] | None:
        """The arrival an op waits for (None: the very first forward of a micro-batch)."""
        p, v = self.p, self.v
        if kind == "F":
            if stage > 0:
                return ("F", stage - 1, mb, chunk)
            return ("F", p - 1, mb, chunk - 1) if chunk > 0 else None
        if stage == p - 1 and chunk == v - 1:
            return ("Fself", stage, mb, chunk)
        if stage < p - 1:
            return ("B", stage + 1, mb, chunk)
        return ("B", 0, mb, chunk + 1)

    def ready_time(self, s: int) -> float | None:
        """When stage s's next op can start (None while its input has not been sent)."""
        kind, mb, chunk = self.orders[s][self.pos[s]]
        dep = self.dependency(s, kind, mb, chunk)
        if dep is None:
            return self.free[s]
        if dep not in self.done:
            return None
        return max(self.free[s], self.done[dep])

    def run_op(self, s: int, start: float) -> None:
        """Run stage s's next op from `start`: compute, then send the result on (the stage is busy sending)."""
        p, v = self.p, self.v
        kind, mb, chunk = self.orders[s][self.pos[s]]
        end = start + (self.fwd[s] if kind == "F" else self.bwd[s]) / v
        if kind == "F" and s == p - 1 and chunk == v - 1:  # the last forward feeds this stage's own backward
            self.done[("Fself", s, mb, chunk)] = end
            busy_until = end
        elif kind == "F":
            busy_until = end + self.xf[s]  # boundary s -> s+1 (or the wrap-around p-1 -> 0)
            self.done[("F", s, mb, chunk)] = busy_until + self.lat[s]
        elif s == 0 and chunk == 0:  # the first stage's last backward sends nothing
            busy_until = end
        else:
            k = s - 1 if s > 0 else p - 1
            busy_until = end + self.xb[k]
            self.done[("B", s, mb, chunk)] = busy_until + self.lat[k]
        if self.keep_ops:
            self.ops.append(Op(s, kind, mb, chunk, start, end))
        self.free[s] = busy_until
        self.finish[s] = max(self.finish[s], end)
        self.pos[s] += 1

    def run(self) -> None:
        """Pop the stage that can start earliest until every op has run."""
        heap: list[tuple[float, int]] = []
        queued: set[int] = set()

        def push_ready() -> None:
            """Queue every stage whose next op has its input."""
            for t in range(self.p):
                if t not in queued and self.pos[t] < len(self.orders[t]):
                    rt = self.ready_time(t)
                    if rt is not None:
                        heapq.heappush(heap, (rt, t))
                        queued.add(t)

        push_ready()
        remaining = sum(len(o) for o in self.orders)
        while remaining:
            if not heap:
                raise AssertionError("pipeline simulation deadlocked: schedule order is inconsistent")
            _, s = heapq.heappop(heap)
            queued.discard(s)
            start = self.ready_time(s)
            if start is None:
                continue
            self.run_op(s, start)
            remaining -= 1
            push_ready()


def simulate(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
             *, microbatches: int, vpp: int = 1, keep_ops: bool = False) -> tuple[PipelineResult, list[Op]]:
    """Discrete-event simulation of every forward, backward and transfer of one iteration.

    A stage runs its ops in schedule order; an op starts when the stage is free and its input has arrived.
    After each op the stage pushes the result to its neighbour and is busy for the send (synchronous p2p,
    as Megatron's non-overlapped schedule); the data lands one link latency later.
    """
    p, m, v = len(fwd), microbatches, vpp
    sim = _Simulation(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v, keep_ops=keep_ops)
    sim.run()
    total = max(sim.finish)
    sends = _sends(p, v, xf, xb)
    cycles = [fwd[s] + bwd[s] + sends[s] for s in range(p)]
    bottleneck = cycles.index(max(cycles))
    busy = m * (fwd[bottleneck] + bwd[bottleneck])
    return (PipelineResult(iteration_s=total, finish_s=tuple(sim.finish), cycle_s=max(cycles),
                           bottleneck_stage=bottleneck,
                           bubble_fraction=max(0.0, 1.0 - busy / total) if total > 0 else 0.0), sim.ops)
