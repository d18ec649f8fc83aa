"""Hierarchical search: enumerate outer degrees, prune by lower bounds, solve each survivor with CP-SAT.

Certified gap: every candidate is either solved (its CP-SAT bound), pruned (its lower bound is at least the
K-th best objective), or skipped by the budget (its lower bound); the global bound is the smallest of the
solved bounds and the skipped lower bounds, so best / bound is a proven ratio under the cost tables.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, NamedTuple

import numpy as np

from hgplan.costmodel.evaluate import edge_costs, layer_cost, p2p_message_bytes, p2p_seconds
from hgplan.costmodel.memory import GIB, FRAMEWORK_OVERHEAD_GIB, state_bytes_per_param
from hgplan.domain import Fleet, ModelArch, NodeGroup, TrainingSettings
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
from hgplan.planner.heuristic import improve
from hgplan.planner.model import SolverParams, Solution, solve
from hgplan.planner.tables import (TAIL_CLASSES, US, CostTables, build_tables, edge_tail_inputs, eligible,
                                   tail_coeffs)

RECOMPUTE_OPTIONS = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
DTIME_PER_WALL = 0.6
BLOCK_GRID = 24
"""Intervals over which block_bound_us minimises (v m - 1) C + W(C); each costs at most 1/BLOCK_GRID of W's range."""
"""CP-SAT deterministic seconds per wall second measured on the 2-core CI machine (benchmarks/search_scaling.py)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchOptions:
    target: str = "megatron"
    top_k: int = 5
    budget_s: float = 60.0
    """Time limit in seconds. The search spends at most DTIME_PER_WALL x budget_s of CP-SAT deterministic time
    (reproducible run to run) and stops at budget_s of wall time as a hard cap (then stopped_by = 'wall')."""
    per_solve_s: float = 1.0
    max_pp: int | None = None
    groups: tuple[str, ...] | None = None
    """Restrict the search to these node groups (used by the single-group baseline)."""
    mbs_options: tuple[int, ...] = (1, 2, 4, 8)
    recompute_options: tuple[Recompute, ...] = RECOMPUTE_OPTIONS
    vpp_options: tuple[int, ...] | None = None
    """Default: (1, 2) for Megatron-LM, (1,) for DeepSpeed (no interleaved schedule)."""
    tp_options: tuple[int, ...] | None = None
    seed: int = 1
    max_gap: float = 0.005
    """Stop once no unexplored candidate can beat the best plan by more than this fraction (certified)."""
    solver_log: bool = False
    """Stream CP-SAT's search log to stderr."""
    solve_gap: float = 0.001
    """CP-SAT stops a candidate once its own relative gap is below this; the reported gap is still proven."""


class TailBound(NamedTuple):
    """Data-parallel tail (seconds, intercept + slope x layers) of a stage on one group, for the bounds."""

    intercept: float
    """Least intercept of any stage class (first, middle, last, only), for any number of stages."""
    slope: float
    first: tuple[float, float]
    """(intercept, slope) of the first stage of a pipeline of two or more stages."""
    last: tuple[float, float]

    def least(self, layers: int) -> float:
        return self.intercept + self.slope * layers


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundContext:
    """What the lower bounds need for one (tp, cp, dp, mbs, recompute, vpp): per-group speeds, slots, tails, crossings."""

    speeds: dict
    slots: dict
    tails: dict
    """Node-group key -> TailBound."""
    pair_send: dict
    pair_lat: dict
    self_send: dict
    """Send between two stages of the same group (seconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    cfg: ParallelConfig
    lower_bound_us: float
    key: tuple
    ctx: BoundContext


@dataclass(slots=True, kw_only=True)
class Found:
    cfg: ParallelConfig
    tables: CostTables
    solution: Solution

    @property
    def time_us(self) -> float:
        return self.solution.objective / self.cfg.vpp

    @property
    def bound_us(self) -> float:
        return self.solution.bound / self.cfg.vpp

    def plan(self) -> Plan:
        stages = tuple(StageAssignment(node_group=self.tables.groups[k], num_layers=n)
                       for k, n in zip(self.solution.assign, self.solution.layers))
        return Plan(config=self.cfg, stages=stages)


@dataclass(slots=True, kw_only=True)
class SearchResult:
    found: list[Found]
    candidates_total: int
    candidates_solved: int
    candidates_pruned: int
    candidates_skipped: int
    candidates_infeasible: int
    bound_us: float
    deterministic_time: float
    wall_time_s: float
    stopped_by: str
    """'complete', 'budget' or 'wall'."""
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def best_us(self) -> float | None:
        return self.found[0].time_us if self.found else None

    @property
    def gap(self) -> float | None:
        if not self.found:
            return None
        return max(0.0, (self.best_us - self.bound_us) / self.best_us)


def _tp_options(model: ModelArch, groups: list[NodeGroup], opts: SearchOptions) -> list[int]:
    max_gpn = max(g.gpus_per_node for g in groups)
    cands = opts.tp_options or tuple(2 ** i for i in range(0, 7))
    return [t for t in cands if t <= max_gpn and model.num_attention_heads % t == 0 and model.num_query_groups % t == 0
            and any(g.gpus_per_node % t == 0 for g in groups)]


def _cp_options(train: TrainingSettings, tp: int, groups: list[NodeGroup]) -> list[int]:
    out = [1]
    if train.seq_length >= 16384:
        max_gpn = max(g.gpus_per_node for g in groups)
        out += [c for c in (2, 4, 8) if train.seq_length % (2 * c) == 0 and tp * c <= max_gpn]
    return out


def _stage_sizes(tp: int, cp: int, groups: list[NodeGroup]) -> list[int]:
    """Stage sizes G = tp*cp*dp that tile the nodes of at least one group."""
    base = tp * cp
    sizes = set()
    for g in groups:
        for n in range(1, g.gpus_per_node + 1):
            if g.gpus_per_node % n == 0 and n % base == 0:
                sizes.add(n)
        for mult in range(1, g.num_nodes + 1):
            size = mult * g.gpus_per_node
            if size % base == 0:
                sizes.add(size)
    return sorted(sizes)


def base_configs(model: ModelArch, train: TrainingSettings, opts: SearchOptions,
                 groups: list[NodeGroup]) -> Iterator[ParallelConfig]:
    """Every (TP, CP, stage size, micro-batch, recompute) of the plan family, as a one-stage config to extend.

    Sequence parallelism whenever TP > 1 and the distributed optimizer (ZeRO-1) always (docs/planner.md).
    """
    for tp in _tp_options(model, groups, opts):
        for cp in _cp_options(train, tp, groups):
            for size in _stage_sizes(tp, cp, groups):
                dp = size // (tp * cp)
                for mbs in opts.mbs_options:
                    if train.global_batch_size % (mbs * dp) == 0:
                        for rc in opts.recompute_options:
                            yield ParallelConfig(tp=tp, pp=1, dp=dp, cp=cp, micro_batch_size=mbs, recompute=rc,
                                                 sequence_parallel=tp > 1, zero_stage=1)


def enumerate_candidates(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions,
                         groups: list[NodeGroup]) -> list[Candidate]:
    """Every outer candidate of the plan family with its lower bound, sorted by lower bound."""
    L = model.num_layers
    vpps = opts.vpp_options or ((1, 2) if opts.target == "megatron" else (1,))
    max_pp = min(L, opts.max_pp or L)
    layer_cache: dict[tuple, dict[str, tuple[float, float, float, float]]] = {}
    comm_cache: dict[tuple, tuple[dict, dict]] = {}
    tail_cache: dict[tuple, dict[str, tuple[float, float]]] = {}
    out: list[Candidate] = []
    for base in base_configs(model, train, opts, groups):
        tp, cp, dp, mbs, rc = base.tp, base.cp, base.dp, base.micro_batch_size, base.recompute
        size, m = base.gpus_per_stage, base.num_microbatches(train.global_batch_size)
        hosts = [g for g in groups if eligible(g, base, train)]
        if not hosts:
            continue
        key = (tp, cp, mbs, rc)
        if key not in layer_cache:  # (fwd, bwd, first-stage edge, last-stage edge) seconds per group
            layer_cache[key] = {}
            for g in groups:
                if g.gpu.supports(train.precision) and g.gpus_per_node % tp == 0:
                    _, f_l, b_l = layer_cost(fleet, g, model, base, train)
                    ef, eb, hf, hb = edge_costs(g, model, base, train)
                    layer_cache[key][g.key] = (f_l, b_l, ef + eb, hf + hb)
        costs = layer_cache[key]
        # rounded to whole microseconds exactly as the cost tables are, so the bounds hold for the tables' objective
        speeds = {g.key: (max(1, round((costs[g.key][0] + costs[g.key][1]) * US)) / US, _us(costs[g.key][2]),
                          _us(costs[g.key][3])) for g in hosts}
        ckey = (tp, cp, dp, mbs)
        if ckey not in comm_cache:
            comm_cache[ckey] = _crossing_costs(fleet, model, train, base, hosts)
        pair_send, pair_lat, self_send = comm_cache[ckey]
        cross_send = min(pair_send.values(), default=math.inf)
        cross_lat = min(pair_lat.values(), default=math.inf)
        # memory: weights + grads + optimizer of every layer, sharded over the stage's DP, must fit the largest slots
        w, gr, o = state_bytes_per_param(train.precision, 1, dp * cp)
        layer_state = model.layer_params() / tp * (w + gr + o)
        caps = sorted(((g.gpu.hbm_gib - FRAMEWORK_OVERHEAD_GIB) * GIB for g in hosts
                       for _ in range(g.num_gpus // size)), reverse=True)
        slots = {g.key: g.num_gpus // size for g in hosts}
        first_min = min(s[1] for s in speeds.values())
        last_min = min(s[2] for s in speeds.values())
        for pp in range(1, min(max_pp, len(caps)) + 1):
            if sum(caps[:pp]) < layer_state * L:
                continue
            for v in vpps:
                if v > 1 and (pp == 1 or m % pp or L < pp * v):
                    continue
                cfg = replace(base, pp=pp, vpp=v)
                tail_key = (tp, cp, dp, mbs, rc, v)
                if tail_key not in tail_cache:
                    tail_cache[tail_key] = {g.key: _tail_lower(fleet, g, model, cfg, train, costs[g.key], m)
                                            for g in hosts}
                tails = tail_cache[tail_key]
                lb = _lower_bound(hosts, slots, speeds, tails, cross_send, cross_lat, L=L, pp=pp, v=v, m=m,
                                  first_min=first_min, last_min=last_min)
                if not math.isfinite(lb):
                    continue  # no group holds pp stages and no link joins two groups that could
                ctx = BoundContext(speeds=speeds, slots=slots, tails=tails, pair_send=pair_send, pair_lat=pair_lat,
                                   self_send=self_send)
                out.append(Candidate(cfg=cfg, lower_bound_us=lb * US, ctx=ctx,
                                     key=(round(lb * US), tp, cp, dp, mbs, RECOMPUTE_OPTIONS.index(rc), pp, v)))
    out.sort(key=lambda c: c.key)
    return out


def _tail_lower(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings,
                costs: tuple[float, float, float, float], m: int) -> TailBound:
    """The tail no stage on g undercuts, whatever its place in the pipeline, rounded like the tables."""
    by_shape: dict[int, list[tuple[float, float]]] = {}
    for pp in ((1, 2) if cfg.vpp == 1 else (2,)):
        shaped = replace(cfg, pp=pp)
        by_shape[pp] = [tuple(map(_us, tail_coeffs(fleet, g, model, shaped, train, fwd_per_layer_s=costs[0],
                                                   bwd_per_layer_s=costs[1], **edge)))
                        for edge in edge_tail_inputs(g, model, shaped, train, m)]
    pairs = [pair for shape in by_shape.values() for pair in shape]
    return TailBound(intercept=min(a for a, _ in pairs), slope=min(b for _, b in pairs),
                     first=by_shape[2][TAIL_CLASSES.index("first")], last=by_shape[2][TAIL_CLASSES.index("last")])


def _us(seconds: float) -> float:
    """Seconds rounded to the whole microsecond, as build_tables rounds them."""
    return round(seconds * US) / US


def _crossing_costs(fleet: Fleet, model: ModelArch, train: TrainingSettings, cfg: ParallelConfig,
                    hosts: list[NodeGroup]) -> tuple[dict, dict, dict]:
    """Sender-busy time and latency (seconds) of one micro-batch between each pair of different, linked groups,
    and the sender-busy time between two stages of one group."""
    msg = p2p_message_bytes(model, cfg, train)
    send, lat, own = {}, {}, {}
    for a in hosts:
        own[a.key] = _us(p2p_seconds(fleet, a, a, cfg, msg_bytes=msg, crossings=1)[0])
        for b in hosts:
            if a.key < b.key:
                busy, latency, path = p2p_seconds(fleet, a, b, cfg, msg_bytes=msg, crossings=1)
                if path is not None:
                    send[(a.key, b.key)] = _us(busy)
                    lat[(a.key, b.key)] = _us(latency)
    return send, lat, own


Slots = list[tuple[float, int, float]]
"""Stage slots grouped as (seconds per layer, count, extra seconds taken from the cycle), fastest first."""


def _lower_bound(hosts: list[NodeGroup], slots: dict[str, int], speeds: dict, tails: dict, cross_send: float,
                 cross_lat: float, *, L: int, pp: int, v: int, m: int, first_min: float, last_min: float) -> float:
    """Lower bound (seconds) on the predicted iteration time of any placement with pp stages.

    min over (a) all stages inside one group, (b) stages over several groups, which pay at least one crossing:
    in the fill, and in the cycle of a stage that also holds at least v layers.
    Each adds the compute-only bounds, the edge layers and the smallest DP/optimizer tail of the fullest stage.
    """
    vm = v * m
    per_stage = math.ceil(L / pp)
    tail = min(tails[g.key].least(per_stage) for g in hosts)
    best = math.inf
    for g in hosts:
        if slots[g.key] >= pp:
            grouped = [(speeds[g.key][0], pp, 0.0)]
            compute = max(relaxation_bound(grouped, L, vm),
                          (vm - 1) * integer_cycle_bound(grouped, L, v) + L * speeds[g.key][0])
            best = min(best, compute + speeds[g.key][1] + speeds[g.key][2])
    fastest = sorted((speeds[g.key][0], slots[g.key]) for g in hosts)
    if pp > 1 and sum(n for _, n in fastest) >= pp and math.isfinite(cross_send) and len(fastest) > 1:
        grouped: Slots = []
        need = pp
        for tau, n in fastest:
            take = min(n, need)
            if take:
                grouped.append((tau, take, 0.0))
            need -= take
        # a stage next to the crossing sends it and holds at least v layers
        cyc = max(integer_cycle_bound(grouped, L, v), v * cross_send + v * fastest[0][0])
        compute = max(relaxation_bound(grouped, L, vm), (vm - 1) * cyc + L * fastest[0][0])
        best = min(best, compute + 2 * cross_send + 2 * cross_lat + first_min + last_min)
    return (best + v * tail) / v if math.isfinite(best) else math.inf


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetTerms:
    """What every placement on exactly the node groups S pays besides its layers (seconds)."""

    crossings: tuple[tuple[float, float], ...]
    """(send, latency) of the |S| - 1 cheapest admissible crossings, cheapest first."""
    dearest: float
    """A lower bound on the dearest send of the path."""
    edges: float
    """Embedding and LM-head work (cheapest first and last group)."""
    fill_extra: float
    tail: float


def subset_terms(ctx: BoundContext, subset: tuple[str, ...], *, L: int, p: int) -> SubsetTerms | None:
    """Crossing, edge and tail terms of a placement on exactly `subset` (None when no such placement exists).

    A contiguous placement on exactly S has one block per group, so |S| - 1 crossings: distinct linked pairs inside S,
    of which at least (sites - 1) join two sites (the path crosses every site boundary). Their fill costs are
    therefore at least those of the (sites - 1) cheapest inter-site pairs plus the cheapest of the rest.
    """
    r = len(subset)
    if sum(ctx.slots[k] for k in subset) < p or r > p:
        return None
    linked = [(a, b) for a, b in itertools.combinations(subset, 2) if (a, b) in ctx.pair_send]
    if len(linked) < r - 1:
        return None
    sites = {k.split("/")[0] for k in subset}
    inter = [e for e in linked if e[0].split("/")[0] != e[1].split("/")[0]]
    if len(inter) < len(sites) - 1:
        return None

    def fill_cost(e: tuple[str, str]) -> float:  # the fill pays 2 sends and 2 latencies per crossing
        return 2 * ctx.pair_send[e] + 2 * ctx.pair_lat[e]

    must = sorted(inter, key=fill_cost)[:len(sites) - 1]
    rest = sorted((e for e in linked if e not in must), key=fill_cost)[:r - 1 - len(must)]
    crossings = sorted((ctx.pair_send[e], ctx.pair_lat[e]) for e in must + rest)
    # the dearest send is at least the (sites-1)-th cheapest inter-site send and the (r-1)-th cheapest send of all
    dearest = sorted(ctx.pair_send[e] for e in inter)[len(sites) - 2] if len(sites) > 1 else 0.0
    if r > 1:
        dearest = max(dearest, sorted(ctx.pair_send[e] for e in linked)[r - 2])
    per_stage = math.ceil(L / p)
    return SubsetTerms(crossings=tuple(crossings), dearest=dearest,
                       edges=min(ctx.speeds[k][1] for k in subset) + min(ctx.speeds[k][2] for k in subset),
                       fill_extra=sum(2 * send + 2 * lat for send, lat in crossings),
                       tail=min(ctx.tails[k].least(per_stage) for k in subset))


def subset_bounds_us(cand: Candidate, *, L: int, m: int) -> dict[tuple[str, ...], float]:
    """Lower bound (us) per set S of groups a placement uses (fast; block_bound_us refines one S later).

    Compute uses one slot of every group of S plus the fastest others; the crossings' sends and latencies sit in
    the fill, and the stage next to the dearest crossing holds at least v layers besides sending it.
    (Charging the sends to particular slots' cycles is left to block_bound_us: with whole layers per stage, which
    slot absorbs a send best is not known in advance.)
    """
    ctx, p, v = cand.ctx, cand.cfg.pp, cand.cfg.vpp
    vm = v * m
    keys = sorted(ctx.speeds)
    out: dict[tuple[str, ...], float] = {}
    for r in range(1, len(keys) + 1):
        for subset in itertools.combinations(keys, r):
            terms = subset_terms(ctx, subset, L=L, p=p)
            if terms is None:
                continue
            chosen = [ctx.speeds[k][0] for k in subset]
            rest = sorted(ctx.speeds[k][0] for k in subset for _ in range(ctx.slots[k] - 1))
            taus = sorted(chosen + rest[:p - r])
            cyc = integer_cycle_bound([(tau, 1, 0.0) for tau in taus], L, v)
            if terms.crossings:  # the stage next to the dearest crossing sends it and works on >= v layers
                cyc = max(cyc, v * terms.dearest + v * min(taus))
            compute = max(relaxation_bound([(tau, 1, 0.0) for tau in taus], L, vm), (vm - 1) * cyc + L * taus[0])
            out[subset] = (compute + terms.edges + terms.fill_extra + v * terms.tail) / v * US
    return out


def block_bound_us(cand: Candidate, subset: tuple[str, ...], *, L: int, m: int, ends_known: bool = True) -> float:
    """Block-structured lower bound (us) on any placement on exactly `subset`; slower, tighter than subset_bounds_us.

    Each group's stages form one block and the blocks form a path, so for every ordered choice of the first and last
    group, each group's role is known: how many crossings its block touches (one for an end block, two otherwise)
    and whether it holds the embedding or the LM head. Every stage's cycle holds its layers plus what it surely
    pays: v x (its share of the block's two cheapest partners' sends and/or the send inside the group), and the
    embedding or head work; the first and last stages also pay their class's DP tail. That
    caps the layers a block of n stages holds at cycle C (taking, for a valid bound, the most a group gains from
    each extra stage as non-increasing). Then the smallest cycle C* whose capacity holds L layers, and
    min over C >= C* of (v m - 1) C + W(C), W being the cheapest way to place the layers within those capacities
    (fastest groups first), plus the edge, crossing and tail terms. With interleaving the wrap-around boundary
    (last stage back to the first) makes the end blocks touch two crossings too. With ends_known=False one pass
    gives every group the least demanding role (no edge work, and one crossing without interleaving): weaker, but
    |S| (|S| - 1) times cheaper.
    """
    ctx, p, v = cand.ctx, cand.cfg.pp, cand.cfg.vpp
    terms = subset_terms(ctx, subset, L=L, p=p)
    if terms is None:
        return math.inf
    vm, r, units = v * m, len(subset), L // v
    tau = {k: ctx.speeds[k][0] for k in subset}
    # each block's crossings lead to distinct neighbouring groups (a path or, interleaved, a ring visits each group
    # once), so its two crossings cost at least its two cheapest partners' sends (the same partner twice if r = 2)
    cross: dict[str, tuple[float, float]] = {}
    for k in subset:
        sends = sorted(ctx.pair_send[e] for e in itertools.combinations(subset, 2) if k in e and e in ctx.pair_send)
        sends = (sends or [0.0]) * 2 if r == 2 or len(sends) < 2 else sends
        cross[k] = (sends[0], sends[1])
    inner = {k: ctx.self_send[k] for k in subset}
    by_speed = sorted(subset, key=lambda k: (tau[k], k))
    tau_min = tau[by_speed[0]]

    floor = math.floor

    def roles(first: str | None, last: str | None) -> list[tuple[float, float, float, float, float, int]]:
        """Per group, fastest first: v tau, then the sure extra of a lone stage, of the two end stages of a block of
        >= 2 stages and of an interior stage, and the group's slots. Without known ends (None), every group gets
        the least of the roles: one crossing and no edge work."""
        out = []
        for k in by_speed:
            work_in = ctx.speeds[k][1] * (k == first), ctx.speeds[k][2] * (k == last)
            # with interleaving the wrap-around boundary (last stage -> first) is one more crossing of the end blocks
            crossings = 0 if r == 1 else (1 if v == 1 and (first is None or k in (first, last)) else 2)
            c1, c2 = cross[k]
            lone = v * (c1 + c2 if crossings == 2 else c1 * crossings) + sum(work_in)
            if crossings == 2:
                ends = (v * (c1 + inner[k]), v * (c2 + inner[k]))
            elif crossings == 1:
                ends = (v * (c1 + inner[k]), v * inner[k] + sum(work_in))
            else:
                ends = (v * inner[k] + work_in[0], v * inner[k] + work_in[1])
            out.append((v * tau[k], lone, *ends, 2 * v * inner[k], ctx.slots[k]))
        return out

    def feasible(c: float, role: list) -> bool:
        """Whether the p stages can all be formed at cycle c with the L layers.

        A group's stages beyond its first (or first two) add increments [first] + [interior] x n_more, a
        non-increasing list, so the best `spare` extra stages over all groups are the largest increments. A
        group's stage at cycle c holds v floor((c - extra) / (v tau)) layers."""
        spare, base_sum, incs = p, 0, []
        for vt, lone, end_a, end_b, inner_extra, slots in role:
            held_a = v * max(0, floor((c - end_a) / vt + 1e-9))
            held_b = v * max(0, floor((c - end_b) / vt + 1e-9))
            one = v * max(0, floor((c - lone) / vt + 1e-9))
            two = held_a + held_b
            pair_ok = held_a >= v and held_b >= v and slots >= 2
            interior = v * max(0, floor((c - inner_extra) / vt + 1e-9))
            n_more = slots - 2 if pair_ok and interior >= v else 0
            if one >= v:
                spare, base_sum = spare - 1, base_sum + one
                if pair_ok:
                    incs.append((max(two - one, interior) if n_more else two - one, 1))
            elif pair_ok:
                spare, base_sum = spare - 2, base_sum + two
            else:
                return False
            if n_more:
                incs.append((interior, n_more))
        if spare < 0 or sum(n for _, n in incs) < spare:
            return False
        gained, need = 0, spare
        for value, n in sorted(incs, reverse=True):
            take = min(n, need)
            gained, need = gained + take * value, need - take
            if not need:
                break
        return base_sum + gained >= L

    tau_arr = np.array([tau[k] for k in by_speed])

    def work_at(cs: np.ndarray, role: list) -> np.ndarray:
        """W at every cycle in cs, all at or above C* (where the stages can be formed): the most layers each group's
        block holds there, each group taking every spare stage the others leave (a relaxation of sum n = p), then
        the L layers placed fastest group first."""
        vt, lone, end_a, end_b, inner_extra, slots = (np.array(col)[None, :] for col in zip(*role))
        c = cs[:, None]

        def held_at(extra: np.ndarray) -> np.ndarray:
            return v * np.maximum(0, np.floor((c - extra) / vt + 1e-9))

        held_a, held_b, one, interior = held_at(end_a), held_at(end_b), held_at(lone), held_at(inner_extra)
        two = held_a + held_b
        pair_ok = (held_a >= v) & (held_b >= v) & (slots >= 2)
        n_more = np.where(pair_ok & (interior >= v), slots - 2, 0)
        one_ok = one >= v
        base = np.where(one_ok, one, two)
        spare = (p - np.where(one_ok, 1, 2).sum(axis=1))[:, None]
        inc1 = np.where(n_more > 0, np.maximum(two - one, interior), two - one)
        extra = np.where(one_ok & pair_ok, inc1 + interior * np.minimum(n_more, spare - 1),
                         interior * np.minimum(n_more, spare))
        pool = base + np.where(spare > 0, extra, 0)
        before = np.cumsum(pool, axis=1) - pool
        take = np.clip(L - before, 0, pool)
        return (take * tau_arr[None, :]).sum(axis=1)

    def compute_value(role: list) -> float:
        """min over C >= C* of (v m - 1) C + W(C) for these roles (inf if no placement)."""
        # bisection for the smallest feasible cycle C*: lo stays below it (a valid bound), hi above
        hi = c_max = max(vt * units + max(lone, end_a, end_b) + inner_extra
                         for vt, lone, end_a, end_b, inner_extra, _ in role)
        if not feasible(hi, role):
            return math.inf  # this order of ends admits no placement
        if vm == 1:  # a single micro-batch: only the work counts, least where every stage could hold every layer
            return float(work_at(np.array([c_max]), role)[0])
        # stage capacities only change where c - extra is a multiple of v tau, whole microseconds in the tables'
        # units: bisect over whole microseconds, then check that just below the found one is still infeasible
        lo_us, hi_us = 0, math.ceil(hi * US)
        while hi_us - lo_us > 1:
            mid = (lo_us + hi_us) // 2
            if feasible(mid / US, role):
                hi_us = mid
            else:
                lo_us = mid
        lo, hi = lo_us / US, hi_us / US
        if not feasible(hi * (1 - 1e-9), role):
            lo = hi * (1 - 1e-9)
        else:  # not on the microsecond grid after all (rounding): finish in floating point
            while hi - lo > 1e-9 * hi:
                mid = (lo + hi) / 2
                if feasible(mid, role):
                    hi = mid
                else:
                    lo = mid
        # min over C >= C* of (v m - 1) C + W(C), W non-increasing: on [c_i, c_i+1) it is at least
        # (v m - 1) c_i + W(c_i+1); past lo + span nothing can beat the value at C*.
        w_star = float(work_at(np.array([hi]), role)[0])
        span = (w_star - L * tau_min) / (vm - 1)
        grid = lo + span * np.arange(BLOCK_GRID + 1) / BLOCK_GRID
        works = work_at(np.maximum(grid[1:], hi), role)
        return min((vm - 1) * lo + w_star, float(np.min((vm - 1) * grid[:-1] + works)))

    def ends_cost(first: str | None, last: str | None) -> float:
        """Edge work plus v x the DP tail: the first and last stages pay their class's tail (embedding / LM-head
        gradients) on >= v layers."""
        if p == 1:
            tail = terms.tail
        else:
            firsts = subset if first is None else (first,)
            lasts = subset if last is None else (last,)
            tail = max(terms.tail, min(ctx.tails[k].first[0] + ctx.tails[k].first[1] * v for k in firsts),
                       min(ctx.tails[k].last[0] + ctx.tails[k].last[1] * v for k in lasts))
        edges = terms.edges if first is None else ctx.speeds[first][1] + ctx.speeds[last][2]
        return edges + v * tail

    if r == 1:
        best = compute_value(roles(subset[0], subset[0])) + ends_cost(subset[0], subset[0])
    elif not ends_known:
        best = compute_value(roles(None, None)) + ends_cost(None, None)
    else:
        # The unknown-ends roles ask less of every group than any choice of ends, so their value is a lower bound
        # on each order's compute term: orders whose ends alone already reach the best found are skipped.
        floor_value = compute_value(roles(None, None))
        best = math.inf
        for cost, first, last in sorted((ends_cost(a, b), a, b) for a, b in itertools.permutations(subset, 2)):
            if floor_value + cost >= best:
                break
            best = min(best, compute_value(roles(first, last)) + cost)
    if not math.isfinite(best):
        return math.inf
    return (best + terms.fill_extra) / v * US


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
    steps = [max(0, math.floor((c_lo - e) / (v * tau) + 1e-9)) for e, tau, _ in live]
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


def apportion(total: int, weights: list[float]) -> list[int]:
    """Split `total` into len(weights) integers >= 1 in proportion to the weights (largest remainder)."""
    n = len(weights)
    raw = [total * w / sum(weights) for w in weights]
    parts = [max(1, int(r)) for r in raw]
    while sum(parts) < total:
        i = max(range(n), key=lambda j: raw[j] - parts[j])
        parts[i] += 1
    while sum(parts) > total:
        i = max(range(n), key=lambda j: (parts[j] - raw[j]) if parts[j] > 1 else -math.inf)
        parts[i] -= 1
    return parts


def capped_apportion(total: int, weights: list[float], caps: list[int]) -> list[int]:
    """Like apportion, but no part above its cap (water-filling); parts stay >= 1 even if that breaks a cap."""
    n = len(weights)
    parts = [1] * n
    left = total - n
    while left > 0:
        room = [i for i in range(n) if parts[i] < caps[i]]
        if not room:
            room = list(range(n))
        share = sum(weights[i] for i in room)
        grant = [int(left * weights[i] / share) for i in room]
        if sum(grant) == 0:
            best = max(room, key=lambda i: (weights[i] / (parts[i] + 1), -i))
            parts[best] += 1
            left -= 1
            continue
        for i, g in zip(room, grant):
            g = min(g, max(0, caps[i] - parts[i])) if any(parts[j] < caps[j] for j in room) else g
            parts[i] += g
            left -= g
    return parts


def greedy_hint(t: CostTables, fleet_order: list[str]) -> tuple[list[int], list[int]]:
    """A warm start for CP-SAT: one slot of every required group, then the fastest slots, blocks in file order,
    layers in proportion to speed but within each stage's memory."""
    p, v, L, K = t.pp, t.vpp, t.num_layers, len(t.groups)
    pool = sorted((t.layer_us[k], fleet_order.index(t.groups[k]), k) for k in range(K) for _ in range(t.slots[k]))
    chosen = []
    if t.require_all:
        for k in range(K):
            item = next(x for x in pool if x[2] == k)
            pool.remove(item)
            chosen.append(item)
    chosen += pool[:max(0, p - len(chosen))]
    assign = [k for _, _, k in sorted(chosen[:p], key=lambda x: x[1])]
    caps = [max(1, t.memory_layers(s, k) // v) for s, k in enumerate(assign)]
    layers = capped_apportion(L // v, [1.0 / t.layer_us[k] for k in assign], caps)
    return assign, [n * v for n in layers]


def run_search(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
               progress: Callable[[int, int], None] | None = None, seeds: list[Found] | None = None) -> SearchResult:
    """Best-first over candidates by lower bound. A popped candidate first gets its refined bound; then it is
    solved; a solve that stops at its time limit goes back with its improved bound and twice the time."""
    import heapq

    start = time.perf_counter()
    groups = [g for g in fleet.groups if opts.groups is None or g.key in opts.groups]
    cands = enumerate_candidates(fleet, model, train, opts, groups)
    order = [g.key for g in fleet.groups]
    L, m_of = model.num_layers, (lambda c: c.num_microbatches(train.global_batch_size))
    heap = [(c.lower_bound_us, c.key, 0, i, ()) for i, c in enumerate(cands)]
    heapq.heapify(heap)
    # plans found beforehand (e.g. each node group alone) are incumbents from the start
    found: dict[tuple, Found] = {("seed", n): f for n, f in enumerate(seeds or [])}
    tables_of: dict[tuple, CostTables] = {}
    by_key = {g.key: g for g in groups}
    solved = pruned = skipped = infeasible = 0
    closed_bounds: list[float] = []
    dtime = 0.0
    stopped = "complete"
    statuses: dict[str, int] = {}
    done = 0
    while heap:
        lb, key, stage, i, subset = heapq.heappop(heap)
        cand = cands[i]
        best_now = min((f.time_us for f in found.values()), default=math.inf)
        if lb >= best_now * (1 - opts.max_gap):
            pruned = len({e[3] for e in heap} | {i})
            closed_bounds.append(lb)
            break
        remaining = DTIME_PER_WALL * opts.budget_s - dtime
        if remaining <= 0 or time.perf_counter() - start > opts.budget_s:
            stopped = "budget" if remaining <= 0 else "wall"
            skipped = len({e[3] for e in heap} | {i})
            closed_bounds.append(lb)
            break
        if stage == 0:
            # split the candidate by the set of node groups it uses, each with its own bound
            for sub, sub_lb in sorted(subset_bounds_us(cand, L=L, m=m_of(cand.cfg)).items()):
                heapq.heappush(heap, (max(lb, sub_lb), key, 1, i, sub))
            continue
        if stage in (1, 2):
            # about to be solved: first the block bound, without and then with the choice of end groups (slower,
            # tighter); either often closes the item without a solve
            block = block_bound_us(cand, subset, L=L, m=m_of(cand.cfg), ends_known=stage == 2)
            heapq.heappush(heap, (max(lb, block), key, stage + 1, i, subset))
            continue
        item = (i, subset)
        if item not in tables_of:
            tables = build_tables(fleet, model, train, cand.cfg, [by_key[k] for k in subset])
            if tables is None or len(tables.groups) != len(subset):
                infeasible += 1
                continue
            tables_of[item] = replace(tables, require_all=True)
        tables = tables_of[item]
        attempt = stage - 3
        prev = found.get(item)
        hint = (list(prev.solution.assign), list(prev.solution.layers)) if prev else \
            improve(tables, greedy_hint(tables, order))
        params = SolverParams(random_seed=opts.seed, max_deterministic_time=min(opts.per_solve_s * 2 ** attempt, remaining),
                              max_time_in_seconds=max(5.0, 3 * opts.per_solve_s * 2 ** attempt),
                              relative_gap_limit=opts.solve_gap, log_search_progress=opts.solver_log)
        hint_obj = tables.objective(*hint) if prev is None else None
        if hint_obj is not None:  # the warm start is itself a valid plan: keep it
            found[item] = Found(cfg=cand.cfg, tables=tables, solution=Solution(
                status="HINT", objective=hint_obj, bound=0.0, assign=tuple(hint[0]), layers=tuple(hint[1]),
                deterministic_time=0.0, wall_time_s=0.0))
            best_now = min(best_now, found[item].time_us)
        upper = math.ceil(best_now * cand.cfg.vpp) if math.isfinite(best_now) else None
        sol = solve(tables, params, hint=hint, upper_bound=upper)
        dtime += sol.deterministic_time
        statuses[sol.status] = statuses.get(sol.status, 0) + 1
        solved += attempt == 0
        if progress:
            done += attempt == 0
            progress(done, len(cands))
        if sol.objective is not None:
            f = Found(cfg=cand.cfg, tables=tables, solution=sol)
            current = found.get(item)
            if current is None or f.time_us < current.time_us:
                found[item] = f
        if sol.status == "INFEASIBLE":
            if upper is None:
                infeasible += 1
            else:
                closed_bounds.append(upper / cand.cfg.vpp)  # nothing better than the incumbent
            continue
        # CP-SAT's bound holds for plans better than the incumbent, so the item's own optimum is at least
        # min(bound, incumbent); the candidate's lower bound holds regardless
        cp_bound = sol.bound if upper is None else min(sol.bound, upper)
        bound = max(lb, cp_bound / cand.cfg.vpp)
        if sol.status == "OPTIMAL":
            closed_bounds.append(bound)
            continue
        # Retry with twice the time only if this solve got somewhere: a better plan, or a bound above what the
        # item already had. A solve that found nothing and whose relaxation stayed below the item's bound (many
        # node groups, tens of stages) gains nothing from more time.
        if attempt < 3 and (sol.objective is not None or bound > lb):
            heapq.heappush(heap, (bound, key, stage + 1, i, subset))
        else:
            closed_bounds.append(bound)
    if progress:
        progress(len(cands), len(cands))
    best_per_cand: dict[tuple, Found] = {}
    for f in found.values():
        k = cand_key(f.cfg)
        if k not in best_per_cand or f.time_us < best_per_cand[k].time_us:
            best_per_cand[k] = f
    ranked = sorted(best_per_cand.values(), key=lambda f: (f.time_us, cand_key(f.cfg)))
    best = ranked[0].time_us if ranked else math.inf
    bound = min([best] + closed_bounds)
    return SearchResult(found=ranked[:opts.top_k], candidates_total=len(cands), candidates_solved=solved,
                        candidates_pruned=pruned, candidates_skipped=skipped, candidates_infeasible=infeasible,
                        bound_us=bound, deterministic_time=dtime, wall_time_s=time.perf_counter() - start,
                        stopped_by=stopped, statuses=statuses)


def seeded_search(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
                  progress: Callable[[int, int], None] | None = None) -> tuple[SearchResult, list[Found]]:
    """Each node group alone first (a quarter of the time limit, shared), then the whole fleet seeded with their
    best plans as incumbents. Returns the main result and the per-group plans (the single-group baseline)."""
    start = time.perf_counter()
    seeds: list[Found] = []
    if len(fleet.groups) > 1 and opts.groups is None:
        share = replace(opts, budget_s=opts.budget_s / (4 * len(fleet.groups)), top_k=1)
        used = 0.0
        for g in fleet.groups:
            res = run_search(fleet, model, train, replace(share, groups=(g.key,)))
            seeds += res.found
            used += res.deterministic_time
        # what the seeds left goes to the fleet search, counted in deterministic time so runs stay reproducible
        opts = replace(opts, budget_s=max(0.1, opts.budget_s - used / DTIME_PER_WALL))
    result = run_search(fleet, model, train, opts, progress=progress, seeds=seeds)
    result.wall_time_s = time.perf_counter() - start
    return result, seeds


def cand_key(cfg: ParallelConfig) -> tuple:
    return (cfg.tp, cfg.cp, cfg.dp, cfg.micro_batch_size, RECOMPUTE_OPTIONS.index(cfg.recompute), cfg.pp, cfg.vpp)
