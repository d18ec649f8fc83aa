"""Explain a plan: prediction, per-stage breakdown, bottleneck, findings and a text timeline (pure)."""

from __future__ import annotations

from typing import Any

from hgplan.costmodel.evaluate import Prediction, evaluate
from hgplan.costmodel.pipeline import Op
from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.errors import InputError, InputIssue
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
from hgplan.report import explain_doc
from hgplan.validate import check_memory, check_plan


def build_plan(*, fleet: Fleet, model: ModelArch, tp: int, pp: int, dp: int, cp: int, mbs: int, vpp: int,
               recompute: str, sequence_parallel: bool, zero_stage: int, overlap_grad_reduce: bool,
               allow_cross_node_tp: bool, layers: list[int], stage_groups: list[str]) -> Plan:
    cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch_size=mbs, vpp=vpp, recompute=Recompute(recompute),
                         sequence_parallel=sequence_parallel, zero_stage=zero_stage,
                         overlap_grad_reduce=overlap_grad_reduce, allow_cross_node_tp=allow_cross_node_tp)
    return Plan(config=cfg, stages=tuple(StageAssignment(node_group=g, num_layers=n) for g, n in zip(stage_groups, layers)))


def require_valid(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, source: str = "<plan>") -> None:
    violations = check_plan(plan, fleet, model, train)
    if violations:
        raise InputError([InputIssue(source=source, line=None, path=v.rule, message=v.message) for v in violations])


def findings(pred: Prediction, fleet: Fleet) -> list[str]:
    """Plain-language reasons: bottleneck stage, bubble, exposed communication, memory."""
    out = []
    b = pred.stages[pred.bottleneck_stage]
    per_mb = b.fwd_s + b.bwd_s
    out.append(f"bottleneck: stage {b.index} on {b.node_group} ({b.gpu}, {b.layers} layers) at {per_mb * 1e3:.1f} ms "
               f"per micro-batch; it sets the pipeline's pace")
    total = pred.iteration_time_s
    if pred.bubble_fraction > 0.05:
        out.append(f"pipeline bubble: {pred.bubble_fraction:.0%} of the bottleneck stage's time is idle "
                   "(more micro-batches or interleaving (--vpp) shrink it)")
    worst_p2p = max(pred.stages, key=lambda s: s.p2p_s)
    if worst_p2p.p2p_s > 0.03 * total:
        out.append(f"pipeline transfers: stage {worst_p2p.index} spends {worst_p2p.p2p_s:.2f} s "
                   f"({worst_p2p.p2p_s / total:.0%} of the iteration) sending activations and gradients")
    worst_dp = max(pred.stages, key=lambda s: s.dp_sync_s)
    if worst_dp.dp_sync_s > 0.03 * total:
        out.append(f"data-parallel sync: stage {worst_dp.index} waits {worst_dp.dp_sync_s:.2f} s "
                   f"({worst_dp.dp_sync_s / total:.0%}) for gradient reduction after the flush")
    for v in check_memory(pred):
        out.append(f"does not fit: {v.message}")
    tight = [s for s in pred.stages if s.fits and s.headroom_gib < 0.1 * s.memory_capacity_gib]
    for s in tight:
        out.append(f"tight memory: stage {s.index} leaves {s.headroom_gib:.1f} GiB of {s.memory_capacity_gib:g} GiB")
    return out


def timeline_text(ops: tuple[Op, ...], num_stages: int, *, width: int = 100) -> str:
    """One iteration as a text Gantt chart: F = forward, B = backward, '.' = idle."""
    if not ops:
        return ""
    end = max(o.end_s for o in ops)
    scale = width / end
    rows = []
    for s in range(num_stages):
        line = ["."] * width
        for o in ops:
            if o.stage != s:
                continue
            a, b = int(o.start_s * scale), max(int(o.start_s * scale) + 1, int(o.end_s * scale))
            ch = "F" if o.kind == "F" else "B"
            for x in range(a, min(b, width)):
                line[x] = ch
        rows.append(f"stage {s:>2} |{''.join(line)}|")
    rows.append(f"          0{' ' * (width - 10)}{end:8.3f} s")
    return "\n".join(rows)


def explain(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *, cluster_ref: str,
            model_ref: str, simulate: bool = True, timeline: bool = False) -> dict[str, Any]:
    require_valid(plan, fleet, model, train)
    pred = evaluate(plan, fleet, model, train)
    sim = evaluate(plan, fleet, model, train, use_simulator=True, keep_ops=timeline) if (simulate or timeline) else None
    doc = explain_doc(plan, pred, model=model, train=train, cluster=cluster_ref, model_ref=model_ref, simulated=sim)
    doc["findings"] = findings(pred, fleet)
    if timeline and sim is not None:
        doc["timeline_text"] = timeline_text(sim.ops, plan.config.pp)
    return doc
