"""The mesh search's first, table-free lower bound of every outer candidate (B, P) of the asymmetric family, computed
for all candidates up front (planner/mesh_search.py takes them least first; a candidate whose bound reaches the
incumbent never gets tables).

Per B, per set U of sites a plan can use (at most MAX_SITES sites; above, every site at once), over the node groups
of U and their mesh options o (each with slots_o = GPUs / (tp dp) stages, per-layer time tau_o, at most most_o
layers per stage by memory, its own mesh's send, its least send to or from another group, its embedding and LM
head work), the objective (m - 1) cycle + fill + tail is at
least (m - 1) C(P) + W(P) + X(U, P):

- C(P), the least cycle, the larger of two knapsacks over how many stages each group takes (j stages of one group
  need an option with j slots): the rate bound L / cap(P), cap = most layers per microsecond P stages hold; and the
  whole-layer bound: at cycle c a stage holds at most min(floor((c - x) / tau_o), most_o) layers, x what else it does
  within the cycle, as the tables' bound counts it (planner/mesh_bound.py, _option_gains): each used group runs one
  block of j stages, whose inner boundaries are its own mesh's sends and whose ends face another group (the least
  send to or from any other group of the fleet: a group's rows do not depend on the candidate) unless the block holds
  the pipeline's first stage (the embedding instead) or its last (the LM head; a single stage: both); a max-plus
  knapsack over the groups of (stages taken, first placed, last placed) gives the most whole layers p stages hold.
  The cycle exceeds every c at which P stages hold fewer than L. That c is looked for on a grid (CYCLE_GRID) up to
  the cycle at which the bound reaches the incumbent, then on REFINE points inside the step of the grid that holds
  each stage count's least cycle, so the bound is exact to a quarter of a grid step.
- W(P), the work of the fill: L layers at the fastest per-layer time, or, with each of the P stages holding at
  least one layer, the least sum of tau over P stages plus L - P layers at the fastest, whichever is larger; the
  cheapest embedding and LM head.
- X(U, P): the boundaries' sends, forward and backward: U's crossings as the least spanning tree of the sites'
  cheapest crossings (planner/mesh_sites.py), every other boundary at the least boundary term of any option.

The candidate's bound is the least over the sets; each set's own is kept too, and planner/mesh_sites.py takes it as
that set's floor when the candidate's tables are built.

most_o is the most layers any stage position of a pipeline of one to three stages fits: a stage of a deeper pipeline
holds at least as many micro-batches in flight as the stage of those it matches (first, middle or last), so it fits
no more (tests/test_mesh_first.py checks this on every option of its fleets up to 16 stages). Measured 2026-11-26
(single runs): of the 800 candidates of each of the 1000- and 1024-GPU benchmark fleets, those left below the stock
best by this bound (against the rate bound and L layers at the fastest alone) three sites, four types 119 (473),
four sites, five types 162 (413), four sites, eight groups 236 (435); with blocks instead of one least boundary
term per stage (2026-11-28): 93, 82 and 143; docs/planner.md, "First bound".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from hgplan.domain import NodeGroup
from hgplan.plan import ParallelConfig
from hgplan.planner.costs import CostSource, capacity_mib, layers_that_fit, to_us
from hgplan.planner.mesh_knapsack import block_roles, knapsack_before, merged, per_class, step
from hgplan.planner.mesh_order import NONE, whole_layers
from hgplan.planner.mesh_sites import MAX_SITES, cheapest_crossings
from hgplan.planner.mesh_tables import host_options
from hgplan.planner.options import SearchOptions
from hgplan.planner.spanning import least_spanning_tree

CYCLE_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 1.0)
"""Fractions of the incumbent's cycle (what the cycle may take of the incumbent beside W) at which the whole-layer
knapsack is evaluated, 1% apart near the incumbent, before REFINE points inside the step that holds the least cycle."""

REFINE = 3
"""Points of a second pass inside the step of CYCLE_GRID that holds a stage count's least cycle (one knapsack over
all those steps' points): on the eight-group fleet of benchmarks/search_scaling.py --beyond (2026-11-28) the least
first bound 0.778 -> 0.808 of the stock best with 3 points, 0.810 with 15, candidates left below it 152 -> 143 (143
with 7 or 15; a grid of 71 points instead: 144 in 3.4-3.6 s); all 800 candidates' first bounds in 1.6 and 2.1 s
without the second pass, 1.6 and 2.2 s with it (two runs, alternating)."""

_COLS = ("slots", "tau", "most", "pen", "intra", "cross", "first", "last")


def most_layers(costs: CostSource, g: NodeGroup, c: ParallelConfig) -> int:
    """Most layers a stage of c's degrees on g fits at any position of a pipeline of any depth (module docstring):
    the most any stage of a pipeline of one to three stages fits."""
    L = costs.model.num_layers
    return max(layers_that_fit(a, b, capacity_mib(g), L) for k in (1, 2, 3)
               for a, b in costs.memory(replace(c, pp=k), g))


def _option_rows(costs: CostSource, g: NodeGroup, options: list[ParallelConfig],
                 others: list[NodeGroup]) -> np.ndarray:
    """[option, _COLS] of the options of g that hold a layer somewhere (most >= 1): slots, tau, most, the least
    boundary term pen (the least of intra, its own mesh's send, inf with one slot, and cross, the least send to or
    from another group: mesh_link_us both ways, the tables' snd_us and rcv_us), the embedding's and the LM head's
    work."""
    L, rows = costs.model.num_layers, []
    for c in options:
        slots = g.num_gpus // c.gpus_per_stage
        most = most_layers(costs, g, c)
        if most < 1:
            continue
        intra = costs.link(g, g, replace(c, pp=2)).send_us if slots >= 2 else math.inf
        cross = min((x for b in others for x in (costs.mesh_link_us(g, b, c), costs.mesh_link_us(b, g, c))
                     if x is not None), default=math.inf)
        per = costs.group(g, c)
        rows.append((slots, per.layer_us, min(most, L), min(intra, cross), intra, cross, per.first_us, per.last_us))
    return np.array(rows, dtype=float).reshape(-1, len(_COLS))


def _knapsack(gains: list[tuple[np.ndarray, np.ndarray]], P: int) -> np.ndarray:
    """best[k, p]: most that p stages hold in case k, for every p <= P, where gains[h] = (slots [o], per [k, o]) is
    what one stage of group h holds under option o (-inf where it cannot be used); j stages of one group need an
    option with at least j slots and hold j x the most one such stage holds (-inf where p stages cannot be placed)."""
    K = gains[0][1].shape[0] if gains else 1
    j = np.arange(P + 1)
    best = np.full((K, P + 1), -math.inf)
    best[:, 0] = 0.0
    for slots, per in gains:
        most = np.where((slots[None, :] >= j[:, None])[None], per[:, None, :], -math.inf).max(axis=2)  # [k, j]
        with np.errstate(invalid="ignore"):
            gain = np.where(j[None, :] >= 1, j[None, :] * most, 0.0)
        before = np.concatenate([best, np.full((K, 1), -math.inf)], axis=1)[:, knapsack_before(P)]  # [k, total, j]
        best = np.maximum(best, (before + gain[:, None, :]).max(axis=2))
    return best


def _whole_cycle(rows: list[np.ndarray], grid: np.ndarray, Q: int, L: int) -> np.ndarray:
    """[p]: a cycle at which p <= Q stages hold fewer than L whole layers (0 where none is known): the last point of
    the grid at which they do, then of REFINE points more inside each p's bracket of the grid."""
    short = (_role_capacity(rows, grid, Q) < L).sum(axis=0)  # grid points below the least cycle (a prefix)
    whole = np.where(short > 0, grid[np.maximum(short - 1, 0)], 0.0)
    p = np.nonzero((short > 0) & (short < grid.size))[0]  # least cycle between grid[short - 1] and grid[short]
    if p.size and REFINE:
        ks = np.unique(short[p])
        fine = grid[ks - 1][:, None] + np.outer(grid[ks] - grid[ks - 1], np.arange(1, REFINE + 1) / (REFINE + 1))
        b = np.searchsorted(ks, short[p])
        more = (_role_capacity(rows, fine.ravel(), Q).reshape(ks.size, REFINE, Q + 1)[b, :, p] < L).sum(axis=1)
        whole[p] = np.where(more > 0, fine[b, np.maximum(more - 1, 0)], whole[p])
    whole[:1] = 0.0
    return whole


def _role_gains(r: np.ndarray, grid: np.ndarray, Q: int) -> dict[tuple[int, int], np.ndarray]:
    """gain[(f, l)][c, j]: most whole layers a block of j stages of this group holds at cycle grid[c] (NONE where it
    cannot), f / l: whether it holds the pipeline's first / last stage: mesh_knapsack.block_roles, as the tables'
    bound (mesh_bound._option_gains), from the group's own rows, the whole pipeline on one group for every j."""
    a = dict(zip(_COLS, r.T))
    j = np.arange(Q + 1)[:, None, None]
    roles = block_roles(a, lambda penalties: whole_layers(grid[None, :, None], penalties[:, None, :], a["tau"],
                                                          a["most"]), j, j)
    return {key: g.max(axis=-1).T for key, g in roles.items()}


def _role_capacity(rows: list[np.ndarray], grid: np.ndarray, Q: int) -> np.ndarray:
    """[c, p]: most whole layers p <= Q stages hold at cycle grid[c] (NONE where they cannot be placed), a max-plus
    knapsack over the groups of (stages taken, first stage placed, last stage placed) as mesh_bound._capacity's. A
    block that holds both the first and the last stage is the whole pipeline: that role is not a step of the
    knapsack (it would let other groups' blocks join it) but, per stage count, the best such block alone."""
    best = {(f, ll): np.full((grid.size, Q + 1), NONE) for f in (0, 1) for ll in (0, 1)}
    best[(0, 0)][:, 0] = 0.0
    alone = np.full((grid.size, Q + 1), NONE)
    for gains in per_class(rows, lambda r: _role_gains(r, grid, Q), key=lambda r: r.tobytes()):
        alone = np.maximum(alone, gains[(1, 1)])
        best = step(best, {k: v for k, v in gains.items() if k != (1, 1)}, Q, merged)
    return np.maximum(best[(1, 1)], alone)


def _sum(rows: list[np.ndarray], col: str, fn) -> list[tuple[np.ndarray, np.ndarray]]:
    """(slots, fn(column)[None, :]) per group: one knapsack case."""
    i = _COLS.index(col)
    return [(r[:, 0], fn(r[:, i])[None, :]) for r in rows]


def _crossings_us(costs: CostSource, per_group: list[list[tuple[NodeGroup, ParallelConfig]]]) -> dict:
    """mesh_sites.cheapest_crossings between the groups at these options (before any tables)."""
    def crossings():
        for a_opts, b_opts in itertools.permutations([row for row in per_group if row], 2):
            a, b = a_opts[0][0], b_opts[0][0]
            if a.site == b.site or (path := costs.fleet.path(a, b)) is None:
                continue
            send = [costs.mesh_link_us(a, b, c) for _, c in a_opts]
            recv = [costs.mesh_link_us(a, b, c) for _, c in b_opts]
            if None not in send and None not in recv:
                yield a.site, b.site, min(send), min(recv), to_us(path.latency_s)

    return cheapest_crossings(crossings())


def fill_us(costs: CostSource, per_group: list[list[tuple[NodeGroup, ParallelConfig]]]) -> float:
    """Least work of L layers plus the embedding and the LM head at the fastest option's rates."""
    per = [costs.group(g, c) for opts in per_group for g, c in opts]
    if not per:
        return math.inf
    return (costs.model.num_layers * min(x.layer_us for x in per) + min(x.first_us for x in per)
            + min(x.last_us for x in per))


def _objective(cycle: np.ndarray, work: np.ndarray, m: int, usable: np.ndarray) -> np.ndarray:
    """(m - 1) cycle + work where the cycle is finite and the set usable, inf elsewhere."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(cycle) & usable, (m - 1) * cycle + work, math.inf)


def _set_bound(costs: CostSource, per_group: list, rows: list[np.ndarray], m: int, P: int, cross: tuple[int, float],
               incumbent_us: float) -> tuple[np.ndarray, np.ndarray]:
    """(bound [p], least cycle [p]) for p <= P over these groups (one set of sites, `cross` = (its sites - 1, their
    least spanning tree)); inf where p stages cannot be placed."""
    L, p = costs.model.num_layers, np.arange(P + 1)
    tau_min = min(float(r[:, 1].min()) for r in rows)
    with np.errstate(divide="ignore"):
        rate = _knapsack(_sum(rows, "tau", lambda t: 1.0 / t), P)[0]
    one = -_knapsack(_sum(rows, "tau", lambda t: -t), P)[0]  # least sum of tau over p stages
    edge = min(costs.group(g, c).first_us for row in per_group for g, c in row) + min(
        costs.group(g, c).last_us for row in per_group for g, c in row)
    least_end = min(float(r[:, 3].min()) for r in rows)
    least_end = least_end if math.isfinite(least_end) else 0.0
    # every boundary both ways at the least boundary term, the crossings at the spanning tree instead
    sends = np.where(p >= 1, 2 * np.maximum(p - 1 - cross[0], 0) * least_end, 0.0) + cross[1]
    work = np.maximum(L * tau_min, one + (L - p) * tau_min) + edge + sends
    with np.errstate(divide="ignore", invalid="ignore"):
        cycle = np.where(rate > 0, L / rate, math.inf)
    bound = _objective(cycle, work, m, p >= cross[0] + 1)
    below = np.nonzero(bound < incumbent_us)[0]
    reach = (incumbent_us - L * tau_min - edge - cross[1]) / max(m - 1, 1)
    if m == 1 or not below.size or below[-1] < 2 or not math.isfinite(reach) or reach <= 0:
        return bound, cycle
    Q, grid = int(below[-1]), np.array(CYCLE_GRID) * reach  # the grid only up to the last p still below
    whole = _whole_cycle(rows, grid, Q, L)
    cycle = cycle.copy()
    cycle[:Q + 1] = np.maximum(cycle[:Q + 1], whole)
    bound = _objective(cycle, work, m, p >= cross[0] + 1)
    return bound, cycle


def first_bounds(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions,
                 incumbent_us: float = math.inf) -> tuple[list[tuple], dict, dict]:
    """(lower bound us, B, P, 0, (least cycle us, inf)) of every outer candidate, in the order the search takes
    them; the fill bound (fill_us over every group) of each B; and per candidate (B, P) over several sites, the
    bound of each set of sites (a frozenset) whose plans it can hold, for planner/mesh_sites.py (module docstring)."""
    L, gbs = costs.model.num_layers, costs.train.global_batch_size
    Pmax = min(L, opts.max_pp or L)
    sites = tuple(dict.fromkeys(g.site for g in groups))
    sets = ([U for k in range(1, len(sites) + 1) for U in itertools.combinations(sites, k)]
            if len(sites) <= MAX_SITES else [sites])
    out, fills, floors = [], {}, {}
    for B in (b for b in range(1, gbs + 1) if gbs % b == 0):
        per_group = [[(g, c) for c in host_options(costs, g, B, 1, opts)] for g in groups]
        fill = fills[B] = fill_us(costs, per_group)
        if not math.isfinite(fill):
            continue
        edges = _crossings_us(costs, per_group) if len(sets) > 1 else {}
        rows = [_option_rows(costs, g, [c for _, c in row], [x for x in groups if x is not g])
                for g, row in zip(groups, per_group)]
        least, cycle, per_set = np.full(Pmax + 1, math.inf), np.full(Pmax + 1, math.inf), {}
        for U in sets:
            inside = [i for i, g in enumerate(groups) if g.site in U and len(rows[i])]
            span = least_spanning_tree(U, edges) if len(U) > 1 and len(sets) > 1 else 0.0
            if not inside or not math.isfinite(span):
                continue
            bound, cyc = _set_bound(costs, [per_group[i] for i in inside], [rows[i] for i in inside], gbs // B,
                                    Pmax, (len(U) - 1 if len(sets) > 1 else 0, span), incumbent_us)
            least, cycle, per_set[frozenset(U)] = np.minimum(least, bound), np.minimum(cycle, cyc), bound
        for P in range(1, Pmax + 1):
            if math.isfinite(least[P]):
                out.append((float(least[P]), B, P, 0, (float(cycle[P]), math.inf)))
                if len(sets) > 1:
                    floors[(B, P)] = {U: float(b[P]) for U, b in per_set.items()}
    return sorted(out), fills, floors
