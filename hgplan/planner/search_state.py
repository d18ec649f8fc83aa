"""The best-first search's bookkeeping (planner/search.py): where an item stands on the heap, and the search's mutable
state (plans found, closed bounds, time spent, items whose block model is open)."""

from __future__ import annotations

import heapq
import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Callable, TypeVar

from hgplan.plan import ParallelConfig
from hgplan.planner import limits
from hgplan.planner.block_cuts import BlockCuts
from hgplan.planner.block_model import BlockSolution
from hgplan.planner.costs import US
from hgplan.planner.found import Found
from hgplan.planner.model import SolverParams
from hgplan.planner.progress import Progress
from hgplan.planner.tables import CostTables

if TYPE_CHECKING:
    from hgplan.planner.search_ahead import AheadBounds

T = TypeVar("T")


class Stage(IntEnum):
    """Where an item stands on the heap; its bound only grows from one stage to the next."""

    CANDIDATE = 0
    """A whole candidate (its subset ()) or a box of its sets (subset_split.Box): split it into one item per set of
    node groups, or into two boxes."""
    SUBSET = 1
    """A (candidate, group set) item with its subset bound: refine with the block bound, ends unknown."""
    BLOCK = 2
    """Refine with the block bound over every choice of end groups."""
    SOLVE = 3
    """Solve with CP-SAT (first attempt); SOLVE + n is the n-th retry."""

    @staticmethod
    def attempt(stage: int) -> int:
        """Which solve attempt (0 first) an item at this stage is due for."""
        return stage - Stage.SOLVE


@dataclass(slots=True)
class SearchState:
    """The search's mutable bookkeeping."""

    found: dict[tuple, Found]
    tables_of: dict[tuple, CostTables] = field(default_factory=dict)
    cuts_of: dict[tuple, BlockCuts] = field(default_factory=dict)
    """What the block bound proved of a multi-group item before its first solve, for its block model's solves."""
    solved: set[int] = field(default_factory=set)
    """Configurations (indices) with at least one solve: a configuration split into sets of groups solves each."""
    infeasible: int = 0
    closed_bounds: list[float] = field(default_factory=list)
    dtime: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    last_model: str | None = None
    log: Callable[[str], None] | None = None
    block_open: set[tuple] = field(default_factory=set)
    """Items whose block model stopped at its limit (neither OPTIMAL nor INFEASIBLE): their retries solve it again."""
    deferred: set[tuple] = field(default_factory=set)
    """Items whose block model was open after their first attempt: their stage-level solve waits until the block
    model's retries end (one that gets nowhere, or the last); the retries mostly settle them (docs/planner.md)."""
    futile: set[tuple[int, int, int]] = field(default_factory=set)
    """(v, node groups, stages) of stage-level solves that got nowhere: no plan, no bound above their item's."""
    open_items: list[int] = field(default_factory=list)
    """Per candidate, its items on the heap; a candidate with none left is settled (progress only)."""
    settled: int = 0
    listed: int = 0
    """Items listed since the last solve (SOLVE_EVERY_SUBSETS)."""
    paths_waiting: dict[tuple, BlockSolution] = field(default_factory=dict)
    """Items whose block model with the steady paths is due (block_model.paths_bind), with their block model's optimum
    without them: the item waits until every other item is settled or above the search's gap, while its path solve
    runs beside the search (paths_started), mostly a quick proof (docs/planner.md, "Block model")."""
    paths_due: list[tuple] = field(default_factory=list)
    """Their heap entries, back on the heap when the rest of it is above the gap (paths_now from then on)."""
    paths_now: bool = False
    paths_ready: dict[tuple, tuple[int, BlockSolution]] = field(default_factory=dict)
    """The path solves of the waiting items, taken when they were released (search._take_paths), with the upper bound
    each had, for the item's turn."""
    paths_started: dict[tuple, tuple[int | None, SolverParams, Future]] = field(default_factory=dict)
    """The waiting items' path solves, each started when its item began to wait (search._block_step) on a thread
    beside the search (paths_pool), against the incumbent of then, with the limits of the attempt the item comes back
    at: its upper bound, its limits as configured and the running solve, taken when the item is released. What it
    finds depends on those alone, not on when the threads run, so the search stays deterministic."""
    paths_pool: ThreadPoolExecutor | None = None
    """limits.SOLVE_THREADS threads (a fixed two, not the core count), made when the first path solve starts."""
    ahead: AheadBounds | None = None
    """The block bounds and cuts, worked out ahead during block-model solves (planner/search_ahead.py)."""

    def during(self, solve: Callable[[], T]) -> T:
        """A block-model solve, with the bounds worked out ahead meanwhile (planner/search_ahead.py)."""
        return solve() if self.ahead is None else self.ahead.during(solve, self.best_us())

    def best_us(self) -> float:
        """The best plan's time so far (inf before any)."""
        return min((f.time_us for f in self.found.values()), default=math.inf)

    def status(self, heap: list) -> Progress:
        """Where the search stands: candidates settled, the best plan and the bound so far (seconds)."""
        best = self.best_us()
        bound = min([best, min(self.closed_bounds, default=best)] + ([heap[0][0]] if heap else [])
                    + [entry[0] for entry in self.paths_due])
        return Progress("search", self.settled, len(self.open_items), "configurations settled", best / US, bound / US)

    def release(self, heap: list, threshold: float) -> list[tuple]:
        """Once the rest of the heap is at or above `threshold` (the incumbent less the gap) or empty, the items
        waiting for their path solve go back on it, and later path solves run at once (paths_waiting); returns the
        entries released."""
        if not self.paths_due or (heap and heap[0][0] < threshold):
            return []
        self.paths_now = True
        released, self.paths_due = self.paths_due, []
        for entry in released:
            heapq.heappush(heap, entry)
        return released

    def push_retry(self, heap: list, entry: tuple) -> None:
        """An item's retry goes back on the heap, or, waiting for its path solve, to paths_due."""
        if (entry[3], entry[4]) in self.paths_waiting and not self.paths_now:
            self.paths_due.append(entry)
        else:
            heapq.heappush(heap, entry)

    def upper_bound(self, v: int) -> int | None:
        """The incumbent's v-scaled objective, the upper bound of a solve (None before any plan)."""
        best_now = self.best_us()
        return math.ceil(best_now * v) if math.isfinite(best_now) else None

    def close_infeasible(self, upper: int | None, v: int) -> None:
        """An INFEASIBLE solve closes its item: without an upper bound the item has no plan; with one, nothing in it
        beats the incumbent."""
        if upper is None:
            self.infeasible += 1
        else:
            self.closed_bounds.append(upper / v)

    def start_paths(self, item: tuple, upper: int | None, configured: SolverParams,
                    solve: Callable[[], BlockSolution]) -> None:
        """Start a waiting item's path solve on a thread beside the search (paths_started)."""
        if self.paths_pool is None:
            self.paths_pool = ThreadPoolExecutor(limits.SOLVE_THREADS)
        self.paths_started[item] = (upper, configured, self.paths_pool.submit(solve))

    def stop_paths(self) -> None:
        """At the search's end, whose results nothing takes any more (a search stopped by its budget or the clock with
        items waiting): those not started are dropped, those running are waited for (their wall-clock limit was cut
        to the deadline when they started)."""
        if self.paths_pool is not None:
            self.paths_pool.shutdown(wait=True, cancel_futures=True)

    def record_limits(self, configured: SolverParams) -> None:
        """The record keeps a solve's limits as configured: the cut to the time left before the deadline depends on
        the clock, and the JSON of two runs must be the same."""
        for name in ("max_deterministic_time", "max_time_in_seconds"):
            self.limits[name] = max(self.limits.get(name, 0.0), getattr(configured, name))

    def is_futile(self, cfg: ParallelConfig, groups: int) -> bool:
        """Whether a stage-level solve of the same interleaving, no more node groups and no more stages got nowhere
        (futile): then an item whose block model is closed (optimal) closes at its bound without its own, a larger
        model given the same time doing no better (docs/planner.md, "Block model first")."""
        return any(v == cfg.vpp and g <= groups and p <= cfg.pp for v, g, p in self.futile)
