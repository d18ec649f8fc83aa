"""The mesh solve one (first host, last host) pair at a time (planner/mesh_model._solve_by_ends) against the
whole model on the cross-check's random fleets of three hosts: the same optimum, proofs under an upper bound, and
a candidate left open, at no more than that pair's bound, when one pair stops at its limit."""

from __future__ import annotations

import functools

import pytest
from test_mesh_exhaustive import case

from hgplan.planner import mesh_first, mesh_model
from hgplan.planner.mesh_model import SPLIT_HOSTS, MeshSolution, build_mesh_model, solve_mesh
from hgplan.planner.mesh_tables import build_mesh_tables
from hgplan.planner.model import SolverParams

SEEDS = range(0, 24, 3)
LONG = SolverParams(max_deterministic_time=60.0, max_time_in_seconds=120.0)


@functools.cache
def candidates(seed: int):
    """(tables, whole model's proven optimum) of every candidate of 2 or 3 stages over SPLIT_HOSTS hosts."""
    fleet, model, train, opts, costs, _, _ = case(seed)
    groups = list(fleet.groups)
    _, fills, _ = mesh_first.first_bounds(costs, groups, opts)
    out = []
    for B in fills:
        for P in (2, 3):
            t = build_mesh_tables(costs, B, P, groups, opts)
            if t is None or len(t.hosts) != SPLIT_HOSTS:
                continue
            md, v = build_mesh_model(t)
            whole = mesh_model._solve_one(md, v, t, LONG, None)
            assert whole.status in ("OPTIMAL", "INFEASIBLE")
            out.append((t, whole.objective))
    return out


def test_the_seeds_have_candidates_of_three_hosts():
    assert SPLIT_HOSTS == 3
    assert sum(len(t.hosts) == 3 for s in SEEDS for t, _ in candidates(s)) >= 10


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
    return calls


def _open_candidate():
    return next((t, b) for s in SEEDS for t, b in candidates(s) if b is not None and t.pp > 1)


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


def test_a_three_host_candidate_is_solved_pair_by_pair(monkeypatch):
    """Three hosts and more than one stage: one solve per ordered (first, last) pair, the diagonal included."""
    t = next(t for s in SEEDS for t, _ in candidates(s) if t.pp > 1)
    calls, real = [], mesh_model._solve_one
    monkeypatch.setattr(mesh_model, "_solve_one", lambda *a: (calls.append(1), real(*a))[1])
    solve_mesh(t, LONG)
    assert len(calls) == len(t.hosts) ** 2


def test_the_pairs_keep_to_the_wall_clock_limit_together(monkeypatch):
    """The pairs share params' wall-clock limit (the search's deadline): with none left no pair is solved and the
    candidate stays open, its bound no more than any plan's."""
    t, best = _open_candidate()
    calls = _stopping(monkeypatch, set(), 0.0)
    sol = solve_mesh(t, SolverParams(max_deterministic_time=60.0, max_time_in_seconds=0.0))
    assert calls == []
    assert sol.status == "UNKNOWN" and sol.objective is None and sol.bound <= best


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
    again = solve_mesh(t, LONG, upper_bound=upper, pairs=first.open_pairs)
    assert len(calls) == 1 and again.open_pairs == ()
    if upper is None or best < upper:
        assert (again.status, again.objective) == ("OPTIMAL", best)
    else:
        assert again.status == "INFEASIBLE"
