"""Lower bounds on the tables' objective: per outer candidate, per set of node groups, and per block structure.

Every bound here holds for the integer cost tables (planner/tables.py) because it reads the same integers from
the same CostSource (in seconds: integer microseconds / US). The search prunes with them and certifies its gap
with them, so a bound above the tables' optimum would be a bug: tests/test_planner.py checks them against the
exhaustive optimum.

Legend (the names follow the pipeline literature and docs/planner.md):
    L    transformer layers of the model        p    pipeline stages (pp)
    v    virtual stages per rank (vpp)          m    micro-batches per iteration
    r    node groups in the set S               tau  seconds of one layer (fwd + bwd, one micro-batch) on a group
    C    the pipeline's cycle: the slowest stage's time per micro-batch (layers plus the sends it makes)
    W    the work of all layers, sum_s layers_s tau_s (the fill)
    c1, c2  the two cheapest sends from a group's block to distinct partner groups
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple


from hgplan.domain import NodeGroup
from hgplan.plan import ParallelConfig
from hgplan.planner.classes import canonical_subsets, interchangeable_classes
from hgplan.planner.costs import TAIL_CLASSES, US, CostSource
from hgplan.planner.site_spans import Span, site_spans, span_slots, span_terms

BLOCK_GRID = 24
"""Intervals over which block_bound_us minimises (v m - 1) C + W(C); each costs at most 1/BLOCK_GRID of W's range."""
FLOOR_EPS = 1e-9
"""Slack on floor((C - extra) / (v tau)) so a cycle exactly on a breakpoint counts the layer it completes."""

Slots = list[tuple[float, int, float]]
"""Stage slots grouped as (seconds per layer, count, extra seconds taken from the cycle), fastest first."""


class TailBound(NamedTuple):
    """Data-parallel tail (seconds, intercept + slope x layers) of a stage on one group, for the bounds."""

    intercept: float
    """Least intercept of any stage class (first, middle, last, only), for any number of stages."""
    slope: float
    first: tuple[float, float]
    """(intercept, slope) of the first stage of a pipeline of two or more stages."""
    last: tuple[float, float]

    def least(self, layers: int) -> float:
        """The least tail of a stage with `layers` layers, whatever its place in the pipeline."""
        return self.intercept + self.slope * layers


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupBound:
    """What the bounds know of one node group for one candidate (seconds, from the tables' integers)."""

    layer_s: float
    """tau: one layer's forward + backward for one micro-batch."""
    first_s: float
    """Embedding work of a first stage on this group."""
    last_s: float
    """LM-head work of a last stage on this group."""
    slots: int
    """Most stages the group hosts."""
    tail: TailBound
    self_send_s: float
    """Send between two stages of this group."""
    self_fill_s: float
    """What a boundary between two stages of this group adds to the fill: two sends and two latencies."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundContext:
    """What the lower bounds need for one (tp, cp, dp, mbs, recompute, vpp): per-group costs and the crossings."""

    groups: dict[str, GroupBound]
    """Node-group key -> its costs, for every group that can host a stage."""
    pair_send: dict[tuple[str, str], float]
    """Sender-busy seconds between two different, linked groups (key ordered a < b)."""
    pair_lat: dict[tuple[str, str], float]
    classes: tuple[tuple[str, ...], ...]
    """Interchangeable groups (planner/classes.py), each class sorted; a group unlike every other is a class alone."""
    per_class: tuple[tuple[GroupBound, int], ...]
    """Each class's costs and its number of groups (what candidate_bound_s reads: one pass per class, not group)."""
    spans: tuple[Span, ...]
    """Where a pipeline over two or more groups may lie: inside each site (its groups' slots and crossings), or over
    two or more sites (every slot; a WAN crossing at least). candidate_bound_s takes the least over them."""
    floors: dict[tuple, tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)
    """The block bound's first pass per (set, depth, interleaving, layers, v m): its value and a cycle it rules out
    (block_bound._BlockBound.floor), memoised for the pass with ends."""

    def subsets(self, stages: int | None = None, box: tuple | None = None) -> list[tuple[str, ...]]:
        """The sets of groups a placement (of `stages` stages, when given) may use, one per class of interchangeable
        sets; `box`: (least, most) groups per class (subset_split.Box)."""
        return list(canonical_subsets(self.classes, slots=[self.groups[c[0]].slots for c in self.classes],
                                      stages=stages, box=box))

    def members(self, subset: tuple[str, ...]) -> list[list[str]]:
        """The groups of `subset` class by class (classes with none left out), in the classes' order."""
        inside = set(subset)
        return [members for c in self.classes if (members := [k for k in c if k in inside])]


def make_context(costs: CostSource, cfg: ParallelConfig, hosts: list[NodeGroup], *,
                 like: BoundContext | None = None) -> BoundContext:
    """The bound context of one candidate (cfg with its vpp; its pp does not matter) over the eligible hosts.

    Interchangeable groups have the same costs and the same paths, so each class's costs and each pair of classes'
    path are computed once, on the classes' first members. `like`: the context of the same configuration with
    another vpp, whose classes, crossings and spans it shares (only the tail depends on the interleaving)."""
    by_key = {g.key: g for g in hosts}
    if like is not None:
        return _with_tails(costs, cfg, like, by_key)
    classes = interchangeable_classes(costs.fleet, hosts)
    class_of = {k: c for c in classes for k in c}
    between: dict[tuple[str, str], tuple[float, float] | None] = {}
    pair_send, pair_lat = {}, {}
    for a, b in itertools.combinations(sorted(by_key), 2):
        ra, rb = class_of[a][0], class_of[b][0]
        if ra == rb:  # two members of one class: the path between the class's first two members
            ra, rb = class_of[a][:2]
        if (ra, rb) not in between:
            link = costs.link(by_key[ra], by_key[rb], cfg)
            between[(ra, rb)] = None if link is None else (link.send_us / US, link.lat_us / US)
        sent = between[(ra, rb)]
        if sent is not None:
            pair_send[(a, b)], pair_lat[(a, b)] = sent
    bounds: dict[str, GroupBound] = {}
    for c in classes:
        g = by_key[c[0]]
        gc, inner = costs.group(g, cfg), costs.link(g, g, cfg)
        bounds[c[0]] = GroupBound(layer_s=gc.layer_us / US, first_s=gc.first_us / US, last_s=gc.last_us / US,
                                  slots=g.num_gpus // cfg.gpus_per_stage, tail=tail_bound(costs, g, cfg),
                                  self_send_s=inner.send_us / US, self_fill_s=2 * (inner.send_us + inner.lat_us) / US)
    groups = {g.key: bounds[class_of[g.key][0]] for g in hosts}
    return BoundContext(groups=groups, pair_send=pair_send, pair_lat=pair_lat, classes=classes,
                        per_class=tuple((bounds[c[0]], len(c)) for c in classes),
                        spans=site_spans(classes, bounds, pair_send, pair_lat))


def _with_tails(costs: CostSource, cfg: ParallelConfig, like: BoundContext, by_key: dict) -> BoundContext:
    """`like` with each class's tail for cfg's interleaving (site_spans reads no tail, so the spans carry over)."""
    bounds = {c[0]: replace(like.groups[c[0]], tail=tail_bound(costs, by_key[c[0]], cfg)) for c in like.classes}
    rep = {k: c[0] for c in like.classes for k in c}
    return replace(like, groups={k: bounds[rep[k]] for k in like.groups},
                   per_class=tuple((bounds[c[0]], len(c)) for c in like.classes), floors={})


def tail_bound(costs: CostSource, g: NodeGroup, cfg: ParallelConfig) -> TailBound:
    """The tail no stage on g undercuts, whatever its place in the pipeline: its classes for pp = 1 and 2 (only 2
    with interleaving), whose per-layer slope and intercept the tails of longer pipelines do not undercut."""
    by_shape = {pp: [(a / US, b / US) for a, b in costs.tail(g, replace(cfg, pp=pp)).by_class]
                for pp in ((1, 2) if cfg.vpp == 1 else (2,))}
    pairs = [pair for shape in by_shape.values() for pair in shape]
    return TailBound(intercept=min(a for a, _ in pairs), slope=min(b for _, b in pairs),
                     first=by_shape[2][TAIL_CLASSES.index("first")], last=by_shape[2][TAIL_CLASSES.index("last")])


def candidate_bound_s(ctx: BoundContext, *, L: int, p: int, v: int, m: int) -> float:
    """Lower bound (seconds) on the predicted iteration time of any placement with p stages.

    min over (a) all stages inside one group, (b) stages over several groups of one site, or of several sites
    (ctx.spans), which pay at least one crossing (one that joins two sites, for the latter): in the fill, and in the
    cycle of a stage that also holds at least v layers. Every stage holds at least v layers.
    Each adds the compute-only bounds, the edge layers and the smallest DP/optimizer tail of the fullest stage.
    """
    vm, tail, best = v * m, min(gb.tail.least(math.ceil(L / p)) for gb, _ in ctx.per_class), math.inf
    for gb, _ in ctx.per_class:
        if gb.slots >= p:
            tau = gb.layer_s
            compute = max(_one_slot_relaxation(tau, p, L, vm), (vm - 1) * _one_slot_cycle(tau, p, L, v) + L * tau)
            best = min(best, compute + gb.first_s + gb.last_s)
    spans = [t for span in ctx.spans if (t := span_terms(span, L=L, p=p, v=v, m=m))] if p > 1 else []
    for floor, cyc, work, rest, span, j in sorted(spans, key=lambda t: t[0]):  # least first; the rest rarely pass it
        if floor >= best:
            break
        grouped = span_slots(span, p, j)
        cyc = max(cyc, integer_cycle_bound(grouped, L, v))
        best = min(best, max(relaxation_bound(grouped, L, vm), (vm - 1) * cyc + work) + rest)
    return (best + v * tail) / v if math.isfinite(best) else math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetTerms:
    """What every placement on exactly the node groups S pays besides its layers (seconds)."""

    crossings: int
    """How many crossings the path has: |S| - 1."""
    dearest: float
    """A lower bound on the dearest send of the path."""
    wan_loop: float
    """A lower bound on the send + latency of the path's dearest WAN crossing (0 within one site): without
    interleaving, 1F1B's loop through it over its two stages (>= 1 layer each) gives 2 C >= 2 (tau + send + lat)."""
    edges: float
    """Embedding and LM-head work (cheapest first and last group)."""
    fill_extra: float
    tail: float


def _class_pairs(ctx: BoundContext, present: list[list[str]]) -> list[tuple[float, float, float, bool, int]]:
    """The linked pairs of groups of `present` (a set class by class), as (fill cost, send, latency, joins two sites,
    count): pairs of interchangeable groups have the same path, so each pair of classes is one row (64 groups in four
    classes: ten rows for 2,016 pairs). The fill pays two sends and two latencies per crossing."""
    rows = []
    for i, ci in enumerate(present):
        for cj in present[i:]:
            if ci is cj and len(ci) < 2:
                continue
            a, b = sorted(ci[:2] if ci is cj else (ci[0], cj[0]))  # any pair of the two classes: the same path
            if (a, b) in ctx.pair_send:
                send, lat = ctx.pair_send[(a, b)], ctx.pair_lat[(a, b)]
                rows.append((2 * send + 2 * lat, send, lat, a.split("/")[0] != b.split("/")[0],
                             len(ci) * (len(ci) - 1) // 2 if ci is cj else len(ci) * len(cj)))
    return rows


def _cheapest(rows: list[tuple[float, float, float, bool, int]], k: int, *,
              by_send: bool = False) -> list[tuple[tuple[float, float, float, bool], int]]:
    """The k cheapest pairs (by fill cost, or by send), counting each row's pairs: (pair, how many), cheapest first."""
    out: list[tuple[tuple[float, float, float, bool], int]] = []
    for *pair, n in sorted(rows, key=lambda e: (e[1], e[0]) if by_send else e[:4]):
        if k <= 0:
            break
        out.append((tuple(pair), min(n, k)))
        k -= min(n, k)
    return out


def subset_terms(ctx: BoundContext, subset: tuple[str, ...], *, L: int, p: int,
                 present: list[list[str]] | None = None) -> SubsetTerms | None:
    """Crossing, edge and tail terms of a placement on exactly `subset` (None when no such placement exists);
    `present`: ctx.members(subset), when the caller has it.

    A contiguous placement on exactly S has one block per group, so |S| - 1 crossings: distinct linked pairs inside S,
    of which at least (sites - 1) join two sites (the path crosses every site boundary; path_terms).
    """
    r, gs = len(subset), ctx.groups
    present = ctx.members(subset) if present is None else present
    reps = [members[0] for members in present]  # interchangeable groups have the same costs and site
    if sum(gs[members[0]].slots * len(members) for members in present) < p or r > p:
        return None
    path = path_terms(ctx, present, r, len({k.split("/")[0] for k in reps}))
    if path is None:
        return None
    crossings, dearest, wan_loop, fill = path
    per_stage = math.ceil(L / p)
    return SubsetTerms(crossings=crossings, dearest=dearest, wan_loop=wan_loop,
                       edges=min(gs[k].first_s for k in reps) + min(gs[k].last_s for k in reps),
                       fill_extra=fill + _inside_fill(ctx, present, p),
                       tail=min(gs[k].tail.least(per_stage) for k in reps))


def path_terms(ctx: BoundContext, present: list[list[str]], r: int,
               sites: int) -> tuple[int, float, float, float] | None:
    """A path through r groups of `present` (groups class by class) over `sites` sites, or through more of them
    over more sites: (crossings r - 1, a bound on its dearest send, on its dearest WAN crossing's send + latency, on
    the crossings' fill), None when no such path exists. The crossings are distinct linked pairs of which at least
    (sites - 1) join two sites, so their fill is at least that of the (sites - 1) cheapest inter-site pairs plus the
    cheapest of the rest; the dearest send, at least the (sites - 1)-th cheapest inter-site send and the (r - 1)-th
    cheapest send of all."""
    pairs = _class_pairs(ctx, present)  # (fill cost, send, latency, joins two sites, how many pairs)
    if sum(n for *_, n in pairs) < r - 1:
        return None
    inter = [e for e in pairs if e[3]]
    if sum(n for *_, n in inter) < sites - 1:
        return None
    must = _cheapest(inter, sites - 1)
    left: dict[tuple, int] = {}
    for e in pairs:
        left[e[:4]] = left.get(e[:4], 0) + e[4]
    for e, n in must:
        left[e] -= n
    rest = _cheapest([(*e, n) for e, n in left.items()], r - 1 - sum(n for _, n in must))
    dearest = _cheapest(inter, sites - 1, by_send=True)[-1][0][1] if sites > 1 else 0.0
    if r > 1:
        dearest = max(dearest, _cheapest(pairs, r - 1, by_send=True)[-1][0][1])
    wan_loop = max((send + lat for (_, send, lat, _), _ in must), default=0.0)  # fill cost orders by send + lat
    return sum(n for _, n in must + rest), dearest, wan_loop, sum(fill * n for (fill, *_), n in must + rest)


def _inside_fill(ctx: BoundContext, present: list[list[str]], p: int) -> float:
    """The least the p - |S| boundaries inside the groups' blocks add to the fill (two sends and two latencies each,
    as between groups): a block of n stages has n - 1, n at least the group's sure stages and at most its slots, the
    stages beyond the sure ones on the groups whose inner boundaries cost least. `present`: S class by class."""
    fill, more, spare = 0.0, p, []
    for gb, n, sure in _class_stages(ctx, present, p):
        fill += (sure - 1) * n * gb.self_fill_s
        more -= sure * n
        spare.append((gb.self_fill_s, (gb.slots - sure) * n))
    for cost, room in sorted(spare):
        take = min(more, room)
        fill, more = fill + take * cost, more - take
    return fill


def _class_stages(ctx: BoundContext, present: list[list[str]], p: int) -> list[tuple[GroupBound, int, int]]:
    """Per class of a set S (`present`: S class by class), its costs, how many of its groups S has, and the stages
    each of them surely hosts (sure_count)."""
    gbs = [(ctx.groups[members[0]], len(members)) for members in present]
    total = sum(gb.slots * n for gb, n in gbs)
    return [(gb, n, sure_count(p, total, gb.slots)) for gb, n in gbs]


def sure_stages(ctx: BoundContext, subset: tuple[str, ...], p: int) -> dict[str, int]:
    """The stages each group of `subset` hosts in any placement of p stages on exactly it: one, or the stages the
    others' slots leave over (each holds >= v layers at that group's rate, whatever its speed)."""
    slots = sum(ctx.groups[k].slots for k in subset)
    return {k: sure_count(p, slots, ctx.groups[k].slots) for k in subset}


def sure_count(p: int, total_slots: int, own_slots: int) -> int:
    """Stages a group of `own_slots` surely hosts when p stages lie on groups of `total_slots` slots in all."""
    return max(1, p - (total_slots - own_slots))


def held_cycle(slots: Slots, v: int) -> float:
    """The cycle every placement on (at least as slow as) these p slots reaches: each stage holds at least v layers
    (validate.py: layers_positive, vpp_layers), so the slowest slot's stage works v tau on each micro-batch."""
    return v * max(tau for tau, n, _ in slots if n > 0)


def least_work(slots: Slots, L: int, v: int) -> float:
    """The least sum over stages of layers x seconds per layer on these p slots (fastest first): v layers on each,
    the L - v p others on the fastest."""
    return v * sum(tau * n for tau, n, _ in slots) + (L - v * sum(n for _, n, _ in slots)) * slots[0][0]


def relaxation_bound(slots: Slots, layers: int, vm: int) -> float:
    """min over real layer splits of (vm - 1) max_s(l_s tau_s) + sum_s l_s tau_s (compute only).

    The optimum of this convex piecewise-linear problem fills the j fastest stages to the same cycle
    C_j = L / sum_{i<=j} 1/tau_i, so it is min_j (vm - 1 + j) C_j; within slots of equal speed the
    expression is monotone in j, so only the ends of each run are evaluated.
    """
    best, inv, j = math.inf, 0.0, 0
    for tau, count, _ in sorted(slots):
        if count <= 0:
            continue
        best = min(best, (vm - 1 + j + 1) * layers / (inv + 1.0 / tau))
        j += count
        inv += count / tau
        best = min(best, (vm - 1 + j) * layers / inv)
    return best


def _one_slot_relaxation(tau: float, count: int, layers: int, vm: int) -> float:
    """relaxation_bound([(tau, count, 0.0)], layers, vm) for count >= 1, the same floating-point operations without
    the lists (candidate_bound_s calls it for every configuration and class)."""
    return min(vm * layers / (1.0 / tau), (vm - 1 + count) * layers / (count / tau))


def _one_slot_cycle(tau: float, count: int, layers: int, v: int) -> float:
    """integer_cycle_bound([(tau, count, 0.0)], layers, v) for count >= 1, the same floating-point operations without
    the lists."""
    c = layers / (count / tau)
    j = max(0, math.floor(c / (v * tau) + FLOOR_EPS))
    have = v * count * j
    while have < layers:
        c = (j + 1) * v * tau
        j += 1
        have += v * count
    return c


def integer_cycle_bound(slots: Slots, layers: int, v: int) -> float:
    """Smallest cycle c at which the slots hold all layers in whole chunks of v: sum v floor((c - e)/(v tau)) >= L.

    Starts from the continuous relaxation sum n (c - e) / tau >= L (a lower bound) and walks up the breakpoints
    e + j v tau, each of which adds n v layers; the walk is short because the floors lose less than n v per slot.
    """
    live = sorted((e, tau, n) for tau, n, e in slots if n > 0)
    if not live:
        return math.inf
    # continuous relaxation: sweep the slots in order of e, the capacity slope grows by n / tau at each e
    c_lo, slope, offset = live[-1][0], 0.0, 0.0
    for idx, (e, tau, n) in enumerate(live):
        slope += n / tau
        offset += n * e / tau
        c = (layers + offset) / slope
        nxt = live[idx + 1][0] if idx + 1 < len(live) else math.inf
        if c <= nxt:
            c_lo = max(e, c)
            break
    steps = [max(0, math.floor((c_lo - e) / (v * tau) + FLOOR_EPS)) for e, tau, _ in live]
    have = sum(v * n * j for j, (_, _, n) in zip(steps, live))
    c = c_lo
    while have < layers:
        nxt = [e + (j + 1) * v * tau for j, (e, tau, _) in zip(steps, live)]
        c = min(nxt)
        for i, val in enumerate(nxt):
            if val <= c + 1e-12:
                steps[i] += 1
                have += v * live[i][2]
    return c


def floor_key(cfg: ParallelConfig, subset: tuple[str, ...], *, L: int, m: int) -> tuple:
    """The item's entry of BoundContext.floors (_BlockBound.floor), the only memo its bounds share across calls."""
    return subset, cfg.pp, cfg.vpp, L, cfg.vpp * m


def end_choices(ctx: BoundContext, subset: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (first, last) groups worth bounding: one pair per pair of classes of interchangeable groups (planner/
    classes.py), since swapping two interchangeable groups changes no cost and so no bound (64 groups in four classes:
    16 choices instead of 4,032)."""
    present = ctx.members(subset)
    return [(a[0], b[0]) if a is not b else (a[0], a[1]) for a in present for b in present if a is not b or len(a) > 1]
