"""The block-structured lower bound on any placement on exactly a set S of node groups (tighter, slower).

Each group's stages form one block and the blocks form a path, so for every ordered choice of the first and last
group, each group's role is known: how many crossings its block touches (one for an end block, two otherwise)
and whether it holds the embedding or the LM head. Every stage's cycle holds its layers plus what it surely
pays: v x (its share of the block's two cheapest partners' sends and/or the send inside the group), and the
embedding or head work; the first and last stages also pay their class's DP tail. That caps the layers a block
of n stages holds at cycle C, and the best split of the p stages over the groups (greedy over non-increasing
increments, exact where a group's increments rise: planner/block_capacity.py). Over several sites the capacity also
loses what the WAN costs: the block ends that must send to another site (planner/wan_ends.py) and, without
interleaving, what 1F1B's loops through the WAN's latency cost the stages next to it, pooled and crossing by
crossing over the sites' spanning trees, case by case of single-stage blocks (planner/wan_loops.py). Then the
smallest cycle C* whose capacity holds L layers, and min over C >= C* of (v m - 1) C + W(C), W being the cheapest
way to place the layers within those capacities (the v layers of every stage a group must host on it, since the
others' slots cannot take them, then fastest groups first), plus the edge, crossing and tail terms. With
interleaving the wrap-around boundary (last stage back to the first) makes the end blocks touch two crossings too.

Legend: as in planner/bounds.py (L, p, v, m, r, tau, C, W, c1, c2); a "role" row is one group's
(v tau, lone, end_a, end_b, interior, slots): the sure extra seconds of a lone stage, of the two end stages of a
block of two or more, and of an interior stage, and how many stages the group hosts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from hgplan.plan import ParallelConfig
from hgplan.planner.bounds import (FLOOR_EPS, BoundContext, end_choices, floor_key, integer_cycle_bound,
                                   subset_terms, sure_stages)
from hgplan.planner.costs import US
from hgplan.planner.limits import SETTLE_GROUPS
from hgplan.planner.block_capacity import most_layers, rising
from hgplan.planner.single_stages import single_cases
from hgplan.planner.wan_loops import LoopSlack, most_lone, pair_loops
from hgplan.planner.block_work import (DOUBLINGS, block_pools, cheapest_fill, ends_charge, least_value, loops_charge,
                                      work_one)
from hgplan.planner.wan_ends import Role, WanEnds


def block_bound_us(ctx: BoundContext, cfg: ParallelConfig, subset: tuple[str, ...], *, L: int, m: int,
                   ends_known: bool = True, enough_us: float = math.inf) -> float:
    """Block-structured lower bound (us) on any placement of cfg's stages on exactly `subset`.

    With ends_known=False one pass gives every group the least demanding role (no edge work, and one crossing
    without interleaving): weaker, but |S| (|S| - 1) times cheaper. `enough_us` (the incumbent, finite): once an order
    of end groups is below it the item will be solved, and what the search needs is whether the bound reaches it, so
    the orders left are bounded by the unknown-ends value plus their end cost, without their bisections (_ends_pass,
    settle; the item's full bound comes with its cuts before its solve, search._bound_to_solve), on sets of at least
    limits.SETTLE_GROUPS groups (on smaller ones the pass is cheap, and its full bound orders the heap).
    """
    terms = subset_terms(ctx, subset, L=L, p=cfg.pp)
    if terms is None:
        return math.inf
    bb = _BlockBound(ctx, cfg, subset, L=L, m=m, tail=terms.tail, edges=terms.edges)
    enough = enough_us / US * cfg.vpp - terms.fill_extra  # the incumbent, in the compute term's units
    if len(subset) == 1:
        best = bb.compute_value(*bb.roles(subset[0], subset[0]))[0] + bb.ends_cost(subset[0], subset[0])
    elif not ends_known:  # the cheap pass: W without the WAN's charges, and no bisection if it reaches enough_us
        (role, wan), cost = bb.roles(None, None), bb.ends_cost(None, None)
        reached, feasible_at = bb.beyond(enough - cost, role, wan)
        best = enough if reached else bb.floor(feasible_at)[0] + cost
    else:
        best = _ends_pass(bb, ctx, subset, enough, enough_us, settle=len(subset) >= SETTLE_GROUPS)[0]
    if not math.isfinite(best):
        return math.inf
    return (best + terms.fill_extra) / cfg.vpp * US


def _ends_pass(bb: _BlockBound, ctx: BoundContext, subset: tuple[str, ...], enough: float, enough_us: float, *,
               settle: bool = False) -> tuple[float, dict[tuple[str, str], tuple[float, float]]]:
    """The bound with known ends: the least over the (first, last) choices of their compute term plus their edge and
    tail costs (compute-term units), and per choice what it proved: (a cycle no placement with those ends is at or
    below, seconds; the choice's value). The unknown-ends roles ask less of every group than any choice of ends, so
    their value is a lower bound on each choice's compute term (choices whose ends alone already reach the best found
    are not bisected: they keep that value and the unknown-ends roles' cycle), and a cycle they rule out rules out
    every choice's placements too: each choice's bisection starts there. `enough` (`enough_us` in compute-term
    units) and `settle`: see block_bound_us; block_cuts passes neither (every choice's proof)."""
    floor_value, below = bb.floor()
    best, proved = math.inf, {}
    for cost, first, last in sorted((bb.ends_cost(a, b), a, b) for a, b in end_choices(ctx, subset)):
        if settle and best < enough < math.inf:  # below the incumbent: each choice left >= floor_value + its cost
            best = min(best, floor_value + cost)
            break
        target = min(best, enough)
        if floor_value + cost >= target:
            proved[first, last] = (below, floor_value + cost)
            best = min(best, floor_value + cost)  # every order left is at least this
            continue
        role, wan = bb.roles(first, last)
        reached, feasible_at = bb.beyond(target - cost, role, wan)
        if reached:
            proved[first, last] = (below, target)
            best = min(best, target)
            continue
        value, lo = bb.compute_value(role, wan, charged=best >= enough or enough_us == math.inf,
                                     feasible_at=feasible_at, above=below)
        proved[first, last] = (max(lo, below), value + cost)
        best = min(best, value + cost)
    return best, proved


class _BlockBound:
    """The pieces of block_bound_us for one (candidate, subset): roles, feasibility of a cycle, W at a cycle."""

    def __init__(self, ctx: BoundContext, cfg: ParallelConfig, subset: tuple[str, ...], *, L: int, m: int,
                 tail: float, edges: float):
        self.ctx, self.subset, self.L, self.tail, self.edges = ctx, subset, L, tail, edges
        self.p, self.v = cfg.pp, cfg.vpp
        self.floor_at = floor_key(cfg, subset, L=L, m=m)
        self.vm, self.r, self.units = cfg.vpp * m, len(subset), L // cfg.vpp
        gs = ctx.groups
        self.tau = {k: gs[k].layer_s for k in subset}
        # each block's crossings lead to distinct neighbouring groups (a path or, interleaved, a ring visits each
        # group once), so its two crossings cost at least its two cheapest partners' sends (the same partner twice
        # if r = 2)
        self.cross: dict[str, tuple[float, float]] = {}
        for k in subset:
            sends = sorted(ctx.pair_send[e] for e in itertools.combinations(subset, 2)
                           if k in e and e in ctx.pair_send)
            sends = (sends or [0.0]) * 2 if self.r == 2 or len(sends) < 2 else sends
            self.cross[k] = (sends[0], sends[1])
        # a block end that leaves or enters its site sends at least the group's cheapest send to another site
        site_names = sorted({k.split("/")[0] for k in subset})
        self.site = {k: site_names.index(k.split("/")[0]) for k in subset}
        self.wan = {k: min((ctx.pair_send[e] for e in itertools.combinations(subset, 2) if k in e
                            and e in ctx.pair_send and self.site[e[0]] != self.site[e[1]]), default=math.inf)
                    for k in subset}
        self.sites = len(site_names)
        self.by_speed = sorted(subset, key=lambda k: (self.tau[k], k))
        self.tau_min = self.tau[self.by_speed[0]]
        self.tau_arr = np.array([self.tau[k] for k in self.by_speed])
        sure = sure_stages(ctx, subset, self.p)
        self.class_of = {k: i for i, c in enumerate(ctx.members(subset)) for k in c}
        """Each group's class, in the order of ctx.members (PairLoops')."""
        self.classes = [self.class_of[k] for k in self.by_speed]
        """The same, group by group in the bound's order (fastest first)."""
        self.may_loop = self.v == 1 and self.sites > 1 and m >= 3  # can have loops (loop_slack may find none)
        self.m, self.sure, self._loops = m, sure, None
        self.held_memo: dict[tuple, dict[int | None, float]] = {}
        """most_layers per shapes (the stages' whole-layer capacities at a cycle) and case (_held)."""
        self.sure_stages = [sure[k] for k in self.by_speed]
        """The stages each group surely hosts (sure_stages), in the bound's order."""
        self.sure_layers = self.v * np.array(self.sure_stages)
        # the j fastest groups host at most their slots: the others hold the rest of the p stages, v layers each
        ahead = np.cumsum([ctx.groups[k].slots for k in self.by_speed])
        self.most_ahead = (L - self.v * np.maximum(0, self.p - ahead))[None, :].astype(float)
        """What the j fastest groups hold at most: the stages they cannot host hold >= v layers each elsewhere."""
        self.sure_list, self.tau_list, self.most_list = (a.tolist() for a in (1.0 * self.sure_layers, self.tau_arr,
                                                                              self.most_ahead[0]))

    def loop_slack(self) -> LoopSlack | None:
        """The loops' demand next to the WAN without interleaving (the closed form charges 1F1B's loops only): pooled
        when every run of WAN crossings is a loop (at most r stages, fewer than m), and crossing by crossing when a
        loop of two micro-batches fits in the iteration (m >= 3). Computed on first use: on the 10-group benchmark
        fleet 54 of 2,683 bounds needed them, and they took 2.0 of the bounds' 8.2 s (2026-11-30)."""
        if self._loops is None:
            loops = self._loop_slack() if self.may_loop else None
            cases, refined = single_cases(self.ctx.members(self.subset), self.by_speed, self.class_of, self.sure,
                                          most_lone(self.ctx, self.subset, self.sure, self.p)) if loops else ([], [])
            self._loops = (loops, cases + refined, len(cases))
        return self._loops[0]

    def cases(self) -> tuple[list, int]:
        """The cases of single-stage blocks the loops' loss is bounded in, then the refinement of the last one
        (single_stages.single_cases) from the index given."""
        self.loop_slack()
        return self._loops[1], self._loops[2]

    def _loop_slack(self) -> LoopSlack | None:
        lats = sorted(self.ctx.pair_lat[e] for e in itertools.combinations(self.subset, 2)
                      if e in self.ctx.pair_lat and self.site[e[0]] != self.site[e[1]])
        need = tuple((w, 2 * sum(lats[:w])) for w in range(self.sites - 1, min(self.r - 1, len(lats)) + 1)) \
            if self.r < self.m else ()
        stages = sorted(((self.tau[k], self.wan[k]) for k in self.subset for _ in range(2)), reverse=True)
        pairs = pair_loops(self.ctx, self.subset, tau=self.tau, cross=self.cross, wan=self.wan, site=self.site,
                           sure=self.sure, p=self.p)
        return LoopSlack(stages=tuple(stages), need=need, v=self.v, pairs=pairs) if need or pairs else None

    def roles(self, first: str | None, last: str | None) -> tuple[list[Role], WanEnds | None]:
        """Per group, fastest first, its Role, and the WAN ends the sites demand (None within one site). Without
        known ends (None), every group gets the least of the roles: one crossing and no edge work."""
        base = [self.role(k, first, last, 0) for k in self.by_speed]
        if self.sites == 1:
            return base, None
        ends_free = self.v == 1 and first is not None  # a path's own ends: no crossing there
        variants = tuple((r0, self.role(k, first, last, 1),
                          None if ends_free and k in (first, last) else self.role(k, first, last, 2))
                         for k, r0 in zip(self.by_speed, base))
        if self.v > 1:
            single: frozenset[int] | None = frozenset()  # a ring enters and leaves every site
        elif first is None:
            single = None  # the path's two end sites, unknown: any two
        else:
            single = frozenset({self.site[first], self.site[last]}) if self.site[first] != self.site[last] \
                else frozenset()
        path = None if first is None or self.v > 1 else (self.site[first], self.site[last], self.class_of[first],
                                                          self.class_of[last])
        return base, WanEnds(site=tuple(self.site[k] for k in self.by_speed), variants=variants,
                             sites=self.sites, single=single, v=self.v,
                             loops_of=self.loop_slack if self.may_loop else None, path=path)

    def role(self, k: str, first: str | None, last: str | None, wan: int) -> Role:
        """Group k's Role when `wan` of its block's ends send to another site (at least self.wan[k] each). An end the
        role leaves without a crossing (one end of every block without interleaving when the ends are unknown)
        becomes one when wan = 2. Every send is at least the role's without WAN ends, end by end."""
        v, gs = self.v, self.ctx.groups
        work_in = gs[k].first_s * (k == first), gs[k].last_s * (k == last)
        inner = gs[k].self_send_s
        # with interleaving the wrap-around boundary (last stage -> first) is one more crossing of the end blocks
        crossings = 0 if self.r == 1 else (1 if v == 1 and (first is None or k in (first, last)) else 2)
        c1, c2 = self.cross[k]
        # two crossings go to distinct partners: sorted, at least (c1, c2); one of them to another site: the larger
        # at least wan; both: the smaller too
        far = max(c2, self.wan[k])
        sends = ((c1, c2)[:crossings] if not wan else (self.wan[k],) if crossings == 1 and wan == 1
                 else (c1, far) if wan == 1 else (self.wan[k], far))
        lone = v * sum(sends) + sum(work_in)
        if len(sends) == 2:
            ends = (v * (sends[0] + inner), v * (sends[1] + inner))
        elif len(sends) == 1:
            ends = (v * (sends[0] + inner), v * inner + sum(work_in))
        else:
            ends = (v * inner + work_in[0], v * inner + work_in[1])
        return (v * self.tau[k], lone, *ends, 2 * v * inner, gs[k].slots)

    def feasible(self, c: float, role: list[Role], wan: WanEnds | None = None) -> bool:
        """Whether the p stages can all be formed at cycle c with the L layers.

        A group's stages beyond its first (or first two) add increments [first] + [interior] x n_more, a
        non-increasing list, so the best `spare` extra stages over all groups are the largest increments. A
        group's stage at cycle c holds v floor((c - extra) / (v tau)) layers."""
        v, floor = self.v, math.floor
        spare, base_sum, incs, shapes = self.p, 0, [], []
        for vt, lone, end_a, end_b, inner_extra, slots in role:
            held_a = v * max(0, floor((c - end_a) / vt + FLOOR_EPS))
            held_b = v * max(0, floor((c - end_b) / vt + FLOOR_EPS))
            one = v * max(0, floor((c - lone) / vt + FLOOR_EPS))
            two = held_a + held_b
            pair_ok = held_a >= v and held_b >= v and slots >= 2
            interior = v * max(0, floor((c - inner_extra) / vt + FLOOR_EPS))
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
            shapes.append((one if one >= v else None, two if pair_ok else None, interior, 2 + n_more if pair_ok else 1))
        if spare < 0 or sum(n for _, n in incs) < spare:
            return False
        gained, need = 0, spare
        for value, n in sorted(incs, reverse=True):
            take = min(n, need)
            gained, need = gained + take * value, need - take
            if not need:
                break
        # the WAN's losses are never negative, so a cycle whose capacity falls short without them is decided here, and
        # the loops' loss (the costliest term) is computed only while the capacity leaves room for it
        room = base_sum + gained - self.L
        if room < 0:
            return False
        rises = rising(shapes)  # the greedy count overstates: the exact split (planner/block_capacity.py)
        held: dict[int | None, float] = {}  # per case of single-stage blocks (None: any), for these shapes
        if rises or (wan is not None and wan.loops_of is not None):  # memoised only where the split may be needed
            held = self.held_memo.setdefault(tuple(shapes), held)
        if rises:
            room = self._held(shapes, held, None) - self.L
        ends = 0.0 if wan is None else wan.ends_loss(c)
        if room < ends or wan is None or wan.loops is None:
            return room >= ends
        loops, path = wan.loops, wan.path
        least = max(ends + loops.pooled(c), loops.crossings(c, None, path))  # any case's least loss
        if room < least:
            return False
        # the crossings' loss, split by the single-stage blocks a placement has (they change both the layers and the
        # loss)
        scenarios, refined = self.cases()

        def fits(i: int) -> bool:
            room = self._held(shapes, held, i) - self.L
            return room >= least and room >= loops.crossings(c, scenarios[i][3], path)

        for i in range(refined):
            if fits(i):  # the last case, when refined, holds only if one of its parts does
                refining = i == refined - 1 and refined < len(scenarios)
                return not refining or any(fits(j) for j in range(refined, len(scenarios)))
        return False

    def _held(self, shapes: list, memo: dict, case: int | None) -> float:
        """most_layers of these shapes in case `case` of self.cases() (None: any single-stage blocks), memoised per
        shapes: they change only where a stage's capacity steps, so the bisections over the cycle meet them again."""
        if case not in memo:
            memo[case] = most_layers(shapes, self.p, *(self.cases()[0][case][:3] if case is not None else ()))
        return memo[case]

    def work_at(self, cs: np.ndarray, role: list[Role], wan: WanEnds | None = None) -> np.ndarray:
        """W at every cycle in cs, all at or above C* (where the stages can be formed; planner/block_work.py); with
        `wan`, plus what the crossings' loops (without interleaving) or else the sites' WAN ends move to slower
        groups, at the better of two dual prices of W's programme: with the fastest groups' limits and without."""
        if len(cs) == 1:  # beyond's and least_value's single cycles: block_work.work_one, without numpy's call costs
            charge = None if wan is None else lambda price: float(self._charge(cs, np.array([price]), wan)[0])
            return np.array([work_one(float(cs[0]), role, v=self.v, p=self.p, sure_layers=self.sure_list, L=self.L,
                                      tau=self.tau_list, most=self.most_list, charge=charge)])
        pool, sure, bad = block_pools(cs, role, v=self.v, p=self.p, sure_layers=self.sure_layers)
        work, price = cheapest_fill(pool, sure, self.L, self.tau_arr, self.most_ahead)
        if wan is not None:
            loose, loose_price = cheapest_fill(pool, sure, self.L, self.tau_arr)
            work = np.maximum(work + self._charge(cs, price, wan), loose + self._charge(cs, loose_price, wan))
        return np.where(bad, np.inf, work)

    def _charge(self, cs: np.ndarray, price: np.ndarray, wan: WanEnds) -> np.ndarray:
        """What the crossings' loops (PairLoops, which count the WAN ends' sends too) or, without them, the sites' WAN
        ends add to W at these prices (planner/block_work.py)."""
        if wan.loops is not None and wan.loops.pairs is not None:
            return loops_charge(cs, price, self.classes, lambda c, each: wan.loops.pairs.loss(c, None, wan.path, each))
        return ends_charge(cs, price, site=wan.site, cls=self.classes, roles=wan.variants, v=self.v, sites=wan.sites,
                           single=wan.single)

    def least_value(self, lo: float, hi: float, role: list[Role], wan: WanEnds | None = None) -> float:
        """min over C >= C* of (v m - 1) C + W(C), C* in (lo, hi] (planner/block_work.py, least_value); with `wan`,
        W charged for the WAN."""
        return least_value(lo, hi, self.vm - 1, self.L * self.tau_min, lambda cs: self.work_at(cs, role),
                           None if wan is None else lambda cs: self.work_at(cs, role, wan))

    def smallest_cycle(self, role: list[Role], hi: float, wan: WanEnds | None = None,
                       above: float = 0.0) -> tuple[float, float]:
        """(lo, hi) around C*, the smallest feasible cycle: lo stays below it (a valid bound), hi is feasible.

        Stage capacities only change where c - extra is a multiple of v tau, whole microseconds in the tables'
        units: bisect over whole microseconds, then check that just below the found one is still infeasible. The
        bisection starts just below least_cycle (no placement has a shorter cycle), or at `above`, a cycle already
        ruled out for every placement: a cycle found infeasible bounds C* whatever the verdict on shorter ones (a
        placement that runs at a cycle runs at every longer one)."""
        hi_us = math.ceil(hi * US)
        lo_us = max(0, min(hi_us - 1, max(math.ceil(self.least_cycle(role) * US) - 1, math.floor(above * US))))
        while hi_us - lo_us > 1:
            mid = (lo_us + hi_us) // 2
            if self.feasible(mid / US, role, wan):
                hi_us = mid
            else:
                lo_us = mid
        lo, hi = lo_us / US, hi_us / US
        if not self.feasible(hi * (1 - 1e-9), role, wan):
            return hi * (1 - 1e-9), hi
        while hi - lo > 1e-9 * hi:  # not on the microsecond grid after all (rounding): finish in floating point
            mid = (lo + hi) / 2
            if self.feasible(mid, role, wan):
                hi = mid
            else:
                lo = mid
        return lo, hi

    def least_cycle(self, role: list[Role]) -> float:
        """A cycle no placement in these roles undercuts, without a feasibility check: each group hosts its sure
        stages and a stage of >= v layers beside its cheapest end extras; every stage holds at most what its cheapest
        extras leave, and the stages beyond the sure ones at most what one of the fastest group with spare slots
        would at the least extras of those groups (bounds.integer_cycle_bound)."""
        slots, spare, each = [], [], 0.0
        for (vt, lone, end_a, end_b, inner_extra, n_slots), sure in zip(role, self.sure_stages):
            extra = min(lone, end_a, end_b, inner_extra)
            slots.append((vt / self.v, sure, extra))
            each = max(each, min(lone, end_a, end_b) + vt)
            if n_slots > sure:
                spare.append((vt / self.v, extra))
        left = self.p - sum(n for _, n, _ in slots)
        if left > 0 and spare:
            slots.append((min(t for t, _ in spare), left, min(e for _, e in spare)))
        return max(each, integer_cycle_bound(slots, self.L, self.v))

    def beyond(self, value: float, role: list[Role], wan: WanEnds | None) -> tuple[bool, float]:
        """Whether compute_value(role, wan) is surely at least `value`, by one feasibility check (an order of end
        groups that cannot beat the best found is dropped without its bisection), and a cycle that check found
        feasible (inf: none), where compute_value's bisection can start. W is non-increasing: with c2 where
        (v m - 1) c2 + W(inf) reaches the value and c1 where (v m - 1) c1 + W(c2) does, a cycle in (c1, c2] costs at
        least the value, and one beyond c2 too; so if no placement has a cycle <= c1, every one does. Where c2 <= 0 or
        c1 <= 0 (W(inf) or W(c2) at or above the value, or infinite: nothing holds the layers at a cycle of c2) every
        cycle costs at least that W, so every one reaches the value without the check."""
        if self.vm == 1 or not math.isfinite(value):
            return False, math.inf
        w_inf = float(self.work_at(np.array([1e6]), role)[0])
        c2 = (value - w_inf) / (self.vm - 1)
        if c2 <= 0:
            return True, math.inf
        c1 = (value - float(self.work_at(np.array([c2]), role)[0])) / (self.vm - 1)
        if c1 <= 0:
            return True, math.inf
        if c1 > c2:
            return False, math.inf
        return (False, c1) if self.feasible(c1, role, wan) else (True, math.inf)

    def compute_value(self, role: list[Role], wan: WanEnds | None = None, charged: bool = True,
                      feasible_at: float = math.inf, above: float = 0.0) -> tuple[float, float]:
        """(min over C >= C* of (v m - 1) C + W(C) for these roles, inf if no placement; a cycle below C*, 0 if
        none was sought); W charged for the WAN (planner/block_work.py) if `charged`. `feasible_at`: a cycle already
        found feasible with these roles and WAN ends (beyond), where the bisection for C* starts; `above`: a cycle
        ruled out for every placement (smallest_cycle)."""
        if not math.isfinite(feasible_at):
            feasible_at, wan = self._upper_cycle(role, wan)
            if not math.isfinite(feasible_at):
                return math.inf, 0.0  # this order of ends admits no placement
            if self.vm == 1:  # a single micro-batch: only the work counts, least where every stage holds every layer
                return float(self.work_at(np.array([feasible_at]), role)[0]), 0.0
        lo, hi = self.smallest_cycle(role, feasible_at, wan, above)
        value = self.least_value(lo, hi, role)
        return (value if wan is None or not charged else max(value, self.least_value(lo, hi, role, wan))), lo

    def floor(self, feasible_at: float = math.inf) -> tuple[float, float]:
        """compute_value of the unknown-ends roles without the WAN's charges (the first pass, and the floor of
        the pass with ends), kept on the context per set, depth and interleaving (BoundContext.floors): the search
        bounds an item's set with ends unknown, then known."""
        key = self.floor_at
        if key not in self.ctx.floors:
            self.ctx.floors[key] = self.compute_value(*self.roles(None, None), charged=False, feasible_at=feasible_at)
        return self.ctx.floors[key]

    def _upper_cycle(self, role: list[Role], wan: WanEnds | None) -> tuple[float, WanEnds | None]:
        """A feasible cycle (inf: none) at least every stage's demand with every layer, and the WAN ends to bound
        with: without the loops if no cycle of up to 2^DOUBLINGS times that closes them."""
        every = role + ([r for rs in wan.variants for r in rs[1:] if r is not None] if wan else [])
        c_max = max(vt * self.units + max(lone, end_a, end_b) + inner_extra
                    for vt, lone, end_a, end_b, inner_extra, _ in every if math.isfinite(lone))
        if not self.feasible(c_max, role, wan and replace(wan, loops_of=None)):
            return math.inf, wan
        for _ in range(DOUBLINGS):  # 1F1B's loops through the WAN can make the cycle longer than any stage's demand
            if self.feasible(c_max, role, wan):
                return c_max, wan
            c_max *= 2
        return c_max, replace(wan, loops_of=None)

    def ends_cost(self, first: str | None, last: str | None) -> float:
        """Edge work plus v x the DP tail: the first and last stages pay their class's tail (embedding / LM-head
        gradients) on >= v layers."""
        gs, v = self.ctx.groups, self.v
        if self.p == 1:
            tail = self.tail
        else:
            firsts = self.subset if first is None else (first,)
            lasts = self.subset if last is None else (last,)
            tail = max(self.tail, min(gs[k].tail.first[0] + gs[k].tail.first[1] * v for k in firsts),
                       min(gs[k].tail.last[0] + gs[k].tail.last[1] * v for k in lasts))
        edges = self.edges if first is None else gs[first].first_s + gs[last].last_s
        return edges + v * tail
