"""Issue 11 (search speed after 1F1B's loops): the lower bounds charge what every placement on a set of node groups
pays by its structure: the stages a slow group must host, and the slack 1F1B's loops leave next to a slow WAN.

Each test checks both directions against the exhaustive optimum of every (candidate, group set): never above it (a
bound above it could prune the optimum), and close to it where the structure alone decides (a bound that ignores
the structure stays far below: the figures measured without it are in each docstring)."""

from __future__ import annotations

from dataclasses import replace

from exhaustive import best_for_tables
from test_planner import small_model

from hgplan.domain import Fleet, Link, NodeGroup, TrainingSettings, Transport
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner.block_bound import block_bound_us
from hgplan.planner.subset_split import subset_bounds_us
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.options import SearchOptions
from hgplan.planner.tables import build_tables


def _group(i: int, site: str, gpu_id: str, nodes: int) -> NodeGroup:
    gpu = catalog().gpu_type(catalog().gpus[gpu_id])
    return NodeGroup(site=site, name=f"g{i}", num_nodes=nodes, gpu=gpu, gpus_per_node=4, intra_node_kind="nvlink",
                     intra_node_gbytes_per_s=300, nic_transport=Transport.INFINIBAND, nic_gbps=200, nic_count=1,
                     gpu_hour_usd=None, order=i)


def _items(fleet: Fleet, train: TrainingSettings, opts: SearchOptions, layers: int):
    """(candidate, group set, subset bound, block bound, exhaustive optimum) of every item that has a plan (us)."""
    model = small_model(layers, hidden=4096, heads=32)
    costs = CostSource(fleet, model, train)
    by_key = {g.key: g for g in fleet.groups}
    for cand in enumerate_candidates(costs, opts, list(fleet.groups))[0]:
        m = cand.cfg.num_microbatches(train.global_batch_size)
        for subset, sub_lb in subset_bounds_us(cand.ctx, cand.cfg, L=layers, m=m).items():
            tables = build_tables(costs, cand.cfg, [by_key[k] for k in subset])
            best = best_for_tables(replace(tables, require_all=True))
            if best is not None:
                yield (cand, subset, sub_lb, block_bound_us(cand.ctx, cand.cfg, subset, L=layers, m=m),
                       best[0] / cand.cfg.vpp)


def test_bounds_charge_the_stages_a_slow_group_must_host():
    """Two slots of H100 and six of A100-40GB: a pipeline of p >= 5 stages puts at least p - 2 of them on the slow
    group, each with at least v layers, whatever its speed. Both bounds count those layers at the slow group's rate.
    Measured: subset bound 0.84-0.93 of the optimum, block bound 0.98-0.99 (without: 0.72 and 0.95 at p = 8, v = 2)."""
    fleet = Fleet(name="must-host", groups=(_group(0, "a", "H100-SXM5-80GB", 1), _group(1, "a", "A100-SXM4-40GB", 3)),
                  links=(), transports=catalog().transports)
    train = TrainingSettings(seq_length=2048, global_batch_size=8)
    opts = SearchOptions(max_pp=8, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(2,))
    forced = 0
    for cand, subset, sub_lb, block, optimum in _items(fleet, train, opts, layers=16):
        assert sub_lb <= optimum + 1 and block <= optimum + 1, (cand.cfg, subset, sub_lb, block, optimum)
        if len(subset) == 2 and cand.cfg.pp >= 5:
            forced += 1
            assert sub_lb >= 0.8 * optimum and block >= 0.97 * optimum, (cand.cfg, sub_lb / optimum, block / optimum)
    assert forced >= 5


def island_fleet() -> Fleet:
    """Three sites 20 ms apart over 100 Gbit/s: two H100 groups in a, one A100 node in b, an H100 group in c."""
    spec = [("a", "H100-SXM5-80GB", 2), ("a", "H100-SXM5-80GB", 2), ("b", "A100-SXM4-80GB", 1),
            ("c", "H100-SXM5-80GB", 2)]
    links = tuple(Link(scope="site", a=a, b=b, gbps=100, latency_ms=20, transport=Transport.ETHERNET,
                       egress_usd_per_gb=None) for a, b in (("a", "b"), ("a", "c"), ("b", "c")))
    return Fleet(name="island", groups=tuple(_group(i, *s) for i, s in enumerate(spec)), links=links,
                 transports=catalog().transports)


def test_block_bound_charges_the_loops_around_the_wan():
    """Three sites 20 ms apart, the middle one a single A100 node: a pipeline over all three crosses the WAN twice
    and 1F1B's loops through those crossings force slack into the stages next to them (n C >= the run's demands
    plus twice its latencies). The block bound counts the layers that slack costs. Measured without interleaving:
    0.85-0.94 of the optimum over the six three-site items (0.45-0.52 before the loops' slack); with interleaving (no
    loops; the optimum charges the phase paths, the bound does not): 0.994-0.995."""
    train = TrainingSettings(seq_length=2048, global_batch_size=32)
    opts = SearchOptions(max_pp=6, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
    crossing = 0
    for cand, subset, sub_lb, block, optimum in _items(island_fleet(), train, opts, layers=16):
        assert sub_lb <= optimum + 1 and block <= optimum + 1, (cand.cfg, subset, sub_lb, block, optimum)
        if len({k[0] for k in subset}) == 3 and cand.cfg.vpp == 1:
            crossing += 1
            assert block >= 0.75 * optimum, (cand.cfg, subset, block / optimum)
    assert crossing >= 6


def _three_site_fleet(rng) -> Fleet:
    """Three or four groups of one or two 4-GPU nodes (H100, A100 or H200), one per site and a fourth anywhere, every
    pair of sites joined by a WAN of 2-20 ms."""
    gpus = ["H100-SXM5-80GB", "A100-SXM4-80GB", "A100-SXM4-40GB", "H200-SXM-141GB"]
    spec = [("abc"[i] if i < 3 else rng.choice("abc"), rng.choice(gpus), rng.choice([1, 2]))
            for i in range(rng.randint(3, 4))]
    latency, gbps = rng.choice([2, 5, 20]), rng.choice([25, 100, 400])
    links = tuple(Link(scope="site", a=a, b=b, gbps=gbps, latency_ms=latency, transport=Transport.ETHERNET,
                       egress_usd_per_gb=None) for a, b in (("a", "b"), ("a", "c"), ("b", "c")))
    return Fleet(name="three-sites", groups=tuple(_group(i, *s) for i, s in enumerate(spec)), links=links,
                 transports=catalog().transports)


def test_block_bound_charges_each_wan_crossings_own_loop(monkeypatch):
    """Each WAN crossing closes its own loop of two micro-batches (2C >= both stages' demands + 2 x latency), so the
    slack sits in the two stages next to that crossing, not anywhere along the path: with slow groups' whole layers
    the pooled slack of LoopSlack is often free, the pair's is not (the 8-group benchmark fleet's pp 24 set: block
    bound 4.753 -> 4.863 s against the optimum's 4.984 s). Never above the exhaustive optimum, and raises the bound
    where the crossings bind: on these four fleets it raises 95 items, from a median 0.85 of the optimum to 0.98
    (measured). The comparison with and without the pairs runs on a fine grid over the cycle (BLOCK_GRID 4096): on
    the shipped 24 intervals, anchored at each bound's own smallest cycle, the two minimisations sample the cycle at
    different points, and the one with the loops came out 31.5 us of 381.7 ms below the other on one item (both valid
    bounds; 0.3 us with the finer grid, so the comparison allows 1e-5 of the bound)."""
    import random
    import statistics

    from hgplan.planner import block_bound, block_work

    monkeypatch.setattr(block_work, "BLOCK_GRID", 4096)
    pair_loops = block_bound.pair_loops
    ratios = []
    for seed in range(4):
        rng = random.Random(seed)
        fleet = _three_site_fleet(rng)
        train = TrainingSettings(seq_length=2048, global_batch_size=rng.choice([32, 64]))
        opts = SearchOptions(max_pp=8, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(2,))
        layers = rng.choice([16, 24])
        monkeypatch.setattr(block_bound, "pair_loops", lambda *args, **kwargs: None)
        without = {(c.cfg, s): b for c, s, _, b, _ in _items(fleet, train, opts, layers=layers)}
        monkeypatch.setattr(block_bound, "pair_loops", pair_loops)
        for cand, subset, sub_lb, block, optimum in _items(fleet, train, opts, layers=layers):
            assert sub_lb <= optimum + 1 and block <= optimum + 1, (cand.cfg, subset, sub_lb, block, optimum)
            assert block >= without[(cand.cfg, subset)] * (1 - 1e-5)
            if block > without[(cand.cfg, subset)] + 1:
                ratios.append((without[(cand.cfg, subset)] / optimum, block / optimum))
    assert len(ratios) >= 60
    assert statistics.median(b for _, b in ratios) >= statistics.median(a for a, _ in ratios) + 0.06
