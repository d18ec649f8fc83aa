"""CP-SAT model: place every pipeline stage on a node group and split the layers, for one outer candidate.

Laid out as the CP-SAT primer and OR-Tools' examples do: a container of the decision variables with `extract()`,
one function per constraint group (each says why it exists), the objective, the hint, and `solve()` which only
wires them together. The solver receives precomputed integer tables (planner/tables.py) and knows nothing of the
cost model.

Legend: p stages (s = 0..p-1), K node groups of the table (k), v virtual stages per rank, m micro-batches,
L layers; b indexes the pipeline boundaries (stage a -> stage b, plus the wrap-around one when interleaved).
Variables: x[s][k] stage s on group k; u[s] layers of stage s divided by v; y[s][k] = layers if x[s][k] else 0;
z[b,k,k'] the two ends of boundary b sit on k and k'; cycle and tail as in the objective (v-scaled microseconds):
    (v m - 1) cycle + sum_s work_s + sum_b (2 send_b + 2 lat_b) + v tail
with cycle >= work_s + v x sends touching s, and without interleaving n x cycle >= each loop of n micro-batches
through the 1F1B steady state (costmodel/pipeline.py, segment_loops); tail >= DP tail of each stage. With
interleaving the first two terms are max'ed with each two-stage phase path and each three-stage steady path
(costmodel/schedule.py, phase_paths and steady_paths). Mirrors CostTables.objective.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from ortools.sat.python import cp_model

from hgplan.costmodel.schedule import longest_steady_path, phase_paths, steady_paths
from hgplan.planner.costs import tail_class
from hgplan.planner.symmetry import canonical_assign, table_classes
from hgplan.planner.tables import CostTables


@dataclass(frozen=True, slots=True, kw_only=True)
class SolverParams:
    """CP-SAT parameters of one solve. `extra` is text-format SatParameters applied last (the CLI's
    --solver-params escape hatch); everything here is recorded in the search JSON."""

    num_workers: int = 1
    random_seed: int = 1
    max_deterministic_time: float = 2.0
    """Per candidate, in CP-SAT's deterministic time units (reproducible, unlike wall time)."""
    max_time_in_seconds: float = 30.0
    """Safety net only."""
    relative_gap_limit: float = 0.0
    log_search_progress: bool = False
    extra: str = ""

    def under(self, defaults: str) -> SolverParams:
        """These parameters with hgplan's own text-format `defaults` for one kind of model applied before `extra`, so
        the user's --solver-params still win."""
        return replace(self, extra=" ".join(p for p in (defaults, self.extra) if p))

    def less_elapsed(self, began_s: float) -> SolverParams:
        """These parameters with the wall-clock limit less the time since began_s (a time.perf_counter() reading taken
        before building the model: building counts against limits.within's deadline; a 1024-GPU eight-group mesh
        candidate's solve asked for 2.1 s before the deadline ended 0.6 s past it), at least 50 ms."""
        return replace(self, max_time_in_seconds=max(0.05, self.max_time_in_seconds - (time.perf_counter() - began_s)))

    def to_dict(self) -> dict:
        """The parameters as recorded in the search JSON."""
        return {"num_workers": self.num_workers, "random_seed": self.random_seed,
                "max_deterministic_time": self.max_deterministic_time, "max_time_in_seconds": self.max_time_in_seconds,
                "relative_gap_limit": self.relative_gap_limit}


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    """What one solve returned, in the tables' units."""

    status: str
    objective: int | None
    bound: float
    assign: tuple[int, ...]
    layers: tuple[int, ...]
    deterministic_time: float
    wall_time_s: float
    model_text: str | None = None
    """The CpModelProto in text format, when the caller asked to keep it (--export-model)."""


@dataclass(slots=True)
class PlacementVars:
    """The decision variables of one model."""

    x: list[list[cp_model.IntVar]]
    u: list[cp_model.IntVar]
    y: list[list[cp_model.IntVar]]
    z: dict[tuple[int, int, int], cp_model.IntVar] = field(default_factory=dict)
    by_boundary: dict[int, list[tuple[int, int, cp_model.IntVar]]] = field(default_factory=dict)
    """z's (k, k2, var) per boundary, in z's order, filled with z (_add_boundaries): the expressions per boundary read
    it instead of scanning all of z for each boundary (64 groups and 64 stages: 262,144 arcs, scanned 64 times in each
    of three places: 40% of the model's build, benchmarks/model_build.py)."""

    def arcs(self, bi: int) -> list[tuple[int, int, cp_model.IntVar]]:
        """The (k, k2, z) of boundary bi."""
        return self.by_boundary.get(bi, [])

    def extract(self, solver: cp_model.CpSolver, v: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(group of each stage, layers of each stage) of the solver's current solution."""
        K = len(self.x[0])
        assign = tuple(next(k for k in range(K) if solver.boolean_value(xs[k])) for xs in self.x)
        return assign, tuple(v * solver.value(us) for us in self.u)


def _layer_caps(t: CostTables, upper_bound: int | None) -> list[int]:
    """Most layers a stage on group k may hold: L, or, with an incumbent, UB / ((v m - 1) tau_k), a valid and much
    tighter bound (a stage holding more would make the cycle alone exceed the incumbent)."""
    v, m, L = t.vpp, t.microbatches, t.num_layers
    if upper_bound is None or v * m == 1:
        return [L] * len(t.groups)
    return [min(L, upper_bound // ((v * m - 1) * t.layer_us[k])) for k in range(len(t.groups))]


def _new_vars(md: cp_model.CpModel, t: CostTables) -> PlacementVars:
    p, K, L = t.pp, len(t.groups), t.num_layers
    return PlacementVars(x=[[md.new_bool_var(f"x{s}_{k}") for k in range(K)] for s in range(p)],
                         u=[md.new_int_var(1, L // t.vpp, f"u{s}") for s in range(p)],
                         y=[[md.new_int_var(0, L, f"y{s}_{k}") for k in range(K)] for s in range(p)])


def _add_stage_placement(md: cp_model.CpModel, t: CostTables, xv: PlacementVars, caps: list[int]) -> None:
    """Each stage sits on exactly one group and holds whole chunks of v layers; all layers are placed; a stage fits
    its group's memory. Why: these are the plan family's definition (one GPU type per stage) and the hard memory
    rule (a + b x layers MiB, linear for a fixed stage and group)."""
    v = t.vpp
    for s in range(t.pp):
        md.add_exactly_one(xv.x[s])
        md.add(sum(xv.y[s]) == v * xv.u[s])
        for k in range(len(t.groups)):
            md.add(xv.y[s][k] == 0).only_enforce_if(~xv.x[s][k])
            md.add(xv.y[s][k] <= caps[k] * xv.x[s][k])
            md.add(t.mem_a_mib[s][k] + t.mem_b_mib[s][k] * xv.y[s][k] <= t.cap_mib[k]).only_enforce_if(xv.x[s][k])
    md.add(sum(xv.u) * v == t.num_layers)


def _add_group_capacity(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> None:
    """A group hosts at most its GPUs // stage size stages; with require_all, at least one. Why: stages own whole
    GPUs, and the search solves one set of groups per item, so every group of the item must be used."""
    for k in range(len(t.groups)):
        used = sum(xv.x[s][k] for s in range(t.pp))
        md.add(used <= t.slots[k])
        if t.require_all:
            md.add(used >= 1)


def _add_boundaries(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> None:
    """z[b,k,k'] links the groups at both ends of boundary b, only over reachable pairs. Why: the sends, latencies
    and contiguity are all priced per boundary, and an unreachable pair must be impossible."""
    K = len(t.groups)
    for bi, (a, b) in enumerate(t.boundaries()):
        arcs = xv.by_boundary.setdefault(bi, [])
        for k in range(K):
            for k2 in range(K):
                if t.send_us[k][k2] is not None:
                    xv.z[(bi, k, k2)] = var = md.new_bool_var(f"z{bi}_{k}_{k2}")
                    arcs.append((k, k2, var))
        for k in range(K):
            md.add(sum(xv.z[(bi, k, k2)] for k2 in range(K) if (bi, k, k2) in xv.z) == xv.x[a][k])
        for k2 in range(K):
            md.add(sum(xv.z[(bi, k, k2)] for k in range(K) if (bi, k, k2) in xv.z) == xv.x[b][k2])


def _chain(t: CostTables) -> list[int]:
    """The boundaries between consecutive stages (the wrap-around one excluded)."""
    return [bi for bi, (a, b) in enumerate(t.boundaries()) if b == a + 1]


def _add_contiguity(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> None:
    """Each group is entered at most once along the pipeline. Why: a group's stages form one block, so the pipeline
    crosses each inter-group link at most once (the closed form and the exporters assume it)."""
    K = len(t.groups)
    for k in range(K):
        entries = [xv.x[0][k]] + [xv.z[(bi, k2, k)] for bi in _chain(t) for k2 in range(K)
                                  if k2 != k and (bi, k2, k) in xv.z]
        md.add(sum(entries) <= 1)


def _add_symmetry_breaking(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> None:
    """Inside a block, interior stages whose neighbours share their group may swap layer counts at equal cost; fewer
    layers on the earlier stage (more micro-batches in flight) never hurts memory, so order them. Why: it removes
    equivalent optima the search would otherwise have to close one by one."""
    K = len(t.groups)
    same = []
    for bi in _chain(t):
        var = md.new_bool_var(f"same{bi}")
        md.add(var == sum(xv.z[(bi, k, k)] for k in range(K) if (bi, k, k) in xv.z))
        same.append(var)
    for s in range(1, t.pp - 2):
        md.add(xv.u[s] <= xv.u[s + 1]).only_enforce_if([same[s - 1], same[s], same[s + 1]])


def _add_group_order(md: cp_model.CpModel, t: CostTables, xv: PlacementVars,
                     classes: tuple[tuple[int, ...], ...]) -> None:
    """Interchangeable groups (planner/symmetry.py) appear along the pipeline in index order: no stage of the earlier
    group comes after a stage of the later one. Why: relabelling them gives a plan of the same objective, so every
    order but one is an equivalent optimum the search would otherwise have to close."""
    for members in classes:
        for k, k2 in zip(members, members[1:]):
            for s in range(t.pp - 1):
                md.add(sum(xv.x[s2][k] for s2 in range(s + 1, t.pp)) == 0).only_enforce_if(xv.x[s][k2])


def _stage_time(t: CostTables, xv: PlacementVars, per_layer: tuple[int, ...], first: tuple[int, ...],
                last: tuple[int, ...]) -> list:
    """Per stage, a time as a linear expression: its layers at per_layer[k] each, plus first[k] on the first stage
    and last[k] on the last (the embedding, the LM head), k being the stage's group."""
    p, K = t.pp, len(t.groups)
    out = []
    for s in range(p):
        expr = sum(per_layer[k] * xv.y[s][k] for k in range(K))
        if s == 0:
            expr += sum(first[k] * xv.x[0][k] for k in range(K))
        if s == p - 1:
            expr += sum(last[k] * xv.x[p - 1][k] for k in range(K))
        out.append(expr)
    return out


def _cycle_and_fill(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> tuple[cp_model.IntVar, object]:
    """The cycle (slowest stage per micro-batch, sends included) and v x the pipeline time: (v m - 1) cycle + the
    fill (work plus the crossings' sends and latencies once), and with interleaving at least its phase paths. Why:
    with the tail they are the closed form of the iteration time."""
    p, v = t.pp, t.vpp
    work = _stage_time(t, xv, t.layer_us, t.first_us, t.last_us)
    send_of = {bi: sum(t.send_us[k][k2] * var for k, k2, var in xv.arcs(bi)) for bi, _ in enumerate(t.boundaries())}
    # a loop of n micro-batches averages n stages' work, the sends and latencies between them and two edge sends
    horizon = t.max_stage_us + 2 * (v + 1) * t.most_send_us + 2 * max(max(row) for row in t.lat_us) + 1
    cycle = md.new_int_var(0, horizon, "cycle")
    for s in range(p):
        touching = [send_of[bi] for bi, (a, b) in enumerate(t.boundaries()) if s in (a, b)]
        md.add(cycle >= work[s] + v * sum(touching))
    fill = sum(work)
    for bi in _chain(t):
        fill += sum((2 * t.send_us[k][k2] + 2 * t.lat_us[k][k2]) * var for k, k2, var in xv.arcs(bi))
    if v == 1 and p > 1:
        _add_segment_loops(md, t, xv, work, send_of, cycle, horizon)
    pipe = (v * t.microbatches - 1) * cycle + fill
    if v > 1:
        pipe = _phase_pipe(md, t, xv, work, send_of, pipe)
    return cycle, pipe


def _phase_pipe(md: cp_model.CpModel, t: CostTables, xv: PlacementVars, work: list, send_of: dict, pipe):
    """v x the pipeline time when interleaved: at least the closed form `pipe`, every two-stage path of
    costmodel/schedule.py's phase_paths (start[s] + end[t], s <= t), over a running maximum of the starts so the
    p (p + 1) / 2 paths are 2 p constraints, and every three-stage path of its steady_paths (_steady_paths). Why: a
    stage that sends forward over a slow link and a later one that sends backward over it cannot share one cycle in
    interleaving's long warm-up and cool-down (CostTables.objective mirrors it)."""
    p = t.pp
    fwd = _stage_time(t, xv, t.fwd_layer_us, t.first_fwd_us, t.last_fwd_us)
    bwd = [w - f for w, f in zip(work, fwd)]
    sends = [send_of[bi] for bi in range(p)]
    lat = [sum(t.lat_us[k][k2] * var for k, k2, var in xv.arcs(bi)) for bi in range(p)]
    starts, ends = phase_paths(fwd, bwd, sends, sends, lat, microbatches=t.microbatches, vpp=t.vpp)
    # every coefficient is >= 0, so the paths of stages at their largest work, send and latency bound them all
    most = [t.max_stage_us, t.most_send_us, max(map(max, t.lat_us))]
    top_s, top_e = phase_paths([most[0]] * p, [most[0]] * p, [most[1]] * p, [most[1]] * p, [most[2]] * p,
                               microbatches=t.microbatches, vpp=t.vpp)
    steady_top = longest_steady_path([most[0]] * p, [most[0]] * p, [most[1]] * p, [most[1]] * p, [most[2]] * p,
                                     microbatches=t.microbatches, vpp=t.vpp)
    top = max(max(top_s) + max(top_e), steady_top) + 1
    out = md.new_int_var(0, top, "pipe")
    md.add(out >= pipe)
    running = None
    for s in range(p):
        nxt = md.new_int_var(0, top, f"start_max{s}")
        md.add(nxt >= starts[s])
        if running is not None:
            md.add(nxt >= running)
        running = nxt
        md.add(out >= running + ends[s])
    _steady_paths(md, out, steady_paths(fwd, bwd, sends, sends, lat, microbatches=t.microbatches, vpp=t.vpp),
                  most[0] + t.vpp * most[1])
    return out


def _steady_paths(md: cp_model.CpModel, out, paths: tuple, top: int) -> None:
    """out >= every three-stage path of costmodel/schedule.py's steady_paths (base[t] + w[t] x the most ahead[s1] +
    w[t] x the most behind[s3], s1, s3 <= t; first[t] for s3 = 0), over running maxima of ahead and behind: 4 p
    constraints for p^3 paths. top: at least every stage's ahead and behind."""
    base, w, ahead, behind, first = paths
    top_ahead = top_behind = None
    for t in range(len(base)):
        nxt = md.new_int_var(0, top, f"ahead_max{t}")
        md.add(nxt >= ahead[t])
        if top_ahead is not None:
            md.add(nxt >= top_ahead)
        top_ahead = nxt
        if t > 0:
            nxt = md.new_int_var(0, top, f"behind_max{t}")
            md.add(nxt >= behind[t])
            if top_behind is not None:
                md.add(nxt >= top_behind)
            top_behind = nxt
        if base[t] is not None:
            md.add(out >= base[t] + w[t] * top_ahead + first[t])
            if top_behind is not None:
                md.add(out >= base[t] + w[t] * top_ahead + w[t] * top_behind)


def _add_segment_loops(md: cp_model.CpModel, t: CostTables, xv: PlacementVars, work: list, send_of: dict,
                       cycle: cp_model.IntVar, horizon: int) -> None:
    """The placement's boundary sends and latencies, then add_loops. Why: a slow link inside the pipeline bounds the
    cycle as the closed form says (CostTables.objective mirrors it)."""
    p, span = t.pp, t.pp * (3 * horizon + 2 * max(max(row) for row in t.lat_us)) + 1  # work, 2 sends, 2 latencies
    send = [md.new_int_var(0, horizon, f"send{b}") for b in range(p - 1)]
    cross = [md.new_int_var(0, span, f"cross{b}") for b in range(p - 1)]
    for b in range(p - 1):  # boundary b joins stage b and b + 1 (index b among the boundaries)
        md.add(send[b] == send_of[b])
        md.add(cross[b] == 2 * send[b] + sum(2 * t.lat_us[k][k2] * var for k, k2, var in xv.arcs(b)))
    add_loops(md, (work, send, cross), cycle, t.microbatches, span)


def add_loops(md: cp_model.CpModel, terms: tuple[list, list, list], cycle: cp_model.IntVar, m: int, span: int) -> None:
    """n x cycle >= every 1F1B loop of n micro-batches of m (costmodel/pipeline.py, segment_loops) over prefix sums, so
    each of the p (p - 1) / 2 loops is a constraint of a few terms; terms = (work of each stage, send of each boundary,
    its 2 sends + 2 latencies), at most span in all. Shared by the stock and the mesh model."""
    (work, send, cross), p = terms, len(terms[0])
    prefix = [md.new_int_var(0, span, f"prefix{s}") for s in range(p + 1)]
    md.add(prefix[0] == 0)
    for s in range(p):
        md.add(prefix[s + 1] == prefix[s] + work[s] + (cross[s] if s < p - 1 else 0))
    for s in range(p - 1):
        for last in range(s + 1, min(p, s + m - 1)):
            loop = (prefix[last + 1] - prefix[s] - (cross[last] if last < p - 1 else 0)
                    + (send[s - 1] if s > 0 else 0) + (send[last] if last < p - 1 else 0))
            md.add((last - s + 1) * cycle >= loop)


def tied_expr(md: cp_model.CpModel, tied_us: tuple[tuple[int, ...], ...], xv: PlacementVars, p: int):
    """The tied-embedding sync between the first stage's group k and the last stage's k' (tied_us[k][k']), as a
    linear expression over indicator variables w[k,k'] = x[0][k] and x[p-1][k']; 0 when no pair syncs anything."""
    K = len(tied_us)
    if max(max(r) for r in tied_us) <= 0:
        return 0
    w = {}
    for k in range(K):
        for k2 in range(K):
            if tied_us[k][k2]:
                w[(k, k2)] = md.new_bool_var(f"w{k}_{k2}")
                md.add_implication(w[(k, k2)], xv.x[0][k])
                md.add_implication(w[(k, k2)], xv.x[p - 1][k2])
                md.add_bool_or([w[(k, k2)], ~xv.x[0][k], ~xv.x[p - 1][k2]])
    return sum(tied_us[k][k2] * var for (k, k2), var in w.items())


def _tail(md: cp_model.CpModel, t: CostTables, xv: PlacementVars) -> cp_model.IntVar:
    """The exposed data-parallel sync and optimizer step after the flush, the slowest stage's (its class's linear
    tail, plus the tied-embedding sync on the first and last stages). Why: it ends every iteration."""
    p, K, L = t.pp, len(t.groups), t.num_layers
    tail = md.new_int_var(0, max(map(max, t.tail_a_us)) + max(map(max, t.tail_b_us)) * L
                          + max(max(r) for r in t.tied_us) + 1, "tail")
    tied = tied_expr(md, t.tied_us, xv, p) if p > 1 else 0
    for s in range(p):
        c = tail_class(s, p)
        expr = sum(t.tail_a_us[c][k] * xv.x[s][k] + t.tail_b_us[c][k] * xv.y[s][k] for k in range(K))
        if s in (0, p - 1):
            expr += tied
        md.add(tail >= expr)
    return tail


def add_hint(md: cp_model.CpModel, t: CostTables, xv: PlacementVars, hint: tuple[list[int], list[int]]) -> None:
    """Warm start: a complete placement (group of each stage, layers of each stage)."""
    h_assign, h_layers = hint
    for s in range(t.pp):
        for k in range(len(t.groups)):
            md.add_hint(xv.x[s][k], int(h_assign[s] == k))
            md.add_hint(xv.y[s][k], h_layers[s] if h_assign[s] == k else 0)
        md.add_hint(xv.u[s], h_layers[s] // t.vpp)


def build_model(t: CostTables, *, upper_bound: int | None = None,
                classes: tuple[tuple[int, ...], ...] | None = None) -> tuple[cp_model.CpModel, PlacementVars]:
    """The whole model of one candidate. With upper_bound (v-scaled objective of a known plan), only strictly
    better plans are feasible. `classes`: the table's interchangeable groups, when the caller has them."""
    md = cp_model.CpModel()
    xv = _new_vars(md, t)
    _add_stage_placement(md, t, xv, _layer_caps(t, upper_bound))
    _add_group_capacity(md, t, xv)
    _add_boundaries(md, t, xv)
    _add_contiguity(md, t, xv)
    if t.vpp == 1:  # with interleaving the phase paths tell interior stages apart
        _add_symmetry_breaking(md, t, xv)
    _add_group_order(md, t, xv, table_classes(t) if classes is None else classes)
    _, pipe = _cycle_and_fill(md, t, xv)
    objective = pipe + t.vpp * _tail(md, t, xv)
    if upper_bound is not None:
        md.add(objective <= upper_bound - 1)
    md.minimize(objective)
    return md, xv


def unsolved_bound(solver: cp_model.CpSolver, status: int) -> float:
    """What a solve that returned no plan proves: inf when INFEASIBLE (nothing better than its upper bound), CP-SAT's
    bound when UNKNOWN (it holds for every plan better than the upper bound), else nothing (0)."""
    if status == cp_model.INFEASIBLE:
        return float("inf")
    return float(solver.best_objective_bound) if status == cp_model.UNKNOWN else 0.0


def configure_solver(solver: cp_model.CpSolver, params: SolverParams, log: Callable[[str], None] | None) -> None:
    """Apply one solve's parameters (and the log callback) to a solver; shared with planner/mesh_model.py."""
    sp = solver.parameters
    sp.num_workers = params.num_workers
    sp.random_seed = params.random_seed
    sp.max_deterministic_time = params.max_deterministic_time
    sp.max_time_in_seconds = params.max_time_in_seconds
    sp.relative_gap_limit = params.relative_gap_limit
    sp.log_search_progress = params.log_search_progress
    sp.log_to_stdout = sp.catch_sigint_signal = False  # Ctrl-C: the command ends (cli.interrupt_ends_the_process)
    if params.extra:
        assert sp.merge_text_format(params.extra), "solver parameters are validated before the search"
    if params.log_search_progress and log is not None:
        solver.log_callback = log


def solve(t: CostTables, params: SolverParams, *, hint: tuple[list[int], list[int]] | None = None,
          upper_bound: int | None = None, log: Callable[[str], None] | None = None,
          keep_model: bool = False) -> Solution:
    """Solve one candidate; status INFEASIBLE with upper_bound means "nothing better than upper_bound".

    `log` receives CP-SAT's progress lines when params.log_search_progress is set (the CLI sends them to stderr;
    the planner never prints)."""
    classes, began = table_classes(t), time.perf_counter()
    md, xv = build_model(t, upper_bound=upper_bound, classes=classes)
    return run_model(md, xv, t, classes, params.less_elapsed(began), hint=hint, log=log, keep_model=keep_model)


def run_model(md: cp_model.CpModel, xv: PlacementVars, t: CostTables, classes: tuple[tuple[int, ...], ...],
              params: SolverParams, *, hint: tuple[list[int], list[int]] | None = None,
              log: Callable[[str], None] | None = None, keep_model: bool = False) -> Solution:
    """Solve a built placement model (this one's or planner/path_model.py's) and read its solution back."""
    if hint is not None:  # relabelled into the order _add_group_order keeps
        add_hint(md, t, xv, (canonical_assign(classes, hint[0]), list(hint[1])))
    solver = cp_model.CpSolver()
    configure_solver(solver, params, log)
    status = solver.solve(md)
    name = solver.status_name(status)
    text = str(md.proto) if keep_model else None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assign, layers = xv.extract(solver, t.vpp)
        return Solution(status=name, objective=round(solver.objective_value), bound=float(solver.best_objective_bound),
                        assign=assign, layers=layers, deterministic_time=solver.deterministic_time,
                        wall_time_s=solver.wall_time, model_text=text)
    # INFEASIBLE: nothing (better than upper_bound) exists. UNKNOWN: no plan found, but CP-SAT's bound still holds
    # for every plan better than upper_bound.
    return Solution(status=name, objective=None, bound=unsolved_bound(solver, status), assign=(), layers=(),
                    deterministic_time=solver.deterministic_time, wall_time_s=solver.wall_time, model_text=text)
