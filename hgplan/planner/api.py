"""plan(): search, check every returned plan, re-evaluate it, add baselines and explanations (pure)."""

from __future__ import annotations

from typing import Any, Callable

import ortools

from hgplan import __version__
from hgplan.costmodel.evaluate import Prediction, evaluate
from hgplan.costmodel.memory import FRAMEWORK_OVERHEAD_GIB, GIB
from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.errors import NoAnswerError, PlanningError
from hgplan.plan import Plan
from hgplan.planner import baselines as bl
from hgplan.planner.model import SolverParams
from hgplan.planner.options import DTIME_PER_WALL, SearchOptions
from hgplan.planner.search import SearchResult, seeded_search
from hgplan.planner.tables import eligible
from hgplan.report import SCHEMA_VERSION, prediction_dict, stages_list, training_dict
from hgplan.validate import check_plan

SIMULATE_MAX_OPS = 200_000


def _r(x: float, nd: int = 6) -> float:
    return float(f"{x:.{nd}g}")


def plan_entry(rank: int, plan: Plan, pred: Prediction, sim: Prediction | None, *, objective_s: float | None = None,
               status: str | None = None) -> dict[str, Any]:
    entry = {"rank": rank, "plan": plan.to_dict(), "prediction": prediction_dict(pred, simulated=sim),
             "stages": stages_list(pred), "gpus_used": plan.config.world_size,
             "worst_headroom_gib": _r(min(s.headroom_gib for s in pred.stages), 4)}
    if objective_s is not None:
        entry["solver"] = {"objective_s": _r(objective_s), "status": status}
    return entry


def idle_gpus(fleet: Fleet, plan: Plan, train: TrainingSettings) -> list[dict[str, Any]]:
    cfg = plan.config
    size = cfg.gpus_per_stage
    out = []
    for g in fleet.groups:
        used = sum(size for s in plan.stages if s.node_group == g.key)
        idle = g.num_gpus - used
        if idle <= 0:
            continue
        if not g.gpu.supports(train.precision):
            why = f"{g.gpu.id} does not support {train.precision.value}"
        elif not eligible(g, cfg, train):
            why = (f"a stage of tp*cp*dp = {size} GPUs with tp = {cfg.tp} does not fit the {g.gpus_per_node}-GPU nodes "
                   f"of this group")
        elif idle < size:
            why = f"fewer GPUs than one stage needs ({size}) remain"
        else:
            why = (f"room for {idle // size} more stage(s) of {size} GPUs, left empty: more stages would add pipeline "
                   "fill, transfers or memory pressure that outweigh their compute (the solver weighed them)")
        out.append({"node_group": g.key, "gpus": idle, "reason": why})
    return out


def explain_infeasible(fleet: Fleet, model: ModelArch, train: TrainingSettings, result: SearchResult) -> str:
    usable = [g for g in fleet.groups if g.gpu.supports(train.precision)]
    if not usable:
        return (f"no GPU in the fleet supports {train.precision.value}; train in fp16 (--precision fp16)")
    need = model.num_params() * 18 / GIB / 1024
    have = sum(g.num_gpus * (g.gpu.hbm_gib - FRAMEWORK_OVERHEAD_GIB) for g in usable) / 1024
    if need > have:
        return (f"the {model.num_layers} layers ({model.num_params() / 1e9:.1f} B parameters) need at least "
                f"{need:.1f} TiB for weights, gradients and optimizer state (18 bytes per parameter); the fleet has "
                f"{have:.1f} TiB of usable GPU memory")
    if result.candidates_total == 0:
        return (f"no configuration divides the global batch of {train.global_batch_size} into micro-batches x DP for a "
                "stage size that tiles the nodes; use a global batch with more factors of 2")
    return (f"none of the {result.candidates_total} configurations fits in GPU memory (activations for sequence length "
            f"{train.seq_length} plus model state); add GPUs, shorten the sequence or use a smaller global batch")


def plan_training(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
                  inputs: dict[str, Any], progress: Callable[[int, int], None] | None = None,
                  with_baselines: bool = True) -> dict[str, Any]:
    """Search and assemble the result document. Raises PlanningError (nothing fits) or NoAnswerError (timeout)."""
    result, seeds = seeded_search(fleet, model, train, opts, progress=progress)
    single = bl.single_group_from(seeds, fleet, model, train) if seeds else None
    if not result.found:
        if result.stopped_by != "complete" and result.candidates_skipped:
            raise NoAnswerError(f"the time limit ended before any plan was found ({result.candidates_solved} of "
                                f"{result.candidates_total} configurations solved); raise --time-limit")
        raise PlanningError(explain_infeasible(fleet, model, train, result))
    warnings: list[str] = []
    entries = []
    evaluated: list[tuple[Plan, Prediction, Any]] = []
    for f in result.found:
        plan = f.plan()
        violations = check_plan(plan, fleet, model, train)
        if violations:  # never trust the solver unchecked
            warnings.append(f"dropped a solver plan that breaks '{violations[0].rule}': {violations[0].message}")
            continue
        pred = evaluate(plan, fleet, model, train)
        if not pred.fits:
            warnings.append("dropped a solver plan that the cost model finds over memory (integer rounding)")
            continue
        evaluated.append((plan, pred, f))
    if not evaluated:
        raise PlanningError("every plan the solver returned failed validation; this is a bug, please report it")
    evaluated.sort(key=lambda e: e[1].iteration_time_s)
    for rank, (plan, pred, f) in enumerate(evaluated, start=1):
        ops = plan.config.pp * plan.config.vpp * pred.num_microbatches * 2
        sim = evaluate(plan, fleet, model, train, use_simulator=True) if rank <= 3 and ops <= SIMULATE_MAX_OPS else None
        entries.append(plan_entry(rank, plan, pred, sim, objective_s=f.time_us / 1e6, status=f.solution.status))
    best_plan, best_pred, _ = evaluated[0]
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "hgplan.search",
        "hgplan_version": __version__,
        "ortools_version": ortools.__version__,
        "inputs": {**inputs, "training": training_dict(train), "target": opts.target},
        "solver": {**SolverParams(random_seed=opts.seed, max_deterministic_time=opts.per_solve_s,
                                  relative_gap_limit=opts.solve_gap).to_dict(),
                   "time_limit_s": opts.budget_s, "budget_deterministic_s": round(DTIME_PER_WALL * opts.budget_s, 3),
                   "max_gap": opts.max_gap},
        "search": {
            "stopped_by": result.stopped_by,
            "candidates": {"total": result.candidates_total, "solved": result.candidates_solved,
                           "pruned_by_bound": result.candidates_pruned, "skipped_by_budget": result.candidates_skipped,
                           "infeasible": result.candidates_infeasible},
            "solver_statuses": dict(sorted(result.statuses.items())),
            "best_objective_s": _r(result.best_us / 1e6),
            "bound_s": _r(result.bound_us / 1e6),
            "relative_gap": _r(result.gap, 4),
            "deterministic_time": _r(result.deterministic_time, 4),
            "wall_time_s": round(result.wall_time_s, 3),
        },
        "plans": entries,
        "idle_gpus": idle_gpus(fleet, best_plan, train),
        "warnings": warnings,
    }
    if with_baselines:
        doc["baselines"] = {}
        for b in (single or bl.single_group(fleet, model, train, opts), bl.megatron_default(fleet, model, train, opts),
                  bl.proportional(fleet, model, train, opts)):
            item: dict[str, Any] = {"description": b.description, "available": b.prediction is not None}
            if b.note:
                item["note"] = b.note
            if b.prediction is not None:
                item["plan"] = b.plan.to_dict()
                item["prediction"] = prediction_dict(b.prediction)
                item["speedup"] = _r(b.prediction.iteration_time_s / best_pred.iteration_time_s, 4)
            doc["baselines"][b.name] = item
    return doc
