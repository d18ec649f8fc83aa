"""A mesh candidate's lower bound site set by site set: the boundaries a pipeline sends across the WAN.

planner/mesh_bound.py prices every boundary of the fill at the cheapest send and latency of the candidate, an
own-mesh send of a few hundred microseconds, while a plan over hosts of several sites crosses between them, and a
crossing costs its send and the link's latency both ways (on the 1024-GPU three-site benchmark fleet 91 ms of send
and 20 ms of latency each way: a tenth of the iteration of a five-stage plan that crosses twice). Which sites a plan
uses is not known before the solve, so the bound is the least over the sets U of sites a plan can use of

    bound(U) = candidate_bound(the tables restricted to U's hosts) + what U's crossings cost above the least send.

A plan whose hosts use exactly the sites U visits them along its pipeline, so the pairs of sites its boundaries
cross join U: they contain a spanning tree of U, and its crossings cost at least the least spanning tree of the site
graph whose edge {a, b} is the cheapest crossing between a host of a and one of b (2 (max(least send term, least
receive term) + latency): both ways, as in the fill). The other boundaries keep the cheapest send, so with k = |U| -
1 crossings of least total x the fill's boundaries are at least 2 (P - 1 - k)(least send + latency) + x
(mesh_fill.sends_fill_us). Every value candidate_bound returns holds that boundary term once, so the bound of
plans over exactly U is the bound of U's hosts plus the difference. With two or more sites the restricted bound is
also told that every site of U is used (every_site): the pipeline enters or leaves each of them, so in each some
block's end faces another site and pays a crossing's send in the cycle (mesh_wan.site_capacity), which the bound
over all hosts prices at the cheapest send to any host.

The sets are evaluated lazily, least lower bound first: the bound over all hosts without crossings, b0, is below the
bound of every set (each holds fewer plans), so b0 + U's crossings bounds every U; a set gets its own bound only when
it is the least. It stops at the first set whose value is its own bound, or at or above what the caller needs (its
incumbent).
"""

from __future__ import annotations

import heapq
import itertools
import math

from hgplan.planner.mesh_bound import CandidateBound, candidate_bound
from hgplan.planner.mesh_fill import sends_fill_us
from hgplan.planner.mesh_tables import MeshTables
from hgplan.planner.spanning import least_spanning_tree

MAX_SITES = 6
"""Candidates over more sites than this keep the bound without crossings (2^6 - 1 = 63 sets of sites at most)."""


def cheapest_crossings(crossings) -> dict[tuple[str, str], float]:
    """The cheapest crossing between each two sites, keyed by the sorted pair, from (site a, site b, least send term,
    least receive term, latency) of every path between a host of a and one of b: a boundary costs the larger of its
    two ends' terms, and the fill counts it both ways with the link's latency. Pairs no path joins are left out."""
    edges: dict[tuple[str, str], float] = {}
    for a, b, send, recv, latency in crossings:
        key = (min(a, b), max(a, b))
        edges[key] = min(edges.get(key, math.inf), 2 * (max(send, recv) + latency))
    return edges


def site_edges_us(t: MeshTables) -> dict[tuple[str, str], float]:
    """cheapest_crossings of the tables' hosts."""
    return cheapest_crossings((t.sites[h], t.sites[h2], min(t.snd_us[h][h2]), min(t.rcv_us[h][h2]), t.lat_us[h][h2])
                              for h, h2 in itertools.permutations(range(len(t.hosts)), 2)
                              if t.sites[h] != t.sites[h2] and t.snd_us[h][h2] is not None)


def site_set_bound(t: MeshTables, fill_us: float, *, cycle_us: tuple[float, float] = (0.0, math.inf),
                   enough_us: float = math.inf, stages: bool = False,
                   floors_us: dict[frozenset[str], float] | None = None, loops: bool = True,
                   stop_at_s: float | None = None) -> CandidateBound:
    """candidate_bound (same arguments) with the WAN crossings of every set of sites a plan can use (module
    docstring); its cycle_us is the whole candidate's. floors_us: a lower bound already known of the plans over
    each set of sites (planner/mesh_first.py's), which orders the sets and is kept where it is the higher; loops:
    a set of two or more sites' bound prices 1F1B's loops through its crossings and their sends in the work where
    they apply (candidate_bound's loops); stop_at_s: the search's deadline (candidate_bound's: limits.OutOfTime)."""
    whole = candidate_bound(t, fill_us, cycle_us=cycle_us, enough_us=enough_us, stages=stages, stop_at_s=stop_at_s)
    sites = tuple(sorted(set(t.sites)))
    if len(sites) == 1 or len(sites) > MAX_SITES or whole.bound_us >= enough_us:
        return whole
    edges = site_edges_us(t)
    # every value candidate_bound returns is a core (the rest of the objective) plus sends_fill_us of its tables
    core = whole.bound_us - sends_fill_us(t)
    heap, spans = [], {}
    for k in range(1, min(len(sites), t.pp) + 1):
        for U in itertools.combinations(sites, k):
            spans[U] = least_spanning_tree(U, edges)
            floor = (floors_us or {}).get(frozenset(U), -math.inf)
            if math.isfinite(spans[U]) and floor < math.inf:  # an infinite floor: no plan over U
                heapq.heappush(heap, (max(floor, core + sends_fill_us(t, (k - 1, spans[U]))), -k, U, False))
    while heap:
        value, _, U, exact = heapq.heappop(heap)
        if exact or value >= enough_us:
            return CandidateBound(value, whole.cycle_us)
        wan = (len(U) - 1, spans[U])
        part = t if U == sites else t.restricted([h for h in range(len(t.hosts)) if t.sites[h] in U])
        extra = sends_fill_us(part, wan) - sends_fill_us(part)
        # fewer hosts, or every site used, hold no more layers at a cycle: the least cycle is at least the whole's
        least = max(whole.cycle_us[0], loop_floor_us(part, U, edges))
        bound = candidate_bound(part, fill_us, cycle_us=(least, math.inf), enough_us=enough_us - extra,
                                stages=stages, every_site=len(U) > 1, loops=loops, stop_at_s=stop_at_s)
        heapq.heappush(heap, (max(value, bound.bound_us + extra), -len(U), U, True))
    return CandidateBound(math.inf)


def loop_floor_us(part: MeshTables, U: tuple[str, ...], edges: dict[tuple[str, str], float]) -> float:
    """A cycle below which no plan over exactly the sites U (two or more, of tables whose cycle holds 1F1B's loops)
    runs: some boundary crosses between two of them, and the loop of two micro-batches through it
    (costmodel/pipeline.py, segment_loops) holds its two stages' work (a layer each at least) and its send and latency
    both ways, so 2 C >= 2 (least tau + the cheapest crossing's send + latency). 0 where it does not apply."""
    if len(U) < 2 or not part.loops or part.microbatches < 3 or part.pp < 2:
        return 0.0
    crossing = min((v for (a, b), v in edges.items() if a in U and b in U), default=math.inf)
    return 0.0 if not math.isfinite(crossing) else min(min(r) for r in part.layer_us) + crossing / 2
