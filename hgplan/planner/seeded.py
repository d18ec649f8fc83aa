"""The stock family's whole search: each kind of node group alone, then the fleet seeded with their plans
(planner/search.py runs each search). The groups alone run in a forked child process while this one lists the
fleet's candidates (planner/forked.py): neither reads what the other writes, and both are mostly pure Python."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import partial
from typing import Callable

from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.classes import alone_alike
from hgplan.planner.costs import US, CostSource
from hgplan.planner.forked import Beside
from hgplan.planner.found import Found, SearchResult
from hgplan.planner.options import DTIME_PER_WALL, RERANKED, SearchOptions
from hgplan.planner.progress import Progress, ProgressFn
from hgplan.planner.search import run_search

FORK_MARGIN_S = 5.0
"""How long past the search's own time limit the parent waits for the child's plans before it searches the groups
alone itself (a child that never answers must not hold the command)."""


def _seed_progress(progress: ProgressFn | None, done: int, total: int, seeds: list[Found]) -> None:
    if progress:
        best = min((f.time_us / US for f in seeds), default=math.inf)
        progress(Progress("seeds", done, total, "node groups searched alone", best))


def _alone(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, keys: list[str],
           costs: CostSource,
           log: Callable[[str], None] | None) -> tuple[list[Found], float, dict[str, float]]:
    """Each of these node groups searched alone, with a quarter of the time limit shared among them: their plans
    (RERANKED per group), the deterministic time they used and the solver limits they recorded."""
    share = replace(opts, budget_s=opts.budget_s / (4 * len(keys)), top_k=RERANKED)
    seeds: list[Found] = []
    used, limits = 0.0, {}
    for key in keys:
        res = run_search(fleet, model, train, replace(share, groups=(key,)), costs=costs, log=log)
        seeds += res.found
        used += res.deterministic_time
        limits = {k: max(v, limits.get(k, 0.0)) for k, v in res.solver_limits.items()}
    return seeds, used, limits


def seeded_search(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
                  progress: ProgressFn | None = None,
                  log: Callable[[str], None] | None = None,
                  costs: CostSource | None = None, fork: bool = True) -> tuple[SearchResult, list[Found]]:
    """Each node group alone first (one per kind of nodes, classes.alone_alike; a quarter of the time limit, shared),
    then the whole fleet seeded with their best plans as incumbents. Returns the main result and the per-group plans
    (the single-group baseline). `costs`: the caller's cost cache, to share with what follows the search.

    The groups alone run in a forked child (`fork`, where the platform forks; not with the solver's log, which the
    child would write beside the parent's) while the fleet's candidates are listed here; the plans are the same
    either way (planner/forked.py), and the fleet search starts from them as before."""
    start = time.perf_counter()
    costs = costs or CostSource(fleet, model, train)
    seeds: list[Found] = []
    limits: dict[str, float] = {}
    listed = None
    if len(fleet.groups) > 1 and opts.groups is None:
        # RERANKED plans per group, for the single-group baseline (by the reported model). One group per kind of
        # nodes, whatever its site: the others give the same plans under other names and lose every tie to its.
        alone = alone_alike(fleet.groups)
        _seed_progress(progress, 0, len(alone), seeds)
        with Beside(partial(_alone, fleet, model, train, opts, alone, costs, log),
                    fork=fork and not opts.solver_log) as job:
            stop_at = opts.stop_at_s(start)
            listed = enumerate_candidates(costs, opts, list(fleet.groups), stop_at, progress=progress)
            seeds, used, limits = job.result(max(0.0, stop_at - time.perf_counter()) + FORK_MARGIN_S)
        _seed_progress(progress, len(alone), len(alone), seeds)
        # what the seeds left goes to the fleet search, counted in deterministic time so runs stay reproducible
        opts = replace(opts, budget_s=max(0.1, opts.budget_s - used / DTIME_PER_WALL))
    result = run_search(fleet, model, train, opts, progress=progress, seeds=seeds, costs=costs, log=log,
                        listed=listed)
    result.solver_limits = {k: max(v, limits.get(k, 0.0)) for k, v in result.solver_limits.items()} or limits
    result.wall_time_s = time.perf_counter() - start
    return result, seeds
