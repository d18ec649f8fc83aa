"""The least spanning tree of a few sites, shared by the stock family's WAN crossings (planner/wan_loops.py) and the
mesh family's sets of sites (planner/mesh_sites.py, planner/mesh_search.py): a path through every site crosses
between them along a connected set of site pairs, which contains a spanning tree."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping


def least_spanning_tree(nodes: Iterable[Hashable], cost: Mapping[tuple, float]) -> float:
    """Weight of a least spanning tree of `nodes` under `cost`, keyed by pairs of nodes (a pair it lacks, or one
    with an end outside `nodes`, is no edge): Kruskal, ties in sorted order; inf when the nodes are not connected."""
    root = {x: x for x in nodes}

    def find(x: Hashable) -> Hashable:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    total, joined = 0.0, 0
    for val, (a, b) in sorted((val, pair) for pair, val in cost.items() if pair[0] in root and pair[1] in root):
        if not math.isfinite(val):
            break
        ra, rb = find(a), find(b)
        if ra != rb:
            root[ra] = rb
            total, joined = total + val, joined + 1
    return total if joined == len(root) - 1 else math.inf
