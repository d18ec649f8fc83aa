"""The limits of one CP-SAT solve: how many retries, how much deterministic time per attempt, and the wall-clock
safety net under the search's own deadline. Shared by the search, the proof of the gap and the mesh search; the
deadline of the mesh search's bounds (OutOfTime); and the check of --solver-params (extra_params_error)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from ortools.sat.python import cp_model

from hgplan.planner.model import SolverParams
from hgplan.planner.options import SearchOptions

MAX_RETRIES = 3
"""A solve that stops at its limit is retried at most this many times, each with twice the time."""
SAFETY_WALL_FACTOR = 20
"""A solve's wall-clock safety net: this many times its deterministic limit, and at least SAFETY_WALL_MIN_S. It must
not be what stops a solve, or the same inputs give different plans: the deterministic limit has to bind first.
Path models with critical-chain cuts (certify.py) run at 0.15-0.2 deterministic seconds per wall second on the 2-core
machine (a pp = 15 candidate of a 504-GPU fleet: 0.72-0.77 in 4.3-5.0 s), so 3x, the old factor, cut one of them
off at 5 s in some runs and not in others and two runs returned 8.578 s and 8.398 s plans. The search's time limit
stays the hard cap (within())."""
SAFETY_WALL_MIN_S = 5.0
SOLVE_EVERY_SUBSETS = 20_000
"""After this many (candidate, group set) items listed since the last solve, the search solves its best item that is
ready for CP-SAT before it splits another candidate. Best-first splits every candidate whose own bound is below the
ready items' block bounds, and on the 64-group benchmark fleet (4,096 GPUs) each split lists up to 43,400 group sets:
with block bounds that charge the WAN crossings the search split 67 candidates in its 60 s and solved none (a
257.6 s plan, the seeds'). A count, not a clock, so the same inputs give the same plan. On every other fleet of the
benchmark the first solve comes before 12,200 items (the 8- and 32-group fleets), so the rule does not change them."""
SETTLE_GROUPS = 6
"""Sets of at least this many groups get the block bound's cheaper pass below the incumbent (block_bound_us,
enough_us): the pass with ends bisects one choice of end groups per ordered pair of classes in the set (56 for the
8-group benchmark fleet's eight groups, 380 for 20 groups all different). On smaller sets the full pass is cheap and
its exact value orders the heap (the random fleets of 2-5 groups of the tests keep the searches they had)."""
FIRST_BLOCK_SHARE = 0.25
"""The first block-model solve of an item gets this share of its attempt's deterministic time; its retries get the full
2, 4 and 8 times. That first solve, bounded by the incumbent, either proves quickly that nothing beats it or finds a
plan, and the first retry, warm-started from that plan without the upper bound (the second has it again:
search._block_step), proves the item's optimum; run to the full limit it rarely closed the item (the 10-group
benchmark fleet's three first solves over all ten groups: 2.3-2.9 s each, then settled by their retries in 0.9-1.9
s). With a quarter: the same plans and gaps on every `--quick` fleet (2026-11-26), the 10-group fleet 28.2 -> 23.6 s,
the 1000-GPU five-type fleet 11.6 -> 9.6 s."""

FREE_NEAR = 0.005
"""An open block model's first and third retries drop the incumbent as upper bound only for an item whose own best
plan is within this fraction of the incumbent: CP-SAT may prove that plan optimal sooner than that nothing beats the
incumbent, but for an item whose plan is further above, its optimum is further above too, and the free solve has more
to prove than the bounded one (the 8-group benchmark fleet's 26-stage item over all eight groups: its optimum 5.069 s
against the 4.966 s incumbent, 8.9 deterministic seconds without the incumbent, 3.9-4.5 with it and the block
bound's cuts; docs/planner.md, "Block model first")."""

PATH_DOUBLINGS = 2
"""The block model with interleaving's steady paths (block_model.paths_bind) gets 2^this times its attempt's
deterministic time (the first attempt's full time, not FIRST_BLOCK_SHARE of it). Its proof comes in one piece: its
bound stays below the block model's without the paths until it completes (the 16-group benchmark fleet's pp 16 item:
1.0-1.4 deterministic seconds against the final incumbent, 3.3 to its optimum against a weaker one), more than the
first attempt's 1 or the second's 2 (a waiting item comes back at its second: search_state.paths_waiting); one left
open goes on with the block model's retries (docs/planner.md, "Block model")."""
SOLVE_THREADS = 2
"""CP-SAT solves run at once where the search has several that do not wait on each other: the pairs of end hosts of a
mesh candidate (mesh_model._solve_by_ends) and the path solves of the waiting items, beside the search
(SearchState.start_paths). Each is a one-worker solve on its own thread (the solve releases Python's lock). A fixed
number, not the machine's core count: the shares the pair solves get depend on it (a mesh candidate's pairs are all
queued at once with one upper bound and share each), and plans must not depend on the machine. Measured 2026-11-27
(2-core machine): v100-a100-t4's 73 pair solves 7.0 -> 3.6 s wall, the same statuses."""


def solve_params(opts: SearchOptions, attempt: int, remaining_s: float = math.inf, *,
                 times: float = 1.0) -> SolverParams:
    """CP-SAT parameters of a solve: attempt n gets 2^n times the per-solve deterministic time (at most what the
    budget has left) and a wall-clock safety net SAFETY_WALL_FACTOR times that; `times`: for several solves that
    share the limit (mesh_model.pair_solves), that many times both."""
    scale = 2 ** attempt * times
    return SolverParams(random_seed=opts.seed, max_deterministic_time=min(opts.per_solve_s * scale, remaining_s),
                        max_time_in_seconds=max(SAFETY_WALL_MIN_S, SAFETY_WALL_FACTOR * opts.per_solve_s * scale),
                        relative_gap_limit=opts.solve_gap, log_search_progress=opts.solver_log,
                        extra=opts.solver_params)


def within(params: SolverParams, stop_at_s: float | None) -> SolverParams:
    """The solve's wall-clock limit cut to what is left before stop_at_s (a time.perf_counter() reading; at least
    50 ms): the search's time limit covers its solves too."""
    if stop_at_s is None:
        return params
    left = max(0.05, stop_at_s - time.perf_counter())
    return replace(params, max_time_in_seconds=min(params.max_time_in_seconds, left))


class OutOfTime(Exception):
    """A bound reached the search's deadline before its end (check_deadline): the caller keeps what it knew before."""


def check_deadline(stop_at_s: float | None) -> None:
    """Raise OutOfTime once time.perf_counter() is past stop_at_s (None: no deadline)."""
    if stop_at_s is not None and time.perf_counter() > stop_at_s:
        raise OutOfTime


def extra_params_error(text: str) -> str | None:
    """Why `text` is not valid text-format SatParameters (None when it is). Parsed by protobuf's Python parser first,
    which names the field and position and prints nothing (OR-Tools' own parser, which the solves use, wrote absl's
    log lines to stderr before this message), then by OR-Tools' own."""
    from google.protobuf import text_format
    from ortools.sat import sat_parameters_pb2

    hint = ("not valid text-format SatParameters (e.g. 'linearization_level: 2 symmetry_level: 0'); see OR-Tools' "
            "sat_parameters.proto for the field names")
    try:
        text_format.Parse(text, sat_parameters_pb2.SatParameters())
    except text_format.ParseError as e:
        return f"{hint}: {e}"
    return None if cp_model.CpSolver().parameters.merge_text_format(text) else hint
