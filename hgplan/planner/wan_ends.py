"""The block ends a placement over several sites must spend on the WAN, and the layers they cost its capacity at
a cycle (planner/block_bound.py subtracts them before it looks for the smallest feasible cycle). Legend as in
planner/block_bound.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hgplan.planner.bounds import FLOOR_EPS
from hgplan.planner.wan_loops import LoopSlack, PathEnds

Role = tuple[float, float, float, float, float, int]
"""(v tau, lone, end_a, end_b, interior, slots) of one group: see planner/block_bound.py's module docstring."""


def held(c: float, role: Role, v: int) -> tuple[int | None, int | None]:
    """Layers a group's block holds at cycle c as one stage, and in its two end stages (None: cannot be formed)."""
    vt, lone, end_a, end_b, _, slots = role
    one = v * math.floor((c - lone) / vt + FLOOR_EPS)
    held_a = v * math.floor((c - end_a) / vt + FLOOR_EPS)
    held_b = v * math.floor((c - end_b) / vt + FLOOR_EPS)
    return (one if one >= v else None), (held_a + held_b if min(held_a, held_b) >= v and slots >= 2 else None)


def lost(c: float, one: int | None, two: int | None, role: Role | None, v: int) -> float:
    """Layers a group's block loses at cycle c in `role` against (one, two), what it holds without WAN ends (as
    one stage, and in its two end stages), the least over the shapes both can take (inf: none, or no such role)."""
    if role is None:
        return math.inf
    w_one, w_two = held(c, role, v)
    least = one - w_one if one is not None and w_one is not None else math.inf
    return min(least, two - w_two) if two is not None and w_two is not None else least


@dataclass(frozen=True, slots=True)
class WanEnds:
    """The block ends a placement over several sites must spend on the WAN.

    The blocks form a path (a ring with interleaving) that visits every site of the set. Every maximal run of one
    site's blocks is entered and left over the WAN, except at the path's own two ends, so each site has at least two
    block ends that send to another site, and a path's two end sites (if they differ) at least one. Such an end's
    stage pays at least its group's cheapest send to another site instead of its cheapest partner's, and holds fewer
    layers at a cycle C. Per group, the layers lost with one or two WAN ends are the least over the block shapes it
    can take (one stage; two or more, whose end stages take them); the sites' cheapest choices of ends then bound
    what the whole placement loses, which is subtracted from the capacity in block_bound._BlockBound.feasible."""

    site: tuple[int, ...]
    """Per group (the roles' order), its site's index."""
    variants: tuple[tuple[Role, Role, Role | None], ...]
    """Per group, its role with no, one and two WAN ends (None: that group cannot have two: a path's end block)."""
    sites: int
    single: frozenset[int] | None
    """Sites that may have only one WAN end (a path's end sites); None: any two sites (the ends are unknown)."""
    v: int
    loops_of: Callable[[], LoopSlack | None] | None = None
    """The slack 1F1B's loops demand next to the WAN, computed when first asked for (None: none, as with
    interleaving or fewer than 3 micro-batches)."""
    path: PathEnds | None = None
    """The path's first and last group, when known (for the loops)."""

    @property
    def loops(self) -> LoopSlack | None:
        """loops_of's value (None without it)."""
        return None if self.loops_of is None else self.loops_of()

    def ends_loss(self, c: float) -> float:
        """Least layers the WAN ends cost the placement at cycle c (inf: no placement), the loops' slack aside (>= 0:
        a role with WAN ends pays at least the sends of the role without)."""
        one_end, two_ends = [math.inf] * self.sites, [math.inf] * self.sites
        second = [math.inf] * self.sites  # the second-cheapest single end of the site (another group)
        v = self.v
        for s, (r0, r1, r2) in zip(self.site, self.variants):
            one, two = held(c, r0, v)
            lost1, lost2 = lost(c, one, two, r1, v), lost(c, one, two, r2, v)
            if lost1 < one_end[s]:
                one_end[s], second[s] = lost1, one_end[s]
            elif lost1 < second[s]:
                second[s] = lost1
            if lost2 < two_ends[s]:
                two_ends[s] = lost2
        need = [min(two, one + sec) for two, one, sec in zip(two_ends, one_end, second)]
        allowed = range(self.sites) if self.single is None else sorted(self.single)

        def gain(s: int) -> float:
            """What a site saves with one WAN end instead of two."""
            return 0.0 if math.isinf(one_end[s]) else need[s] - one_end[s]

        single = sorted(allowed, key=gain, reverse=True)[:2]
        return sum(one_end[s] if s in single else need[s] for s in range(self.sites))
