"""CP-SAT model: place every pipeline stage on a node group and split the layers, for one outer candidate.

Variables: x[s,k] stage s on group k; u[s] layers of stage s divided by v; y[s,k] = layers if x[s,k] else 0;
z[b,k,k'] the two ends of boundary b sit on k and k'. Constraints: one group per stage, group capacity in
stages, layers sum to L, memory per stage (linear in layers for a fixed stage and group), reachable
boundaries only. Objective (v-scaled microseconds):
    (v m - 1) C + sum_s work_s + sum_b (2 send_b + 2 lat_b) + v Tail
with C >= work_s + v x sends touching s, Tail >= DP tail of each stage. Each group's stages are contiguous
(one block per group; the block order is free). Mirrors CostTables.objective.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ortools.sat.python import cp_model

from hgplan.planner.tables import CostTables, tail_class


@dataclass(frozen=True, slots=True, kw_only=True)
class SolverParams:
    num_workers: int = 1
    random_seed: int = 1
    max_deterministic_time: float = 2.0
    """Per candidate, in CP-SAT's deterministic time units (reproducible, unlike wall time)."""
    max_time_in_seconds: float = 30.0
    """Safety net only."""
    relative_gap_limit: float = 0.0
    log_search_progress: bool = False

    def to_dict(self) -> dict:
        return {"num_workers": self.num_workers, "random_seed": self.random_seed,
                "max_deterministic_time": self.max_deterministic_time, "max_time_in_seconds": self.max_time_in_seconds,
                "relative_gap_limit": self.relative_gap_limit}


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    status: str
    objective: int | None
    bound: float
    assign: tuple[int, ...]
    layers: tuple[int, ...]
    deterministic_time: float
    wall_time_s: float


def solve(t: CostTables, params: SolverParams, *, hint: tuple[list[int], list[int]] | None = None,
          upper_bound: int | None = None) -> Solution:
    """Solve one candidate. With upper_bound (v-scaled objective of a known plan), only strictly better plans are
    sought: a stage on group k can then hold at most UB / ((v m - 1) tau_k) layers, a valid and much tighter bound on
    y than L; status INFEASIBLE then means "nothing better than upper_bound"."""
    p, v, m, L, K = t.pp, t.vpp, t.microbatches, t.num_layers, len(t.groups)
    cap_layers = [L] * K
    if upper_bound is not None and v * m > 1:
        cap_layers = [min(L, upper_bound // ((v * m - 1) * t.layer_us[k])) for k in range(K)]
    md = cp_model.CpModel()
    x = [[md.new_bool_var(f"x{s}_{k}") for k in range(K)] for s in range(p)]
    u = [md.new_int_var(1, L // v, f"u{s}") for s in range(p)]
    y = [[md.new_int_var(0, L, f"y{s}_{k}") for k in range(K)] for s in range(p)]
    for s in range(p):
        md.add_exactly_one(x[s])
        md.add(sum(y[s]) == v * u[s])
        for k in range(K):
            md.add(y[s][k] == 0).only_enforce_if(~x[s][k])
            md.add(y[s][k] <= cap_layers[k] * x[s][k])
            # memory: a + b * layers <= capacity when the stage sits on k
            md.add(t.mem_a_mib[s][k] + t.mem_b_mib[s][k] * y[s][k] <= t.cap_mib[k]).only_enforce_if(x[s][k])
    md.add(sum(u) * v == L)
    for k in range(K):
        md.add(sum(x[s][k] for s in range(p)) <= t.slots[k])
        if t.require_all:
            md.add(sum(x[s][k] for s in range(p)) >= 1)
    # boundaries
    z: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for bi, (a, b) in enumerate(t.boundaries()):
        for k in range(K):
            for k2 in range(K):
                if t.send_us[k][k2] is not None:
                    z[(bi, k, k2)] = md.new_bool_var(f"z{bi}_{k}_{k2}")
        for k in range(K):
            md.add(sum(z[(bi, k, k2)] for k2 in range(K) if (bi, k, k2) in z) == x[a][k])
        for k2 in range(K):
            md.add(sum(z[(bi, k, k2)] for k in range(K) if (bi, k, k2) in z) == x[b][k2])
    # Contiguity: a group's stages form one block, i.e. each group is entered at most once.
    chain = [bi for bi, (a, b) in enumerate(t.boundaries()) if b == a + 1]
    for k in range(K):
        entries = [x[0][k]] + [z[(bi, k2, k)] for bi in chain for k2 in range(K) if k2 != k and (bi, k2, k) in z]
        md.add(sum(entries) <= 1)
    # Symmetry: inside a block, interior stages whose neighbours share their group may swap layer counts at equal
    # cost; fewer layers on the earlier stage (more micro-batches in flight) never hurts memory, so order them.
    same = []
    for bi in chain:
        var = md.new_bool_var(f"same{bi}")
        md.add(var == sum(z[(bi, k, k)] for k in range(K) if (bi, k, k) in z))
        same.append(var)
    for s in range(1, p - 2):
        md.add(u[s] <= u[s + 1]).only_enforce_if([same[s - 1], same[s], same[s + 1]])
    work = []
    for s in range(p):
        expr = sum(t.layer_us[k] * y[s][k] for k in range(K))
        if s == 0:
            expr += sum(t.first_us[k] * x[0][k] for k in range(K))
        if s == p - 1:
            expr += sum(t.last_us[k] * x[p - 1][k] for k in range(K))
        work.append(expr)
    send_of = {}
    for bi, _ in enumerate(t.boundaries()):
        send_of[bi] = sum(t.send_us[k][k2] * var for (b2, k, k2), var in z.items() if b2 == bi)
    horizon = (max(t.layer_us) * L + max(t.first_us) + max(t.last_us)
               + 2 * v * max((val for row in t.send_us for val in row if val is not None), default=0) + 1)
    cycle = md.new_int_var(0, horizon, "cycle")
    for s in range(p):
        touching = [send_of[bi] for bi, (a, b) in enumerate(t.boundaries()) if s in (a, b)]
        md.add(cycle >= work[s] + v * sum(touching))
    fill = sum(work)
    for bi, (a, b) in enumerate(t.boundaries()):
        if b == a + 1:
            fill += sum((2 * t.send_us[k][k2] + 2 * t.lat_us[k][k2]) * var for (b2, k, k2), var in z.items() if b2 == bi)
    tail_max = max(map(max, t.tail_a_us)) + max(map(max, t.tail_b_us)) * L + max(max(r) for r in t.tied_us) + 1
    tail = md.new_int_var(0, tail_max, "tail")
    tied_expr = 0
    if p > 1 and max(max(r) for r in t.tied_us) > 0:
        w = {}
        for k in range(K):
            for k2 in range(K):
                if t.tied_us[k][k2]:
                    w[(k, k2)] = md.new_bool_var(f"w{k}_{k2}")
                    md.add_implication(w[(k, k2)], x[0][k])
                    md.add_implication(w[(k, k2)], x[p - 1][k2])
                    md.add_bool_or([w[(k, k2)], ~x[0][k], ~x[p - 1][k2]])
        tied_expr = sum(t.tied_us[k][k2] * var for (k, k2), var in w.items())
    for s in range(p):
        c = tail_class(s, p)
        expr = sum(t.tail_a_us[c][k] * x[s][k] + t.tail_b_us[c][k] * y[s][k] for k in range(K))
        if s in (0, p - 1):
            expr += tied_expr
        md.add(tail >= expr)
    objective = (v * m - 1) * cycle + fill + v * tail
    if upper_bound is not None:
        md.add(objective <= upper_bound - 1)
    md.minimize(objective)
    if hint is not None:
        h_assign, h_layers = hint
        for s in range(p):
            for k in range(K):
                md.add_hint(x[s][k], int(h_assign[s] == k))
                md.add_hint(y[s][k], h_layers[s] if h_assign[s] == k else 0)
            md.add_hint(u[s], h_layers[s] // v)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = params.num_workers
    solver.parameters.random_seed = params.random_seed
    solver.parameters.max_deterministic_time = params.max_deterministic_time
    solver.parameters.max_time_in_seconds = params.max_time_in_seconds
    solver.parameters.relative_gap_limit = params.relative_gap_limit
    solver.parameters.log_search_progress = params.log_search_progress
    solver.parameters.log_to_stdout = False
    if params.log_search_progress:
        solver.log_callback = lambda line: print(line, file=sys.stderr)
    status = solver.solve(md)
    name = solver.status_name(status)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assign = tuple(next(k for k in range(K) if solver.boolean_value(x[s][k])) for s in range(p))
        layers = tuple(v * solver.value(u[s]) for s in range(p))
        return Solution(status=name, objective=int(solver.objective_value), bound=float(solver.best_objective_bound),
                        assign=assign, layers=layers, deterministic_time=solver.deterministic_time,
                        wall_time_s=solver.wall_time)
    # INFEASIBLE: nothing (better than upper_bound) exists. UNKNOWN: no plan found, but CP-SAT's bound still holds
    # for every plan better than upper_bound.
    bound = float("inf") if status == cp_model.INFEASIBLE else (
        float(solver.best_objective_bound) if status == cp_model.UNKNOWN else 0.0)
    return Solution(status=name, objective=None, bound=bound,
                    assign=(), layers=(), deterministic_time=solver.deterministic_time, wall_time_s=solver.wall_time)
