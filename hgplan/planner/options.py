"""The search's options: the plan family's choices and the time, gap and solver settings (no logic)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hgplan.domain import Target
from hgplan.plan import Recompute

MAX_MICRO_BATCH = 64
"""Largest default micro-batch size: past it the GEMMs gain nothing and activations grow linearly."""
DEFAULT_MAX_VPP = 2
"""Deepest interleaving (virtual stages per rank) the search tries unless told (`search --max-vpp`). Deeper pays on
fleets of one GPU type with few micro-batches per stage: gpt-145.6b on 512 H100s (2,048 tokens, global batch 256)
2.458 s at most 2, 2.252 s with up to 8 (pp 16, 5 virtual stages, as SC'21 trained it), 2.221 s with up to 16 (pp 8,
10: one layer per chunk); llama3.1-70b on 1,024 H100s (global batch 512) 2.254 -> 2.190 s -> 2.132 s. On the mixed
fleets of benchmarks/search_scaling.py --quick, up to 8 found no faster plan, cost 1-2.5 s more per search (the
10-group fleet 6.2 -> 8.6 s), and on the three-site four-type fleet returned a plan that simulates 1.4% slower
(3.908 -> 3.963 s) because its closed form, the search's objective, is lower (3.966 against 4.128 s: the closed
form over-charges that pp 2 plan's fill; docs/planner.md, "What the gap means"). Measured 2026-11-29."""
RERANKED = 8
"""Plans (the best per configuration, by the search objective) a search hands over to be ranked by the reported
model: at least this many for the fleet (whatever --top shows, so the winner does not depend on --top) and this
many per node group for the single-group baseline."""
DTIME_PER_WALL = 0.6
"""CP-SAT deterministic seconds per wall second measured on the 2-core CI machine (benchmarks/search_scaling.py)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchOptions:
    """What to search and for how long. Defaults are the CLI's."""

    target: Target = Target.MEGATRON
    top_k: int = 5
    budget_s: float = 60.0
    """Time limit in seconds. The search spends at most DTIME_PER_WALL x budget_s of CP-SAT deterministic time
    (reproducible run to run) and stops at budget_s of wall time as a hard cap (then stopped_by = 'wall')."""
    per_solve_s: float = 1.0
    max_pp: int | None = None
    groups: tuple[str, ...] | None = None
    """Restrict the search to these node groups (used by the single-group baseline)."""
    mbs_options: tuple[int, ...] | None = None
    """Micro-batch sizes to try. Default: every size up to MAX_MICRO_BATCH that divides the global batch for the
    candidate's DP (candidates.micro_batch_sizes; memory decides which fit)."""
    recompute_options: tuple[Recompute, ...] = tuple(Recompute)
    vpp_options: tuple[int, ...] | None = None
    """Default: 1 to DEFAULT_MAX_VPP for Megatron-LM, (1,) for DeepSpeed (no interleaved schedule) and FlagScale's
    meshes; only those dividing the layers are searched (every stage holds a multiple of v)."""
    tp_options: tuple[int, ...] | None = None
    seed: int = 1
    max_gap: float = 0.005
    """Stop once no unexplored candidate can beat the best plan by more than this fraction (certified)."""
    solver_log: bool = False
    """Send CP-SAT's search log to the caller's log callback."""
    solve_gap: float = 0.001
    """CP-SAT stops a candidate once its own relative gap is below this; the reported gap is still proven."""
    solver_params: str = ""
    """Text-format SatParameters applied on top of hgplan's own (an escape hatch; recorded in the JSON)."""
    keep_model: bool = False
    """Keep the last CP-SAT model (text format) in the result, for --export-model."""
    prove_gap: bool = False
    """After the search, prove a bound on the reported (simulated) iteration time of every plan of the family
    (planner/certify.py) in what the search left of budget_s; a plan the proof finds faster is ranked too."""
    wall_deadline_s: float | None = None
    """A time.perf_counter() reading at which every phase stops (listing candidates, bounds, solves), whatever
    budget_s leaves: the CLI sets it so that --time-limit covers reading the inputs and writing the output too."""

    def stop_at_s(self, start_s: float) -> float:
        """When a search started at start_s stops: its own budget or the command's deadline, the earlier."""
        return min(start_s + self.budget_s, self.wall_deadline_s if self.wall_deadline_s is not None else math.inf)
