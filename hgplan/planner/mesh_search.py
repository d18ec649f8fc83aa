"""Search of the asymmetric (FlagScale process-mesh) family: best-first over outer candidates (B, P), each solved
with CP-SAT (planner/mesh_model.py) against the incumbent, pruned and certified by a capacity lower bound.

B is the samples of one micro-batch step (dp x micro-batch of every mesh), P the pipeline stages. The stock family
with cp = 1 and no interleaving is the special case where every mesh takes the same option, so starting from the
stock search's best plan as the incumbent the asymmetric best is never worse under the tables.

Two lower bounds per candidate (us), the second tighter and dearer: a cheap one over all candidates up front (every
stage's work is at most the cycle, so host h under option o holds at most cycle / tau_o layers on each of
j <= slots_o stages; a knapsack over stage counts gives cycle >= L / cap(P), and the objective is at least
(m - 1) L / cap(P) plus the work of L layers at the fastest per-layer time, least over the sets of sites a plan can
use, each with the crossings between its sites), and one from the candidate's tables when it is first taken
(planner/mesh_sites.py over planner/mesh_bound.py with stages=True: whole layers, memory, boundaries, the embedding
and the head, the tail, the work the fastest hosts cannot hold at the cycle coupled to the stage count, the hosts'
order, the WAN crossings of each set of sites);
a candidate still below the incumbent is solved when it is taken again. A solve that ends at its limit without a
proof is tried again with twice the time after every candidate has had its first solve.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hgplan.domain import NodeGroup
from hgplan.plan import ParallelConfig, Plan, StageAssignment
from hgplan.planner.costs import CostSource, to_us
from hgplan.planner.mesh_sites import MAX_SITES, site_set_bound
from hgplan.planner.mesh_model import MeshSolution, solve_mesh
from hgplan.planner.mesh_tables import MeshTables, build_mesh_tables, host_options
from hgplan.planner.model import SolverParams
from hgplan.planner.options import DTIME_PER_WALL, SearchOptions
from hgplan.planner.spanning import least_spanning_tree
from hgplan.planner.limits import MAX_RETRIES, solve_params, within

STAGE_BOUND = 1
"""A candidate's level on the heap: 0 with the capacity bound, STAGE_BOUND with its tables' stage-coupled bound,
STAGE_BOUND + k when its next solve is its (k + 1)-th. The tables' bound without the stage coupling is not a level of
its own: it cost 6 ms per candidate on two-site against 7 ms for the coupled one, and the candidates it left open
(238 of 631) had their tables built again for the coupled one (measured 2026-11-24: two-site's search 12.9 -> 10.0 s,
256 GPUs 12.3 -> 9.4 s, the same plans)."""


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


def _capacities(rows: list[list[tuple[int, float]]], P: int) -> np.ndarray:
    """Most that p stages hold, for every p <= P: rows[h] = (slots, what one stage holds) per option of host h
    (layers per microsecond of cycle, or layers); a knapsack over how many stages each host takes, j stages of one
    host needing an option with at least j slots (-inf where the hosts cannot take p stages)."""
    j = np.arange(P + 1)
    take = np.clip(j[:, None] - j[None, :], 0, P)  # [total, j] -> total - j
    best = np.full(P + 1, -math.inf)
    best[0] = 0.0
    for opts in rows:
        if not opts:
            continue
        slots, per = np.array([s for s, _ in opts]), np.array([r for _, r in opts], dtype=float)
        # j stages hold j x the most one stage of an option with at least j slots holds
        gain = j * np.where(slots[None, :] >= j[:, None], per[None, :], -math.inf).max(axis=1)
        ok = (j[None, :] >= 1) & (j[None, :] <= slots.max()) & (j[None, :] <= j[:, None])
        best = np.maximum(best, np.where(ok, best[take] + gain[None, :], -math.inf).max(axis=1))
    return best


def _fill_us(costs: CostSource, per_group: list[list[tuple[NodeGroup, ParallelConfig]]]) -> float:
    """Least work of L layers plus the embedding and the LM head at the fastest option's rates."""
    per = [costs.group(g, c) for opts in per_group for g, c in opts]
    if not per:
        return math.inf
    return (costs.model.num_layers * min(x.layer_us for x in per) + min(x.first_us for x in per)
            + min(x.last_us for x in per))


def _crossings_us(costs: CostSource, per_group: list[list[tuple[NodeGroup, ParallelConfig]]]) -> dict:
    """The cheapest crossing between each two sites at these options, both ways, as planner/mesh_sites.py's edges."""
    edges: dict[tuple[str, str], float] = {}
    for a_opts, b_opts in itertools.permutations([row for row in per_group if row], 2):
        a, b = a_opts[0][0], b_opts[0][0]
        if a.site == b.site or (path := costs.fleet.path(a, b)) is None:
            continue
        send = [costs.mesh_link_us(a, b, c) for _, c in a_opts]
        recv = [costs.mesh_link_us(a, b, c) for _, c in b_opts]
        if None in send or None in recv:
            continue
        key = (min(a.site, b.site), max(a.site, b.site))
        edges[key] = min(edges.get(key, math.inf), 2 * (max(min(send), min(recv)) + to_us(path.latency_s)))
    return edges


def _candidates(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions) -> tuple[list[tuple], dict]:
    """(lower bound us, B, P, 0, (cycle us below the least, inf)) of every outer candidate, in the order the search
    takes them, and the fill bound of each B. The bound is the least over the sets of sites a plan can use (at
    most MAX_SITES sites; above, every site at once) of the bound over their groups plus their crossings (the least
    spanning tree of the sites' cheapest crossings, planner/mesh_sites.py)."""
    L, gbs = costs.model.num_layers, costs.train.global_batch_size
    Pmax = min(L, opts.max_pp or L)
    sites = tuple(dict.fromkeys(g.site for g in groups))
    sets = ([U for k in range(1, len(sites) + 1) for U in itertools.combinations(sites, k)]
            if len(sites) <= MAX_SITES else [sites])
    out, fills = [], {}
    for B in (b for b in range(1, gbs + 1) if gbs % b == 0):
        per_group = [[(g, c) for c in host_options(costs, g, B, 1, opts)] for g in groups]
        fill = fills[B] = _fill_us(costs, per_group)
        if not math.isfinite(fill):
            continue
        edges = _crossings_us(costs, per_group) if len(sets) > 1 else {}
        m, least, cycle = gbs // B, np.full(Pmax + 1, math.inf), np.full(Pmax + 1, math.inf)
        for U in sets:
            inside = [row for row in per_group if row and row[0][0].site in U]
            cross = least_spanning_tree(U, edges) if len(U) > 1 and len(sets) > 1 else 0.0
            if not inside or not math.isfinite(cross):
                continue
            cap = _capacities([[(g.num_gpus // c.gpus_per_stage, 1.0 / costs.group(g, c).layer_us) for g, c in row]
                               for row in inside], Pmax)
            with np.errstate(divide="ignore", invalid="ignore"):
                least = np.minimum(least, np.where(cap > 0, (m - 1) * L / cap + _fill_us(costs, inside) + cross,
                                                   math.inf))
                cycle = np.minimum(cycle, np.where(cap > 0, L / cap, math.inf))
        out += [(float(least[P]), B, P, 0, (float(cycle[P]), math.inf)) for P in range(1, Pmax + 1)
                if math.isfinite(least[P])]
    return sorted(out), fills


def mesh_search(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions, *, incumbent_us: float,
                log: Callable[[str], None] | None = None) -> MeshResult:
    """Best-first over (B, P) with the stock family's best (tables us) as the incumbent. The result's bound holds
    for every plan of the family: closed candidates give CP-SAT's bound (or the incumbent when nothing better
    exists), the rest their lower bound."""
    start = time.perf_counter()
    stop_at = opts.stop_at_s(start)
    heap, fills = _candidates(costs, groups, opts)
    heapq.heapify(heap)
    # solves that ended at their limit without a proof wait here, with their tables, for another try with twice the
    # time once every candidate has had its first (best-first among them, like the candidates)
    retries: list[tuple] = []
    res = MeshResult(found=[], candidates_total=len(heap))
    best, closed = incumbent_us, []
    last: tuple[tuple[int, int] | None, MeshTables | None] = (None, None)
    while heap or retries:
        src = heap if heap else retries
        lb, B, P, level, cycle, *kept = heapq.heappop(src)
        if lb >= best * (1 - opts.max_gap):
            res.candidates_pruned += (len(heap) + 1) if src is heap else 0
            closed.append(lb)
            src.clear()
            continue
        remaining = DTIME_PER_WALL * opts.budget_s - res.deterministic_time
        if remaining <= 0 or time.perf_counter() > stop_at:
            res.stopped_by = "budget" if remaining <= 0 else "wall"
            res.candidates_skipped = len(heap) + (src is heap)
            closed.append(min([lb] + [e[0] for e in retries[:1]]))
            break
        # a refined candidate is often taken right after its refinement: its tables are kept for that case (and a
        # retry carries its own)
        t = kept[0] if kept else last[1] if last[0] == (B, P) else build_mesh_tables(costs, B, P, groups, opts)
        last = ((B, P), t)
        if t is None:
            continue
        if level < STAGE_BOUND:
            better = site_set_bound(t, fills[B], cycle_us=cycle, enough_us=best, stages=True)
            if math.isfinite(better.bound_us):
                heapq.heappush(heap, (max(lb, better.bound_us), B, P, STAGE_BOUND, better.cycle_us))
            continue
        params = within(solve_params(opts, level - STAGE_BOUND, remaining), stop_at)
        bound, again = _solve(t, params, lb, best, level - STAGE_BOUND, res, log)
        if res.found:  # a solve's plan is below the incumbent it was given
            best = min(best, res.found[-1].time_us)
        if again:
            heapq.heappush(retries, (bound, B, P, level + 1, cycle, t))
        else:
            closed.append(bound)
    res.found.sort(key=lambda f: f.time_us)
    res.bound_us = min([best] + closed)
    res.wall_time_s = time.perf_counter() - start
    return res


def _solve(t: MeshTables, params: SolverParams, lb: float, best: float, attempt: int, res: MeshResult,
           log: Callable[[str], None] | None) -> tuple[float, bool]:
    """Solve one candidate against the incumbent `best` (its plan, if any, goes to res.found); returns (its bound,
    whether to try it again with twice the time): every solve that ends unproven is tried again, up to MAX_RETRIES
    times, since a candidate whose 1 s solve proved nothing often proves in 1.4 s that nothing beats the incumbent
    (before, a third or fourth try came only after a try that found a plan or raised the bound, and v100-a100-t4's
    candidates that stopped there unproven needed about 2 deterministic seconds each)."""
    upper = math.ceil(best) if math.isfinite(best) else None
    sol = solve_mesh(t, params, upper_bound=upper, log=log)
    res.candidates_solved += attempt == 0
    res.deterministic_time += sol.deterministic_time
    res.statuses[sol.status] = res.statuses.get(sol.status, 0) + 1
    if sol.objective is not None:
        res.found.append(MeshFound(tables=t, solution=sol))
    if sol.status == "INFEASIBLE":
        return (upper if upper is not None else math.inf), False
    if sol.status == "OPTIMAL":
        return max(lb, sol.objective), False
    bound = max(lb, min(sol.bound, upper if upper is not None else math.inf))
    again = attempt < MAX_RETRIES
    return bound, again
