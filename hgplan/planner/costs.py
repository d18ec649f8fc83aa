"""The one source of the planner's integer costs: each term computed once, rounded once, read by everyone.

The cost tables (what CP-SAT optimises), the lower bounds and the warm start all read their per-group and
per-link costs from a `CostSource`, so a bound and the tables it must hold for can never round differently.
Times are whole microseconds (demand rounded to nearest, as 0.1.0 did), memory whole MiB (demand rounded up).
The bounds work in seconds: they divide these integers by US and so see exactly the tables' values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hgplan.costmodel.evaluate import (dp_tail, edge_costs, layer_cost, mesh_boundary_s, p2p_message_bytes,
                                       p2p_seconds, pipeline_gather_s, tied_embedding_sync_s)
from hgplan.costmodel.memory import GIB, stage_memory
from hgplan.costmodel.compute import attention_kernel
from hgplan.domain import Attention, Fleet, ModelArch, NodeGroup, TrainingSettings, TransformerImpl
from hgplan.plan import ParallelConfig
from hgplan.planner.classes import node_kind

US = 1_000_000
"""Microseconds per second: the tables' time unit."""
MIB = 1024 ** 2
"""Bytes per MiB: the tables' memory unit."""

TAIL_CLASSES = ("first", "middle", "last", "only")
"""Stage classes whose data-parallel tail differs: the first and last stages also reduce the embedding's and the
LM head's gradients; a one-stage pipeline holds both."""


def tail_class(stage: int, pp: int) -> int:
    """Index into TAIL_CLASSES of pipeline stage `stage` of `pp`."""
    if pp == 1:
        return 3
    return 0 if stage == 0 else 2 if stage == pp - 1 else 1


def capacity_mib(g: NodeGroup) -> int:
    """A GPU's memory in whole MiB, rounded down (demand is rounded up, so a plan the tables accept fits)."""
    return math.floor(g.gpu.hbm_gib * GIB / MIB)


def layers_that_fit(a_mib: int, b_mib: int, cap_mib: int, num_layers: int) -> int:
    """Most layers a stage of memory a + b x layers (MiB) holds within cap_mib: every layer when b is 0 and a fits,
    negative when not even none fit."""
    room = cap_mib - a_mib
    return room // b_mib if b_mib > 0 else (num_layers if room >= 0 else -1)


def to_us(seconds: float) -> int:
    """Seconds to whole microseconds, the one rounding every time table uses."""
    return round(seconds * US)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCosts:
    """What one micro-batch costs a stage on one node group (integer microseconds, plus the raw seconds the tail
    fit needs)."""

    fwd_layer_s: float
    bwd_layer_s: float
    edges_s: tuple[float, float, float, float]
    """(embedding fwd, embedding bwd, head fwd, head bwd) seconds (costmodel/evaluate.edge_costs)."""
    layer_us: int
    """Forward + backward of one transformer layer (at least 1 us)."""
    first_us: int
    """Embedding forward + backward (first stage only)."""
    last_us: int
    """LM head and loss forward + backward (last stage only)."""
    fwd_layer_us: int
    """The forward part of layer_us (at most layer_us); the backward is the rest."""
    first_fwd_us: int
    """The forward part of first_us."""
    last_fwd_us: int
    """The forward part of last_us."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkCosts:
    """One pipeline boundary between two node groups, per micro-batch and direction (integer microseconds)."""

    send_us: int
    """Time the sender is busy."""
    lat_us: int
    """Latency the receiver waits on top."""
    tied_us: int
    """Tied-embedding gradient sync between a first stage on the one and a last stage on the other."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TailCosts:
    """Data-parallel sync + optimizer step after the flush, linear in a stage's layers, per TAIL_CLASSES entry:
    (intercept_us, slope_us_per_layer)."""

    by_class: tuple[tuple[int, int], ...]


def stage_tail_s(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings,
                 layers: int, *, fwd_per_layer_s: float, bwd_per_layer_s: float, edge_params: float = 0.0,
                 edge_fwd_s: float = 0.0, edge_bwd_s: float = 0.0) -> float:
    """The cost model's DP sync + optimizer after the flush of a stage on g holding `layers` layers (and the
    embedding or LM head of an edge stage: its parameters and work), as evaluate() charges it."""
    return sum(dp_tail(fleet, g, cfg, train, params=layers * (model.layer_params() / cfg.tp) + edge_params,
                       layers=layers, fwd_s=layers * fwd_per_layer_s + edge_fwd_s,
                       bwd_s=layers * bwd_per_layer_s + edge_bwd_s))


TAIL_LINE_GAIN_S = 1e-4
"""A hull edge joins the tail's floor lines only where it raises their maximum by more than this somewhere (most
tails are so close to straight that the chord alone is within it, and the proof's model stays as it was)."""


def floor_lines(at: list[float], *, hull: bool = False) -> tuple[tuple[int, int], ...]:
    """Lines (intercept_us, slope_us), each at or below at[n - 1] at every n = 1..len(at), both rounded down: the
    chord's (slope from the first point to the last, at least 0, the intercept lowered until no point is below it;
    the only line until 2026-11-29) and, with `hull` (a one-stage pipeline's tail, which holds all L layers), where it
    raises it, the edge of the points' lower convex hull at n = L. (The hull's edges at 1, L/8, L/4 and L/2 for every
    stage gave six lines on two-site's stages and made its proof 19% slower for the same bound, at L alone 8%.) A
    tail that dips after its first layers (an edge stage's embedding or LM head: a one-stage llama3.1-8b plan with CP
    16 on 64 H100s, 16.2 ms at one layer, 13.7 at eight, 32.6 at all 32) left the chord 6.4 ms under the tail at 32
    layers, a 1.2% gap the proof could not close; the hull's last edge meets it there."""
    L = len(at)
    if L == 1:
        return ((math.floor(at[0] * US), 0),)
    t = np.asarray(at, dtype=float)
    n = np.arange(1, L + 1, dtype=float)
    slope = max(0.0, (at[-1] - at[0]) / (L - 1))
    lines = [(float(np.min(t - slope * n)), slope)]
    if hull:
        low: list[int] = []  # indices (n - 1) of the points' lower convex hull, left to right
        for i in range(L):
            while len(low) > 1 and ((at[low[-1]] - at[low[-2]]) * (i - low[-2])
                                    >= (at[i] - at[low[-2]]) * (low[-1] - low[-2])):
                low.pop()
            low.append(i)
        edge = (at[low[-1]] - at[low[-2]]) / (low[-1] - low[-2])  # the hull's last edge, ending at n = L
        line = edge * n + float(np.min(t - edge * n))
        if float(np.max(line - (lines[0][0] + slope * n))) > TAIL_LINE_GAIN_S:  # one more constraint per stage
            lines.append((float(line[0] - edge), edge))
    return tuple(sorted({(math.floor(i * US), math.floor(e * US)) for i, e in lines}))


def tail_fit_points(num_layers: int, only_stage: bool) -> tuple[int, int]:
    """The two layer counts the tables' linear tail passes through: a one-stage pipeline holds every layer, so its
    line is exact there (L - 1, L); other stages hold from 1 to L - 1 layers, so theirs is the chord from 2 to L.
    Why not 1 and 2: one or two layers' tail is dominated by the edge stage's embedding or LM head and by the first
    bucket's exposed reduction; a line through them charged a 70B one-stage plan 42 ms where the cost model charges
    228 ms."""
    if num_layers < 3:
        return 1, 2
    return (num_layers - 1, num_layers) if only_stage else (2, num_layers)


def tail_coeffs(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings, *,
                fwd_per_layer_s: float, bwd_per_layer_s: float, edge_params: float = 0.0, edge_fwd_s: float = 0.0,
                edge_bwd_s: float = 0.0, only_stage: bool = False) -> tuple[float, float]:
    """DP sync + optimizer after the flush of a stage on g, linear in its layers: (intercept, slope) seconds.

    The line through the cost model's tail at the two layer counts of tail_fit_points (with the embedding or LM head
    of an edge stage: its parameters and work). Past a few layers the tail is close to linear: the exposed part of an
    overlapped reduction grows with the bytes once it exceeds the backward window, and the optimizer step is linear
    in parameters. This is the search objective's tail; the proof of the gap uses CostSource.tail_floor, a line
    proven at or below the tail at every layer count.
    """
    n1, n2 = tail_fit_points(model.num_layers, only_stage)
    t1, t2 = (stage_tail_s(fleet, g, model, cfg, train, n, fwd_per_layer_s=fwd_per_layer_s,
                           bwd_per_layer_s=bwd_per_layer_s, edge_params=edge_params, edge_fwd_s=edge_fwd_s,
                           edge_bwd_s=edge_bwd_s) for n in (n1, n2))
    slope = max(0.0, (t2 - t1) / (n2 - n1))
    return max(0.0, t1 - slope * n1), slope


def edge_tail_inputs(g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings,
                     num_microbatches: int) -> list[dict]:
    """Keyword arguments of tail_coeffs for each of TAIL_CLASSES: the edge stages' extra parameters and work."""
    ef, eb, hf, hb = edge_costs(g, model, cfg, train)
    per = model.layer_params() / cfg.tp
    out = []
    for cls, (fwd, bwd) in enumerate([(ef, eb), (0.0, 0.0), (hf, hb), (ef + hf, eb + hb)]):
        stage = {0: 0, 1: None, 2: cfg.pp - 1, 3: 0}[cls]
        if stage is None or (cls == 3) != (cfg.pp == 1):
            out.append({})
            continue
        mem = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length,
                           num_microbatches=num_microbatches, stage=stage, layers=1, flash=True)  # params only
        out.append({"edge_params": mem.params - per, "edge_fwd_s": fwd, "edge_bwd_s": bwd})
    return out


def _tail_key(kind: int, cfg: ParallelConfig) -> tuple:
    """The cache key of a stage's tail on a group of that kind (CostSource.kind): the same for every pipeline depth
    from 2 on (the edge stages' parameters and the reduction do not depend on it)."""
    return kind, (cfg if cfg.pp <= 2 else replace(cfg, pp=2))


class CostSource:
    """Memoised integer costs for one (fleet, model, training settings).

    Keys follow what each term depends on: layer and edge work on (tp, cp, micro-batch, recompute); a boundary on
    (tp, cp, dp, micro-batch, whether there is more than one stage: the tied-embedding sync); the tail on the whole configuration; stage memory on the configuration and the
    stage index only, never on the group (capacity is the group's, demand is not), so one row serves all groups.
    """

    def __init__(self, fleet: Fleet, model: ModelArch, train: TrainingSettings):
        self.fleet, self.model, self.train = fleet, model, train
        self._group: dict[tuple, GroupCosts] = {}
        self._link: dict[tuple, LinkCosts | None] = {}
        self._tail: dict[tuple, TailCosts] = {}
        self._memory: dict[tuple, tuple[tuple[int, int], ...]] = {}
        self._rows: dict[tuple, tuple[int, int]] = {}
        self._middle: dict[tuple, dict[int, tuple[int, int]]] = {}
        self._mesh_link: dict[tuple, int | None] = {}
        self._tail_floor: dict[tuple, tuple[tuple[int, int], ...]] = {}
        self._kinds: dict[tuple, int] = {}
        self._kind_of: dict[str, int] = {}

    def kind(self, g: NodeGroup) -> int:
        """A number per classes.node_kind: groups of one kind in several sites share their own costs."""
        if g.key not in self._kind_of:
            self._kind_of[g.key] = self._kinds.setdefault(node_kind(g), len(self._kinds))
        return self._kind_of[g.key]

    def group(self, g: NodeGroup, cfg: ParallelConfig) -> GroupCosts:
        """Layer and edge work of one micro-batch on g."""
        key = (self.kind(g), cfg.tp, cfg.cp, cfg.micro_batch_size, cfg.recompute)
        if key not in self._group:
            _, f_l, b_l = layer_cost(self.fleet, g, self.model, cfg, self.train)
            ef, eb, hf, hb = edge_costs(g, self.model, cfg, self.train)
            layer_us, first_us, last_us = max(1, to_us(f_l + b_l)), to_us(ef + eb), to_us(hf + hb)
            self._group[key] = GroupCosts(fwd_layer_s=f_l, bwd_layer_s=b_l, edges_s=(ef, eb, hf, hb),
                                          layer_us=layer_us, first_us=first_us, last_us=last_us,
                                          fwd_layer_us=min(layer_us, to_us(f_l)), first_fwd_us=min(first_us, to_us(ef)),
                                          last_fwd_us=min(last_us, to_us(hf)))
        return self._group[key]

    def link(self, a: NodeGroup, b: NodeGroup, cfg: ParallelConfig) -> LinkCosts | None:
        """A boundary from a stage on a to a stage on b (None when no path joins them)."""
        key = (a.key, b.key, cfg.tp, cfg.cp, cfg.dp, cfg.micro_batch_size, cfg.sequence_parallel,
               cfg.pp > 1)  # no tied sync at pp = 1
        if key not in self._link:
            msg = p2p_message_bytes(self.model, cfg, self.train)
            busy, latency, path = p2p_seconds(self.fleet, a, b, cfg, msg_bytes=msg, crossings=1)
            busy += pipeline_gather_s(b, self.model, cfg, self.train)
            self._link[key] = None if path is None else LinkCosts(
                send_us=to_us(busy), lat_us=to_us(latency),
                tied_us=to_us(tied_embedding_sync_s(self.fleet, a, b, self.model, cfg, self.train)))
        return self._link[key]

    def mesh_link_us(self, a: NodeGroup, b: NodeGroup, cfg: ParallelConfig) -> int | None:
        """Sender-busy time of a mesh boundary from a stage of degrees cfg on a to another group b, as both ends'
        term of the mesh tables (planner/mesh_tables.py; None when no path joins them). It depends on the rank's
        slice (tp, cp, dp, micro-batch), not on the pipeline's depth, so one value serves every candidate P."""
        key = (a.key, b.key, cfg.tp, cfg.cp, cfg.dp, cfg.micro_batch_size)
        if key not in self._mesh_link:
            busy, _, path = mesh_boundary_s(self.fleet, a, b, self.model, cfg, cfg, self.train, crossings=1)
            self._mesh_link[key] = None if path is None else to_us(busy)
        return self._mesh_link[key]

    def tail(self, g: NodeGroup, cfg: ParallelConfig) -> TailCosts:
        """The data-parallel tail of a stage on g, per stage class, for this configuration's pipeline shape (the
        same for every depth from 2 on: the edge stages' parameters and the reduction do not depend on it)."""
        key = _tail_key(self.kind(g), cfg)
        if key not in self._tail:
            gc = self.group(g, cfg)
            m = cfg.num_microbatches(self.train.global_batch_size)
            pairs = []
            for cls, edge in enumerate(edge_tail_inputs(g, self.model, cfg, self.train, m)):
                intercept, slope = tail_coeffs(self.fleet, g, self.model, cfg, self.train,
                                               fwd_per_layer_s=gc.fwd_layer_s, bwd_per_layer_s=gc.bwd_layer_s,
                                               only_stage=TAIL_CLASSES[cls] == "only", **edge)
                pairs.append((to_us(intercept), to_us(slope)))
            self._tail[key] = TailCosts(by_class=tuple(pairs))
        return self._tail[key]

    def tail_floor(self, g: NodeGroup, cfg: ParallelConfig) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per TAIL_CLASSES entry, lines (intercept_us, slope_us), each at or below the cost model's tail of a stage on
        g at every layer count from 1 to L, so their maximum is too (floor_lines). The tables' tail (tail()) is a line
        through the two layer counts of tail_fit_points, which the tail is not proven to stay above; the proof of the
        gap on the reported time needs these."""
        key = _tail_key(self.kind(g), cfg)
        if key not in self._tail_floor:
            gc = self.group(g, cfg)
            m = cfg.num_microbatches(self.train.global_batch_size)
            self._tail_floor[key] = tuple(
                floor_lines([stage_tail_s(self.fleet, g, self.model, cfg, self.train, n, fwd_per_layer_s=gc.fwd_layer_s,
                                          bwd_per_layer_s=gc.bwd_layer_s, **edge)
                             for n in range(1, self.model.num_layers + 1)], hull=TAIL_CLASSES[c] == "only")
                for c, edge in enumerate(edge_tail_inputs(g, self.model, cfg, self.train, m)))
        return self._tail_floor[key]

    def memory(self, cfg: ParallelConfig, g: NodeGroup) -> tuple[tuple[int, int], ...]:
        """Per stage s: (a, b) with stage memory on g <= a + b x layers MiB (rounded up, plus 1 MiB of slack).
        Demand depends on the group only through its attention kernel, so one row serves every group that runs
        the same kernel."""
        flash = attention_kernel(self.train, g.gpu) is not Attention.UNFUSED
        key = (cfg, flash)
        if key not in self._memory:
            m = cfg.num_microbatches(self.train.global_batch_size)
            shape = replace(cfg, pp=1)
            if cfg.vpp > 1 or cfg.pp < 3:
                self._memory[key] = tuple(self._memory_row(cfg, shape, s, m, flash) for s in range(cfg.pp))
            else:  # the middle stages' rows by their in-flight micro-batches, looked up without hashing the shape
                middle = self._middle.setdefault((shape, flash), {})
                rows = [self._memory_row(cfg, shape, 0, m, flash)]
                for s in range(1, cfg.pp - 1):
                    k = min(cfg.pp - s, m)
                    if k not in middle:
                        middle[k] = self._memory_row(cfg, shape, s, m, flash)
                    rows.append(middle[k])
                self._memory[key] = (*rows, self._memory_row(cfg, shape, cfg.pp - 1, m, flash))
        return self._memory[key]

    def _memory_row(self, cfg: ParallelConfig, shape: ParallelConfig, s: int, m: int, flash: bool) -> tuple[int, int]:
        """(a, b) of stage s. Without interleaving a stage's demand depends on the pipeline only through whether it
        is first or last, whether there is more than one stage, and its in-flight micro-batches (costmodel/memory.py),
        so rows are shared across pipeline depths (the mesh search asks for many)."""
        train = self.train
        key = ((shape, flash, s == 0, s == cfg.pp - 1, cfg.pp > 1, min(cfg.pp - s, m))
               if cfg.vpp == 1 else (cfg, flash, s))
        if key not in self._rows:
            one, two = (stage_memory(self.model, cfg, precision=train.precision, seq_length=train.seq_length,
                                     num_microbatches=m, stage=s, layers=n * cfg.vpp, flash=flash,
                                     local=train.transformer_impl is TransformerImpl.LOCAL,
                                     mx_scales=train.mxfp8).total_gib * GIB / MIB
                        for n in (1, 2))
            slope = (two - one) / cfg.vpp
            self._rows[key] = (math.ceil(one - slope * cfg.vpp) + 1, math.ceil(slope))
        return self._rows[key]

