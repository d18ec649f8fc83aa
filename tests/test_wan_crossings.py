"""Issue 11 (the 8-group benchmark fleet's gap): the block bound's exact split of stages over groups and its bound on
what the WAN crossings' loops cost, split by how many blocks are single stages and, with known ends, by the path's
walk through the sites.

The pieces are checked against their definitions (every split, every spanning tree), and the bound as a whole
against the exhaustive optimum of every (candidate, group set) of random fleets over three and four sites: never
above it, and closer than before where the crossings bind (figures in the docstrings)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import numpy as np

from test_bound_structure import _group, _items

from hgplan.domain import Fleet, Link, TrainingSettings, Transport
from hgplan.io import catalog
from hgplan.plan import Recompute
from hgplan.planner.block_capacity import most_layers
from hgplan.planner.options import SearchOptions
from hgplan.planner.single_stages import single_cases
from hgplan.planner.wan_loops import PairLoops, _site_trees


def _best_split(shapes, p, lone_ok=None, least=0, most=None):
    """Every split of p stages over the groups (each >= 1), by brute force."""
    best = float("-inf")
    for ns in itertools.product(*[range(1, top + 1) for *_, top in shapes]):
        if sum(ns) != p:
            continue
        held, lone = 0, 0
        for n, (one, two, interior, _), ok in zip(ns, shapes, lone_ok or [True] * len(shapes)):
            if n == 1:
                if one is None or not ok:
                    break
                held, lone = held + one, lone + 1
            elif two is None:
                break
            else:
                held += two + (n - 2) * interior
        else:
            if lone_ok is None or least <= lone <= most:
                best = max(best, held)
    return best


def test_most_layers_is_the_best_split():
    """The dynamic programme over groups returns what every split returns, with and without a limit on the
    single-stage blocks (which groups may host one, how many do)."""
    rng = random.Random(0)
    for _ in range(400):
        r = rng.randint(1, 4)
        shapes = []
        for _ in range(r):
            two = rng.choice([None, rng.randint(2, 12)])
            shapes.append((rng.choice([None, rng.randint(1, 6)]), two, rng.randint(1, 6),
                           1 if two is None else rng.randint(2, 5)))
        p = rng.randint(r, sum(s[3] for s in shapes) + 1)
        assert most_layers(shapes, p) == _best_split(shapes, p)
        lone_ok = [rng.random() < 0.6 for _ in range(r)]
        least = rng.randint(0, 2)
        most = rng.randint(least, 3)
        assert most_layers(shapes, p, lone_ok, least, most) == _best_split(shapes, p, lone_ok, least, most)
        # the answer is memoised on the groups sorted: any order of the same groups gets the same, right answer
        order = rng.sample(range(r), r)
        assert most_layers([shapes[i] for i in order], p) == _best_split(shapes, p)
        assert most_layers([shapes[i] for i in order], p, [lone_ok[i] for i in order], least, most) == \
            _best_split(shapes, p, lone_ok, least, most)


def test_options_per_pair_of_sites_are_sorted_as_their_tuples():
    """PairLoops._sorted (numpy, per pair of sites) lists the options with a finite loss in the order of the tuples
    (loss, class a, class b, side a, side b), ties and infinities included, pairs in the order the options name them."""
    rng = random.Random(3)
    for _ in range(200):
        kinds = sorted({(rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 2), rng.randint(0, 2))
                        for _ in range(rng.randint(1, 30))})
        site = [rng.randint(0, 2) for _ in range(4)]
        options = tuple((tuple(sorted((site[a], site[b]))), a, b, la, lb) for a, b, la, lb in kinds)
        loops = PairLoops(rows=np.zeros((0, 13)), site=tuple(site), ends=(2,) * 4, lone=0,
                          starts=np.zeros(0, dtype=int), options=options)
        least = np.array([rng.choice([math.inf, 0.0, 1.0, 2.5, float(rng.randint(0, 4))]) for _ in options])
        want: dict = {}
        for val, (pair, *key) in zip(least.tolist(), options):
            if val < math.inf:
                want.setdefault(pair, []).append((val, *key))
        assert loops._sorted(least) == {pair: sorted(opts) for pair, opts in want.items()}
        assert list(loops._sorted(least)) == list(want)


def test_site_trees_are_every_spanning_tree():
    """Cayley: n^(n-2) spanning trees on n sites, each n - 1 distinct edges that join every site."""
    for n in range(2, 6):
        trees, index = _site_trees(n)
        assert len(trees) == n ** (n - 2) and index.shape == (len(trees), n - 1)
        for tree in trees:
            joined = {0}
            for _ in tree:
                joined |= {x for a, b in tree for x in (a, b) if a in joined or b in joined}
            assert joined == set(range(n)) and len(set(tree)) == n - 1


def _crossing_fleet(rng) -> Fleet:
    """Three to five groups of one or two 4-GPU nodes over three or four sites (each site one at least), every pair
    of sites joined by a WAN of 2-20 ms: with tensor parallelism 4 many groups can host one stage only."""
    gpus = ["H100-SXM5-80GB", "A100-SXM4-80GB", "A100-SXM4-40GB", "H200-SXM-141GB"]
    sites = "abcd"[:rng.choice([3, 4])]
    spec = [(sites[i] if i < len(sites) else rng.choice(sites), rng.choice(gpus), rng.choice([1, 1, 2]))
            for i in range(rng.randint(len(sites), 5))]
    latency, gbps = rng.choice([2, 5, 20]), rng.choice([25, 100, 400])
    links = tuple(Link(scope="site", a=a, b=b, gbps=gbps, latency_ms=latency, transport=Transport.ETHERNET,
                       egress_usd_per_gb=None) for a, b in itertools.combinations(sites, 2))
    return Fleet(name="crossings", groups=tuple(_group(i, *s) for i, s in enumerate(spec)), links=links,
                 transports=catalog().transports)


def test_block_bound_bounds_the_crossings_below_the_optimum():
    """Over every item of random two- to four-site fleets: both bounds at most the exhaustive optimum, and the block
    bound of the items over two or more sites without interleaving (where 1F1B's loops cross the WAN) closer to it
    than before the exact split, the crossings' trees and walks and the cases of single-stage blocks. Measured on
    30 such fleets (1,759 items): 231 raised, none lowered; on these three (162 items over two or more sites) the
    median 0.951 -> 0.963 of the optimum, the items within 5% of it 82 -> 100.
    Then the cases of two single-stage blocks by pair of classes (single_stages.single_cases), on the same 30 fleets: 12
    items raised, none lowered, none above the optimum; on these three the median 0.9627 -> 0.9639, within 5% 103 ->
    106. Then each crossing's sides (wan_loops.Side: a single stage with one crossing only in the path's end classes,
    and only single stages beside a class whose every group hosts one): 242 more raised, none lowered, none above the
    optimum; over the 964 items of the 30 fleets the median 0.9578 -> 0.9634 and within 5% 572 -> 616 (both changes);
    on these three 0.9646 and 107."""
    ratios = []
    for seed in (5, 19, 28):
        rng = random.Random(seed)
        fleet = _crossing_fleet(rng)
        train = TrainingSettings(seq_length=2048, global_batch_size=rng.choice([16, 32, 64]))
        opts = SearchOptions(max_pp=8, mbs_options=(1,), recompute_options=(Recompute.NONE,), tp_options=(4,))
        for cand, subset, sub_lb, block, optimum in _items(fleet, train, opts, layers=rng.choice([12, 16, 24])):
            assert sub_lb <= optimum + 1 and block <= optimum + 1, (seed, cand.cfg, subset, sub_lb, block, optimum)
            if len({k.split("/")[0] for k in subset}) >= 2 and cand.cfg.vpp == 1:
                ratios.append(block / optimum)
    assert len(ratios) >= 150
    assert statistics.median(ratios) >= 0.964
    assert sum(r >= 0.95 for r in ratios) >= 107


def test_single_stage_cases_cover_every_placement():
    """Every count of single-stage blocks on every choice of groups falls in one case, or in one part of the case of
    two or more when that case is refined; each part lies inside that case (no group it does not allow, no fewer or
    more blocks, no more crossing sides per class); a case that says every group of a class hosts a single stage
    (its crossings are all beside one) holds only placements where they do."""
    rng = random.Random(3)
    for _ in range(300):
        present = [[f"s/g{c}{j}" for j in range(rng.randint(1, 3))] for c in range(rng.randint(1, 9))]
        keys = [k for c in present for k in c]
        by_speed = rng.sample(keys, len(keys))
        class_of = {k: i for i, c in enumerate(present) for k in c}
        sure = {k: rng.choice([0, 1, 1, 2]) for k in keys}
        lone = rng.randint(0, sum(sure[k] < 2 for k in keys))
        cases, refined = single_cases(present, by_speed, class_of, sure, lone)
        if refined:
            hosts, least, most, (sides, total, forced) = cases[-1]
            assert forced == ()
            for part_hosts, part_least, part_most, (part_sides, part_total, _) in refined:
                assert all(h or not ph for h, ph in zip(hosts, part_hosts))
                assert least <= part_least <= part_most <= most and part_total <= total
                assert all(ps <= s for ps, s in zip(part_sides, sides))
        leaves = (cases[:-1] + refined) if refined else cases
        may = [k for k in by_speed if sure[k] < 2]
        for n in range(0, min(lone, 4) + 1):
            for chosen in itertools.combinations(may, n):
                per_class = [sum(class_of[k] == i for k in chosen) for i in range(len(present))]
                inside = [
                    (hosts, least, most, single) for hosts, least, most, single in leaves
                    if least <= n <= most and single[1] >= n
                    and all(hosts[by_speed.index(k)] for k in chosen)
                    and all(2 * c <= s for c, s in zip(per_class, single[0]))
                    and all(per_class[c] == len(present[c]) for c in single[2])]
                assert inside, (present, sure, lone, chosen)
