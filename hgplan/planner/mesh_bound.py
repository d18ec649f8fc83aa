"""Lower bound of one (B, P) candidate of the asymmetric family from its MeshTables, before any CP-SAT solve (used by
planner/mesh_search.py to order, prune and certify candidates).

Objective (MeshTables.objective) = (m - 1) cycle + fill + tail, each bounded from below:

- cycle: every stage's busy time (its layers x tau_o, the embedding on the first stage, the LM head on the last,
  and the boundaries it touches) is at most the cycle, so at cycle c a stage of option o holds at most
  floor((c - penalty) / tau_o) whole layers (and at most what its memory fits, and at least one). Each used host
  runs one option on one contiguous block of j <= slots_o stages; inside the block the boundaries are the mesh's
  own sends, at its ends the boundaries to other hosts (at least the least cross send of the option) unless the
  block holds the pipeline's first or last stage. A knapsack over hosts (stages taken, first and last stage
  placed) gives the most layers P stages hold at c; the least c at which they hold L is found by bisection.
- fill: the work of the L layers, the cheapest embedding and head, and every boundary's least send and latency,
  forward and backward. The work depends on the cycle: at cycle c host h holds at most cap_h(c) layers (its best
  block under any option and role) at no less than the per-layer time of its fastest option that holds one, so W(c)
  = the L layers placed fastest host first within those caps; W does not increase with c. A plan whose cycle is c
  pays (m - 1) c + W(c), so the bound is min over c >= C* of that (on a grid, as in planner/block_bound.py): near C*
  the fastest hosts cannot take every layer and the slower ones' work counts. That W ignores that the fastest hosts'
  most layers need stages too, P in all: the stage-coupled W (stages=True, what the search computes when it first
  builds a candidate's tables) also takes the Lagrangian dual of least work over (stages, layers), where each used
  host takes j stages under one option o and j <= x <= cap(o, j) layers at x tau_o (planner/mesh_dual.py). The
  stage-coupled refinement also raises C* where the hosts are few enough (mesh_order.order_hosts): with the hosts'
  order along the pipeline, each block's ends priced by its actual neighbours and memory by stage position
  (planner/mesh_order.py), then recomputes W.
- tail: the first stage's least tail (the tied-embedding sync included) and the fullest stage's (at least
  ceil(L / P) layers); planner/mesh_tail.py raises it by splitting the plans at a level of the tail.

planner/mesh_sites.py calls this per set of sites a plan can use; for a set of two or more (every_site) the least
cycle comes from planner/mesh_wan.py, where each site's blocks face another site at least once or twice, and, where
the tables' cycle holds 1F1B's loops (loops=True), the stages next to each crossing leave it twice its latency of
slack (a Lagrangian dual; the least cycle without the loops first, then with them from there up, and the larger
work term of the two); there the stage-coupled W also has some block of each site face another, each used host
beyond one per site add a boundary between hosts (mesh_fill.host_boundary_us) and, where that still leaves it short
of the incumbent, one block hold each end of the pipeline (mesh_dual's roles). The knapsacks' arithmetic is
planner/mesh_knapsack.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hgplan.planner.limits import check_deadline
from hgplan.planner.mesh_fill import fixed_part_us, host_boundary_us
from hgplan.planner.mesh_dual import stage_work_at
from hgplan.planner.mesh_knapsack import Roles, block_layers, block_roles, merged, per_class, shared, step
from hgplan.planner.mesh_order import LAYER_SLACK, NONE, least_ordered_cycle, order_hosts, whole_layers
from hgplan.planner.mesh_tables import MeshTables
from hgplan.planner.mesh_wan import loop_prices, prices_loops, site_capacity

BOUND_RESOLUTION_US = 1.0
"""The bisection stops when the bound is known to within this (the tables' resolution) or BOUND_RESOLUTION of it."""
BOUND_RESOLUTION = 1e-4
"""A fiftieth of the search's default gap (0.5%): finer costs bisection steps and proves nothing more."""
WORK_GRID = 16
"""Intervals over which the bound minimises (m - 1) c + W(c); each costs at most 1/WORK_GRID of W's range."""
WORK_SPLITS = 1
"""Times the least of those intervals, fully evaluated, is halved (_least_work_us) while it stays the least."""


def _least(vals: list[float]) -> float:
    return min(vals, default=math.inf)


def _host_arrays(t: MeshTables, h: int) -> dict[str, np.ndarray] | None:
    """Per option of host h: slots, tau, memory limit, least own-mesh send, least send to or from another host (any,
    one of its own site, one of another site), embedding and head work, and the least latency to or from a host of
    another site (the same for every option). None when no option holds a layer."""
    L, H = t.num_layers, len(t.hosts)
    rows, fits = [], np.minimum(t.memory_matrix(h).max(axis=0), L)
    wan_lat = min((min(t.lat_us[h][h2], t.lat_us[h2][h]) for h2 in range(H) if t.sites[h2] != t.sites[h]
                   and (t.snd_us[h][h2] is not None or t.snd_us[h2][h] is not None)), default=0)
    for o in range(len(t.options[h])):
        most = int(fits[o])
        if most < 1:
            continue
        local, wan = (_least([t.snd_us[h][h2][o] for h2 in range(H) if h2 != h and t.snd_us[h][h2] is not None
                              and (t.sites[h2] == t.sites[h]) == same]
                             + [t.rcv_us[h2][h][o] for h2 in range(H) if h2 != h and t.rcv_us[h2][h] is not None
                                and (t.sites[h2] == t.sites[h]) == same]) for same in (True, False))
        intra = t.intra_send_us[h][o] if t.slots[h][o] >= 2 else math.inf
        rows.append((t.slots[h][o], t.layer_us[h][o], most, intra, min(local, wan), local, wan, t.first_us[h][o],
                     t.last_us[h][o], wan_lat))
    if not rows:
        return None
    cols = np.array(rows, dtype=float).T
    return dict(zip(("slots", "tau", "most", "intra", "cross", "local", "wan", "first", "last", "wan_lat"), cols))


def _held(a: dict[str, np.ndarray], cycle: float, penalty: np.ndarray) -> np.ndarray:
    """Whole layers one stage of each option holds at this cycle with this much else to do (NONE below one)."""
    return whole_layers(cycle, penalty, a["tau"], a["most"])


def _gains(a: dict[str, np.ndarray], cycle: float, P: int) -> dict[tuple[int, int], np.ndarray]:
    """gain[(f, l)][j]: most layers j stages of this host hold (NONE where it cannot), f / l: whether its block
    holds the pipeline's first / last stage."""
    return {key: g.max(axis=1) for key, g in _option_gains(a, cycle, P).items()}


def _option_gains(a: dict[str, np.ndarray], cycle: float, P: int) -> dict[tuple[int, int], np.ndarray]:
    """As _gains, per option: gain[(f, l)][j, o] (mesh_knapsack.block_roles; a single stage pays both its ends)."""
    if P == 1:
        g = np.full((2, a["tau"].size), NONE)
        g[1] = _held(a, cycle, a["first"] + a["last"])
        return {(1, 1): g}
    roles = block_roles(a, lambda penalties: _held(a, cycle, penalties), np.arange(P + 1)[:, None], np.array([[P]]))
    g = np.full((P + 1, a["tau"].size), NONE)
    g[P] = roles[(1, 1)][0]  # one host holds the whole pipeline: no boundary to another host
    return {**roles, (1, 1): g}


def _capacity(hosts: list[dict[str, np.ndarray]], cycle: float, P: int) -> float:
    """Most whole layers P stages hold at this cycle: a max-plus knapsack over hosts of (stages taken, first stage
    placed, last stage placed)."""
    best = {(f, ll): np.full(P + 1, NONE) for f in (0, 1) for ll in (0, 1)}
    best[(0, 0)][0] = 0.0
    for gains in per_class(hosts, lambda a: _gains(a, cycle, P)):
        best = step(best, gains, P, merged)
    return float(best[(1, 1)][P])


def _caps(hosts: list[dict[str, np.ndarray]], cycle: float, P: int) -> list[Roles]:
    """Per host and role (f, l), cap[j, o]: most layers j stages of option o hold at this cycle in a block that holds
    the pipeline's first / last stage as f / l say (below one: it cannot take j stages; _option_gains)."""
    return per_class(hosts, lambda a: _option_gains(a, cycle, P))


def _wan_caps(a: dict[str, np.ndarray], cycle: float, P: int) -> Roles:
    """As _caps' roles, of a block with at least one end facing a host of another site (its send the least across
    sites, the other end's the least of its role: another host's, the embedding's or the LM head's): one stage, or a
    head facing it and a tail. No such block holds both the first and the last stage."""
    fw, wl, wc, wi, ci, fi, li, ii = _held(a, cycle, np.stack([
        a["first"] + a["wan"], a["wan"] + a["last"], a["wan"] + a["cross"], a["wan"] + a["intra"],
        a["cross"] + a["intra"], a["first"] + a["intra"], a["last"] + a["intra"], 2 * a["intra"]]))
    j = np.arange(P + 1)[:, None]
    return {role: block_layers(j, single, wi, tail, ii, a["slots"])
            for role, single, tail in (((0, 0), wc, ci), ((1, 0), fw, fi), ((0, 1), wl, li))}


def _work_at(hosts: list[dict[str, np.ndarray]], caps: list[Roles], L: int) -> float:
    """W(cycle), caps = _caps at that cycle: least work (us) of the L layers on stages no longer than the cycle. Host
    h holds at most its best block's layers under any option and role, each at no less than the per-layer time of
    its fastest option that holds a layer at this cycle; the layers go fastest host first (inf when the caps cannot
    take them)."""
    rows = []
    for a, roles in zip(hosts, caps):
        per_option = np.max(list(roles.values()), axis=(0, 1))
        holds = per_option >= 1
        if holds.any():
            rows.append((float(a["tau"][holds].min()), float(per_option.max())))
    work, left = 0.0, float(L)
    for tau, most in sorted(rows):
        take = min(most + LAYER_SLACK, left)
        work, left = work + take * tau, left - take
        if left <= 0:
            return work
    return math.inf


def _least_work_us(hosts: list[dict[str, np.ndarray]], P: int, L: int, m: int, lo: float, hi: float,
                   top: float, need: float, stages: bool, sites: list[str] | None = None,
                   boundary_us: float = 0.0, stop_at_s: float | None = None) -> float:
    """Least (m - 1) c + W(c) over the cycles c a plan can have: above lo (too short) and at most top. W does not
    increase, so on [c_i, c_i+1) the value is at least (m - 1) c_i + W(c_i+1) (and W(hi) below hi, the least cycle
    known to hold the layers); past lo + span, span = (W(hi) - W(top)) / (m - 1), nothing beats the value at lo.
    Evaluated lazily, lowest interval first: an interval's W is at least any lower bound of W further right (W(top)
    at the least), so only the interval that is lowest gets its greedy W and then, with stages, its stage-coupled W,
    until the lowest has all of them or is at or above need (a value the caller needs no more than; the
    stage-coupled W stops its price search once the interval reaches it). The lowest interval with all of them is
    then halved, up to WORK_SPLITS times, its left half's W at its new end evaluated the same way: W drops fastest
    just above the least cycle, where the first interval's value takes W at its right end (on the four-site
    benchmark fleet's B = 16, P = 15 one halving raised the bound 0.9817 -> 0.9851 of the incumbent, 0.74 -> 0.79 s;
    a grid of 32 gave the same, 1.12 s, and more halvings 0.0003 more). With stages W(hi) is stage-coupled too,
    which widens the span. Both Ws of one cycle share its caps. sites: the hosts' sites, for plans over every one of
    them (the stage-coupled W then has some block of each site face another, mesh_dual). stop_at_s: OutOfTime past
    it (limits.check_deadline), before each W."""
    caps_of: dict[float, list[np.ndarray]] = {}

    def caps(cycle: float) -> list[np.ndarray]:
        if cycle not in caps_of:
            caps_of[cycle] = _caps(hosts, cycle, P)
        return caps_of[cycle]

    def work(cycle: float, _enough: float = math.inf) -> float:
        return _work_at(hosts, caps(cycle), L)

    price: list[float | None] = [None]  # the last best price of the stage-coupled W, where the next one starts

    def stage_work(cycle: float, enough: float = math.inf) -> float:
        across = None if sites is None else (sites, per_class(hosts, lambda a: _wan_caps(a, cycle, P)), boundary_us)
        value, price[0] = stage_work_at(hosts, caps(cycle), P, L, enough, across, roles=across is not None,
                                        start=price[0])
        return value

    if m == 1:
        return max(work(top), stage_work(top) if stages else -math.inf)
    w_hi, w_top = work(hi), work(top)
    if not math.isfinite(w_hi):
        return (m - 1) * lo + w_top
    if stages and (m - 1) * lo + w_hi < need:
        w_hi = max(w_hi, stage_work(hi))
    grid = list(lo + max(0.0, w_hi - w_top) / (m - 1) * np.arange(WORK_GRID + 1) / WORK_GRID)
    levels = [work, stage_work] if stages else [work]
    known, done, depth = [w_top] * WORK_GRID, [0] * WORK_GRID, [0] * WORK_GRID
    while True:
        check_deadline(stop_at_s)
        vals = (m - 1) * np.array(grid[:-1]) + np.maximum.accumulate(np.array(known)[::-1])[::-1]
        i = int(np.argmin(vals))
        if vals[i] >= need:
            return min((m - 1) * lo + w_hi, float(vals[i]))
        if done[i] < len(levels):
            known[i] = max(known[i], levels[done[i]](max(grid[i + 1], hi), need - (m - 1) * grid[i]))
            done[i] += 1
            continue
        mid = (grid[i] + grid[i + 1]) / 2
        if depth[i] == WORK_SPLITS or mid <= hi:
            return min((m - 1) * lo + w_hi, float(vals[i]))
        # halve the least interval: its left half's W at mid is at least the W known at its end
        grid.insert(i + 1, mid)
        known.insert(i, known[i])
        done.insert(i, 0)
        depth[i] += 1
        depth.insert(i, depth[i])


def least_stage_work_us(t: MeshTables, cycle_us: float, used: list[tuple[int, ...]]) -> list[float]:
    """Per set of hosts in `used` (indices of t.hosts): the least total stage work (layers, embedding and head) of a
    plan whose cycle is at most cycle_us and which uses those hosts: the stage-coupled W (mesh_dual.stage_work_at,
    those hosts forced in; it does not decrease as the cycle shrinks) and the cheapest embedding and head."""
    kept = [(h, a) for h in range(len(t.hosts)) if (a := _host_arrays(t, h)) is not None]
    if not kept:
        return [math.inf] * len(used)
    hosts, index = shared([a for _, a in kept]), {h: i for i, (h, _) in enumerate(kept)}
    caps = _caps(hosts, cycle_us, t.pp)
    edges = min(float(a["first"].min()) for a in hosts) + min(float(a["last"].min()) for a in hosts)
    return [math.inf if any(h not in index for h in u) else edges + stage_work_at(
        hosts, caps, t.pp, t.num_layers, forced=frozenset(index[h] for h in u))[0] for u in used]


@dataclass(frozen=True, slots=True)
class CandidateBound:
    """A candidate's lower bound and what its bisection learnt about the least cycle, for a later, tighter call."""

    bound_us: float
    """No plan of the candidate is faster (inf: the candidate has none)."""
    cycle_us: tuple[float, float] = (0.0, math.inf)
    """(a cycle no plan of the candidate is below, one at which its P stages hold the L layers)."""


def _ordered_cycle(order: list, t: MeshTables, lo: float, hi: float, top: float, rest: float,
                   enough_us: float) -> tuple[float, float] | CandidateBound:
    """The order-free least cycle [lo, hi] raised by planner/mesh_order.py (hosts in pipeline order, each block's
    ends priced by its neighbours, memory by position), or the candidate's bound when that already reaches
    enough_us (or no plan exists). Bisection to the same resolution as the order-free one."""
    P, L, m = t.pp, t.num_layers, t.microbatches
    cut = (enough_us - rest) / (m - 1) if math.isfinite(enough_us) else math.inf
    upper = min(top, max(cut, lo))
    step = max(BOUND_RESOLUTION_US, BOUND_RESOLUTION * ((m - 1) * lo + rest)) / (m - 1)
    low, high = least_ordered_cycle(order, P, L, lo, upper, step)
    if math.isfinite(high):
        return low, high
    if upper < top:
        return CandidateBound((m - 1) * upper + rest, (upper, max(hi, upper)))  # the cycle exceeds the cut
    return CandidateBound(math.inf)


def _capacity_at(hosts: list[dict[str, np.ndarray]], P: int, sites: list[str] | None, prices: np.ndarray):
    """candidate_bound's capacity(cycle, loops=True): the most layers P stages of the hosts hold at a cycle, over every
    site (site_capacity) where `sites` are given. With the loops (prices above 0), a cycle at which no plan holds the
    layers; without, one at which none ever does (a larger cycle leaves the loops more slack)."""
    def capacity(cycle: float, loops: bool = True) -> float:
        if sites is not None:
            return site_capacity(hosts, sites, cycle, P, prices if loops else prices[:1])
        return _capacity(hosts, cycle, P)
    return capacity


def candidate_bound(t: MeshTables, fill_us: float, *, cycle_us: tuple[float, float] = (0.0, math.inf),
                    enough_us: float = math.inf, stages: bool = False, every_site: bool = False,
                    loops: bool = True, stop_at_s: float | None = None) -> CandidateBound:
    """Lower bound (us) of every plan of the candidate. fill_us: the work of L layers, the embedding and the head at
    the fastest options (mesh_search computes it per B); cycle_us: what a cheaper bound knows of the least cycle
    (as CandidateBound.cycle_us); enough_us: a bound at which the caller stops caring (its incumbent), so the
    bisection and the work term stop there too; stages: couple the work term to the stage count (tighter, and
    several times the cost); every_site: bound only the plans that use every site of the tables' hosts (two or more:
    planner/mesh_sites.py), whose least cycle then comes from mesh_wan.site_capacity; loops: with those, where the
    tables hold 1F1B's loops (mesh_wan.prices_loops), the loops through the crossings in the least cycle and the
    crossings' sends in the stage-coupled work (_wan_caps) too; stop_at_s: the search's deadline, past which each
    capacity and work evaluation raises limits.OutOfTime (a loops bound over five sites took 4-5 s)."""
    P, L, m = t.pp, t.num_layers, t.microbatches
    kept = [(a, t.sites[h]) for h in range(len(t.hosts)) if (a := _host_arrays(t, h)) is not None]
    hosts = shared([a for a, _ in kept])
    if not hosts:
        return CandidateBound(math.inf)
    sites = [s for _, s in kept]
    across = loops and every_site and prices_loops(t)  # the loops' dual and the work across sites
    prices = loop_prices(hosts) if across else np.zeros(1)
    capacity_at = _capacity_at(hosts, P, sites if every_site else None, prices)

    def capacity(cycle: float, loops: bool = True) -> float:
        check_deadline(stop_at_s)
        return capacity_at(cycle, loops)

    sends = [float(v) for a in hosts for key in ("intra", "cross") for v in a[key] if math.isfinite(v)]
    # at this cycle every stage holds all that its memory fits, so if it holds fewer than L layers nothing does
    top = max(float((a["tau"] * L + a["first"] + a["last"]).max()) for a in hosts) + 2 * max(sends, default=0.0)
    if not math.isfinite(cycle_us[1]) and capacity(top, loops=False) < L:
        return CandidateBound(math.inf)
    boundaries_and_tail = fixed_part_us(t, 0.0)
    rest = fill_us + boundaries_and_tail
    lo, hi = min(cycle_us[0], top), min(cycle_us[1], top)
    if m > 1 and math.isfinite(enough_us):
        cut = (enough_us - rest) / (m - 1)
        if lo < cut < hi:
            if capacity(cut) < L:
                return CandidateBound((m - 1) * cut + rest, (cut, hi))  # the cycle exceeds cut: enough_us reached
            hi = cut
    edges = min(float(a["first"].min()) for a in hosts) + min(float(a["last"].min()) for a in hosts)
    fixed = edges + boundaries_and_tail
    boundary = host_boundary_us(t) if across else 0.0

    def least_work(lo: float, hi: float) -> float:
        return _least_work_us(hosts, P, L, m, lo, hi, top, enough_us - fixed, stages, sites if across else None,
                              boundary, stop_at_s) + fixed

    lo, hi = _bisect(lambda c: capacity(c, loops=False) >= L, lo, hi, m, rest)
    work = least_work(lo, hi)
    # the loops' least cycle, where they apply, the candidate is still open and they leave too few layers at hi; the
    # work term again from there (a bound of the plans whose cycle is above it: the larger of the two holds)
    if prices.size > 1 and max((m - 1) * lo + rest, work) < enough_us and capacity(hi) < L:
        looped = _bisect_up(lambda c: capacity(c) >= L, hi, top, m, rest)
        if looped[0] > lo:
            lo, hi = looped
            work = max(work, least_work(lo, hi))
    # only a candidate the order-free bound leaves open pays for the ordered cycle, and then the work term again
    if stages and m > 1 and max((m - 1) * lo + rest, work) < enough_us and (order := order_hosts(t)) is not None:
        early = _ordered_cycle(order, t, lo, hi, top, rest, enough_us)
        if isinstance(early, CandidateBound):
            return early
        if early[0] > lo:
            lo, hi = early
            work = max(work, least_work(lo, hi))
    return CandidateBound(max((m - 1) * lo + rest, work), (lo, hi))


def _bisect(holds, lo: float, hi: float, m: int, rest: float) -> tuple[float, float]:
    """[lo, hi] narrowed until (m - 1) (hi - lo) is within the bound's resolution: holds(c) is false below the least
    cycle and true from it on (at hi, or the least cycle is above hi and lo ends next to it)."""
    while (m - 1) * (hi - lo) > max(BOUND_RESOLUTION_US, BOUND_RESOLUTION * ((m - 1) * lo + rest)):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return lo, hi


def _bisect_up(holds, lo: float, top: float, m: int, rest: float) -> tuple[float, float]:
    """_bisect from a cycle lo known to be at most the least, whose upper end is not known: steps of 1%, 2%, 4% ...
    of lo up to top find one first."""
    step = 0.01 * lo
    while lo + step < top and not holds(lo + step):
        lo, step = lo + step, 2 * step
    return _bisect(holds, lo, min(lo + step, top), m, rest)
