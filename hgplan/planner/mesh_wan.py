"""The least cycle of a mesh candidate's plans over hosts of two or more sites (planner/mesh_bound.py's
candidate_bound with every_site, per set of sites of planner/mesh_sites.py): a knapsack site by site in which some
block of every site faces another site, and, where the tables' cycle holds 1F1B's loops, the stages next to each
crossing leave twice its latency of slack (a Lagrangian dual, site_capacity's docstring)."""

from __future__ import annotations

import numpy as np

from hgplan.planner.mesh_knapsack import ROLE_PAIRS, ROLES, block_layers, merged, per_class, roles_step
from hgplan.planner.mesh_order import NONE, whole_layers
from hgplan.planner.mesh_tables import MeshTables

LOOP_PRICES = 8
"""Prices above 0 per microsecond of slack at which the least cycle of plans across sites prices 1F1B's loops
(loop_prices)."""


SITE_ROLES = ((0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 0), (1, 0, 1), (0, 1, 0), (0, 1, 1))
"""A block's (first stage, last stage, ends facing another site) in _site_gains' order; none holds both ends."""
SITE_STATES = tuple((f, ll, w) for f in (0, 1) for ll in (0, 1) for w in (0, 1, 2))
"""(first stage placed, last stage placed, block ends facing another site: 0, 1, 2 or more) of site_capacity's
knapsack over a site's hosts."""


def _within(state: tuple[int, int, int], role: tuple[int, int, int]) -> tuple[int, int, int] | None:
    joined = merged(state[:2], role[:2])
    return None if joined is None else (*joined, min(2, state[2] + role[2]))


SITE_PAIRS = np.array(sorted(((s, r, SITE_STATES.index(k)) for s, state in enumerate(SITE_STATES)
                              for r, role in enumerate(SITE_ROLES) if (k := _within(state, role)) is not None),
                             key=lambda p: p[2])).T
"""mesh_knapsack.roles_step's `pairs` of that knapsack."""


def _site_gains(a: dict[str, np.ndarray], cycle: float, P: int, prices: np.ndarray) -> np.ndarray:
    """As mesh_bound._gains for a pipeline over hosts of several sites, by how many of the block's ends face a host of
    another site (e: 0-2, each paying the least send across sites, the others the least send within the host's
    site): gain[SITE_ROLES.index((f, l, e)), i, j] at the loop dual's price prices[i] (site_capacity; 0: the layers
    themselves). No block holds the whole pipeline."""
    first, last, intra, loc, wan = a["first"], a["last"], a["intra"], a["local"], a["wan"]
    ends = {"ll": loc + loc, "lw": loc + wan, "ww": wan + wan, "fl": first + loc, "fw": first + wan,
            "lL": loc + last, "wL": wan + last, "fi": first + intra, "li": loc + intra, "wi": wan + intra,
            "Li": last + intra, "ii": 2 * intra}
    layers = whole_layers(cycle, np.stack(list(ends.values())), a["tau"], a["most"])
    # held[end][i, 0, o]: what a stage of option o with these ends counts at price i (one array over the ends)
    held = np.repeat(layers[:, None, None, :], prices.size, axis=1)
    at = {name: n for n, name in enumerate(ends)}
    price = prices[:, None, None]
    # stages with e ends across sites (at the price 0 alone, the layers as they are)
    for name, e in (("lw", 1), ("ww", 2), ("fw", 1), ("wL", 1), ("wi", 1)) if prices.any() else ():
        k, spare = layers[at[name]], cycle - ends[name] - a["wan_lat"]
        with np.errstate(invalid="ignore"):  # an end no option can take (inf) is NONE whatever the price
            value = np.where(price * e * a["tau"] < 1, k + price * e * (spare - k * a["tau"]),
                             1 + price * e * (spare - a["tau"]))
        held[at[name]] = np.where(k >= 1, value, NONE)
    # per role, in SITE_ROLES' order: the ends of its single stage, of its block's head and of its tail
    parts = (("ll", "li", "li"), ("lw", "li", "wi"), ("ww", "wi", "wi"), ("fl", "fi", "li"), ("fw", "fi", "wi"),
             ("lL", "li", "Li"), ("wL", "wi", "Li"))
    # every role's blocks at once: one array per part of the block, a leading axis over the roles
    single, head, tail = (held[[at[names[n]] for names in parts]] for n in range(3))
    cap = block_layers(np.arange(P + 1)[None, None, :, None], single, head, tail, held[at["ii"]], a["slots"])
    gains = cap.max(axis=3)
    gains.setflags(write=False)  # shared by a class's hosts (per_class)
    return gains


def site_capacity(hosts: list[dict[str, np.ndarray]], sites: list[str], cycle: float, P: int,
                   prices: np.ndarray = np.zeros(1)) -> float:
    """mesh_bound._capacity of plans that use every site of the hosts (at least two): each site's hosts first form a
    table of (stages, first stage placed, last stage placed, block ends facing another site: 0, 1, 2 or more), a site
    keeps only the states with enough such ends (the pipeline enters and leaves a site, or leaves and comes back to
    the site of both its first and last stage: two; one where the site holds one of them), and the sites' tables are
    then combined as mesh_bound._capacity combines hosts. So a site's hosts cannot all pay their cheap local sends.

    With prices above 0 (tables whose cycle holds 1F1B's loops, three micro-batches or more), the loops through each
    crossing: the two stages next to it leave slack x (the cycle less their busy time) of at least twice its latency
    together (costmodel/pipeline.py, segment_loops, n = 2), and each crossing's latency is at least the least latency
    from either end's host to another site (wan_lat), so the stages' slack, each counted once per end across sites,
    sums to at least the sum of their ends' wan_lat. At a price mu >= 0 per microsecond of slack the layers held are
    at most the sum over stages of k + mu e (x - wan_lat), e its ends across sites (Lagrangian relaxation: the
    added term is >= 0 on every plan); with x <= cycle - penalty - k tau, each stage's best is k = the most it holds
    where mu e tau < 1 and one layer where not, so the knapsack runs on those values, at every price at once, and
    any price's value bounds the layers (the least is taken)."""

    shape = (prices.size, P + 1)
    best = np.full((len(ROLES),) + shape, NONE)
    best[0, :, 0] = 0.0
    gains = per_class(hosts, lambda a: _site_gains(a, cycle, P, prices))
    # per (f, l): the states of a site that keep it, with enough ends facing another site
    kept = [[SITE_STATES.index((f, ll, w)) for w in (1, 2) if w >= (1 if f + ll == 1 else 2)] for f, ll in ROLES]
    for site in dict.fromkeys(sites):
        cur = np.full((len(SITE_STATES),) + shape, NONE)
        cur[0, :, 0] = 0.0
        for host_gains in (g for g, s in zip(gains, sites) if s == site):
            cur = roles_step(cur, host_gains, P, SITE_PAIRS)
        table = np.stack([cur[k].max(axis=0) for k in kept])
        table[..., 0] = NONE  # a used site takes at least one stage
        best = roles_step(best, table, P, ROLE_PAIRS, optional=False)  # every site is used
    return float(best[ROLES.index((1, 1)), :, P].min())


def prices_loops(t: MeshTables) -> bool:
    """Whether candidate_bound's least cycle of plans over two or more sites prices 1F1B's loops (loops=True): where
    the tables' cycle holds them (hosts in two or more sites) and a loop of two micro-batches fits (three or more)."""
    return t.loops and t.microbatches >= 3 and t.pp > 1


def loop_prices(hosts: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The prices per microsecond of slack at which site_capacity evaluates its loop dual: 0, LOOP_PRICES - 1
    geometric steps from 0.1 to 0.8 of the inverse of the fastest per-layer time, and twice it. Measured with 24
    prices from a twentieth of the slowest host's inverse to twice the fastest's: on the 40 first candidates of the
    three-site benchmark fleet and the 10 first of the eight-group one, the least capacity came at 0.13-0.62 of the
    fastest's inverse in 398 of the 401 bisection steps where a price lowered it, and at 1.35-2.0 in 3."""
    fastest = min(float(a["tau"].min()) for a in hosts)
    return np.concatenate([[0.0], np.geomspace(0.1, 0.8, LOOP_PRICES - 1) / fastest, [2.0 / fastest]])
