"""The mesh bounds' knapsack pieces (planner/mesh_knapsack.py, planner/mesh_wan.py) against plain per-role and per-pair
computations: the vectorised forms must give the same arrays, bit for bit, whatever the shapes they are called with."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hgplan.planner import mesh_bound, mesh_dual
from hgplan.planner.mesh_knapsack import (ANY_ROLE, ROLE_PAIRS, ROLES, block_layers, block_roles, facing_pairs,
                                          merged, roles_step, step)
from hgplan.planner.mesh_order import NONE
from hgplan.planner.mesh_wan import SITE_ROLES, _site_gains


def _host(rng: np.random.Generator, options: int) -> dict[str, np.ndarray]:
    """Per-option columns of a host, some options without a second slot or an own-mesh send."""
    a = {k: rng.uniform(50, 3000, options) for k in ("first", "last", "cross", "intra", "local", "wan")}
    a["intra"][rng.random(options) < 0.2] = np.inf
    a.update(tau=rng.uniform(200, 4000, options), most=rng.integers(1, 40, options).astype(float),
             slots=rng.integers(1, 9, options).astype(float), wan_lat=np.full(options, rng.uniform(0, 5000)))
    return a


def _held_at(a: dict[str, np.ndarray], cycles: np.ndarray):
    """Whole layers at these cycles (any shape broadcast against the options' axis), NONE below one."""
    def held(penalties: np.ndarray) -> np.ndarray:
        k = np.minimum(np.floor((cycles[..., None] - penalties[(slice(None),) + (None,) * cycles.ndim])
                                / a["tau"]), a["most"])
        return np.where(k >= 1, k, NONE)
    return held


@pytest.mark.parametrize("seed", range(6))
def test_block_roles_match_each_role_alone(seed):
    rng = np.random.default_rng(seed)
    a = _host(rng, int(rng.integers(1, 12)))
    P = int(rng.integers(1, 9))
    # the tables' bound: one cycle, j as a column; the first bound: a grid of cycles, j on a leading axis
    for cycles, j in ((np.array(rng.uniform(2000, 60000)), np.arange(P + 1)[:, None]),
                      (rng.uniform(2000, 60000, 5), np.arange(P + 1)[:, None, None]),
                      (rng.uniform(2000, 60000, (2, 3)), np.arange(P + 1)[:, None, None, None]),
                      (rng.uniform(2000, 60000, (2, 3)), np.array([[min(2, P)]]))):  # fewer axes than the parts
        held = _held_at(a, cycles)
        got = block_roles(a, held, j, j)
        first, last, cross, intra = a["first"], a["last"], a["cross"], a["intra"]
        fc, cl, cc, fi, ci, li, ii, fl = held(np.stack([first + cross, cross + last, 2 * cross, first + intra,
                                                        cross + intra, last + intra, 2 * intra, first + last]))
        parts = {(0, 0): (cc, ci, ci), (1, 0): (fc, fi, ci), (0, 1): (cl, ci, li), (1, 1): (fl, fi, li)}
        want = {key: block_layers(j, *three, ii, a["slots"]) for key, three in parts.items()}
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


def _plain_step(states, gains, P, to, optional=True):
    """One host more, pair by pair and stage count by stage count."""
    out = {k: v.copy() if optional else np.full_like(v, NONE) for k, v in states.items()}
    for (s, held), (r, gain) in itertools.product(states.items(), gains.items()):
        if (key := to(s, r)) is None:
            continue
        for idx in np.ndindex(held.shape[:-1]):
            for total, j in itertools.product(range(P + 1), range(1, P + 1)):
                before, added = held[idx + (total - j,)], gain[idx + (j,)]
                if j <= total and before > NONE / 2 and added > NONE / 2:
                    out[key][idx + (total,)] = max(out[key][idx + (total,)], before + added)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_step_matches_every_pair_alone(seed):
    rng = np.random.default_rng(100 + seed)
    P, lead = int(rng.integers(1, 7)), tuple(int(n) for n in rng.integers(1, 3, int(rng.integers(0, 2))))
    states = {(f, ll): np.where(rng.random(lead + (P + 1,)) < 0.6, rng.integers(0, 30, lead + (P + 1,)), NONE)
              .astype(float) for f in (0, 1) for ll in (0, 1)}
    states[(1, 1)][...] = NONE  # a state no host reached yet
    gains = {r: np.where(rng.random(lead + (P + 1,)) < 0.7, rng.integers(1, 20, lead + (P + 1,)), NONE).astype(float)
             for r in ((0, 0), (1, 0), (0, 1))}
    for optional in (True, False):
        got, want = step(states, gains, P, merged, optional), _plain_step(states, gains, P, merged, optional)
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize("seed", range(6))
def test_roles_step_matches_every_pair_alone(seed):
    """The array form of step over the four roles (the stage-coupled work's knapsack) gives what the pairs give one
    by one."""
    rng = np.random.default_rng(300 + seed)
    P, lead = int(rng.integers(1, 7)), tuple(int(n) for n in rng.integers(1, 3, int(rng.integers(0, 2))))
    held = np.where(rng.random((4,) + lead + (P + 1,)) < 0.6, rng.integers(-30, 30, (4,) + lead + (P + 1,)), NONE)
    held = held.astype(float)
    held[3] = NONE  # a state no host reached yet
    gains = np.where(rng.random((4,) + lead + (P + 1,)) < 0.7, rng.integers(-20, 20, (4,) + lead + (P + 1,)), NONE)
    gains = gains.astype(float)
    gains[..., 0] = NONE
    for optional in (True, False):
        got = roles_step(held, gains, P, optional=optional)
        want = _plain_step(dict(zip(ROLES, held)), dict(zip(ROLES, gains)), P, merged, optional)
        for i, key in enumerate(ROLES):
            np.testing.assert_array_equal(got[i], want[key])
        # without roles: one state, which any block follows
        got = roles_step(held[:1], gains[:1], P, ANY_ROLE, optional=optional)
        want = _plain_step({0: held[0]}, {0: gains[0]}, P, lambda s, r: 0, optional)
        np.testing.assert_array_equal(got[0], want[0])


def _least_work(caps, taus, P: int, L: int, ends=None) -> float:
    """The least work of L layers on exactly P stages, host by host unused or in one role, option and stage count
    (one block holding the first stage and one the last), j <= x <= cap layers each, fastest first: by enumeration.
    ends: per host, [role, option] what its block adds in that role (mesh_dual.end_work)."""
    best = np.inf
    choices = [[None] + [(r, o, j) for r in cap for o in range(cap[r].shape[1]) for j in range(1, P + 1)
                         if cap[r][j, o] >= 1] for cap in caps]
    for pick in itertools.product(*choices):
        used = [(h, c) for h, c in enumerate(pick) if c is not None]
        state = (0, 0)
        for _, (r, _, _) in used:
            state = merged(state, r) if state is not None else None
        if state != (1, 1) or sum(j for _, (_, _, j) in used) != P:
            continue
        lows = [(float(taus[h][o]), j, int(caps[h][r][j, o])) for h, (r, o, j) in used]
        left, work = L - sum(j for _, j, _ in lows), sum(tau * j for tau, j, _ in lows)
        work += 0.0 if ends is None else sum(float(ends[h][ROLES.index(r), o]) for h, (r, o, _) in used)
        for tau, j, cap in sorted(lows):
            take = max(0, min(cap - j, left))
            work, left = work + take * tau, left - take
        if left == 0:
            best = min(best, work)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_role_coupled_work_is_below_the_least_work_and_above_the_role_free(seed):
    """The stage-coupled work's dual with the roles (mesh_dual.dual_work) never exceeds the least work of a plan in
    which one block holds the first stage and one the last (by enumeration, at every price), and never falls below
    the dual without them, in which every block takes its best role."""
    rng = np.random.default_rng(400 + seed)
    P, options = int(rng.integers(1, 5)), int(rng.integers(1, 3))
    hosts = [_host(rng, options) for _ in range(int(rng.integers(2, 4)))]
    for a in hosts:
        a["cross"] *= 4  # sends to other hosts dearer than the embedding and the head: the roles differ
    cycle = float(rng.uniform(15000, 50000))
    caps = [mesh_bound._option_gains(a, cycle, P) for a in hosts]
    taus = [a["tau"] for a in hosts]
    L = int(rng.integers(P, P + 8))
    prices = np.linspace(150, 4500, 7)
    coupled = mesh_dual.dual_work(caps, taus, P, L, prices, roles=True)
    free = mesh_dual.dual_work(caps, taus, P, L, prices)
    exact = _least_work(caps, taus, P, L)
    assert np.all(coupled <= exact + 1e-6), (coupled, exact)
    assert np.all(coupled >= free - 1e-6), (coupled, free)


@pytest.mark.parametrize("seed", range(12))
def test_end_work_is_below_the_least_work_with_each_ends_own_work(seed):
    """With the embedding's and the LM head's work of the block that holds each end (mesh_dual.end_work, over the
    least of any host's), the dual with the roles never exceeds the least work plus those of a plan by enumeration,
    at every price, and never falls below the dual without them."""
    rng = np.random.default_rng(1400 + seed)
    P, options = int(rng.integers(1, 5)), int(rng.integers(1, 3))
    hosts = [_host(rng, options) for _ in range(int(rng.integers(2, 4)))]
    hosts[0]["first"] += 5000.0  # one host's embedding and another's head dearer than any layer's work
    hosts[1]["last"] += 5000.0
    cycle = float(rng.uniform(15000, 50000))
    caps = [mesh_bound._option_gains(a, cycle, P) for a in hosts]
    taus = [a["tau"] for a in hosts]
    L = int(rng.integers(P, P + 8))
    prices = np.linspace(150, 4500, 7)
    ends = mesh_dual.end_work(hosts)
    assert all(np.all(e >= 0) and e.shape == (len(ROLES), options) for e in ends)
    with_ends = mesh_dual.dual_work(caps, taus, P, L, prices, roles=True, ends=ends)
    without = mesh_dual.dual_work(caps, taus, P, L, prices, roles=True)
    exact = _least_work(caps, taus, P, L, ends)
    assert np.all(with_ends <= exact + 1e-6), (with_ends, exact)
    assert np.all(with_ends >= without - 1e-6), (with_ends, without)


def test_end_work_prices_the_block_that_holds_both_ends():
    """One stage (P = 1) holds the embedding and the LM head: with the cheapest embedding on one host and the cheapest
    head on the other, every plan pays more than the least of each, and the dual with the ends counts exactly the
    cheaper host's excess at every price (hosts alike but for their ends; a mutant that drops `ends` fails)."""
    rng = np.random.default_rng(1500)
    hosts = [_host(rng, 1) for _ in range(2)]
    for a, (first, last) in zip(hosts, ((100.0, 900.0), (700.0, 200.0))):
        a.update(first=np.array([first]), last=np.array([last]), most=np.array([40.0]), slots=np.array([4.0]),
                 tau=np.array([1000.0]))  # alike but for the ends: the same host is the cheapest with and without
    caps = [mesh_bound._option_gains(a, 60000.0, 1) for a in hosts]
    taus = [a["tau"] for a in hosts]
    prices = np.linspace(150, 4500, 7)
    ends = mesh_dual.end_work(hosts)
    excess = min(100.0 + 900.0, 700.0 + 200.0) - (100.0 + 200.0)
    with_ends = mesh_dual.dual_work(caps, taus, 1, 6, prices, roles=True, ends=ends)
    without = mesh_dual.dual_work(caps, taus, 1, 6, prices, roles=True)
    assert np.all(np.isfinite(without))
    np.testing.assert_allclose(with_ends - without, excess, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_site_gains_match_each_role_alone(seed):
    rng = np.random.default_rng(200 + seed)
    a = _host(rng, int(rng.integers(1, 10)))
    P, cycle = int(rng.integers(1, 8)), float(rng.uniform(3000, 60000))
    for prices in (np.zeros(1), np.concatenate([[0.0], rng.uniform(1e-4, 5e-3, 4)])):
        got = _site_gains(a, cycle, P, prices)
        # the same, role by role: held per end at each price, one block per role
        first, last, intra, loc, wan = a["first"], a["last"], a["intra"], a["local"], a["wan"]
        ends = {"ll": loc + loc, "lw": loc + wan, "ww": wan + wan, "fl": first + loc, "fw": first + wan,
                "lL": loc + last, "wL": wan + last, "fi": first + intra, "li": loc + intra, "wi": wan + intra,
                "Li": last + intra, "ii": 2 * intra}
        with np.errstate(invalid="ignore"):
            held = {n: np.where((k := np.minimum(np.floor((cycle - e) / a["tau"] + 1e-6), a["most"])) >= 1, k, NONE)
                    [None, None, :] for n, e in ends.items()}
            price = prices[:, None, None]
            for name, e in (("lw", 1), ("ww", 2), ("fw", 1), ("wL", 1), ("wi", 1)) if prices.any() else ():
                k, spare = held[name], cycle - ends[name] - a["wan_lat"]
                value = np.where(price * e * a["tau"] < 1, k + price * e * (spare - k * a["tau"]),
                                 1 + price * e * (spare - a["tau"]))
                held[name] = np.where(k >= 1, value, NONE)
        j = np.arange(P + 1)[None, :, None]
        for key, (s, h, t) in {(0, 0, 0): ("ll", "li", "li"), (0, 0, 1): ("lw", "li", "wi"),
                               (0, 0, 2): ("ww", "wi", "wi"), (1, 0, 0): ("fl", "fi", "li"),
                               (1, 0, 1): ("fw", "fi", "wi"), (0, 1, 0): ("lL", "li", "Li"),
                               (0, 1, 1): ("wL", "wi", "Li")}.items():
            want = np.broadcast_to(block_layers(j, held[s], held[h], held[t], held["ii"], a["slots"]).max(axis=2),
                                   (prices.size, P + 1))
            np.testing.assert_array_equal(got[SITE_ROLES.index(key)], want)


@pytest.mark.parametrize("seed", range(8))
def test_roles_step_adds_only_what_can_be_reached(seed):
    """roles_step adds up only the live states, the stage counts some block takes and the totals they reach: the same
    arrays as pair by pair when blocks take few stages, states are dead and totals start late, over ROLES and over
    facing_pairs' flagged states (a block facing another site or not)."""
    rng = np.random.default_rng(500 + seed)
    P, lead = int(rng.integers(3, 12)), tuple(int(n) for n in rng.integers(1, 3, int(rng.integers(0, 2))))
    for states, roles, pairs, to in ((4, 4, ROLE_PAIRS, lambda s, r: _index(merged(ROLES[s], ROLES[r]))),
                                     (8, 12, facing_pairs(True), _facing_to)):
        held = np.where(rng.random((states,) + lead + (P + 1,)) < 0.5,
                        rng.integers(-30, 30, (states,) + lead + (P + 1,)), NONE).astype(float)
        held[..., :int(rng.integers(0, P))] = NONE  # totals reached from some count on
        held[rng.random(states) < 0.3] = NONE  # states no host reached yet
        gains = np.where(rng.random((roles,) + lead + (P + 1,)) < 0.7,
                         rng.integers(-20, 20, (roles,) + lead + (P + 1,)), NONE).astype(float)
        gains[..., 0] = NONE
        gains[..., int(rng.integers(1, P + 1)):] = NONE  # a block takes few stages
        for optional in (True, False):
            got = roles_step(held, gains, P, pairs, optional=optional)
            want = _plain_step(dict(enumerate(held)), dict(enumerate(gains)), P, to, optional)
            for s in range(states):
                np.testing.assert_array_equal(got[s], want[s])


def _index(state):
    return None if state is None else ROLES.index(state)


def _facing_to(s: int, r: int) -> int | None:
    """facing_pairs' transitions written out: states 0-3 no block of the site facing another yet, 4-7 one; roles 0-3
    a block that does not face one, 4-7 one that does, 8-11 either."""
    faced, kind = s >= 4, r // 4
    after = _index(merged(ROLES[s % 4], ROLES[r % 4]))
    if after is None or (faced and kind != 2) or (not faced and kind == 2):
        return None
    return after + 4 * (faced or kind == 1)


@pytest.mark.parametrize("seed", range(6))
def test_facing_step_matches_the_three_steps_it_replaces(seed):
    """One roles_step over facing_pairs is the knapsack over a site's host that took three: the states without a
    facing block take a block that does not face (and stay) or one that does (and move), those with one the larger
    of the two; bit for bit."""
    rng = np.random.default_rng(600 + seed)
    P = int(rng.integers(2, 10))
    free, faced = (np.where(rng.random((4, 3, P + 1)) < 0.5, rng.integers(-30, 30, (4, 3, P + 1)), NONE).astype(float)
                   for _ in range(2))
    g, w = (np.where(rng.random((4, 3, P + 1)) < 0.6, rng.integers(-20, 20, (4, 3, P + 1)), NONE).astype(float)
            for _ in range(2))
    g[..., 0] = w[..., 0] = NONE
    want_faced = np.maximum(roles_step(faced, np.maximum(g, w), P), roles_step(free, w, P, optional=False))
    want_free = roles_step(free, g, P)
    got = roles_step(np.concatenate([free, faced]), np.concatenate([g, w, np.maximum(g, w)]), P,
                     facing_pairs(True))
    np.testing.assert_array_equal(got[:4], want_free)
    np.testing.assert_array_equal(got[4:], want_faced)


@pytest.mark.parametrize("seed", range(8))
def test_stage_work_price_search_reaches_the_dual_peak(seed):
    """mesh_dual.stage_work_at's price search (the roles' rounds warm-started from the best price without them, the
    bracket moved where the peak lies beyond it) ends within 0.1% of the best of a dense grid of prices, and never
    above it (every price's value is a lower bound: weak duality)."""
    rng = np.random.default_rng(700 + seed)
    P, options = int(rng.integers(2, 6)), int(rng.integers(1, 3))
    hosts = [_host(rng, options) for _ in range(int(rng.integers(2, 5)))]
    for a in hosts:
        a["cross"] *= 4
    cycle = float(rng.uniform(15000, 50000))
    caps = [mesh_bound._option_gains(a, cycle, P) for a in hosts]
    taus = [a["tau"] for a in hosts]
    L = int(rng.integers(P, P + 12))
    dense = np.linspace(min(float(t.min()) for t in taus), max(float(t.max()) for t in taus), 4001)
    ends = mesh_dual.end_work(hosts)
    peak = max(float(mesh_dual.dual_work(caps, taus, P, L, dense, roles=r, ends=ends).max()) for r in (False, True))
    got = mesh_dual.stage_work_at(hosts, caps, P, L, roles=True)[0]
    if not np.isfinite(peak):
        assert got == peak
        return
    assert got <= peak + 1e-6 * abs(peak)
    assert got >= peak - 1e-3 * abs(peak), (got, peak)


@pytest.mark.parametrize("seed", range(10))
def test_stage_work_price_search_follows_the_roles_peak(seed, monkeypatch):
    """Where the dual with the roles peaks far from the one without them (a concave tent per dual, its peak anywhere
    between the least and the largest tau), the warm-started rounds move their bracket to it: the search ends within
    1/256 of the tau range's value of the higher peak, from the whole range and from a start price anywhere, and
    returns the price of the peak without the roles (where the next call starts)."""
    rng = np.random.default_rng(800 + seed)
    low, high = 100.0, 1100.0
    peaks = {False: (low + (high - low) * rng.random(), 1000.0), True: (low + (high - low) * rng.random(), 1100.0)}
    slope = 3.0

    def tent(caps, taus, P, L, prices, across=None, forced=frozenset(), roles=False, ends=None):
        at, top = peaks[roles]
        return top - slope * np.abs(prices - at)

    monkeypatch.setattr(mesh_dual, "dual_work", tent)
    hosts = [{"tau": np.array([tau]), "first": np.zeros(1), "last": np.zeros(1)} for tau in (low, high)]
    # from the whole range, and from the best price of a call at another cycle (anywhere: `start`)
    for start in (None, low + (high - low) * rng.random()):
        got, at = mesh_dual.stage_work_at(hosts, [], 4, 8, roles=True, start=start)
        assert peaks[True][1] - slope * (high - low) / 256 <= got <= peaks[True][1], (got, peaks, start)
        assert abs(at - peaks[False][0]) <= (high - low) / 256, (at, peaks, start)  # the next call's start


@pytest.mark.parametrize("width", [0.0, 0.3, 1.0])
def test_stage_work_price_search_is_short_on_a_plateau(width, monkeypatch):
    """A dual flat over part or all of the range (its peak a plateau): the search still reaches the peak's value and
    makes a bounded number of evaluations (no walk across a plateau half a bracket at a time)."""
    low, high, calls = 100.0, 1100.0, []

    def plateau(caps, taus, P, L, prices, across=None, forced=frozenset(), roles=False, ends=None):
        calls.append(roles)
        return 500.0 - 2.0 * np.maximum(0.0, np.abs(prices - 300.0) - width * (high - low))

    monkeypatch.setattr(mesh_dual, "dual_work", plateau)
    hosts = [{"tau": np.array([tau]), "first": np.zeros(1), "last": np.zeros(1)} for tau in (low, high)]
    for start in (None, 1000.0):
        calls.clear()
        got, _ = mesh_dual.stage_work_at(hosts, [], 4, 8, roles=True, start=start)
        assert got >= 500.0 - 2.0 * (high - low) / 256
        assert len(calls) <= mesh_dual.DUAL_ROUNDS + mesh_dual.WARM_ROUNDS + 2 * mesh_dual.MAX_MOVES, len(calls)
