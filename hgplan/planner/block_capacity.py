"""The most layers a set's blocks hold at one cycle, over every split of the p stages (planner/block_bound.py).

Each group's block holds, at a cycle C, `one` layers as a single stage and `two` + (n - 2) `interior` as n >= 2
stages (its two end stages and its interior ones, each within C less what it surely pays). Every group hosts one
block. With a limit on the single-stage blocks (how many, which groups may), the split is the one the WAN
crossings' loss is charged against: a placement with no single-stage block loses at every crossing on both sides
(planner/wan_loops.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Shape = tuple[int | None, int | None, int, int]
"""(one, two, interior, top) of one group at one cycle: layers as one stage (None: cannot), in its two end stages
(None: cannot form two), per interior stage, and the most stages its block can take."""


def rising(shapes: Sequence[Shape]) -> bool:
    """Whether some group gains less from its second stage than from its third (a single stage pays two crossings,
    an interior one none): then the greedy count of increments overstates what the blocks hold."""
    return any(one is not None and two is not None and top > 2 and two - one < interior
               for one, two, interior, top in shapes)


def most_layers(shapes: Sequence[Shape], p: int, lone_ok: Sequence[bool] | None = None, least: int = 0,
                most: int = 0) -> float:
    """The most layers over every split of p stages, each group >= 1 (-inf: none). With `lone_ok`, only the groups
    it marks may host a single stage, and between `least` and `most` of them do."""
    counted = lone_ok is not None
    if not counted:
        lone_ok, least, most = [True] * len(shapes), 0, 0
    width = most + 1
    best = np.full((width, p + 1), -np.inf)
    best[0, 0] = 0.0
    for (one, two, interior, top), may in zip(shapes, lone_ok):
        top = min(top, p)
        nxt = np.full((width, p + 1), -np.inf)
        if one is not None and may:
            if counted:  # one more single-stage block
                np.maximum(nxt[1:, 1:], best[:-1, :-1] + one, out=nxt[1:, 1:])
            else:
                np.maximum(nxt[:, 1:], best[:, :-1] + one, out=nxt[:, 1:])
        if two is not None:
            for n in range(2, top + 1):
                np.maximum(nxt[:, n:], best[:, :p + 1 - n] + two + (n - 2) * interior, out=nxt[:, n:])
        best = nxt
    return float(np.max(best[least:, p]))
