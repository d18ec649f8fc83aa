"""plan_training(): search, check every returned plan, re-evaluate it, add baselines and explanations (pure).

Returns a typed SearchReport (hgplan/documents.py); the CLI prints it, writes plan files from it and renders it.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

import ortools

from hgplan import __version__
from hgplan.costmodel.evaluate import Prediction, evaluate
from hgplan.costmodel.memory import FRAMEWORK_OVERHEAD_GIB, state_bytes_per_param, training_state_gib, usable_memory_gib
from hgplan.costmodel.reshard import cross_vendor_message
from hgplan.documents import (AsymmetricRecord, BaselineRecord, CandidateCounts, ClusterInput, EntrySolver,
                              ModelInput, PlanEntry, ProofRecord, SearchFinding, SearchInputs, SearchReport,
                              SearchStats, SolverRecord)
from hgplan.domain import Fleet, ModelArch, NodeGroup, Target, TrainingSettings
from hgplan.errors import NoAnswerError, PlanningError
from hgplan.plan import ParallelConfig, Plan
from hgplan.planner import baselines as bl
from hgplan.planner.batch_advice import batch_finding
from hgplan.planner.candidates import base_configs, cand_key, searched_vpps
from hgplan.planner.certify import certify, polish
from hgplan.planner.costs import US, CostSource, capacity_mib, layers_that_fit
from hgplan.planner.mesh_model import MESH_MODEL_PARAMS
from hgplan.planner.mesh_search import MeshResult, mesh_search
from hgplan.planner.options import DTIME_PER_WALL, RERANKED, SearchOptions
from hgplan.planner.path_model import PATH_MODEL_PARAMS
from hgplan.planner.progress import Progress, ProgressFn
from hgplan.planner.limits import SOLVE_THREADS, solve_params
from hgplan.planner.found import Found, SearchResult
from hgplan.planner.idle import NO_SOCKETS, idle_gpus
from hgplan.planner.seeded import seeded_search
from hgplan.report import plan_record, prediction_record, rounded, stage_results, training_record
from hgplan.validate import check_plan, precision_fix

PROVEN_NOTE = ("the bound is proven for the reported (simulated) iteration time of every plan of the family: each "
               "configuration was either pruned by a lower bound of the simulator or solved by CP-SAT over a model "
               "whose objective is a lower bound of it (search --prove-gap; docs/planner.md, 'What the gap means')")
GAP_NOTE = ("the bound is of the search objective (the closed form in integer tables); the reported iteration time "
            "comes from the pipeline simulator, which no bound of the search is proven to stay below, so the gap "
            "on the reported time is an estimate, not a proof (docs/planner.md, 'What the gap means')")


def plan_entry(rank: int, plan: Plan, pred: Prediction, *, objective_s: float | None = None,
               status: str | None = None, origin: str = "search") -> PlanEntry:
    """One ranked plan as a document part."""
    extra = {} if objective_s is None else {"solver": EntrySolver(objective_s=rounded(objective_s), status=status)}
    return PlanEntry(rank=rank, plan=plan_record(plan), prediction=prediction_record(pred),
                     stages=stage_results(pred), gpus_used=plan.world_size,
                     worst_headroom_gib=rounded(min(s.headroom_gib for s in pred.stages), 4), origin=origin, **extra)


def _gib_text(gib: float) -> str:
    """A memory size for a message: GiB below 1 TiB, TiB above, never rounded to the same figure as its neighbour."""
    return f"{gib:,.1f} GiB" if gib < 1024 else f"{gib / 1024:,.2f} TiB"


def explain_infeasible(fleet: Fleet, model: ModelArch, train: TrainingSettings, result: SearchResult,
                       opts: SearchOptions) -> str:
    """Why nothing fits, with the numbers."""
    usable = [g for g in fleet.groups if g.gpu.trains(train)]
    if not usable:
        return f"no GPU in the fleet supports {train.precision_name}; {precision_fix(train)}"
    per_param = sum(state_bytes_per_param(train.precision, 0, 1))
    need, have = training_state_gib(model, train.precision), usable_memory_gib(usable)
    if need > have:
        big = _largest_memory(usable)
        more = math.ceil((need - have) / (big.gpu.hbm_gib - FRAMEWORK_OVERHEAD_GIB))
        return (f"the {model.num_layers} layers ({model.num_params() / 1e9:.1f} B parameters) need at least "
                f"{_gib_text(need)} for weights, gradients and optimizer state ({per_param:g} bytes per parameter, "
                f"sharded over every GPU at best); the fleet has {_gib_text(have)} of usable GPU memory: add at "
                f"least {more} GPUs like {big.key}'s ({big.gpu.id}, before activations), or plan a smaller model")
    if result.candidates_total == 0 and next(base_configs(model, train, opts, usable), None) is not None:
        return (f"no pipeline of at most {opts.max_pp or model.num_layers} stages holds the model state (weights, "
                "gradients and optimizer state) in GPU memory for any configuration; allow more stages (--max-pp) or "
                "add GPUs")
    if result.candidates_total == 0:
        return (f"no configuration divides the global batch of {train.global_batch_size} into micro-batches x DP for a "
                "stage size that tiles the nodes; use a global batch with more factors of 2")
    closest = _closest_miss(CostSource(fleet, model, train), result.candidates, usable, model.num_layers)
    return (f"none of the {result.candidates_total} configurations fits in GPU memory (activations for sequence length "
            f"{train.seq_length} plus model state){closest}; add GPUs or shorten the sequence"
            f"{_cut_note(fleet, usable)}")


def _cut_note(fleet: Fleet, usable: list[NodeGroup]) -> str:
    """Where the target's runtime cannot pipeline node groups the fleet joins (Fleet.for_target), which and why."""
    cut = None if fleet.mixed_transports else next(((a, b) for i, a in enumerate(usable) for b in usable[i + 1:]
                                                    if not fleet.one_transport(a, b)), None)
    if cut is None:
        return ""
    return (f"; Megatron-DeepSpeed cannot pipeline {cut[0].key} ({cut[0].nic_transport}) with {cut[1].key} "
            f"({cut[1].nic_transport}): one NCCL transport does not join them and {NO_SOCKETS}")


def _largest_memory(groups: list[NodeGroup]) -> NodeGroup:
    """The group whose GPUs have the most memory (ties: the last key)."""
    return max(groups, key=lambda g: (g.gpu.hbm_gib, g.key))


def _closest_miss(costs: CostSource, cands: list, usable: list[NodeGroup], layers: int) -> str:
    """', the closest: ...': the configuration whose stages, each on the GPU of most memory that hosts one, hold the
    most layers (and how many; ties: the first configuration in the search's order), or '' when none was listed."""
    best: tuple[int, ParallelConfig, NodeGroup] | None = None
    for cfg in sorted((c.cfg for c in cands), key=cand_key):
        hosts = [g for g in usable if g.num_gpus >= cfg.gpus_per_stage]
        if not hosts:
            continue
        g = _largest_memory(hosts)
        held = min(layers, sum(max(0, layers_that_fit(a, b, capacity_mib(g), layers)) for a, b in costs.memory(cfg, g)))
        if best is None or held > best[0]:
            best = (held, cfg, g)
    if best is None:
        return ""
    held, cfg, g = best
    return (f"; the closest, tp {cfg.tp} cp {cfg.cp} pp {cfg.pp} dp {cfg.dp}, micro-batch {cfg.micro_batch_size}, "
            f"recompute {cfg.recompute}, on {g.gpu.id} ({g.gpu.hbm_gib:g} GiB), holds at most {held} of the {layers} "
            "layers")


def _checked(found: list[Found], fleet: Fleet, model: ModelArch, train: TrainingSettings,
             warnings: list[str], *, required: bool = True) -> list[tuple[Plan, Prediction, Found]]:
    """The solver's plans that pass the validator and fit the cost model's memory, fastest first (with `required`,
    at least one must)."""
    evaluated = []
    for f in found:
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
    if not evaluated and required:
        raise PlanningError("every plan the solver returned failed validation; this is a bug, please report it")
    return sorted(evaluated, key=lambda e: e[1].iteration_time_s)


def _fastest_per_config(checked: list[tuple[Plan, Prediction, Found]]) -> list[tuple[Plan, Prediction, Found]]:
    """The fastest checked stock plan of each configuration (the search's or its polished twin) and every mesh plan,
    fastest first; of equal plans (a mesh plan whose meshes all match is a stock plan) the first listed stays."""
    best: dict[tuple, tuple[Plan, Prediction, Found]] = {}
    for n, entry in enumerate(checked):
        key = cand_key(entry[2].cfg) if isinstance(entry[2], Found) else ("mesh", n)
        if key not in best or entry[1].iteration_time_s < best[key][1].iteration_time_s:
            best[key] = entry
    out, seen = [], set()
    for entry in sorted(best.values(), key=lambda e: e[1].iteration_time_s):
        if entry[0] not in seen:
            seen.add(entry[0])
            out.append(entry)
    return out


def _solver_record(result: SearchResult, opts: SearchOptions) -> SolverRecord:
    """The parameters every solve shared and the largest limits any solve ran under."""
    limits = {**solve_params(opts, 0).to_dict(), **result.solver_limits}
    mesh = {"mesh_params": MESH_MODEL_PARAMS} if opts.target == Target.FLAGSCALE else {}
    return SolverRecord(**limits, **mesh, time_limit_s=opts.budget_s, max_gap=opts.max_gap, max_pp=opts.max_pp,
                        budget_deterministic_s=round(DTIME_PER_WALL * opts.budget_s, 3), solve_threads=SOLVE_THREADS,
                        max_vpp=max(searched_vpps(opts)), solver_params=opts.solver_params,
                        lower_bound_params=PATH_MODEL_PARAMS)


def _best_and_bound_us(result: SearchResult, mesh: MeshResult | None) -> tuple[float, float]:
    """The best tables objective and the proven bound over everything searched: with the mesh family, the smaller of
    the stock search's bound (it alone covers selective recomputation) and the mesh search's."""
    if mesh is None:
        return result.best_us, result.bound_us
    best = min(result.best_us, mesh.best_us or math.inf)
    return best, min(result.bound_us, mesh.bound_us, best)


def _search_stats(result: SearchResult, best: Prediction, mesh: MeshResult | None = None,
                  proof: ProofRecord | None = None) -> SearchStats:
    reported = best.iteration_time_s
    best_us, bound_us = _best_and_bound_us(result, mesh)
    proven = proof is not None and mesh is None
    on_reported = min(proof.bound_s, reported) if proven else bound_us / 1e6
    return SearchStats(
        iteration_time_s=rounded(reported), gap_on_reported=rounded((reported - on_reported) / reported, 4),
        gap_proven=proven, gap_note=PROVEN_NOTE if proven else GAP_NOTE, **({"proof": proof} if proof else {}),
        stopped_by=result.stopped_by,
        candidates=CandidateCounts(total=result.candidates_total, solved=result.candidates_solved,
                                   pruned_by_bound=result.candidates_pruned,
                                   skipped_by_budget=result.candidates_skipped,
                                   infeasible=result.candidates_infeasible),
        solver_statuses=dict(sorted(result.statuses.items())), best_objective_s=rounded(best_us / 1e6),
        bound_s=rounded(bound_us / 1e6), relative_gap=rounded(max(0.0, (best_us - bound_us) / best_us), 4),
        deterministic_time=rounded(result.deterministic_time, 4), wall_time_s=round(result.wall_time_s, 3))


def _file_order_baselines(fleet: Fleet, model: ModelArch, train: TrainingSettings,
                          opts: SearchOptions) -> list[bl.Baseline]:
    """The two baselines that take the node groups in file order: they need nothing of the search."""
    layer_costs: dict = {}  # they price the same layers
    return [bl.megatron_default(fleet, model, train, opts, layer_costs),
            bl.proportional(fleet, model, train, opts, layer_costs)]


def _baselines(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions,
               seeds: list[Found], file_order: list[bl.Baseline]) -> list[bl.Baseline]:
    """The three baselines (each evaluated by the reported model)."""
    single = bl.single_group_from(seeds, fleet, model, train) if seeds else bl.single_group(fleet, model, train, opts)
    return [single] + file_order


def _baseline_records(baselines: list[bl.Baseline], best: Prediction) -> dict[str, BaselineRecord]:
    out = {}
    for b in baselines:
        item: dict = {"description": b.description, "available": b.prediction is not None}
        if b.note:
            item["note"] = b.note
        if b.prediction is not None:
            item.update(plan=plan_record(b.plan), prediction=prediction_record(b.prediction),
                        speedup=rounded(b.prediction.iteration_time_s / best.iteration_time_s, 4))
        out[b.name] = BaselineRecord(**item)
    return out


def _prove(costs: CostSource, opts: SearchOptions, result: SearchResult, checked: list, warnings: list[str],
           progress: ProgressFn | None = None) -> tuple[ProofRecord, list]:
    """--prove-gap: bound the simulated time of every plan of the stock family, in what the search left of the time
    limit; returns the record and the plans the proof found faster than the search's best (checked, by the
    reported model)."""
    start = time.perf_counter()
    best_s = min(pred.iteration_time_s for _, pred, f in checked if isinstance(f, Found))
    left = max(0.0, DTIME_PER_WALL * opts.budget_s - result.deterministic_time)
    evaluated: list[tuple[Plan, Prediction, Found]] = []  # each plan the proof finds, checked once, as it is found

    def reported_s(f: Found) -> float | None:
        entries = _checked([f], costs.fleet, costs.model, costs.train, warnings, required=False)
        evaluated.extend(entries)
        return entries[0][1].iteration_time_s if entries else None

    cert = certify(costs, result.candidates, best_s, opts, hints={
        cand_key(f.cfg): f for f in result.found}, dtime_budget=left, stop_at_s=opts.stop_at_s(start),
        progress=progress, reported_s=reported_s)
    faster = [e for e in evaluated if e[1].iteration_time_s < best_s]
    bound_s = cert.bound_us / 1e6 if result.listed_all else 0.0
    if cert.stopped_by != "complete":
        warnings.append(f"the time limit ended before the proof of the gap on the reported time was done "
                        f"({cert.skipped} configurations left at a weaker bound); raise --time-limit for a tighter one")
    elif cert.unsettled:
        warnings.append(f"the proof of the gap on the reported time left {cert.unsettled} configuration(s) at the "
                        f"bound CP-SAT reached when their solves stopped at their time limits; raise --time-limit "
                        f"for a tighter gap")
    return ProofRecord(bound_s=rounded(bound_s), solved=cert.solved, pruned_by_bound=cert.pruned,
                       skipped_by_budget=cert.skipped, faster_plans_found=len(faster),
                       chains=sum(len(c) for c in cert.cuts.values()), resolves=cert.rounds, retried=cert.retried,
                       unsettled=cert.unsettled,
                       solver_statuses=dict(sorted(cert.statuses.items())),
                       deterministic_time=rounded(cert.deterministic_time, 4), stopped_by=cert.stopped_by), faster


def plan_findings(plan: Plan, fleet: Fleet, *, flagscale: bool) -> list[SearchFinding]:
    """What the best plan needs before it runs: a pipeline across GPU vendors needs a communication path both
    vendors' libraries share (the search prices it; export repeats it)."""
    groups = [fleet.group(s.node_group) for s in plan.stages]
    message = cross_vendor_message(groups, flagscale=flagscale)
    if message is None:
        return []
    names = sorted({g.key for g in groups})
    return [SearchFinding(kind="cross_vendor_pipeline", message=message, node_groups=names)]


def _with_faster_baselines(ranked: list, baselines: list[bl.Baseline], warnings: list[str]) -> list:
    """The ranking, by the reported model, with every baseline plan that beats the search's best put in front: the
    returned plan is never slower than any of its own baselines. (The search optimises the closed-form tables; the
    reported time is the simulator's, so a baseline can win by what the two disagree on.)"""
    best_s = ranked[0][1].iteration_time_s
    extra = []
    for b in baselines:
        if b.plan is None or b.prediction is None or b.prediction.iteration_time_s >= best_s:
            continue
        if any(b.plan == plan for plan, *_ in ranked + extra):
            continue
        warnings.append(f"the {b.name} baseline ({b.prediction.iteration_time_s:.3f} s) beats the search's best plan "
                        f"({best_s:.3f} s) under the reported model and is returned in its place")
        extra.append((b.plan, b.prediction, None, f"baseline:{b.name}"))
    return sorted(ranked + extra, key=lambda e: e[1].iteration_time_s)


FLAGSCALE_STOCK_FAMILY = ("stock plans FlagScale's heterogeneous mode runs: no interleaving, no context parallelism; "
                          "--target megatron searches those too")
"""What --target flagscale's stock best is the best of (planner/candidates.py leaves vpp > 1 and cp > 1 out)."""


def _asymmetric_record(result: SearchResult, mesh: MeshResult, stock: tuple, best: tuple) -> AsymmetricRecord:
    """The two families side by side (both by the reported model) and what the two searches proved."""
    best_us, bound = _best_and_bound_us(result, mesh)
    return AsymmetricRecord(
        stock_iteration_time_s=rounded(stock[1].iteration_time_s), stock_plan=plan_record(stock[0]),
        stock_family=FLAGSCALE_STOCK_FAMILY,
        best_is_asymmetric=best[0].asymmetric,
        speedup_over_stock=rounded(stock[1].iteration_time_s / best[1].iteration_time_s, 4),
        best_objective_s=rounded(best_us / 1e6), bound_s=rounded(bound / 1e6),
        relative_gap=rounded(max(0.0, (best_us - bound) / best_us), 4),
        candidates=CandidateCounts(total=mesh.candidates_total, solved=mesh.candidates_solved,
                                   pruned_by_bound=mesh.candidates_pruned, skipped_by_budget=mesh.candidates_skipped,
                                   infeasible=0),
        solver_statuses=dict(sorted(mesh.statuses.items())), deterministic_time=rounded(mesh.deterministic_time, 4),
        stopped_by=mesh.stopped_by)


STOCK_DESCRIPTION = ("the best stock plan of the same search: one tp and dp for every stage, what Megatron-LM runs; "
                     "--target flagscale only")


def _phase(progress: ProgressFn | None, phase: str, unit: str, result: SearchResult) -> None:
    """Report a phase after the stock search (no count: it is short), with that search's best and bound."""
    if progress is not None:
        progress(Progress(phase, 0, 0, unit, result.best_us / US, result.bound_us / US))


def _mesh_family(costs: CostSource, opts: SearchOptions, result: SearchResult, log: Callable[[str], None] | None,
                 progress: ProgressFn | None = None) -> MeshResult | None:
    """With --target flagscale, the asymmetric family, from the stock best as the incumbent, in what the stock search
    left of the time limit (deterministic time, so runs stay reproducible)."""
    if opts.target != Target.FLAGSCALE or not result.found:
        return None
    _phase(progress, "meshes", "one process mesh per node group", result)
    groups = [g for g in costs.fleet.groups if opts.groups is None or g.key in opts.groups]
    left = max(0.1, opts.budget_s - result.deterministic_time / DTIME_PER_WALL)
    return mesh_search(costs, groups, replace(opts, budget_s=left),
                       incumbent_us=result.best_us, log=log)


def _polish_and_meshes(costs: CostSource, result: SearchResult, opts: SearchOptions, stock_opts: SearchOptions,
                       started: float, log: Callable[[str], None] | None,
                       progress: ProgressFn | None) -> tuple[list[Found], MeshResult | None]:
    """The stock plans polished (certify.polish) and, with --target flagscale, the asymmetric family. Neither reads
    what the other writes, so there the polishing runs in a thread beside the mesh search: its CP-SAT solves release
    the interpreter and use the core the mesh search's bounds, pure Python, leave idle. Each is deterministic on its
    own, so the pair is. Without the mesh search the polishing runs in this thread, and the file-order baselines
    beside it (plan_training)."""
    def polishing() -> list[Found]:
        return polish(costs, result.found, opts, stop_at_s=stock_opts.stop_at_s(started),
                      dtime_budget=max(0.0, DTIME_PER_WALL * stock_opts.budget_s - result.deterministic_time) / 2)

    if opts.target != Target.FLAGSCALE:
        return polishing(), None
    with ThreadPoolExecutor(1) as pool:
        polished = pool.submit(polishing)
        mesh = _mesh_family(costs, opts, result, log, progress)
        return polished.result(), mesh


def plan_training(fleet: Fleet, model: ModelArch, train: TrainingSettings, opts: SearchOptions, *,
                  cluster: ClusterInput, model_ref: str, progress: ProgressFn | None = None,
                  log: Callable[[str], None] | None = None, with_baselines: bool = True) -> tuple[SearchReport, SearchResult]:
    """Search and assemble the report (and the raw result, for --export-model).

    Raises PlanningError (nothing fits) or NoAnswerError (timeout). opts.budget_s covers the whole call (search,
    polishing, the proof): without a deadline of the caller's (the CLI sets one from the command's start), the call's
    own start plus budget_s is the deadline, so the proof does not start a fresh time limit after the search."""
    # what the target runs and the paths it can use (domain.py)
    started, train, fleet = time.perf_counter(), train.for_target(opts.target), fleet.for_target(opts.target)
    if opts.wall_deadline_s is None:
        opts = replace(opts, wall_deadline_s=started + opts.budget_s)
    # the search hands over at least RERANKED plans, whatever --top shows, for the ranking by the reported model
    # with --target flagscale the stock family gets half the time limit and the asymmetric family the rest
    stock_opts = replace(opts, top_k=max(opts.top_k, RERANKED),
                         budget_s=opts.budget_s / 2 if opts.target == Target.FLAGSCALE else opts.budget_s)
    costs = CostSource(fleet, model, train)  # one cost cache for the search, polishing, the proof, the meshes
    result, seeds = seeded_search(fleet, model, train, stock_opts, progress=progress, log=log, costs=costs)
    if not result.found:
        if not result.listed_all:
            raise NoAnswerError(f"the time limit ended before any plan was found, while the configurations were "
                                f"being listed and bounded ({result.candidates_total} so far); raise --time-limit")
        if result.stopped_by != "complete" and result.candidates_skipped:
            raise NoAnswerError(f"the time limit ended before any plan was found ({result.candidates_solved} of "
                                f"{result.candidates_total} configurations solved); raise --time-limit")
        raise PlanningError(explain_infeasible(fleet, model, train, result, opts))
    warnings: list[str] = []
    if not result.listed_all:
        warnings.append(f"the time limit ended while the configurations were being listed ({result.candidates_total} "
                        "so far): nothing is known of the others, so the search has no bound and its gap is 100%; "
                        "raise --time-limit")
    # polishing belongs to the stock family's share of the time limit (all of it, or half with --target flagscale,
    # whose mesh search would otherwise run to the deadline and leave none: the stock best it returned on two-site was
    # the closed form's 10.935 s while plain search returned the polished 10.228 s)
    _phase(progress, "ranking", f"simulating and polishing {len(result.found)} plans", result)
    # the file-order baselines, pure Python, beside polishing, whose CP-SAT solves release the interpreter (not beside
    # the mesh search, pure Python too: docs/planner.md, "Baselines")
    beside = with_baselines and opts.target != Target.FLAGSCALE
    with ThreadPoolExecutor(1) as pool:
        file_order = pool.submit(_file_order_baselines, fleet, model, train, opts) if beside else None
        polished, mesh = _polish_and_meshes(costs, result, opts, stock_opts, started, log, progress)
        file_order = file_order.result() if file_order else None
    found = list(result.found) + polished + result.probed + (mesh.found[:RERANKED] if mesh else [])
    checked = _fastest_per_config(_checked(found, fleet, model, train, warnings))
    # the baselines before the proof, which runs to the deadline (after it they took 'large' 0.85 s past it)
    _phase(progress if with_baselines else None, "baselines", "evaluating three baselines", result)
    # the search's plans on one group join the groups' own (one node group: the search was that group's own, and
    # searching it again took half of the time of the 1024- and 64-GPU one-group benchmark fleets, for the same plan)
    alone = bl.on_one_group(checked, seeds, one_group_fleet=len(fleet.groups) == 1)
    if with_baselines and file_order is None:
        file_order = _file_order_baselines(fleet, model, train, opts)
    baselines = _baselines(fleet, model, train, opts, alone, file_order) if with_baselines else []
    proof, faster = (_prove(costs, opts, result, checked, warnings, progress) if opts.prove_gap
                     else (None, []))
    if proof is not None and mesh is not None:
        warnings.append(f"--prove-gap covers the stock family only (no plan of it, one tp and dp for every stage, runs "
                        f"faster than {proof.bound_s:.3f} s under the simulator); the asymmetric family's bound is of "
                        "its closed-form objective, so the gap on the reported time stays an estimate")
    checked = sorted(checked + faster, key=lambda e: e[1].iteration_time_s)
    stock_best = next((e for e in checked if isinstance(e[2], Found)), None)
    ranked = [(plan, pred, f, "proof" if f.solution.status.startswith("BOUND_") else "search")
              for plan, pred, f in checked]
    ranked = _with_faster_baselines(ranked, baselines, warnings)
    entries = [plan_entry(rank, plan, pred, origin=origin,
                          **({} if f is None else {"objective_s": f.time_us / 1e6, "status": f.solution.status}))
               for rank, (plan, pred, f, origin) in enumerate(ranked[:opts.top_k], start=1)]
    best_plan, best_pred = ranked[0][0], ranked[0][1]
    extra: dict = {}
    if mesh is not None and stock_best is not None:
        extra["asymmetric"] = _asymmetric_record(result, mesh, stock_best, ranked[0])
        # the plan file keeps the stock best as a baseline: explain reads the speedup over it from there
        baselines.append(bl.Baseline(name="stock", description=STOCK_DESCRIPTION, plan=stock_best[0],
                                     prediction=stock_best[1]))
    if baselines:
        extra["baselines"] = _baseline_records(baselines, best_pred)
    idle = idle_gpus(fleet, best_plan, train, opts.max_pp)
    findings = plan_findings(best_plan, fleet, flagscale=opts.target == "flagscale")
    findings += [f for f in (batch_finding(fleet, train, idle),) if f is not None]
    if findings:
        extra["findings"] = findings
    stats = _search_stats(result, best_pred, mesh, proof)
    if (extra.get("asymmetric") or stats).stopped_by == "complete" and stats.relative_gap > opts.max_gap + 5e-5:
        warnings.append(f"the search ended with a gap of {stats.relative_gap:.2%} on its objective, above --max-gap "
                        f"{opts.max_gap:.2%}: solves that stopped at their limits unproven after their retries keep "
                        "the bound CP-SAT reached (docs/planner.md, 'What the gap means')")
    report = SearchReport(
        hgplan_version=__version__, ortools_version=ortools.__version__,
        inputs=SearchInputs(cluster=cluster, model=ModelInput(ref=model_ref, name=model.name),
                            training=training_record(train), target=opts.target),
        solver=_solver_record(result, opts), search=stats, plans=entries, idle_gpus=idle, warnings=warnings, **extra)
    return report, result
