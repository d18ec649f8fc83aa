"""CP-SAT model of the asymmetric (process-mesh) family for one (B, P) candidate: which node groups host a mesh,
each mesh's option (tp, dp, recompute), the mesh order and the layers of every stage.

Laid out like planner/model.py (variables, one function per constraint group, objective, solve); it reads only
the integer MeshTables. Variables: w[h][o] host h runs option o; x[s][h] stage s on host h; u[s,h,o] stage s on
host h under option o (x and w together); q[s,h,o] the layers of stage s if it is on h under o (else 0), n[s] its
layers; z[b][h][h2] boundary b (stage b -> b+1) joins h and h2; work[s], send[b] and lat[b] the stage and boundary costs
(lower-bounded by the chosen option's entries, tight at the optimum). Stage work, memory and the tail are linear in
u and q, not enforced by literals, so the LP relaxation bounds them by the options' own rates (it proves small
instances in milliseconds where the enforced form took a minute).
Objective (us): (m - 1) cycle + sum_s work_s + sum_b 2 (send_b + lat_b) + tail, as MeshTables.objective; the cycle
holds every stage's work and sends and, across sites, every 1F1B loop (costmodel/pipeline.py, segment_loops).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable

from ortools.sat.python import cp_model

from hgplan.planner import limits
from hgplan.planner.costs import tail_class
from hgplan.planner.mesh_tables import MeshTables
from hgplan.planner.model import SolverParams, add_loops, configure_solver, unsolved_bound

SPLIT_HOSTS = (2, 3)
"""Candidates over this many hosts are solved one (first host, last host) pair at a time (solve_mesh). Measured
2026-11-27 on the solves of `benchmarks/mesh_search.py` (2-core machine), the whole model against the pairs:
v100-a100-t4 (three hosts), its 31 solves 31.2 -> 10.2 deterministic and 39.4 -> 23.3 wall seconds, all of them
proven instead of 21 (the ten hardest proofs 15.5 -> 4.3 deterministic seconds). Two hosts were solved whole then
(mixed-nic's 28 solves: 3.2 -> 2.2 deterministic but 4.9 -> 7.9 wall seconds, the four models' set-up costing more
than the search saved); with the pairs' cuts (planner/mesh_cuts.py) and limits.SOLVE_THREADS they are split too
(same day, single runs: mixed-nic 9.3 -> 7.8 s, 2.56 -> 1.17 deterministic; mixed-vendor 2.2 -> 1.9 s; the 256-GPU
two-site fleet 4.3 -> 3.8 s). With four hosts (the 1024-GPU three-site fleet) the sixteen pairs proved nothing the whole
model did not, with the cuts and threads neither (1.96% at the time limit both ways)."""

MESH_MODEL_PARAMS = (
    "cp_model_probing_level: 0 add_mir_cuts: false add_cg_cuts: false symmetry_level: 0 max_presolve_iterations: 1"
    " add_zero_half_cuts: false")
"""CP-SAT parameters every mesh solve gets before --solver-params (which win): most mesh solves prove that nothing
beats the incumbent, and presolve's probing took two thirds of that work (measured 2026-11-24 on six candidates
each of mixed-nic and mixed-vendor: 3.11 -> 1.01 and 2.62 -> 0.77 deterministic seconds, the same statuses); MIR
and Chvatal-Gomory cuts cost more than they prove on these models (five hard candidates of v100-a100-t4: 15.4 ->
9.1 deterministic seconds to prove; the same settings as path_model.PATH_MODEL_PARAMS). Symmetry detection is off
(2026-11-27): the one-worker search does not use what it finds; replaying the solves of v100-a100-t4, mixed-nic,
the 504-GPU and the three-site fleet gave the same statuses and deterministic time, and 2-10% less wall time.
Presolve runs one iteration, not three (2026-11-27): most mesh solves are proofs of 20-70 ms whose presolve is half
their wall time (replayed: mixed-nic's 56 pair solves 4.6 -> 3.5 s, v100-a100-t4's 73 7.3 -> 6.5 s, the six hardest
of the 504-GPU fleet 8.0 -> 7.2 s, the same statuses; without presolve the hard ones took twice as long);
benchmarks/mesh_search.py --quick (single runs): the same plans, gaps and solves on every row; with --only, medians
of three: the 504-GPU fleet 22.9 -> 19.9 s. The stock family's models keep three: replayed, the ordinary solves of
the 16-group fleet were faster but its path solves slower, and the 8-group fleet's 5% faster, a gain too small for a
change of every stock plan file's solver record. Zero-half cuts are off (2026-11-29): replayed with the limits the
search gave them (medians of three), v100-a100-t4's 68 pair solves 2.32 -> 1.73 deterministic and 4.65 -> 4.09 wall
seconds, two-site's 4 0.50 -> 0.35, the 256-GPU fleet's 6 0.38 -> 0.28, mixed-nic's 56 0.99 -> 0.98, all with the
same statuses; the 504-GPU fleet's six hard pairs 3.00 -> 2.77 with three of them proven in their limits instead of
none, the three-site fleet's seven whole-model solves 29.2 -> 28.6 (the same statuses)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshSolution:
    """One solve: the host of every stage, the option of every used host, the layers of every stage."""

    status: str
    objective: int | None
    bound: float
    assign: tuple[int, ...]
    choice: tuple[tuple[int, int], ...]
    """(host, option) of every used host, in host order."""
    layers: tuple[int, ...]
    deterministic_time: float
    wall_time_s: float
    open_pairs: tuple[tuple[int, int], ...] | None = None
    """Of a candidate solved per pair of end hosts (_solve_by_ends), the pairs left unproven: its next try need
    solve only these (None: solved as one model)."""


@dataclass(frozen=True, slots=True)
class CycleCuts:
    """What the bounds prove of the cycle of a candidate's plans before its solve (integer us,
    planner/mesh_cuts.py), added to its model as cuts."""

    floor_us: int = 0
    """No plan's cycle is below it."""
    pairs_us: dict[tuple[int, int], int] | None = None
    """Of a candidate solved per (first host, last host) pair (SPLIT_HOSTS): the pairs to solve, each with its own
    floor; a pair left out has no plan below the upper bound of the solve. None: every pair, at floor_us."""


@dataclass(slots=True)
class _Vars:
    w: list[list[cp_model.IntVar]]
    x: list[list[cp_model.IntVar]]
    n: list[cp_model.IntVar]
    z: dict[tuple[int, int, int], cp_model.IntVar]
    u: dict[tuple[int, int, int], cp_model.IntVar]
    q: dict[tuple[int, int, int], cp_model.IntVar]
    cycle: cp_model.IntVar | None = None


def _horizon(t: MeshTables) -> int:
    biggest = max(max(r) for r in t.layer_us) * t.num_layers + max(max(r) for r in t.first_us) + max(
        max(r) for r in t.last_us)
    return biggest + 2 * max(t.send_values(), default=0) + 1


def _most_layers(t: MeshTables, s: int, h: int, o: int) -> int:
    """Most layers stage s holds on host h under option o: its memory's limit, at most L."""
    return min(t.num_layers, t.memory_layers(s, h, o))


def _variables(md: cp_model.CpModel, t: MeshTables) -> _Vars:
    P, H, L = t.pp, len(t.hosts), t.num_layers
    w = [[md.new_bool_var(f"w{h}_{o}") for o in range(len(t.options[h]))] for h in range(H)]
    x = [[md.new_bool_var(f"x{s}_{h}") for h in range(H)] for s in range(P)]
    n = [md.new_int_var(1, L, f"n{s}") for s in range(P)]
    z = {}
    for b in range(P - 1):
        for h in range(H):
            for h2 in range(H):
                if h == h2 or t.snd_us[h][h2] is not None:
                    z[(b, h, h2)] = md.new_bool_var(f"z{b}_{h}_{h2}")
    u, q = {}, {}
    for s in range(P):
        for h in range(H):
            for o in range(len(t.options[h])):
                most = _most_layers(t, s, h, o)
                if most >= 1:  # a stage holds at least one layer
                    u[(s, h, o)] = md.new_bool_var(f"u{s}_{h}_{o}")
                    q[(s, h, o)] = md.new_int_var(0, most, f"q{s}_{h}_{o}")
    return _Vars(w=w, x=x, n=n, z=z, u=u, q=q)


def _add_placement(md: cp_model.CpModel, t: MeshTables, v: _Vars) -> None:
    """One option per used host, one host and option per stage, whole layers summing to L, each option's stages
    within its slots and each stage within its GPUs' memory (q's upper bound). Why: the family's definition and the
    memory rule."""
    P, H = t.pp, len(t.hosts)
    for h in range(H):
        md.add_at_most_one(v.w[h])
        for o in range(len(v.w[h])):
            on = [v.u[(s, h, o)] for s in range(P) if (s, h, o) in v.u]
            md.add(sum(on) <= t.slots[h][o] * v.w[h][o])
    for s in range(P):
        md.add_exactly_one(v.x[s])
        md.add(sum(q for (s2, _, _), q in v.q.items() if s2 == s) == v.n[s])
        for h in range(H):
            keys = [(s, h, o) for o in range(len(t.options[h])) if (s, h, o) in v.u]
            md.add(sum(v.u[k] for k in keys) == v.x[s][h])
            for k in keys:
                md.add_implication(v.u[k], v.w[h][k[2]])
                md.add(v.q[k] >= v.u[k])
                md.add(v.q[k] <= _most_layers(t, *k) * v.u[k])
    md.add(sum(v.n) == t.num_layers)


def _add_boundaries(md: cp_model.CpModel, t: MeshTables, v: _Vars) -> None:
    """z links the hosts at both ends of each boundary; each host is entered once (its stages are one block, so it
    is one mesh). Why: the boundary costs are priced per host pair, and FlagScale's meshes are contiguous."""
    P, H = t.pp, len(t.hosts)
    for b in range(P - 1):
        for h in range(H):
            md.add(sum(v.z[(b, h, h2)] for h2 in range(H) if (b, h, h2) in v.z) == v.x[b][h])
            md.add(sum(v.z[(b, h2, h)] for h2 in range(H) if (b, h2, h) in v.z) == v.x[b + 1][h])
    for h in range(H):
        md.add(v.x[0][h] + sum(v.z[(b, h2, h)] for b in range(P - 1) for h2 in range(H)
                               if h2 != h and (b, h2, h) in v.z) <= 1)


def _add_tied_tp(md: cp_model.CpModel, t: MeshTables, v: _Vars) -> None:
    """With tied embeddings the first and last stage have one tp. Why: FlagScale asserts it (R7)."""
    if not t.tied or t.pp == 1:
        return
    def tp_of(s: int):
        return sum(t.options[h][o].tp * var for (s2, h, o), var in v.u.items() if s2 == s)

    md.add(tp_of(0) == tp_of(t.pp - 1))


def _costs(md: cp_model.CpModel, t: MeshTables, v: _Vars):
    """Stage work, boundary sends and latencies, each at least the chosen option's table entry. Why: the
    objective's terms; minimisation makes every lower bound tight."""
    P, hz = t.pp, _horizon(t)
    work = [md.new_int_var(0, hz, f"work{s}") for s in range(P)]
    for s in range(P):
        md.add(work[s] >= sum(t.layer_us[h][o] * v.q[(s2, h, o)] + ((t.first_us[h][o] if s == 0 else 0)
                                                                      + (t.last_us[h][o] if s == P - 1 else 0)) * u
                              for (s2, h, o), u in v.u.items() if s2 == s))
    send = [md.new_int_var(0, hz, f"send{b}") for b in range(P - 1)]
    lat = [md.new_int_var(0, hz, f"lat{b}") for b in range(P - 1)]
    for (b, h, h2), zv in v.z.items():
        if h == h2:
            for o in range(len(t.options[h])):
                md.add(send[b] >= t.intra_send_us[h][o]).only_enforce_if([zv, v.w[h][o]])
                md.add(lat[b] >= t.intra_lat_us[h][o]).only_enforce_if([zv, v.w[h][o]])
            continue
        md.add(lat[b] >= t.lat_us[h][h2]).only_enforce_if(zv)
        for o, val in enumerate(t.snd_us[h][h2]):
            md.add(send[b] >= val).only_enforce_if([zv, v.w[h][o]])
        for o2, val in enumerate(t.rcv_us[h][h2]):
            md.add(send[b] >= val).only_enforce_if([zv, v.w[h2][o2]])
    return work, send, lat


def _tail(md: cp_model.CpModel, t: MeshTables, v: _Vars, hz: int) -> cp_model.IntVar:
    """The slowest stage's data-parallel tail after the flush, the tied-embedding sync on the first and last
    stage included. Why: it ends every iteration."""
    P, H = t.pp, len(t.hosts)
    tail, tied = md.new_int_var(0, hz, "tail"), md.new_int_var(0, hz, "tied")
    if P > 1:
        for h in range(H):
            for o in range(len(t.options[h])):
                for h2 in range(H):
                    if t.tied_us[h][o][h2]:
                        md.add(tied >= t.tied_us[h][o][h2]).only_enforce_if([v.x[0][h], v.w[h][o], v.x[P - 1][h2]])
    for s in range(P):
        c = tail_class(s, P)
        extra = tied if s in (0, P - 1) else 0
        md.add(tail >= sum(t.tail_a_us[c][h][o] * u + t.tail_b_us[c][h][o] * v.q[(s2, h, o)]
                           for (s2, h, o), u in v.u.items() if s2 == s) + extra)
    return tail


def build_mesh_model(t: MeshTables, *, upper_bound: int | None = None,
                     cuts: CycleCuts = CycleCuts()) -> tuple[cp_model.CpModel, _Vars]:
    """The whole model; with upper_bound only strictly better plans are feasible; cuts: its cycle's floor."""
    md = cp_model.CpModel()
    v = _variables(md, t)
    _add_placement(md, t, v)
    _add_boundaries(md, t, v)
    _add_tied_tp(md, t, v)
    work, send, lat = _costs(md, t, v)
    hz = _horizon(t)
    lat_hz = max([x for r in t.intra_lat_us for x in r] + [x for r in t.lat_us for x in r])
    v.cycle = cycle = md.new_int_var(0, hz + 2 * lat_hz, "cycle")  # a loop of n stages over n is at most that
    if cuts.floor_us > 0:
        md.add(cycle >= cuts.floor_us)
    for s in range(t.pp):
        md.add(cycle >= work[s] + sum(send[b] for b in (s - 1, s) if 0 <= b < t.pp - 1))
    if t.loops:  # 1F1B's loops through the boundaries, as in the stock family's model
        cross = [2 * send[b] + 2 * lat[b] for b in range(t.pp - 1)]
        add_loops(md, (work, send, cross), cycle, t.microbatches, 5 * t.pp * hz + 1)
    fill = sum(work) + sum(2 * send[b] + 2 * lat[b] for b in range(t.pp - 1))
    tail_hz = (max(max(r) for rows in t.tail_a_us for r in rows) + max(max(r) for rows in t.tail_b_us for r in rows)
               * t.num_layers + max(max(r) for rows in t.tied_us for r in rows) + 1)
    objective = (t.microbatches - 1) * cycle + fill + _tail(md, t, v, tail_hz)
    if upper_bound is not None:
        md.add(objective <= upper_bound - 1)
    md.minimize(objective)
    return md, v


def end_pairs(t: MeshTables) -> list[tuple[int, int]]:
    """The (first host, last host) pairs of a candidate solved per pair (one host at both ends where P = 1)."""
    H = len(t.hosts)
    return [(a, b) for a in range(H) for b in range(H) if t.pp > 1 or a == b]


def pair_solves(t: MeshTables, cuts: CycleCuts) -> float:
    """How many times an attempt's deterministic limit (limits.solve_params) a solve of candidate t with these cuts
    gets: one for the whole model; for one split by end hosts (SPLIT_HOSTS), one per limits.SOLVE_THREADS of its
    pairs, so that each pair's share is the attempt's limit over SOLVE_THREADS however many pairs there are. A pair's
    proof costs what it costs: measured 2026-11-28 on the 504-GPU two-site fleet (B = 4, P = 25, three hosts, six
    pairs), 0.4-1.4 deterministic seconds each under the final incumbent; a first try of 1 s split six ways (0.17 a
    pair) proved none, nor did the second (0.33), and a retry starts from scratch, so the proof came on the fourth try,
    after 30 solves and 11.0 deterministic seconds; at half the try's limit a pair, 12 solves, 8.0 seconds, proven on
    the second try. Where pairs prove within their first hundredths of a second (v100-a100-t4, mixed-nic) nothing
    changes: the limit is a cap."""
    if len(t.hosts) not in SPLIT_HOSTS:
        return 1.0
    pairs = len(cuts.pairs_us) if cuts.pairs_us is not None else len(end_pairs(t))
    return max(1.0, pairs / limits.SOLVE_THREADS)


def solve_mesh(t: MeshTables, params: SolverParams, *, upper_bound: int | None = None,
               log: Callable[[str], None] | None = None, cuts: CycleCuts = CycleCuts()) -> MeshSolution:
    """Solve one candidate; INFEASIBLE with upper_bound means nothing better than upper_bound exists. A candidate
    over two or three hosts (SPLIT_HOSTS) is solved as one model per (first host, last host) pair (_solve_by_ends):
    those of cuts.pairs_us where given (an earlier try's open_pairs, less those the cuts rule out), the others having
    been proven under an upper bound at least this one; cuts: what the bounds prove of the cycle."""
    if len(t.hosts) not in SPLIT_HOSTS:
        began = time.perf_counter()
        md, v = build_mesh_model(t, upper_bound=upper_bound, cuts=cuts)
        return _solve_one(md, v, t, params.less_elapsed(began), log)
    pairs = cuts.pairs_us if cuts.pairs_us is not None else dict.fromkeys(end_pairs(t), cuts.floor_us)
    assert pairs, "a candidate whose pairs are all proven is not solved"
    return _solve_by_ends(t, params, upper_bound, cuts, pairs, log)


def _solve_one(md: cp_model.CpModel, v: _Vars, t: MeshTables, params: SolverParams,
               log: Callable[[str], None] | None) -> MeshSolution:
    """One CP-SAT solve of a built model (the whole candidate's or one pair's) and the plan it found, if any."""
    solver = cp_model.CpSolver()
    configure_solver(solver, params.under(MESH_MODEL_PARAMS), log)
    status = solver.solve(md)
    name = solver.status_name(status)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        H = len(t.hosts)
        assign = tuple(next(h for h in range(H) if solver.boolean_value(v.x[s][h])) for s in range(t.pp))
        choice = tuple((h, o) for h in range(H) for o in range(len(t.options[h])) if solver.boolean_value(v.w[h][o])
                       and h in assign)
        return MeshSolution(status=name, objective=round(solver.objective_value),
                            bound=float(solver.best_objective_bound), assign=assign, choice=choice,
                            layers=tuple(solver.value(n) for n in v.n), deterministic_time=solver.deterministic_time,
                            wall_time_s=solver.wall_time)
    return MeshSolution(status=name, objective=None, bound=unsolved_bound(solver, status), assign=(), choice=(),
                        layers=(), deterministic_time=solver.deterministic_time, wall_time_s=solver.wall_time)


def _pair_model(base: tuple[cp_model.CpModel, _Vars], t: MeshTables, a: int, b: int, floor_us: int,
                cuts: CycleCuts) -> cp_model.CpModel:
    """The candidate's model with its first stage on host a, its last on host b and the pair's cycle floor."""
    md, v = base[0].clone(), base[1]
    md.add(md.get_bool_var_from_proto_index(v.x[0][a].index) == 1)
    md.add(md.get_bool_var_from_proto_index(v.x[t.pp - 1][b].index) == 1)
    if floor_us > cuts.floor_us:
        md.add(md.get_int_var_from_proto_index(v.cycle.index) >= floor_us)
    return md


def _solve_by_ends(t: MeshTables, params: SolverParams, upper_bound: int | None, cuts: CycleCuts,
                   ends: dict[tuple[int, int], int], log: Callable[[str], None] | None) -> MeshSolution:
    """One solve per (first host, last host) pair of `ends` (with its cycle floor), all queued at once on
    limits.SOLVE_THREADS threads under the upper bound of their turn (the pairs partition the plans), each with an equal
    share of the deterministic limit; the pairs left unproven get a second turn, under the best objective the first
    found, with what it left over. The result is the best plan found (the first pair's of equal ones), proven (OPTIMAL,
    or INFEASIBLE without one) when every pair is, and its bound the least of the pairs' bounds. Why: CP-SAT proves the
    pairs of a three-host candidate several times faster in deterministic time than the whole model (SPLIT_HOSTS;
    docs/planner.md, "Asymmetric plans"). Queued at once rather than SOLVE_THREADS at a time, no thread waits for the
    other's pair to end (v100-a100-t4's pair solves: the threads busy 63% -> 67% of the candidates' solve time).
    cuts: the whole model's."""
    ub, used, best, base = upper_bound, 0.0, None, None
    began = time.perf_counter()  # the pairs together keep to params' wall-clock limit (within the search's deadline)
    # what each pair proves of its plans: nothing below its upper bound (INFEASIBLE), else CP-SAT's bound
    bounds = {e: -math.inf for e in ends}
    todo, left = list(ends), []

    def expired() -> bool:
        return params.max_time_in_seconds - (time.perf_counter() - began) <= 0

    def solve(md: cp_model.CpModel, v: _Vars, each: SolverParams) -> MeshSolution:
        if expired():  # the limit passed while it was queued
            return MeshSolution(status="UNKNOWN", objective=None, bound=-math.inf, assign=(), choice=(), layers=(),
                                deterministic_time=0.0, wall_time_s=0.0)
        return _solve_one(md, v, t, each.less_elapsed(began), log)  # its wall-clock limit from its own start

    with ThreadPoolExecutor(limits.SOLVE_THREADS) as pool:
        for _ in range(2):
            if expired():
                break
            if base is None:  # built again only when a pair found a better plan (a lower upper bound)
                base = build_mesh_model(t, upper_bound=ub, cuts=cuts)
            each = replace(params, max_deterministic_time=max(0.0, params.max_deterministic_time - used) / len(todo))
            models, v = [_pair_model(base, t, a, b, ends[(a, b)], cuts) for a, b in todo], base[1]
            sols = list(pool.map(lambda md: solve(md, v, each), models))
            above = math.inf if ub is None else ub
            for e, sol in zip(todo, sols):
                used += sol.deterministic_time
                bounds[e] = max(bounds[e], above if sol.status == "INFEASIBLE" else min(sol.bound, above))
                if sol.status not in ("OPTIMAL", "INFEASIBLE"):
                    left.append(e)
                if sol.objective is not None and (best is None or sol.objective < best.objective):
                    best, ub, base = sol, sol.objective, None
            todo, left = left, []
            if not todo or used >= params.max_deterministic_time:
                break
    proven, bound, wall = not todo, min(bounds.values()), time.perf_counter() - began
    if best is None:
        return MeshSolution(status="INFEASIBLE" if proven else "UNKNOWN", objective=None,
                            bound=math.inf if proven else bound, assign=(), choice=(), layers=(),
                            deterministic_time=used, wall_time_s=wall, open_pairs=tuple(todo))
    return replace(best, status="OPTIMAL" if proven else "FEASIBLE", bound=float(bound), deterministic_time=used,
                   wall_time_s=wall, open_pairs=tuple(todo))
