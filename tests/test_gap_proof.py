"""The proof of the gap on the reported (simulated) iteration time (search --prove-gap, planner/certify.py).

Each bound must be at or below the simulator on every plan, or the "proven" gap is a lie: checked on random
pipelines (heterogeneous, WAN-like latencies, interleaved, with tails), and through the integer lower-bound tables
on every plan of small random fleets, by the whole reported model (evaluate)."""

from __future__ import annotations

import itertools
import math
import random
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from exhaustive import block_placements, compositions
from hgplan.costmodel.evaluate import evaluate
from hgplan.costmodel.pipeline import critical_paths, lower_bound_s, simulate
from hgplan.documents import ClusterInput
from hgplan.domain import TrainingSettings
from hgplan.io import catalog, resolve_cluster, resolve_model
from hgplan.planner import api
from hgplan.planner.certify import Certificate, _solve_with_cuts
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import US, CostSource
from hgplan.planner.model import Solution, SolverParams
from hgplan.planner.options import SearchOptions
from hgplan.planner.path_model import build_path_tables, solve_path
from hgplan.planner.found import Found
from hgplan.planner.tables import build_tables
from hgplan.validate import check_plan
from test_planner import exhaustive_case


def _random_pipeline(rng: random.Random):
    while True:
        p, v, m = rng.randint(1, 8), rng.choice([1, 1, 2, 3]), rng.randint(1, 32)
        if v == 1 or (p > 1 and m % p == 0):
            break
    fwd = [rng.uniform(0.1, 2) for _ in range(p)]
    bwd = [f * rng.uniform(1.5, 3) for f in fwd]
    xf = [rng.choice([0.0, rng.uniform(0, 0.1), rng.uniform(0, 3)]) for _ in range(p)]
    xb = [x * rng.choice([1.0, rng.uniform(0.5, 2)]) for x in xf]
    lat = [rng.choice([0.0, rng.uniform(0, 0.5)]) for _ in range(p)]
    tails = [rng.choice([0.0, rng.uniform(0, 3)]) for _ in range(p)]
    return fwd, bwd, xf, xb, lat, m, v, tails


def test_lower_bound_never_exceeds_the_simulator():
    """On 3,000 random pipelines the path bound (with each stage's tail) is at or below the simulated time."""
    rng = random.Random(5)
    below = 0
    for _ in range(3000):
        fwd, bwd, xf, xb, lat, m, v, tails = _random_pipeline(rng)
        res, _ = simulate(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v)
        simulated = max(res.iteration_s, max(f + t for f, t in zip(res.finish_s, tails)))
        bound = lower_bound_s(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v, tails_s=tails)
        assert bound <= simulated * (1 + 1e-12)
        below += bound < simulated * (1 - 1e-9)
    assert below > 0  # the bound is not the simulator itself


@pytest.mark.parametrize("p,m,v", [(1, 8, 1), (4, 16, 1), (8, 64, 1), (4, 16, 2), (8, 32, 4)])
def test_lower_bound_is_exact_on_uniform_stages(p, m, v):
    """Without communication, on equal stages, the bound is Megatron's (m + (p - 1) / v) (F + B): no slack."""
    z = [0.0] * p
    bound = lower_bound_s([1.0] * p, [2.0] * p, z, z, z, microbatches=m, vpp=v)
    res, _ = simulate([1.0] * p, [2.0] * p, z, z, z, microbatches=m, vpp=v)
    assert bound == pytest.approx((m + (p - 1) / v) * 3.0) == pytest.approx(res.iteration_s)


def _plans_of(tables, rng: random.Random, most: int):
    """Up to `most` placements x layer splits of one candidate that its tables accept."""
    p, v, L = tables.pp, tables.vpp, tables.num_layers
    if L % v:
        return []
    pairs = [(a, list(s)) for a in block_placements(tables) for s in compositions(L // v, p) * v]
    rng.shuffle(pairs)
    return [(a, s) for a, s in pairs if tables.objective(a, s) is not None][:most]


def _sampled_candidates(seed: int, count: int):
    """Up to `count` candidates of the seed's small random fleet with their cost and lower-bound tables."""
    fleet, model, train, opts, _, _ = exhaustive_case(seed)
    costs = CostSource(fleet, model, train)
    cands, _ = enumerate_candidates(costs, opts, list(fleet.groups))
    hosts = {g.key: g for g in fleet.groups}
    for cand in random.Random(seed).sample(cands, min(count, len(cands))):
        tables = build_tables(costs, cand.cfg, list(fleet.groups))
        if tables is not None:
            yield cand, tables, build_path_tables(costs, tables, hosts)


@pytest.mark.parametrize("seed", range(6))
def test_lower_bound_tables_stay_below_every_plans_reported_time(seed):
    """Through the integer tables (rounded down, tail lines below the tail): on small random fleets, for every plan
    tried, the lower-bound model's value is at or below the reported iteration time, and CP-SAT's optimum of it is
    the least value of all the candidate's plans (>= 500 plans over the six fleets)."""
    checked, rng = 0, random.Random(seed)
    fleet, model, train = exhaustive_case(seed)[:3]
    for cand, tables, pt in _sampled_candidates(seed, 6):
        values = []
        for assign, layers in _plans_of(tables, rng, 40):
            value = pt.objective(assign, layers)
            plan = Found(cfg=cand.cfg, tables=tables, solution=Solution(
                status="X", objective=0, bound=0.0, assign=tuple(assign), layers=tuple(layers),
                deterministic_time=0.0, wall_time_s=0.0)).plan()
            assert check_plan(plan, fleet, model, train) == []
            reported = evaluate(plan, fleet, model, train).iteration_time_s
            assert value / cand.cfg.vpp <= reported * US + 1e-6
            values.append(value)
            checked += 1
        if values and len(values) == len(_plans_of(tables, random.Random(0), 10 ** 6)):
            sol = solve_path(pt, SolverParams(max_deterministic_time=30))
            assert sol.status == "OPTIMAL" and sol.objective == min(values)
            assert pt.objective(list(sol.assign), list(sol.layers)) == sol.objective
    assert checked >= 80


@pytest.mark.parametrize("seed", range(6))
def test_cheap_bound_stays_below_every_plans_reported_time(seed):
    """The proof's cheap bound (cycle and fill balanced, planner/certify.py) is at or below the reported time of
    every plan tried of each sampled candidate of small random fleets, is never below the two separate bounds it
    refines (m x least cycle, K x least fill), and is above them on some candidate (the balance is exercised)."""
    from hgplan.planner.bounds import integer_cycle_bound
    from hgplan.planner.certify import _slots, cheap_bound_us, least_fill_s
    fleet, model, train = exhaustive_case(seed)[:3]
    costs, rng, L = CostSource(fleet, model, train), random.Random(seed), model.num_layers
    checked = tighter = 0
    for cand, tables, _ in _sampled_candidates(seed, 8):
        cfg = cand.cfg
        p, v, m = cfg.pp, cfg.vpp, cfg.num_microbatches(train.global_batch_size)
        cheap = cheap_bound_us(costs, cand, L)
        slots = _slots(costs, cfg, cand.ctx, L)
        k = (1 / v) / (1 - (1 - 1 / (v * m)) ** p) if v * m > 1 else 1.0
        separate = US * max(m * integer_cycle_bound([(t, n, 0.0) for t, n, _ in slots], L, v),
                            k * least_fill_s(slots, L=L, p=p, v=v))
        assert cheap >= separate * (1 - 1e-12)
        tighter += cheap > separate * (1 + 1e-6)
        for assign, layers in _plans_of(tables, rng, 15):
            plan = Found(cfg=cfg, tables=tables, solution=Solution(
                status="X", objective=0, bound=0.0, assign=tuple(assign), layers=tuple(layers),
                deterministic_time=0.0, wall_time_s=0.0)).plan()
            assert cheap <= evaluate(plan, fleet, model, train).iteration_time_s * US * (1 + 1e-12)
            checked += 1
    assert checked >= 20
    if seed == 0:
        assert tighter > 0


@pytest.mark.parametrize("seed", range(6))
def test_cycle_bound_is_at_or_below_the_cheap_bound(seed):
    """The proof orders the configurations lazily (planner/certify.py): the cycle bound it starts every one with must
    be at or below its cheap bound, on every configuration of small random fleets (over every group, memory aside)."""
    from hgplan.planner.certify import cheap_bound_us, cycle_bound_us
    fleet, model, train, opts, _, _ = exhaustive_case(seed)
    costs = CostSource(fleet, model, train)
    cands, _ = enumerate_candidates(costs, opts, list(fleet.groups))
    pairs = [(cycle_bound_us(costs, c, model.num_layers), cheap_bound_us(costs, c, model.num_layers)) for c in cands]
    assert pairs and all(cycle <= cheap for cycle, cheap in pairs)
    assert any(0 < cycle < cheap for cycle, cheap in pairs)


def test_proof_takes_configurations_in_cheap_bound_order_and_bounds_only_those_that_can_matter(monkeypatch):
    """The lazy order is the order of the cheap bounds (ties by key), and a configuration whose cycle bound is already
    at or above the target and the bound so far never gets its cheap bound computed."""
    from hgplan.planner import certify as proof
    rng = random.Random(7)
    keys = [f"k{n:03d}" for n in range(200)]
    cheap = {k: rng.uniform(2e6, 14e6) for k in keys}  # us; T = 10 s
    cycle = {k: cheap[k] * rng.choice([1.0, rng.uniform(0.3, 1.0)]) for k in keys}
    computed, solved = [], []
    monkeypatch.setattr(proof, "cycle_bound_us", lambda costs, cand, L: cycle[cand.key])
    monkeypatch.setattr(proof, "cheap_bound_us", lambda costs, cand, L: computed.append(cand.key) or cheap[cand.key])
    monkeypatch.setattr(proof, "_certify_one", lambda costs, cand, bound_us, *a, **k: solved.append(cand.key)
                        or (10e6, True))
    costs = SimpleNamespace(model=SimpleNamespace(num_layers=8), fleet=SimpleNamespace(groups=()))
    cert = proof.certify(costs, [SimpleNamespace(key=k) for k in keys], 10.0, SearchOptions(), hints={},
                         dtime_budget=100.0, stop_at_s=time.perf_counter() + 60)
    target = 10e6 * (1 - SearchOptions().max_gap)
    assert solved == sorted((k for k in keys if cheap[k] < target), key=lambda k: (cheap[k], k))
    assert set(solved) <= set(computed) <= {k for k in keys if cycle[k] < 10e6} and len(computed) < len(keys)
    assert cert.pruned == len(keys) - len(solved)
    assert cert.bound_us == min(10e6, min(cheap[k] for k in keys if k not in solved))  # as in cheap-bound order


def test_cheap_bound_balances_cycle_and_fill():
    """least_fill_s with a cycle: each slot holds what fits in it, so the fill rises as the cycle falls; at a cycle
    the slots cannot hold the layers in p stages, no plan exists (inf)."""
    from hgplan.planner.certify import least_fill_s
    slots = [(1.0, 1, 10), (2.0, 1, 10)]  # (seconds per layer, stages, most layers per stage)
    assert least_fill_s(slots, L=10, p=2, v=1) == pytest.approx(1.0 + 2.0 + 8 * 1.0)  # memory only: 9 + 1 layers
    assert least_fill_s(slots, L=10, p=2, v=1, cycle_s=8.0) == pytest.approx(8 * 1.0 + 2 * 2.0)  # a real plan
    assert least_fill_s(slots, L=10, p=2, v=1, cycle_s=6.0) == float("inf")  # 6 + 3 layers at most


def test_search_prove_gap_reports_a_proven_gap_on_the_reported_time(cli):
    """--prove-gap: gap_proven, a bound at or below every ranked plan's reported time, and the counts add up;
    without it the gap on the reported time stays an estimate."""
    args = ("search", "-c", "two-site", "-m", "llama3.1-8b", "--seq-len", "2048", "--global-batch", "64",
            "--max-pp", "4", "--json", "--no-baselines")
    proved = cli(*args, "--prove-gap").json()
    plain = cli(*args).json()
    s, proof = proved["search"], proved["search"]["proof"]
    assert s["gap_proven"] is True and "proof" not in plain["search"] and plain["search"]["gap_proven"] is False
    assert all(proof["bound_s"] <= e["prediction"]["iteration_time_s"] for e in proved["plans"])
    assert s["gap_on_reported"] == pytest.approx((s["iteration_time_s"] - proof["bound_s"]) / s["iteration_time_s"],
                                                 abs=1e-4)
    assert proof["solved"] + proof["pruned_by_bound"] + proof["skipped_by_budget"] == s["candidates"]["total"]
    assert s["iteration_time_s"] <= plain["search"]["iteration_time_s"]


def test_least_fill_uses_roomier_slower_slots():
    """A fast group whose stages hold too few layers does not make the configuration impossible: a slower, roomier
    one can take them (the cheap bound must stay finite and below the real fill)."""
    from hgplan.planner.certify import least_fill_s
    slots = [(1.0, 1, 2), (2.0, 1, 10)]  # (seconds per layer, stages, most layers per stage)
    assert least_fill_s(slots, L=10, p=1, v=1) == pytest.approx(1.0 + 1.0 + 8 * 2.0)  # a real plan: 10 x 2.0
    assert least_fill_s(slots, L=11, p=1, v=1) == float("inf")
    assert least_fill_s(slots, L=12, p=2, v=1) == pytest.approx(1.0 + 2.0 + 1.0 + 9 * 2.0)


def test_interleaved_terms_cover_every_stage():
    """Each stage contributes its head + busy + chain bound, whatever the schedule (a missing stage would let a
    slow middle stage escape the bound)."""
    from hgplan.costmodel.pipeline import path_terms
    for p, v in itertools.product((2, 3, 5), (1, 2)):
        terms = path_terms([1.0] * p, [2.0] * p, [0.0] * p, [0.0] * p, [0.0] * p, microbatches=2 * p, vpp=v)
        assert {s for s, whole, _ in terms if whole} == set(range(p))


def test_critical_chains_are_tight_here_and_bound_every_other_timing():
    """The simulator's critical chain to each stage's last op weighs exactly that op's end, and, the schedule being
    fixed by (p, m, v), bounds the same op's end for any other stage times (3 x 2,000 random pipelines)."""
    rng = random.Random(11)
    for _ in range(2000):
        fwd, bwd, xf, xb, lat, m, v, _ = _random_pipeline(rng)
        res, _ = simulate(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v)
        chains = critical_paths(fwd, bwd, xf, xb, lat, microbatches=m, vpp=v)
        assert [c.stage for c in chains] == list(range(len(fwd)))
        for c in chains:
            assert c.weight(fwd, bwd, xf, xb, lat, vpp=v) / v == pytest.approx(res.finish_s[c.stage], rel=1e-12)
        for _ in range(3):
            other = _random_pipeline(random.Random(rng.random()))
            while len(other[0]) != len(fwd):
                other = _random_pipeline(random.Random(rng.random()))
            f2, b2, x2, y2, l2 = other[:5]
            res2, _ = simulate(f2, b2, x2, y2, l2, microbatches=m, vpp=v)
            for c in chains:
                assert c.weight(f2, b2, x2, y2, l2, vpp=v) / v <= res2.finish_s[c.stage] * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_chains_lift_the_model_to_the_simulated_optimum(seed):
    """On small random fleets, the lower-bound model with the critical chains of its optima added (certify's loop)
    never rises above the least simulated time of the candidate's plans (on the same rounded-down tables), and
    where it converges it reaches it (within CP-SAT's relative gap limit)."""
    exact = 0
    for _, tables, pt in _sampled_candidates(seed, 8):
        plans = _plans_of(tables, random.Random(0), 10 ** 6)
        if not plans or len(plans) > 3000:
            continue
        least = min(pt.simulated(a, s)[0] for a, s in plans)
        cert = Certificate(bound_us=math.inf)
        sol = _solve_with_cuts(pt, cert, SearchOptions(), upper=None, hint=None, left=60.0, stop_at_s=math.inf)
        assert sol.status == "OPTIMAL" and sol.bound <= least  # OPTIMAL within the solver's relative gap limit
        chains = tuple(cert.cuts[(tables.pp, tables.microbatches, tables.vpp)])
        assert all(pt.objective(a, s, chains) <= pt.simulated(a, s)[0] for a, s in plans)
        if pt.simulated(list(sol.assign), list(sol.layers))[0] <= sol.objective:  # converged: the bound is the least
            assert least <= sol.objective <= sol.bound * (1 + SearchOptions().solve_gap) + 1
            exact += 1
    assert exact >= 1


def test_the_proof_ends_within_the_calls_time_limit(monkeypatch):
    """plan_training's budget covers the search and the proof: the proof is told to stop by the call's start plus
    budget_s, not by its own start plus budget_s (a 1024-GPU proof ran 60 s after a 13 s search)."""
    seen = []
    real = api.certify

    def spy(*args, stop_at_s, **kwargs):
        seen.append(stop_at_s)
        return real(*args, stop_at_s=stop_at_s, **kwargs)

    monkeypatch.setattr(api, "certify", spy)
    fleet, _, _ = resolve_cluster("mixed-vendor", catalog())
    model, _ = resolve_model("llama3.1-8b")
    train = TrainingSettings(seq_length=2048, global_batch_size=64)
    started = time.perf_counter()
    api.plan_training(fleet, model, train, SearchOptions(budget_s=30, prove_gap=True, max_pp=4),
                      cluster=ClusterInput(ref="mixed-vendor", sha256=""), model_ref="llama3.1-8b",
                      with_baselines=False)
    assert len(seen) == 1 and seen[0] - started <= 30 + 0.05  # the old deadline was the search's length later


def test_polishing_stops_at_a_plan_it_cannot_improve_within_its_limit(monkeypatch):
    """polish() re-solves the search's plans one by one until one's model stops at its limit, or spends its patience
    (a solve's deterministic time), without a plan that simulates faster than the search's: the next plans, of the
    same fleet and similar shapes, fare the same (on a 1000-GPU five-type fleet eight such solves took 15 s and
    improved none). After an optimal solve within its patience it goes on."""
    from hgplan.planner import certify
    from hgplan.planner.search import run_search

    fleet, _, _ = resolve_cluster("mixed-vendor", catalog())
    model, _ = resolve_model("llama3.1-8b")
    train = TrainingSettings(seq_length=2048, global_batch_size=64)
    found = run_search(fleet, model, train, SearchOptions(top_k=4, max_pp=4)).found
    assert len(found) >= 2
    calls: list[str] = []

    def returning(status: str, dtime: float):
        def solve_stub(pt, cert, opts, *, upper, hint, left, stop_at_s, patience_dtime, beat):  # the plan back
            assert patience_dtime == opts.per_solve_s and beat == pt.simulated(*hint)[0]
            calls.append(status)
            cert.deterministic_time += dtime
            return Solution(status=status, objective=1, bound=0.0, assign=tuple(hint[0]), layers=tuple(hint[1]),
                            deterministic_time=dtime, wall_time_s=0.0)
        return solve_stub

    for status, dtime, solves in (("OPTIMAL", 0.0, len(found)), ("FEASIBLE", 0.0, 1), ("OPTIMAL", 1.0, 1)):
        calls.clear()
        monkeypatch.setattr(certify, "_solve_with_cuts", returning(status, dtime))
        out = certify.polish(CostSource(fleet, model, train), found, SearchOptions(), dtime_budget=10.0,
                             stop_at_s=math.inf)
        assert len(calls) == solves and len(out) == solves


@dataclass(frozen=True)
class _Chain:
    """A stand-in critical chain: it always cuts the round's plan off."""
    n: int
    stage: int = 0

    def weight(self, *times, vpp):
        return 10 ** 9


def test_polishing_rounds_stop_at_the_first_plan_no_faster_than_the_best(monkeypatch):
    """Polishing wants a plan, not a bound: once its cut rounds have spent patience_dtime they stop at the first whose
    plan simulates no faster than the best before it and the plan polishing started from (cheap rounds, and the
    proof's rounds, go on, each raising the bound). Rounds' plans simulate at 10, 8, 9, 7 (the last at its model's
    bound: converged)."""
    from hgplan.planner import certify

    simulated = [10, 8, 9, 7]

    class Pt:
        base = SimpleNamespace(pp=1, microbatches=4, vpp=1)

        def simulated(self, assign, layers):
            return simulated[layers[0]], [_Chain(layers[0])]

        def tails(self, assign, layers):
            return [0]

        def stage_times(self, assign, layers):
            return [0], [0]

        def edge_times(self, assign):
            return [], []

    def round_stub(pt, params, *, upper_bound, hint, cuts):
        n = len(cuts)  # one chain added per round: the round's index; the last round's bound reaches its plan
        return Solution(status="OPTIMAL", objective=simulated[n] if n == len(simulated) - 1 else 1, bound=1.0,
                        assign=(0,), layers=(n,), deterministic_time=0.5, wall_time_s=0.0)

    monkeypatch.setattr(certify, "solve_path", round_stub)
    # 0.5 deterministic s a round; `beat` (the simulated time of the plan polishing starts from): once the patience is
    # spent, a round's plan must also beat it for the rounds to go on
    for patience, beat, rounds, best in ((1.0, math.inf, 3, 8), (2.0, math.inf, 4, 7), (math.inf, math.inf, 4, 7),
                                         (1.0, 7.5, 2, 8), (0.5, 9.5, 1, 10), (1.0, 8.5, 3, 8)):
        cert = Certificate(bound_us=math.inf)
        sol = _solve_with_cuts(Pt(), cert, SearchOptions(), upper=None, hint=None, left=60.0, stop_at_s=math.inf,
                               patience_dtime=patience, beat=beat)
        assert cert.solved + cert.rounds == rounds and simulated[sol.layers[0]] == best, (patience, beat)


def test_lower_bound_models_run_without_mir_and_cg_cuts_unless_the_user_says(monkeypatch):
    """The lower-bound models get PATH_MODEL_PARAMS, and --solver-params after them (so the user's word wins)."""
    from hgplan.planner import path_model

    seen = []
    monkeypatch.setattr(path_model, "run_model", lambda md, xv, t, classes, params, hint: seen.append(params.extra))
    _, _, pt = next(iter(_sampled_candidates(0, 1)))
    solve_path(pt, SolverParams())
    solve_path(pt, SolverParams(extra="add_mir_cuts: true"))
    assert seen == [path_model.PATH_MODEL_PARAMS, path_model.PATH_MODEL_PARAMS + " add_mir_cuts: true"]


def test_proof_retries_solves_that_stopped_at_their_limit(monkeypatch):
    """A configuration whose solve stops at its limit below the target is solved again with more time once every
    configuration has had its solve: one that settles on its retry no longer holds the bound down, one that never
    settles keeps the best bound any of its solves proved, and each retry is counted."""
    from hgplan.planner import certify as proof
    cheap = {"a": 5e6, "b": 6e6, "c": 11e6}  # us; T = 10 s, so c is pruned by its cheap bound
    answers = {("a", 0): (7e6, False), ("a", 1): (10e6, True), ("b", 0): (8e6, False)}
    attempts: list[tuple[str, int]] = []

    def fake_solve(costs, cand, bound_us, best_us, opts, hints, hosts, cert, left, stop_at_s, *, attempt=0):
        attempts.append((cand.key, attempt))
        return answers.get((cand.key, attempt), (8.5e6, False))

    monkeypatch.setattr(proof, "cheap_bound_us", lambda costs, cand, L: cheap[cand.key])
    monkeypatch.setattr(proof, "cycle_bound_us", lambda costs, cand, L: 0.0)
    monkeypatch.setattr(proof, "_certify_one", fake_solve)
    costs = SimpleNamespace(model=SimpleNamespace(num_layers=8), fleet=SimpleNamespace(groups=()))
    cands = [SimpleNamespace(key=k) for k in ("c", "b", "a")]
    cert = proof.certify(costs, cands, 10.0, SearchOptions(), hints={}, dtime_budget=100.0,
                         stop_at_s=time.perf_counter() + 60)
    assert attempts == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("b", 2), ("b", 3)]
    assert cert.retried == 4 and cert.pruned == 1 and cert.stopped_by == "complete"
    assert cert.bound_us == 8.5e6 and cert.unsettled == 1  # b's best bound (the warning's count); a settled at T


def test_most_fit_is_the_roomiest_positions_layers_that_fit():
    """The proof's inlined max over stage positions agrees with costs.layers_that_fit, zero slopes included."""
    from hgplan.planner.certify import _most_fit
    from hgplan.planner.costs import layers_that_fit
    rng = random.Random(3)
    for _ in range(2000):
        rows = tuple((rng.randint(0, 90_000), rng.choice([0, rng.randint(1, 5_000)])) for _ in range(rng.randint(1, 9)))
        cap, L = rng.randint(1, 80_000), rng.randint(1, 128)
        assert _most_fit(rows, cap, L) == max(layers_that_fit(a, b, cap, L) for a, b in rows)


def test_cheap_bound_takes_interchangeable_groups_together():
    """The cheap bound's slots are per class of interchangeable groups (planner/certify._slots): on a rack-by-rack
    fleet of eight groups in two classes it is the bound with every group a class of its own, up to floating-point
    sums, on every configuration."""
    import dataclasses

    from search_scaling import synthetic

    from hgplan.planner.certify import cheap_bound_us
    from test_planner import small_model

    fleet = synthetic(128, 2, 2, 8)
    model = small_model(16, hidden=2048, heads=16)
    train = TrainingSettings(seq_length=2048, global_batch_size=64)
    costs = CostSource(fleet, model, train)
    cands, _ = enumerate_candidates(costs, SearchOptions(), list(fleet.groups))
    merged = 0
    for cand in cands:
        alone = dataclasses.replace(cand.ctx, classes=tuple((k,) for k in sorted(cand.ctx.groups)))
        L = model.num_layers
        ours, theirs = cheap_bound_us(costs, cand, L), cheap_bound_us(costs, dataclasses.replace(cand, ctx=alone), L)
        assert ours == pytest.approx(theirs, rel=1e-12) or ours == theirs == math.inf
        merged += len(cand.ctx.classes) < len(cand.ctx.groups)
    assert merged > 100
