"""The proof of the gap on the reported iteration time, after the search (docs/planner.md, "What the gap means").

Given the best reported time T of a plan of the family, every candidate is either pruned by a cheap lower bound of
the simulated time (at least T (1 - max gap)), or its lower-bound model (planner/path_model.py) is solved below T:
infeasible means no plan of it beats T; otherwise CP-SAT's bound holds for its plans, and a plan it finds is handed
back, since its simulated time may beat T. When the time limit ends first, the candidates left keep their cheap
bounds. The smallest of all these is a lower bound on the simulated time of every plan of the family.

Legend: L layers, p stages, v virtual stages per rank, m micro-batches; times in microseconds unless named _s.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from hgplan.costmodel.pipeline import PathCounts
from hgplan.plan import ParallelConfig
from hgplan.planner.bounds import FLOOR_EPS, BoundContext, integer_cycle_bound
from hgplan.planner.candidates import Candidate, cand_key
from hgplan.planner.costs import US, CostSource, capacity_mib
from hgplan.planner.model import Solution
from hgplan.planner.options import SearchOptions
from hgplan.planner.progress import Progress, ProgressFn, Throttle
from hgplan.planner.path_model import build_path_tables, solve_path
from hgplan.planner.limits import MAX_RETRIES, solve_params, within
from hgplan.planner.found import Found
from hgplan.planner.tables import build_tables


@dataclass(slots=True, kw_only=True)
class Certificate:
    """What the proof established: bound_us holds for the simulated time of every plan of the family."""

    bound_us: float
    solved: int = 0
    pruned: int = 0
    skipped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    deterministic_time: float = 0.0
    stopped_by: str = "complete"
    found: list[Found] = field(default_factory=list)
    """Plans the lower-bound model found below T (status 'BOUND_' + CP-SAT's), to be evaluated."""
    cuts: dict[tuple[int, int, int], list[PathCounts]] = field(default_factory=dict)
    """Per schedule shape (p, m, v), the simulator's critical chains found so far: each bounds every plan of that
    shape, whatever its stage times, so every candidate of the shape gets them."""
    rounds: int = 0
    """Re-solves after adding chains."""
    retried: int = 0
    """Solves of configurations whose first solve stopped at its limit below the target, with more time."""
    unsettled: int = 0
    """Configurations still below the target when the proof ended whose solves all stopped at their limits."""
    seen: set[PathCounts] = field(default_factory=set)
    """Every chain in `cuts`, whatever its shape: the membership test of each new chain."""


def _most_fit(rows: tuple[tuple[int, int], ...], cap_mib: int, L: int) -> int:
    """max over the rows (a, b) of costs.layers_that_fit(a, b, cap_mib, L), inlined: the proof's cheap bounds
    evaluate it for every stage position of every group of every configuration (16 million times on `large`)."""
    return max((cap_mib - a) // b if b > 0 else (L if a <= cap_mib else -1) for a, b in rows)


def _slots(costs: CostSource, cfg: ParallelConfig, ctx: BoundContext, L: int) -> list[tuple[float, int, int]]:
    """(seconds per layer, stages, most layers per stage) of every class of interchangeable groups that can host a
    stage of cfg (its groups' stages together), fastest first. Per layer one microsecond less than the tables'
    (rounded to nearest); most layers: what the least loaded stage position fits in memory, in whole chunks of v (a
    stage needs at least v). The classes' slots add up to the groups' one by one (floating-point sums aside)."""
    v = cfg.vpp
    out = []
    for members in ctx.classes:  # interchangeable groups (planner/classes.py) have the same costs and memory
        gb, g = ctx.groups[members[0]], costs.fleet.group(members[0])
        most = min(L, _most_fit(costs.memory(cfg, g), capacity_mib(g), L)) // v * v
        if most >= v and gb.slots > 0:
            out.append((gb.layer_s - 1 / US, len(members) * min(gb.slots, cfg.pp), most))
    return sorted(out)


def least_fill_s(slots: list[tuple[float, int, int]], *, L: int, p: int, v: int,
                 cycle_s: float = math.inf) -> float:
    """The least forward + backward work of one micro-batch over p stages (inf when no p stage slots, not even the
    roomiest, hold the layers): v layers on each of the p fastest slots, the other L - p v layers on the fastest
    room left anywhere. With cycle_s, no stage's work exceeds it: a slot then holds at most the whole chunks of v
    layers that fit in cycle_s, which can only raise the least fill."""
    usable = []
    for tau, n, most in slots:
        cap = most if not math.isfinite(cycle_s) else min(most, math.floor(cycle_s / (v * tau) + FLOOR_EPS) * v)
        if cap >= v and n > 0:
            usable.append((tau, n, cap))
    usable.sort()  # fastest first
    need, held = p, 0
    for _, n, cap in sorted(usable, key=lambda e: -e[2]):
        take = min(n, need)
        held, need = held + take * cap, need - take
    if need > 0 or held < L:
        return math.inf
    work, need, extra = 0.0, p, L - p * v
    for tau, n, _ in usable:
        take = min(n, need)
        work, need = work + take * v * tau, need - take
    for tau, n, cap in usable:
        take = min(extra, n * (cap - v))
        work, extra = work + take * tau, extra - take
    return work


CYCLE_STEPS = 14
"""Bisection steps of cheap_bound_us's balance of cycle and fill (each halves the interval; the bound is valid after
any number of them)."""


def _edges_s(ctx: BoundContext) -> float:
    """The least embedding (forward + backward on the first stage) plus LM-head work (on the last) of any plan: the
    bound context's, one microsecond under each (they are rounded to the nearest)."""
    first = min(gb.first_s for gb in ctx.groups.values())
    last = min(gb.last_s for gb in ctx.groups.values())
    return max(0.0, first - 1 / US) + max(0.0, last - 1 / US)


def cycle_bound_us(costs: CostSource, cand: Candidate, L: int) -> float:
    """m x the least cycle at which the stage slots of the candidate's groups (per class, as _slots) hold the L
    layers, memory aside: at or
    below cheap_bound_us (whose slots are those of the groups whose memory holds a stage, so whose least cycle is no
    shorter; 1e-9 under it, for rounding), and without the memory rows that make up most of cheap_bound_us' time.
    The proof computes cheap_bound_us only for the configurations this one leaves below the target."""
    cfg = cand.cfg
    m = cfg.num_microbatches(costs.train.global_batch_size)
    slots = [(gb.layer_s - 1 / US, n * min(gb.slots, cfg.pp), 0.0) for gb, n in cand.ctx.per_class if gb.slots > 0]
    return US * m * integer_cycle_bound(slots, L, cfg.vpp) * (1 - 1e-9)


def cheap_bound_us(costs: CostSource, cand: Candidate, L: int) -> float:
    """A lower bound (us) on the simulated time of every plan of a candidate. Two facts hold for every plan, whose
    most loaded stage does C of work per micro-batch and whose stages W in all (a = 1/v): m C (that stage runs all
    m micro-batches) and K W with K = a / (1 - (1 - a / m)^p) (the path of every stage, a x the work before it + m x
    its own, cannot all be shorter, or they would not add up to W). C is at least the least cycle c0 at which the
    slots hold the layers, and W at least the least fill of stages of at most C each, plus the embedding and LM
    head; the fill falls as C grows, so the bound is min over C >= c0 of max(m C, K W(C)), found by bisection
    (docs/planner.md, "What the gap means")."""
    cfg = cand.cfg
    p, v, m = cfg.pp, cfg.vpp, cfg.num_microbatches(costs.train.global_batch_size)
    slots = _slots(costs, cfg, cand.ctx, L)
    fill = least_fill_s(slots, L=L, p=p, v=v)
    if not math.isfinite(fill):
        return math.inf
    edges = _edges_s(cand.ctx)
    a = 1.0 / v
    k = a / (1.0 - (1.0 - a / m) ** p) if v * m > 1 else 1.0

    def fill_wins(c: float) -> bool:  # the fill's term is still above the cycle's at cycle c
        return k * (least_fill_s(slots, L=L, p=p, v=v, cycle_s=c) + edges) > m * c

    lo = integer_cycle_bound([(tau, n, 0.0) for tau, n, _ in slots], L, v)
    if not fill_wins(lo):
        return US * m * lo
    hi = max(lo, max(tau * most for tau, _, most in slots))  # every slot at its memory's limit: W(hi) = fill
    if fill_wins(hi):
        return US * k * (fill + edges)
    for _ in range(CYCLE_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fill_wins(mid) else (lo, mid)
    return US * m * lo


@dataclass(slots=True, kw_only=True)
class _Proof:
    """One proof under way: what each solve needs, and T, the best reported time so far."""

    costs: CostSource
    cands: list[Candidate]
    opts: SearchOptions
    hints: dict[tuple, Found]
    hosts: dict
    cert: Certificate
    dtime_budget: float
    stop_at_s: float
    reported_s: Callable[[Found], float | None] | None
    best_us: float

    def target_us(self) -> float:
        return self.best_us * (1 - self.opts.max_gap)

    def left(self) -> float:
        """Deterministic time left; <= 0 also once the wall clock has passed stop_at_s."""
        return -1.0 if time.perf_counter() > self.stop_at_s else self.dtime_budget - self.cert.deterministic_time

    def solve(self, i: int, bound_us: float, attempt: int = 0) -> tuple[float, bool]:
        """Solve candidate i (whose bound so far is bound_us); a plan it finds that the reported model runs faster
        than T lowers T for what follows. Returns the candidate's bound and whether it is settled."""
        cert = self.cert
        found = len(cert.found)
        bound, settled = _certify_one(self.costs, self.cands[i], bound_us, self.best_us, self.opts, self.hints,
                                      self.hosts, cert, self.left(), self.stop_at_s, attempt=attempt)
        if settled:
            cert.bound_us = min(cert.bound_us, bound)
        faster = self.reported_s(cert.found[-1]) if self.reported_s is not None and len(cert.found) > found else None
        if faster is not None and faster * US < self.best_us:  # a plan of the family at T' < T: what follows needs T'
            self.best_us = faster * US
            cert.bound_us = min(cert.bound_us, self.best_us)
        return bound, settled


def certify(costs: CostSource, cands: list[Candidate], best_s: float, opts: SearchOptions, *,
            hints: dict[tuple, Found], dtime_budget: float, stop_at_s: float,
            progress: ProgressFn | None = None,
            reported_s: Callable[[Found], float | None] | None = None) -> Certificate:
    """Bound the simulated time of every plan of `cands` (the whole listed family) given a plan of best_s.
    `reported_s` (the reported model's time of a plan, None when the validator refuses it) lets a plan the proof
    finds lower T for the candidates after it."""
    L = costs.model.num_layers
    # lazily: every configuration on a heap by its cycle bound; one popped with that bound below what could matter
    # gets its cheap bound and goes back, so the configurations are taken in the order of their cheap bounds (each is
    # at or above its cycle bound) while only those the cycle bound leaves below the target pay for one
    heap = [(cycle_bound_us(costs, c, L), c.key, 0, i) for i, c in enumerate(cands)]
    heapq.heapify(heap)
    cert = Certificate(bound_us=best_s * US)
    run = _Proof(costs=costs, cands=cands, opts=opts, hints=hints, hosts={g.key: g for g in costs.fleet.groups},
                 cert=cert, dtime_budget=dtime_budget, stop_at_s=stop_at_s, reported_s=reported_s,
                 best_us=best_s * US)
    report = Throttle(progress)
    unsettled: list[tuple[float, int]] = []  # (bound, index) of solves that stopped at their limit below the target
    while heap:
        report(lambda: Progress("proof", len(cands) - len(heap), len(cands), "configurations taken", run.best_us / US,
                                min(cert.bound_us, heap[0][0]) / US))
        cheap, key, level, i = heapq.heappop(heap)
        if level == 0 and (cheap < run.target_us() or cheap < cert.bound_us) and run.left() > 0:
            heapq.heappush(heap, (cheap_bound_us(costs, cands[i], L), key, 1, i))
            continue
        if cheap >= run.target_us():
            cert.pruned = len(heap) + 1
            cert.bound_us = min(cert.bound_us, cheap)
            break
        if run.left() <= 0:
            cert.stopped_by = "budget" if cert.deterministic_time >= dtime_budget else "wall"
            cert.skipped = len(heap) + 1
            cert.bound_us = min(cert.bound_us, cheap)
            break
        bound, settled = run.solve(i, cheap)
        if not settled:
            unsettled.append((bound, i))
    left_open = [bound for bound, _ in _retry_unsettled(run, unsettled)]
    cert.unsettled = sum(bound < run.target_us() for bound in left_open)
    cert.bound_us = min([cert.bound_us] + left_open)
    return cert


def _retry_unsettled(run: _Proof, unsettled: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Once every configuration has had its solve (or the budget ended), those whose solve stopped at its limit
    below the target are solved again, lowest bound first, with twice the time at each round (as the search's
    items), up to MAX_RETRIES rounds or the end of the budget. Returns the ones still open, each with the best bound
    any of its solves proved (each holds for all of the configuration's plans)."""
    for attempt in range(1, MAX_RETRIES + 1):
        still = []
        for bound, i in sorted(unsettled):
            if bound >= run.target_us() or run.left() <= 0:
                still.append((bound, i))
                continue
            run.cert.retried += 1
            again, settled = run.solve(i, bound, attempt)
            if not settled:
                still.append((max(bound, again), i))
        unsettled = still
    return unsettled


MAX_CUT_ROUNDS = 8
"""Re-solves of one candidate with the critical chains of its model's optimum added, at most."""
MAX_CUTS = 400
"""Chains kept per schedule shape (each is one more constraint in every model of the shape)."""


def _solve_with_cuts(pt, cert: Certificate, opts: SearchOptions, *, upper: int, hint, left: float,
                     stop_at_s: float, patience_dtime: float = math.inf, beat: float = math.inf,
                     attempt: int = 0) -> Solution:
    """Solve the candidate's lower-bound model; while its optimum simulates longer than its bound (on the same
    rounded-down tables), add that plan's critical chains (valid for every plan of the shape) and solve again.

    Returns the plan of the round that simulates fastest (a later round, stopped at its limit, can return a worse
    one than an earlier round's optimum), with the highest bound any round proved (each is valid for every plan of
    the candidate) and the last round's status. Polishing, which wants a plan, not a bound, passes patience_dtime
    and beat (the simulated time of the plan it starts from): once the rounds have spent that much deterministic
    time, they stop at the first whose plan simulates no faster than both the best before it and beat. Attempt n
    gives each round 2^n times the per-solve time."""
    t = pt.base
    cuts = cert.cuts.setdefault((t.pp, t.microbatches, t.vpp), [])
    started, budget_end = cert.deterministic_time, cert.deterministic_time + left
    best: tuple[int, Solution] | None = None
    bound = -math.inf
    for rnd in range(MAX_CUT_ROUNDS + 1):
        params = within(solve_params(opts, attempt, max(0.0, budget_end - cert.deterministic_time)), stop_at_s)
        sol = solve_path(pt, params, upper_bound=upper, hint=hint, cuts=tuple(cuts))
        cert.solved += rnd == 0 and attempt == 0
        cert.rounds += rnd > 0
        cert.deterministic_time += sol.deterministic_time
        cert.statuses[sol.status] = cert.statuses.get(sol.status, 0) + 1
        bound = max(bound, sol.bound)
        if sol.objective is None:
            break
        assign, layers = list(sol.assign), list(sol.layers)
        value, chains = pt.simulated(assign, layers)
        improved = best is None or value < best[0]
        if improved:
            best = (value, sol)
        if sol.status != "OPTIMAL" or rnd == MAX_CUT_ROUNDS or time.perf_counter() > stop_at_s \
                or (not (improved and value < beat) and cert.deterministic_time - started >= patience_dtime):
            break
        times, tails = _times(pt, sol), pt.tails(assign, layers)
        new = [c for c in chains  # the chains that cut this plan off, once each
               if c.weight(*times, vpp=t.vpp) + t.vpp * tails[c.stage] > sol.objective and c not in cert.seen]
        if value <= sol.objective or not new or len(cuts) >= MAX_CUTS:
            break
        cuts.extend(new)
        cert.seen.update(new)
        hint = (assign, layers)
    if best is None:
        return sol
    return replace(best[1], status=sol.status, bound=bound)


def _times(pt, sol: Solution) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """A solution's stage and boundary times on the lower-bound tables (forward, backward, sends twice, latency)."""
    fwd, bwd = pt.stage_times(list(sol.assign), list(sol.layers))
    xs, lat = pt.edge_times(list(sol.assign))
    return fwd, bwd, xs, xs, lat


def _certify_one(costs: CostSource, cand: Candidate, cheap: float, best_us: float, opts: SearchOptions,
                 hints: dict[tuple, Found], hosts: dict, cert: Certificate, left: float, stop_at_s: float, *,
                 attempt: int = 0) -> tuple[float, bool]:
    """Solve one candidate's lower-bound model below best_us: the bound it proves for the candidate's plans, and
    whether more time would not raise it (infeasible below best_us, optimal, or at the target already)."""
    cfg = cand.cfg
    tables = build_tables(costs, cfg, [g for g in costs.fleet.groups if g.key in cand.ctx.groups])
    assert tables is not None, "a candidate is listed only when some group can host its stages"
    pt = build_path_tables(costs, tables, hosts)
    prev = hints.get(cand_key(cfg))
    hint = None
    if prev is not None:  # the search's plan of this candidate, relabelled into these tables' groups
        hint = ([tables.groups.index(prev.tables.groups[k]) for k in prev.solution.assign], list(prev.solution.layers))
    sol = _solve_with_cuts(pt, cert, opts, upper=math.ceil(best_us * cfg.vpp), hint=hint, left=left,
                           stop_at_s=stop_at_s, attempt=attempt)
    if sol.status == "INFEASIBLE":
        return best_us, True
    if sol.objective is not None:
        cert.found.append(Found(cfg=cfg, tables=tables, solution=Solution(
            status="BOUND_" + sol.status, objective=sol.objective, bound=sol.bound, assign=sol.assign,
            layers=sol.layers, deterministic_time=sol.deterministic_time, wall_time_s=sol.wall_time_s)))
    bound = max(cheap, min(sol.bound, math.ceil(best_us * cfg.vpp)) / cfg.vpp)
    return bound, sol.status == "OPTIMAL" or bound >= best_us * (1 - opts.max_gap)


def polish(costs: CostSource, found: list[Found], opts: SearchOptions, *, dtime_budget: float,
           stop_at_s: float) -> list[Found]:
    """Per plan of the search (its configuration and node groups), the placement and layer split that minimise the
    simulated time rather than the search's closed form: the lower-bound model with the critical chains of its
    optima added until its optimum simulates at its bound (the least simulated time of the configuration, on the
    rounded-down tables), warm-started from the search's plan. The plans are handed back to be evaluated by the
    reported model and ranked with the search's: a better split where the closed form misjudges a stage (on
    `two-site`, the first stage after the WAN carries the 20 ms crossing in every 1F1B cycle).

    Polishing stops at the first plan whose model stops at its time limit, or spends its patience (a solve's
    deterministic time), without a plan that simulates faster than the search's: the plans come from one fleet and
    have similar shapes, so the next ones would do the same (on a 1,000-GPU five-type fleet eight such solves took 15
    s and improved none; on the 504-GPU benchmark fleet three rounds of cuts took 7 s for plans 4-6% slower)."""
    cert = Certificate(bound_us=math.inf)
    hosts = {g.key: g for g in costs.fleet.groups}
    out = []
    for f in found:
        left = dtime_budget - cert.deterministic_time
        if left <= 0 or time.perf_counter() > stop_at_s:
            break
        pt = build_path_tables(costs, f.tables, hosts)
        hint = (list(f.solution.assign), list(f.solution.layers))
        start, beat = cert.deterministic_time, pt.simulated(*hint)[0]
        sol = _solve_with_cuts(pt, cert, opts, upper=None, hint=hint, left=left, stop_at_s=stop_at_s,
                               patience_dtime=opts.per_solve_s, beat=beat)
        closed = f.tables.objective(list(sol.assign), list(sol.layers)) if sol.objective is not None else None
        if closed is not None:  # kept with its closed-form objective, as every plan of the search (solver.objective_s)
            out.append(Found(cfg=f.cfg, tables=f.tables, solution=replace(sol, status="SIM_" + sol.status,
                                                                          objective=closed, bound=0.0)))
        spent = sol.status != "OPTIMAL" or cert.deterministic_time - start >= opts.per_solve_s
        if spent and (closed is None or pt.simulated(list(sol.assign), list(sol.layers))[0] >= beat):
            break
    return out
