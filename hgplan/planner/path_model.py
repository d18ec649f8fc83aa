"""The proof of the gap on the reported iteration time: a CP-SAT model whose objective is a lower bound of the
pipeline simulator's time, for one outer candidate over its node groups.

The search objective (planner/model.py) is the closed form, which is neither above nor below the simulator on every
plan, so its bound proves nothing about the time the planner reports. Here the objective is the largest of the
simulator's path bounds (costmodel/pipeline.path_terms: head + busy + chain, and 1F1B round trips; interleaved, also
costmodel/schedule.steady_paths), each plus the data-parallel tail that follows it. Every term is rounded down (or is a
line below the cost model's tail), so for every plan of the family: objective <= v x simulated iteration time. Its
minimum over a candidate is then a proven lower bound on any plan of that candidate, as the reported model prices it
(docs/planner.md, "What the gap means").

Legend as in planner/model.py: p stages, v virtual stages per rank, m micro-batches, K node groups (k); the
objective is in v-scaled integer microseconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from hgplan.costmodel.pipeline import PathCounts, critical_paths, path_terms
from hgplan.costmodel.schedule import longest_steady_path, steady_paths
from hgplan.planner.costs import US, CostSource, tail_class
from hgplan.planner.model import (PlacementVars, SolverParams, Solution, _add_boundaries, _add_contiguity,
                                  _add_group_capacity, _add_group_order, _add_stage_placement, _new_vars,
                                  _steady_paths, run_model, tied_expr)
from hgplan.planner.symmetry import table_classes
from hgplan.planner.tables import CostTables


PATH_MODEL_PARAMS = "add_mir_cuts: false add_cg_cuts: false"
"""SatParameters of every lower-bound model, before the user's --solver-params (which override them). These
models (a max of path sums, and critical-chain cuts) spend most of their time in CP-SAT's MIR and Chvatal-Gomory
cuts without closing the gap: on the 504-GPU three-type fleet's polishing models, without those two families, one
solve that stopped at its limit (1 deterministic second, 3.3 s) is optimal in 1.1 s, and the two others take 0.55 and
1.4 s instead of 1.35 and 3.2 s (same optima)."""


def _floor_us(seconds: float) -> int:
    """Seconds to whole microseconds, rounded down: a table of lower bounds."""
    return max(0, math.floor(seconds * US))


@dataclass(frozen=True, slots=True, kw_only=True)
class PathTables:
    """Integer lower bounds of every time the simulator and the tail charge, next to the candidate's cost tables
    (whose placement rules, slots and memory define the plan family). Per group k, per layer and micro-batch."""

    base: CostTables
    fwd_us: tuple[int, ...]
    bwd_us: tuple[int, ...]
    first_fwd_us: tuple[int, ...]
    first_bwd_us: tuple[int, ...]
    last_fwd_us: tuple[int, ...]
    last_bwd_us: tuple[int, ...]
    send_us: tuple[tuple[int | None, ...], ...]
    """The tables' send, less the 1 us their rounding to nearest may have added."""
    lat_us: tuple[tuple[int, ...], ...]
    tail_a_us: tuple[tuple[tuple[int, ...], ...], ...]
    """Per line j, stage class c and group k, a + b x layers at or below the cost model's tail at every layer count
    (CostSource.tail_floor; a group with fewer lines repeats its last): the tail is at least their maximum."""
    tail_b_us: tuple[tuple[tuple[int, ...], ...], ...]
    tied_us: tuple[tuple[int, ...], ...]

    @property
    def most_send_us(self) -> int:
        """The dearest send of any linked pair (0 when none)."""
        return max((x for row in self.send_us for x in row if x is not None), default=0)

    def stage_times(self, assign: list[int], layers: list[int]) -> tuple[list[int], list[int]]:
        """Per stage, forward and backward of one micro-batch over all its chunks (us, rounded down)."""
        p = len(assign)
        fwd = [self.fwd_us[k] * n for k, n in zip(assign, layers)]
        bwd = [self.bwd_us[k] * n for k, n in zip(assign, layers)]
        fwd[0] += self.first_fwd_us[assign[0]]
        bwd[0] += self.first_bwd_us[assign[0]]
        fwd[p - 1] += self.last_fwd_us[assign[p - 1]]
        bwd[p - 1] += self.last_bwd_us[assign[p - 1]]
        return fwd, bwd

    def tails(self, assign: list[int], layers: list[int]) -> list[int]:
        """Per stage, the lower line of its tail (the tied-embedding sync on the first and last stages)."""
        p = len(assign)
        out = []
        for s, (k, n) in enumerate(zip(assign, layers)):
            c = tail_class(s, p)
            out.append(max(a[c][k] + b[c][k] * n for a, b in zip(self.tail_a_us, self.tail_b_us))
                       + (self.tied_us[assign[0]][assign[-1]] if s in (0, p - 1) else 0))
        return out

    def edge_times(self, assign: list[int]) -> tuple[list[int], list[int]]:
        """Per boundary (p of them, the unused ones 0), the send and the latency (us, lower bounds)."""
        t = self.base
        pairs = [(assign[a], assign[b]) for a, b in t.boundaries()]
        xs = [self.send_us[k][k2] for k, k2 in pairs] + [0] * (t.pp - len(pairs))
        lat = [self.lat_us[k][k2] for k, k2 in pairs] + [0] * (t.pp - len(pairs))
        return xs, lat

    def objective(self, assign: list[int], layers: list[int], cuts: tuple[PathCounts, ...] = ()) -> int | None:
        """v x the lower bound (us) of a placement, None if it breaks a rule of the family. Mirrors the model."""
        t, v = self.base, self.base.vpp
        if t.objective(assign, layers) is None:
            return None
        fwd, bwd = self.stage_times(assign, layers)
        xs, lat = self.edge_times(assign)
        tails = self.tails(assign, layers)
        terms = [value + v * tails[0 if whole else s] for s, whole, value in
                 path_terms(fwd, bwd, xs, xs, lat, microbatches=t.microbatches, vpp=v)]
        if v > 1:  # interleaving's three-stage paths end with stage 0's last backward, as the whole pipeline
            terms.append(longest_steady_path(fwd, bwd, xs, xs, lat, microbatches=t.microbatches, vpp=v) + v * tails[0])
        return max(terms + [c.weight(fwd, bwd, xs, xs, lat, vpp=v) + v * tails[c.stage] for c in cuts])

    def simulated(self, assign: list[int], layers: list[int]) -> tuple[int, list[PathCounts]]:
        """v x the simulator's iteration time (us) on these lower-bound tables, and its critical chain to each
        stage's last op: chains that bound every plan of the candidate, to add to its model when the model's
        optimum simulates longer than its bound says."""
        t, v = self.base, self.base.vpp
        fwd, bwd = self.stage_times(assign, layers)
        xs, lat = self.edge_times(assign)
        tails = self.tails(assign, layers)
        paths = critical_paths(fwd, bwd, xs, xs, lat, microbatches=t.microbatches, vpp=v)
        return max(c.weight(fwd, bwd, xs, xs, lat, vpp=v) + v * tails[c.stage] for c in paths), paths


def build_path_tables(costs: CostSource, base: CostTables, hosts: dict[str, object]) -> PathTables:
    """The lower-bound tables of a candidate whose cost tables are `base` (hosts: node-group key -> NodeGroup)."""
    cfg = base.cfg
    groups = [hosts[key] for key in base.groups]
    work = [costs.group(g, cfg) for g in groups]
    edges = [w.edges_s for w in work]
    floors = [costs.tail_floor(g, cfg) for g in groups]  # [k][c] -> lines (a, b)
    J = max(len(lines) for per_class in floors for lines in per_class)
    lines = [[per_class[c] + per_class[c][-1:] * (J - len(per_class[c])) for c in range(len(per_class))]
             for per_class in floors]

    def less(row: tuple) -> tuple:
        return tuple(None if x is None else max(0, x - 1) for x in row)

    return PathTables(
        base=base, fwd_us=tuple(_floor_us(w.fwd_layer_s) for w in work),
        bwd_us=tuple(_floor_us(w.bwd_layer_s) for w in work),
        first_fwd_us=tuple(_floor_us(e[0]) for e in edges), first_bwd_us=tuple(_floor_us(e[1]) for e in edges),
        last_fwd_us=tuple(_floor_us(e[2]) for e in edges), last_bwd_us=tuple(_floor_us(e[3]) for e in edges),
        send_us=tuple(less(row) for row in base.send_us), lat_us=tuple(less(row) for row in base.lat_us),
        tail_a_us=tuple(tuple(tuple(ln[c][j][0] for ln in lines) for c in range(len(lines[0]))) for j in range(J)),
        tail_b_us=tuple(tuple(tuple(ln[c][j][1] for ln in lines) for c in range(len(lines[0]))) for j in range(J)),
        tied_us=tuple(less(row) for row in base.tied_us))


def path_classes(pt: PathTables) -> tuple[tuple[int, ...], ...]:
    """Interchangeable groups of the cost tables that are also interchangeable in the lower-bound tables."""
    def column(k: int) -> tuple:
        return (pt.fwd_us[k], pt.bwd_us[k], pt.first_fwd_us[k], pt.first_bwd_us[k], pt.last_fwd_us[k],
                pt.last_bwd_us[k], tuple(r[k] for line in pt.tail_a_us for r in line),
                tuple(r[k] for line in pt.tail_b_us for r in line))

    out: list[tuple[int, ...]] = []
    for members in table_classes(pt.base):
        by_column: dict[tuple, list[int]] = {}
        for k in members:
            by_column.setdefault(column(k), []).append(k)
        out += [tuple(ks) for ks in by_column.values()]
    return tuple(sorted(out))


def _least(rows: tuple) -> int:
    return min(x for line in rows for r in line for x in r)


def _tail_most(pt: PathTables) -> int:
    """Above every stage's tail (its lines' maximum and the tied-embedding sync) in every plan."""
    L = pt.base.num_layers
    return (max(x for line in pt.tail_a_us for r in line for x in r)
            + L * max(0, max(x for line in pt.tail_b_us for r in line for x in r)) + max(map(max, pt.tied_us)))


def _var(md: cp_model.CpModel, expr, lo: int, hi: int, name: str) -> cp_model.IntVar:
    """An integer variable equal to `expr`: the path terms add these up many times, and a variable (unlike a sum
    expression, which OR-Tools may extend in place) is safe to reuse and cheap to copy."""
    var = md.new_int_var(lo, hi, name)
    md.add(var == expr)
    return var


def _stage_vars(md: cp_model.CpModel, pt: PathTables, xv: PlacementVars) -> tuple[list, list, list, list, list]:
    """Per stage forward, backward and tail variables; per boundary send and latency variables."""
    t = pt.base
    p, K, L = t.pp, len(t.groups), t.num_layers
    fwd, bwd, tails = [], [], []
    most = L * max(max(pt.fwd_us), max(pt.bwd_us)) + sum(max(col) for col in (
        pt.first_fwd_us, pt.first_bwd_us, pt.last_fwd_us, pt.last_bwd_us))
    for s in range(p):
        f = sum(pt.fwd_us[k] * xv.y[s][k] for k in range(K))
        b = sum(pt.bwd_us[k] * xv.y[s][k] for k in range(K))
        if s == 0:
            f += sum(pt.first_fwd_us[k] * xv.x[0][k] for k in range(K))
            b += sum(pt.first_bwd_us[k] * xv.x[0][k] for k in range(K))
        if s == p - 1:
            f += sum(pt.last_fwd_us[k] * xv.x[p - 1][k] for k in range(K))
            b += sum(pt.last_bwd_us[k] * xv.x[p - 1][k] for k in range(K))
        fwd.append(_var(md, f, 0, most, f"f{s}"))
        bwd.append(_var(md, b, 0, most, f"b{s}"))
    sends, lats = [0] * p, [0] * p
    for bi, _ in enumerate(t.boundaries()):
        arcs = xv.arcs(bi)
        sends[bi] = _var(md, sum(pt.send_us[k][k2] * var for k, k2, var in arcs), 0, pt.most_send_us, f"snd{bi}")
        lats[bi] = _var(md, sum(pt.lat_us[k][k2] * var for k, k2, var in arcs), 0, max(map(max, pt.lat_us)),
                        f"lat{bi}")
    tied = tied_expr(md, pt.tied_us, xv, p) if p > 1 else 0
    low, high = min(0, _least(pt.tail_a_us) + L * min(0, _least(pt.tail_b_us))), _tail_most(pt)
    for s in range(p):
        c = tail_class(s, p)
        lines = [sum(a[c][k] * xv.x[s][k] + b[c][k] * xv.y[s][k] for k in range(K)) + (tied if s in (0, p - 1) else 0)
                 for a, b in zip(pt.tail_a_us, pt.tail_b_us)]
        if len(lines) == 1:
            tails.append(_var(md, lines[0], low, high, f"tail{s}"))
            continue
        tail = md.new_int_var(low, high, f"tail{s}")
        for line in lines:  # at least every line: the objective takes the tail upwards only
            md.add(tail >= line)
        tails.append(tail)
    return fwd, bwd, sends, lats, tails


def build_path_model(pt: PathTables, *, upper_bound: int | None = None,
                     classes: tuple[tuple[int, ...], ...] | None = None,
                     cuts: tuple[PathCounts, ...] = ()) -> tuple[cp_model.CpModel, PlacementVars]:
    """The family's placement rules (as planner/model.py, without its layer-order symmetry breaking, which the path
    bound does not respect) and the lower-bound objective (the path terms and the given critical chains, each with
    its stage's tail); with upper_bound, only plans strictly below it."""
    t = pt.base
    md = cp_model.CpModel()
    xv = _new_vars(md, t)
    _add_stage_placement(md, t, xv, [t.num_layers] * len(t.groups))
    _add_group_capacity(md, t, xv)
    _add_boundaries(md, t, xv)
    _add_contiguity(md, t, xv)
    _add_group_order(md, t, xv, path_classes(pt) if classes is None else classes)
    fwd, bwd, sends, lats, tails = _stage_vars(md, pt, xv)
    v = t.vpp
    terms = path_terms(fwd, bwd, sends, sends, lats, microbatches=t.microbatches, vpp=v)
    send = pt.most_send_us
    pipeline = (t.num_layers * (max(pt.fwd_us) + max(pt.bwd_us)) + max(pt.first_fwd_us) + max(pt.first_bwd_us)
                + max(pt.last_fwd_us) + max(pt.last_bwd_us) + 4 * t.pp * (send + max(map(max, pt.lat_us))))
    tail = _tail_most(pt)
    horizon = v * ((t.microbatches + 2) * pipeline + tail)  # above every term of every plan
    objective = md.new_int_var(0, horizon, "bound")
    for s, whole, value in terms:
        md.add(objective >= value + v * tails[0 if whole else s])
    if v > 1:
        _steady_paths(md, objective - v * tails[0],
                      steady_paths(fwd, bwd, sends, sends, lats, microbatches=t.microbatches, vpp=v), horizon)
    for c in cuts:
        md.add(objective >= c.weight(fwd, bwd, sends, sends, lats, vpp=v) + v * tails[c.stage])
    if upper_bound is not None:
        md.add(objective <= upper_bound - 1)
    md.minimize(objective)
    return md, xv


def solve_path(pt: PathTables, params: SolverParams, *, upper_bound: int | None = None,
               hint: tuple[list[int], list[int]] | None = None, cuts: tuple[PathCounts, ...] = ()) -> Solution:
    """Minimise the lower bound over one candidate. INFEASIBLE with upper_bound: every plan is at least it."""
    classes, began = path_classes(pt), time.perf_counter()
    md, xv = build_path_model(pt, upper_bound=upper_bound, classes=classes, cuts=cuts)
    return run_model(md, xv, pt.base, classes, params.less_elapsed(began).under(PATH_MODEL_PARAMS), hint=hint)
