"""Node groups a plan cannot tell apart, and the sets of node groups the search needs to look at because of them.

Real fleets are described per rack, pod or purchase batch, so tens of node groups of the same hardware in the same
site are normal. Two such groups are interchangeable: every cost the planner and the cost model charge (layer times,
memory, data-parallel tails, the path to every other group) is the same for both, so swapping them in a plan changes
nothing but the names. The search therefore enumerates sets of node groups up to that symmetry: from a class of n
interchangeable groups it takes the first k (k = 0..n) instead of every k-subset, which turns 2^16 - 1 sets of 16
groups in four classes of four into 5^4 - 1 = 624, and keeps the gap proven (a bound on one set holds for every set
it stands for).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from hgplan.domain import Fleet, NodeGroup


def node_signature(g: NodeGroup) -> tuple:
    """Everything about a group's nodes that any cost depends on but their number: its site (the links), hardware,
    NICs and price (shared with summary.one_fabric_groups)."""
    return (g.site, g.gpu, g.gpus_per_node, g.intra_node_kind, g.intra_node_gbytes_per_s, g.nic_transport, g.nic_gbps,
            g.nic_count, g.gpu_hour_usd, g.pcie)


def node_kind(g: NodeGroup) -> tuple:
    """Everything a group's own costs (layer and edge work, its data-parallel tail) depend on: its nodes and their
    number, not its site or links, so such groups plan the same alone (alone_alike) and share those costs
    (planner/costs.py, CostSource.kind)."""
    return *node_signature(g)[1:], g.num_nodes


def _signature(g: NodeGroup) -> tuple:
    """Everything about a group that any cost depends on: its nodes and their number."""
    return (*node_signature(g), g.num_nodes)


def interchangeable_classes(fleet: Fleet, groups: Sequence[NodeGroup]) -> tuple[tuple[str, ...], ...]:
    """The groups (keys) partitioned into classes of interchangeable groups, each class sorted, the classes in the
    order of their first key. A group that a group-scope link names (an island of its own) is a class by itself."""
    islands = {(lk.a, lk.b) for lk in fleet.links if lk.scope == "group"}
    named = {name for pair in islands for name in pair}
    by_sig: dict[tuple, list[str]] = {}
    alone: list[tuple[str]] = []
    for g in sorted(groups, key=lambda g: g.key):
        if g.name in named:
            alone.append((g.key,))
        else:
            by_sig.setdefault(_signature(g), []).append(g.key)
    return tuple(sorted([tuple(keys) for keys in by_sig.values()] + alone))


def alone_alike(groups: Sequence[NodeGroup]) -> tuple[str, ...]:
    """One group (key) of each kind that plans the same alone: a group alone crosses no link, so groups of the same
    nodes and number of them in different sites (or islands) give the same single-group plans under other names. The
    first key of each kind, in key order (its plans win ties: planner/seeded.py, seeded_search)."""
    first: dict[tuple, str] = {}
    for g in sorted(groups, key=lambda g: g.key):
        first.setdefault(node_kind(g), g.key)
    return tuple(first.values())


def canonical_subsets(classes: Sequence[Sequence[str]], *, slots: Sequence[int] | None = None,
                      stages: int | None = None,
                      box: tuple[Sequence[int], Sequence[int]] | None = None) -> Iterator[tuple[str, ...]]:
    """One non-empty set of groups per orbit under swapping interchangeable groups: the first k of each class, for
    every choice of the k's. Each set comes out sorted. With `stages` (and each class's stage `slots` per group),
    only the sets a pipeline of that many stages can use, one stage at least on each group: at most `stages`
    groups, at least `stages` slots (tested on the k's, before a set is built: 64 groups in four classes have
    83,520 sets). `box`: (least, most) k per class, the k's limited to those ranges."""
    lo, hi = box if box is not None else ([0] * len(classes), [len(c) for c in classes])
    for counts in _counts(lo, hi, slots, stages):
        if any(counts):
            yield tuple(sorted(k for c, n in zip(classes, counts) for k in c[:n]))


def _counts(lo: Sequence[int], sizes: Sequence[int], slots: Sequence[int] | None,
            stages: int | None) -> Iterator[tuple[int, ...]]:
    """How many groups of each class (from lo to sizes), in itertools.product's order, skipping the branches that
    cannot pass the stage test (more groups than stages so far, or too few slots even with every group still to come):
    of the 83,521 vectors of 64 groups in four classes, at most 495 have at most eight groups (an 8-stage pipeline)."""
    if stages is None:
        yield from itertools.product(*(range(a, n + 1) for a, n in zip(lo, sizes)))
        return
    room = [sum(n * s for n, s in zip(sizes[i:], slots[i:])) for i in range(len(sizes) + 1)]

    def walk(i: int, groups: int, have: int, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if i == len(sizes):
            yield prefix
            return
        for n in range(lo[i], sizes[i] + 1):
            if groups + n > stages:
                break
            if have + n * slots[i] + room[i + 1] >= stages:
                yield from walk(i + 1, groups + n, have + n * slots[i], prefix + (n,))

    yield from walk(0, 0, 0, ())
