"""Reference exhaustive search of the asymmetric (FlagScale process-mesh) family on small fleets.

Test-only. For every outer candidate (B samples per micro-batch step, P stages) it builds the mesh tables with
every option of every host (dominance pruning switched off, so the pruning is checked too), then tries every
ordered choice of hosts with their stage counts, every option of each used host and every split of the layers
(numpy-vectorised), and scores each plan by the tables' closed form (MeshTables.objective, mirrored here).
"""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
from exhaustive import compositions

from hgplan.domain import NodeGroup
from hgplan.planner import mesh_tables
from hgplan.planner.costs import CostSource, tail_class
from hgplan.planner.mesh_tables import MeshTables, build_mesh_tables
from hgplan.planner.options import SearchOptions


def unpruned_tables(costs: CostSource, B: int, P: int, groups: list[NodeGroup], opts: SearchOptions):
    """build_mesh_tables with every option of every host kept."""
    with mock.patch.object(mesh_tables, "_prune", lambda hr, *a: list(range(len(hr.options)))):
        return build_mesh_tables(costs, B, P, groups, opts)


def _placements(t: MeshTables):
    """(stage hosts, option per used host): ordered distinct hosts, each a positive number of stages within the
    slots of its option, the tied first and last stage on one tp."""
    H, P = len(t.hosts), t.pp
    for n in range(1, min(H, P) + 1):
        for order in itertools.permutations(range(H), n):
            for counts in compositions(P, n):
                for opts in itertools.product(*(range(len(t.options[h])) for h in order)):
                    if any(c > t.slots[h][o] for c, h, o in zip(counts, order, opts)):
                        continue
                    if t.tied and t.options[order[0]][opts[0]].tp != t.options[order[-1]][opts[-1]].tp:
                        continue
                    assign = [h for h, c in zip(order, counts) for _ in range(int(c))]
                    yield assign, dict(zip(order, opts))


def _scores(t: MeshTables, assign: list[int], choice: dict[int, int],
            splits: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(closed form, cycle) of every layer split of one placement (inf where memory breaks or the tail is outside the
    tables' tail_range_us; None when unreachable)."""
    P, m = t.pp, t.microbatches
    sends = []
    for s in range(P - 1):
        h, h2 = assign[s], assign[s + 1]
        x = t.send(h, choice[h], h2, choice[h2])
        if x is None:
            return None
        sends.append((x, t.latency(h, choice[h], h2)))
    opt = [choice[h] for h in assign]
    work = splits * np.array([t.layer_us[h][o] for h, o in zip(assign, opt)])
    work[:, 0] += t.first_us[assign[0]][opt[0]]
    work[:, -1] += t.last_us[assign[-1]][opt[-1]]
    busy = np.array([sum(x for b, (x, _) in enumerate(sends) if s in (b, b + 1)) for s in range(P)])
    cycle = (work + busy).max(axis=1)
    if t.loops:  # 1F1B's loop from stage s to stage e over e - s + 1 < m micro-batches, written out
        for s in range(P - 1):
            for e in range(s + 1, min(P, s + m - 1)):
                loop = (work[:, s:e + 1].sum(axis=1) + sum(2 * x + 2 * lat for x, lat in sends[s:e])
                        + (sends[s - 1][0] if s else 0) + (sends[e][0] if e < P - 1 else 0))
                cycle = np.maximum(cycle, -(-loop // (e - s + 1)))
    fill = work.sum(axis=1) + sum(2 * x + 2 * lat for x, lat in sends)
    tied = t.tied_us[assign[0]][opt[0]][assign[-1]] if P > 1 else 0
    cls = [tail_class(s, P) for s in range(P)]
    tails = (np.array([t.tail_a_us[c][h][o] for c, h, o in zip(cls, assign, opt)])
             + splits * np.array([t.tail_b_us[c][h][o] for c, h, o in zip(cls, assign, opt)]))
    tails[:, 0] += tied
    if P > 1:
        tails[:, -1] += tied
    room = np.array([t.memory_layers(s, h, o) for s, (h, o) in enumerate(zip(assign, opt))])
    tail = tails.max(axis=1)
    ok = (splits <= room).all(axis=1) & (tail >= t.tail_range_us[0]) & (tail <= t.tail_range_us[1])
    return np.where(ok, (m - 1) * cycle + fill + tail, np.inf), np.where(ok, cycle, np.inf)


def scored(t: MeshTables, stride: int = 1):
    """(assign, choice, layer splits, closed form per split, cycle per split) of every placement of one candidate's
    tables whose hosts are linked (every stride-th placement)."""
    splits = compositions(t.num_layers, t.pp)
    for assign, choice in list(_placements(t))[::stride]:
        scores = _scores(t, assign, choice, splits)
        if scores is not None:
            yield assign, choice, splits, *scores


def candidate_optima(t: MeshTables):
    """(objective us, (assign, choice, layers)) of the best plan of one candidate's tables, or (inf, None), and the
    least cycle (us) of any of its plans (inf when it has none), from one pass over the plans."""
    best_us, best, cycle_us = math.inf, None, math.inf
    for assign, choice, splits, obj, cycles in scored(t):
        i = int(np.argmin(obj))
        if obj[i] < best_us:
            best_us, best = float(obj[i]), (assign, choice, [int(x) for x in splits[i]])
        cycle_us = min(cycle_us, float(cycles.min()))
    return best_us, best, cycle_us


def exhaustive_mesh_best(costs: CostSource, groups: list[NodeGroup], opts: SearchOptions):
    """(objective us, (tables, assign, choice, layers)) of the best mesh plan, or (inf, None)."""
    L, gbs = costs.model.num_layers, costs.train.global_batch_size
    best_us, best = math.inf, None
    for B in (b for b in range(1, gbs + 1) if gbs % b == 0):
        for P in range(1, min(L, opts.max_pp or L) + 1):
            t = unpruned_tables(costs, B, P, groups, opts)
            if t is None:
                continue
            obj, plan, _ = candidate_optima(t)
            if obj < best_us:
                best_us, best = obj, (t, *plan)
    return best_us, best


def pair_optima(t: MeshTables) -> dict[tuple[int, int], tuple[float, float]]:
    """Per (first host, last host): (best objective us, least cycle us) of the plans of one candidate's tables whose
    pipeline starts on the one and ends on the other (pairs without a plan left out)."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for assign, _, _, obj, cycles in scored(t):
        key = (assign[0], assign[-1])
        o, c = out.get(key, (math.inf, math.inf))
        out[key] = (min(o, float(obj.min())), min(c, float(cycles.min())))
    return {k: v for k, v in out.items() if math.isfinite(v[0])}
