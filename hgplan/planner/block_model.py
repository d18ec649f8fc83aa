"""A CP-SAT model of one (configuration, group set) item at the level of blocks, a relaxation of planner/model.py.

Every group of the set hosts one contiguous block of stages, so a plan is: the order of the blocks (a Hamiltonian
path, a circuit through a dummy node), each block's number of stages n_k, and its layers. Inside a block the
interior stages are interchangeable (same group, the same sends on both sides), so the model keeps per block only
the layers of its first stage (a_k), of its last (b_k, when n_k >= 2), the interior's total (i_k) and the interior's
largest stage (q_k): i_k <= (n_k - 2) q_k. Stage-level models of 24-40 stages carry hundreds of symmetric placement
variables whose relaxation stays far below the optimum; this one has a few dozen, and CP-SAT closes it in well under
a second on the fleets where the stage-level model finds no plan in its first second (docs/planner.md).

It is a relaxation: every plan of the item maps to a solution of this model whose objective is at most the plan's
(CostTables.objective), because the model keeps every term of that objective exactly and drops only constraints:
1F1B's loops of three or more micro-batches and the loops inside a block (only each crossing's two-stage loop is
kept), the per-stage memory of interior stages (their largest holds at most the roomiest interior position's
room, and their total at most the positions' total), and with interleaving the two- and three-stage paths (the objective
is at least each of them; they weigh each stage by its position). With `paths` it also keeps a relaxation of the
three-stage steady paths through each block's last stage (planner/block_paths.py), still a relaxation. So its optimum is
a lower bound of the item, and its solution, expanded to stages, is a plan whose real objective is checked: when the
two are equal the item is solved.
Interchangeable groups' blocks come in index order (the same symmetry model.py breaks), which keeps the optimum.

Legend: p stages, v virtual stages per rank, m micro-batches, L layers; K node groups of the table (k); units of v
layers (u); objective in v-scaled integer microseconds, as CostTables.objective.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from hgplan.planner.block_cuts import BlockCuts
from hgplan.planner.block_paths import add_steady_paths
from hgplan.planner.heuristic import blocks_of
from hgplan.planner.model import SolverParams, configure_solver, unsolved_bound
from hgplan.planner.symmetry import canonical_assign, table_classes
from hgplan.planner.tables import CostTables

FIRST, MIDDLE, LAST = 0, 1, 2
"""Indices into TAIL_CLASSES (planner/costs.py)."""
PATHS_PARAMS = "linearization_level:0"
"""CP-SAT's defaults for the model with the steady paths: its constraints are mostly enforced by Booleans (the blocks'
order and positions), whose linear relaxation costs more than it prunes. On the 16-group benchmark fleet's pp 16 item
(2026-11-27, single runs): to its optimum 2.2 deterministic seconds instead of 6.4 at the default level (2 took 20
without closing), to prove nothing beats the 4.461 s incumbent 1.4 instead of 1.8."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockSolution:
    """What one solve of the block model returned: its bound (v-scaled us; a lower bound of the item's optimum, or of
    every plan below the upper bound it was given) and, when it found one, its solution expanded to stages."""

    status: str
    bound: float
    relaxed: int | None
    """The model's objective for the solution it returned (None when none)."""
    assign: tuple[int, ...]
    layers: tuple[int, ...]
    deterministic_time: float
    model_text: str | None = None
    """The model as a text CpModelProto (with keep_model; `search --export-model`)."""


@dataclass(slots=True)
class _Vars:
    """Per group k: stages n, first-stage units a, last-stage units b, interior units i and interior max q, start
    index of its block; the order's arcs (start, end, z[k, k2]) and the (first, last) pair w[k, k2]."""

    n: list
    a: list
    b: list
    i: list
    q: list
    lone: list
    three: list
    idx: list
    start: list
    end: list
    z: dict
    w: dict


def _room(t: CostTables, k: int) -> list[int]:
    """Most units of v layers each stage index can hold on group k within its memory (capped at L / v)."""
    v, units = t.vpp, t.num_layers // t.vpp
    fits = [t.memory_layers(s, k) for s in range(t.pp)]
    return [min(units, n // v) if n >= 0 else -1 for n in fits]


def _interior_tables(room: list[int], p: int) -> tuple[list[int], list[int]]:
    """Indexed by start * p + count: the total and the largest room of the count interior stages after a block
    that starts at `start` (0 and 0 for count 0; -1 past the pipeline's end)."""
    total, most = [], []
    for start in range(p):
        for count in range(p):
            span = room[start + 1:start + 1 + count]
            ok = count == 0 or start + count <= p - 2  # the block's last stage comes after its interior
            total.append(sum(span) if ok else -1)
            most.append(max(span, default=0) if ok else -1)
    return total, most


def _new_vars(md: cp_model.CpModel, t: CostTables) -> _Vars:
    p, K, units = t.pp, len(t.groups), t.num_layers // t.vpp
    top = [min(t.slots[k], p - K + 1) for k in range(K)]
    n = [md.new_int_var(1, top[k], f"n{k}") for k in range(K)]
    lone = [md.new_bool_var(f"lone{k}") for k in range(K)]
    three = [md.new_bool_var(f"three{k}") for k in range(K)]
    for k in range(K):
        md.add(n[k] == 1).only_enforce_if(lone[k])
        md.add(n[k] >= 2).only_enforce_if(~lone[k])
        md.add(n[k] >= 3).only_enforce_if(three[k])
        md.add(n[k] <= 2).only_enforce_if(~three[k])
    z = {(k, k2): md.new_bool_var(f"z{k}_{k2}") for k in range(K) for k2 in range(K)
         if k != k2 and t.send_us[k][k2] is not None}
    start = [md.new_bool_var(f"start{k}") for k in range(K)]
    end = [md.new_bool_var(f"end{k}") for k in range(K)]
    w = {(k, k2): md.new_bool_var(f"w{k}_{k2}") for k in range(K) for k2 in range(K) if k != k2}
    return _Vars(n=n, a=[md.new_int_var(1, units, f"a{k}") for k in range(K)],
                 b=[md.new_int_var(0, units, f"b{k}") for k in range(K)],
                 i=[md.new_int_var(0, units, f"i{k}") for k in range(K)],
                 q=[md.new_int_var(0, units, f"q{k}") for k in range(K)], lone=lone, three=three,
                 idx=[md.new_int_var(0, p - 1, f"idx{k}") for k in range(K)], start=start, end=end, z=z, w=w)


def _add_order(md: cp_model.CpModel, t: CostTables, xv: _Vars) -> None:
    """The blocks form one path through every group: a circuit through a dummy node K (K -> k: k starts, k -> K: k
    ends); each block starts where the one before it ends; w[k, k2] is the (first, last) pair, which must be linked
    last -> first when interleaved (the wrap-around send)."""
    K = len(t.groups)
    arcs = [(K, k, xv.start[k]) for k in range(K)] + [(k, K, xv.end[k]) for k in range(K)]
    arcs += [(k, k2, var) for (k, k2), var in xv.z.items()]
    md.add_circuit(arcs)
    for k in range(K):
        md.add(xv.idx[k] == 0).only_enforce_if(xv.start[k])
    for (k, k2), var in xv.z.items():
        md.add(xv.idx[k2] == xv.idx[k] + xv.n[k]).only_enforce_if(var)
    for (k, k2), var in xv.w.items():
        md.add_bool_and([xv.start[k], xv.end[k2]]).only_enforce_if(var)
        md.add_bool_or([var, ~xv.start[k], ~xv.end[k2]])
        if t.vpp > 1 and t.send_us[k2][k] is None:
            md.add(var == 0)
    md.add(sum(xv.n) == t.pp)


def _add_layers(md: cp_model.CpModel, t: CostTables, xv: _Vars) -> None:
    """Units per stage: a lone block holds a only (b = 0); a longer one a and b >= 1; the interior (n - 2 stages)
    holds i units, at least one per stage and at most q per stage; each stage within its position's memory (the
    interior: its total and its largest room). All units are placed."""
    p, K, units = t.pp, len(t.groups), t.num_layers // t.vpp
    for k in range(K):
        room = _room(t, k)
        md.add(xv.b[k] == 0).only_enforce_if(xv.lone[k])
        md.add(xv.b[k] >= 1).only_enforce_if(~xv.lone[k])
        md.add_element(xv.idx[k], room, cap_a := md.new_int_var(-1, units, f"capa{k}"))
        md.add(xv.a[k] <= cap_a)
        last = md.new_int_var(0, p - 1, f"last{k}")
        md.add(last == xv.idx[k] + xv.n[k] - 1)
        md.add_element(last, room, cap_b := md.new_int_var(-1, units, f"capb{k}"))
        md.add(xv.b[k] <= cap_b).only_enforce_if(~xv.lone[k])
        count = md.new_int_var(0, p, f"count{k}")
        md.add(count == xv.n[k] - 2).only_enforce_if(xv.three[k])
        md.add(count == 0).only_enforce_if(~xv.three[k])
        md.add(xv.q[k] == 0).only_enforce_if(~xv.three[k])
        md.add(xv.q[k] >= 1).only_enforce_if(xv.three[k])
        prod = md.new_int_var(0, units * p, f"prod{k}")
        md.add_multiplication_equality(prod, [count, xv.q[k]])
        md.add(xv.i[k] <= prod)
        md.add(xv.i[k] >= count)
        total, most = _interior_tables(room, p)
        key = md.new_int_var(0, p * p - 1, f"key{k}")
        md.add(key == xv.idx[k] * p + count)
        md.add_element(key, total, room_i := md.new_int_var(-1, units * p, f"roomi{k}"))
        md.add_element(key, most, room_q := md.new_int_var(-1, units, f"roomq{k}"))
        md.add(xv.i[k] <= room_i)
        md.add(xv.q[k] <= room_q)
    md.add(sum(xv.a) + sum(xv.b) + sum(xv.i) == units)


def _sends(t: CostTables, xv: _Vars) -> list[tuple]:
    """Per block, v x the sends at its ends as expressions of the order's arcs: (its incoming crossing's, the
    wrap-around's into it when it is the first block of an interleaved pipeline, its outgoing one: the crossing or,
    for the last block when interleaved, the wrap-around)."""
    K, v = len(t.groups), t.vpp
    out = []
    for k in range(K):
        inward = v * sum(t.send_us[k0][k] * var for (k0, k2), var in xv.z.items() if k2 == k)
        outward = v * sum(t.send_us[k][k2] * var for (k0, k2), var in xv.z.items() if k0 == k)
        wrap_in = 0
        if v > 1:  # an unlinked (first, last) pair has no wrap-around send: its w is 0 (_add_order)
            wrap_in = v * sum(t.send_us[k2][k] * var for (k0, k2), var in xv.w.items()
                              if k0 == k and t.send_us[k2][k] is not None)
            outward += v * sum(t.send_us[k][k0] * var for (k0, k2), var in xv.w.items()
                               if k2 == k and t.send_us[k][k0] is not None)
        out.append((inward, wrap_in, outward))
    return out


def _add_cycle(md: cp_model.CpModel, t: CostTables, xv: _Vars, cycle: cp_model.IntVar, horizon: int,
               sends: list[tuple]) -> tuple[list, list]:
    """The cycle holds every stage's work plus v x the sends it touches (`sends`: _sends) and its edge work
    (CostTables.cycle_extras); without interleaving, 2 x cycle holds each crossing's two-stage loop (1F1B's steady
    state, segment_loops). Returns the first and last stage demands of each block."""
    K, v, m = len(t.groups), t.vpp, t.microbatches
    first, last = [], []
    for k in range(K):
        tau, own = v * t.layer_us[k], t.send_us[k][k]
        inward, wrap_in, outward = sends[k]
        inward = inward + wrap_in
        head = inward + t.first_us[k] * xv.start[k]
        tail = outward + t.last_us[k] * xv.end[k]
        df, dl = md.new_int_var(0, horizon, f"df{k}"), md.new_int_var(0, horizon, f"dl{k}")
        if own is None:  # two stages of this group cannot talk: a block of one stage only
            md.add(xv.lone[k] == 1)
            own = 0
        md.add(df == tau * xv.a[k] + head + tail).only_enforce_if(xv.lone[k])
        md.add(dl == df).only_enforce_if(xv.lone[k])
        md.add(df == tau * xv.a[k] + head + v * own).only_enforce_if(~xv.lone[k])
        md.add(dl == tau * xv.b[k] + tail + v * own).only_enforce_if(~xv.lone[k])
        md.add(cycle >= df)
        md.add(cycle >= dl)
        md.add(cycle >= tau * xv.q[k] + 2 * v * own)
        first.append(df)
        last.append(dl)
    if v == 1 and m >= 3:
        for (k, k2), var in xv.z.items():
            md.add(2 * cycle >= last[k] + first[k2] + 2 * t.lat_us[k][k2]).only_enforce_if(var)
    return first, last


def _fill(t: CostTables, xv: _Vars):
    """Work once per micro-batch plus every boundary's two sends and two latencies (the wrap-around excluded)."""
    K, v = len(t.groups), t.vpp
    out = sum(v * t.layer_us[k] * (xv.a[k] + xv.b[k] + xv.i[k]) + t.first_us[k] * xv.start[k]
              + t.last_us[k] * xv.end[k] for k in range(K))
    out += sum((2 * t.send_us[k][k2] + 2 * t.lat_us[k][k2]) * var for (k, k2), var in xv.z.items())
    for k in range(K):
        if t.send_us[k][k] is not None:
            out += (2 * t.send_us[k][k] + 2 * t.lat_us[k][k]) * (xv.n[k] - 1)
    return out


def _tail(md: cp_model.CpModel, t: CostTables, xv: _Vars) -> cp_model.IntVar:
    """The largest stage tail: the pipeline's first stage in class first, its last in class last (both plus the
    tied-embedding sync of the pair), every other stage in class middle; the interior's largest stage holds q."""
    K, v, L = len(t.groups), t.vpp, t.num_layers
    ta, tb = t.tail_a_us, t.tail_b_us
    top = max(map(max, ta)) + max(map(max, tb)) * L + max(max(r) for r in t.tied_us) + 1
    tail = md.new_int_var(0, top, "tail")
    tied = sum(t.tied_us[k][k2] * var for (k, k2), var in xv.w.items() if t.tied_us[k][k2])
    for k in range(K):
        a_layers, b_layers = v * xv.a[k], v * xv.b[k]
        md.add(tail >= ta[FIRST][k] + tb[FIRST][k] * a_layers + tied).only_enforce_if(xv.start[k])
        md.add(tail >= ta[LAST][k] + tb[LAST][k] * a_layers + tied).only_enforce_if([xv.lone[k], xv.end[k]])
        for other in (xv.lone[k], xv.end[k]):  # a stage that is neither the pipeline's first nor its last
            md.add(tail >= ta[MIDDLE][k] + tb[MIDDLE][k] * a_layers).only_enforce_if([~xv.start[k], ~other])
        md.add(tail >= ta[LAST][k] + tb[LAST][k] * b_layers + tied).only_enforce_if([~xv.lone[k], xv.end[k]])
        md.add(tail >= ta[MIDDLE][k] + tb[MIDDLE][k] * b_layers).only_enforce_if([~xv.lone[k], ~xv.end[k]])
        md.add(tail >= ta[MIDDLE][k] + tb[MIDDLE][k] * v * xv.q[k]).only_enforce_if(xv.three[k])
    return tail


def _add_group_order(md: cp_model.CpModel, xv: _Vars, classes: tuple[tuple[int, ...], ...]) -> None:
    """Interchangeable groups' blocks (planner/symmetry.py) start in index order, as model.py's stages do. Why:
    relabelling them maps a solution to one of the same objective, and on 16 groups in four classes of four every
    solution had 4!^4 twins (the 16-group benchmark fleet: 64 -> 25 s, docs/planner.md). Blocks do not overlap, so
    a later start is a later block; written with the block's length (idx2 >= idx + n) CP-SAT stalled on a
    three-group item."""
    for members in classes:
        for k, k2 in zip(members, members[1:]):
            md.add(xv.idx[k2] > xv.idx[k])


def build_block_model(t: CostTables, *, upper_bound: int | None = None,
                      classes: tuple[tuple[int, ...], ...] | None = None,
                      paths: bool = False, cuts: BlockCuts | None = None) -> tuple[cp_model.CpModel, _Vars]:
    """The block model of one item (t.require_all: every group of the table hosts a block). With upper_bound, only
    solutions strictly below it are feasible. `classes`: the table's interchangeable groups, when the caller has
    them. `paths`: with interleaving, also the relaxed steady paths (planner/block_paths.py)."""
    assert t.require_all and t.pp > 1 and len(t.groups) > 1, "the block model is for multi-group items"
    md = cp_model.CpModel()
    xv = _new_vars(md, t)
    _add_order(md, t, xv)
    _add_layers(md, t, xv)
    _add_group_order(md, xv, table_classes(t) if classes is None else classes)
    v = t.vpp
    # a crossing's loop (2 cycle >= both stages' demands + 2 x latency) can set the cycle: its latency counts too
    horizon = t.max_stage_us + 4 * v * t.most_send_us + max(max(row) for row in t.lat_us) + 1
    cycle = md.new_int_var(0, horizon, "cycle")
    if cuts is not None:
        _add_cuts(md, t, xv, cycle, cuts, upper_bound)
    sends = _sends(t, xv)
    _, last = _add_cycle(md, t, xv, cycle, horizon, sends)
    pipe = (v * t.microbatches - 1) * cycle + _fill(t, xv)
    longest = add_steady_paths(md, t, xv, pipe, last, sends, horizon) if v > 1 and paths else None
    objective = (pipe if longest is None else longest) + v * _tail(md, t, xv)
    if upper_bound is not None:
        md.add(objective <= upper_bound - 1)
    md.minimize(objective)
    return md, xv


def _add_cuts(md: cp_model.CpModel, t: CostTables, xv: _Vars, cycle: cp_model.IntVar, cuts: BlockCuts,
              upper_bound: int | None) -> None:
    """What the block bound proved (block_cuts.BlockCuts): the cycle above its floor, and above the (first, last)
    pair's own floor for the pair the plan has (exactly one w is set); a pair whose bound reaches upper_bound is
    ruled out."""
    md.add(cycle >= cuts.floor_us)
    lifted = []
    for (k, k2), var in xv.w.items():
        floor_us, value_us = cuts.at(t.groups[k], t.groups[k2])
        if upper_bound is not None and value_us * t.vpp >= upper_bound:
            md.add(var == 0)
        elif floor_us > cuts.floor_us:
            lifted.append((floor_us - cuts.floor_us) * var)
    if lifted:
        md.add(cycle >= cuts.floor_us + sum(lifted))


def add_block_hint(md: cp_model.CpModel, t: CostTables, xv: _Vars, assign: list[int], layers: list[int]) -> None:
    """Warm start from a stage-level plan of the item."""
    for var, value in block_values(t, xv, assign, layers):
        md.add_hint(var, value)


def block_values(t: CostTables, xv: _Vars, assign: list[int], layers: list[int]) -> list[tuple]:
    """(variable, value) of the block model's order and layer variables for a stage-level plan of the item."""
    v = t.vpp
    blocks = blocks_of(assign)
    out: list[tuple] = []
    s0 = 0
    for bi, (k, n) in enumerate(blocks):
        units = [layers[s] // v for s in range(s0, s0 + n)]
        out += [(xv.n[k], n), (xv.lone[k], n == 1), (xv.three[k], n >= 3), (xv.idx[k], s0), (xv.a[k], units[0]),
                (xv.b[k], units[-1] if n > 1 else 0), (xv.i[k], sum(units[1:-1])),
                (xv.q[k], max(units[1:-1], default=0)), (xv.start[k], bi == 0), (xv.end[k], bi == len(blocks) - 1)]
        s0 += n
    nxt = {k: blocks[bi + 1][0] for bi, (k, _) in enumerate(blocks[:-1])}
    out += [(var, nxt.get(k) == k2) for (k, k2), var in xv.z.items()]
    out += [(var, (k, k2) == (blocks[0][0], blocks[-1][0])) for (k, k2), var in xv.w.items()]
    return out


def expand(t: CostTables, solver: cp_model.CpSolver, xv: _Vars) -> tuple[list[int], list[int]]:
    """The solver's solution as a stage-level plan: blocks in path order; a block's interior gets one unit per stage,
    then the rest up to min(q, the position's room), latest stages first (they hold fewer micro-batches)."""
    K, v = len(t.groups), t.vpp
    k = next(k for k in range(K) if solver.boolean_value(xv.start[k]))
    succ = {k0: k2 for (k0, k2), var in xv.z.items() if solver.boolean_value(var)}
    assign: list[int] = []
    units: list[int] = []
    while True:
        n, s0 = solver.value(xv.n[k]), len(assign)
        if n == 1:
            block = [solver.value(xv.a[k])]
        else:
            room, q, left = _room(t, k), solver.value(xv.q[k]), solver.value(xv.i[k]) - (n - 2)
            inner = [1] * (n - 2)
            for j in reversed(range(n - 2)):
                take = max(0, min(left, min(q, room[s0 + 1 + j]) - 1))
                inner[j] += take
                left -= take
            block = [solver.value(xv.a[k])] + inner + [solver.value(xv.b[k])]
        assign += [k] * n
        units += block
        if k not in succ:
            return assign, [v * u for u in units]
        k = succ[k]


def solve_blocks(t: CostTables, params: SolverParams, *, hint: tuple[list[int], list[int]] | None = None,
                 upper_bound: int | None = None, log: Callable[[str], None] | None = None,
                 keep_model: bool = False, paths: bool = False, cuts: BlockCuts | None = None) -> BlockSolution:
    """Solve the block model of one item. The bound holds for every plan of the item (below upper_bound when one is
    given); the expanded plan is to be checked with CostTables.objective (it may break a dropped constraint).
    `paths`: with interleaving's relaxed steady paths (planner/block_paths.py), under PATHS_PARAMS."""
    classes, began = table_classes(t), time.perf_counter()
    md, xv = build_block_model(t, upper_bound=upper_bound, classes=classes, paths=paths, cuts=cuts)
    if hint is not None:
        add_block_hint(md, t, xv, canonical_assign(classes, hint[0]), list(hint[1]))
    solver = cp_model.CpSolver()
    params = params.less_elapsed(began)
    configure_solver(solver, params.under(PATHS_PARAMS) if paths and t.vpp > 1 else params, log)
    status = solver.solve(md)
    name, text = solver.status_name(status), str(md.proto) if keep_model else None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assign, layers = expand(t, solver, xv)
        return BlockSolution(status=name, bound=float(solver.best_objective_bound),
                             relaxed=round(solver.objective_value), assign=tuple(assign), layers=tuple(layers),
                             deterministic_time=solver.deterministic_time, model_text=text)
    return BlockSolution(status=name, bound=unsolved_bound(solver, status), relaxed=None, assign=(), layers=(),
                         deterministic_time=solver.deterministic_time, model_text=text)


def paths_bind(t: CostTables, sol: BlockSolution) -> bool:
    """Whether an optimal solution of the block model without the steady paths expands to a plan whose objective is
    above the model's value because of them (interleaved, and its own objective above the relaxed one): then the
    model with the paths may raise the item's bound."""
    if t.vpp == 1 or sol.status != "OPTIMAL" or sol.relaxed is None:
        return False
    real = t.objective(list(sol.assign), list(sol.layers))
    return real is not None and real > sol.relaxed
