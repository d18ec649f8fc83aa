"""The stage-coupled work of planner/mesh_bound.py's tables' bound: a lower bound of the least work of L layers on
exactly P stages of the hosts at one cycle, by the Lagrangian dual of (stages, layers) (dual_work) at the best price
a search over prices finds (stage_work_at); the knapsacks' arithmetic is planner/mesh_knapsack.py's."""

from __future__ import annotations

import math

import numpy as np

from hgplan.planner.mesh_knapsack import ANY_ROLE, ROLE_PAIRS, ROLES, Roles, facing_pairs, per_class, roles_step
from hgplan.planner.mesh_order import LAYER_SLACK, NONE

DUAL_PRICES = 9
"""Prices per layer at which each round of the stage-coupled work bound evaluates its dual."""
DUAL_ROUNDS = 5
"""Rounds of that price search; each narrows the bracket to 2 / (DUAL_PRICES - 1) of its width."""
WARM_ROUNDS = 3
"""Rounds of the search with the roles (stage_work_at), which starts from the best price without them."""
MAX_MOVES = 2 * (DUAL_PRICES - 1)
"""Times a warm-started search may move its bracket (half its width each, a quarter of the range at first): enough to
cross the whole range twice."""


def dual_work(caps: list[Roles], taus: list[np.ndarray], P: int, L: int, prices: np.ndarray,
              across: tuple[list[str], list[Roles], float] | None = None,
              forced: frozenset[int] = frozenset(), roles: bool = False,
              ends: list[np.ndarray] | None = None) -> np.ndarray:
    """At each price per layer: a lower bound of the least work of L layers on exactly P stages, where a used host
    takes j stages under one option o and j <= x <= cap[j, o] layers at x tau_o. Pricing the layer count instead of
    requiring it (Lagrangian relaxation), a host's best is x = j when tau_o >= price and x = cap[j, o] below; a
    min-plus knapsack over stage counts gives the least sum of x (tau_o - price) over P stages, and that plus price x
    L is below the least work at every price (weak duality). roles: the knapsack has a state per (first stage placed,
    last stage placed), as mesh_bound._capacity's, and each host's block one role (its cap that role's), so one block
    holds each end of the pipeline and the others pay a send to another host at both; without, every block takes the
    cap of its best role. across = (the hosts' sites, their caps with a block end facing another site,
    mesh_bound._wan_caps, the least boundary between two hosts over the least counted for any boundary,
    host_boundary_us): plans over every one of those sites (two or more), where some block of each site faces another
    (the knapsack runs site by site with a flag for it, and every site is used), and each used host but one per site
    adds a boundary at that cost; forced (without across): the indices of hosts every plan uses, which take one stage
    or more. ends (with roles): per host, [role, option] what its block adds as the holder of the pipeline's first
    and last stage (the embedding's and the LM head's work, ROLES' order) over the least of any host's, which the
    caller counts apart (mesh_bound.candidate_bound's edges): the block that holds an end pays its own option's. The
    knapsack is max-plus (mesh_knapsack.roles_step) over the negated sums."""
    assert not (forced and across), "forced hosts are for the knapsack over hosts only"
    j = np.arange(P + 1)[None, None, :, None]
    pairs, states = (ROLE_PAIRS, len(ROLES)) if roles else (ANY_ROLE, 1)

    def host_gains(cap_tau: tuple[Roles, np.ndarray, np.ndarray | None]) -> np.ndarray:
        caps_by_role, tau, end = cap_tau
        none = np.full(next(iter(caps_by_role.values())).shape, NONE)
        cap = np.stack([caps_by_role.get(role, none) for role in ROLES])  # [role, stages, option]
        cap = (cap if roles else cap.max(axis=0, keepdims=True))[:, None]  # [role, 1, stages, option]
        d = (tau[None, :] - prices[:, None])[None, :, None, :]  # [1, price, 1, option]
        val = np.where(cap >= 1, np.where(d >= 0, j * d, (cap + LAYER_SLACK) * d), np.inf)
        val = (val if end is None else val + end[:, None, None, :]).min(axis=-1)
        gains = np.where(np.isfinite(val), -val, NONE)
        gains[..., 0] = NONE  # a used host takes at least one stage
        gains.setflags(write=False)  # shared by a class's hosts (per_class)
        return gains

    own = ends if roles and ends is not None else [None] * len(taus)

    def per_host(cs: list[Roles]) -> list[np.ndarray]:
        return per_class(list(zip(cs, taus, own)), host_gains, key=lambda ct: (id(ct[0]), id(ct[1]), id(ct[2])))

    best = np.full((states, prices.size, P + 1), NONE)
    best[0, :, 0] = 0.0
    gains = per_host(caps)
    if across is None:
        for i, g in enumerate(gains):
            best = roles_step(best, g, P, pairs, optional=i not in forced)
    else:
        sites, boundary = across[0], across[2]

        def facing_gains(gw: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            # facing_pairs' roles; each used host one boundary more (the sites' first ones given back below)
            out = np.concatenate([gw[0], gw[1], np.maximum(*gw)])
            return np.where(out > NONE / 2, out - boundary, NONE) if boundary > 0 else out

        both = per_class(list(zip(gains, per_host(across[1]))), facing_gains, key=lambda gw: (id(gw[0]), id(gw[1])))
        facing = facing_pairs(roles)
        for site in dict.fromkeys(sites):
            # the states without a block of the site facing another yet, then those with one
            held = np.concatenate([best, np.full_like(best, NONE)])
            for gw in (gw for gw, x in zip(both, sites) if x == site):
                held = roles_step(held, gw, P, facing)
            best = held[states:]  # every site is used, and faces another
        best = best + boundary * len(set(sites))
    most = best[-1, :, P]  # both ends placed (the one state without roles)
    return np.where(most > NONE / 2, -most, np.inf) + prices * L


def stage_work_at(hosts: list[dict[str, np.ndarray]], caps: list[Roles], P: int, L: int,
                  enough: float = math.inf, across: tuple[list[str], list[Roles], float] | None = None,
                  forced: frozenset[int] = frozenset(), roles: bool = False,
                  start: float | None = None) -> tuple[float, float]:
    """W(cycle) with the stage count coupled (the greedy W of mesh_bound._work_at lets every host hold its most layers
    however few stages are left for it), caps = mesh_bound._caps at that cycle: the best price of dual_work found.
    The dual is concave in the price and peaks between the least and the largest tau; each round narrows the bracket
    to the best price's neighbours. The rounds stop once the value reaches `enough` (all the caller needs); across
    and forced as dual_work's. roles: where the dual without them stays below `enough`, its rounds again with them,
    each end's block paying its own embedding or LM head over the least of the hosts' (end_work; the caller adds
    that least) (dual_work's roles and ends: tighter and dearer; the level of the bound that has them took 24.5 ->
    36 s on the first 40 candidates of benchmarks/mesh_search.py's four-site fleet), WARM_ROUNDS of them from a
    bracket of two first-round steps around the best price without them, moved half its width at a time while the
    peak lies beyond it (every price's value is a bound, so where it starts changes only how tight the bound is).
    start: a price the rounds without the roles start from the same way (the best price of a call at a nearby
    cycle); without, they search the whole range. Both warm starts, on the first eight candidates of four benchmark
    fleets: bounds at most 0.13% below five rounds from the whole range, about 30% less time (docs/planner.md).
    Returns (the value, the best price without the roles)."""
    taus = [a["tau"] for a in hosts]
    low, high = min(float(t.min()) for t in taus), max(float(t.max()) for t in taus)
    best, at = -math.inf, low if start is None else start
    for coupled in (False, True) if roles else (False,):
        if best >= enough:
            break
        if not coupled and start is None:
            prices, rounds = np.linspace(low, high, DUAL_PRICES), DUAL_ROUNDS
        else:  # from the best price without the roles (or `start`), two first-round steps either side
            step = (high - low) / (DUAL_PRICES - 1)
            at = min(max(at, low), high)
            prices, rounds = np.linspace(max(low, at - step), min(high, at + step), DUAL_PRICES), WARM_ROUNDS
        ends = end_work(hosts) if coupled else None  # only the rounds with the roles read them
        moves = 0
        while rounds:
            vals = dual_work(caps, taus, P, L, prices, across, forced, coupled, ends)
            i = int(np.argmax(vals))
            if vals[i] > best:
                best, at = float(vals[i]), float(prices[i])
            if best >= enough:
                break
            inner = 1 if i == 0 else DUAL_PRICES - 2
            if i in (0, DUAL_PRICES - 1) and low < prices[i] < high and vals[i] > vals[inner] and moves < MAX_MOVES:
                # the peak is beyond the bracket (the dual is concave and still rising there): the bracket moves half
                # its width that way (on a plateau it narrows instead)
                half, moves = (prices[-1] - prices[0]) / 2, moves + 1
                prices = np.linspace(max(low, prices[i] - half), min(high, prices[i] + half), DUAL_PRICES)
                continue
            prices = np.linspace(prices[max(i - 1, 0)], prices[min(i + 1, DUAL_PRICES - 1)], DUAL_PRICES)
            rounds -= 1
        if not coupled:
            first_at = at
    return best, first_at


def end_work(hosts: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """dual_work's ends: per host, [role, option] the embedding's work if the role holds the first stage plus the LM
    head's if it holds the last, each over the least of any option of any of the hosts (so never below zero). A
    class's hosts (mesh_knapsack.shared) share one array."""
    first = min(float(a["first"].min()) for a in hosts)
    last = min(float(a["last"].min()) for a in hosts)

    def one(a: dict[str, np.ndarray]) -> np.ndarray:
        f, ll = a["first"] - first, a["last"] - last
        out = np.stack([np.zeros_like(f), f, ll, f + ll])  # ROLES' order: (0, 0), (1, 0), (0, 1), (1, 1)
        out.setflags(write=False)
        return out
    return per_class(hosts, one)
