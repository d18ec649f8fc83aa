"""Issue 4: the CP-SAT planner against the exhaustive reference, feasible/infeasible triples, determinism."""

from __future__ import annotations

import functools
import random

import pytest
from exhaustive import exhaustive_best

from hgplan.costmodel.evaluate import evaluate
from hgplan.domain import Fleet, Link, NodeGroup, TrainingSettings, Transport
from hgplan.inputs import load_model
from hgplan.io import catalog
from hgplan.plan import ParallelConfig, Recompute
from hgplan.planner.costs import CostSource
from hgplan.planner.model import SolverParams, solve
from hgplan.planner.options import SearchOptions
from hgplan.planner.search import run_search
from hgplan.planner.tables import build_tables
from hgplan.validate import check_plan

GPUS = ["A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "L40S", "A10"]


def small_model(layers: int, hidden: int = 1024, heads: int = 16):
    text = (f"num_layers: {layers}\nhidden_size: {hidden}\nnum_attention_heads: {heads}\nvocab_size: 32000\n"
            "max_position_embeddings: 4096\nswiglu: true\nnormalization: RMSNorm\nuntie_embeddings_and_output_weights: true\n"
            "position_embedding_type: rope\nadd_bias_linear: false\nhidden_dropout: 0\nattention_dropout: 0\n")
    return load_model(text, "small")


def random_fleet(rng: random.Random) -> Fleet:
    cat = catalog()
    n_groups = rng.randint(2, 4)
    groups, links = [], []
    budget = 64
    sites = ["a", "b"]
    for i in range(n_groups):
        gpu = cat.gpu_type(cat.gpus[rng.choice(GPUS)])
        per_node = rng.choice([4, 8])
        room = (budget - 4 * (n_groups - i - 1)) // per_node  # leave at least one 4-GPU node for each later group
        nodes = rng.randint(1, max(1, min(2, room)))
        budget -= nodes * per_node
        site = sites[i % 2] if rng.random() < 0.5 else "a"
        groups.append(NodeGroup(site=site, name=f"g{i}", num_nodes=nodes, gpu=gpu, gpus_per_node=per_node,
                                intra_node_kind=gpu.intra_node_kind, intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s,
                                nic_transport=Transport.INFINIBAND, nic_gbps=rng.choice([100, 200, 400]),
                                nic_count=rng.choice([1, 4, 8]), gpu_hour_usd=None, order=i))
    if any(g.site == "b" for g in groups):
        links.append(Link(scope="site", a="a", b="b", gbps=rng.choice([10, 100]), latency_ms=rng.choice([1, 20]),
                          transport=Transport.ETHERNET, egress_usd_per_gb=None))
    return Fleet(name="random", groups=tuple(groups), links=tuple(links), transports=cat.transports)


@functools.cache
def exhaustive_case(seed: int):
    """A random fleet (2-4 groups, <= 64 GPUs, <= 24 layers), its search options and the exhaustive optimum, computed
    once per seed for every test that needs it (whatever order the tests run in)."""
    rng = random.Random(seed)
    fleet = random_fleet(rng)
    model = small_model(rng.choice([8, 12, 16, 24]), hidden=rng.choice([4096, 5120]), heads=32)
    train = TrainingSettings(seq_length=4096, global_batch_size=rng.choice([32, 64]))
    opts = SearchOptions(top_k=1, budget_s=120, per_solve_s=30, max_gap=0.0, solve_gap=0.0, max_pp=4,
                         mbs_options=(1, 2), recompute_options=(Recompute.NONE, Recompute.FULL))
    best_us, best = exhaustive_best(fleet, model, train, opts)
    return fleet, model, train, opts, best_us, best


@pytest.mark.parametrize("seed", range(20))
def test_planner_matches_exhaustive_optimum(seed):
    """On 20 random fleets CP-SAT finds the exhaustive optimum of the same integer tables."""
    fleet, model, train, opts, best_us, best = exhaustive_case(seed)
    assert fleet.num_gpus <= 64
    res = run_search(fleet, model, train, opts)
    if best is None:
        assert not res.found
        return
    assert res.found, "the planner found nothing where the exhaustive search found a plan"
    # Same integer tables, so the objectives are equal; 1 us of slack because the search reports time_us as the
    # v-scaled integer objective divided by v.
    assert res.found[0].time_us == pytest.approx(best_us, abs=1.0)
    assert res.gap == pytest.approx(0.0, abs=1e-9)  # solved to optimality with max_gap = solve_gap = 0
    plan = res.found[0].plan()
    assert check_plan(plan, fleet, model, train) == []
    assert evaluate(plan, fleet, model, train).fits


def test_cross_check_covers_multi_group_optima():
    """The exhaustive cross-check must exercise placements over several groups, not only single-group plans
    (10 of the 20 fleets when last measured; at least 5 are required)."""
    multi = [seed for seed in range(20) if (case := exhaustive_case(seed))[5] is not None and len(set(case[5][1])) > 1]
    assert len(multi) >= 5, multi


def _two_group_tables(**kw):
    cat = catalog()
    from hgplan.inputs import load_cluster
    fleet, _ = load_cluster(cat.cluster_texts["two-site"], "two-site", cat)
    model = load_model(cat.model_texts["llama3.1-8b"], "m")
    train = TrainingSettings(seq_length=4096, global_batch_size=256)
    cfg = ParallelConfig(tp=8, pp=4, dp=2, micro_batch_size=1, recompute=Recompute.SELECTIVE, sequence_parallel=True,
                         zero_stage=1, **kw)
    return build_tables(CostSource(fleet, model, train), cfg, list(fleet.groups))


def test_triple_trivially_feasible():
    """A roomy instance solves to OPTIMAL and its objective matches the table's own evaluation."""
    t = _two_group_tables()
    sol = solve(t, SolverParams())
    assert sol.status == "OPTIMAL"
    assert t.objective(list(sol.assign), list(sol.layers)) == sol.objective


def test_triple_forced_violation_is_infeasible():
    """Capacity shrunk below any stage's need: INFEASIBLE."""
    from dataclasses import replace
    t = _two_group_tables()
    t = replace(t, cap_mib=tuple(1 for _ in t.cap_mib))
    assert solve(t, SolverParams()).status == "INFEASIBLE"


def test_triple_forced_satisfaction_is_feasible():
    """Only one group may host stages (others given zero slots): the solver places all stages there."""
    from dataclasses import replace
    t = _two_group_tables()
    t = replace(t, slots=(t.slots[0], 0))
    sol = solve(t, SolverParams())
    assert sol.status == "OPTIMAL" and set(sol.assign) == {0}


def test_contiguity_is_enforced():
    t = _two_group_tables()
    assert t.objective([0, 1, 0, 1], [8, 8, 8, 8]) is None
    assert t.objective([0, 0, 1, 1], [8, 8, 8, 8]) is not None


def test_interleaved_candidate_solves():
    t = _two_group_tables(vpp=2)
    sol = solve(t, SolverParams())
    assert sol.status == "OPTIMAL" and all(n % 2 == 0 for n in sol.layers)


def random_multisite_fleet(rng: random.Random) -> Fleet:
    """2-5 small groups over up to three sites, with WAN links of random speed and latency (one may be missing)."""
    cat = catalog()
    groups = []
    for i in range(rng.randint(2, 5)):
        gpu = cat.gpu_type(cat.gpus[rng.choice(GPUS)])
        groups.append(NodeGroup(site=rng.choice("abc"), name=f"g{i}", num_nodes=rng.randint(1, 3), gpu=gpu,
                                gpus_per_node=rng.choice([2, 4]), intra_node_kind=gpu.intra_node_kind,
                                intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s, nic_transport=Transport.INFINIBAND,
                                nic_gbps=rng.choice([100, 200, 400]), nic_count=rng.choice([1, 2]), gpu_hour_usd=None,
                                order=i))
    used = sorted({g.site for g in groups})
    links = [Link(scope="site", a=a, b=b, gbps=rng.choice([10, 100, 400]), latency_ms=rng.choice([0.5, 5, 20]),
                  transport=Transport.ETHERNET, egress_usd_per_gb=None)
             for i, a in enumerate(used) for b in used[i + 1:] if len(used) == 2 or rng.random() < 0.8]
    return Fleet(name="random-multisite", groups=tuple(groups), links=tuple(links), transports=cat.transports)


@pytest.mark.parametrize("seed", range(6))
def test_lower_bounds_never_exceed_the_exhaustive_optimum(seed):
    """Every bound the search prunes with (per candidate, per group set, and the block bound) is at most the best
    plan the exhaustive search finds on that candidate and group set; a bound above it could prune the optimum."""
    from dataclasses import replace

    from exhaustive import best_for_tables

    from hgplan.planner.block_bound import block_bound_us
    from hgplan.planner.subset_split import subset_bounds_us
    from hgplan.planner.candidates import enumerate_candidates

    rng = random.Random(1000 + seed)
    fleet = random_multisite_fleet(rng)
    model = small_model(rng.choice([6, 8, 12]), hidden=rng.choice([2048, 4096]), heads=32)
    train = TrainingSettings(seq_length=2048, global_batch_size=rng.choice([16, 32, 64]))
    opts = SearchOptions(max_pp=5, mbs_options=(1, 2), recompute_options=(Recompute.NONE, Recompute.FULL))
    by_key = {g.key: g for g in fleet.groups}
    checked = tight = 0
    for cand in enumerate_candidates(CostSource(fleet, model, train), opts, list(fleet.groups))[0]:
        m = cand.cfg.num_microbatches(train.global_batch_size)
        whole = build_tables(CostSource(fleet, model, train), cand.cfg, list(fleet.groups))
        best_any = best_for_tables(whole) if whole else None
        if best_any is not None:
            assert cand.lower_bound_us <= best_any[0] / cand.cfg.vpp + 1
        for subset, sub_lb in subset_bounds_us(cand.ctx, cand.cfg, L=model.num_layers, m=m).items():
            tables = build_tables(CostSource(fleet, model, train), cand.cfg, [by_key[k] for k in subset])
            if tables is None or len(tables.groups) != len(subset):
                continue
            best = best_for_tables(replace(tables, require_all=True))
            if best is None:
                continue
            optimum = best[0] / cand.cfg.vpp
            block = block_bound_us(cand.ctx, cand.cfg, subset, L=model.num_layers, m=m)
            assert sub_lb <= optimum + 1, (cand.cfg, subset)
            assert block <= optimum + 1, (cand.cfg, subset)
            checked += 1
            tight += block >= 0.97 * optimum
    assert checked >= 50
    # the block bound is also close, not merely valid: within 3% of the optimum on at least a quarter of the items
    # (about half when last measured)
    assert tight >= checked // 4, (tight, checked)


def _sites_of_threes(wan_gbps: int) -> Fleet:
    """Two sites of three interchangeable 4-GPU groups each (H100 in one, A100 in the other) joined by a slow WAN
    (10 us latency, so that the sends, not 1F1B's loops through the latency, set the optimum): each group's two
    cheapest partners are its neighbours in the site, so only the sites' structure says that the WAN is paid."""
    cat = catalog()
    groups = [NodeGroup(site=site, name=f"g{i}", num_nodes=1, gpu=cat.gpu_type(cat.gpus[gpu]), gpus_per_node=4,
                        intra_node_kind="nvlink", intra_node_gbytes_per_s=300, nic_transport=Transport.INFINIBAND,
                        nic_gbps=200, nic_count=1, gpu_hour_usd=None, order=i)
              for i, (site, gpu) in enumerate([("a", "H100-SXM5-80GB")] * 3 + [("b", "A100-SXM4-80GB")] * 3)]
    links = [Link(scope="site", a="a", b="b", gbps=wan_gbps, latency_ms=0.01, transport=Transport.ETHERNET,
                  egress_usd_per_gb=None)]
    return Fleet(name="sites-of-threes", groups=tuple(groups), links=tuple(links), transports=cat.transports)


def test_block_bound_charges_the_wan_ends_of_every_site():
    """On groups whose cheapest partners sit in their own site, the block bound still charges the WAN sends at the
    block ends that leave and enter each site (a path: at least one per site; interleaved, a ring: two): it stays at
    or below the exhaustive optimum of every (candidate, group set), and within 3% of it on five sixths of the
    items over both sites."""
    from dataclasses import replace

    from exhaustive import best_for_tables

    from hgplan.planner.block_bound import block_bound_us
    from hgplan.planner.subset_split import subset_bounds_us
    from hgplan.planner.candidates import enumerate_candidates

    fleet = _sites_of_threes(wan_gbps=10)
    model = small_model(16, hidden=4096, heads=32)
    train = TrainingSettings(seq_length=2048, global_batch_size=32)
    costs = CostSource(fleet, model, train)
    opts = SearchOptions(max_pp=6, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
    by_key = {g.key: g for g in fleet.groups}
    tight = crossing = 0
    for cand in enumerate_candidates(costs, opts, list(fleet.groups))[0]:
        m = cand.cfg.num_microbatches(train.global_batch_size)
        for subset in subset_bounds_us(cand.ctx, cand.cfg, L=model.num_layers, m=m):
            tables = build_tables(costs, cand.cfg, [by_key[k] for k in subset])
            best = best_for_tables(replace(tables, require_all=True))
            if best is None:
                continue
            optimum = best[0] / cand.cfg.vpp
            bound = block_bound_us(cand.ctx, cand.cfg, subset, L=model.num_layers, m=m)
            assert bound <= optimum + 1, (cand.cfg, subset, bound, optimum)
            if len({k[0] for k in subset}) == 2:
                crossing += 1
                tight += bound >= 0.97 * optimum
    # measured: 12 of 13 within 3%; without the sites' WAN ends 8 of 13
    assert crossing >= 10 and tight >= crossing * 5 // 6, (tight, crossing)


def test_integer_cycle_bound_matches_its_definition():
    """The breakpoint walk returns the smallest cycle whose whole-chunk capacity holds the layers."""
    import math

    from hgplan.planner.bounds import integer_cycle_bound

    rng = random.Random(7)
    for _ in range(2000):
        v = rng.choice([1, 2, 3])
        layers = v * rng.randint(1, 30)
        slots = [(rng.uniform(0.001, 0.05), rng.randint(1, 6), rng.choice([0.0, rng.uniform(0, 0.1)]))
                 for _ in range(rng.randint(1, 4))]
        points = sorted(e + j * v * tau for tau, _, e in slots for j in range(1, layers // v + 1))

        def holds(c):
            return sum(n * v * math.floor((c - e) / (v * tau) + 1e-9) for tau, n, e in slots if c >= e) >= layers

        expected = next(c for c in points if holds(c))
        assert integer_cycle_bound(slots, layers, v) == pytest.approx(expected, rel=1e-9)


def test_layer_split_heuristic_against_every_split():
    """For fixed placements on random fleets, best_layers finds a valid split whenever any split fits, and the
    best one on most placements (it balances the cycle and the work; the DP tail it only checks)."""
    from exhaustive import block_placements, compositions

    from hgplan.planner.candidates import enumerate_candidates
    from hgplan.planner.heuristic import best_layers, greedy_hint, improve

    exact = total = 0
    for seed in range(6):
        rng = random.Random(seed)
        fleet = random_fleet(rng)
        model = small_model(rng.choice([8, 12, 16, 24]), hidden=rng.choice([4096, 5120]), heads=32)
        train = TrainingSettings(seq_length=4096, global_batch_size=rng.choice([32, 64]))
        opts = SearchOptions(max_pp=4, mbs_options=(1, 2), recompute_options=(Recompute.NONE, Recompute.FULL))
        for cand in enumerate_candidates(CostSource(fleet, model, train), opts, list(fleet.groups))[0][:30]:
            tables = build_tables(CostSource(fleet, model, train), cand.cfg, list(fleet.groups))
            if tables is None:
                continue
            splits = compositions(tables.num_layers // tables.vpp, tables.pp) * tables.vpp
            for assign in block_placements(tables)[:8]:
                objectives = [o for o in (tables.objective(assign, [int(x) for x in s]) for s in splits) if o is not None]
                found = best_layers(tables, assign)
                if not objectives:
                    assert found is None
                    continue
                assert found is not None and tables.objective(assign, found[1]) == found[0]
                total += 1
                exact += found[0] == min(objectives)
            start = greedy_hint(tables, [g.key for g in fleet.groups])
            better = improve(tables, start)
            if tables.objective(*start) is not None:
                assert tables.objective(*better) <= tables.objective(*start)
    assert total >= 200
    # the heuristic balances cycle and work but only checks the DP tail, so it may miss the optimum on some placements;
    # it found it on about 90% when last measured
    assert exact >= 0.85 * total, (exact, total)


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_tables_tail_matches_the_cost_model_where_stages_sit(pp):
    """The tables' data-parallel tail is the cost model's at the layer counts a stage holds: exact for a one-stage
    pipeline (its tail was charged 42 ms against 228 ms when the line went through 1 and 2 layers), within 2% of the
    closed form's iteration time for an even split of a deeper pipeline."""
    from hgplan.plan import Plan, StageAssignment

    cat = catalog()
    gpu = cat.gpu_type(cat.gpus["H100-SXM5-80GB"])
    group = NodeGroup(site="a", name="g", num_nodes=128, gpu=gpu, gpus_per_node=8, intra_node_kind=gpu.intra_node_kind,
                      intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s, nic_transport=Transport.INFINIBAND,
                      nic_gbps=400, nic_count=8, gpu_hour_usd=None, order=0)
    fleet = Fleet(name="one", groups=(group,), links=(), transports=cat.transports)
    model = load_model(cat.model_texts["llama3.1-70b"], "llama3.1-70b")
    train = TrainingSettings(seq_length=4096, global_batch_size=512)
    cfg = ParallelConfig(tp=8, pp=pp, dp=128 // pp, micro_batch_size=1, recompute=Recompute.NONE,
                         sequence_parallel=True, zero_stage=1, overlap_grad_reduce=True)
    tables = build_tables(CostSource(fleet, model, train), cfg, [group])
    layers = [model.num_layers // pp] * pp
    objective_s = tables.objective([0] * pp, layers) / 1e6
    plan = Plan(config=cfg, stages=tuple(StageAssignment(node_group=group.key, num_layers=n) for n in layers))
    closed_s = evaluate(plan, fleet, model, train, use_simulator=False).iteration_time_s
    assert objective_s == pytest.approx(closed_s, rel=0.001 if pp == 1 else 0.02)


GARAGE = """name: garage
sites:
  - name: a
    node_groups:
      - {name: g4090, count: 4, gpu: RTX-4090, gpus_per_node: 8, nics: {transport: ethernet, gbps: 25, count: 1}}
  - name: b
    node_groups:
      - {name: g3090, count: 4, gpu: RTX-3090, gpus_per_node: 4, nics: {transport: ethernet, gbps: 10, count: 1}}
links:
  - {between: [a, b], gbps: 1, latency_ms: 15}
"""


def test_interleaving_only_where_every_layer_fits_its_chunks():
    """With v virtual stages every stage holds a multiple of v layers, so a model whose layer count v does not divide
    has no interleaved plan: such candidates are not listed. Until 2026-11-29 they were, and on this fleet (33 layers,
    7 micro-batches, where interleaving pays) the warm start's layer split failed an assertion: exit 101."""
    from hgplan.inputs import load_cluster
    from hgplan.planner.candidates import enumerate_candidates
    fleet, _ = load_cluster(GARAGE, "garage", catalog())
    model = small_model(33, hidden=4096, heads=32)
    train = TrainingSettings(seq_length=2048, global_batch_size=7)
    opts = SearchOptions(budget_s=60)
    listed = enumerate_candidates(CostSource(fleet, model, train), opts, list(fleet.groups))[0]
    assert listed and all(c.cfg.vpp == 1 for c in listed)
    res = run_search(fleet, model, train, opts)
    assert res.found and all(not check_plan(f.plan(), fleet, model, train) for f in res.found)


def test_deeper_interleaving_on_request():
    """`--max-vpp`: gpt-145.6b on 512 H100s (global batch 256, SC'21's shape) runs fastest with pp 16 and 5 virtual
    stages (SC'21 trained it with 5), which the default, at most 2, leaves out; the plan is valid, its chunks hold
    every layer, and it simulates faster than the default's best."""
    cat = catalog()
    gpu = cat.gpu_type(cat.gpus["H100-SXM5-80GB"])
    fleet = Fleet(name="h512", groups=(NodeGroup(
        site="dc", name="h100", num_nodes=64, gpu=gpu, gpus_per_node=8, intra_node_kind=gpu.intra_node_kind,
        intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s, nic_transport=Transport.INFINIBAND, nic_gbps=400,
        nic_count=8, gpu_hour_usd=None, order=0),), links=(), transports=cat.transports)
    model = load_model(cat.model_texts["gpt-145.6b"], "gpt-145.6b")
    train = TrainingSettings(seq_length=2048, global_batch_size=256)
    plain = run_search(fleet, model, train, SearchOptions(budget_s=60)).found[0].plan()
    deep = run_search(fleet, model, train, SearchOptions(budget_s=60, vpp_options=tuple(range(1, 9)))).found[0].plan()
    assert plain.config.vpp <= 2 < deep.config.vpp and model.num_layers % deep.config.vpp == 0
    assert not check_plan(deep, fleet, model, train)
    fast, slow = (evaluate(p, fleet, model, train).iteration_time_s for p in (deep, plain))
    assert fast < 0.95 * slow, (fast, slow)
