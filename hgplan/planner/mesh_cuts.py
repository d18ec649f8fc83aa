"""What the bounds prove of a mesh candidate's plans before its CP-SAT solve (planner/mesh_model.py): cycle floors
as cuts, and which (first host, last host) pairs need no solve at all.

The mesh model's LP relaxation knows little of the cycle: a stage may take fractions of every option, so at the
root of a v100-a100-t4 candidate's solve the objective's bound was a tenth of the incumbent it had to prove, and
the proof all branching. What the bounds know goes in (mesh_model.CycleCuts):

- the candidate's floor: planner/mesh_bound.py has bisected a cycle no plan of it is below (CandidateBound.cycle_us);
- per (first host, last host) pair, for a candidate solved one pair at a time (mesh_model.SPLIT_HOSTS): a plan
  below the incumbent U has (m - 1) x cycle + the rest of its objective < U, and the rest is at least what
  candidate_bound counts of it (mesh_fill.fixed_part_us), so its cycle is at most the ceiling (U - rest) / (m - 1).
  With the least stage work of plans that use both its hosts (mesh_bound.least_stage_work_us, at the ceiling) in
  place of the fill's, the pair's plans below U have a cycle of at most its own top; mesh_order.ordered_capacity
  with both ends fixed, bisected between the candidate's floor and that top, gives the pair's floor, and a pair
  that holds the layers at no cycle up to its top has no plan below the incumbent and is not solved.
"""

from __future__ import annotations

import math

from hgplan.planner.mesh_bound import BOUND_RESOLUTION, BOUND_RESOLUTION_US, least_stage_work_us
from hgplan.planner.mesh_fill import fixed_part_us
from hgplan.planner.mesh_model import SPLIT_HOSTS, CycleCuts, end_pairs
from hgplan.planner.mesh_order import least_ordered_cycle, order_hosts
from hgplan.planner.mesh_tables import MeshTables

PAIR_SIZE_MAX = 4_000_000
"""The pairs' floors use the ordered capacity up to this size (mesh_order.ORDERED_SIZE_MAX's measure, eight times
that limit): a solve needs a few evaluations per pair, where the candidate's bound needs a bisection of them on
every candidate it takes. Measured 2026-11-27: 1.3 ms per evaluation at size 573,750 (the 504-GPU fleet's B = 4,
P = 25: three hosts of 26 options), about 20 ms at 5.6 million."""


def cycle_cuts(t: MeshTables, fill_us: float, floor_us: float, upper_us: float,
               pairs: tuple[tuple[int, int], ...] | None = None) -> CycleCuts:
    """The cuts of one solve of candidate t against an incumbent upper_us (only plans below it count; inf: none):
    floor_us, a cycle no plan is below (the candidate's bound's); fill_us, the work of the fill as the candidate's
    bound took it (mesh_search's per-B figure); pairs: of a candidate solved per pair of end hosts, those still open
    after an earlier try (None: all). Pairs without a plan below upper_us are left out of CycleCuts.pairs_us."""
    floor = max(0, math.floor(floor_us))
    ends = end_pairs(t) if pairs is None else list(pairs)
    every = CycleCuts(floor_us=floor, pairs_us=None if pairs is None else dict.fromkeys(ends, floor))
    P, L, m = t.pp, t.num_layers, t.microbatches
    order = order_hosts(t, PAIR_SIZE_MAX) if len(t.hosts) in SPLIT_HOSTS and m > 1 and math.isfinite(upper_us) else None
    if order is None:
        return every
    others = fixed_part_us(t, 0.0)  # the fill's boundaries and the tail
    rest = fill_us + others
    ceiling = (upper_us - 1 - rest) / (m - 1)  # the model admits objectives up to upper_us - 1
    step = max(BOUND_RESOLUTION_US, BOUND_RESOLUTION * ((m - 1) * floor_us + rest)) / (m - 1)
    floors = {}
    works = least_stage_work_us(t, ceiling, [tuple(sorted(set(e))) for e in ends]) if ceiling >= floor_us else []
    for e, work in zip(ends, works):
        # the largest cycle a plan of the pair below upper_us can have, with that work
        top = min(ceiling, (upper_us - 1 - others - work) / (m - 1))
        if top >= floor_us:
            low, high = least_ordered_cycle(order, P, L, floor_us, top, step, ends=e)
            if math.isfinite(high):
                floors[e] = max(floor, math.floor(low))
    return CycleCuts(floor_us=floor, pairs_us=floors)
