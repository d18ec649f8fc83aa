"""A fast primal heuristic for one (configuration, node-group set): good plans before CP-SAT starts.

CP-SAT receives its result as the warm start (and the search keeps it as a plan), so a strong incumbent
prunes other items early. Everything here works on the integer cost tables and is deterministic.

- `best_layers`: for a fixed placement of stages on groups, the layer split. At cycle C stage s holds at
  most min(v floor((C - e_s) / (v tau_s)), its memory cap) layers, e_s being its edge work plus v x the sends
  it touches; the smallest C that holds all layers is found by bisection, then for a few larger C the layers
  go to the cheapest stages first (least total work), and the best objective of CostTables.objective wins.
- `improve`: block order by cheapest crossings, then a local search that moves one stage between groups or
  swaps two neighbouring blocks while the objective improves.
- `greedy_hint`: the starting placement `improve` refines; `apportion` and `capped_apportion` split layers in
  proportion to speed (also used by the proportional baseline).

Legend: p pipeline stages, v virtual stages per rank, m micro-batches, L layers, K node groups of the table,
tau a group's integer microseconds per layer, C the cycle (docs/planner.md).
"""

from __future__ import annotations

import itertools
import math

from hgplan.planner.tables import CostTables

GRID = 12
"""Cycles tried above the smallest feasible one when splitting layers."""
MAX_ROUNDS = 6
"""Rounds of local search (each tries every single move once)."""


def best_layers(t: CostTables, assign: list[int]) -> tuple[int, list[int]] | None:
    """(v-scaled objective, layers) of the best split found for this placement, or None if it has none."""
    p, v, m, L = t.pp, t.vpp, t.microbatches, t.num_layers
    units = L // v
    if len(assign) != p or p > units:
        return None
    extra = t.cycle_extras(assign)
    if extra is None:
        return None
    tau = [t.layer_us[k] for k in assign]
    mem_units = [min(units, t.memory_layers(s, k) // v) for s, k in enumerate(assign)]
    if min(mem_units) < 1 or sum(mem_units) < units:
        return None
    order = sorted(range(p), key=lambda s: (tau[s], s))

    def caps(c: int) -> list[int] | None:
        """Each stage's layer cap at cycle c (None when the stages cannot hold L)."""
        out = [min(mem_units[s], max(0, (c - extra[s]) // (v * tau[s]))) for s in range(p)]
        return out if min(out) >= 1 and sum(out) >= units else None

    lo, hi = 0, max(extra[s] + v * tau[s] * mem_units[s] for s in range(p))
    if caps(hi) is None:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if caps(mid) is None:
            lo = mid
        else:
            hi = mid

    def split(c: int) -> list[int]:
        """Layers at cycle c: one chunk each, then the cheapest stages filled first."""
        cap = caps(c)
        assert cap is not None
        got = [1] * p
        left = units - p
        for s in order:
            take = min(left, cap[s] - 1)
            got[s] += take
            left -= take
        return [n * v for n in got]

    best: tuple[int, list[int]] | None = None
    layers = split(hi)
    span = sum(n * tau[s] for s, n in enumerate(layers)) - L * min(tau)
    steps = [hi] + [hi + span * i // (GRID * max(1, v * m - 1)) for i in range(1, GRID + 1)]
    for c in dict.fromkeys(steps):
        layers = split(c)
        obj = t.objective(assign, layers)
        if obj is not None and (best is None or obj < best[0]):
            best = (obj, layers)
    return best


def blocks_of(assign: list[int]) -> list[tuple[int, int]]:
    """(group, stages) per block, in pipeline order."""
    out: list[tuple[int, int]] = []
    for k in assign:
        if out and out[-1][0] == k:
            out[-1] = (k, out[-1][1] + 1)
        else:
            out.append((k, 1))
    return out


def _expand(blocks: list[tuple[int, int]]) -> list[int]:
    return [k for k, n in blocks for _ in range(n)]


def _crossing_cost(t: CostTables, order: list[int]) -> float:
    total = 0
    for a, b in zip(order, order[1:]):
        send = t.send_us[a][b]
        if send is None:
            return float("inf")
        total += 2 * send + 2 * t.lat_us[a][b] + 2 * t.vpp * t.microbatches * send
    return total


def _orders(t: CostTables, groups: list[int]) -> list[list[int]]:
    """Block orders worth trying: the cheapest paths through the groups' crossings (all orders up to 6 groups,
    otherwise the nearest-neighbour path from every start)."""
    if len(groups) <= 6:
        paths = [list(q) for q in itertools.permutations(groups)]
    else:
        paths = []
        for start in groups:
            path, rest = [start], set(groups) - {start}
            while rest:
                nxt = min(rest, key=lambda k: (t.send_us[path[-1]][k] is None, t.send_us[path[-1]][k] or 0,
                                               t.lat_us[path[-1]][k], k))
                path.append(nxt)
                rest.remove(nxt)
            paths.append(path)
    paths.sort(key=lambda q: (_crossing_cost(t, q), q))
    return [q for q in paths[:8] if _crossing_cost(t, q) < float("inf")]


def improve(t: CostTables, start: tuple[list[int], list[int]]) -> tuple[list[int], list[int]]:
    """A placement at least as good as `start` (assign, layers): better block orders, then local moves."""
    best_assign, best_layers_ = list(start[0]), list(start[1])
    best_obj = t.objective(best_assign, best_layers_)

    def consider(assign: list[int]) -> bool:
        """Keep this placement if its best split beats the best so far."""
        nonlocal best_assign, best_layers_, best_obj
        found = best_layers(t, assign)
        if found is not None and (best_obj is None or found[0] < best_obj):
            best_obj, best_layers_, best_assign = found[0], found[1], list(assign)
            return True
        return False

    consider(best_assign)
    counts = dict(blocks_of(best_assign))
    for order in _orders(t, [k for k, _ in blocks_of(best_assign)]):
        consider(_expand([(k, counts[k]) for k in order]))
    for _ in range(MAX_ROUNDS):
        blocks = blocks_of(best_assign)
        moved = False
        for i, j in itertools.permutations(range(len(blocks)), 2):  # one stage from block i to block j
            (ki, ni), (kj, nj) = blocks[i], blocks[j]
            if ni > 1 and nj < t.slots[kj]:
                trial = list(blocks)
                trial[i], trial[j] = (ki, ni - 1), (kj, nj + 1)
                moved |= consider(_expand(trial))
        for i in range(len(blocks) - 1):  # swap neighbouring blocks
            trial = list(blocks)
            trial[i], trial[i + 1] = trial[i + 1], trial[i]
            moved |= consider(_expand(trial))
        if not moved:
            break
    return best_assign, best_layers_


def apportion(total: int, weights: list[float]) -> list[int]:
    """Split `total` into len(weights) integers >= 1 in proportion to the weights (largest remainder)."""
    n = len(weights)
    raw = [total * w / sum(weights) for w in weights]
    parts = [max(1, int(r)) for r in raw]
    while sum(parts) < total:
        i = max(range(n), key=lambda j: raw[j] - parts[j])
        parts[i] += 1
    while sum(parts) > total:
        i = max(range(n), key=lambda j: (parts[j] - raw[j]) if parts[j] > 1 else -math.inf)
        parts[i] -= 1
    return parts


def capped_apportion(total: int, weights: list[float], caps: list[int]) -> list[int]:
    """Like apportion, but no part above its cap (water-filling); parts stay >= 1 even if that breaks a cap."""
    n = len(weights)
    parts = [1] * n
    left = total - n
    while left > 0:
        room = [i for i in range(n) if parts[i] < caps[i]]
        if not room:
            room = list(range(n))
        share = sum(weights[i] for i in room)
        grant = [int(left * weights[i] / share) for i in room]
        if sum(grant) == 0:
            best = max(room, key=lambda i: (weights[i] / (parts[i] + 1), -i))
            parts[best] += 1
            left -= 1
            continue
        for i, g in zip(room, grant):
            g = min(g, max(0, caps[i] - parts[i])) if any(parts[j] < caps[j] for j in room) else g
            parts[i] += g
            left -= g
    return parts


def greedy_hint(t: CostTables, fleet_order: list[str]) -> tuple[list[int], list[int]]:
    """A warm start for CP-SAT: one slot of every required group, then the fastest slots, blocks in file order,
    layers in proportion to speed but within each stage's memory."""
    p, v, L, K = t.pp, t.vpp, t.num_layers, len(t.groups)
    pool = sorted((t.layer_us[k], fleet_order.index(t.groups[k]), k) for k in range(K) for _ in range(t.slots[k]))
    chosen = []
    if t.require_all:
        for k in range(K):
            item = next(x for x in pool if x[2] == k)
            pool.remove(item)
            chosen.append(item)
    chosen += pool[:max(0, p - len(chosen))]
    assign = [k for _, _, k in sorted(chosen[:p], key=lambda x: x[1])]
    caps = [max(1, t.memory_layers(s, k) // v) for s, k in enumerate(assign)]
    layers = capped_apportion(L // v, [1.0 / t.layer_us[k] for k in assign], caps)
    return assign, [n * v for n in layers]
