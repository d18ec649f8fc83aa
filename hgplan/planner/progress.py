"""Where a search stands, reported to a caller-supplied function (the CLI draws or prints it; the planner never
prints)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class Progress:
    """One report: the phase, how far it is (done of total, in `unit`), the best plan's objective and the proven
    lower bound so far (seconds per iteration; inf and 0 while unknown)."""

    phase: str
    """"seeds" (each node group alone), "candidates" (listing and bounding configurations), "search" (the fleet),
    "proof" (--prove-gap), "ranking" (simulator, baselines)."""
    done: int
    total: int
    unit: str
    best_s: float = math.inf
    bound_s: float = 0.0

    @property
    def gap(self) -> float | None:
        """(best - bound) / best, when both are known."""
        if not math.isfinite(self.best_s) or self.best_s <= 0:
            return None
        return max(0.0, (self.best_s - self.bound_s) / self.best_s)


ProgressFn = Callable[[Progress], None]

EVERY_S = 0.1
"""The search loop reports at most this often (and always at its end)."""


class Throttle:
    """Calls `fn` at most every EVERY_S seconds, unless forced."""

    def __init__(self, fn: ProgressFn | None):
        self.fn, self.last = fn, -math.inf

    def __call__(self, make: Callable[[], Progress], *, force: bool = False) -> None:
        if self.fn is None:
            return
        now = time.perf_counter()
        if force or now - self.last >= EVERY_S:
            self.last = now
            self.fn(make())
