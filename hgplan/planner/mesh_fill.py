"""The parts of a mesh candidate's objective besides (m - 1) x its cycle and its stage work that its lower bounds
(planner/mesh_bound.py, planner/mesh_sites.py, planner/mesh_cuts.py) count from its tables alone: the fill's
boundaries, what a boundary between two hosts adds to them, and the tail."""

from __future__ import annotations

import math

from hgplan.planner.mesh_tables import MeshTables


def _least_boundary_us(t: MeshTables) -> float:
    """The cheapest send and the cheapest latency of any boundary, one way."""
    lats = [v for r in t.intra_lat_us for v in r] + [t.lat_us[h][h2] for h in range(len(t.hosts))
                                                       for h2 in range(len(t.hosts)) if t.snd_us[h][h2] is not None]
    return min(t.send_values()) + min(lats)


def sends_fill_us(t: MeshTables, wan: tuple[int, float] = (0, 0.0)) -> float:
    """Least boundary time in the fill: each of the P - 1 boundaries at least the cheapest send and latency, both
    ways; wan = (k, x): k of them cross between sites and cost at least x in all (planner/mesh_sites.py)."""
    return 0.0 if t.pp == 1 else 2 * (t.pp - 1 - wan[0]) * _least_boundary_us(t) + wan[1]


def host_boundary_us(t: MeshTables) -> float:
    """What a boundary between two hosts costs the fill over the least that sends_fill_us counts for any: both
    ways, at least the least send between two hosts (the larger of its two ends' terms) and its latency. A plan over
    the sites U with k hosts has k - 1 such boundaries, |U| - 1 of them the WAN crossings counted apart."""
    H = len(t.hosts)
    between = [max(min(t.snd_us[h][h2]), min(t.rcv_us[h][h2])) + t.lat_us[h][h2] for h in range(H) for h2 in range(H)
               if h != h2 and t.snd_us[h][h2] is not None]
    if t.pp == 1 or not between:
        return 0.0
    return max(0.0, 2 * (min(between) - _least_boundary_us(t)))


def tail_us(t: MeshTables) -> float:
    """Least tail: the first stage's (its class, one layer at least, the tied sync), the fullest stage's (at least
    ceil(L / P) layers, any class) and the lower end of the tables' tail_range_us (planner/mesh_tail.py)."""
    P, H = t.pp, len(t.hosts)
    first = 3 if P == 1 else 0
    classes = {3} if P == 1 else {0, 2} if P == 2 else {0, 1, 2}
    pairs = [(h, o) for h in range(H) for o in range(len(t.options[h]))]
    tied = t.least_tied_us()
    first_us = min(t.tail_a_us[first][h][o] + t.tail_b_us[first][h][o] for h, o in pairs) + tied
    fullest = (min(t.tail_a_us[c][h][o] for c in classes for h, o in pairs)
               + min(t.tail_b_us[c][h][o] for c in classes for h, o in pairs) * math.ceil(t.num_layers / P))
    return max(first_us, fullest, t.tail_range_us[0])


def fixed_part_us(t: MeshTables, fill_us: float) -> float:
    """What candidate_bound counts of every plan's objective besides (m - 1) x its cycle: the fill's work (fill_us),
    its boundaries and the tail (planner/mesh_cuts.py bounds the cycle with it)."""
    return fill_us + (sends_fill_us(t) + tail_us(t))
