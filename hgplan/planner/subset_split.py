"""Splitting a candidate into the sets of node groups it may use, lazily: boxes of class counts before sets.

A set of node groups is, up to interchangeable groups (planner/classes.py), a vector of how many groups of each class
it takes. A candidate of a fleet of 64 groups in four classes has up to 43,401 such vectors (a 64-stage pipeline of
two slots per group); bounding each took 3 s, and the search split a few dozen such candidates before its first
solve. A box (least and most groups per class) stands for every vector inside it, with one bound that holds for all
of them (box_bound_us): the search splits a box in two on one class's range (best first, like any item) and lists
its sets one by one only once it is small (SPLIT_LEAVES). A box whose bound is above the incumbent is never split:
on that candidate only the 32 Hopper groups' box reaches its sets; every box with an A100 in it is closed by the
stage that A100 holds (its layer at least is slower than two layers on a Hopper, the cycle of the best plans).

Legend as in planner/bounds.py (L, p, v, m, tau).
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

from hgplan.plan import ParallelConfig
from hgplan.planner.bounds import (BoundContext, GroupBound, Slots, held_cycle, integer_cycle_bound, least_work,
                                   path_terms, relaxation_bound, subset_terms, sure_count)
from hgplan.planner.costs import US

SPLIT_LEAVES = 1024
"""A box of at most this many count vectors is listed set by set (every fleet of 16 groups in four classes or
fewer: 5^4 = 625 vectors, the sets listed as before boxes)."""


class Box(NamedTuple):
    """Least and most groups of each class (ctx.classes' order) a set takes."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    def vectors(self) -> int:
        """How many count vectors the box holds."""
        return math.prod(b - a + 1 for a, b in zip(self.lo, self.hi))


def root_box(ctx: BoundContext) -> Box:
    """Every set of the candidate's groups."""
    return Box(lo=(0,) * len(ctx.classes), hi=tuple(len(c) for c in ctx.classes))


def subset_bounds_us(ctx: BoundContext, cfg: ParallelConfig, *, L: int, m: int, stop_at: float | None = None,
                     box: Box | None = None) -> dict[tuple[str, ...], float] | None:
    """Lower bound (us) per set S of groups a placement uses (fast; block_bound_us refines one S later), every set
    or those of `box`.

    Compute uses the slots every group of S must fill (one, or the stages the others' slots leave over, each with v
    layers at that group's rate) plus the fastest others; the crossings' sends and latencies sit in the fill, and
    the stage next to the dearest crossing holds at least v layers besides sending it.
    (Charging the sends to particular slots' cycles is left to block_bound_us: with whole layers per stage, which
    slot absorbs a send best is not known in advance.)
    None when time.perf_counter() passes `stop_at` before every set is bounded.
    """
    p = cfg.pp
    out: dict[tuple[str, ...], float] = {}
    for n, subset in enumerate(ctx.subsets(p, box)):
        if stop_at is not None and n % 512 == 511 and time.perf_counter() > stop_at:
            return None
        present = ctx.members(subset)
        terms = subset_terms(ctx, subset, L=L, p=p, present=present)
        if terms is not None:
            slots = _chosen_slots([(ctx.groups[c[0]], len(c), len(c)) for c in present], p)
            out[subset] = _bound_us(slots, cfg, L=L, m=m, crossings=terms.crossings, dearest=terms.dearest,
                                    wan_loop=terms.wan_loop, rest=terms.edges + terms.fill_extra, tail=terms.tail)
    return out


def box_bound_us(ctx: BoundContext, cfg: ParallelConfig, box: Box, *, L: int, m: int) -> float:
    """A lower bound (us) on subset_bounds_us over every set in `box` (inf: none has a placement of p stages).

    Every set S in the box holds the box's least groups and lies inside its most, so: S's slots are at most the most
    groups' (each least group's sure stages are at least those counted with them), its path has at least (least
    groups - 1) crossings over at least the least groups' sites, drawn from the pairs of the most groups
    (bounds.path_terms), its boundaries inside groups at least p - (most groups), its edges and tail at least the
    cheapest of the most groups'."""
    p = cfg.pp
    per = [(ctx.groups[c[0]], c, a, b) for c, a, b in zip(ctx.classes, box.lo, box.hi) if b > 0]
    if not per:
        return math.inf
    r_lo, r_hi = max(1, sum(a for *_, a, _ in per)), sum(b for *_, b in per)
    if sum(gb.slots * b for gb, _, _, b in per) < p or r_lo > p:
        return math.inf
    path = path_terms(ctx, [list(c[:b]) for _, c, _, b in per], r_lo,
                      len({c[0].split("/")[0] for _, c, a, _ in per if a > 0}))
    if path is None:
        return math.inf
    crossings, dearest, wan_loop, fill = path
    inside = max(0, p - r_hi) * min(gb.self_fill_s for gb, *_ in per)
    edges = min(gb.first_s for gb, *_ in per) + min(gb.last_s for gb, *_ in per)
    tail = min(gb.tail.least(math.ceil(L / p)) for gb, *_ in per)
    return _bound_us(_chosen_slots([(gb, a, b) for gb, _, a, b in per], p), cfg, L=L, m=m, crossings=crossings,
                     dearest=dearest, wan_loop=wan_loop, rest=edges + fill + inside, tail=tail)


def _bound_us(slots: Slots, cfg: ParallelConfig, *, L: int, m: int, crossings: int, dearest: float, wan_loop: float,
              rest: float, tail: float) -> float:
    """The bound (us) from the p slots (_chosen_slots) and the path's terms: compute (each stage at least v layers;
    the stage next to the dearest crossing sends it; 1F1B's loop through a WAN crossing), then the edges and fill
    (`rest`) and the tail."""
    v = cfg.vpp
    fastest = slots[0][0]
    cyc = max(integer_cycle_bound(slots, L, v), held_cycle(slots, v))
    if crossings:  # the stage next to the dearest crossing sends it and works on >= v layers
        cyc = max(cyc, v * dearest + v * fastest)
    if v == 1 and m >= 3:  # the loop of two micro-batches through the dearest WAN crossing (segment_loops)
        cyc = max(cyc, wan_loop + fastest)
    compute = max(relaxation_bound(slots, L, v * m), (v * m - 1) * cyc + least_work(slots, L, v))
    return (compute + rest + v * tail) / v * US


def _chosen_slots(per_class: list[tuple[GroupBound, int, int]], p: int) -> Slots:
    """The p stage slots the bounds count, grouped by speed, fastest first, for sets holding at least `least` and at
    most `most` groups of each class (per_class: (costs, least, most); least = most for one set): each of the least
    groups' sure stages (the stages the others' slots leave over, at least one), then the fastest of the other slots.
    Any placement on such a set uses those sure slots and p - (sure ones) others, so these p have the least sum and the
    least largest seconds per layer (bounds.least_work, bounds.held_cycle). Interchangeable groups have the same
    speed, slots and sure stages, so each class is counted once (a 64-group set in four classes: four entries)."""
    total = sum(gb.slots * most for gb, _, most in per_class)
    chosen: dict[float, int] = {}
    spare: dict[float, int] = {}
    for gb, least, most in per_class:
        sure = sure_count(p, total, gb.slots)
        chosen[gb.layer_s] = chosen.get(gb.layer_s, 0) + sure * least
        spare[gb.layer_s] = spare.get(gb.layer_s, 0) + gb.slots * most - sure * least
    need = p - sum(chosen.values())
    for tau in sorted(spare):
        take = min(need, spare[tau])
        if take > 0:
            chosen[tau] += take
            need -= take
    return [(tau, n, 0.0) for tau, n in sorted(chosen.items()) if n > 0]


def split_box(ctx: BoundContext, cfg: ParallelConfig, box: Box, *, L: int,
              m: int) -> list[tuple[Box, float]]:
    """`box` in two, each with its bound (those no set of which has a placement left out): on the slowest class
    whose presence is open (none of it, or some), else on the class of the widest range, halved."""
    open_ = [j for j, (a, b) in enumerate(zip(box.lo, box.hi)) if a == 0 < b]
    if open_:
        j = max(open_, key=lambda i: (ctx.groups[ctx.classes[i][0]].layer_s, -i))
        cut = 0
    else:
        j = max(range(len(box.lo)), key=lambda i: (box.hi[i] - box.lo[i], -i))
        cut = (box.lo[j] + box.hi[j]) // 2
    halves = (Box(box.lo, box.hi[:j] + (cut,) + box.hi[j + 1:]), Box(box.lo[:j] + (cut + 1,) + box.lo[j + 1:], box.hi))
    out = [(half, box_bound_us(ctx, cfg, half, L=L, m=m)) for half in halves]
    return [(half, bound) for half, bound in out if math.isfinite(bound)]


def split_item(ctx: BoundContext, cfg: ParallelConfig, box: Box | None, *, L: int, m: int,
               stop_at: float | None = None) -> list[tuple[bool, tuple, float]] | None:
    """A candidate (box None) or one of its boxes split, as (a set?, the set or box, its bound): its sets, sorted, when
    the box holds at most SPLIT_LEAVES count vectors, else its two halves (split_box). None when time.perf_counter()
    passes `stop_at` while listing sets."""
    box = box or root_box(ctx)
    if box.vectors() > SPLIT_LEAVES:
        return [(False, half, bound) for half, bound in split_box(ctx, cfg, box, L=L, m=m)]
    sets = subset_bounds_us(ctx, cfg, L=L, m=m, stop_at=stop_at, box=box)
    return None if sets is None else [(True, subset, bound) for subset, bound in sorted(sets.items())]
