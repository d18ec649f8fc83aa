"""The mesh solve one (first host, last host) pair at a time (planner/mesh_model._solve_by_ends) against the
whole model on the cross-check's random fleets of two and three hosts: the same optimum, proofs under an upper bound,
a candidate left open, at no more than that pair's bound, when one pair stops at its limit; and the cuts of
planner/mesh_cuts.py against the exhaustive reference."""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import replace

import pytest
import numpy as np
from exhaustive_mesh import _placements, pair_optima, scored
from test_mesh_exhaustive import case

from hgplan.planner import limits, mesh_bound, mesh_first, mesh_model
from hgplan.planner import mesh_search as mesh_search_module
from hgplan.planner.mesh_cuts import cycle_cuts
from hgplan.planner.mesh_model import (SPLIT_HOSTS, CycleCuts, MeshSolution, build_mesh_model, pair_solves,
                                       solve_mesh)
from hgplan.planner.mesh_search import MeshResult
from hgplan.planner.mesh_sites import site_set_bound
from hgplan.planner.mesh_tables import build_mesh_tables
from hgplan.planner.model import SolverParams

SEEDS = range(0, 24, 3)
LONG = SolverParams(max_deterministic_time=60.0, max_time_in_seconds=120.0)


@functools.cache
def candidates(seed: int):
    """(tables, whole model's proven optimum) of every candidate of 2 or 3 stages over two or three hosts
    (SPLIT_HOSTS)."""
    fleet, model, train, opts, costs, _, _ = case(seed)
    groups = list(fleet.groups)
    _, fills, _ = mesh_first.first_bounds(costs, groups, opts)
    out = []
    for B in fills:
        for P in (2, 3):
            t = build_mesh_tables(costs, B, P, groups, opts)
            if t is None or len(t.hosts) not in SPLIT_HOSTS:
                continue
            md, v = build_mesh_model(t)
            whole = mesh_model._solve_one(md, v, t, LONG, None)
            assert whole.status in ("OPTIMAL", "INFEASIBLE")
            out.append((t, whole.objective))
    return out


def test_the_seeds_have_candidates_of_two_and_three_hosts():
    assert SPLIT_HOSTS == (2, 3)
    for hosts in SPLIT_HOSTS:
        assert sum(len(t.hosts) == hosts for s in SEEDS for t, _ in candidates(s)) >= 10


@pytest.mark.parametrize("seed", SEEDS)
def test_pairs_prove_the_whole_models_optimum(seed):
    """Each candidate: the same optimum (objective) as the whole model; nothing below it (INFEASIBLE under it as
    the upper bound); found again under one more than it."""
    for t, best in candidates(seed):
        sol = solve_mesh(t, LONG)
        if best is None:
            assert sol.status == "INFEASIBLE"
            continue
        assert (sol.status, sol.objective) == ("OPTIMAL", best)
        assert t.objective(list(sol.assign), dict(sol.choice), list(sol.layers)) == best
        assert solve_mesh(t, LONG, upper_bound=best).status == "INFEASIBLE"
        again = solve_mesh(t, LONG, upper_bound=best + 1)
        assert (again.status, again.objective) == ("OPTIMAL", best)


def _stopping(monkeypatch, calls_stopped: set[int], bound: float) -> list:
    """_solve_one stopped at its limit with CP-SAT's bound only (UNKNOWN) on the calls numbered in calls_stopped."""
    real, calls = mesh_model._solve_one, []

    def solve_one(md, v, t, params, log):
        calls.append(1)
        if len(calls) - 1 in calls_stopped:
            return MeshSolution(status="UNKNOWN", objective=None, bound=bound, assign=(), choice=(), layers=(),
                                deterministic_time=0.0, wall_time_s=0.0)
        return real(md, v, t, params, log)

    monkeypatch.setattr(mesh_model, "_solve_one", solve_one)
    monkeypatch.setattr(limits, "SOLVE_THREADS", 1)  # the calls in pair order
    return calls


def _open_candidate():
    return next((t, b) for s in SEEDS for t, b in candidates(s) if b is not None and t.pp > 1 and len(t.hosts) == 3)


@pytest.mark.parametrize("stopped", [0, 4, 8])
def test_a_pair_stopped_twice_leaves_the_candidate_open_at_its_bound(stopped, monkeypatch):
    """One pair ends at its limit in both turns (its first, and its second with what the others left): the
    candidate is not proven, its bound is at most that pair's, and a plan found by the other pairs is still returned
    (FEASIBLE)."""
    t, best = _open_candidate()
    calls = _stopping(monkeypatch, {stopped, 9}, best / 2)
    sol = solve_mesh(t, LONG)
    assert len(calls) == 10
    assert sol.bound <= best / 2
    assert sol.status in ("FEASIBLE", "UNKNOWN")
    if sol.objective is not None:
        assert sol.status == "FEASIBLE" and sol.objective >= best
        assert t.objective(list(sol.assign), dict(sol.choice), list(sol.layers)) == sol.objective


@pytest.mark.parametrize("stopped", [0, 8])
def test_a_pair_stopped_once_is_proven_in_its_second_turn(stopped, monkeypatch):
    """A pair that ends at its limit in its first turn gets a second with what the others left over, and when that
    proves it the candidate is proven (its optimum, OPTIMAL)."""
    t, best = _open_candidate()
    calls = _stopping(monkeypatch, {stopped}, best / 2)
    sol = solve_mesh(t, LONG)
    assert len(calls) == 10
    assert (sol.status, sol.objective) == ("OPTIMAL", best)


@pytest.mark.parametrize("hosts", SPLIT_HOSTS)
def test_a_candidate_of_two_or_three_hosts_is_solved_pair_by_pair(hosts, monkeypatch):
    """Two or three hosts and more than one stage: one solve per ordered (first, last) pair, the diagonal included."""
    t = next(t for s in SEEDS for t, _ in candidates(s) if t.pp > 1 and len(t.hosts) == hosts)
    calls, real = [], mesh_model._solve_one
    monkeypatch.setattr(mesh_model, "_solve_one", lambda *a: (calls.append(1), real(*a))[1])
    solve_mesh(t, LONG)
    assert len(calls) == len(t.hosts) ** 2


def test_the_pairs_are_queued_at_once_so_no_thread_waits_for_the_other(monkeypatch):
    """The pairs of a turn are queued together on the SOLVE_THREADS threads: while the first pair is still being
    solved, the other thread goes on to the third (solved two at a time, the third waited for the first to end), and
    every pair of the turn gets the same share; the candidate's result is the same as one thread's."""
    t, best = _open_candidate()
    assert limits.SOLVE_THREADS == 2
    third_started, seen, lock, real = threading.Event(), [], threading.Lock(), mesh_model._solve_one

    def solve_one(md, v, t_, params, log):
        with lock:
            seen.append(params.max_deterministic_time)
            n = len(seen)
        if n == 3:
            third_started.set()
        if n == 1:  # the first pair ends only once the third has begun (or after 20 s: the test fails)
            assert third_started.wait(20.0), "the third pair waited for the first"
        return real(md, v, t_, params, log)

    monkeypatch.setattr(mesh_model, "_solve_one", solve_one)
    sol = solve_mesh(t, LONG)
    assert third_started.is_set() and len(seen) == len(t.hosts) ** 2
    assert len(set(seen)) == 1 and seen[0] == pytest.approx(LONG.max_deterministic_time / len(seen))
    monkeypatch.setattr(mesh_model, "_solve_one", real)
    monkeypatch.setattr(limits, "SOLVE_THREADS", 1)
    alone = solve_mesh(t, LONG)
    assert (sol.status, sol.objective) == ("OPTIMAL", best)
    assert (sol.assign, sol.choice, sol.layers) == (alone.assign, alone.choice, alone.layers)


def test_the_pairs_keep_to_the_wall_clock_limit_together(monkeypatch):
    """The pairs share params' wall-clock limit (the search's deadline): with none left no pair is solved and the
    candidate stays open, its bound no more than any plan's."""
    t, best = _open_candidate()
    calls = _stopping(monkeypatch, set(), 0.0)
    sol = solve_mesh(t, SolverParams(max_deterministic_time=60.0, max_time_in_seconds=0.0))
    assert calls == []
    assert sol.status == "UNKNOWN" and sol.objective is None and sol.bound <= best


def test_a_pair_queued_past_the_wall_clock_limit_is_not_solved(monkeypatch):
    """The limit passes while the first two pairs are being solved (each takes 1.5 s of a 1 s limit): the pairs
    still queued are not started, and every pair is left open for a retry, the candidate unproven."""
    t, best = _open_candidate()
    started = []

    def slow(md, v, t_, params, log):
        started.append(1)
        time.sleep(1.5)
        return MeshSolution(status="UNKNOWN", objective=None, bound=0.0, assign=(), choice=(), layers=(),
                            deterministic_time=0.0, wall_time_s=1.5)

    monkeypatch.setattr(mesh_model, "_solve_one", slow)
    sol = solve_mesh(t, SolverParams(max_deterministic_time=60.0, max_time_in_seconds=1.0))
    assert len(started) == limits.SOLVE_THREADS == 2
    assert sol.status == "UNKNOWN" and sol.objective is None and sol.bound <= best
    assert sorted(sol.open_pairs) == sorted((a, b) for a in range(3) for b in range(3))


def test_a_retry_solves_only_the_pairs_left_open(monkeypatch):
    """A try that leaves pairs unproven reports them (open_pairs); the next try, under an upper bound no higher,
    solves only those: here the one pair (0, 0), whose plans are then all known (its optimum, or nothing below the
    others' best)."""
    t, best = _open_candidate()
    _stopping(monkeypatch, {0, 9}, best / 2)
    first = solve_mesh(t, LONG)
    assert first.status in ("FEASIBLE", "UNKNOWN") and first.open_pairs == ((0, 0),)
    monkeypatch.undo()
    calls = _stopping(monkeypatch, set(), 0.0)
    upper = first.objective if first.objective is not None else None
    again = solve_mesh(t, LONG, upper_bound=upper, cuts=CycleCuts(pairs_us=dict.fromkeys(first.open_pairs, 0)))
    assert len(calls) == 1 and again.open_pairs == ()
    if upper is None or best < upper:
        assert (again.status, again.objective) == ("OPTIMAL", best)
    else:
        assert again.status == "INFEASIBLE"


def test_each_pair_of_end_hosts_gets_the_try_limit_over_the_solve_threads(monkeypatch):
    """mesh_model.pair_solves: a candidate split by end hosts gets its try's deterministic limit once per
    SOLVE_THREADS of its pairs (nine for three hosts, four for two, one left open by a try before), so that the
    search's first turn gives each pair the try's limit over SOLVE_THREADS however many there are."""
    t, _ = _open_candidate()
    two = next(t for s in SEEDS for t, _ in candidates(s) if t.pp > 1 and len(t.hosts) == 2)
    assert pair_solves(t, CycleCuts()) == pytest.approx(9 / limits.SOLVE_THREADS)
    assert pair_solves(two, CycleCuts()) == pytest.approx(max(1.0, 4 / limits.SOLVE_THREADS))
    assert pair_solves(t, CycleCuts(pairs_us={(0, 0): 0})) == 1.0
    shares, real = [], mesh_model._solve_one
    monkeypatch.setattr(mesh_model, "_solve_one", lambda md, v, t_, p, log: (
        shares.append(p.max_deterministic_time), real(md, v, t_, p, log))[1])
    res = MeshResult(found=[], candidates_total=1)
    mesh_search_module._solve(t, lambda times: replace(LONG, max_deterministic_time=0.5 * times), 0.0, math.inf, 0,
                              res, None, None, (0.0, 0.0))
    assert shares[0] == pytest.approx(0.5 / limits.SOLVE_THREADS)
    assert res.candidates_solved == 1 and len(shares) >= 9


@functools.cache
def with_cuts(seed: int) -> list:
    """(tables, optimum, upper bound, cycle cuts, exhaustive (objective, cycle) per end pair) of every candidate of
    2 or 3 stages over two or three hosts with a plan, under an upper bound one above its optimum and one 2% above."""
    fleet, _, _, opts, costs, _, _ = case(seed)
    _, fills, _ = mesh_first.first_bounds(costs, list(fleet.groups), opts)
    out = []
    for t, best in candidates(seed):
        if best is None or t.pp == 1:
            continue
        fill = fills[t.samples_per_step]
        lo = site_set_bound(t, fill, stages=True).cycle_us[0]
        exact = pair_optima(t)
        for upper in (best + 1, math.ceil(best * 1.02)):
            out.append((t, best, upper, cycle_cuts(t, fill, lo, upper), exact))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_cycle_cuts_are_below_every_plans_cycle(seed):
    """planner/mesh_cuts.py: the candidate's floor is at most the least cycle of any plan, each end pair's floor at
    most the least cycle of that pair's plans, and a pair left out has no plan below the upper bound."""
    for t, best, upper, cuts, exact in with_cuts(seed):
        assert cuts.floor_us <= min(c for _, c in exact.values())
        pairs = cuts.pairs_us if cuts.pairs_us is not None else dict.fromkeys(exact, cuts.floor_us)  # one micro-batch
        for pair, (obj, cycle) in exact.items():
            if pair in pairs:
                assert cuts.floor_us <= pairs[pair] <= cycle, (pair, cuts, cycle)
            else:
                assert obj >= upper, (pair, obj, upper)


def test_cycle_cuts_drop_pairs_and_raise_floors():
    """The cuts do something on the cross-check's candidates of two and three hosts: measured (96 candidates, two upper
    bounds each, 160 of the 192 with more than one micro-batch), of 736 pairs with a plan 375 left out (no plan below
    the upper bound), and 196 of the 361 kept with a floor above the whole candidate's; asserted: a third of each."""
    kept = dropped = raised = 0
    for seed in SEEDS:
        for _, _, _, cuts, exact in with_cuts(seed):
            if cuts.pairs_us is None:
                continue
            for pair in exact:
                kept += pair in cuts.pairs_us
                dropped += pair not in cuts.pairs_us
                raised += cuts.pairs_us.get(pair, 0) > cuts.floor_us
    assert dropped >= (kept + dropped) / 3 and raised >= kept / 3, (kept, dropped, raised)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_solve_with_the_cuts_finds_the_optimum_and_proves_it(seed):
    """With the floors as cuts and only the pairs the cuts keep, the solve still finds the optimum under an upper
    bound above it and proves that nothing is below it (INFEASIBLE, or no pair left to solve)."""
    fleet, _, _, opts, costs, _, _ = case(seed)
    _, fills, _ = mesh_first.first_bounds(costs, list(fleet.groups), opts)
    for t, best, upper, cuts, _ in with_cuts(seed):
        sol = solve_mesh(t, LONG, upper_bound=upper, cuts=cuts)
        assert (sol.status, sol.objective) == ("OPTIMAL", best)
        fill = fills[t.samples_per_step]
        at_best = cycle_cuts(t, fill, site_set_bound(t, fill, stages=True).cycle_us[0], best)
        assert not at_best.pairs_us or solve_mesh(t, LONG, upper_bound=best, cuts=at_best).status == "INFEASIBLE"


@pytest.mark.parametrize("seed", SEEDS)
def test_least_stage_work_is_below_every_plans_work(seed):
    """mesh_bound.least_stage_work_us(t, c, hosts) is at most the stage work (layers, embedding, head) of every plan
    whose cycle is at most c and which uses those hosts: checked on every candidate of 2 or 3 stages of the seed's
    fleet (two or three hosts), on up to PLACEMENTS placements of the exhaustive reference per candidate (evenly
    spaced), each on its splits of least cycle, least work and least objective, at that split's own cycle."""
    fleet, _, _, opts, costs, _, _ = case(seed)
    groups = list(fleet.groups)
    checked = 0
    for B in mesh_first.first_bounds(costs, groups, opts)[1]:
        for P in (2, 3):
            t = build_mesh_tables(costs, B, P, groups, opts)
            checked += 0 if t is None else _check_least_work(t)
    assert checked >= 10


PLACEMENTS = 100


def _check_least_work(t) -> int:
    checked = 0
    for assign, choice, splits, obj, cycles in scored(t, max(1, len(list(_placements(t))) // PLACEMENTS)):
        opt = [choice[h] for h in assign]
        work = (splits * np.array([t.layer_us[h][o] for h, o in zip(assign, opt)])).sum(axis=1) + (
            t.first_us[assign[0]][opt[0]] + t.last_us[assign[-1]][opt[-1]])
        for i in {int(np.argmin(cycles)), int(np.argmin(np.where(np.isfinite(cycles), work, np.inf))),
                  int(np.argmin(obj))}:
            if math.isfinite(cycles[i]):
                used = tuple(sorted({assign[0], assign[-1]}))
                assert mesh_bound.least_stage_work_us(t, float(cycles[i]), [used])[0] <= work[i] + 1e-6, (assign, i)
                checked += 1
    return checked
