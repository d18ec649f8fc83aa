"""W(C) of the block bound (planner/block_bound.py): the least work of the layers at cycle C, and what the WAN moves
to slower groups.

Each group's block holds at most its capacity at cycle C (its end stages at its two cheapest partners' sends, its
interior at the sends inside it), each group taking every spare stage the others leave; the layers every group must
hold sit on it, then the rest go fastest group first, the j fastest groups together holding at most what the stages
they cannot host leave (p - their slots stages elsewhere, v layers each). That is a linear programme whose dual price
for group k is pi_k - tau_k, pi_k the tau of the first group at or after k with capacity left: taking d_k layers of
capacity from the groups raises W by at least sum_k d_k (pi_k - tau_k) (weak duality). A placement over several
sites loses capacity next to the WAN in two ways the capacities do not count:
- per site, at least two block ends send to another site (one at a path's own end sites; wan_ends.WanEnds): such
  an end holds the layers its group's WAN send leaves, not its cheapest partner's;
- without interleaving, each WAN crossing's loop of two micro-batches (planner/wan_loops.py, PairLoops) leaves the two
  stages beside it fewer layers than the cycle alone would, in whole layers.
Each is priced (the loops' loss counts the WAN ends' sends too, so it is used where there are loops, the ends'
otherwise), and W plus the charge is a lower bound on the work of every placement whose cycle is at most C. Two dual
solutions are priced, with and without the fastest groups' limits, and the larger total kept: where the limit binds,
a fast group's price is 0 although losing more capacity than its slack costs the slow rate.

Legend as in planner/block_bound.py: a role is (v tau, lone, end_a, end_b, interior, slots); arrays are (cycles x
groups), groups in the bound's order (fastest first).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from hgplan.planner.bounds import BLOCK_GRID, FLOOR_EPS

INFEASIBLE = 1e18
"""Stands for no placement (inf) where sums of charges are taken."""


def cheapest_fill(pool: np.ndarray, sure: np.ndarray, L: int, tau: np.ndarray,
                  most: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle, the least work of L layers within the groups' capacities `pool`, `sure` of them on their groups
    whatever their speed, the rest fastest group first (columns in order of tau), the first j groups together holding
    at most most[:, j] (their stages leave the others at least so many); and the fill's dual price per group: taking
    capacity from group k moves its layers to the first group at or after k with capacity left, so each layer taken
    costs at least that group's tau minus tau_k (the slowest's when none has any left)."""
    n = pool.shape[1]
    cap = np.full(pool.shape, float(L)) if most is None else np.broadcast_to(most, pool.shape)
    later = np.cumsum(sure[:, ::-1], axis=1)[:, ::-1] - sure  # what the groups after each must hold
    # the first j groups leave the next ones up to each i their sure layers within i's limit (L for the last)
    cap = np.minimum.accumulate(np.minimum(cap, L)[:, ::-1] + later[:, ::-1], axis=1)[:, ::-1] - later
    held = np.zeros(pool.shape[0])
    take = np.empty_like(pool)
    for j in range(n):
        top = np.minimum(held + pool[:, j], cap[:, j])
        now = np.maximum(held + sure[:, j], top)
        take[:, j], held = now - held, now
    spare = np.where(pool - take > 0, np.arange(n)[None, :], n)
    nearest = np.minimum(np.minimum.accumulate(spare[:, ::-1], axis=1)[:, ::-1], n - 1)
    return (take * tau[None, :]).sum(axis=1), np.maximum(0.0, tau[nearest] - tau[None, :])


def _held(c: np.ndarray, extra, vt, v: int) -> np.ndarray:
    """Layers a stage holds at cycles c when `extra` seconds of each are taken (whole multiples of v)."""
    return v * np.maximum(0, np.floor((c - extra) / vt + FLOOR_EPS))


def block_pools(cs: np.ndarray, role: Sequence[tuple], *, v: int, p: int,
                sure_layers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cycle and group, the most layers its block holds (pool) and those it must hold (sure); and per cycle
    whether some group can form no block (then no placement has that cycle)."""
    vt, alone, end_a, end_b, inner_extra, slots = (np.array(col)[None, :] for col in zip(*role))
    c = cs[:, None]
    held_a, held_b, one, interior = (_held(c, extra, vt, v) for extra in (end_a, end_b, alone, inner_extra))
    two = held_a + held_b
    pair_ok = (held_a >= v) & (held_b >= v) & (slots >= 2)
    n_more = np.where(pair_ok & (interior >= v), slots - 2, 0)
    one_ok = one >= v
    base = np.where(one_ok, one, two)
    spare = (p - np.where(one_ok, 1, 2).sum(axis=1))[:, None]
    inc1 = np.where(n_more > 0, np.maximum(two - one, interior), two - one)
    extra = np.where(one_ok & pair_ok, inc1 + interior * np.minimum(n_more, spare - 1),
                     interior * np.minimum(n_more, spare))
    pool = base + np.where(spare > 0, extra, 0)
    # every group of the set hosts a stage, and at least the stages the others' slots leave over, each with >= v
    # layers: those layers sit on it whatever their speed (a set that needs a slow group's stages pays for them)
    return pool, np.minimum(sure_layers[None, :], pool), ~(one_ok | pair_ok).all(axis=1)


def _held_one(c: float, extra: float, vt: float, v: int) -> float:
    """_held at one finite cycle (plain floats, the same IEEE arithmetic; an infinite `extra` holds nothing)."""
    q = (c - extra) / vt + FLOOR_EPS
    return v * float(math.floor(q)) if q >= 1 else 0.0


def work_one(c: float, role: Sequence[tuple], *, v: int, p: int, sure_layers: Sequence[float], L: int,
             tau: Sequence[float], most: Sequence[float],
             charge: Callable[[list[float]], float] | None = None) -> float:
    """W at one cycle (inf: no placement), with `charge(price)` (the WAN's, at a dual price per group) at the better of
    the fill's two prices: block_pools and cheapest_fill (with `most`, then without) for a single cycle, in plain Python
    (beyond's and least_value's single cycles spent most of their time in numpy's per-call costs). The numbers are
    the vector form's, bit for bit (tests/test_block_work.py): the same operations in the same order, the work's sum
    taken by numpy over the same row."""
    rows, stages = [], 0
    for vt, alone, end_a, end_b, inner_extra, slots in role:
        a, b = _held_one(c, end_a, vt, v), _held_one(c, end_b, vt, v)
        one, interior = _held_one(c, alone, vt, v), _held_one(c, inner_extra, vt, v)
        pair_ok = a >= v and b >= v and slots >= 2
        if not (one >= v or pair_ok):
            return math.inf  # a group forms no block: no placement has this cycle
        stages += 1 if one >= v else 2
        rows.append((one, a + b, interior, pair_ok, slots - 2 if pair_ok and interior >= v else 0))
    spare, pool, sure = p - stages, [], []
    for (one, two, interior, pair_ok, n_more), least in zip(rows, sure_layers):
        extra = 0.0
        if spare > 0 and one >= v and pair_ok:
            extra = (max(two - one, interior) if n_more > 0 else two - one) + interior * min(n_more, spare - 1)
        elif spare > 0:
            extra = interior * min(n_more, spare)
        pool.append((one if one >= v else two) + extra)
        sure.append(min(least, pool[-1]))
    work, price = _fill_one(pool, sure, L, tau, most)
    if charge is None:
        return work
    loose, loose_price = _fill_one(pool, sure, L, tau, None)
    return max(work + charge(price), loose + charge(loose_price))


def _fill_one(pool: list[float], sure: list[float], L: int, tau: Sequence[float],
              most: Sequence[float] | None) -> tuple[float, list[float]]:
    """cheapest_fill of one cycle: (work, price per group)."""
    n = len(pool)
    later, left = [0.0] * n, 0.0
    for j in range(n - 1, -1, -1):
        later[j], left = left, left + sure[j]
    cap, least = [0.0] * n, math.inf
    for j in range(n - 1, -1, -1):
        least = min(least, min(float(L) if most is None else most[j], L) + later[j])
        cap[j] = least - later[j]
    held, take = 0.0, [0.0] * n
    for j in range(n):
        now = max(held + sure[j], min(held + pool[j], cap[j]))
        take[j], held = now - held, now
    price, nearest = [0.0] * n, n - 1
    for j in range(n - 1, -1, -1):
        if pool[j] - take[j] > 0:
            nearest = j
        price[j] = max(0.0, tau[nearest] - tau[j])
    return float(np.add.reduce(np.multiply(take, tau))), price


def _shapes(cs: np.ndarray, role: Sequence[float], v: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle, the layers one group's block holds as one stage and in its two end stages (nan: cannot form)."""
    vt, lone, end_a, end_b, _, slots = role
    one, a, b = (_held(cs, extra, vt, v) for extra in (lone, end_a, end_b))
    return np.where(one >= v, one, np.nan), np.where((a >= v) & (b >= v) & (slots >= 2), a + b, np.nan)


def lost_layers(cs: np.ndarray, base: Sequence[float], role: Sequence[float] | None, v: int) -> np.ndarray:
    """Per cycle, the least layers a group's block loses in `role` against `base` over the shapes both can take (inf:
    none, or no such role); the vector form of wan_ends.lost."""
    if role is None:
        return np.full(cs.shape, np.inf)
    (one0, two0), (one1, two1) = _shapes(cs, base, v), _shapes(cs, role, v)
    lost = np.fmin(one0 - one1, two0 - two1)
    return np.where(np.isnan(lost), np.inf, lost)


def _priced(lost: np.ndarray, price: np.ndarray) -> np.ndarray:
    """Lost layers times their price (INFEASIBLE where the role cannot be formed)."""
    gone = np.isinf(lost)
    return np.where(gone, INFEASIBLE, np.where(gone, 0.0, lost) * price)


def _least_way(members: list[int], cls: Sequence[int], one: np.ndarray, two: np.ndarray, single: bool) -> np.ndarray:
    """A site's cheapest way to place its WAN ends, per cycle: one end on one group (a single site), or both on one
    group, or one on each of two groups (one group per class of interchangeable groups, whose costs are the same)."""
    reps: dict[int, list[int]] = {}
    for j in members:
        reps.setdefault(cls[j], []).append(j)
    firsts = [js[0] for js in reps.values()]
    best = np.full(one.shape[0], INFEASIBLE)
    for j in firsts:
        best = np.minimum(best, one[:, j] if single else two[:, j])
    if not single:
        pairs = list(itertools.combinations(firsts, 2)) + [(js[0], js[1]) for js in reps.values() if len(js) > 1]
        for a, b in pairs:
            best = np.minimum(best, one[:, a] + one[:, b])
    return np.minimum(best, INFEASIBLE)


def ends_charge(cs: np.ndarray, price: np.ndarray, *, site: Sequence[int], cls: Sequence[int],
                roles: Sequence[tuple], v: int, sites: int, single: frozenset[int] | None) -> np.ndarray:
    """Per cycle, the work the sites' WAN ends add to W at least (inf: no placement at that cycle).

    `price`: per cycle and group, the fill's dual price (cheapest_fill); `roles`: per group, its role with no, one
    and two WAN ends (wan_ends.WanEnds.variants); `single`: the sites that may have one WAN end (None: any two,
    the path's ends unknown)."""
    one = np.stack([_priced(lost_layers(cs, r[0], r[1], v), price[:, j]) for j, r in enumerate(roles)], axis=1)
    two = np.stack([_priced(lost_layers(cs, r[0], r[2], v), price[:, j]) for j, r in enumerate(roles)], axis=1)
    need, least = np.empty((sites, len(cs))), np.full((sites, len(cs)), INFEASIBLE)
    for s in range(sites):
        members = [j for j, sj in enumerate(site) if sj == s]
        need[s] = _least_way(members, cls, one, two, single=False)
        if single is None or s in single:
            least[s] = _least_way(members, cls, one, two, single=True)
    gain = np.maximum(0.0, need - least)
    # the two end sites (or the known ones) are those that save the most with one WAN end
    ends = np.argsort(-gain, axis=0, kind="stable")[:2]
    one_end = np.zeros(gain.shape, dtype=bool)
    np.put_along_axis(one_end, ends, gain[ends, np.arange(len(cs))] > 0, axis=0)
    charge = np.where(one_end, least, need).sum(axis=0)
    return np.where(charge >= INFEASIBLE, np.inf, charge)


def loops_charge(cs: np.ndarray, price: np.ndarray, cls: Sequence[int], loss: Callable[[float, tuple], float]
                 ) -> np.ndarray:
    """Per cycle, the work the WAN crossings' loops add to W at least: `loss(c, prices per class)` is PairLoops' least
    priced loss over the crossings (inf: no placement's crossings close their loops)."""
    per_class = np.zeros((len(cs), max(cls) + 1))
    per_class[:, cls] = price
    return np.array([loss(float(x), tuple(row)) for x, row in zip(cs, per_class.tolist())])


DOUBLINGS = 64
"""Times a search for a cycle long enough (block_bound's upper cycle, _finite_from) doubles it before it gives up:
1F1B's loops through the WAN can make the cycle longer than any stage's demand, and 2^64 times is past any plan."""
FINITE_RESOLUTION = 1e-3
"""How close _finite_from brings its two cycles, relative to the upper: the value's cycle term is at most this much
below the first finite cycle's. On the 16-group benchmark fleet (24 such calls, all in block_cuts) 1e-6 took 21
evaluations of the charged W per call, 1.35 s of a 9-10 s search; 1e-3 takes 11, and the search is 0.5 s slower than
the code before, which cut those items as if they had no plan (8.9 -> 9.4 s, medians of three the same hour,
2026-11-29; the same plan and gap)."""


def _finite_from(hi: float, w: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float, float] | None:
    """(lo, hi, w(hi)) with w infinite at lo and finite at hi, hi - lo within FINITE_RESOLUTION of hi, for a
    non-increasing w that is infinite at `hi`: by doubling (at most DOUBLINGS times; None: finite nowhere), then
    bisection. Every cycle at or below lo has an infinite w."""
    lo = hi
    for _ in range(DOUBLINGS):
        hi = 2 * hi
        w_hi = float(w(np.array([hi]))[0])
        if math.isfinite(w_hi):
            break
        lo = hi
    else:
        return None
    while hi - lo > FINITE_RESOLUTION * hi:
        mid = (lo + hi) / 2
        w_mid = float(w(np.array([mid]))[0])
        if math.isfinite(w_mid):
            hi, w_hi = mid, w_mid
        else:
            lo = mid
    return lo, hi, w_hi


def least_value(lo: float, hi: float, vm1: int, least_work: float, plain: Callable[[np.ndarray], np.ndarray],
                charged: Callable[[np.ndarray], np.ndarray] | None = None) -> float:
    """min over C >= C* of (v m - 1) C + W(C), C* in (lo, hi]; `plain(cs)` is W at those cycles, `charged(cs)` W
    with the WAN's charges (None: none), `least_work` L x the fastest tau. W is non-increasing: on [c_i, c_i+1) the
    value is at least (v m - 1) c_i + W(c_i+1); past lo + span nothing can beat the value at C*. The charged W is
    taken at the grid's cycles in order of their plain value, until the next cannot beat the least so far (a charge
    is never negative). A charged W that is infinite at C* (no placement with a cycle that short closes its loops)
    moves C* up to where it is finite (_finite_from); if it is nowhere, the plain W bounds the charged one."""
    w_star = float((charged or plain)(np.array([hi]))[0])
    if charged is not None and math.isinf(w_star):
        found = _finite_from(hi, charged)
        if found is None:
            return least_value(lo, hi, vm1, least_work, plain)
        lo, hi, w_star = found
    grid = lo + (w_star - least_work) / vm1 * np.arange(BLOCK_GRID + 1) / BLOCK_GRID
    at = np.maximum(grid[1:], hi)
    values = vm1 * grid[:-1] + plain(at)
    best = vm1 * lo + w_star
    if charged is None:
        return min(best, float(np.min(values)))
    for i in np.argsort(values, kind="stable").tolist():
        if values[i] >= best:
            break
        best = min(best, float(vm1 * grid[i]) + float(charged(at[i:i + 1])[0]))
    return best
