"""The mesh search's bounds stop at the search's deadline (limits.OutOfTime): a tables' bound with 1F1B's loops over
five sites took 4-5 s on benchmarks/search_scaling.py's 1008-GPU six-type fleet, and one that started before the
60 s limit ended at 63.4 s (2026-11-29). Past the deadline each capacity and work evaluation raises, and the search
keeps the candidate at the bound it had and stops as at the wall clock. Every solve's wall-clock limit (the time left
before the deadline) covers building its model too, in both families."""

from __future__ import annotations

import dataclasses
import math
import time

import pytest
from test_mesh_exhaustive import SEEDS, case
from test_mesh_sites import _benchmark_tables

from hgplan.planner import mesh_search as search_module
from hgplan.planner.limits import OutOfTime
from hgplan.planner.mesh_bound import candidate_bound
from hgplan.planner.mesh_sites import site_set_bound


def test_bounds_raise_past_the_deadline_and_are_unchanged_before_it():
    """On the three-site benchmark fleet's B = 16, P = 16 (its bound with the loops runs over every set of sites):
    a deadline already past raises OutOfTime from the whole candidate's bound and from the bound by sets of sites;
    one far ahead gives the same bound as none, bit for bit."""
    t, fill = _benchmark_tables(1024, 3, 4, B=16, P=16)
    past = time.perf_counter() - 1.0
    with pytest.raises(OutOfTime):
        candidate_bound(t, fill, stages=True, stop_at_s=past)
    with pytest.raises(OutOfTime):
        site_set_bound(t, fill, stages=True, loops=True, stop_at_s=past)
    ahead = time.perf_counter() + 3600.0
    assert site_set_bound(t, fill, stages=True, loops=True, stop_at_s=ahead) == \
        site_set_bound(t, fill, stages=True, loops=True)


class _Clock:
    """A time module whose perf_counter only moves when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_the_search_stops_at_a_bound_cut_by_the_deadline(monkeypatch):
    """A bound that reaches the deadline (the clock moved past it, OutOfTime raised) is the search's last step: it
    stops by the wall clock, the candidate counted skipped at the bound it had, and the search's bound stays below
    the exhaustive optimum."""
    fleet, model, train, opts, costs, best_us, best = case(SEEDS[0])
    clock, calls = _Clock(), []

    def cut_by_the_deadline(t, fill_us, *, stop_at_s=None, **kwargs):
        calls.append((t.samples_per_step, t.pp))
        clock.now = stop_at_s + 1.0
        raise OutOfTime

    first: dict[tuple[int, int], float] = {}
    first_bounds_of = search_module.first_bounds

    def first_bounds(*args, **kwargs):
        heap, fills, floors = first_bounds_of(*args, **kwargs)
        first.update({(B, P): lb for lb, B, P, *_ in heap})
        return heap, fills, floors

    monkeypatch.setattr(search_module, "first_bounds", first_bounds)
    monkeypatch.setattr(search_module, "time", clock)
    monkeypatch.setattr(search_module, "site_set_bound", cut_by_the_deadline)
    res = search_module.mesh_search(costs, list(fleet.groups), dataclasses.replace(opts, wall_deadline_s=100.0),
                                    incumbent_us=math.inf)
    assert len(calls) == 1 and res.stopped_by == "wall" and res.candidates_skipped >= 1
    # the candidate cut keeps its first bound, the least left (the next one's is higher)
    assert res.bound_us <= first[calls[0]] < sorted(first.values())[1]
    assert res.bound_us <= best_us


@pytest.mark.parametrize("fleet, hosts", [((1024, 4, 5), 5), ((64, 2, 3), 3)])
def test_building_the_model_counts_against_the_solves_clock(monkeypatch, fleet, hosts):
    """A solve's wall-clock limit (the time left before the search's deadline when it was asked for) covers building
    its CP-SAT model: on the 1024-GPU eight-group benchmark fleet a solve that began 2.1 s before the deadline ended
    0.6 s past it. With a model that takes 0.3 s to build, the solver gets at most the limit less those 0.3 s, for
    the whole model (the four-site fleet's five hosts) and for the models per pair of end hosts (three hosts)."""
    from hgplan.planner import mesh_model
    from hgplan.planner.model import SolverParams

    t, _ = _benchmark_tables(*fleet, B=16, P=15 if hosts == 5 else 4)
    assert len(t.hosts) == hosts and (hosts in mesh_model.SPLIT_HOSTS) == (hosts == 3)
    given = []
    build = mesh_model.build_mesh_model

    def slow_build(*args, **kwargs):
        time.sleep(0.3)
        return build(*args, **kwargs)

    def solve_one(md, v, t, params, log):
        given.append(params.max_time_in_seconds)
        return mesh_model.MeshSolution(status="UNKNOWN", objective=None, bound=0.0, assign=(), choice=(), layers=(),
                                       deterministic_time=0.0, wall_time_s=0.0)

    monkeypatch.setattr(mesh_model, "build_mesh_model", slow_build)
    monkeypatch.setattr(mesh_model, "_solve_one", solve_one)
    mesh_model.solve_mesh(t, SolverParams(max_time_in_seconds=2.0, max_deterministic_time=1.0, num_workers=1,
                                          random_seed=0))
    assert given and max(given) <= 2.0 - 0.3, given


@pytest.mark.parametrize("which", ["solve", "solve_blocks"])
def test_the_stock_solves_count_building_too(monkeypatch, which):
    """The stock family's solves (planner/model.py's solve, planner/block_model.py's solve_blocks; planner/
    path_model.py's solve_path the same way) give CP-SAT their wall-clock limit less the time their model took to
    build (SolverParams.less_elapsed)."""
    from test_planner import _two_group_tables

    from hgplan.planner import block_model, model
    from hgplan.planner.model import SolverParams

    module, build = (model, "build_model") if which == "solve" else (block_model, "build_block_model")
    real, given = getattr(module, build), []

    def slow_build(*args, **kwargs):
        time.sleep(0.3)
        return real(*args, **kwargs)

    def configure(solver, params, log):
        given.append(params.max_time_in_seconds)
        solver.parameters.max_time_in_seconds = 0.0  # nothing to solve: the test reads the limit only
    monkeypatch.setattr(module, build, slow_build)
    monkeypatch.setattr(module, "configure_solver", configure)
    tables = _two_group_tables()
    if which == "solve_blocks":  # an item whose every group hosts a block
        tables = dataclasses.replace(tables, require_all=True)
    getattr(module, which)(tables, SolverParams(max_time_in_seconds=2.0))
    assert given and max(given) <= 2.0 - 0.3, given
