"""The search's retries of an item whose block model stopped at its limit (planner/search.py `_solve_item`): the retries
solve the block model again, the first and third without the incumbent as upper bound (for an item whose plan is near
the incumbent) and the second with it, keep retrying while a free retry gets somewhere and after every bounded one, and
skip the stage-level model. The solvers are scripted (their answers are
chosen per attempt) around a real item of a small two-site fleet, so each branch of the retry logic is taken on purpose.
An item whose block model is open after its first attempt waits with its stage-level solve until the block model's
retries end (`SearchState.deferred`). Where interleaving's steady paths bind, the model with them follows, against the
incumbent and with more time (`limits.PATH_DOUBLINGS`), started when the item begins to wait and taken when it is
released."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from test_planner import random_multisite_fleet, small_model

from hgplan.domain import TrainingSettings
from hgplan.planner import search
from hgplan.planner.block_model import BlockSolution, solve_blocks
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.model import Solution, SolverParams
from hgplan.planner.options import SearchOptions
from hgplan.planner.tables import build_tables

OPTS = SearchOptions(budget_s=60.0)


def _item():
    """The first candidate with pp > 1 on a multi-site fleet, with all of its node groups as the item, and a plan of
    it (the real block model's)."""
    for seed in range(50):
        fleet = random_multisite_fleet(random.Random(seed))
        if len(fleet.groups) < 2:
            continue
        costs = CostSource(fleet, small_model(16), TrainingSettings(seq_length=2048, global_batch_size=64))
        keys = tuple(g.key for g in fleet.groups)
        for i, cand in enumerate(enumerate_candidates(costs, OPTS, list(fleet.groups))[0]):
            tables = build_tables(costs, cand.cfg, list(fleet.groups)) if cand.cfg.pp > 1 else None
            if tables is None or len(tables.groups) != len(keys):
                continue
            limits = SolverParams(max_deterministic_time=5.0, max_time_in_seconds=30.0)
            real = solve_blocks(replace(tables, require_all=True), limits)
            if real.assign and tables.objective(list(real.assign), list(real.layers)) is not None:
                return costs, cand, (i, keys), fleet, real
    raise AssertionError("no multi-group item with a plan among 50 generated fleets")


@pytest.fixture(scope="module")
def case():
    return _item()


@pytest.fixture()
def scripted(monkeypatch, case):
    """Runs _solve_item attempt by attempt with the block model's answers given per attempt (status, bound; a plan
    when asked for); the stage-level model always stops with nothing. Records each call's upper bound."""
    costs, cand, item, fleet, real = case
    calls: list[tuple[str, int | None]] = []
    limits: list[float] = []  # each block solve's deterministic limit
    answers: list[tuple[str, float, bool]] = []

    def blocks(tables, params, *, hint=None, upper_bound=None, log=None, keep_model=False, paths=False, cuts=None):
        calls.append(("paths" if paths else "block", upper_bound))
        limits.append(params.max_deterministic_time)
        status, bound, with_plan = answers.pop(0)
        plan = (real.assign, real.layers) if with_plan else ((), ())
        return BlockSolution(status=status, bound=bound, relaxed=None, assign=plan[0], layers=plan[1],
                             deterministic_time=0.1)

    def stage(tables, params, *, hint=None, upper_bound=None, log=None, keep_model=False):
        calls.append(("stage", upper_bound))
        return Solution(status="UNKNOWN", objective=None, bound=0.0, assign=(), layers=(), deterministic_time=0.1,
                        wall_time_s=0.0)

    monkeypatch.setattr(search, "solve_blocks", blocks)
    monkeypatch.setattr(search, "solve", stage)
    st = search.SearchState(found={}, open_items=[1])
    by_key = {g.key: g for g in fleet.groups}
    order = [g.key for g in fleet.groups]

    def attempt(n: int, lb: float, *script: tuple[str, float, bool], opts: SearchOptions = OPTS):
        answers[:] = list(script)
        calls.clear()
        out = search._solve_item(costs, cand, item, search.Stage.SOLVE + n, lb, st, opts, 1e9, order, by_key)
        for _, _, job in st.paths_started.values():  # a path solve started beside the search (SearchState.start_paths)
            job.result()
        assert not answers, "every scripted answer was asked for"
        return out, list(calls)

    attempt.block_limits = limits
    return st, item, attempt


def test_an_open_block_model_is_retried_without_the_incumbent_and_stops_when_it_gets_nowhere(scripted):
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("FEASIBLE", 150.0, True))
    v = st.tables_of[item].vpp
    assert [c[0] for c in calls] == ["block"]  # the stage-level solve waits for the block model's retry
    assert calls[0][1] is not None  # the first block solve is bounded by the incumbent (the warm start or its plan)
    assert item in st.block_open and item in st.deferred and out == pytest.approx(max(100.0, 150.0 / v))
    # the retry: the block model alone, with no upper bound (the item's plan is the incumbent); it raised the bound,
    # so the item comes back
    out, calls = attempt(1, out, ("FEASIBLE", 300.0 * v, False))
    assert calls == [("block", None)] and out == pytest.approx(300.0)
    # the next one, bounded by the incumbent again, changes nothing: such a proof comes at once or not at all, so it
    # earns the next retry all the same, still without the stage-level solve
    out, calls = attempt(2, out, ("FEASIBLE", 300.0 * v, False))
    assert [c[0] for c in calls] == ["block"] and calls[0][1] is not None and out == pytest.approx(300.0)
    assert item in st.deferred
    # the last, without the incumbent, changes nothing either: the block model's retries end, the deferred
    # stage-level solve runs, gets nowhere, and the item closes at its bound
    closed = len(st.closed_bounds)
    out, calls = attempt(3, out, ("FEASIBLE", 300.0 * v, False))
    assert out is None and [c[0] for c in calls] == ["block", "stage"] and calls[0][1] is None
    assert item not in st.deferred and st.closed_bounds[closed:] == [pytest.approx(300.0)]


def test_a_free_retry_that_gets_nowhere_ends_the_block_models_retries(scripted):
    """Without the incumbent, a retry earns the next only if it got somewhere (a better plan, a higher bound); one that
    did not hands the item to its deferred stage-level solve. The block model's retries go on after that while
    attempts are left (one bounded by the incumbent earns the next regardless), and the next free one that gets
    nowhere closes the item."""
    st, item, attempt = scripted
    out, _ = attempt(0, 100.0, ("FEASIBLE", 150.0, True))
    out, calls = attempt(1, out, ("FEASIBLE", 0.0, False))
    assert [c[0] for c in calls] == ["block", "stage"] and calls[0][1] is None and item not in st.deferred
    out, calls = attempt(2, out, ("FEASIBLE", 0.0, False))
    assert out is not None and [c[0] for c in calls] == ["block"] and calls[0][1] is not None
    out, calls = attempt(3, out, ("FEASIBLE", 0.0, False))
    assert out is None and calls == [("block", None)]


def test_an_item_whose_plan_is_far_above_the_incumbent_keeps_it_in_every_retry(scripted):
    """The free retries are for items whose own plan is within FREE_NEAR of the incumbent (CP-SAT may prove that plan
    optimal sooner than that nothing beats the incumbent); an item whose plan is further above gets the incumbent as
    its upper bound in every retry: proving its own optimum would close more than the proof against the incumbent."""
    st, item, attempt = scripted
    out, _ = attempt(0, 100.0, ("FEASIBLE", 150.0, True))
    own = st.found[item]
    better = int(own.solution.objective / (1 + 2 * search.FREE_NEAR))
    st.found[("seed", 0)] = search.Found(cfg=own.cfg, tables=own.tables,
                                         solution=replace(own.solution, objective=better))
    v = st.tables_of[item].vpp
    for n in range(1, search.MAX_RETRIES):
        out, calls = attempt(n, out, ("UNKNOWN", 0.0, False))
        assert calls == [("block", st.upper_bound(v))] and out is not None
    closed = len(st.closed_bounds)
    out, calls = attempt(search.MAX_RETRIES, out, ("INFEASIBLE", float("inf"), False))
    assert out is None and calls == [("block", st.upper_bound(v))]
    assert st.closed_bounds[closed:] == [pytest.approx(st.upper_bound(v) / v)]


def test_a_retry_that_proves_the_items_plan_optimal_settles_it(scripted):
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("FEASIBLE", 100.0, True))
    assert [c[0] for c in calls] == ["block"]
    own = st.found[item].solution.objective
    closed = len(st.closed_bounds)
    out, calls = attempt(1, out, ("OPTIMAL", float(own), False))
    assert out is None and calls == [("block", None)] and item not in st.block_open  # no stage-level solve at all
    assert st.closed_bounds[closed:] == [pytest.approx(own / st.tables_of[item].vpp)]


def test_the_last_retry_closes_the_item_even_when_it_got_somewhere(scripted):
    st, item, attempt = scripted
    out, _ = attempt(0, 100.0, ("FEASIBLE", 100.0, True))
    v = st.tables_of[item].vpp
    for n in range(1, search.MAX_RETRIES):
        out, calls = attempt(n, out, ("FEASIBLE", (200.0 + n) * v, False))
        assert [c[0] for c in calls] == ["block"] and (calls[0][1] is None) == (n % 2 == 1)
        assert out == pytest.approx(200.0 + n)
    out, calls = attempt(search.MAX_RETRIES, out, ("FEASIBLE", 400.0 * v, False))
    assert out is None and st.closed_bounds[-1] == pytest.approx(400.0)
    assert [c[0] for c in calls] == ["block", "stage"]  # the deferred stage-level solve, at the last attempt


def test_a_block_model_closed_at_a_retry_but_not_within_solve_gap_gets_the_deferred_stage_level_solve(scripted):
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("FEASIBLE", 100.0, True))
    assert [c[0] for c in calls] == ["block"] and item in st.deferred
    own = st.found[item].solution.objective
    out, calls = attempt(1, out, ("OPTIMAL", 0.5 * own, False))
    assert [c[0] for c in calls] == ["block", "stage"] and item not in st.deferred and item not in st.block_open


def test_a_closed_block_model_is_not_solved_again(scripted):
    """OPTIMAL but not within solve_gap of the item's plan (the expansion to stages lost something): the stage-level
    model follows; with nothing gained there and no block model left open the item closes, and a retry (one the
    stage-level model earned) goes to the stage-level model only."""
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("OPTIMAL", 100.0, True))
    assert [c[0] for c in calls] == ["block", "stage"] and item not in st.block_open and out is None
    out, calls = attempt(1, 100.0)
    assert [c[0] for c in calls] == ["stage"]


def test_after_a_stage_level_solve_that_got_nowhere_a_like_item_with_a_closed_block_model_skips_its_own(scripted):
    """A stage-level solve that found no plan and no bound above its item's is recorded (interleaving, node groups,
    stages); an item of the same interleaving and at least as many groups and stages whose block model is then closed
    (optimal) closes at the block model's bound without a stage-level solve. One whose block model is still open
    comes back for the block model's retry, its stage-level solve deferred, and when its retries end it goes on with
    the block model's retries instead of that solve."""
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("OPTIMAL", 100.0, True))
    tables = st.tables_of[item]
    v, own = tables.vpp, st.found[item].solution.objective
    assert [c[0] for c in calls] == ["block", "stage"] and out is None
    assert st.futile == {(v, len(item[1]), tables.pp)}
    closed = len(st.closed_bounds)
    out, calls = attempt(0, 100.0, ("OPTIMAL", 0.9 * own, False))
    assert out is None and [c[0] for c in calls] == ["block"]
    assert st.closed_bounds[closed:] == [pytest.approx(max(100.0, 0.9 * own / v))]
    out, calls = attempt(0, 100.0, ("FEASIBLE", 0.9 * own, False))
    assert [c[0] for c in calls] == ["block"] and item in st.block_open and item in st.deferred
    assert out == pytest.approx(max(100.0, 0.9 * own / v))
    # its retries end (a free one that got nowhere): the deferred stage-level solve would follow, but a like one got
    # nowhere, so the block model's next retry comes instead
    out, calls = attempt(1, out, ("FEASIBLE", 0.0, False))
    assert [c[0] for c in calls] == ["block"] and item not in st.deferred and out is not None


def test_no_stage_level_solve_when_less_time_is_left_than_the_block_model_took(scripted):
    """The stage-level model is the larger: with the deadline closer than the block step took, its build alone would
    overrun the time limit (64 node groups: seconds, benchmarks/model_build.py), so the item goes back with the block
    model's bound instead."""
    st, item, attempt = scripted
    late = replace(OPTS, wall_deadline_s=time.perf_counter() - 1.0)
    # a block model closed but not within solve_gap of the item's plan: the stage-level solve would follow
    out, calls = attempt(0, 100.0, ("OPTIMAL", 150.0, True), opts=late)
    v = st.tables_of[item].vpp
    assert [c[0] for c in calls] == ["block"] and out == pytest.approx(max(100.0, 150.0 / v))
    out, calls = attempt(1, out, opts=OPTS)  # with time left: the stage-level solve, the block model being closed
    assert [c[0] for c in calls] == ["stage"]


def test_a_deferred_stage_level_solve_waits_for_time_left_too(scripted):
    st, item, attempt = scripted
    out, calls = attempt(0, 100.0, ("FEASIBLE", 150.0, True))
    assert [c[0] for c in calls] == ["block"] and item in st.deferred
    late = replace(OPTS, wall_deadline_s=time.perf_counter() - 1.0)
    out, calls = attempt(1, out, ("FEASIBLE", 150.0, False), opts=late)  # no progress: the solve is due, no time
    assert [c[0] for c in calls] == ["block"] and out is not None


def test_the_first_block_solve_gets_a_share_of_the_time_and_its_retries_the_full_doubled_time(scripted):
    st, item, attempt = scripted
    out, _ = attempt(0, 100.0, ("FEASIBLE", 150.0, True))
    out, _ = attempt(1, out, ("FEASIBLE", 300.0, False))
    first, retry = attempt.block_limits[-2:]
    assert first == pytest.approx(OPTS.per_solve_s * search.FIRST_BLOCK_SHARE) and 0 < search.FIRST_BLOCK_SHARE < 1
    assert retry == pytest.approx(2 * OPTS.per_solve_s)


def _release(st, item, cand, lb: float, n: int) -> None:
    """The rest of the search above the gap: the waiting item is released (SearchState.release) and its path solve
    taken (search._take_paths), as run_search does before the item's turn at attempt n."""
    st.paths_now = True
    search._take_paths(st, [(lb, cand.key, search.Stage.SOLVE + n, *item)], {item[0]: cand}, OPTS)


def test_where_the_steady_paths_bind_the_item_waits_then_gets_the_model_with_them(scripted, case, monkeypatch):
    """An optimal block solve whose plan is above its value (block_model.paths_bind, scripted here): the item waits,
    its bound raised, without a stage-level solve, until the rest of the search is above the gap (paths_now), while
    the model with the paths starts at once beside the search (the optimum without them kept, not solved again),
    against the incumbent even in an attempt that has none, with 2^PATH_DOUBLINGS times the time of the attempt the
    item comes back at. Released, the item takes its result without another solve. Infeasible: nothing in the item
    beats the incumbent."""
    st, item, attempt = scripted
    monkeypatch.setattr(search, "paths_bind", lambda tables, sol: sol.status == "OPTIMAL")
    out, _ = attempt(0, 100.0, ("FEASIBLE", 100.0, True))  # the item gets a plan, the incumbent
    v = st.tables_of[item].vpp
    incumbent = st.upper_bound(v)
    out, calls = attempt(1, out, ("OPTIMAL", 120.0, False), ("INFEASIBLE", float("inf"), False))
    assert calls == [("block", None), ("paths", incumbent)] and item in st.paths_waiting
    assert out == pytest.approx(max(100.0, 120.0 / v)) and item in st.paths_started
    assert attempt.block_limits[-1] == pytest.approx(OPTS.per_solve_s * 2 ** (2 + search.PATH_DOUBLINGS))
    paths_before = st.statuses.get("BLOCK_PATHS_INFEASIBLE", 0)
    _release(st, item, case[1], out, 2)
    assert st.statuses.get("BLOCK_PATHS_INFEASIBLE", 0) == paths_before + 1  # counted when taken
    closed = len(st.closed_bounds)
    out, calls = attempt(2, out)
    assert calls == [] and out is None and item not in st.block_open
    assert item not in st.paths_waiting and st.closed_bounds[closed:] == [pytest.approx(incumbent / v)]


def test_a_path_solve_left_open_keeps_the_higher_bound(scripted, case, monkeypatch):
    """The model with the paths stopped at its limit below the bound without them: the item keeps the higher of the
    two; a retry that got nowhere closes it there (the retries' rule)."""
    st, item, attempt = scripted
    monkeypatch.setattr(search, "paths_bind", lambda tables, sol: sol.status == "OPTIMAL")
    out, calls = attempt(0, 100.0, ("OPTIMAL", 150.0, True), ("FEASIBLE", 140.0, False))
    v = st.tables_of[item].vpp
    assert [c[0] for c in calls] == ["block", "paths"] and item in st.paths_waiting and item not in st.deferred
    assert out == pytest.approx(max(100.0, 150.0 / v))
    _release(st, item, case[1], out, 1)
    out, calls = attempt(1, out)
    assert calls == [] and out is None
    assert st.closed_bounds[-1] == pytest.approx(max(100.0, 150.0 / v))
