"""Issue 11 (fleets of many node groups): the block model (planner/block_model.py) is a relaxation of an item, so its
bound never exceeds the item's exhaustive optimum, and its solution, expanded to stages, is a plan the tables check.

Instance / model / solution / validator, in feasible / infeasible triples: random multi-site fleets and a WAN
island fleet against the exhaustive optimum (bound never above it, the optimum itself on most items), an upper bound
at the optimum (infeasible) and just above it (feasible), and an item no placement fits (no plan)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from ortools.sat.python import cp_model
from exhaustive import best_for_tables
from test_bound_structure import _group, island_fleet
from test_planner import random_multisite_fleet, small_model

from hgplan.domain import Fleet, Link, TrainingSettings, Transport
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner.block_model import build_block_model, solve_blocks
from hgplan.planner.subset_split import subset_bounds_us
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.model import SolverParams
from hgplan.planner.options import SearchOptions
from hgplan.planner.symmetry import table_classes
from hgplan.planner.tables import build_tables

PARAMS = SolverParams(max_deterministic_time=10.0, max_time_in_seconds=60.0)


def _multi_group_items(fleet: Fleet, model, train: TrainingSettings, opts: SearchOptions):
    """The tables (require_all) of every (candidate, group set) item with two or more groups and stages."""
    costs = CostSource(fleet, model, train)
    by_key = {g.key: g for g in fleet.groups}
    for cand in enumerate_candidates(costs, opts, list(fleet.groups))[0]:
        if cand.cfg.pp < 2:
            continue
        m = cand.cfg.num_microbatches(train.global_batch_size)
        for subset in subset_bounds_us(cand.ctx, cand.cfg, L=model.num_layers, m=m):
            tables = build_tables(costs, cand.cfg, [by_key[k] for k in subset]) if len(subset) > 1 else None
            if tables is not None and len(tables.groups) == len(subset):
                yield replace(tables, require_all=True)


def _check(t) -> tuple[bool, bool, float]:
    """Solve one item both ways; returns (the item has a plan, the block model found the optimum, bound / optimum)."""
    best = best_for_tables(t)
    sol = solve_blocks(t, PARAMS)
    real = t.objective(list(sol.assign), list(sol.layers)) if sol.assign else None
    if real is not None:  # the expanded plan is a plan of the item: never better than its optimum
        assert best is not None and real >= best[0], (t.cfg, t.groups, real, best)
    if best is None:
        assert real is None, (t.cfg, t.groups, sol)
        return False, False, 0.0
    assert sol.status in ("OPTIMAL", "FEASIBLE"), (t.cfg, t.groups, sol.status)
    assert sol.bound <= best[0] + 1e-3, (t.cfg, t.groups, sol.bound, best)  # CP-SAT's bound is a float
    if t.vpp > 1:  # with the steady paths too (planner/block_paths.py): still a relaxation, never below without
        paths = solve_blocks(t, PARAMS, paths=True)
        assert paths.bound <= best[0] + 1e-3, (t.cfg, t.groups, paths.bound, best)
        if paths.status == sol.status == "OPTIMAL":
            assert paths.relaxed >= sol.relaxed
    return True, sol.status == "OPTIMAL" and real == best[0], sol.bound / best[0]


@pytest.mark.parametrize("seed", range(2))
def test_block_model_bounds_every_item_and_solves_most(seed):
    """Random fleets of 2-5 groups over up to three sites: the bound is never above the exhaustive optimum, and
    the expanded solution is the optimum on most items. Measured over seeds 0-3 (every multi-group item, pp <= 5):
    11,752 items, none above, 98.5% exact, before the closed form took interleaving's phase paths (which the block
    model drops); over seeds 0-1 now: 616 items, every 1F1B item (384) exact, 206 of the 232 interleaved ones."""
    rng = random.Random(1000 + seed)
    fleet = random_multisite_fleet(rng)
    model = small_model(rng.choice([6, 8, 12]), hidden=rng.choice([2048, 4096]), heads=32)
    train = TrainingSettings(seq_length=2048, global_batch_size=rng.choice([16, 32, 64]))
    opts = SearchOptions(max_pp=4, mbs_options=(1,), recompute_options=(Recompute.NONE, Recompute.FULL))
    results = [_check(t) for t in _multi_group_items(fleet, model, train, opts)]
    solved = [exact for has_plan, exact, _ in results if has_plan]
    assert len(solved) >= 20
    assert sum(solved) >= 0.9 * len(solved)


def test_block_model_on_a_wan_island():
    """Three sites 20 ms apart, the middle one a single A100 node (tests/test_bound_structure.py's island): the
    crossings' loops bind. The block model keeps each crossing's two-stage loop and drops longer ones, and with
    interleaving the phase paths, which the search's path solve of an interleaved item adds back (block_paths).
    Measured (2026-11-29, with the TCP window on the WAN): 10 of the 14 1F1B items over three or four groups exact,
    the others' bounds 0.84-0.97 of the optimum (1F1B's loops of three and more micro-batches through two crossings);
    the 4 interleaved items' bounds with their path solve 0.97-1.0 (without it one is 0.43: the phase paths bind
    where the WAN's sends are long; before the window 0.997-0.998 without)."""
    fleet = island_fleet()
    train = TrainingSettings(seq_length=2048, global_batch_size=32)
    opts = SearchOptions(max_pp=6, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
    items = [t for t in _multi_group_items(fleet, small_model(16, hidden=4096, heads=32), train, opts)
             if len(t.groups) >= 3]
    results = [(t, *_check(t)) for t in items]
    solved = [exact for t, has_plan, exact, _ in results if has_plan and t.vpp == 1]
    assert len(solved) >= 10
    assert sum(solved) >= 0.6 * len(solved)
    assert min(ratio for t, has_plan, _, ratio in results if has_plan and t.vpp == 1) >= 0.8
    interleaved = [t for t, has_plan, _, _ in results if has_plan and t.vpp > 1]
    assert interleaved and all(solve_blocks(t, PARAMS, paths=True).bound >= 0.96 * best_for_tables(t)[0]
                               for t in interleaved)


def _pair_items(second_gpu: str, latency_ms: float, *, batch: int, tp: int, max_pp: int, model) -> list:
    """The multi-group items (no interleaving) of an H100 group and a `second_gpu` group, one node each, on two sites
    `latency_ms` apart over 100 Gbit/s."""
    spec = [("a", "H100-SXM5-80GB", 1), ("b", second_gpu, 1)]
    links = (Link(scope="site", a="a", b="b", gbps=100, latency_ms=latency_ms, transport=Transport.ETHERNET,
                  egress_usd_per_gb=None),)
    fleet = Fleet(name="pair", groups=tuple(_group(i, *s) for i, s in enumerate(spec)), links=links,
                  transports=catalog().transports)
    train = TrainingSettings(seq_length=2048, global_batch_size=batch)
    opts = SearchOptions(max_pp=max_pp, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(tp,),
                         vpp_options=(1,))
    return list(_multi_group_items(fleet, model, train, opts))


def _one_item(layers: int):
    """An H100 and an A100 group on two sites, tp 2, pp 4, no interleaving: one multi-group item."""
    items = [t for t in _pair_items("A100-SXM4-80GB", 5, batch=32, tp=2, max_pp=4,
                                    model=small_model(layers, hidden=4096, heads=32)) if t.pp == 4]
    assert items, "the fleet has a pp 4 item over both groups"
    return items[0]


def test_upper_bound_at_the_optimum_is_infeasible_and_above_it_feasible():
    """With upper_bound the model keeps only solutions strictly below it: at the optimum nothing is left (the search
    closes such an item against its incumbent), one microsecond above it the optimum comes back."""
    t = _one_item(layers=12)
    sol = solve_blocks(t, PARAMS)
    assert sol.status == "OPTIMAL" and sol.relaxed is not None
    assert solve_blocks(t, PARAMS, upper_bound=sol.relaxed).status == "INFEASIBLE"
    again = solve_blocks(t, PARAMS, upper_bound=sol.relaxed + 1)
    assert again.status == "OPTIMAL" and again.relaxed == sol.relaxed
    assert t.objective(list(again.assign), list(again.layers)) is not None


def test_a_cycle_the_wan_latency_sets_is_within_the_models_range():
    """Two small groups 20 ms apart and a small model: 1F1B's two-stage loop through the WAN (2 x cycle >= both
    stages' demands + 2 x 20 ms) sets the cycle, above every stage's demand with every layer plus four sends. The
    model's cycle must reach it, or the item looks infeasible and the search would close it as such (found by
    tests/test_block_cuts.py, seed 0: until 2026-11-27 the cycle's range left the latency out)."""
    items = _pair_items("H100-SXM5-80GB", 20, batch=16, tp=4, max_pp=2, model=small_model(4, hidden=2048, heads=32))
    assert items
    for t in items:
        best = best_for_tables(t)
        old_range = t.max_stage_us + 4 * t.vpp * t.most_send_us
        assert best is not None and best[0] > (t.vpp * t.microbatches - 1) * old_range  # the loop sets the cycle
        sol = solve_blocks(t, PARAMS)
        assert sol.status == "OPTIMAL" and sol.relaxed == best[0], (sol, best)


def test_an_item_nothing_fits_has_no_plan():
    """The same item with each GPU's memory cut to what two layers need at its roomiest stage: four stages hold at
    most 8 of the 12 layers, so the model is infeasible and returns no plan (never one the tables would reject)."""
    t = _one_item(layers=12)
    K = len(t.groups)
    caps = tuple(min(t.mem_a_mib[s][k] + 2 * t.mem_b_mib[s][k] for s in range(t.pp)) for k in range(K))
    small = replace(t, cap_mib=caps)
    assert all(small.memory_layers(s, k) <= 2 for s in range(t.pp) for k in range(K))
    assert best_for_tables(small) is None
    sol = solve_blocks(small, PARAMS)
    assert sol.status == "INFEASIBLE" and sol.assign == ()


def _optimum(t, classes, reverse: tuple[int, int] | None = None) -> tuple[str, int | None]:
    """Solve the block model with the given classes (and, with `reverse` = (k, k2), k2's block forced before k's)."""
    md, xv = build_block_model(t, classes=classes)
    if reverse is not None:
        md.add(xv.idx[reverse[1]] < xv.idx[reverse[0]])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers, solver.parameters.max_deterministic_time = 1, 10.0
    status = solver.solve(md)
    return solver.status_name(status), round(solver.objective_value) if status == cp_model.OPTIMAL else None


def test_interchangeable_groups_come_in_index_order():
    """Two groups of one site and GPU (the island's) are interchangeable: the block model places their blocks in
    index order and loses nothing by it (the same optimum as without the order, with and without interleaving),
    while forcing the later group first is infeasible with the order and costs nothing without it."""
    fleet = island_fleet()
    train = TrainingSettings(seq_length=2048, global_batch_size=32)
    opts = SearchOptions(max_pp=4, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
    items = [t for t in _multi_group_items(fleet, small_model(16, hidden=4096, heads=32), train, opts)
             if any(len(c) > 1 for c in table_classes(t))]
    # three items of each schedule (the list starts with interleaved ones)
    chosen = [t for v in (1, 2) for t in [t for t in items if t.vpp == v][:3]]
    assert {t.vpp for t in chosen} == {1, 2}
    for t in chosen:
        classes = table_classes(t)
        alone = tuple((k,) for k in range(len(t.groups)))
        k, k2 = next(c for c in classes if len(c) > 1)[:2]
        status, best = _optimum(t, classes)
        assert status == "OPTIMAL" and _optimum(t, alone) == (status, best)
        assert _optimum(t, classes, reverse=(k, k2))[0] == "INFEASIBLE"
        assert _optimum(t, alone, reverse=(k, k2)) == (status, best)
        sol = solve_blocks(t, PARAMS)
        assert sol.assign.index(k) < sol.assign.index(k2)


def test_interleaved_block_model_with_an_unlinked_pair_of_groups():
    """Three sites in a line (a - b - c, no link between a and c): an interleaved pipeline over the three groups
    cannot wrap around between a and c, whose wrap-around variable the model fixes at 0. Its sends skip that pair
    (block_model._sends multiplied the missing send, None, and raised a TypeError: seed 61 of the forced path waits
    of tests/test_block_paths.py); each item's bound stays below its exhaustive optimum and its plan is a plan."""
    wan = dict(gbps=100, latency_ms=5, transport=Transport.ETHERNET, egress_usd_per_gb=None)
    fleet = Fleet(name="line", groups=(_group(0, "a", "H100-SXM5-80GB", 1), _group(1, "b", "A100-SXM4-80GB", 1),
                                       _group(2, "c", "H100-SXM5-80GB", 1)),
                  links=(Link(scope="site", a="a", b="b", **wan), Link(scope="site", a="b", b="c", **wan)),
                  transports=catalog().transports)
    model, train = small_model(12, hidden=4096, heads=32), TrainingSettings(seq_length=2048, global_batch_size=32)
    opts = SearchOptions(max_pp=6, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(2,))
    checked = 0
    for t in _multi_group_items(fleet, model, train, opts):
        if t.vpp > 1 and len(t.groups) == 3:
            assert any(t.send_us[k][k2] is None for k in range(3) for k2 in range(3) if k != k2)
            _check(t)
            checked += 1
    assert checked >= 1


def test_search_on_a_fleet_with_an_unlinked_pair_finds_the_exhaustive_optimum():
    """tests/test_planner.py's random multi-site fleet of seed 61 (two of its groups have no link between them): the
    search raised the TypeError above; it returns the exhaustive optimum with a zero gap."""
    from exhaustive import exhaustive_best

    from hgplan.planner.search import run_search

    fleet = random_multisite_fleet(random.Random(61))
    model, train = small_model(12, hidden=4096, heads=32), TrainingSettings(seq_length=2048, global_batch_size=64)
    opts = SearchOptions(top_k=1, budget_s=60, per_solve_s=30, max_gap=0.0, solve_gap=0.0, max_pp=4,
                         mbs_options=(1,), recompute_options=(Recompute.NONE,))
    best_us, best = exhaustive_best(fleet, model, train, opts)
    res = run_search(fleet, model, train, opts)
    assert best is not None and res.found[0].time_us == pytest.approx(best_us, abs=1.0)
    assert res.gap == pytest.approx(0.0, abs=1e-9)
