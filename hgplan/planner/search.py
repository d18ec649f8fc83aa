"""Best-first search over (candidate x node-group set) items, pruned by lower bounds, solved with CP-SAT.

Certified gap: every item is either solved (its CP-SAT bound), pruned (its lower bound is at least the best
objective), or skipped by the budget (its lower bound); the global bound is the smallest of the closed bounds
and the skipped lower bounds, so best / bound is a proven ratio under the cost tables.

Legend: L layers, p pipeline stages, v virtual stages per rank, m micro-batches (docs/planner.md); an item is
(candidate index i, subset S of node-group keys); objectives are v-scaled integer microseconds of the tables.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import replace
from typing import Callable

from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.plan import ParallelConfig
from hgplan.planner.block_bound import block_bound_us
from hgplan.planner.candidates import Candidate, cand_key, enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.found import Found, SearchResult
from hgplan.planner.block_model import BlockSolution, paths_bind, solve_blocks
from hgplan.planner.heuristic import best_layers, greedy_hint, improve
from hgplan.planner.limits import (FIRST_BLOCK_SHARE, FREE_NEAR, MAX_RETRIES, PATH_DOUBLINGS, SOLVE_EVERY_SUBSETS,
                                  solve_params, within)
from hgplan.planner.model import SolverParams, Solution, solve
from hgplan.planner.options import DTIME_PER_WALL, SearchOptions
from hgplan.planner.probe import probe_plans
from hgplan.planner.progress import ProgressFn, Throttle
from hgplan.planner.search_ahead import AheadBounds
from hgplan.planner.search_state import SearchState, Stage
from hgplan.planner.subset_split import split_item
from hgplan.planner.tables import CostTables, build_tables


def _solve_item(costs: CostSource, cand: Candidate, item: tuple[int, tuple[str, ...]], stage: int, lb: float,
                st: SearchState, opts: SearchOptions, remaining: float, order: list[str], by_key: dict) -> float | None:
    """Solve one item; returns its new bound if it should go back on the heap for a retry, else None. An item whose
    full bound (_bound_to_solve) reaches the incumbent less the gap is closed at it without a solve."""
    subset = item[1]
    if lb >= st.best_us() * (1 - opts.max_gap):
        st.closed_bounds.append(lb)
        return None
    if item not in st.tables_of:
        tables = build_tables(costs, cand.cfg, [by_key[k] for k in subset])
        if tables is None or len(tables.groups) != len(subset):
            st.infeasible += 1
            return None
        st.tables_of[item] = replace(tables, require_all=True)
    tables = st.tables_of[item]
    attempt = Stage.attempt(stage)
    st.solved.add(item[0])  # a set: an item's retries come after its first solve
    prev = st.found.get(item)
    hint = _hint_of(prev) or improve(tables, greedy_hint(tables, order))
    configured = solve_params(opts, attempt, remaining)
    params = within(configured, opts.wall_deadline_s)
    st.record_limits(configured)
    hint_obj = tables.objective(*hint) if prev is None else None
    if hint_obj is not None:  # the warm start is itself a valid plan: keep it
        _keep(st, item, cand.cfg, tables, "HINT", hint_obj, hint)
    if tables.pp > 1 and len(tables.groups) > 1 and (attempt == 0 or item in st.block_open or item in st.paths_waiting):
        path_configured = [solve_params(opts, attempt + a + PATH_DOUBLINGS, remaining) for a in (0, 1)]
        settled, step = _block_phase(tables, cand.cfg, item, lb, st, (params, *path_configured), opts, attempt)
        if settled:
            return step
        lb = step
        hint = _hint_of(st.found.get(item)) or hint
    upper = st.upper_bound(cand.cfg.vpp)
    sol = solve(tables, within(configured, opts.wall_deadline_s), hint=hint, upper_bound=upper, log=st.log,
                keep_model=opts.keep_model)
    st.last_model = sol.model_text or st.last_model
    st.dtime += sol.deterministic_time
    st.statuses[sol.status] = st.statuses.get(sol.status, 0) + 1
    if sol.objective is not None:
        f = Found(cfg=cand.cfg, tables=tables, solution=sol)
        current = st.found.get(item)
        if current is None or f.time_us < current.time_us:
            st.found[item] = f
    if sol.status == "INFEASIBLE":
        st.close_infeasible(upper, cand.cfg.vpp)
        return None
    bound = _raised_bound(lb, sol.bound, upper, cand.cfg.vpp)
    if sol.objective is None and bound <= lb:
        st.futile.add((cand.cfg.vpp, len(subset), cand.cfg.pp))
    if sol.status == "OPTIMAL":
        st.closed_bounds.append(bound)
        return None
    # Retry with twice the time only if this solve got somewhere (a better plan, a bound above the item's) or the block
    # model is still open; a stage-level solve whose relaxation stayed below the item's bound gains nothing from more.
    if attempt < MAX_RETRIES and (sol.objective is not None or bound > lb or item in st.block_open):
        return bound
    st.closed_bounds.append(bound)
    return None


def _block_phase(tables: CostTables, cfg: ParallelConfig, item: tuple, lb: float, st: SearchState,
                 both: tuple[SolverParams, SolverParams, SolverParams], opts: SearchOptions,
                 attempt: int) -> tuple[bool, float | None]:
    """An attempt's block-model step: (True, what _solve_item returns) when it ends the attempt, else (False, the
    item's raised bound) for the stage-level solve. The first block solve gets FIRST_BLOCK_SHARE of the time; an open
    block model defers the stage-level solve until its retries end (SearchState.deferred)."""
    (params, path_params, wait_params), before, began = both, st.found.get(item), time.perf_counter()
    block_params = params if attempt else replace(
        params, max_deterministic_time=params.max_deterministic_time * FIRST_BLOCK_SHARE)
    free = attempt % 2 == 1 and before is not None and before.time_us <= st.best_us() * (1 + FREE_NEAR)
    step = _block_step(tables, cfg, item, lb, st, block_params, opts, free=free, path_params=path_params,
                       wait_params=wait_params)
    if item in st.paths_waiting and not st.paths_now:
        return True, step
    if step is not None and item in st.block_open and attempt == 0:
        st.deferred.add(item)
        return True, step
    # the block model's retries go on after one bounded by the incumbent (its proof comes at once or not at all), and
    # after a free one while it gets somewhere (a better plan for the item, a higher bound)
    more = attempt < MAX_RETRIES and step is not None and (step > lb or st.found.get(item) is not before or not free)
    if step is None or (attempt > 0 and item in st.block_open and (more or item not in st.deferred)):
        return True, _block_retry(st, step, more)
    st.deferred.discard(item)
    if _left_s(opts) < time.perf_counter() - began:
        return True, step  # the larger stage-level model would overrun the time limit in its build (model_build.py)
    if st.is_futile(cfg, len(item[1])):
        if item in st.block_open and attempt < MAX_RETRIES:
            return True, step  # the block model's retries go on without it
        st.closed_bounds.append(step)
        return True, None
    return False, step


def _keep(st: SearchState, item: tuple, cfg: ParallelConfig, tables: CostTables, status: str, objective: int,
          plan: tuple, bound: float = 0.0) -> None:
    """Keep a valid plan found for an item without CP-SAT (the warm start, the block model's) if it is its best."""
    current = st.found.get(item)
    if current is None or objective < current.solution.objective:
        st.found[item] = Found(cfg=cfg, tables=tables, solution=Solution(
            status=status, objective=objective, bound=bound, assign=tuple(plan[0]), layers=tuple(plan[1]),
            deterministic_time=0.0, wall_time_s=0.0))


def _block_step(tables: CostTables, cfg: ParallelConfig, item: tuple, lb: float, st: SearchState, params: SolverParams,
                opts: SearchOptions, *, free: bool, path_params: SolverParams,
                wait_params: SolverParams) -> float | None:
    """Solve the item's block model (planner/block_model.py). Its bound holds for every plan of the item (better than
    the incumbent, when there is one); its plan, expanded to stages, is checked by the tables (or its placement gets
    the warm start's best layer split). Returns None when that settles the item (nothing beats the incumbent, or a
    plan within solve_gap of the bound), else the item's raised bound. `free`: without the incumbent as upper bound
    (warm-started from the item's best plan; the first and third retries): CP-SAT often proves an optimum it holds
    sooner than that nothing beats it, but not always (docs/planner.md, "Block model first"). Where interleaving's
    steady paths bind on the optimum (block_model.paths_bind), the model with them is solved next, against the
    incumbent, with `path_params` as configured (cut here to the time left; docs/planner.md, "Block model"); for an
    item that waits for it (SearchState.paths_waiting) it starts at once beside the search, with `wait_params`, the
    limits of the attempt the item comes back at."""
    v = cfg.vpp
    upper = None if free else st.upper_bound(v)
    bs = st.paths_waiting.pop(item, None) if st.paths_now else None  # solved before it waited
    if bs is None:
        bs = _block_solve(tables, cfg, item, st, params, opts, upper, hint=_hint_of(st.found.get(item)))
    incumbent = st.upper_bound(v)
    if _paths_due(tables, bs, incumbent, st.found.get(item), opts):
        if not st.paths_now:  # until the rest of the search is above the gap (search_state.paths_waiting)
            st.paths_waiting[item] = bs
            # its path solve starts now, beside the search, with the limits of the attempt it waits for
            st.start_paths(item, incumbent, wait_params, _paths_job(st, item, wait_params, bs, incumbent, opts))
            return _raised_bound(lb, bs.bound, upper, v)
        first, (upper, bs) = bs, st.paths_ready.pop(item, (incumbent, None))
        if bs is None:
            st.record_limits(path_params)
            bs = _block_solve(tables, cfg, item, st, path_params, opts, upper, hint=None, paths=True,
                              done=_paths_job(st, item, path_params, first, upper, opts)())
        if bs.status not in ("OPTIMAL", "INFEASIBLE"):  # open: its bound, if higher, and the block model's retries
            bs = replace(bs, bound=max(bs.bound, first.bound))
    if bs.status in ("OPTIMAL", "INFEASIBLE"):
        st.block_open.discard(item)
    else:
        st.block_open.add(item)
    if bs.status == "INFEASIBLE":
        st.close_infeasible(upper, v)
        return None
    bound = _raised_bound(lb, bs.bound, upper, v)
    own = st.found.get(item)
    if bs.status == "OPTIMAL" and own is not None and own.solution.objective <= bs.bound * (1 + opts.solve_gap):
        st.closed_bounds.append(bound)
        return None
    return bound


def _paths_due(tables: CostTables, bs: BlockSolution, incumbent: int | None, own: Found | None,
               opts: SearchOptions) -> bool:
    """Whether the item's block model with interleaving's steady paths is due after `bs`, its optimum without them:
    the paths bind on it, it is below the incumbent, and the item's own plan is not within solve_gap of it."""
    settled = bs.status == "OPTIMAL" and own is not None and own.solution.objective <= bs.bound * (1 + opts.solve_gap)
    return paths_bind(tables, bs) and incumbent is not None and bs.bound < incumbent and not settled


def _take_paths(st: SearchState, released: list[tuple], cands: list[Candidate], opts: SearchOptions) -> None:
    """The path solves of the items released together (SearchState.release), each started when its item began to
    wait (SearchState.start_paths): in heap order each is waited for, counted and its plan kept now, and its result
    waits in SearchState.paths_ready for the item's turn (_block_step); docs/planner.md has what it saved."""
    for _, _, _, i, subset in sorted(released):
        item = (i, subset)
        upper, configured, job = st.paths_started.pop(item)
        st.record_limits(configured)
        st.paths_ready[item] = (upper, _block_solve(st.tables_of[item], cands[i].cfg, item, st, configured, opts, upper,
                                                    hint=None, paths=True, done=job.result()))


def _paths_job(st: SearchState, item: tuple, configured: SolverParams, first: BlockSolution, upper: int | None,
               opts: SearchOptions) -> Callable[[], BlockSolution]:
    """One solve of an item's block model with the steady paths, warm-started from `first` (its optimum without them),
    against `upper`, with `configured` cut to the time left when it starts; nothing counted (_block_solve counts it).
    The item's tables and cuts are read now: the solve may run later on a thread beside the search
    (SearchState.start_paths)."""
    tables, cuts, hint = st.tables_of[item], st.cuts_of.get(item), (list(first.assign), list(first.layers))
    return lambda: solve_blocks(tables, within(configured, opts.wall_deadline_s), hint=hint, upper_bound=upper,
                                log=st.log, keep_model=opts.keep_model, paths=True, cuts=cuts)


def _block_solve(tables: CostTables, cfg: ParallelConfig, item: tuple, st: SearchState, params: SolverParams,
                 opts: SearchOptions, upper: int | None, *, hint, paths: bool = False,
                 done: BlockSolution | None = None) -> BlockSolution:
    """One solve of the item's block model (or `done`, one run already), its time and status counted, its plan kept
    when it is the item's best."""
    bs = done or st.during(lambda: solve_blocks(tables, params, hint=hint, upper_bound=upper, log=st.log,
                                                keep_model=opts.keep_model, paths=paths, cuts=st.cuts_of.get(item)))
    st.last_model = bs.model_text or st.last_model
    st.dtime += bs.deterministic_time
    name = ("BLOCK_PATHS_" if paths else "BLOCK_") + bs.status
    st.statuses[name] = st.statuses.get(name, 0) + 1
    if bs.assign:
        real = tables.objective(list(bs.assign), list(bs.layers))
        split = best_layers(tables, list(bs.assign)) if real is None else (real, list(bs.layers))
        if split is not None:
            _keep(st, item, cfg, tables, "BLOCK", split[0], (bs.assign, split[1]), bs.bound)
    return bs


def _block_retry(st: SearchState, bound: float | None, more: bool) -> float | None:
    """After a retry's block step: None when it settled the item. Else the block model is still open, and its next
    attempt, not the stage-level model's, gets the doubled time if `more` (this one got somewhere, a better plan for the
    item or a bound above the item's, and attempts are left): without the incumbent as its upper bound the block model
    settles items the stage-level model only improves (the 10-group benchmark fleet's pp 19 items over all ten groups).
    An attempt that got nowhere, or the last, closes the item at its bound (the 64-group fleet's pp 64 item: a first
    retry that changed nothing, then no more)."""
    if bound is None:
        return None
    if more:
        return bound
    st.closed_bounds.append(bound)
    return None


def _first_heap(cands: list[Candidate], seeds: list[Found] | None,
                log: Callable[[str], None] | None) -> tuple[list, SearchState]:
    """Every candidate on the heap with its own bound, and the search's state with the plans found beforehand (e.g.
    each node group alone) as incumbents from the start."""
    heap = [(c.lower_bound_us, c.key, Stage.CANDIDATE, i, ()) for i, c in enumerate(cands)]
    heapq.heapify(heap)
    return heap, SearchState(found={("seed", n): f for n, f in enumerate(seeds or [])}, log=log,
                        open_items=[1] * len(cands))


def _next_item(heap: list, st: SearchState, below: float, cands: list[Candidate], L: int, m_of: Callable) -> tuple:
    """The item to work on: the best on the heap, or, after SOLVE_EVERY_SUBSETS items listed without a solve and
    before another split, the best split item with a bound below `below` (the other goes back on the heap)."""
    entry = heapq.heappop(heap)
    if entry[2] >= Stage.SOLVE or st.listed < SOLVE_EVERY_SUBSETS:
        return entry
    st.listed = 0
    ready = _take_ready(heap, below, cands, L, m_of, st.best_us())
    if ready is None:
        return entry
    if ready[0] >= below:  # its bound over every choice of ends rose past the best plan: back on the heap
        heapq.heappush(heap, ready)
        return entry
    heapq.heappush(heap, entry)
    return ready


def _take_ready(heap: list, below: float, cands: list[Candidate], L: int, m_of: Callable,
                best_us: float) -> tuple | None:
    """Take off the heap its best item split by node groups with a bound below `below` (None: none is), bounded over
    every choice of end groups (against the incumbent `best_us`) and due for its first solve."""
    ready = [n for n, entry in enumerate(heap) if entry[2] >= Stage.SUBSET and entry[0] < below]
    if not ready:
        return None
    n = min(ready, key=lambda j: heap[j])
    (lb, key, stage, i, subset), heap[n] = heap[n], heap[-1]
    heap.pop()
    heapq.heapify(heap)
    if stage < Stage.SOLVE:
        cand = cands[i]
        lb = max(lb, block_bound_us(cand.ctx, cand.cfg, subset, L=L, m=m_of(cand.cfg), enough_us=best_us))
    return lb, key, max(stage, Stage.SOLVE), i, subset


def _bound_to_solve(item: tuple, stage: int, lb: float, st: SearchState) -> float:
    """An item's bound before its first solve. On the way there its block bound, without and then with the choice of
    end groups (either often closes the item), stopped early at the incumbent (block_bound_us, enough_us); now the
    full one, its closed bound if the solve gets nowhere or the budget ends during it (a single group's bound has no
    early exit: it is already on the item), and what it proved per choice of ends, cuts for the item's block model
    (SearchState.cuts_of): block_cuts, maybe worked out during the solve before (planner/search_ahead.py)."""
    subset = item[1]
    if stage != Stage.SOLVE or len(subset) == 1:
        return lb
    bound, cuts = st.ahead.bound(stage, item[0], subset, st.best_us())
    if cuts is not None:
        st.cuts_of[item] = cuts
    return max(lb, bound)


def _probe(costs: CostSource, cands: list[Candidate], groups: list, order: list[str], st: SearchState,
           opts: SearchOptions, stop_at: float) -> None:
    """Whole-fleet plans of the primal heuristic as incumbents before the first bound (planner/probe.py)."""
    def below() -> float:
        return -math.inf if time.perf_counter() > stop_at else st.best_us() * (1 - opts.max_gap)
    for n, (cfg, tables, objective, plan) in enumerate(probe_plans(costs, cands, groups, order, below)):
        _keep(st, ("probe", n), cfg, tables, "PROBE", objective, plan)


def _left_s(opts: SearchOptions) -> float:
    """Wall-clock seconds left before the command's deadline (inf without one)."""
    return math.inf if opts.wall_deadline_s is None else opts.wall_deadline_s - time.perf_counter()


def _raised_bound(lb: float, solver_bound: float, upper: int | None, v: int) -> float:
    """The item's bound (us) after a solve: CP-SAT's bound holds for plans better than the incumbent, so the item's
    own optimum is at least min(bound, incumbent); the candidate's lower bound holds regardless."""
    return max(lb, (solver_bound if upper is None else min(solver_bound, upper)) / v)


def _hint_of(found: Found | None) -> tuple[list[int], list[int]] | None:
    """A found plan as a warm start."""
    return None if found is None else (list(found.solution.assign), list(found.solution.layers))


def run_search(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
               progress: ProgressFn | None = None, seeds: list[Found] | None = None,
               costs: CostSource | None = None, log: Callable[[str], None] | None = None,
               listed: tuple[list[Candidate], bool] | None = None) -> SearchResult:
    """Best-first over items by lower bound. A popped item is first refined (subset, then block bounds); then it
    is solved; a solve that stops at its time limit goes back with its improved bound and twice the time.
    `listed`: the candidates, already listed by the caller (enumerate_candidates' value for these options)."""
    start = time.perf_counter()
    stop_at = opts.stop_at_s(start)
    costs = costs or CostSource(fleet, model, train)
    groups = [g for g in fleet.groups if opts.groups is None or g.key in opts.groups]
    cands, listed_all = listed or enumerate_candidates(costs, opts, groups, stop_at, progress=progress)
    order, by_key = [g.key for g in fleet.groups], {g.key: g for g in groups}
    L, m_of = model.num_layers, (lambda c: c.num_microbatches(train.global_batch_size))
    (heap, st), pruned, skipped, stopped, report = _first_heap(cands, seeds, log), 0, 0, "complete", Throttle(progress)
    st.ahead = AheadBounds(cands, L, m_of, heap, opts.max_gap)
    if not listed_all:  # nothing is known of the configurations not listed: no bound but 0
        heap, stopped, skipped = [], "wall", len(cands)
        st.closed_bounds.append(0.0)
    elif len(groups) > 1:
        _probe(costs, cands, groups, order, st, opts, stop_at)
    try:  # the path solves still running end with the search, however it ends
        while heap or st.paths_due:
            threshold = st.best_us() * (1 - opts.max_gap)
            _take_paths(st, st.release(heap, threshold), cands, opts)
            report(lambda: st.status(heap))
            lb, key, stage, i, subset = _next_item(heap, st, st.best_us() * (1 - opts.max_gap), cands, L, m_of)
            cand = cands[i]
            st.open_items[i] -= 1
            if lb >= st.best_us() * (1 - opts.max_gap):
                pruned = len(({e[3] for e in heap} | {i}) - st.solved)  # a configuration solved in part is solved
                st.closed_bounds.append(lb)
                break
            remaining = DTIME_PER_WALL * opts.budget_s - st.dtime
            split = None  # a candidate, or a box of its sets (subset_split), is split into sets or boxes with bounds
            if stage == Stage.CANDIDATE and remaining > 0 and time.perf_counter() <= stop_at:
                split = split_item(cand.ctx, cand.cfg, subset or None, L=L, m=m_of(cand.cfg), stop_at=stop_at)
            # out of time, before it or while splitting the candidate (which then keeps its own bound)
            if remaining <= 0 or time.perf_counter() > stop_at or (stage == Stage.CANDIDATE and split is None):
                stopped = "budget" if remaining <= 0 else "wall"
                skipped = len({e[3] for e in heap + st.paths_due} | {i})
                st.closed_bounds.append(min([lb] + [e[0] for e in st.paths_due]))
                break
            if split is not None:
                for is_set, sub, sub_lb in split:  # a set of groups, or a box of them (a candidate's part)
                    heapq.heappush(heap, (max(lb, sub_lb), key, Stage.SUBSET if is_set else Stage.CANDIDATE, i, sub))
                st.open_items[i] += len(split)
                st.listed += len(split)
            elif stage in (Stage.SUBSET, Stage.BLOCK):
                block = st.ahead.bound(stage, i, subset, st.best_us())
                heapq.heappush(heap, (max(lb, block), key, stage + 1, i, subset))
                st.open_items[i] += 1
            else:
                st.listed = 0
                lb = _bound_to_solve((i, subset), stage, lb, st)
                retry = _solve_item(costs, cand, (i, subset), stage, lb, st, opts, remaining, order, by_key)
                if retry is not None:
                    st.push_retry(heap, (retry, key, stage + 1, i, subset))
                    st.open_items[i] += 1
            st.settled += st.open_items[i] == 0
    finally:
        st.stop_paths()
    if stopped == "complete":
        st.settled = len(cands)
    report(lambda: st.status(heap), force=True)
    return _result(st, cands, opts, pruned=pruned, skipped=skipped, stopped=stopped, start=start,
                   listed_all=listed_all)


def _result(st: SearchState, cands: list[Candidate], opts: SearchOptions, *, pruned: int, skipped: int, stopped: str,
            start: float, listed_all: bool = True) -> SearchResult:
    """The best plan per configuration, ranked, with the proven bound. The probes' plans (planner/probe.py) go to
    `probed` (ranked by the reported model, not polished: polishing the two-site example's took 5.4 s), one of them
    among the plans found only where it is faster than every other plan found."""
    kept = [f for key, f in st.found.items() if key[0] != "probe"]
    probed = _per_config([f for key, f in st.found.items() if key[0] == "probe"])
    if probed and all(probed[0].time_us < f.time_us for f in kept):
        kept.append(probed.pop(0))
    ranked = _per_config(kept)
    best = ranked[0].time_us if ranked else math.inf
    return SearchResult(found=ranked[:opts.top_k], candidates_total=len(cands), candidates_solved=len(st.solved),
                        candidates_pruned=pruned, candidates_skipped=skipped, candidates_infeasible=st.infeasible,
                        bound_us=min([best] + st.closed_bounds), deterministic_time=st.dtime,
                        wall_time_s=time.perf_counter() - start, stopped_by=stopped, statuses=st.statuses,
                        solver_limits=st.limits, last_model_text=st.last_model, listed_all=listed_all,
                        candidates=cands, probed=probed[:opts.top_k])


def _per_config(found: list[Found]) -> list[Found]:
    """The best plan of each configuration, fastest first (ties by configuration)."""
    best: dict[tuple, Found] = {}
    for f in found:
        k = cand_key(f.cfg)
        if k not in best or f.time_us < best[k].time_us:
            best[k] = f
    return sorted(best.values(), key=lambda f: (f.time_us, cand_key(f.cfg)))
