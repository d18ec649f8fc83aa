"""One iteration time (issue 11): search's table, search --json, explain and the plan file report the same number,
the pipeline simulator's; the returned plan is never slower than its own baselines; the gap says what it proves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hgplan.costmodel.evaluate import evaluate
from hgplan.io import catalog, resolve_cluster, resolve_model
from hgplan.planner import api
from hgplan.planner import baselines as bl

CASES = [
    ("mixed-nic", "gpt-7.5b", "2048", "256"),
    ("three-generations", "llama2-13b", "4096", "256"),
    ("two-site", "llama3.1-70b", "4096", "512"),
]


@pytest.mark.parametrize("cluster, model, seq, gbs", CASES)
def test_search_explain_and_plan_file_report_one_number(cli, tmp_path, cluster, model, seq, gbs):
    out = tmp_path / "plan.json"
    r = cli("search", "-c", cluster, "-m", model, "--seq-len", seq, "--global-batch", gbs, "--json", "-o", out)
    assert r.code == 0, r.stderr
    doc = r.json()
    best = doc["plans"][0]["prediction"]
    assert best["method"] == "simulator"
    assert doc["search"]["iteration_time_s"] == best["iteration_time_s"]
    e = cli("explain", out, "--json")
    assert e.code == 0, e.stderr
    assert e.json()["prediction"]["iteration_time_s"] == best["iteration_time_s"]
    assert "simulator_iteration_time_s" not in e.json()["prediction"]
    table = cli("search", "-c", cluster, "-m", model, "--seq-len", seq, "--global-batch", gbs, "--top", "1")
    assert f"{best['iteration_time_s']:.3f}" in table.stdout
    # the ranking is by the reported number, and no plan is slower than a baseline that is faster than it
    times = [p["prediction"]["iteration_time_s"] for p in doc["plans"]]
    assert times == sorted(times)
    for name, b in doc["baselines"].items():
        if b["available"]:
            assert b["prediction"]["iteration_time_s"] >= best["iteration_time_s"], name
            assert b["speedup"] >= 1.0


def test_gap_is_not_called_proven_on_the_simulated_time(cli):
    r = cli("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512")
    assert r.code == 0
    assert "proven bound" not in r.stdout
    # either the gap is an estimate, or (two-site since 1F1B's loops are in the closed form) the simulated time is
    # below the bound, which then says nothing of it
    assert "estimated, not proven" in r.stdout or "says nothing of the simulated time" in r.stdout
    j = cli("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
            "--json", "--no-baselines").json()["search"]
    assert j["gap_proven"] is False and "not a proof" in j["gap_note"]
    assert j["gap_on_reported"] == pytest.approx((j["iteration_time_s"] - j["bound_s"]) / j["iteration_time_s"],
                                                 abs=1e-4)


def test_a_bound_above_the_simulated_time_prints_no_gap(cli):
    """mixed-vendor's best plan simulates below the search objective's bound: no "gap" is printed for it, and the
    JSON keeps the signed figure."""
    args = ("search", "-c", "mixed-vendor", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "512")
    r = cli(*args, "--no-baselines")
    assert r.code == 0, r.stderr
    j = cli(*args, "--no-baselines", "--json").json()["search"]
    assert j["gap_on_reported"] < 0 and j["iteration_time_s"] < j["bound_s"]
    assert "says nothing of the simulated time" in r.stdout and "gap to the search's bound" not in r.stdout


def test_a_bound_above_the_simulated_time_by_the_tables_rounding_is_a_zero_gap():
    """A one-stage plan of 1.498 s simulated 20 us below its closed form: the integer tables round every cost to the
    nearest microsecond. The table said "1.498 s ..., below the search's bound 1.498 s: the simulator overlaps what
    the search's closed form serialises"; within TABLE_ROUNDING the gap is 0.00%, beyond it the bound is above."""
    from hgplan.documents import TABLE_ROUNDING, SearchStats

    near = SearchStats.model_construct(gap_proven=False, gap_on_reported=-1.322e-05)
    assert not near.bound_above_reported and near.shown_gap == 0.0 and f"{near.shown_gap:.2%}" == "0.00%"
    far = SearchStats.model_construct(gap_proven=False, gap_on_reported=-2 * TABLE_ROUNDING)
    assert far.bound_above_reported and far.shown_gap < 0
    ahead = SearchStats.model_construct(gap_proven=False, gap_on_reported=0.004)
    assert not ahead.bound_above_reported and ahead.shown_gap == 0.004


def _ranked_two_site():
    fleet, _, _ = resolve_cluster("two-site", catalog())
    model, _ = resolve_model("llama3.1-70b")
    from hgplan.domain import TrainingSettings

    train = TrainingSettings(seq_length=4096, global_batch_size=512)
    base = bl.proportional(fleet, model, train, api.SearchOptions())
    return fleet, model, train, base


def test_baselines_skip_only_plans_that_do_not_fit():
    """The file-order baselines check memory before simulating (evaluate.fits_and_bound): it agrees with the full
    prediction's `fits` on every plan, those that fit and those that do not, and its bound of a plan that fits is at
    or below the plan's reported time."""
    from hgplan.costmodel.evaluate import fits_and_bound
    from hgplan.validate import check_plan

    fleet, model, train, _ = _ranked_two_site()
    plans = [p for p in bl._file_order_plans(fleet, model, train, api.SearchOptions(), proportional=True)
             if not check_plan(p, fleet, model, train)]
    checked = [(fits_and_bound(p, fleet, model, train), evaluate(p, fleet, model, train)) for p in plans]
    assert [fits for (fits, _), _ in checked] == [pred.fits for _, pred in checked]
    assert 0 < sum(fits for (fits, _), _ in checked) < len(plans)
    assert all(bound <= pred.iteration_time_s * (1 + 1e-12) for (fits, bound), pred in checked if fits)


def test_baselines_simulate_in_bound_order_and_return_what_simulating_all_would():
    """The file-order baselines simulate their plans in order of a lower bound (the busy path of each stage, with
    the work before it) and stop once the bound passes the best: the bound is at or below every fitting plan's
    reported time, and the plan returned is the one simulating every plan would give (the first listed among
    equals), for both file-order baselines, interleaved plans included."""
    from hgplan.costmodel.evaluate import fits_and_bound
    from hgplan.validate import check_plan

    fleet, model, train, _ = _ranked_two_site()
    opts = replace(api.SearchOptions(), vpp_options=(1, 2))
    for proportional in (False, True):
        plans = bl._file_order_plans(fleet, model, train, opts, proportional=proportional)
        full = [(evaluate(p, fleet, model, train), i) for i, p in enumerate(plans)
                if not check_plan(p, fleet, model, train) and fits_and_bound(p, fleet, model, train)[0]]
        for pred, i in full:
            cache = {}
            assert bl._busy_bound_s(plans[i], fleet, model, train, cache) <= pred.iteration_time_s * (1 + 1e-12)
        fitting = [(pred.iteration_time_s, i) for pred, i in full if pred.fits]
        best = bl._best_of(plans, fleet, model, train)
        assert (best is None) if not fitting else best[0] == plans[min(fitting)[1]]
        assert fitting or not proportional  # two-site's even split fits nowhere; the proportional one does


def test_the_baselines_full_bound_is_below_every_fitting_plans_reported_time():
    """evaluate.fits_and_bound on random multi-site fleets (WAN links of random speed and latency, 2-5 GPU types):
    every file-order plan, even and proportional, 1F1B and interleaved (v = 2 where it is valid), micro-batches of
    1 and 2, without and with full recompute: its verdict is the full prediction's `fits`, and its bound (sends,
    latencies and tails included) is at or below the plan's reported time."""
    import random

    from hgplan.costmodel.evaluate import fits_and_bound
    from hgplan.domain import TrainingSettings
    from hgplan.plan import Recompute
    from hgplan.validate import check_plan
    from test_planner import random_multisite_fleet, small_model

    opts = replace(api.SearchOptions(), vpp_options=(1, 2), mbs_options=(1, 2),
                   recompute_options=(Recompute.NONE, Recompute.FULL))
    checked, interleaved = 0, 0
    for seed in range(20):
        rng = random.Random(seed)
        fleet = random_multisite_fleet(rng)
        model = small_model(rng.choice([8, 12, 16]), hidden=rng.choice([2048, 4096]), heads=32)
        train = TrainingSettings(seq_length=2048, global_batch_size=rng.choice([32, 64]))
        for proportional in (False, True):
            plans = bl._file_order_plans(fleet, model, train, opts, proportional=proportional)
            for plan in plans + [replace(p, config=replace(p.config, vpp=2)) for p in plans if p.config.pp > 1]:
                if check_plan(plan, fleet, model, train):
                    continue
                (fits, bound), pred = fits_and_bound(plan, fleet, model, train), evaluate(plan, fleet, model, train)
                assert fits == pred.fits
                assert not fits or bound <= pred.iteration_time_s * (1 + 1e-12), (plan, bound, pred.iteration_time_s)
                checked += fits
                interleaved += fits and plan.config.vpp > 1
    assert checked >= 200 and interleaved >= 20, (checked, interleaved)


def test_a_baseline_faster_than_every_solver_plan_is_returned_first():
    fleet, model, train, base = _ranked_two_site()
    assert base.plan is not None
    slow = evaluate(base.plan, fleet, model, train)
    slower = replace(slow, iteration_time_s=slow.iteration_time_s * 1.5)
    warnings: list[str] = []
    ranked = api._with_faster_baselines([(base.plan, slower, None, "search")], [base], warnings)
    # the same plan is never listed twice, however it got in
    assert len(ranked) == 1
    other = replace(base, plan=replace(base.plan, stages=base.plan.stages[::-1]))
    ranked = api._with_faster_baselines([(base.plan, slower, None, "search")], [other], warnings)
    assert [origin for *_, origin in ranked] == ["baseline:proportional", "search"]
    assert "beats the search's best plan" in warnings[-1]
    # a baseline no faster than the best is left where it is (among the baselines)
    warnings.clear()
    ranked = api._with_faster_baselines([(base.plan, slow, None, "search")], [other], warnings)
    assert [origin for *_, origin in ranked] == ["search"] and not warnings


def test_ranking_by_the_reported_model_can_overturn_the_search_objective(cli):
    """docs/planner.md: on three-generations the plan returned first has a closed-form objective (6.12 s) above the
    runner-up's simulated time (6.03 s, a polished plan): the plans are ranked by the reported time, not by the
    search objective."""
    doc = cli("search", "-c", "three-generations", "-m", "llama2-13b", "--seq-len", "4096", "--global-batch", "256",
              "--json", "--no-baselines").json()
    times = [p["prediction"]["iteration_time_s"] for p in doc["plans"]]
    assert times == sorted(times)
    first, second = doc["plans"][:2]
    assert first["solver"]["objective_s"] > second["prediction"]["iteration_time_s"] > times[0]
    assert second["solver"]["status"].startswith("SIM_")
