"""Issue 12: the mesh candidates' bound site set by site set (planner/mesh_sites.py) against the exhaustive optimum of
each candidate, on small random fleets whose node groups lie in two or three sites joined by slow links."""

from __future__ import annotations

import dataclasses
import functools
import math
import random

import numpy as np
import pytest
from exhaustive import compositions
from exhaustive_mesh import _placements, _scores, candidate_optima, unpruned_tables
from test_mesh_exhaustive import FAST, SLOW, _model

from hgplan.domain import Fleet, Link, NodeGroup, Precision, Target, TrainingSettings, Transport
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner import mesh_bound, mesh_dual, mesh_fill, mesh_first, mesh_sites, mesh_wan
from hgplan.planner.costs import CostSource
from hgplan.planner.mesh_search import mesh_search
from hgplan.planner.mesh_tables import build_mesh_tables
from hgplan.planner.spanning import least_spanning_tree
from hgplan.planner.options import SearchOptions

SEEDS = range(10)


def _fleet(rng: random.Random) -> Fleet:
    """Three groups of one or two four-GPU nodes, fast or slow GPUs, over two or three sites (each site reached by
    a 10-100 Gbit/s link of 1-20 ms), the first two on InfiniBand."""
    cat = catalog()
    sites = rng.choice([("a", "a", "b"), ("a", "b", "b"), ("a", "b", "c"), ("a", "b", "a")])
    groups = []
    for i, site in enumerate(sites):
        gpu = cat.gpu_type(cat.gpus[rng.choice(FAST if rng.random() < 0.5 else SLOW)])
        groups.append(NodeGroup(site=site, name=f"g{i}", num_nodes=rng.randint(1, 2), gpu=gpu, gpus_per_node=4,
                                intra_node_kind=gpu.intra_node_kind,
                                intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s,
                                nic_transport=Transport.INFINIBAND, nic_gbps=rng.choice([100, 200]), nic_count=1,
                                gpu_hour_usd=None, order=i))
    links = [Link(scope="site", a=a, b=b, gbps=rng.choice([10, 25, 100]), latency_ms=rng.choice([1, 5, 20]),
                  transport=Transport.ETHERNET, egress_usd_per_gb=None)
             for a, b in (("a", "b"), ("a", "c"), ("b", "c")) if a in sites and b in sites]
    return Fleet(name="random-sites", groups=tuple(groups), links=tuple(links), transports=cat.transports)


@functools.cache
def site_case(seed: int):
    """A random multi-site fleet, its model, settings, options and cost source."""
    rng = random.Random(5000 + seed)
    fleet = _fleet(rng)
    model = _model(rng.choice([6, 8]), tied=rng.random() < 0.5)
    train = TrainingSettings(seq_length=2048, global_batch_size=16, precision=Precision.FP16)
    opts = SearchOptions(budget_s=120, per_solve_s=30, max_gap=0.0, solve_gap=0.0, max_pp=3, tp_options=(1, 2),
                         recompute_options=(Recompute.NONE,))
    return fleet, model, train, opts, CostSource(fleet, model, train)


@functools.cache
def site_rows(seed: int) -> list[tuple[int, int, float, float, float, float]]:
    """(B, P, bound without crossings, site-set bound, exhaustive optimum over every option, the search's cheap
    bound) of every candidate of one to three stages of a random multi-site fleet."""
    fleet, model, train, opts, costs = site_case(seed)
    groups = list(fleet.groups)
    cands, fills, _ = mesh_first.first_bounds(costs, groups, opts)
    cheap = {(B, P): lb for lb, B, P, *_ in cands}
    out = []
    for B, fill in fills.items():
        for P in range(1, 4):
            t, full = build_mesh_tables(costs, B, P, groups, opts), unpruned_tables(costs, B, P, groups, opts)
            if t is None or full is None:
                continue
            best = candidate_optima(full)[0]
            plain = mesh_bound.candidate_bound(t, fill, stages=True).bound_us
            out.append((B, P, plain, mesh_sites.site_set_bound(t, fill, stages=True).bound_us, best,
                        cheap.get((B, P), math.inf)))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_site_set_bound_is_below_every_candidates_optimum(seed):
    """The bound with the crossings of every site set a plan can use never exceeds the candidate's exhaustive
    optimum, nor falls below the bound without them."""
    rows = site_rows(seed)
    assert rows
    for B, P, plain, sites, best, cheap in rows:
        assert plain <= sites <= best + 1e-6, (seed, B, P, plain, sites, best)
        assert cheap <= best + 1e-6, (seed, B, P, cheap, best)  # the search's first bound, its sets of sites in


@pytest.mark.parametrize("seed", SEEDS[::2])
def test_mesh_search_finds_and_proves_the_optimum_across_sites(seed):
    """From no incumbent the mesh search, pruning with both site-set bounds, returns the exhaustive optimum of the
    multi-site fleet and proves it."""
    fleet, _, _, opts, costs = site_case(seed)
    best_us = min(r[4] for r in site_rows(seed))
    res = mesh_search(costs, list(fleet.groups), opts, incumbent_us=math.inf)
    assert res.best_us == best_us
    assert res.stopped_by == "complete"
    assert res.bound_us == pytest.approx(best_us, abs=1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fill_counts_no_more_boundary_time_than_any_placement_pays(seed):
    """What the bound over the sites U counts of the fill's boundaries (mesh_fill.sends_fill_us with the WAN crossings
    of U's spanning tree, and each host beyond one per site a boundary between hosts, mesh_fill.host_boundary_us) is
    at most what each placement over exactly U pays, both ways, at its sends and latencies: every placement of two
    or three stages of the seed's multi-site fleet (two groups share a site in about half of them)."""
    fleet, _, _, opts, costs = site_case(seed)
    groups = list(fleet.groups)
    checked = 0
    for B in mesh_first.first_bounds(costs, groups, opts)[1]:
        for P in (2, 3):
            t = build_mesh_tables(costs, B, P, groups, opts)
            if t is None:
                continue
            for assign, choice in _placements(t):
                sends = [(t.send(h, choice[h], h2, choice[h2]), t.latency(h, choice[h], h2))
                         for h, h2 in zip(assign, assign[1:])]
                U = tuple(sorted({t.sites[h] for h in assign}))
                if len(U) < 2 or any(x is None for x, _ in sends):
                    continue
                part = t.restricted([h for h in range(len(t.hosts)) if t.sites[h] in U])
                wan = (len(U) - 1, least_spanning_tree(U, mesh_sites.site_edges_us(part)))
                counted = (mesh_fill.sends_fill_us(part, wan)
                           + (len(set(assign)) - len(U)) * mesh_fill.host_boundary_us(part))
                assert counted <= sum(2 * (x + lat) for x, lat in sends) + 1e-6, (seed, B, assign, choice)
                checked += 1
    assert checked >= 10


def test_site_set_bound_raises_the_bound_across_sites():
    """Where the pipeline must cross between sites, the crossings' sends and latency raise the bound (measured: on
    63 of the 100 candidates of two or three stages that have a plan; asserted: half), never above the optimum
    (above)."""
    rows = [r for s in SEEDS for r in site_rows(s) if r[1] > 1 and math.isfinite(r[4])]
    raised = [r for r in rows if r[3] > r[2] + 1.0]
    assert len(raised) >= len(rows) // 2, (len(raised), len(rows))


def test_restricted_tables_are_the_candidate_without_the_other_hosts():
    """MeshTables.restricted keeps every table entry of the hosts kept: an objective over them is the same."""
    rng = random.Random(5000)
    fleet = _fleet(rng)
    model = _model(6, tied=False)
    train = TrainingSettings(seq_length=2048, global_batch_size=16, precision=Precision.FP16)
    costs = CostSource(fleet, model, train)
    opts = SearchOptions(max_pp=3, tp_options=(1, 2), recompute_options=(Recompute.NONE,))
    t = build_mesh_tables(costs, 4, 3, list(fleet.groups), opts)
    part = t.restricted([2, 0])
    assert part.hosts == (t.hosts[2], t.hosts[0]) and part.sites == (t.sites[2], t.sites[0])
    for o in range(len(t.options[2])):
        for o2 in range(len(t.options[0])):
            want = t.objective([2, 2, 0], {2: o, 0: o2}, [2, 2, 2])
            assert part.objective([0, 0, 1], {0: o, 1: o2}, [2, 2, 2]) == want


def _bisect(holds) -> float:
    """Least cycle (to 1 us) at which holds(cycle) is true, holds non-decreasing."""
    lo, hi = 0.0, 1e9
    while hi - lo > 1.0:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return lo


@functools.cache
def site_cycles(seed: int) -> list[tuple[int, int, float, float, float]]:
    """(B, P, order-free least cycle, least cycle of plans over every site (mesh_wan.site_capacity), least cycle
    of the exhaustive plans that use every site, the second with the loop dual where the tables hold loops) of every
    candidate of two or three stages."""
    fleet, model, _, opts, costs = site_case(seed)
    groups, out = list(fleet.groups), []
    for B in mesh_first.first_bounds(costs, groups, opts)[1]:
        for P in (2, 3):
            t, full = build_mesh_tables(costs, B, P, groups, opts), unpruned_tables(costs, B, P, groups, opts)
            if t is None or full is None or len(set(t.sites)) > P:
                continue
            kept = [(a, t.sites[h]) for h in range(len(t.hosts)) if (a := mesh_bound._host_arrays(t, h)) is not None]
            hosts, sites = [a for a, _ in kept], [s for _, s in kept]
            if set(sites) != set(t.sites):
                continue
            L, splits, plan = t.num_layers, compositions(t.num_layers, P), math.inf
            for assign, choice in _placements(full):
                if {full.sites[h] for h in assign} == set(full.sites):
                    scores = _scores(full, assign, choice, splits)
                    plan = min(plan, float(scores[1].min())) if scores is not None else plan
            prices = mesh_wan.loop_prices(hosts) if t.loops and t.microbatches >= 3 else np.zeros(1)
            out.append((B, P, _bisect(lambda c: mesh_bound._capacity(hosts, c, P) >= L),
                        _bisect(lambda c: mesh_wan.site_capacity(hosts, sites, c, P) >= L), plan,
                        _bisect(lambda c: mesh_wan.site_capacity(hosts, sites, c, P, prices) >= L)))
    return out


def test_every_site_cycle_is_a_lower_bound_of_plans_over_every_site():
    """A pipeline over every site enters or leaves each through a block end that pays a crossing's send
    (mesh_wan.site_capacity): its least cycle is never above that of any exhaustive plan over every site nor
    below the order-free one, and above the latter on many candidates (measured: on 67 of 80, 55 of them up to the
    plans' own least cycle; asserted: half)."""
    rows = [r for s in SEEDS for r in site_cycles(s)]
    for B, P, free, every, plan, _ in rows:
        assert free - 1.0 <= every <= plan + 1.0, (B, P, free, every, plan)
    raised = [r for r in rows if r[3] > r[2] + 1.0]
    assert len(raised) >= len(rows) // 2, (len(raised), len(rows))


def test_the_loop_dual_cycle_is_a_lower_bound_of_plans_with_their_loops():
    """The least cycle with 1F1B's loops priced (mesh_wan.site_capacity with loop_prices: the two stages next to
    a crossing leave twice its latency of slack) is never below the one without nor above that of any exhaustive
    plan over every site (whose cycle holds the loops), and above the former on some candidates (measured: 19 of
    80, 7 of them up to the plans' own; asserted: a tenth)."""
    rows = [r for s in SEEDS for r in site_cycles(s)]
    for B, P, _, every, plan, looped in rows:
        assert every - 1.0 <= looped <= plan + 1.0, (B, P, every, looped, plan)
    raised = [r for r in rows if r[5] > r[3] + 1.0]
    assert len(raised) >= len(rows) // 10, (len(raised), len(rows))


def test_over_max_sites_the_first_bound_keeps_no_crossings():
    """Above mesh_sites.MAX_SITES sites the search's first bound takes every site at once without crossings: on a
    fleet of one group per site in seven sites it is the bound of the same groups in one site (the table-free bound
    reads no link), not empty."""
    base = site_case(0)[0]
    cat, g = catalog(), base.groups[0]
    names = "abcdefg"
    groups = tuple(dataclasses.replace(g, site=s, name=f"g{i}", order=i) for i, s in enumerate(names))
    links = tuple(Link(scope="site", a=a, b=b, gbps=25, latency_ms=5, transport=Transport.ETHERNET,
                       egress_usd_per_gb=None) for i, a in enumerate(names) for b in names[i + 1:])
    far = Fleet(name="seven-sites", groups=groups, links=links, transports=cat.transports)
    near = Fleet(name="one-site", groups=tuple(dataclasses.replace(x, site="a") for x in groups), links=(),
                 transports=cat.transports)
    model = _model(6, tied=False)
    train = TrainingSettings(seq_length=2048, global_batch_size=16, precision=Precision.FP16)
    opts = SearchOptions(max_pp=3, tp_options=(1, 2), recompute_options=(Recompute.NONE,))
    assert len({x.site for x in groups}) > mesh_sites.MAX_SITES
    got = mesh_first.first_bounds(CostSource(far, model, train), list(far.groups), opts)[0]
    want = mesh_first.first_bounds(CostSource(near, model, train), list(near.groups), opts)[0]
    assert got and [c[:3] for c in got] == [c[:3] for c in want]


def test_the_loop_dual_raises_bounds_across_sites(monkeypatch):
    """Pricing the loops' slack next to the crossings (mesh_wan.loop_prices) raises some site-set bounds
    (measured: 18 of these fleets' 150 candidates), lowers none, and they stay below the exhaustive optimum with the
    loops in (test_site_set_bound_is_below_every_candidates_optimum)."""
    with_dual = [r[3] for s in SEEDS for r in site_rows(s)]
    site_rows.cache_clear()
    monkeypatch.setattr(mesh_bound, "loop_prices", lambda hosts: np.zeros(1))  # as mesh_bound imported it
    try:
        without = [r[3] for s in SEEDS for r in site_rows(s)]
    finally:
        site_rows.cache_clear()
    assert len(without) == len(with_dual)
    # within the bisection's resolution (mesh_bound.BOUND_RESOLUTION): a different start ends elsewhere in it
    assert all(a >= b * (1 - mesh_bound.BOUND_RESOLUTION) for a, b in zip(with_dual, without))
    assert sum(a > b + 1.0 for a, b in zip(with_dual, without)) >= 1


@functools.cache
def _benchmark_tables(gpus: int, sites: int, types: int, *, B: int, P: int):
    """The tables of candidate (B, P) of a synthetic fleet of benchmarks/search_scaling.py (its model, sequence 4096,
    global batch 512), and the fill work of its B (built once per test process: tests/test_mesh_tail.py reads the
    four-site candidate too)."""
    from search_scaling import model_for, synthetic

    fleet = synthetic(gpus, sites, types)
    train = TrainingSettings(seq_length=4096, global_batch_size=512)
    opts = SearchOptions(target=Target.FLAGSCALE)
    costs, groups = CostSource(fleet, model_for(gpus)[1], train), list(fleet.groups)
    return build_mesh_tables(costs, B, P, groups, opts), mesh_first.first_bounds(costs, groups, opts)[1][B]


def test_the_work_across_sites_raises_the_three_site_bound(monkeypatch):
    """The stage-coupled work with some block of each site facing another (mesh_bound._wan_caps in
    mesh_dual.dual_work's knapsack site by site, every site used) raises the bound where the crossings' sends are
    large: benchmarks/mesh_search.py's three-site 1024-GPU fleet, B = 16, P = 16 (measured 0.9729 -> 0.9805 of the
    stock incumbent, 4.128 s; asserted: 0.5% higher). Without it each block's caps are its best under any role, so any
    block meets a site's flag. The bound stays below the exhaustive optima of the small fleets above (its validity
    test)."""
    t, fill = _benchmark_tables(1024, 3, 4, B=16, P=16)
    with_work = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    monkeypatch.setattr(mesh_bound, "_wan_caps", lambda a, cycle, P: {
        role: cap for role, cap in mesh_bound._option_gains(a, cycle, P).items() if role != (1, 1)})
    without = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    assert with_work >= 1.005 * without, (with_work, without)


def test_the_loop_floor_raises_bounds_across_sites(monkeypatch):
    """The cycle floor of 1F1B's two-micro-batch loop through a set's cheapest crossing (mesh_sites.loop_floor_us)
    raises some site-set bounds, which stay below the exhaustive optimum with the loops in (test above). Measured: 3
    of these fleets' 150 candidates, by up to 20%, before the TCP window on the WAN (2026-11-29); since, where the
    window makes the crossings' sends dearer than the loop, 1 of seeds 10-39's 450 (seed 34); since gloo's one
    connection per pair of ranks prices the sends between vendors (2026-11-29, late), none of those and 1 of seeds
    10-59's (seed 59), which is added here."""
    seeds = [*SEEDS, 59]
    with_floor = [r[3] for s in seeds for r in site_rows(s)]
    site_rows.cache_clear()
    monkeypatch.setattr(mesh_sites, "loop_floor_us", lambda *args: 0.0)
    try:
        without = [r[3] for s in seeds for r in site_rows(s)]
    finally:
        site_rows.cache_clear()  # the other tests read the rows with the floor
    assert len(without) == len(with_floor)
    assert all(a >= b * (1 - mesh_bound.BOUND_RESOLUTION) for a, b in zip(with_floor, without))
    assert sum(a > b + 1.0 for a, b in zip(with_floor, without)) >= 1


def test_the_roles_and_the_host_boundaries_raise_the_four_site_bound(monkeypatch):
    """Two terms of the work across sites raise the bound where sends between hosts are dear: benchmarks/
    mesh_search.py's four-site 1000-GPU fleet, whose MI300X and H100 groups share a site and exchange activations
    through host memory over gloo, B = 16, P = 15: one block holding each end of the pipeline (mesh_dual.dual_work's
    roles; without them every block may take an end: measured 0.961 -> 0.971 of the stock incumbent of then,
    4.500 s), and each used host but one per site adding a boundary at the least cost of one between two hosts
    (mesh_fill.host_boundary_us: 0.971 -> 0.982). Asserted: each 0.5% or more. The bound stays below the exhaustive
    optima of the small fleets above, some of whose sites hold two groups, and tests/test_mesh_knapsack.py checks the
    roles' dual against enumerated least work."""
    t, fill = _benchmark_tables(1000, 4, 5, B=16, P=15)
    both = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    with monkeypatch.context() as patch:
        dual = mesh_dual.dual_work
        patch.setattr(mesh_dual, "dual_work", lambda *args: dual(*args[:7], roles=False))
        without_roles = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    monkeypatch.setattr(mesh_bound, "host_boundary_us", lambda t: 0.0)
    without_boundaries = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    assert both >= 1.005 * without_roles, (both, without_roles)
    assert both >= 1.005 * without_boundaries, (both, without_boundaries)


def test_the_ends_own_work_raises_the_504_gpu_bound(monkeypatch):
    """The block that holds each end of the pipeline pays its own option's embedding or LM head in the stage-coupled
    work (mesh_dual.end_work), not the least of any host's: benchmarks/mesh_search.py's 504-GPU two-site fleet, B = 4,
    P = 25, whose every plan fills all three meshes' slots, the head 27.4 ms on the slowest and 10.9 ms on the fastest
    (measured 0.9903 -> 0.9927 of the optimum, 8.328 s: with its tail split that closes the candidate without a second
    solve; asserted: 0.2% higher). The bound stays below the exhaustive optima of the small fleets above, and tests/
    test_mesh_knapsack.py checks the dual with the ends against enumerated least work."""
    t, fill = _benchmark_tables(512, 2, 3, B=4, P=25)
    with_ends = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    monkeypatch.setattr(mesh_dual, "end_work", lambda hosts: [np.zeros((4, a["tau"].size)) for a in hosts])
    without = mesh_sites.site_set_bound(t, fill, stages=True).bound_us
    assert with_ends >= 1.002 * without, (with_ends, without)
