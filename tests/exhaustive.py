"""Reference exhaustive search for small fleets: every plan of the family, scored by the same cost tables.

Test-only (never shipped in the package): used by the tests to check that the CP-SAT planner finds the optimum: for each outer candidate, every
contiguous block placement (ordered groups x stage counts) and every split of the layers (numpy-vectorised).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from hgplan.costmodel.pipeline import segment_loops
from hgplan.costmodel.schedule import longest_interleaved_path
from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource, tail_class
from hgplan.planner.options import SearchOptions
from hgplan.planner.tables import CostTables, build_tables


def compositions(total: int, parts: int) -> np.ndarray:
    """All ways to write `total` as an ordered sum of `parts` positive integers, one per row."""
    if parts == 1:
        return np.array([[total]])
    rows = []
    for cuts in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + cuts + (total,)
        rows.append([edges[i + 1] - edges[i] for i in range(parts)])
    return np.array(rows, dtype=np.int64).reshape(-1, parts)


def block_placements(t: CostTables) -> list[list[int]]:
    """Contiguous placements: an ordered choice of groups, each used for a positive number of stages <= its slots
    (every group of the table when t.require_all)."""
    p, K = t.pp, len(t.groups)
    out = []
    for n in range(K if t.require_all else 1, K + 1):
        for order in itertools.permutations(range(K), n):
            for counts in compositions(p, n):
                if all(c <= t.slots[k] for c, k in zip(counts, order)):
                    out.append([k for k, c in zip(order, counts) for _ in range(int(c))])
    return out


def _phase_path(t: CostTables, assign: list[int], splits: np.ndarray, work: np.ndarray) -> np.ndarray:
    """v x the longest two- or three-stage path of each split (work: each stage's work, edges included)."""
    p = t.pp
    fwd = splits * np.array([t.fwd_layer_us[k] for k in assign])
    fwd[:, 0] += t.first_fwd_us[assign[0]]
    fwd[:, -1] += t.last_fwd_us[assign[-1]]
    bwd = work - fwd
    send = [t.send_us[assign[a]][assign[b]] for a, b in t.boundaries()]
    lat = [t.lat_us[assign[a]][assign[b]] for a, b in t.boundaries()]
    return longest_interleaved_path([fwd[:, s] for s in range(p)], [bwd[:, s] for s in range(p)], send, send, lat,
                                    microbatches=t.microbatches, vpp=t.vpp, maximum=np.maximum)


def best_for_tables(t: CostTables) -> tuple[float, list[int], list[int]] | None:
    """(v-scaled objective, placement, layers) of the best plan for one outer candidate, or None."""
    best = None
    for assign, splits, _, obj in plans_for_tables(t):
        i = int(np.argmin(obj))
        if best is None or obj[i] < best[0]:
            best = (float(obj[i]), assign, [int(x) for x in splits[i]])
    return best


def plans_for_tables(t: CostTables):
    """Every placement with a plan that fits: (placement, its layer splits (one per row), each split's cycle as
    CostTables.objective takes it, each split's v-scaled objective, inf where it does not fit)."""
    p, v, m, L = t.pp, t.vpp, t.microbatches, t.num_layers
    if L % v:
        return
    splits = compositions(L // v, p) * v
    for assign in block_placements(t):
        bounds = t.boundaries()
        if any(t.send_us[assign[a]][assign[b]] is None for a, b in bounds):
            continue
        tau = np.array([t.layer_us[k] for k in assign])
        work = splits * tau
        work[:, 0] += t.first_us[assign[0]]
        work[:, -1] += t.last_us[assign[-1]]
        sends = np.zeros(p)
        for a, b in bounds:
            val = t.send_us[assign[a]][assign[b]]
            sends[a] += val
            sends[b] += val
        cycle = (work + v * sends).max(axis=1)
        if v == 1:  # 1F1B's loops (costmodel/pipeline.py), as CostTables.objective: whole microseconds, rounded up
            chain = [t.send_us[assign[s]][assign[s + 1]] for s in range(p - 1)] + [0]
            lats = [t.lat_us[assign[s]][assign[s + 1]] for s in range(p - 1)] + [0]
            cols = [work[:, s] for s in range(p)]
            for _, n, loop in segment_loops(cols, [0] * p, chain, chain, lats, microbatches=m):
                cycle = np.maximum(cycle, -(-loop // n))
        fill = work.sum(axis=1) + sum(2 * t.send_us[assign[a]][assign[b]] + 2 * t.lat_us[assign[a]][assign[b]]
                                      for a, b in bounds if b == a + 1)
        cls = [tail_class(s, p) for s in range(p)]
        tails = (np.array([t.tail_a_us[c][k] for c, k in zip(cls, assign)])
                 + splits * np.array([t.tail_b_us[c][k] for c, k in zip(cls, assign)]))
        tied = t.tied_us[assign[0]][assign[-1]]
        tails[:, 0] += tied
        if p > 1:
            tails[:, -1] += tied
        tail = tails.max(axis=1)
        mem = (np.array([t.mem_a_mib[s][k] for s, k in enumerate(assign)])
               + splits * np.array([t.mem_b_mib[s][k] for s, k in enumerate(assign)]))
        ok = (mem <= np.array([t.cap_mib[k] for k in assign])).all(axis=1)
        if not ok.any():
            continue
        pipe = (v * m - 1) * cycle + fill
        if v > 1:  # interleaving's phase paths (costmodel/pipeline.py), as CostTables.objective
            pipe = np.maximum(pipe, _phase_path(t, assign, splits, work))
        yield assign, splits, cycle, np.where(ok, pipe + v * tail, np.inf)


def exhaustive_best(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions) -> tuple[float, object]:
    """Best predicted time (us) over the whole family, and its (cfg, placement, layers)."""
    groups = [g for g in fleet.groups if opts.groups is None or g.key in opts.groups]
    best_time, best_plan = math.inf, None
    costs = CostSource(fleet, model, train)
    for cand in enumerate_candidates(costs, opts, groups)[0]:
        t = build_tables(costs, cand.cfg, groups)
        if t is None:
            continue
        res = best_for_tables(t)
        if res is None:
            continue
        time_us = res[0] / cand.cfg.vpp
        if time_us < best_time:
            best_time, best_plan = time_us, (cand.cfg, [t.groups[k] for k in res[1]], res[2])
    return best_time, best_plan
