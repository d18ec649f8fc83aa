"""The most layers a set's blocks hold at one cycle, over every split of the p stages (planner/block_bound.py).

Each group's block holds, at a cycle C, `one` layers as a single stage and `two` + (n - 2) `interior` as n >= 2
stages (its two end stages and its interior ones, each within C less what it surely pays). Every group hosts one
block. With a limit on the single-stage blocks (how many, which groups may), the split is the one the WAN
crossings' loss is charged against: a placement with no single-stage block loses at every crossing on both sides
(planner/wan_loops.py).
"""

from __future__ import annotations

import functools
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
    it marks may host a single stage, and between `least` and `most` of them do.

    The split does not depend on the groups' order, and the bisections of many sets and orders of end groups meet
    the same groups' shapes again: they are sorted and the answer memoised (_most_layers)."""
    counted = lone_ok is not None
    may = lone_ok if counted else [True] * len(shapes)
    groups = tuple(sorted((NONE if one is None else one, NONE if two is None else two, interior, min(top, p), ok)
                          for (one, two, interior, top), ok in zip(shapes, may)))
    return _most_layers(groups, p, counted, least if counted else 0, most if counted else 0)


NONE = -1
"""A shape's `one` or `two` that cannot be (None) in _most_layers' key: layers are never negative."""


@functools.lru_cache(maxsize=1 << 16)
def _most_layers(groups: tuple[tuple[int, int, int, int, bool], ...], p: int, counted: bool, least: int,
                 most: int) -> float:
    """most_layers of the groups' (one, two, interior, top, may host a single stage), NONE for None."""
    width = most + 1
    best = np.full((width, p + 1), -np.inf)
    best[0, 0] = 0.0
    for one, two, interior, top, may in groups:
        nxt = np.full((width, p + 1), -np.inf)
        if one != NONE and may:
            if counted:  # one more single-stage block
                np.maximum(nxt[1:, 1:], best[:-1, :-1] + one, out=nxt[1:, 1:])
            else:
                np.maximum(nxt[:, 1:], best[:, :-1] + one, out=nxt[:, 1:])
        if two != NONE:
            for n in range(2, top + 1):
                np.maximum(nxt[:, n:], best[:, :p + 1 - n] + two + (n - 2) * interior, out=nxt[:, n:])
        best = nxt
    return float(np.max(best[least:, p]))
