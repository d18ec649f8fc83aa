"""What the block bound proves of an item, handed to its block model as cuts (planner/block_model.py).

planner/block_bound.py bounds an item over each choice of its (first, last) groups; the least of those is the item's
bound. Each choice also proves a cycle no placement with those ends is at or below (its bisection's low end) and a
value no such placement is below. The block model's LP relaxation knows little of the cycle (a block's layers are
fractional there): on the 8-group benchmark fleet's 26-stage item over all eight groups its bound after 12
deterministic seconds was 3.28 s x v against the 4.966 s incumbent to prove. With the cuts (the cycle at least the
floor of the choice the plan has; a choice whose value reaches the incumbent ruled out) that proof took 3.9-4.5
deterministic seconds (docs/planner.md, "Block model first").

Legend: as in planner/block_bound.py; us are integer microseconds, as the tables'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hgplan.plan import ParallelConfig
from hgplan.planner.block_bound import _BlockBound, _ends_pass, block_bound_us
from hgplan.planner.bounds import BoundContext, subset_terms
from hgplan.planner.costs import US


@dataclass(frozen=True, slots=True)
class BlockCuts:
    """What block_bound_us proves of an item's plans, for its CP-SAT solves (planner/block_model.py): every plan's
    cycle is above floor_us, and a plan whose first and last groups are (a, b) has a cycle above at(a, b)[0] and a
    v-scaled objective of at least v x at(a, b)[1] (us). Kept per pair of classes of interchangeable groups (`rep`:
    each group's class, by its first member), which share their figures."""

    floor_us: int
    rep: dict[str, str]
    ends: dict[tuple[str, str], tuple[int, float]]

    def at(self, a: str, b: str) -> tuple[int, float]:
        """(cycle floor, bound) of the plans whose first group is a and last is b (a != b)."""
        return self.ends[self.rep[a], self.rep[b]]


def block_cuts(ctx: BoundContext, cfg: ParallelConfig, subset: tuple[str, ...], *, L: int, m: int,
               enough_us: float = math.inf) -> tuple[float, BlockCuts | None]:
    """block_bound_us with known ends (no early exit), and what it proved per choice of ends (None for one group, or a
    set no placement fits). A choice the bound did not bisect (its value from the floor, at or above the least
    choice's) and below `enough_us` (the incumbent) is bisected now for its own cycle floor, or shown at or above
    enough_us; the bound itself is block_bound_us's."""
    terms = subset_terms(ctx, subset, L=L, p=cfg.pp)
    if terms is None:
        return math.inf, None
    if len(subset) == 1:
        return block_bound_us(ctx, cfg, subset, L=L, m=m), None
    bb = _BlockBound(ctx, cfg, subset, L=L, m=m, tail=terms.tail, edges=terms.edges)
    best, proved = _ends_pass(bb, ctx, subset, math.inf, math.inf)
    if not math.isfinite(best):
        return math.inf, None
    below, enough = bb.floor()[1], enough_us / US * cfg.vpp - terms.fill_extra
    for (a, b), (lo, value) in proved.items():
        if lo <= below and value < enough:
            cost, (role, wan) = bb.ends_cost(a, b), bb.roles(a, b)
            reached, feasible_at = bb.beyond(enough - cost, role, wan)
            own, lo = (enough - cost, below) if reached else bb.compute_value(role, wan, feasible_at=feasible_at,
                                                                                 above=below)
            proved[a, b] = (max(lo, below), max(value, own + cost))
    rep = {k: c[0] for c in ctx.members(subset) for k in c}
    ends = {(rep[a], rep[b]): (math.floor(lo * US), (value + terms.fill_extra) / cfg.vpp * US)
            for (a, b), (lo, value) in proved.items()}
    return (best + terms.fill_extra) / cfg.vpp * US, BlockCuts(floor_us=min(f for f, _ in ends.values()), rep=rep,
                                                               ends=ends)
