"""Issue 12: the mesh search (CP-SAT over (B, P), planner/mesh_search.py) against the exhaustive reference of the
asymmetric family on small random fleets, mixed vendors and tied embeddings included (all 24 in one site; the
multi-site fleets are tests/test_mesh_sites.py's)."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from unittest import mock

import pytest
from exhaustive_mesh import candidate_optima, exhaustive_mesh_best, unpruned_tables

from hgplan.costmodel.evaluate import evaluate
from hgplan.export.flagscale import export_flagscale
from hgplan.domain import Fleet, Link, NodeGroup, Precision, TrainingSettings, Transport
from hgplan.inputs import load_model
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner.costs import CostSource
from hgplan.planner import mesh_bound, mesh_first, mesh_knapsack, mesh_order
from hgplan.planner import mesh_search as mesh_search_module
from hgplan.planner.mesh_model import MeshSolution, pair_solves
from hgplan.planner.mesh_search import mesh_search
from hgplan.planner.mesh_tables import build_mesh_tables
from hgplan.planner.options import SearchOptions
from hgplan.validate import check_plan

GPUS = ["A100-SXM4-40GB", "V100-SXM2-32GB", "T4", "L4", "A10", "MI250X"]
FAST, SLOW = ["A100-SXM4-40GB", "A100-SXM4-80GB", "MI250X"], ["T4", "L4", "A10", "V100-SXM2-32GB"]
SEEDS = range(24)


def _model(layers: int, tied: bool):
    text = (f"num_layers: {layers}\nhidden_size: 4096\nnum_attention_heads: 32\nvocab_size: 50257\n"
            "max_position_embeddings: 2048\nswiglu: false\nnormalization: LayerNorm\n"
            f"untie_embeddings_and_output_weights: {'false' if tied else 'true'}\n"
            "position_embedding_type: learned_absolute\nadd_bias_linear: true\n")
    return load_model(text, "mesh-small")


def _fleet(rng: random.Random, fast_and_slow: bool) -> Fleet:
    """2-3 random groups of 1-2 four-GPU nodes; or (fast_and_slow) one node of a fast GPU beside 2-3 nodes of a
    slow one on the same fabric, the fleets where asymmetric plans pay."""
    cat = catalog()
    groups = []
    for i in range(2 if fast_and_slow else rng.choice([2, 2, 3])):
        name = rng.choice((FAST, SLOW)[i]) if fast_and_slow else rng.choice(GPUS)
        gpu = cat.gpu_type(cat.gpus[name])
        transport = Transport.INFINIBAND if fast_and_slow else rng.choice([Transport.INFINIBAND, Transport.ETHERNET])
        nodes = (1 if i == 0 else rng.randint(2, 3)) if fast_and_slow else rng.randint(1, 2)
        groups.append(NodeGroup(site="a" if i < 2 or rng.random() < 0.5 else "b", name=f"g{i}",
                                num_nodes=nodes, gpu=gpu, gpus_per_node=4,
                                intra_node_kind=gpu.intra_node_kind, intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s,
                                nic_transport=transport, nic_gbps=rng.choice([25, 100, 200]), nic_count=1,
                                gpu_hour_usd=None, order=i))
    # as the cluster loader requires: groups of one site on different fabrics get a link, sites get one
    links = [Link(scope="group", a=g.name, b=g2.name, gbps=rng.choice([25, 100]), latency_ms=0.05,
                  transport=Transport.ETHERNET, egress_usd_per_gb=None)
             for i, g in enumerate(groups) for g2 in groups[i + 1:]
             if g.site == g2.site and g.nic_transport != g2.nic_transport]
    if any(g.site == "b" for g in groups):
        links.append(Link(scope="site", a="a", b="b", gbps=rng.choice([10, 100]), latency_ms=rng.choice([1, 20]),
                          transport=Transport.ETHERNET, egress_usd_per_gb=None))
    return Fleet(name="random-mesh", groups=tuple(groups), links=tuple(links), transports=cat.transports)


@functools.cache
def case(seed: int):
    """A random fleet (2-3 groups of 4-12 GPUs), a small GPT (6-10 layers), its options and the exhaustive optimum,
    computed once per seed."""
    rng = random.Random(1000 + seed)
    fleet = _fleet(rng, fast_and_slow=seed % 2 == 0)
    model = _model(rng.choice([6, 8, 10]), tied=rng.random() < 0.5)
    train = TrainingSettings(seq_length=2048, global_batch_size=32, precision=Precision.FP16)
    opts = SearchOptions(budget_s=120, per_solve_s=30, max_gap=0.0, solve_gap=0.0, max_pp=3, tp_options=(1, 2),
                         recompute_options=(Recompute.NONE, Recompute.FULL))
    costs = CostSource(fleet, model, train)
    best_us, best = exhaustive_mesh_best(costs, list(fleet.groups), opts)
    return fleet, model, train, opts, costs, best_us, best


@pytest.mark.parametrize("seed", SEEDS)
def test_mesh_search_matches_exhaustive_optimum(seed):
    """From no incumbent, the mesh search finds the exhaustive optimum of the same tables, proves it (complete,
    bound = optimum) and returns a plan the validator and the cost model accept."""
    fleet, model, train, opts, costs, best_us, best = case(seed)
    res = mesh_search(costs, list(fleet.groups), opts, incumbent_us=math.inf)
    if best is None:
        assert not res.found
        return
    t, assign, choice, layers = best
    assert t.objective(assign, choice, layers) == best_us  # the reference mirrors the tables' closed form
    assert res.found, "the mesh search found nothing where the exhaustive search found a plan"
    assert res.best_us == best_us
    assert res.stopped_by == "complete"
    assert res.bound_us == pytest.approx(best_us, abs=1.0)
    plan = res.found[0].plan()
    assert check_plan(plan, fleet, model, train) == []
    assert evaluate(plan, fleet, model, train).fits
    if plan.asymmetric:  # FlagScale's rules (R1-R15) hold for what the search returns: the export writes it
        export_flagscale(plan, fleet, model, train)


def test_cross_check_covers_asymmetric_optima():
    """The cross-check must exercise optima whose meshes differ in tp, dp or recompute over several hosts, not
    only stock-shaped ones."""
    asym = [s for s in SEEDS if (b := case(s)[6]) is not None
            and len({(b[0].options[h][o].tp, b[0].options[h][o].dp, b[0].options[h][o].recompute)
                     for h, o in b[2].items()}) > 1]
    assert len(asym) >= 5, asym


@functools.cache
def optima(seed: int, B: int, P: int):
    """(best objective us, least cycle us) over the unpruned tables of one candidate of a seed's fleet, or None
    without tables: the deep bound test and the ordered-cycle test share the candidates of 4 to 6 stages."""
    fleet, _, _, opts, costs, _, _ = case(seed)
    full = unpruned_tables(costs, B, P, list(fleet.groups), opts)
    if full is None:
        return None
    best_us, _, cycle_us = candidate_optima(full)
    return best_us, cycle_us


@functools.cache
def candidate_bounds(seed: int, deep: bool = False) -> list[tuple[int, int, float, float, float, float]]:
    """(B, P, bound with the work term, bound without it, stage-coupled bound, exhaustive optimum) of every
    candidate of a seed's fleet: the bounds from the pruned tables the search uses, the optimum over every option
    (unpruned tables); deep: the pipelines of 4 to 6 stages instead of the test's 1 to 3."""
    fleet, model, train, opts, costs, _, _ = case(seed)
    groups = list(fleet.groups)
    if deep:
        opts = dataclasses.replace(opts, max_pp=6)
    _, fills, _ = mesh_first.first_bounds(costs, groups, opts)
    out = []
    for B, fill in fills.items():
        for P in range(4 if deep else 1, min(model.num_layers, opts.max_pp) + 1):
            t, exact = build_mesh_tables(costs, B, P, groups, opts), optima(seed, B, P)
            if t is None or exact is None:
                continue
            with_work = mesh_bound.candidate_bound(t, fill).bound_us
            staged = mesh_bound.candidate_bound(t, fill, stages=True).bound_us
            with mock.patch.object(mesh_bound, "_least_work_us", lambda *a: -math.inf):
                without = mesh_bound.candidate_bound(t, fill).bound_us
            out.append((B, P, with_work, without, staged, exact[0]))
    return out


@pytest.mark.parametrize("seed", SEEDS[::2])
def test_tables_bound_below_every_candidates_optimum(seed):
    """The candidate bound (planner/mesh_bound.py), work term included, stage-coupled or not, never exceeds the
    candidate's exhaustive optimum: the search prunes and certifies with it."""
    for B, P, bound, _, staged, best in candidate_bounds(seed):
        assert bound <= staged <= best + 1e-6, (B, P, bound, staged, best)


@pytest.mark.parametrize("seed", SEEDS[1::2])
def test_stage_coupled_bound_below_the_optimum_of_deeper_pipelines(seed):
    """The stage coupling matters most when the pipeline has more stages than the fastest hosts can take: on 4 to 6
    stages the stage-coupled bound stays at or below each candidate's exhaustive optimum too."""
    for B, P, bound, _, staged, best in candidate_bounds(seed, deep=True):
        assert bound <= staged <= best + 1e-6, (B, P, bound, staged, best)


def test_work_term_raises_the_bound():
    """Near the least cycle the fastest hosts cannot hold every layer, so the work W(c) of the cycle's placement is
    above L layers at the fastest rate: the bound with that term is higher on many candidates."""
    rows = [r for s in SEEDS[::2] for r in candidate_bounds(s)]
    raised = [r for r in rows if r[2] > r[3] + 1.0]
    assert all(r[2] >= r[3] for r in rows)
    assert len(raised) >= len(rows) // 5, (len(raised), len(rows))


def test_stage_coupling_raises_the_bound():
    """The greedy work term lets the fastest hosts hold their most layers whatever stages are left for them; with
    the stage count coupled (the dual over a price per layer) the bound is higher on most deep candidates."""
    rows = [r for s in SEEDS[1::2] for r in candidate_bounds(s, deep=True)]
    raised = [r for r in rows if r[4] > r[2] + 1.0]
    assert len(raised) >= len(rows) // 2, (len(raised), len(rows))


def test_memory_matrix_is_memory_layers_at_once():
    """MeshTables.memory_matrix (what the bounds read) is memory_layers (what the objective and the CP-SAT model read)
    for every stage and option, so the two cannot drift apart."""
    checked = 0
    for seed in SEEDS[:6]:
        fleet, model, _, opts, costs, _, _ = case(seed)
        for B in mesh_first.first_bounds(costs, list(fleet.groups), opts)[1]:
            for P in (1, 3):
                t = build_mesh_tables(costs, B, P, list(fleet.groups), opts)
                for h in range(len(t.hosts) if t else 0):
                    want = [[t.memory_layers(s, h, o) for o in range(len(t.options[h]))] for s in range(P)]
                    assert t.memory_matrix(h).tolist() == want, (seed, B, P, h)
                    checked += 1
    assert checked >= 20


def _least_order_free_cycle(t) -> float:
    """The order-free knapsack's least cycle (planner/mesh_bound.py), to 1 us."""
    hosts = [a for h in range(len(t.hosts)) if (a := mesh_bound._host_arrays(t, h)) is not None]
    lo, hi = 0.0, 1e9
    while hi - lo > 1.0:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if mesh_bound._capacity(hosts, mid, t.pp) >= t.num_layers else (mid, hi)
    return lo


@functools.cache
def ordered_cycles(seed: int) -> list[tuple[int, int, float, float, float]]:
    """(B, P, order-free least cycle, ordered least cycle, least cycle of any plan) of every candidate of 2 to 6
    stages of a seed's fleet."""
    fleet, model, train, opts, costs, _, _ = case(seed)
    groups, opts = list(fleet.groups), dataclasses.replace(opts, max_pp=6)
    out = []
    for B in mesh_first.first_bounds(costs, groups, opts)[1]:
        for P in range(2, min(model.num_layers, 6) + 1):
            t, exact = build_mesh_tables(costs, B, P, groups, opts), optima(seed, B, P)
            if t is None or exact is None or (order := mesh_order.order_hosts(t)) is None:
                continue
            ordered = mesh_order.least_ordered_cycle(order, P, t.num_layers, 0.0, 1e9, 1.0)[0]
            out.append((B, P, _least_order_free_cycle(t), ordered, exact[1]))
    return out


@pytest.mark.parametrize("seed", SEEDS[::3])
def test_ordered_cycle_is_a_lower_bound_of_every_plans_cycle(seed):
    """The ordered capacity (planner/mesh_order.py: hosts in pipeline order, each block's ends priced by its
    neighbours, memory by position) never puts the least cycle above that of a plan the exhaustive search finds,
    and never below the order-free knapsack's."""
    rows = ordered_cycles(seed)
    assert rows
    for B, P, free, ordered, plan in rows:
        assert free - 1.0 <= ordered <= plan + 1e-6, (B, P, free, ordered, plan)


def test_ordered_cycle_raises_the_order_free_one():
    """Where one host is reached only over slower links, or early stages fit fewer layers, the ordered least cycle
    is above the order-free one. Of the candidates whose order-free cycle is over 1% below the best plan's, it
    raises 51 of 81 and closes a median 61% of the distance (measured); asserted: half, and a median of 40%."""
    rows = [r for s in SEEDS[::3] for r in ordered_cycles(s) if r[4] > r[2] * 1.01]
    raised = [r for r in rows if r[3] > r[2] + 1.0]
    assert len(raised) >= len(rows) // 2, (len(raised), len(rows))
    closed = sorted((r[3] - r[2]) / (r[4] - r[2]) if math.isfinite(r[4]) else 1.0 for r in rows)
    assert closed[len(closed) // 2] >= 0.4, closed


def test_a_solve_stopped_by_its_limit_is_retried_with_twice_the_time():
    """A candidate whose solve ends at its limit without a proof goes back on the heap with its bound and is solved
    again with twice the deterministic time when it is again the weakest bound; the search still proves the
    exhaustive optimum (before, such a candidate's weak CP-SAT bound became the reported gap: 17% on mixed-nic).
    The try's limit is per SOLVE_THREADS pairs of end hosts (mesh_model.pair_solves), and its retry may have fewer."""
    fleet, model, train, opts, costs, best_us, best = case(1)
    opts = dataclasses.replace(opts, budget_s=10 * opts.budget_s)  # a retry's limit below what the budget has left
    real, calls = mesh_search_module.solve_mesh, []

    def first_stops(t, params, **kw):
        calls.append(((t.pp, t.microbatches), params.max_deterministic_time / pair_solves(t, kw["cuts"])))
        if sum(c[0] == (t.pp, t.microbatches) for c in calls) == 1:
            return MeshSolution(status="UNKNOWN", objective=None, bound=0.0, assign=(), choice=(), layers=(),
                                deterministic_time=0.0, wall_time_s=0.0)
        return real(t, params, **kw)

    with mock.patch.object(mesh_search_module, "solve_mesh", first_stops):
        res = mesh_search(costs, list(fleet.groups), opts, incumbent_us=math.inf)
    retried = {c[0] for c in calls if sum(d[0] == c[0] for d in calls) > 1}
    assert retried
    for key in retried:
        limits = [lim for k, lim in calls if k == key]
        assert limits[1] == pytest.approx(2 * limits[0])
    assert res.stopped_by == "complete"
    assert res.best_us == best_us
    assert res.bound_us == pytest.approx(best_us, abs=1.0)


def test_interchangeable_hosts_share_their_bound_work_and_the_bound_is_unchanged():
    """mesh_bound computes the per-host terms of interchangeable node groups once (mesh_knapsack.shared): on a fleet
    of eight groups in two classes and one more alike but for its size (search_scaling's synthetic rack-by-rack
    fleet), every candidate's bound, order-free and stage-coupled, is what the same bound gives with every host on its
    own."""
    from search_scaling import synthetic

    from test_planner import small_model

    base = synthetic(128, 2, 2, 8)  # eight groups of two nodes; the first gets four: alike but for its size
    fleet = dataclasses.replace(base, groups=(dataclasses.replace(base.groups[0], num_nodes=4), *base.groups[1:]))
    model = small_model(16, hidden=2048, heads=16)
    train = TrainingSettings(seq_length=2048, global_batch_size=64)
    opts = SearchOptions(max_pp=8, tp_options=(1, 2), recompute_options=(Recompute.NONE,))
    costs, groups = CostSource(fleet, model, train), list(fleet.groups)
    checked = shared = 0
    for B in sorted(mesh_first.first_bounds(costs, groups, opts)[1])[:4]:
        for P in (2, 4, 8):
            t = build_mesh_tables(costs, B, P, groups, opts)
            if t is None:
                continue
            hosts = mesh_knapsack.shared([a for h in range(len(t.hosts)) if (a := mesh_bound._host_arrays(t, h))])
            shared += len(hosts) - len({id(a) for a in hosts})
            for stages in (False, True):
                fast = mesh_bound.candidate_bound(t, 0.0, stages=stages)
                with mock.patch.object(mesh_bound, "shared", lambda hosts: hosts):
                    assert mesh_bound.candidate_bound(t, 0.0, stages=stages) == fast, (B, P, stages)
                checked += math.isfinite(fast.bound_us)
    assert checked >= 6 and shared > 0, (checked, shared)
