"""A mesh candidate's lower bound split by the plans' tail (what follows the last micro-batch: the data-parallel
reduction and the optimizer step, the largest of any stage's).

mesh_fill.tail_us bounds the tail by the least option of any host, and the cycle and the work by whichever option
holds most, so the two are never priced on one plan: on the four-site benchmark fleet (B = 16, P = 15) the tail
bound is 6.4 ms, a one-layer stage of a tensor-parallel-8, data-parallel-1 mesh, a mesh far too slow for the cycle,
while the meshes fast enough (data-parallel 8 or 16) reduce and step 30-50 ms over the layers they hold.

So the candidate's plans are split at a level T of the tail. A plan whose tail is at most T has every stage's own
tail at most T, so every stage holds at most the layers that keep it there (MeshTables.tail_range_us's upper end
caps them as memory does), which lowers what P stages hold at each cycle; a plan whose tail is above T pays at
least T (the lower end, mesh_fill.tail_us). The candidate's bound is the lesser of the two parts' bounds. T is the
highest level at which the first part's bound reaches the incumbent, found by doubling from the least tail, then
bisection to TAIL_RESOLUTION of the bound; there, the least tail of any plan that can beat the incumbent. The first
part is bounded without 1F1B's loops through the crossings (candidate_bound's loops; cheaper, and on that fleet the
same level, 32.4 ms: the candidate's bound 0.9851 -> 0.9906 of the incumbent, in 1.6 s; without the loops' level the
levels' bounds took half as long, without the stage coupling a quarter, for a level of 20.4 ms).

mesh_search splits a candidate's bound only where its first CP-SAT solve ends unproven, before the retries: split
before every first solve (every candidate the tables' bound leaves below the incumbent), it cost v100-a100-t4's mesh
search 8.0 s over 21 candidates, each of which the solve proves in a fraction of that (14.4 s instead of 7.8 s).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Protocol

from hgplan.planner.mesh_bound import CandidateBound
from hgplan.planner.mesh_fill import tail_us
from hgplan.planner.mesh_tables import MeshTables

TAIL_RESOLUTION = 5e-4
"""The level is known to within this share of the bound (2.25 ms on a 4.5 s iteration): a tenth of the search's
default gap."""


class BoundOf(Protocol):
    """A candidate bound of these tables (the caller's: mesh_sites.site_set_bound at its level)."""

    def __call__(self, tables: MeshTables, *, cycle_us: tuple[float, float], loops: bool) -> CandidateBound: ...


def most_tail_us(t: MeshTables) -> float:
    """No plan's tail is above this: every stage's class at all L layers with the dearest tied sync."""
    tied = max((max(r) for rows in t.tied_us for r in rows), default=0)
    return tied + max(a + b * t.num_layers for rows_a, rows_b in zip(t.tail_a_us, t.tail_b_us)
                      for ra, rb in zip(rows_a, rows_b) for a, b in zip(ra, rb))


def tail_split(t: MeshTables, base: CandidateBound, bound_of: BoundOf, enough_us: float) -> CandidateBound:
    """base (the candidate's bound, below enough_us, its incumbent) raised by splitting its plans at the tail
    (module docstring); base where no level lifts it."""
    if not base.bound_us < enough_us < math.inf:
        return base
    least, most, step = tail_us(t), most_tail_us(t), TAIL_RESOLUTION * base.bound_us
    open_cycle = (base.cycle_us[0], math.inf)  # fewer layers per stage: only the least cycle carries over

    def below(level: float) -> CandidateBound:
        return bound_of(replace(t, tail_range_us=(0.0, level)), cycle_us=open_cycle, loops=False)

    low, held, high = least, None, None
    while high is None:
        level = min(low + step, most)
        part = below(level)
        if part.bound_us < enough_us:
            high = level
        elif level >= most:  # every plan's tail is at most `most`: no plan beats the incumbent
            return CandidateBound(part.bound_us, base.cycle_us)
        else:
            low, held, step = level, part, 2 * step
    if held is None:
        return base
    while high - low > TAIL_RESOLUTION * base.bound_us:
        mid = (low + high) / 2
        part = below(mid)
        low, held, high = (mid, part, high) if part.bound_us >= enough_us else (low, held, mid)
    above = bound_of(replace(t, tail_range_us=(low, math.inf)), cycle_us=base.cycle_us, loops=True)
    return CandidateBound(min(held.bound_us, max(base.bound_us, above.bound_us)), base.cycle_us)
