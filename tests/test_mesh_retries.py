"""The mesh search's retries (planner/mesh_search.py, MESH_RETRIES and _got_somewhere): a solve that ends unproven
gets a first retry whatever it did, and further ones only while each gets somewhere (a plan, CP-SAT's bound above the
candidate's own, a pair of end hosts proven), as the stock family's retries. Pairs: a solver that never gets anywhere
gets one retry per candidate; one whose bound keeps rising gets all MESH_RETRIES."""

from __future__ import annotations

import collections
import math

import pytest
from test_mesh_exhaustive import SEEDS, case

from hgplan.planner import mesh_search as search_module
from hgplan.planner.mesh_model import MeshSolution


def _unproven(bound: float) -> MeshSolution:
    return MeshSolution(status="UNKNOWN", objective=None, bound=bound, assign=(), choice=(), layers=(),
                        deterministic_time=0.01, wall_time_s=0.0, open_pairs=None)


@pytest.mark.parametrize("rising, tries", [(False, 2), (True, 1 + search_module.MESH_RETRIES)])
def test_retries_go_on_only_while_they_get_somewhere(monkeypatch, rising, tries):
    """Every solve ends UNKNOWN without a plan (and no seed plan: no incumbent): with CP-SAT's bound at 0 (below
    every candidate's own) each candidate solved gets its first try and one retry; with a bound above the candidate's
    own each time, every retry."""
    fleet, model, train, opts, costs, best_us, best = case(SEEDS[0])
    calls: collections.Counter = collections.Counter()

    def solve_mesh(t, params, *, upper_bound=None, log=None, cuts=None):
        calls[(t.samples_per_step, t.pp)] += 1
        return _unproven(1e12 + calls[(t.samples_per_step, t.pp)] if rising else 0.0)

    monkeypatch.setattr(search_module, "solve_mesh", solve_mesh)
    monkeypatch.setattr(search_module, "seed_plan", lambda t: None)
    res = search_module.mesh_search(costs, list(fleet.groups), opts, incumbent_us=math.inf)
    assert calls and set(calls.values()) == {tries}, calls
    assert res.candidates_solved == len(calls) and not res.found
    if not rising:  # nothing proven: the search's bound stays below the optimum it never found
        assert res.bound_us <= best_us


def test_a_retry_that_finds_a_plan_or_proves_a_pair_got_somewhere():
    """_got_somewhere: a plan, a bound above the candidate's, or fewer open pairs than the try before left."""
    lb = 100.0
    assert not search_module._got_somewhere(_unproven(99.0), lb, None)
    assert not search_module._got_somewhere(_unproven(lb), lb, None)
    assert search_module._got_somewhere(_unproven(101.0), lb, None)
    plan = MeshSolution(status="FEASIBLE", objective=120, bound=50.0, assign=(0,), choice=((0, 0),), layers=(4,),
                        deterministic_time=0.0, wall_time_s=0.0)
    assert search_module._got_somewhere(plan, lb, None)
    fewer = MeshSolution(status="UNKNOWN", objective=None, bound=50.0, assign=(), choice=(), layers=(),
                         deterministic_time=0.0, wall_time_s=0.0, open_pairs=((0, 1),))
    assert search_module._got_somewhere(fewer, lb, ((0, 1), (1, 0)))
    assert not search_module._got_somewhere(fewer, lb, ((0, 1),))
