"""Bounds worked out ahead while CP-SAT solves an item (planner/search.py).

A block-model solve runs in CP-SAT's C++ code, which releases Python's lock, and the search's bounds are pure Python:
run side by side, the solve on a thread of its own, they use the two cores the 2-core CI machine has. While an item's
block model is solved the search works out the bounds it would ask for next if the incumbent stays: it walks a copy of
the heap's front as the search would (each item's block bound with ends unknown, then with ends known, then the cuts
of its first solve, block_cuts), against the incumbent of now, until the solve returns.

Nothing the search returns may depend on how far that got, which the clock decides. So a bound worked out ahead is
used only when the search asks for the same bound of the same item against the same incumbent, and finds the memo
that bound reads and writes, the item's entry of BoundContext.floors, as the bound found it; the bound is a function
of those (its other memos are its own call's, or caches of pure functions), so the search gets the value it would
have computed. A bound worked out ahead writes its floor aside (`aside`), not on the context, and the bounds ahead of
the same item read it there; the search puts it on the context when it uses that bound. A solve that lowers the
incumbent makes everything worked out before it useless (AheadBounds.during drops it), as does the search asking for
another bound of the item first (its floor written otherwise). tests/test_search_ahead.py checks that searches
return the same whether none, a few or all the bounds of the heap's front are worked out ahead of each solve.
"""

from __future__ import annotations

import heapq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from hgplan.planner.block_bound import block_bound_us
from hgplan.planner.bounds import floor_key
from hgplan.planner.block_cuts import block_cuts
from hgplan.planner.candidates import Candidate
from hgplan.planner.search_state import Stage

T = TypeVar("T")

FRONT = 256
"""How many of the heap's first entries the work ahead walks (a solve rarely leaves time for more: the 8-group
benchmark fleet's 19 block-model solves had 952 bounds worked out ahead in all)."""
MISSING = None
"""A floor not memoised (BoundContext.floors holds tuples)."""


@dataclass(frozen=True, slots=True)
class _Ahead:
    """One bound worked out ahead: against which incumbent, the item's floor as it found it and the one it wrote."""

    enough_us: float
    value: Any
    found: tuple[float, float] | None
    wrote: tuple[float, float] | None


@dataclass(slots=True)
class AheadBounds:
    """The search's block bounds and cuts (`bound`), and the work ahead of them during solves (`during`)."""

    cands: list[Candidate]
    L: int
    m_of: Callable
    heap: list
    """The search's heap (read, never changed)."""
    max_gap: float
    done: dict[tuple, _Ahead] = field(default_factory=dict)
    """(stage, candidate index, set) -> the bound worked out ahead."""
    aside: dict[int, dict[tuple, tuple[float, float]]] = field(default_factory=dict)
    """Per candidate index, the floors the bounds ahead wrote (by floor_key), not yet on the context."""
    used: int = 0
    """Bounds worked out ahead that the search used (tests, benchmarks)."""

    def bound(self, stage: int, i: int, subset: tuple[str, ...], enough_us: float) -> Any:
        """The bound the search asks for at `stage` (SUBSET: block_bound_us with ends unknown; BLOCK: with ends
        known; SOLVE: block_cuts) against the incumbent enough_us: worked out ahead when that is still what it
        would compute now, else computed now."""
        ahead = self.done.pop((stage, i, subset), None)
        if ahead is not None and ahead.enough_us == enough_us:
            floors, key = self.cands[i].ctx.floors, self._key(i, subset)
            if floors.get(key, MISSING) == ahead.found:
                if ahead.wrote is not MISSING:
                    floors[key] = ahead.wrote
                    self.aside[i].pop(key, None)
                self.used += 1
                return ahead.value
        return self._compute(stage, i, subset, enough_us)

    def during(self, solve: Callable[[], T], best_us: float) -> T:
        """solve() on a thread of its own, and on this one the bounds ahead against the incumbent best_us until it
        returns."""
        for (stage, i, subset), ahead in list(self.done.items()):
            if ahead.enough_us != best_us:
                del self.done[stage, i, subset]
                if ahead.wrote is not MISSING:
                    self.aside[i].pop(self._key(i, subset), None)
        with ThreadPoolExecutor(1) as pool:
            job = pool.submit(solve)
            self._work(job.done, best_us)
            return job.result()

    def _work(self, finished: Callable[[], bool], best_us: float) -> None:
        """Walk the heap's front as the search would while the incumbent stays best_us (entries at or above it
        less the gap end the walk), working out each bound not yet done, until `finished`."""
        front = heapq.nsmallest(FRONT, self.heap)
        below = best_us * (1 - self.max_gap)
        while front and not finished():
            lb, key, stage, i, subset = heapq.heappop(front)
            if lb >= below:
                return
            if stage not in (Stage.SUBSET, Stage.BLOCK, Stage.SOLVE) or (stage == Stage.SOLVE and len(subset) == 1):
                continue
            ahead = self.done.get((stage, i, subset)) or self._ahead(stage, i, subset, best_us)
            self.done[stage, i, subset] = ahead
            if stage < Stage.SOLVE:
                heapq.heappush(front, (max(lb, ahead.value), key, stage + 1, i, subset))

    def _ahead(self, stage: int, i: int, subset: tuple[str, ...], enough_us: float) -> _Ahead:
        """One bound worked out ahead, the item's floor read from the context or `aside`, written to `aside` (the
        context left as it was)."""
        floors, key = self.cands[i].ctx.floors, self._key(i, subset)
        aside = self.aside.setdefault(i, {})
        present = key in floors
        found = floors[key] if present else aside.get(key, MISSING)
        if not present and found is not MISSING:
            floors[key] = found  # lent for the call
        value = self._compute(stage, i, subset, enough_us)
        wrote = MISSING
        if not present:
            left = floors.pop(key, MISSING)
            if found is MISSING and left is not MISSING:
                wrote = aside[key] = left
        return _Ahead(enough_us=enough_us, value=value, found=found, wrote=wrote)

    def _compute(self, stage: int, i: int, subset: tuple[str, ...], enough_us: float) -> Any:
        """The bound itself."""
        cand = self.cands[i]
        m = self.m_of(cand.cfg)
        if stage == Stage.SOLVE:
            return block_cuts(cand.ctx, cand.cfg, subset, L=self.L, m=m, enough_us=enough_us)
        return block_bound_us(cand.ctx, cand.cfg, subset, L=self.L, m=m, ends_known=stage == Stage.BLOCK,
                              enough_us=enough_us)

    def _key(self, i: int, subset: tuple[str, ...]) -> tuple:
        cand = self.cands[i]
        return floor_key(cand.cfg, subset, L=self.L, m=self.m_of(cand.cfg))
