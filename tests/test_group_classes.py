"""Issue 11 (any fleet shape): interchangeable node groups are enumerated once per class, and nothing is lost."""

from __future__ import annotations

import itertools
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from exhaustive import exhaustive_best
from test_planner import small_model

from hgplan.domain import Fleet, Link, NodeGroup, TrainingSettings, Transport
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner.subset_split import subset_bounds_us
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.classes import alone_alike, canonical_subsets, interchangeable_classes
from hgplan.planner.costs import CostSource
from hgplan.planner.options import SearchOptions
from hgplan.planner.search import run_search

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from search_scaling import synthetic  # noqa: E402


def group(name: str, site: str, gpu_id: str, nodes: int, **kw) -> NodeGroup:
    gpu = catalog().gpu_type(catalog().gpus[gpu_id])
    return NodeGroup(site=site, name=name, num_nodes=nodes, gpu=gpu, gpus_per_node=kw.get("per_node", 8),
                     intra_node_kind=gpu.intra_node_kind, intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s,
                     nic_transport=Transport.INFINIBAND, nic_gbps=kw.get("nic_gbps", 200), nic_count=4,
                     gpu_hour_usd=None, order=kw.get("order", 0))


def fleet_of(*groups: NodeGroup, links: tuple[Link, ...] = ()) -> Fleet:
    return Fleet(name="t", groups=groups, links=links, transports=catalog().transports)


WAN = Link(scope="site", a="a", b="b", gbps=100, latency_ms=10, transport=Transport.ETHERNET, egress_usd_per_gb=None)


def test_sixteen_groups_in_four_classes():
    fleet = synthetic(1024, 4, 4, 16)
    classes = interchangeable_classes(fleet, fleet.groups)
    assert len(classes) == 4 and all(len(c) == 4 for c in classes)
    assert all(len({k.split("/")[0] for k in c}) == 1 for c in classes)  # a class never spans sites
    assert len(list(canonical_subsets(classes))) == 5 ** 4 - 1


def test_the_stage_test_prunes_without_losing_or_reordering_a_set():
    """canonical_subsets with `stages` skips branches of the count vectors that cannot pass; what it yields is the
    whole product filtered by the test (at most `stages` groups, at least `stages` slots), in the same order."""
    rng = random.Random(7)
    for _ in range(500):
        classes = [[f"c{i}/g{j}" for j in range(rng.randint(1, 6))] for i in range(rng.randint(1, 5))]
        slots = [rng.randint(0, 4) for _ in classes]
        stages = rng.choice([1, 2, 3, 5, 8, 13, 30])
        want = [tuple(sorted(k for c, n in zip(classes, counts) for k in c[:n]))
                for counts in itertools.product(*(range(len(c) + 1) for c in classes))
                if any(counts) and sum(counts) <= stages and sum(n * s for n, s in zip(counts, slots)) >= stages]
        assert list(canonical_subsets(classes, slots=slots, stages=stages)) == want, (classes, slots, stages)


def test_what_makes_groups_different():
    same = [group("x", "a", "A100-SXM4-80GB", 2), group("y", "a", "A100-SXM4-80GB", 2, order=5)]
    assert interchangeable_classes(fleet_of(*same), same) == (("a/x", "a/y"),)  # file order does not matter
    for other in (group("y", "b", "A100-SXM4-80GB", 2), group("y", "a", "A100-SXM4-40GB", 2),
                  group("y", "a", "A100-SXM4-80GB", 3), group("y", "a", "A100-SXM4-80GB", 2, nic_gbps=100),
                  group("y", "a", "A100-SXM4-80GB", 2, per_node=4)):
        pair = [same[0], other]
        assert len(interchangeable_classes(fleet_of(*pair, links=(WAN,)), pair)) == 2, other
    island = Link(scope="group", a="x", b="z", gbps=100, latency_ms=0.01, transport=Transport.ETHERNET,
                  egress_usd_per_gb=None)
    three = [*same, group("z", "a", "A100-SXM4-80GB", 2)]
    assert interchangeable_classes(fleet_of(*three, links=(island,)), three) == (("a/x",), ("a/y",), ("a/z",))


def _mixed_fleet() -> Fleet:
    return fleet_of(group("h1", "a", "H100-SXM5-80GB", 1), group("h2", "a", "H100-SXM5-80GB", 1),
                    group("h3", "a", "H100-SXM5-80GB", 1), group("l", "b", "A100-SXM4-40GB", 1, per_node=4),
                    links=(WAN,))


def test_class_bounds_equal_the_bounds_of_every_set_they_stand_for():
    """The bound of a set of groups is the bound of its canonical image: computed with every group a class of its
    own, every set's bound equals the one the class-aware enumeration keeps for its image."""
    fleet = _mixed_fleet()
    model, train = small_model(16, hidden=4096, heads=32), TrainingSettings(seq_length=4096, global_batch_size=32)
    costs = CostSource(fleet, model, train)
    opts = SearchOptions(max_pp=4, mbs_options=(1,), recompute_options=(Recompute.NONE,))
    cands, _ = enumerate_candidates(costs, opts, list(fleet.groups))
    assert cands
    checked = 0
    for cand in cands[:40]:
        m = cand.cfg.num_microbatches(train.global_batch_size)
        with_classes = subset_bounds_us(cand.ctx, cand.cfg, L=model.num_layers, m=m)
        singletons = tuple((k,) for k in sorted(cand.ctx.groups))  # every group a class of its own
        alone = subset_bounds_us(replace(cand.ctx, classes=singletons), cand.cfg, L=model.num_layers, m=m)
        assert set(with_classes) <= set(alone)
        for subset, bound in alone.items():
            hs = sorted(k for k in subset if k.startswith("a/h"))
            image = tuple(sorted([f"a/h{i + 1}" for i in range(len(hs))] + [k for k in subset if k not in hs]))
            assert with_classes[image] == pytest.approx(bound, rel=1e-12)
            checked += 1
    assert checked > 100


def test_search_with_classes_finds_the_exhaustive_optimum():
    fleet = _mixed_fleet()
    model, train = small_model(12, hidden=4096, heads=32), TrainingSettings(seq_length=4096, global_batch_size=32)
    opts = SearchOptions(top_k=1, budget_s=120, per_solve_s=30, max_gap=0.0, solve_gap=0.0, max_pp=4,
                         mbs_options=(1, 2), recompute_options=(Recompute.NONE, Recompute.FULL))
    best_us, best = exhaustive_best(fleet, model, train, opts)
    res = run_search(fleet, model, train, opts)
    assert best is not None and res.found
    assert res.found[0].time_us == pytest.approx(best_us, abs=1.0)
    assert res.gap == pytest.approx(0.0, abs=1e-9)


def _alike_fleet() -> Fleet:
    """Three groups of the same nodes (x1, x3 an island of its own, x2 in another site), one of more nodes, one of
    other GPUs."""
    island = Link(scope="group", a="x3", b="y", gbps=100, latency_ms=0.01, transport=Transport.ETHERNET,
                  egress_usd_per_gb=None)
    groups = [group("y", "a", "A100-SXM4-40GB", 2), group("x2", "b", "A100-SXM4-80GB", 2),
              group("x1", "a", "A100-SXM4-80GB", 2), group("x3", "a", "A100-SXM4-80GB", 2),
              group("x4", "a", "A100-SXM4-80GB", 3)]
    return fleet_of(*groups, links=(WAN, island))


def test_groups_alike_but_for_their_site_are_searched_alone_once():
    """A group alone crosses no link: groups of the same nodes in two sites (or an island) plan alike alone, so the
    seeds search the first of them only; searched alone, the others give the same plans under other names."""
    fleet = _alike_fleet()
    assert alone_alike(fleet.groups) == ("a/x1", "a/x4", "a/y")
    # the 8-group benchmark fleet (docs/planner.md): five kinds of nodes, eight classes of interchangeable groups
    eight = synthetic(1024, 4, 5, 8)
    assert len(alone_alike(eight.groups)) == 5 and len(interchangeable_classes(eight, eight.groups)) == 8
    model, train = small_model(8, hidden=2048, heads=16), TrainingSettings(seq_length=2048, global_batch_size=32)
    opts = SearchOptions(top_k=3, max_pp=4, mbs_options=(1, 2))
    plans = {}
    for key in ("a/x1", "b/x2", "a/x3"):
        found = run_search(fleet, model, train, replace(opts, groups=(key,))).found
        plans[key] = [(f.time_us, f.cfg, [f.tables.groups[k].replace(key, "a/x1") for k in f.solution.assign],
                       f.solution.layers) for f in found]
    assert plans["a/x1"] and plans["b/x2"] == plans["a/x1"] == plans["a/x3"]


def test_groups_of_one_kind_share_their_own_costs():
    """A group's layer and edge work and its data-parallel tail depend on its nodes and their number, not on its site
    or links: groups alike but for their site share one kind in the cost cache, and what it holds for one is what a
    fresh cache computes for the other."""
    fleet = _alike_fleet()
    model, train = small_model(8, hidden=2048, heads=16), TrainingSettings(seq_length=2048, global_batch_size=32)
    cfg = next(c.cfg for c in enumerate_candidates(CostSource(fleet, model, train), SearchOptions(max_pp=2),
                                                   list(fleet.groups))[0] if c.cfg.pp == 2 and c.cfg.dp > 1)
    costs = CostSource(fleet, model, train)
    by_key = {g.key: g for g in fleet.groups}
    kinds = {k: costs.kind(g) for k, g in by_key.items()}
    assert kinds["a/x1"] == kinds["b/x2"] == kinds["a/x3"]
    assert len({kinds["a/x1"], kinds["a/x4"], kinds["a/y"]}) == 3
    for key in ("a/x1", "b/x2", "a/x3", "a/x4", "a/y"):
        fresh = CostSource(fleet, model, train)
        assert costs.group(by_key[key], cfg) == fresh.group(by_key[key], cfg)
        assert costs.tail(by_key[key], cfg) == fresh.tail(by_key[key], cfg)
        assert costs.tail_floor(by_key[key], cfg) == fresh.tail_floor(by_key[key], cfg)
    assert costs.tail(by_key["b/x2"], cfg) is costs.tail(by_key["a/x1"], cfg)
    assert costs.tail(by_key["a/x4"], cfg) is not costs.tail(by_key["a/x1"], cfg)  # three nodes: its own entry
