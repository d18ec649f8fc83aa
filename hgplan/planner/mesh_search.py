"""Search of the asymmetric (FlagScale process-mesh) family: best-first over outer candidates (B, P), each solved
with CP-SAT (planner/mesh_model.py) against the incumbent, pruned and certified by a capacity lower bound.

B is the samples of one micro-batch step (dp x micro-batch of every mesh), P the pipeline stages. The stock family
with cp = 1 and no interleaving is the special case where every mesh takes the same option, so starting from the
stock search's best plan as the incumbent the asymmetric best is never worse under the tables.

Two lower bounds per candidate (us), the second tighter and dearer: a cheap one over all candidates up front
(planner/mesh_first.py: the least cycle from the groups' rates and whole layers per stage, the work of the fill with
each stage holding a layer, the boundaries' sends and the WAN crossings, least over the sets of sites a plan can
use), and one from the candidate's tables when it is first taken (planner/mesh_sites.py over planner/mesh_bound.py
with stages=True: memory by stage position, boundaries, the embedding and the head, the tail, the work the fastest
hosts cannot hold at the cycle coupled to the stage count, the hosts' order, the WAN crossings of each set of
sites), and, for plans over several sites, when it is taken again, the same with 1F1B's loops through the crossings
(LOOP_BOUND); a candidate still below the incumbent is solved when it is taken again, after a seed plan built
without CP-SAT (planner/mesh_seed.py) where it spans two or more hosts; candidates of one or two stages get theirs
before the search (EARLY_SEED_STAGES). A solve that ends at its limit without a proof is tried again with twice the
time after every candidate has had its first solve, its bound first split at a level of the plans' tail
(planner/mesh_tail.py) where it is still below the incumbent by more than the search's gap; after that first retry,
only while each try gets somewhere (_got_somewhere).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from hgplan.domain import NodeGroup
from hgplan.plan import Plan, StageAssignment
from hgplan.planner.costs import CostSource
from hgplan.planner.mesh_bound import CandidateBound
from hgplan.planner.mesh_first import first_bounds
from hgplan.planner.mesh_cuts import cycle_cuts
from hgplan.planner.mesh_sites import site_set_bound
from hgplan.planner.mesh_wan import prices_loops
from hgplan.planner.mesh_model import MeshSolution, pair_solves, solve_mesh
from hgplan.planner.mesh_seed import SEED_HOSTS, seed_plan
from hgplan.planner.mesh_tail import BoundOf, tail_split
from hgplan.planner.mesh_tables import MeshTables, build_mesh_tables
from hgplan.planner.model import SolverParams
from hgplan.planner.options import DTIME_PER_WALL, SearchOptions
from hgplan.planner.limits import OutOfTime, solve_params, within

LOOP_BOUND = 1
STAGE_BOUND = 2
"""A candidate's level on the heap: 0 with the capacity bound, LOOP_BOUND with its tables' stage-coupled bound where
1F1B's loops through the crossings are still to be priced (mesh_wan.prices_loops: plans over several sites),
STAGE_BOUND with its tables' whole bound, STAGE_BOUND + k when its next solve is its (k + 1)-th. The loops are a
level of their own because they cost: the bound with them took 4.3 s on the first eight candidates of the eight-group
four-site fleet of benchmarks/search_scaling.py --beyond, 3.1 s without, and raised none of them to the incumbent
(0.909-0.964 of it), and computed for every candidate at once that fleet's mesh search ended at 24.5% instead of
14.2% (2026-11-27); taken best-first, only candidates that are the least left get them. The tables' bound without
the stage coupling is not a level of its own: it cost 6 ms per candidate on two-site against 7 ms for the coupled
one, and the candidates it left open (238 of 631) had their tables built again for the coupled one (measured
2026-11-24: two-site's search 12.9 -> 10.0 s, 256 GPUs 12.3 -> 9.4 s, the same plans)."""

EARLY_SEED_STAGES = 2
"""Candidates of at most this many stages (below the incumbent by their first bound) get their seed before the search,
cheapest first: such seeds cost 0.02-0.1 s, and a better incumbent from the start makes every solve and bound after it
quicker. On v100-a100-t4 the search's best is the seed of B = 8, P = 2 (9,851,530 us against the stock best's
10,167,573), which best-first order took last, after 20 solves under weaker incumbents; seeded first (three seeds,
0.19 s), the mesh search took 16.5 s instead of 18.3 s (medians of six alternating runs on a slow day, the same plan).
The other benchmark fleets seed none or up to three candidates in 0.02-0.16 s."""

MESH_RETRIES = 5
"""A mesh solve that stops at its limit is tried again at most this many times, each with twice the deterministic time
(1, 2, 4, 8, 16 and 32 times the first try's), while the budget lasts: retries come only once every candidate has had
its first solve, so they spend what the search would leave unused. On the 504-GPU two-site fleet of
benchmarks/mesh_search.py (2026-11-27) B = 4, P = 25 ended its fourth try (8 deterministic s) unproven, the search
complete after 33 s of its 60 at a gap of 1.10% (that candidate's tables' bound), while a fifth proves in 9.4
deterministic seconds that no plan of it beats the 8.328 s the third found (the stock family keeps limits.MAX_RETRIES,
3). Since 2026-11-29 a try after the first retry comes only after a try that got somewhere (_got_somewhere); that
504-GPU candidate has been proven in its first try since the pairs' cuts and threads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshFound:
    """A plan one solve found, with its tables."""

    tables: MeshTables
    solution: MeshSolution

    @property
    def time_us(self) -> float:
        """The tables' iteration time (us)."""
        return float(self.solution.objective)

    def plan(self) -> Plan:
        """The plan as the cost model and the validator see it: the first mesh's degrees as the plan's, every
        stage's own when the meshes differ."""
        t, sol = self.tables, self.solution
        choice = dict(sol.choice)
        cfgs = [t.options[h][choice[h]] for h in sol.assign]
        first = cfgs[0]
        same = all((c.tp, c.dp, c.recompute) == (first.tp, first.dp, first.recompute) for c in cfgs)
        stages = tuple(StageAssignment(node_group=t.hosts[h], num_layers=n,
                                       **({} if same else {"tp": c.tp, "dp": c.dp, "recompute": c.recompute}))
                       for h, n, c in zip(sol.assign, sol.layers, cfgs))
        return Plan(config=first, stages=stages)


@dataclass(slots=True, kw_only=True)
class MeshResult:
    """What the mesh search found and proved (tables' microseconds)."""

    found: list[MeshFound]
    candidates_total: int
    candidates_solved: int = 0
    candidates_pruned: int = 0
    candidates_skipped: int = 0
    bound_us: float = math.inf
    deterministic_time: float = 0.0
    wall_time_s: float = 0.0
    stopped_by: str = "complete"
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def best_us(self) -> float | None:
        """Best plan's tables objective."""
        return self.found[0].time_us if self.found else None


def mesh_search(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions, *, incumbent_us: float,
                log: Callable[[str], None] | None = None) -> MeshResult:
    """Best-first over (B, P) with the stock family's best (tables us) as the incumbent. The result's bound holds
    for every plan of the family: closed candidates give CP-SAT's bound (or the incumbent when nothing better
    exists), the rest their lower bound."""
    start = time.perf_counter()
    stop_at = opts.stop_at_s(start)
    heap, fills, floors = first_bounds(costs, groups, opts, incumbent_us)
    heapq.heapify(heap)
    # solves that ended at their limit without a proof wait here, with their tables, for another try with twice the
    # time once every candidate has had its first (best-first among them, like the candidates)
    retries: list[tuple] = []
    res = MeshResult(found=[], candidates_total=len(heap))
    best, closed = incumbent_us, []
    early: dict[tuple[int, int], MeshTables | None] = {}
    for lb, B, P, *_ in sorted(heap):
        if P <= EARLY_SEED_STAGES and lb < best * (1 - opts.max_gap) and time.perf_counter() <= stop_at:
            t = early[(B, P)] = build_mesh_tables(costs, B, P, groups, opts)
            if t is not None and len(t.hosts) >= SEED_HOSTS:
                best = _seed(t, best, res)
    last: tuple[tuple[int, int] | None, MeshTables | None] = (None, None)
    while heap or retries:
        src = heap if heap else retries
        lb, B, P, level, cycle, *kept = heapq.heappop(src)
        if lb >= best * (1 - opts.max_gap):
            closed.append(lb)
            band = in_band(lb, best, level, opts.max_gap)
            if band is not None and src is heap and time.perf_counter() <= stop_at:
                best = _in_band(costs, groups, opts, (B, P), last, best, res, no_seed=(B, P) in early or not band)
                continue
            res.candidates_pruned += (len(heap) + 1) if src is heap else 0
            src.clear()
            continue
        remaining = DTIME_PER_WALL * opts.budget_s - res.deterministic_time
        if remaining <= 0 or time.perf_counter() > stop_at:
            res.stopped_by = "budget" if remaining <= 0 else "wall"
            res.candidates_skipped = len(heap) + (src is heap)
            closed.append(min([lb] + [e[0] for e in retries[:1]]))
            break
        # a refined candidate is often taken right after its refinement: its tables are kept (a retry has its own)
        t = kept[0] if kept else last[1] if last[0] == (B, P) else early[(B, P)] if (B, P) in early else \
            build_mesh_tables(costs, B, P, groups, opts)
        pairs = kept[1] if kept else None  # a retry of a candidate solved per pair: the pairs still open
        last = ((B, P), t)
        if t is None:
            continue
        if level < STAGE_BOUND:
            looped = level == LOOP_BOUND
            try:
                better = _bound_of(fills[B], floors.get((B, P)), best, stop_at)(t, cycle_us=cycle, loops=looped)
            except OutOfTime:  # the deadline passed during the bound: the candidate as it was, and the search stops
                heapq.heappush(heap, (lb, B, P, level, cycle))
                continue
            after = STAGE_BOUND if looped or not prices_loops(t) else LOOP_BOUND
            if math.isfinite(better.bound_us):
                heapq.heappush(heap, (max(lb, better.bound_us), B, P, after, better.cycle_us))
            continue
        if level == STAGE_BOUND and len(t.hosts) >= SEED_HOSTS and (B, P) not in early:
            best = _seed(t, best, res)
        attempt = level - STAGE_BOUND
        bound, again, pairs = _solve(t, _params_for(opts, attempt, remaining, stop_at), lb, best, attempt, res, log,
                                     pairs, (fills[B], cycle[0]))
        if res.found:  # a solve's plan is below the incumbent it was given
            best = min(best, res.found[-1].time_us)
        if again:
            if attempt == 0 and bound < best * (1 - opts.max_gap) and time.perf_counter() <= stop_at:
                # before its retries, the bound split at the tail (unless the deadline passes first)
                try:
                    bound = tail_split(t, CandidateBound(bound, cycle),
                                       _bound_of(fills[B], floors.get((B, P)), best, stop_at), best).bound_us
                except OutOfTime:
                    pass
            heapq.heappush(retries, (bound, B, P, level + 1, cycle, t, pairs))
        else:
            closed.append(bound)
    res.found.sort(key=lambda f: f.time_us)
    res.bound_us = min([best] + closed)
    res.wall_time_s = time.perf_counter() - start
    return res


def _bound_of(fill_us: float, floors_us: dict | None, best: float, stop_at: float | None) -> BoundOf:
    """The tables' whole bound (site_set_bound with the stage coupling) of a candidate, at the level its heap entry
    or mesh_tail.tail_split asks for; limits.OutOfTime past stop_at."""
    def bound(tables: MeshTables, *, cycle_us: tuple[float, float], loops: bool):
        return site_set_bound(tables, fill_us, cycle_us=cycle_us, enough_us=best, stages=True, floors_us=floors_us,
                              loops=loops, stop_at_s=stop_at)
    return bound


def in_band(lb: float, best: float, level: int, gap: float) -> bool | None:
    """For a candidate the search's gap prunes (its bound lb at least best (1 - gap), best the incumbent): None when
    lb is at or above best (1 + gap), past the band _in_band seeds; else whether it is seeded there: below the
    incumbent always, above it only with the tables' whole bound taken (level STAGE_BOUND or more)."""
    if lb >= best * (1 + gap):
        return None
    return lb < best or level >= STAGE_BOUND


def _in_band(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions, candidate: tuple[int, int],
             last: tuple, best: float, res: MeshResult, *, no_seed: bool = False) -> float:
    """A candidate over several sites pruned though its bound is within the search's gap of the incumbent `best`,
    either side of it (where the objective tells no plan apart from the incumbent), still gets its seed (_seed), which
    the final ranking simulates: there the closed form's 1F1B loops over-charge a plan against the simulator (on the
    three-site benchmark fleet the returned plan, the seed of B = 16, P = 14, is 4.265 s by the closed form and 4.071 s
    by the simulator, and the bound across sites prunes that candidate at 1.0001 of the incumbent, 0.9972 before the
    ends' own work in the bound, mesh_dual.end_work). Above the incumbent only a candidate whose tables' whole bound
    was taken gets one (in_band; on the 504-GPU fleet seeding those bounded by a cheaper level too took 2 s). Within
    one site there are no loops to over-charge, and seeding there changed which plans the search proves (v100-a100-t4
    returned 9.844 s instead of 9.764 s), so those are pruned as before. `no_seed`: pruned without one (seeded before
    the search, or above the incumbent by a cheaper bound). Returns the incumbent after it."""
    res.candidates_pruned += 1
    if len({g.site for g in groups}) < 2 or no_seed:
        return best
    t = last[1] if last[0] == candidate else build_mesh_tables(costs, *candidate, groups, opts)
    return _seed(t, best, res) if t is not None and t.loops and len(t.hosts) >= SEED_HOSTS else best


def _seed(t: MeshTables, best: float, res: MeshResult) -> float:
    """Before a candidate's first solve, planner/mesh_seed.py's plan (statuses SEED_FOUND when it beats the incumbent
    `best`, SEED_ABOVE when not, SEED_NONE without one); returns the incumbent after it. A plan above the incumbent
    goes to res.found too: the final ranking simulates the best RERANKED of them, and the simulator can put a plan
    below one that the closed form's 1F1B loops put above it."""
    began = time.perf_counter()
    seed = seed_plan(t)
    kind = "SEED_NONE" if seed is None else "SEED_FOUND" if seed[0] < best else "SEED_ABOVE"
    res.statuses[kind] = res.statuses.get(kind, 0) + 1
    if seed is None:
        return best
    objective, assign, choice, layers = seed
    res.found.append(MeshFound(tables=t, solution=MeshSolution(
        status="SEED", objective=objective, bound=0.0, assign=assign, choice=choice, layers=layers,
        deterministic_time=0.0, wall_time_s=time.perf_counter() - began)))
    return min(best, float(objective))


def _params_for(opts: SearchOptions, attempt: int, remaining: float,
                stop_at: float | None) -> Callable[[float], SolverParams]:
    """A try's solver parameters, for a number of times its deterministic limit (mesh_model.pair_solves), within
    the budget left and the search's deadline."""
    return lambda times: within(solve_params(opts, attempt, remaining, times=times), stop_at)


def _solve(t: MeshTables, params_for: Callable[[float], SolverParams], lb: float, best: float, attempt: int,
           res: MeshResult, log: Callable[[str], None] | None, pairs: tuple | None,
           fill_floor: tuple[float, float]) -> tuple[float, bool, tuple | None]:
    """Solve one candidate against the incumbent `best` (its plan, if any, goes to res.found; `params_for`: see
    _params_for), with the cuts of planner/mesh_cuts.py (from fill_floor: the candidate's fill work and cycle floor,
    and `pairs`, the pairs of end hosts its try before left open; none left to solve: no solve, BOUNDED, the candidate
    closed at the incumbent); returns (its bound, whether to try it again with twice the time, the pairs of end hosts
    that try needs to solve again when the candidate is solved per pair, else None):
    a solve that ends unproven is tried again, up to MESH_RETRIES times: once whatever it did, since a candidate whose
    1 s solve proved nothing often proves in 1.4 s that nothing beats the incumbent, then while each try gets
    somewhere (_got_somewhere). (Until 2026-11-24 a third or fourth try came only after a try that found a plan or
    raised the bound, and v100-a100-t4's candidates that stopped there unproven needed about 2 deterministic seconds
    each; since the pairs' cuts that fleet's candidates are all proven in their first try.)"""
    upper = math.ceil(best) if math.isfinite(best) else None
    cuts = cycle_cuts(t, *fill_floor, math.inf if upper is None else upper, pairs)
    if cuts.pairs_us == {}:  # the cuts leave no plan below the incumbent (of any pair of end hosts): no solve
        res.statuses["BOUNDED"] = res.statuses.get("BOUNDED", 0) + 1
        res.candidates_pruned += attempt == 0
        return upper, False, None
    sol = solve_mesh(t, params_for(pair_solves(t, cuts)), upper_bound=upper, log=log, cuts=cuts)
    res.candidates_solved += attempt == 0
    res.deterministic_time += sol.deterministic_time
    res.statuses[sol.status] = res.statuses.get(sol.status, 0) + 1
    if sol.objective is not None:
        res.found.append(MeshFound(tables=t, solution=sol))
    if sol.status == "INFEASIBLE":
        return (upper if upper is not None else math.inf), False, None
    if sol.status == "OPTIMAL":
        return max(lb, sol.objective), False, None
    bound = max(lb, min(sol.bound, upper if upper is not None else math.inf))
    return bound, attempt < MESH_RETRIES and (attempt == 0 or _got_somewhere(sol, lb, pairs)), sol.open_pairs


def _got_somewhere(sol: MeshSolution, lb: float, pairs: tuple | None) -> bool:
    """Whether an unproven retry earns the next (MESH_RETRIES): it found a plan below the incumbent, raised CP-SAT's
    bound above the candidate's own (lb), or proved a pair of end hosts its try before left open. The first retry
    comes whatever the first try did (a solve that proved nothing in 1 s often proves in 1.4 s); after it, as the
    stock family's retries (planner/search.py), a solve whose relaxation stays below the candidate's bound gains
    nothing from more time: on the three- and four-site 1024-GPU fleets of benchmarks/mesh_search.py, whose one open
    candidate each (B = 16, P = 16 and P = 15, four and five hosts) kept CP-SAT's bound at 0.82-0.83 of the incumbent
    against the candidate's 0.99 through five and four retries (2 to 16 deterministic seconds each, the last cut by
    the deadline): the retries took the last 33 and 42 s of the 60 s budget and changed nothing."""
    return sol.objective is not None or sol.bound > lb or (
        pairs is not None and sol.open_pairs is not None and len(sol.open_pairs) < len(pairs))
