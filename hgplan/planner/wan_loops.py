"""The slack 1F1B's loops leave next to the WAN, as layers a placement's capacity loses (planner/block_bound.py).

Without interleaving the cycle C is at least every loop of n micro-batches through the steady state
(costmodel/pipeline.py, segment_loops): n C >= the demands of n consecutive stages plus twice the latencies between
them. Stages that must leave slack hold fewer layers than the block bound's capacity counted at C. Legend as in
planner/bounds.py (C, tau, v, m, r).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from hgplan.planner.bounds import FLOOR_EPS, BoundContext
from hgplan.planner.spanning import least_spanning_tree


@dataclass(frozen=True, slots=True)
class LoopSlack:
    """The slack 1F1B's loops demand around the WAN (without interleaving; costmodel/pipeline.py, segment_loops).

    A maximal run of consecutive WAN crossings joins stages j..j+n-1 (n - 1 crossings, so n >= 2); if n < m it is a
    loop: n C >= the stages' cycle demands plus twice each crossing's latency, i.e. the run's stages leave slack
    C - demand summing to at least twice the run's latencies. Runs share no stage, so over all W WAN crossings of
    the path (sites - 1 <= W <= r - 1, each a distinct pair of groups in two sites, so their latencies are at least
    the W cheapest such) the stages next to them leave at least S(W) = 2 x those latencies, in at most 2W stages, at
    most two per group (a block has two ends). A stage of group k leaving slack x holds at most (C - e' - x) / tau
    layers (e' its extras, at least the group's cheapest WAN send), while the capacity counted it at
    v floor((C - e) / (v tau)) > (C - e) / tau - v with e <= e': so it holds more than x / tau - v layers fewer, and
    it keeps >= v layers, so x <= C - send - v tau. The least total loss puts the slack on the slowest groups first
    (dropping the limit of 2W stages only lowers it)."""

    stages: tuple[tuple[float, float], ...]
    """(tau, cheapest WAN send) of each group, twice (two block ends), slowest first."""
    need: tuple[tuple[int, float], ...]
    """(W, S(W)) for every possible number of WAN crossings (none: some run may be longer than a loop)."""
    v: int
    pairs: PairLoops | None = None
    """Each crossing's own loop, crossing by crossing, with the WAN ends' loss (planner/wan_ends.py, WanEnds)
    inside: each stage's capacity at the extras the capacity counted it with, its loop at the WAN send it pays."""

    def crossings(self, c: float, single: Single | None = None, path: PathEnds | None = None) -> float:
        """Least layers the WAN ends and their loops cost together at cycle c (0 without `pairs`), with at most the
        single-stage blocks `single` allows (None: any) and the path's ends when known."""
        return self.pairs.loss(c, single, path) if self.pairs else 0.0

    def pooled(self, c: float) -> float:
        """Least layers the loops cost the stages next to the WAN at cycle c on top of the WAN ends' loss (inf: they
        cannot leave the slack): the bound of the class docstring, every run's slack pooled, slowest groups first."""
        if not self.need:
            return 0.0
        room = [(tau, max(0.0, c - send - self.v * tau)) for tau, send in self.stages]
        least = math.inf
        for w, need in self.need:
            fewer, left = 0.0, need
            for tau, cap in room:
                take = min(cap, left)
                fewer, left = fewer + take / tau, left - take
                if left <= 0:
                    break
            if left <= 1e-12:
                least = min(least, fewer - self.v * 2 * w)
        if least < 0:
            return 0.0
        # strictly more than `least` layers, in whole layers; the 1e-9 keeps rounding on the safe side
        return least if math.isinf(least) else math.floor(least - 1e-9) + 1.0


@dataclass(frozen=True, slots=True)
class PairLoops:
    """1F1B's loop of two micro-batches at each WAN crossing, crossing by crossing (v = 1; costmodel/pipeline.py).

    The W >= sites - 1 WAN crossings of the path each join two stages in two sites (the end of one group's block and
    the start of another's), holding n_a, n_b layers with n_a tau_a + e_a + n_b tau_b + e_b + 2 lat <= 2C (their
    loop) besides each n tau + e <= C, e being the stage's extras. The capacity counted such a stage as
    cap = floor((C - e') / tau) for extras e' of its role, so the pair loses at least w_a (cap_a - n_a) +
    w_b (cap_b - n_b) for the best n_a, n_b the loop allows; this includes what the WAN ends cost (e' < e). A block of
    two or more stages whose ends the capacity counted at its two cheapest partners' sends c1 <= c2 loses, at a WAN
    end, at least cap(c1) - n with e >= max(wan, c1), or cap(c2) - n with e >= max(wan, c2) (its two ends' real sends
    go to distinct partners, so sorted they are at least (c1, c2)); either gives a row. A block of one stage was
    counted at c1 (ends unknown), c1 + c2 (two crossings) or c1 and a path end's edge work, and pays the WAN on one
    side. A stage is in one crossing, or two when its block is a single stage: as the end of a block of two or more
    stages it gets weight 1, as a single stage 1/2, so the crossings' losses sum to at most the stages'. Which
    crossings a path has, and which blocks are single stages, is bounded in _walk_loss (the 8-group benchmark fleet's
    pp 25 set: with every crossing the least pair's loss and single stages at 1/2 everywhere, 1.5 layers lost at a
    cycle where its placements lose 6). The pooled bound of LoopSlack lets the latency slack of one crossing be met
    by stages next to another; this one does not. Each side of an option says what stage it is (Side): a single
    stage with one crossing (counted at c1, or c1 and its edge work) is a path end's, so with the path's ends known
    the other classes' single stages pay two crossings; and in a case where every group of a class hosts a single
    stage (Single), that class's crossings are all beside one (the 8-group fleet's pp 28 set: 4.919 -> 4.944 s, its
    least cycle 55.44 -> 55.84 ms, the block model's)."""

    rows: np.ndarray
    """(tau_a, e'_a, e_a, w_a, tau_b, e'_b, e_b, w_b, latency, class_a, class_b, end_a, end_b) of every pair of classes
    of interchangeable groups in two sites and choice of extras; end: 1 for a single stage with one crossing, which
    only a path's first or last group has (v = 1)."""
    site: tuple[int, ...]
    """Per class (the rows' class indices), its site."""
    ends: tuple[int, ...]
    """Per class, the most WAN crossings its groups take part in: two per group."""
    lone: int
    """The most groups of the set that host a single stage in one placement."""
    starts: np.ndarray
    """Where each option's rows begin (rows sorted by option)."""
    options: tuple[tuple[tuple[int, int], int, int, int, int], ...]
    """Per option: its pair of sites, classes and sides (Side)."""
    by_pair: tuple[tuple[tuple[int, int], np.ndarray], ...] = field(init=False)
    """Per pair of sites (in the order the options first name it), the indices of its options."""
    memo: dict[tuple, tuple[Options, int]] = field(default_factory=dict)
    """Each (cycle, prices)' options per pair of sites and their shape's number: the bound bisects the same cycles
    for every choice of end groups."""
    shapes: dict[bytes, tuple[Options, int]] = field(default_factory=dict)
    """Per vector of the options' least losses (its bytes), the options it gives and a number for it (most cycles
    of a bisection give the same losses: a small number keys the memos below faster than the options)."""
    losses: dict[tuple, float] = field(default_factory=dict)
    """loss() per (shape, case of single-stage blocks, path ends)."""
    usable: dict[tuple, dict] = field(default_factory=dict)
    """_usable per (shape, case of single-stage blocks): the orders of end groups share them."""

    def __post_init__(self) -> None:
        """by_pair, from the options."""
        idx: dict[tuple[int, int], list[int]] = {}
        for i, (pair, *_) in enumerate(self.options):
            idx.setdefault(pair, []).append(i)
        object.__setattr__(self, "by_pair", tuple((pair, np.array(each, dtype=int)) for pair, each in idx.items()))

    def loss(self, c: float, single: Single | None = None, path: PathEnds | None = None,
             price: tuple[float, ...] | None = None) -> float:
        """Least layers the crossings' loops cost at cycle c (inf: no placement's crossings can close their loops), with
        at most the single-stage blocks `single` allows (None: any `lone` groups), and the path's ends when known.
        With `price` (per class, seconds per layer lost), the least priced loss instead (planner/block_work.py)."""
        options, shape = self._options(c, price)
        key = (shape, single, path)  # the losses step with the cycle: most cycles of a bisection share their options
        if key not in self.losses:
            allowed = single or (self.ends, self.lone, ())  # ends // 2 is each class's groups
            if (shape, allowed) not in self.usable:
                self.usable[shape, allowed] = _usable(options, allowed)
            usable = self.usable[shape, allowed] if path is None else _at_path_ends(self.usable[shape, allowed], path)
            self.losses[key] = _walk_loss(self.site, usable, self.ends, allowed, path)
        return self.losses[key]

    def _options(self, c: float, price: tuple[float, ...] | None = None) -> tuple[Options, int]:
        """Per pair of sites, each crossing's least loss at cycle c by its classes and single-stage sides, cheapest
        first (and its shape's number, a key): the least over the whole layers n_a, n_b the loop and the stages'
        extras leave (each >= 1), each side's loss weighted (times its class's price when priced)."""
        if (c, price) in self.memo:
            return self.memo[c, price]
        tau_a, cap_ea, e_a, w_a, tau_b, cap_eb, e_b, w_b, lat, cls_a, cls_b, _, _ = self.rows.T
        if price is not None:
            each = np.array(price)
            w_a, w_b = w_a * each[cls_a.astype(int)], w_b * each[cls_b.astype(int)]
        cap_a = np.floor((c - cap_ea) / tau_a + FLOOR_EPS)
        cap_b = np.floor((c - cap_eb) / tau_b + FLOOR_EPS)
        top_a = np.floor((c - e_a) / tau_a + FLOOR_EPS)
        top_b = np.floor((c - e_b) / tau_b + FLOOR_EPS)
        budget = 2 * c - e_a - e_b - 2 * lat
        # whole layers: for each n_b the most n_a the loop leaves (each side holds >= 1 and at most its top)
        n_b = np.arange(1, max(1, int(np.max(top_b, initial=0))) + 1)[None, :]
        left = budget[:, None] - n_b * tau_b[:, None]
        n_a = np.minimum(top_a[:, None], np.floor(left / tau_a[:, None] + FLOOR_EPS))
        ok = (n_a >= 1) & (n_b <= top_b[:, None])
        each_b = w_a[:, None] * (cap_a[:, None] - n_a) + w_b[:, None] * (cap_b[:, None] - n_b)
        lost = np.maximum(0.0, np.min(np.where(ok, each_b, np.inf), axis=1))
        least = np.minimum.reduceat(lost, self.starts)
        raw = least.tobytes()
        if raw not in self.shapes:
            self.shapes[raw] = self._sorted(least), len(self.shapes)
        self.memo[c, price] = self.shapes[raw]
        return self.memo[c, price]

    def _sorted(self, least: np.ndarray) -> Options:
        """The options with a finite least loss, per pair of sites, cheapest first and ties in the options' order
        (classes, then sides: the order of the tuples (loss, class a, class b, side a, side b)); the pairs in the
        order of their first such option."""
        out = []
        for pair, idx in self.by_pair:
            vals = least[idx]
            keep = vals < math.inf
            if keep.any():
                order = np.argsort(vals[keep], kind="stable")
                out.append((int(idx[keep][0]), pair, [(val, *self.options[i][1:]) for val, i in
                                                      zip(vals[keep][order].tolist(), idx[keep][order].tolist())]))
        return {pair: opts for _, pair, opts in sorted(out)}


PathEnds = tuple[int, int, int, int]
"""The path's first and last group (without interleaving): their sites and their classes of PairLoops."""

Single = tuple[tuple[int, ...], int, tuple[int, ...]]
"""The single-stage blocks a placement may have: per class of PairLoops, twice the most of its groups that host one
stage; the most in all; and the classes all of whose groups surely host one (their crossings are all beside single
stages)."""

Side = int
"""What a crossing has on one side, in the order of what it asks of a placement: BLOCK_END, the end stage of a block of
two or more stages; SINGLE, a single-stage block's stage between two crossings (one WAN crossing and the cheapest
other send at least); SINGLE_END, a single stage with one crossing, which only the path's first or last group has
(v = 1: any other single stage has two neighbours). A side asking more is never preferred by _usable's pruning."""
BLOCK_END, SINGLE, SINGLE_END = 0, 1, 2

Options = dict[tuple[int, int], list[tuple[float, int, int, Side, Side]]]
"""Per pair of sites, its crossings' options cheapest first: (least loss, class on each side, Side on each side)."""


@functools.lru_cache(maxsize=8)
def _site_trees(sites: int) -> tuple[tuple[tuple[tuple[int, int], ...], ...], np.ndarray]:
    """Every spanning tree of the complete graph on `sites` nodes, as its edges (i < j), from the Prufer sequences;
    and the same as indices into the pairs in itertools.combinations order (one row per tree)."""
    out = []
    for seq in itertools.product(range(sites), repeat=sites - 2):
        degree = [1] * sites
        for x in seq:
            degree[x] += 1
        edges = []
        for x in seq:
            leaf = min(i for i in range(sites) if degree[i] == 1)
            edges.append(tuple(sorted((leaf, x))))
            degree[leaf] -= 1
            degree[x] -= 1
        u, w = (i for i in range(sites) if degree[i] == 1)
        edges.append((u, w))
        out.append(tuple(sorted(edges)))
    trees = tuple(sorted(set(out)))
    index = {pair: i for i, pair in enumerate(itertools.combinations(range(sites), 2))}
    return trees, np.array([[index[e] for e in tree] for tree in trees], dtype=int).reshape(len(trees), sites - 1)


TREES_SEARCHED = 8
"""The cheapest trees (by their pairs' cheapest options) searched within the limits; the rest count their cheapest
options' total, a lower bound (on the 10-group benchmark fleet, where the limits bind on many cycles, the searches
took more time than the rest of the block bounds)."""
MAX_TREE_SITES = 5
"""Above this many sites the crossings' loss takes the cheapest crossing per pair of sites over a minimum spanning
tree (Kruskal), without the limits on each group's crossings (6 sites: 1,296 trees)."""


def _usable(options: Options, single: Single) -> Options:
    """The options a case of single-stage blocks allows (a single stage only where the case has one, and nothing else
    beside a class all of whose groups host one), without those another option of the same classes beats at no more
    than they ask (each list stays cheapest first; a pair of sites left with none is dropped)."""
    most, _, forced = single
    single_ok = tuple(bool(n) for n in most)
    ok = (tuple(c not in forced for c in range(len(most))), single_ok, single_ok)  # per Side, per class
    out = {}
    for pair, opts in options.items():
        seen: dict[tuple[int, int], list[tuple[int, int]]] = {}
        kept = []
        for opt in opts:
            _, ca, cb, la, lb = opt
            if not (ok[la][ca] and ok[lb][cb]):
                continue
            before = seen.setdefault((ca, cb), [])
            if any(a <= la and b <= lb for a, b in before):  # a cheaper option that asks no more
                continue
            before.append((la, lb))
            kept.append(opt)
        if kept:
            out[pair] = kept
    return out


def _at_path_ends(options: Options, path: PathEnds) -> Options:
    """The options without a single stage with one crossing outside the path's first and last classes (dropping them
    after _usable's: an option they beat asks as much on their side, so it goes too)."""
    ends = path[2:]
    out = {}
    for pair, opts in options.items():
        kept = [o for o in opts if (o[3] != SINGLE_END or o[1] in ends) and (o[4] != SINGLE_END or o[2] in ends)]
        if kept:
            out[pair] = kept
    return out


def _walk_loss(site: tuple[int, ...], options: Options, ends: tuple[int, ...], single: Single,
               path: PathEnds | None) -> float:
    """_tree_loss, with the path's ends when known: the first and last groups' blocks cross on one side only, and
    the crossings, contracted to sites, are a walk from the first group's site to the last's through every site:
    with sites - 1 crossings a path through the sites in some order, with more a spanning tree and at least one
    crossing besides (the same site at both ends needs that one). `site`: each class's."""
    sites = len(set(site))
    if path is None:
        return _tree_loss(sites, options, ends, single)
    first_site, last_site, first, last = path
    left = list(ends)
    left[first] -= 1
    left[last] -= 1
    if min(left) < 0:
        return math.inf
    more = min((opt[0][0] for opt in options.values()), default=math.inf)
    best = _tree_loss(sites, options, tuple(left), single) + more
    if first_site == last_site or sites > MAX_TREE_SITES:
        return best
    # through each site once: a site of two or more groups is entered and left by two of them, one crossing each
    crowd = [0] * sites
    for c, n in enumerate(ends):
        crowd[site[c]] += n // 2
    once = [(n // 2 if crowd[site[c]] > 1 else n) - (c == first) - (c == last) for c, n in enumerate(ends)]
    cheapest = {pair: opt[0][0] for pair, opt in options.items()}
    middle = [x for x in range(sites) if x not in (first_site, last_site)]
    for order in itertools.permutations(middle):
        stops = (first_site, *order, last_site)
        tree = tuple((a, b) if a < b else (b, a) for a, b in zip(stops, stops[1:]))
        if any(e not in cheapest for e in tree):
            continue
        best = _search_tree(tree, options, cheapest, once, single, best)
    return best


def _tree_loss(sites: int, options: Options, ends: tuple[int, ...], single: Single) -> float:
    """Least total loss of the WAN crossings of a placement over `sites` sites (inf: none).

    The crossings of a path through every site, contracted to sites, connect them, so they contain a spanning tree
    of the sites: sites - 1 distinct crossings, one per tree edge, each with a loss of at least its pair of sites'
    options (loss, class a, class b, whether a single-stage block's stage is on side a, on side b). Each group takes
    part in at most two crossings (its block's two ends, or its single stage's two sides), and the single-stage
    blocks `single` allows sit beside at most two crossings each: every tree is searched for its least choice within
    those limits."""
    cheapest = {pair: opt[0][0] for pair, opt in options.items()}
    if sites > MAX_TREE_SITES:
        return least_spanning_tree(range(sites), cheapest)
    trees, edges = _site_trees(sites)
    floors = np.array([cheapest.get(e, math.inf) for e in itertools.combinations(range(sites), 2)])[edges].sum(axis=1)
    best = math.inf
    for n, t in enumerate(np.argsort(floors, kind="stable").tolist()):
        if floors[t] >= best:
            break
        if n == TREES_SEARCHED:  # every tree left costs at least its cheapest options
            return min(best, float(floors[t]))
        best = _search_tree(trees[t], options, cheapest, ends, single, best)
    return best


def _search_tree(tree: tuple[tuple[int, int], ...], options: dict, cheapest: dict[tuple[int, int], float],
                 ends: tuple[int, ...] | list[int], single: Single, best: float) -> float:
    """The least of `best` and the tree's cheapest choice within the limits (each group's crossings `ends`)."""
    after = list(itertools.accumulate(cheapest[e] for e in reversed(tree)))[::-1] + [0.0]
    return min(best, _assign(tree, 0, after, options, list(ends), [0] * len(ends), single, 0, 0.0, best))


def _assign(tree: tuple[tuple[int, int], ...], i: int, after: list[float], options: dict, ends: list[int],
            sides: list[int], single: Single, blocks: int, spent: float, best: float) -> float:
    """Branch and bound over the tree's edges from the i-th: each takes one of its pair of sites' options within the
    limits (`after`: the cheapest options' total from each edge on; `sides`: per class, the crossings beside its
    single-stage blocks so far, which need `blocks` such blocks in all)."""
    if i == len(tree):  # no edge at all
        return spent
    most, total, _ = single
    for val, ca, cb, la, lb in options[tree[i]]:
        if spent + val + after[i + 1] >= best:
            break
        la, lb = la > BLOCK_END, lb > BLOCK_END  # a single stage's side, with one crossing or two
        if ends[ca] < 1 or ends[cb] < 1 or sides[ca] + la > most[ca] or sides[cb] + lb > most[cb]:
            continue
        more = (la and sides[ca] % 2 == 0) + (lb and sides[cb] % 2 == 0)  # a new single-stage block per odd side
        if blocks + more > total:
            continue
        if i == len(tree) - 1:  # the last edge: its options come cheapest first, so the first that fits is the least
            return spent + val
        ends[ca] -= 1
        ends[cb] -= 1
        sides[ca] += la
        sides[cb] += lb
        best = min(best, _assign(tree, i + 1, after, options, ends, sides, single, blocks + more, spent + val, best))
        ends[ca] += 1
        ends[cb] += 1
        sides[ca] -= la
        sides[cb] -= lb
    return best


Extras = list[tuple[list[tuple[float, float, int]], float]]
"""Per group, its stage's choices next to the WAN: (the (counted, paid, one crossing only) extras it may have, its
weight)."""


def pair_loops(ctx: BoundContext, subset: tuple[str, ...], *, tau: dict[str, float],
               cross: dict[str, tuple[float, float]], wan: dict[str, float], site: dict[str, int],
               sure: dict[str, int], p: int) -> PairLoops | None:
    """Each WAN crossing's own loop (PairLoops): per group, the (counted, paid) extras and weight of a stage next to
    the WAN, as the end of a block of two or more stages (weight 1) and, where the group may host one stage only, as
    that stage (1/2). `cross`: each group's two cheapest partners' sends; `wan`: its cheapest send to another site;
    `site`: its site's index (planner/block_bound.py)."""
    ends: dict[str, Extras] = {}
    for k in subset:
        c1, c2 = cross[k]
        gb, far = ctx.groups[k], wan[k]
        ends[k] = [([(c + gb.self_send_s, max(far, c) + gb.self_send_s, 0) for c in (c1, c2)], 1.0)] \
            if gb.slots >= 2 else []
        if sure[k] < 2:  # a block of one stage: one crossing (a path's end, with its edge work) or two
            ends[k].append(([(c1, max(far, c1), 1), (c1 + c2, max(far + c1, c1 + c2), 0)]
                            + [(c1 + f, max(far, c1) + f, 1) for f in (gb.first_s, gb.last_s)], 0.5))
    return _loop_rows(ctx, subset, ends, tau=tau, site=site, lone=most_lone(ctx, subset, sure, p))


def _loop_rows(ctx: BoundContext, subset: tuple[str, ...], ends: dict[str, Extras], *, tau: dict[str, float],
               site: dict[str, int], lone: int) -> PairLoops | None:
    """PairLoops over every pair of classes in two sites, each stage with its (counted, paid) extras."""
    present = ctx.members(subset)
    rows = []
    for (ia, ca), (ib, cb) in itertools.combinations(enumerate(present), 2):
        a, b = ca[0], cb[0]
        key = (a, b) if a < b else (b, a)
        if site[a] == site[b] or key not in ctx.pair_lat:
            continue
        rows += [(tau[a], *ea[:2], w_a, tau[b], *eb[:2], w_b, ctx.pair_lat[key], ia, ib, ea[2], eb[2])
                 for ext_a, w_a in ends[a] for ext_b, w_b in ends[b] for ea in ext_a for eb in ext_b]
    if not rows:
        return None
    table = np.unique(np.array(rows), axis=0)
    # rows of one (classes, single-stage sides) option next to each other, so each option's least is one reduceat
    sides = [np.where(table[:, w] >= 1, BLOCK_END, np.where(table[:, end] > 0, SINGLE_END, SINGLE)) for w, end in
             ((3, 11), (7, 12))]
    kind = np.stack([table[:, 9], table[:, 10], *sides], axis=1).astype(int)
    order = np.lexsort(kind.T[::-1])
    table, kind = table[order], kind[order]
    starts = np.flatnonzero(np.r_[True, np.any(kind[1:] != kind[:-1], axis=1)])
    sites = tuple(site[c[0]] for c in present)
    options = tuple((tuple(sorted((sites[ca], sites[cb]))), ca, cb, la, lb) for ca, cb, la, lb in kind[starts].tolist())
    return PairLoops(rows=table, site=sites, ends=tuple(2 * len(c) for c in present), lone=lone, starts=starts,
                     options=options)


def most_lone(ctx: BoundContext, subset: tuple[str, ...], sure: dict[str, int], p: int) -> int:
    """The most groups of the set that host a single stage in one placement of p stages: those that may (sure < 2),
    fewest slots first, while the others' slots still hold the rest of the stages."""
    slots = {k: ctx.groups[k].slots for k in subset}
    may = sorted((slots[k], k) for k in subset if sure[k] < 2)
    room = sum(slots.values())
    for n, (s, _) in enumerate(may):
        if room - s < p - n - 1:
            return n
        room -= s
    return len(may)
