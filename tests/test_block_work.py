"""Issue 11 (the 8-group benchmark fleet's gap): the block bound's W(C) charged for what the WAN moves to slower groups
(planner/block_work.py).

W's fill is checked against every integer split, its dual prices against every cut of capacity, and the charged block
bound against the exhaustive optimum of every item of random three- and four-site fleets: never above it, never below
the bound without the charges, above it on some items. On the 8-group benchmark fleet's 29-stage item (the one CP-SAT
could not close within the 60 s limit) the charged bound sits between the incumbent's 98% and the item's optimum."""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from test_bound_structure import _items
from test_planner import small_model
from test_wan_crossings import _crossing_fleet

from hgplan.domain import TrainingSettings
from hgplan.plan import Recompute
from hgplan.planner import block_bound
from hgplan.planner.block_bound import block_bound_us
from hgplan.planner.block_work import block_pools, cheapest_fill, least_value, work_one
from hgplan.planner.bounds import end_choices, subset_terms
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.options import SearchOptions


def _least_split(pool, sure, most, L, tau):
    """The least work of L whole layers, group j between sure[j] and pool[j], the first j + 1 groups at most most[j]
    (None: no split), by brute force."""
    best = None
    for x in itertools.product(*[range(int(s), int(p) + 1) for s, p in zip(sure, pool)]):
        if sum(x) != L or any(sum(x[:j + 1]) > most[j] for j in range(len(x))):
            continue
        work = sum(a * t for a, t in zip(x, tau))
        best = work if best is None else min(best, work)
    return best


def _instance(rng: random.Random):
    n, L = rng.randint(2, 4), rng.randint(3, 13)
    tau = sorted(rng.uniform(1, 5) for _ in range(n))
    pool = [rng.randint(0, 6) for _ in range(n)]
    sure = [min(rng.randint(0, 2), p) for p in pool]
    most = sorted(min(L, rng.randint(0, L + 3)) for _ in range(n))
    most[-1] = L
    return n, L, np.array(tau), pool, sure, most


def test_cheapest_fill_is_the_least_split():
    """The greedy fill with the fastest groups' limits and the layers each group must hold is the least work of every
    integer split (1,000 random instances with a split)."""
    rng, checked = random.Random(3), 0
    while checked < 1000:
        n, L, tau, pool, sure, most = _instance(rng)
        exact = _least_split(pool, sure, most, L, tau)
        if exact is None:
            continue
        work, _ = cheapest_fill(np.array([pool], float), np.array([sure], float), L, tau, np.array([most], float))
        assert work[0] == pytest.approx(exact), (tau, pool, sure, most, L)
        checked += 1


def test_dual_prices_bound_every_cut_of_capacity():
    """Taking d_k layers of capacity from the groups raises the least split by at least sum_k d_k x price_k, with and
    without the fastest groups' limits (1,000 random cuts that leave a split), and by exactly that on some."""
    rng, checked, tight = random.Random(4), 0, 0
    while checked < 1000:
        n, L, tau, pool, sure, most = _instance(rng)
        limits = most if rng.random() < 0.7 else [L] * n
        cut = [rng.randint(0, 3) if rng.random() < 0.6 else 0 for _ in range(n)]
        left = [p - d for p, d in zip(pool, cut)]
        before, after = _least_split(pool, sure, limits, L, tau), _least_split(left, sure, limits, L, tau)
        if before is None or after is None or min(x - s for x, s in zip(left, sure)) < 0:
            continue
        work, price = cheapest_fill(np.array([pool], float), np.array([sure], float), L, tau,
                                    np.array([limits], float))
        charged = work[0] + float(np.dot(cut, price[0]))
        assert charged <= after + 1e-9, (tau, pool, sure, limits, cut, L)
        tight += any(cut) and abs(charged - after) < 1e-9 and after > before + 1e-9
        checked += 1
    assert tight >= 100


def _vector_work(c, role, *, v, p, sure, L, tau, most, charge):
    """W at cycle c by the vector forms (block_bound._BlockBound.work_at's numpy path), `charge(price)` per row."""
    cs = np.array([c])
    pool, sure_held, bad = block_pools(cs, role, v=v, p=p, sure_layers=np.array(sure))
    work, price = cheapest_fill(pool, sure_held, L, tau, np.array([most]))
    if charge is not None:
        loose, loose_price = cheapest_fill(pool, sure_held, L, tau)
        work = np.maximum(work + charge(price[0].tolist()), loose + charge(loose_price[0].tolist()))
    return float(np.where(bad, np.inf, work)[0])


def test_one_cycle_is_the_vector_form_bit_for_bit():
    """block_work.work_one (beyond's and least_value's single cycles, in plain Python) returns exactly the vector
    form's number, with and without a charge, over 3,000 random roles of 1-140 groups (numpy sums rows of 8 or more
    pairwise: the work's sum is numpy's), extras infinite now and then, cycles where some group forms no block among
    them."""
    rng, infeasible = random.Random(11), 0
    for _ in range(3000):
        n, v = rng.choice([1, 2, 3, 5, 8, 9, 16, 33, 70, 140]), rng.choice([1, 2])
        role = []
        for _ in range(n):
            vt = v * rng.uniform(0.5e-3, 30e-3)
            extras = [rng.choice([0.0, rng.uniform(0, 40e-3), math.inf if rng.random() < 0.05 else 1e-3])
                      for _ in range(4)]
            role.append((vt, *extras, rng.randint(1, 6)))
        tau = np.array(sorted(r[0] / v for r in role))
        L, p = rng.randint(n, 4 * n + 8), rng.randint(n, 3 * n + 2)
        sure = [v * rng.randint(0, 2) for _ in range(n)]
        most = sorted(rng.randint(L // 2, L) for _ in range(n))
        weights = [rng.uniform(0, 3) for _ in range(n)]
        c = rng.uniform(1e-3, 0.2) if rng.random() < 0.9 else 1e6
        for charge in (None, lambda price: sum(w * x for w, x in zip(weights, price))):
            one = work_one(c, role, v=v, p=p, sure_layers=[float(x) for x in sure], L=L, tau=tau.tolist(),
                           most=[float(x) for x in most], charge=charge)
            assert one == _vector_work(c, role, v=v, p=p, sure=sure, L=L, tau=tau, most=most, charge=charge)
            infeasible += one == math.inf
    assert 100 <= infeasible <= 5000


def test_block_bound_single_cycles_match_the_vector_path():
    """On every set of three random three- and four-site fleets' candidates (tp 4, up to 8 stages), with and without
    the WAN's charges (the crossings' loops, or the sites' WAN ends with interleaving; finite and infinite W among
    them), W at one cycle equals the same cycle taken in a pair, which goes through numpy."""
    compared = 0
    for cand, m, subset in crossing_sets():
        terms = subset_terms(cand.ctx, subset, L=16, p=cand.cfg.pp)
        if terms is None:
            continue
        bb = block_bound._BlockBound(cand.ctx, cand.cfg, subset, L=16, m=m, tail=terms.tail, edges=terms.edges)
        ends = [(None, None)] + [(a, b) for a in subset for b in subset if a != b][:3]
        for first, last in ends:
            role, wan = bb.roles(first, last)
            for c in (0.005, 0.02, 0.08, 0.3):
                for w in (None, wan):
                    pair = bb.work_at(np.array([c, c]), role, w)
                    assert bb.work_at(np.array([c]), role, w).tolist() == pair[:1].tolist()
                    compared += 1
    assert compared >= 2000


def crossing_sets(seeds: tuple[int, ...] = (5, 7, 19)):
    """(candidate, micro-batches, set of groups) of every candidate (tp 4, up to 8 stages of 16 layers, 32 micro-batches
    of one sample) of the random three- and four-site fleets of these seeds (test_wan_crossings._crossing_fleet)."""
    for seed in seeds:
        fleet = _crossing_fleet(random.Random(seed))
        train = TrainingSettings(seq_length=2048, global_batch_size=32)
        model = small_model(16, hidden=4096, heads=32)
        opts = SearchOptions(max_pp=8, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
        for cand in enumerate_candidates(CostSource(fleet, model, train), opts, list(fleet.groups))[0]:
            for subset in cand.ctx.subsets(cand.cfg.pp):
                yield cand, cand.cfg.num_microbatches(32), subset


def _uncharged(monkeypatch):
    """The block bound with W's WAN charges turned off."""
    monkeypatch.setattr(block_bound._BlockBound, "_charge", lambda self, cs, price, wan: np.zeros(len(cs)))


def test_charged_block_bound_stays_below_the_optimum(monkeypatch):
    """Every item of two random three- and four-site fleets (190 items): the charged bound at most the exhaustive
    optimum and at least the bound without the charges; raised on 26 of them (by up to 1% of the optimum). Stopped
    early at an incumbent just above the optimum (enough_us), neither pass (ends unknown or known) is above it either:
    the early exits (one feasibility check at the incumbent's cycle; the bisection from the cycle that check found
    feasible, above least_cycle) prove what they return. One exception to "at least" since the crossings' sides
    (wan_loops.Side, 2026-11-27): seed 19's pp 5 set over four groups, whose feasibility is not monotone in the cycle
    for its (c/g2, b/g1) ends (feasible at 12.33-12.99 ms, not at 13.00-13.59, again from 13.60): each verdict holds
    for its own cycle (no placement runs at 13.0 ms, so none at 12.33 either), but a bisection started elsewhere, as
    the other pass's different values make it, ends at another infeasible cycle. Both bounds stay below the optimum;
    of the 1,759 items of the 30 fleets of test_wan_crossings.py this is the only one."""
    raised, below_plain = 0, 0
    for seed in (5, 19):
        rng = random.Random(seed)
        fleet = _crossing_fleet(rng)
        gbs, layers = rng.choice([16, 32, 64]), rng.choice([12, 16, 24])
        train = TrainingSettings(seq_length=2048, global_batch_size=gbs)
        opts = SearchOptions(max_pp=8, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
        for cand, subset, _, charged, optimum in _items(fleet, train, opts, layers=layers):
            with monkeypatch.context() as off:
                _uncharged(off)
                plain = block_bound_us(cand.ctx, cand.cfg, subset, L=layers, m=cand.cfg.num_microbatches(gbs))
            assert plain <= optimum + 1 and charged <= optimum + 1, (seed, cand.cfg, subset, plain, charged, optimum)
            below_plain += charged < plain - 1e-6
            for known in (False, True):
                early = block_bound_us(cand.ctx, cand.cfg, subset, L=layers, m=cand.cfg.num_microbatches(gbs),
                                       ends_known=known, enough_us=optimum * 1.0005)
                assert early <= optimum + 1, (seed, known, cand.cfg, subset, early, optimum)
            raised += charged > plain + 1
    assert raised >= 20 and below_plain <= 1


def _eight_group_item():
    """The 8-group benchmark fleet's candidate of tp 4, pp 29, dp 8, micro-batch 1 and the set of all eight groups."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from search_scaling import model_for, synthetic

    from hgplan.planner.candidates import enumerate_candidates
    from hgplan.planner.costs import CostSource

    fleet, model = synthetic(1024, 4, 5, 8), model_for(1024)[1]
    costs = CostSource(fleet, model, TrainingSettings(seq_length=4096, global_batch_size=512))
    cands, _ = enumerate_candidates(costs, SearchOptions(tp_options=(4,), mbs_options=(1,),
                                                         recompute_options=(Recompute.NONE,)), list(fleet.groups))
    cand = next(c for c in cands if c.cfg.pp == 29 and c.cfg.dp == 8 and c.cfg.vpp == 1)
    return cand, tuple(sorted(g.key for g in fleet.groups))


def test_eight_group_item_bound_reaches_near_its_optimum():
    """The 8-group benchmark fleet (benchmarks/search_scaling.py, 1024 GPUs over four sites, five GPU types), tp 4,
    29 stages, dp 8, micro-batch 1 over all eight groups: the block model proves its optimum 5.110205 s (2.6 s, one
    worker, 2026-11-29, since its MI300X-to-NVIDIA boundary goes over gloo's one connection per pair of ranks;
    5.016987 s on 2026-11-26); the incumbent of the search was 4.965490 s. Before the charges the block bound was
    4.810 s (3.1% below that incumbent, so the item stayed open); with them 4.881 s, and 4.905 s with the 21
    boundaries inside the blocks in the fill (5.057 s with gloo's connection). Against an incumbent the bound stops
    charging once an order of end groups is below it: at most the full one and above the bound before the charges."""
    cand, subset = _eight_group_item()
    full = block_bound_us(cand.ctx, cand.cfg, subset, L=80, m=64)
    quick = block_bound_us(cand.ctx, cand.cfg, subset, L=80, m=64, enough_us=4965490)
    assert 4.90e6 <= full <= 5110205
    assert 4.82e6 <= quick <= full


def test_beyond_says_reached_only_where_the_orders_bound_is(monkeypatch):
    """_BlockBound.beyond drops an order of end groups without its bisection only where its bound (compute_value)
    reaches the value. Since 2026-11-29 (late) it does so without its feasibility check where W(inf) or W(c2) is at or
    above the value, or infinite (nothing holds the layers at a cycle of c2): on this item, whose MI300X group's
    crossings to the other sites cost 216 ms over gloo's one connection per pair of ranks, every order with that group
    inside the pipeline was bisected before (the 8-group row of benchmarks/search_scaling.py 23.4 -> 9.4 s, the same
    plan). For every order and values from 0.9 to 1.1 of its bound without the WAN's charges: "reached" implies the
    bound is at least the value; some orders are dropped without a feasibility check, others after one."""
    cand, subset = _eight_group_item()
    terms = subset_terms(cand.ctx, subset, L=80, p=cand.cfg.pp)
    bb = block_bound._BlockBound(cand.ctx, cand.cfg, subset, L=80, m=64, tail=terms.tail, edges=terms.edges)
    checks = []
    feasible = bb.feasible
    monkeypatch.setattr(bb, "feasible", lambda *args: checks.append(1) or feasible(*args), raising=False)
    without_check = with_check = 0
    for first, last in end_choices(cand.ctx, subset):
        role, wan = bb.roles(first, last)
        bound = bb.compute_value(role, wan, charged=False)[0]
        if not math.isfinite(bound):
            continue
        for share in (0.9, 0.97, 0.995, 1.0, 1.005, 1.03, 1.1):
            checks.clear()
            reached, _ = bb.beyond(share * bound, role, wan)
            if reached:
                assert bound >= share * bound * (1 - 1e-12), (first, last, share, bound)
                without_check += not checks
                with_check += bool(checks)
    assert without_check >= 1 and with_check >= 1, (without_check, with_check)


def _steps(rng: random.Random, start: float) -> tuple[list[float], list[float]]:
    """A random non-increasing step function from `start` on: breakpoints and the value from each one on."""
    at, vals = [start], [rng.uniform(1.0, 3.0)]
    for _ in range(rng.randint(0, 6)):
        at.append(at[-1] + rng.uniform(1e-3, 0.2))
        vals.append(vals[-1] * rng.uniform(0.7, 1.0))
    return at, vals


def _step_w(at: list[float], vals: list[float]):
    """W at an array of cycles: infinite below the first breakpoint."""
    def w(cs: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(np.array(at), cs, side="right") - 1
        return np.where(idx >= 0, np.array(vals)[np.maximum(idx, 0)], np.inf)
    return w


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_least_value_moves_past_a_charged_w_infinite_at_the_least_cycle():
    """A charged W infinite at C* (no placement with a cycle that short closes its WAN loops: the 16-group benchmark
    fleet's items, where least_value returned inf, a cut of plans that exist, beside numpy's NaN warnings): the
    value is at most the exhaustive min over C >= C* of (v m - 1) C + W(C), at least (v m - 1) times the first cycle
    where the charged W is finite (within 0.1%; C*'s lower end where that is C*) plus its least, and with a charge
    finite nowhere, the plain value."""
    rng = random.Random(3)
    for _ in range(400):
        hi, vm1 = rng.uniform(0.01, 0.2), rng.randint(1, 64)
        plain_at, plain_vals = _steps(rng, 0.0)
        first = hi * rng.choice([1.0, rng.uniform(1.0, 1.5), rng.uniform(1.5, 40)])
        at, vals = _steps(rng, first)
        vals = [x + max(plain_vals) for x in vals]  # at least the plain W everywhere
        plain, charged = _step_w(plain_at, plain_vals), _step_w(at, vals)
        least = min(plain_vals) * 0.5
        value = least_value(hi * 0.999, hi, vm1, least, plain, charged)
        exact = min(vm1 * c + float(charged(np.array([c]))[0]) for c in [hi] + at if c >= hi)
        assert value <= exact + 1e-9, (hi, first, value, exact)
        assert value >= vm1 * (first * (1 - 1e-3) if first > hi else hi * 0.999) + min(vals) - 1e-9, (hi, first)
        assert least_value(hi * 0.999, hi, vm1, least, plain) <= value
    nowhere = _step_w([1e300], [1.0])
    plain = _step_w([0.0, 0.05], [2.0, 1.0])
    assert least_value(0.0299, 0.03, 8, 0.5, plain, nowhere) == least_value(0.0299, 0.03, 8, 0.5, plain)
