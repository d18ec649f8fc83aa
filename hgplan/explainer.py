"""Explain a plan: prediction, per-stage breakdown, bottleneck, findings and a text timeline (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hgplan.costmodel.evaluate import Prediction, evaluate
from hgplan.costmodel.pipeline import Op
from hgplan.domain import Fleet, Link, ModelArch, TrainingSettings
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


def _with_link(fleet: Fleet, link: Link, *, gbps: float, latency_ms: float) -> Fleet:
    """The fleet with one link changed."""
    links = tuple(replace(lk, gbps=gbps, latency_ms=latency_ms) if lk is link else lk for lk in fleet.links)
    return replace(fleet, links=links)


def _with_double_nics(fleet: Fleet, group_key: str) -> Fleet:
    groups = tuple(replace(g, nic_count=g.nic_count * 2) if g.key == group_key else g for g in fleet.groups)
    return replace(fleet, groups=groups)


def _pipeline_links(plan: Plan, fleet: Fleet) -> list[Link]:
    """The links (between islands or sites) that the plan's stage boundaries cross, once each."""
    out: list[Link] = []
    for a, b in zip(plan.stages, plan.stages[1:]):
        path = fleet.path(fleet.group(a.node_group), fleet.group(b.node_group))
        if path is not None and path.link is not None and all(path.link is not lk for lk in out):
            out.append(path.link)
    return out


def what_ifs(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, pred: Prediction) -> list[dict[str, Any]]:
    """Cost of each binding resource and the gain from improving it, re-evaluated by the cost model."""
    base = pred.iteration_time_s
    out = []
    for lk in _pipeline_links(plan, fleet):
        free = evaluate(plan, _with_link(fleet, lk, gbps=1e9, latency_ms=0.0), model, train).iteration_time_s
        doubled = evaluate(plan, _with_link(fleet, lk, gbps=2 * lk.gbps, latency_ms=lk.latency_ms), model,
                           train).iteration_time_s
        share = (base - free) / base
        if share > 0.005:
            out.append({"resource": f"link {lk.a} <-> {lk.b}", "share_of_step": round(share, 4),
                        "what_if": "double its bandwidth", "speedup": round(base / doubled - 1, 4),
                        "text": f"the {lk.gbps:g} Gbit/s link between {lk.a} and {lk.b} costs {share:.0%} of step time; "
                                f"doubling it gives {base / doubled - 1:+.0%}"})
    worst_dp = max(pred.stages, key=lambda s: s.dp_sync_s)
    if worst_dp.dp_sync_s > 0.02 * base:
        faster = evaluate(plan, _with_double_nics(fleet, worst_dp.node_group), model, train).iteration_time_s
        out.append({"resource": f"NICs of {worst_dp.node_group}", "share_of_step": round(worst_dp.dp_sync_s / base, 4),
                    "what_if": "double the NICs per node", "speedup": round(base / faster - 1, 4),
                    "text": f"gradient sync on {worst_dp.node_group} is exposed for {worst_dp.dp_sync_s / base:.0%} of "
                            f"step time; twice the NICs per node gives {base / faster - 1:+.0%}"})
    if pred.bubble_fraction > 0.08 and plan.config.pp > 1 and plan.config.vpp == 1:
        m = pred.num_microbatches
        if m % plan.config.pp == 0 and all(s.num_layers % 2 == 0 for s in plan.stages):
            alt = replace(plan, config=replace(plan.config, vpp=2))
            alt_pred = evaluate(alt, fleet, model, train)
            if alt_pred.fits:
                out.append({"resource": "pipeline bubble", "share_of_step": round(pred.bubble_fraction, 4),
                            "what_if": "interleave 2 virtual stages (--vpp 2)",
                            "speedup": round(base / alt_pred.iteration_time_s - 1, 4),
                            "text": f"the pipeline bubble idles {pred.bubble_fraction:.0%} of the bottleneck stage; "
                                    f"--vpp 2 gives {base / alt_pred.iteration_time_s - 1:+.0%}"})
    return out


def fleet_upper_bound(fleet: Fleet, model: ModelArch, train: TrainingSettings) -> dict[str, Any]:
    """HETHUB's yardstick: every GPU of the fleet busy at its achievable matmul rate, no communication or bubble."""
    from hgplan.costmodel.flops import megatron_model_flops

    rate = sum(g.num_gpus * g.gpu.peak_tflops(train.precision) * 1e12 * g.gpu.eff.gemm_efficiency
               * g.gpu.eff.sustained_clock_fraction for g in fleet.groups if g.gpu.supports(train.precision))
    per_token = megatron_model_flops(model, global_batch_size=1, seq_length=train.seq_length) / train.seq_length
    return {"tokens_per_s": rate / per_token, "definition": "all GPUs of the fleet at their achievable matmul rate "
            "on the model's FLOPs, no communication, bubble or memory limit"}


def explain(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *, cluster_ref: str,
            model_ref: str, simulate: bool = True, timeline: bool = False,
            baselines: dict[str, Any] | None = None) -> dict[str, Any]:
    require_valid(plan, fleet, model, train)
    pred = evaluate(plan, fleet, model, train)
    sim = evaluate(plan, fleet, model, train, use_simulator=True, keep_ops=timeline) if (simulate or timeline) else None
    doc = explain_doc(plan, pred, model=model, train=train, cluster=cluster_ref, model_ref=model_ref, simulated=sim)
    doc["findings"] = findings(pred, fleet)
    doc["what_if"] = what_ifs(plan, fleet, model, train, pred)
    doc["findings"] += [w["text"] for w in doc["what_if"]]
    upper = fleet_upper_bound(fleet, model, train)
    doc["upper_bound"] = {**upper, "share_reached": round(pred.tokens_per_s / upper["tokens_per_s"], 4)}
    doc["findings"].append(f"{pred.tokens_per_s / upper['tokens_per_s']:.0%} of the fleet's upper bound "
                           f"({upper['tokens_per_s']:,.0f} tokens/s with every GPU at its achievable matmul rate)")
    if baselines:
        doc["baselines"] = baselines
        for name, b in baselines.items():
            if b.get("available"):
                doc["findings"].append(f"{b['speedup']:.2f}x faster than {name} ({b['description']})")
    if timeline and sim is not None:
        doc["timeline_text"] = timeline_text(sim.ops, plan.config.pp)
    return doc
