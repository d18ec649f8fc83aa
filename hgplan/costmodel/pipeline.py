"""Iteration time of a pipeline whose stages differ in speed: closed form and discrete-event simulator.

Inputs per stage s (seconds, one micro-batch, all of the stage's chunks): fwd[s], bwd[s]. Per boundary k
(stage k -> k+1; index p-1 is the wrap from the last stage back to the first, used by interleaving):
xf[k], xb[k] = time the sender is busy pushing activations forward / gradients backward, lat[k] = latency.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from hgplan.costmodel.schedule import longest_interleaved_path, schedule_order


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
    """Share of the bottleneck stage's time without a forward or backward: idle, or busy sending."""


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


def segment_loops(fwd: list, bwd: list, xf: list, xb: list, lat: list, *,
                  microbatches: int) -> Iterator[tuple[int, int, object]]:
    """The loops of 1F1B's steady state (no interleaving), as (first stage s, micro-batches n, length): values may be
    numbers or CP-SAT linear expressions.

    In the steady state stage s runs F(j + p - s) right after B(j), and stage t runs B(i - (p - t - 1)) right after
    F(i). So for any s < t, from the end of B(j) on stage s: s sends the gradient up (xb[s-1]), runs F(j + p - s),
    which goes down to stage t (forwards and sends, with latencies), t runs it, sends it on (xf[t], unless t is the
    last stage) and runs B(j + t - s + 1), which climbs back to s: micro-batch j + n, n = t - s + 1, cannot end its
    backward on s sooner than this loop after micro-batch j did, so the cycle is at least loop / n. With t = p - 1
    this is the round trip to the last stage and back; a slow link inside the pipeline makes a short loop around
    it the bound (20 ms each way between two stages that hold two micro-batches). Only loops that fit in the
    iteration count (n < m)."""
    p, m = len(fwd), microbatches
    for s in range(p - 1):
        loop = (xb[s - 1] if s > 0 else 0) + fwd[s] + bwd[s]
        for t in range(s + 1, min(p, s + m - 1)):
            loop = loop + xf[t - 1] + xb[t - 1] + 2 * lat[t - 1] + fwd[t] + bwd[t]
            yield s, t - s + 1, loop + (xf[t] if t < p - 1 else 0)


def loops_cycle(cycle: int, stage: list[int], send: list[int], lat: list[int], *, microbatches: int) -> int:
    """max(cycle, ceil(loop / n) over segment_loops(stage, 0, send, send, lat)) in whole numbers (the search tables'
    microseconds; `send` and `lat` per boundary, a 0 after the last stage): the same loops without the generator and
    a division per loop, since a loop of n micro-batches raises the cycle only where it is longer than n x the cycle so
    far (whole numbers: ceil(loop / n) > c exactly when loop > n c). The tables' objectives call it for every placement
    they price (planner/tables.py, planner/mesh_tables.py)."""
    p, best = len(stage), cycle
    for s in range(p - 1):
        loop = (send[s - 1] if s > 0 else 0) + stage[s]
        for t in range(s + 1, min(p, s + microbatches - 1)):
            loop += 2 * send[t - 1] + 2 * lat[t - 1] + stage[t]
            if loop + send[t] > best * (t - s + 1):
                best = -(-(loop + send[t]) // (t - s + 1))
    return best


def closed_form(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
                *, microbatches: int, vpp: int = 1) -> PipelineResult:
    """T = (m - 1/v) * C + fill / v, C = max over stages of (F + B + sends), fill = sum(F + B) + boundary transfers.

    For uniform stages without communication this is Megatron's (m + (p - 1) / v) (F + B), i.e. bubble (p-1)/(v m).
    With slow links, 1F1B also cannot cycle faster than any of its loops (segment_loops): C includes them. With
    interleaving, T is also at least each of costmodel/schedule.py's two-stage (phase_paths) and three-stage
    (steady_paths) paths.
    """
    p, m, v = len(fwd), microbatches, vpp
    sends = _sends(p, v, xf, xb)
    cycles = [fwd[s] + bwd[s] + sends[s] for s in range(p)]
    transfers = [xf[k] + xb[k] + 2 * lat[k] for k in range(p - 1)]
    fill = sum(fwd) + sum(bwd) + sum(transfers)
    cycle = max(cycles)
    bottleneck = cycles.index(cycle)
    if v == 1:
        for s, n, loop in segment_loops(fwd, bwd, xf, xb, lat, microbatches=m):
            if loop / n > cycle:
                cycle, bottleneck = loop / n, s
    total = (m - 1.0 / v) * cycle + fill / v
    if v > 1:
        total = max(total, longest_interleaved_path(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v) / v)
    finish = []
    for s in range(p):
        slack = sum(bwd[k] / v + xb[k] + lat[k] for k in range(s))
        finish.append(total - slack)
    busy = m * (fwd[bottleneck] + bwd[bottleneck])
    return PipelineResult(iteration_s=total, finish_s=tuple(finish), cycle_s=cycle, bottleneck_stage=bottleneck,
                          bubble_fraction=max(0.0, 1.0 - busy / total) if total > 0 else 0.0)


def sends_per_microbatch(p: int, v: int, xf: list, xb: list) -> list:
    """Per stage, the sender-busy time of everything it sends for one micro-batch, as the simulator charges it: each
    chunk's activations forward and gradients back, except the last stage's last chunk (it feeds its own backward)
    and the first stage's first chunk (its backward ends the micro-batch)."""
    out = []
    for s in range(p):
        total = v * xf[s] if s < p - 1 else (v - 1) * xf[p - 1]
        total += v * xb[s - 1] if s > 0 else (v - 1) * xb[p - 1]
        out.append(total)
    return out


def path_terms(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int,
               vpp: int = 1) -> list[tuple[int, bool, object]]:
    """Lower bounds on the simulator, times v, as (stage s, whole, value): `whole` bounds when the pipeline ends
    (stage 0's last backward), the others when stage s's last op ends. Valid for any stage times, and linear in
    them: the values may be numbers or CP-SAT linear expressions (the planner's proof of its gap builds its
    objective from these very terms, planner/path_model.py).

    Why each holds: stage s cannot start before micro-batch 0's first chunk has come down the pipeline (head), then
    runs all its ops and sends one after another (busy), and its last backward (chunk 0) must still climb back to
    stage 0 (chain). Without interleaving, stage s runs micro-batch j + p - s only after micro-batch j's backward,
    which waits on a round trip to the last stage and back (R): q such round trips precede micro-batch q(p - s).
    """
    p, m, v = len(fwd), microbatches, vpp
    sends = sends_per_microbatch(p, v, xf, xb)
    out: list[tuple[int, bool, object]] = []
    for s in range(p):
        own = xb[s - 1] if s > 0 else 0
        head = sum(fwd[k] + v * (xf[k] + lat[k]) for k in range(s))
        chain = sum(bwd[k] + v * lat[k] for k in range(s)) + v * sum(xb[k] for k in range(s - 1))
        busy = v * m * (fwd[s] + bwd[s]) + v * m * sends[s]
        out.append((s, True, head + busy + chain))
        out.append((s, False, head + busy - v * own))
        if v == 1 and s < p - 1 and m > p - s:
            q = (m - 1) // (p - s)
            j = q * (p - s)
            trip = (sum(fwd[k] + bwd[k] for k in range(s, p)) + sum(xf[k] + xb[k] + 2 * lat[k] for k in range(s, p - 1))
                    + own)
            rest = (m - j) * (fwd[s] + xf[s]) + (m - j + p - s - 1) * (bwd[s] + own) - own
            out.append((s, True, head + q * trip + rest + chain))
    return out


def lower_bound_s(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float], *,
                  microbatches: int, vpp: int = 1, tails_s: list[float] | None = None) -> float:
    """A proven lower bound on simulate()'s iteration time (path_terms), with each stage's data-parallel tail after
    its last backward when `tails_s` is given (stage 0's after the whole pipeline)."""
    tails = tails_s or [0.0] * len(fwd)
    return max(value / vpp + tails[0 if whole else s]
               for s, whole, value in path_terms(fwd, bwd, xf, xb, lat, microbatches=microbatches, vpp=vpp))


@dataclass(frozen=True, slots=True)
class Op:
    """One forward or backward of one micro-batch chunk on one stage, as the simulator ran it."""

    stage: int
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int
    start_s: float
    end_s: float
    send_s: float = 0.0
    """How long the stage is then busy sending the result to its neighbour (0 when nothing is sent)."""


@functools.lru_cache(maxsize=64)
def _programs(p: int, m: int, v: int) -> tuple[tuple[tuple[bool, bool, int, int], ...], ...]:
    """Per stage, its ops compiled to (forward?, sends after it?, arrival it produces or -1, arrival it waits for or
    -1); arrivals are numbered ((kind x p + stage) x m + micro-batch) x v + chunk with kinds forward output,
    backward output and the last stage's forward feeding its own backward. Shared by every plan of this shape."""

    def key(kind: int, stage: int, mb: int, chunk: int) -> int:
        return ((kind * p + stage) * m + mb) * v + chunk

    def compile_op(s: int, kind: str, mb: int, chunk: int) -> tuple[bool, bool, int, int]:
        if kind == "F":
            wait = key(0, s - 1, mb, chunk) if s > 0 else (key(0, p - 1, mb, chunk - 1) if chunk > 0 else -1)
            if s == p - 1 and chunk == v - 1:  # the last forward feeds this stage's own backward
                return True, False, key(2, s, mb, chunk), wait
            return True, True, key(0, s, mb, chunk), wait  # boundary s -> s+1 or the wrap-around
        if s == p - 1 and chunk == v - 1:
            wait = key(2, s, mb, chunk)
        else:
            wait = key(1, s + 1, mb, chunk) if s < p - 1 else key(1, 0, mb, chunk + 1)
        if s == 0 and chunk == 0:  # the first stage's last backward sends nothing
            return False, False, -1, wait
        return False, True, key(1, s, mb, chunk), wait

    return tuple(tuple(compile_op(s, *op) for op in schedule_order(s, p, m, v)) for s in range(p))


class _Simulation:
    """State of one discrete-event run: each stage's position in its program and when it is free.

    A stage runs its ops in a fixed order and an op starts at max(stage free, input arrived), so the times do not
    depend on the order in which the simulation processes stages: it sweeps the stages, advancing each as far as
    its inputs have arrived, until every op has run (O(ops + sweeps x p))."""

    def __init__(self, fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float],
                 *, microbatches: int, vpp: int, keep_ops: bool, track: bool = False):
        p, v = len(fwd), vpp
        self.p, self.m, self.v, self.keep_ops = p, microbatches, vpp, keep_ops
        self.up = [s - 1 if s > 0 else p - 1 for s in range(p)]
        # with track: per stage and op, the op it waited for (the producer of its input, or the stage's previous op)
        self.pred: list[list[tuple[int, int] | None]] | None = [[] for _ in range(p)] if track else None
        self.producer: dict[int, tuple[int, int]] = {}
        self.programs = _programs(p, microbatches, vpp)
        # per stage: forward and backward duration per chunk, (busy, latency) after a forward and after a backward
        self.rates = [(fwd[s] / v, bwd[s] / v, xf[s], lat[s], xb[self.up[s]], lat[self.up[s]]) for s in range(p)]
        self.pos = [0] * p
        self.free = [0.0] * p
        self.finish = [0.0] * p
        self.arrived: list[float | None] = [None] * (3 * p * microbatches * vpp)
        self.ops: list[Op] = []
        self.orders = [schedule_order(s, p, microbatches, vpp) for s in range(p)] if keep_ops else []

    def advance(self, s: int) -> int:
        """Run stage s's ops while their inputs have arrived; how many ran."""
        program, arrived, i, free = self.programs[s], self.arrived, self.pos[s], self.free[s]
        f_dur, b_dur, f_busy, f_lat, b_busy, b_lat = self.rates[s]
        first, end = i, None
        while i < len(program):
            forward, sends, produced, wait = program[i]
            if wait >= 0:
                t = arrived[wait]
                if t is None:
                    break
                start = t if t > free else free
            else:
                t = start = free
            end = start + (f_dur if forward else b_dur)
            free = end + ((f_busy if forward else b_busy) if sends else 0.0)
            if produced >= 0:
                arrived[produced] = free + ((f_lat if forward else b_lat) if sends else 0.0)
            if self.pred is not None:  # what the op waited for: its input (when that set its start) or the stage
                self.pred[s].append(self.producer[wait] if wait >= 0 and start == t else ((s, i - 1) if i else None))
                if produced >= 0:
                    self.producer[produced] = (s, i)
            if self.keep_ops:
                kind, mb, chunk = self.orders[s][i]
                self.ops.append(Op(s, kind, mb, chunk, start, end, free - end))
            i += 1
        if end is not None:
            self.finish[s] = end  # ops of a stage end in order
        self.pos[s], self.free[s] = i, free
        return i - first

    def run(self) -> None:
        """Sweep the stages, down then up, until every op has run."""
        remaining = sum(len(o) for o in self.programs)
        down, up = list(range(self.p)), list(range(self.p - 1, -1, -1))
        while remaining:  # alternate directions: forwards flow down the pipeline in one sweep, gradients up
            ran = sum(self.advance(s) for s in down) + sum(self.advance(s) for s in up)
            if not ran:
                raise AssertionError("pipeline simulation deadlocked: schedule order is inconsistent")
            remaining -= ran


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


@dataclass(frozen=True, slots=True)
class PathCounts:
    """A chain of ops and transfers through the simulator's schedule, as counts: chunk forwards and backwards per
    stage, sends forward (xf) and back (xb) and latencies per boundary. The schedule, hence the chain, depends only on
    (p, m, v): for any stage times, the op that ends the chain ends no earlier than its weight (weight())."""

    stage: int
    """The stage whose last op ends the chain."""
    fwd: tuple[int, ...]
    bwd: tuple[int, ...]
    xf: tuple[int, ...]
    xb: tuple[int, ...]
    lat: tuple[int, ...]

    def weight(self, fwd: list, bwd: list, xf: list, xb: list, lat: list, *, vpp: int = 1):
        """v x the chain's length for these stage times (numbers or CP-SAT linear expressions, as path_terms)."""
        total = sum(c * x for c, x in zip(self.fwd, fwd) if c) + sum(c * x for c, x in zip(self.bwd, bwd) if c)
        for counts, times in ((self.xf, xf), (self.xb, xb), (self.lat, lat)):
            total += sum(vpp * c * x for c, x in zip(counts, times) if c)
        return total


def critical_paths(fwd: list[float], bwd: list[float], xf: list[float], xb: list[float], lat: list[float], *,
                   microbatches: int, vpp: int = 1) -> list[PathCounts]:
    """Per stage, the chain of ops that sets when its last op ends in simulate(): each op's start was set by its
    input's arrival (the producer's op, send and latency) or by the stage's previous op (and its send). The chain's
    weight equals that end here and bounds it from below for any other stage times (planner/certify.py adds these
    chains to the lower-bound model of the gap's proof)."""
    p, m, v = len(fwd), microbatches, vpp
    sim = _Simulation(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v, keep_ops=False, track=True)
    sim.run()
    out = []
    for last in range(p):
        counts = {name: [0] * p for name in ("fwd", "bwd", "xf", "xb", "lat")}
        node: tuple[int, int] | None = (last, len(sim.programs[last]) - 1)
        while node is not None:
            s, i = node
            forward = sim.programs[s][i][0]
            counts["fwd" if forward else "bwd"][s] += 1
            pred = sim.pred[s][i]
            if pred is not None:
                ps, pi = pred
                p_forward, p_sends = sim.programs[ps][pi][0], sim.programs[ps][pi][1]
                if p_sends:  # the predecessor's send keeps its stage busy, and its data lands a latency later
                    edge = ps if p_forward else sim.up[ps]
                    counts["xf" if p_forward else "xb"][edge] += 1
                    if ps != s:
                        counts["lat"][edge] += 1
            node = pred
        out.append(PathCounts(stage=last, **{k: tuple(c) for k, c in counts.items()}))
    return out
