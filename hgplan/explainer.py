"""Explain a plan: prediction, per-stage breakdown, bottleneck, findings and a text timeline (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

from hgplan import __version__
from hgplan.costmodel.comm import members_per_node
from hgplan.costmodel.evaluate import Prediction, StagePrediction, evaluate, plan_tied_sync_s
from hgplan.costmodel.pipeline import Op
from hgplan.documents import (
    SCHEMA_VERSION,
    BaselineRecord,
    BoundaryRecord,
    ExplainBaseline,
    ExplainInputs,
    ExplainReport,
    UpperBound,
    WhatIf,
)
from hgplan.domain import Fleet, Link, ModelArch, Runtime, TrainingSettings
from hgplan.errors import InputError, InputIssue
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
from hgplan.planner.options import DEFAULT_MAX_VPP
from hgplan.report import (
    plan_record,
    prediction_record,
    rounded,
    speedup_text,
    stage_results,
    training_record,
)
from hgplan.validate import check_memory, check_plan

SIGNIFICANT_SHARE = 0.005
"""A what-if is reported when the resource costs at least this share of the step."""
EXPOSED_SHARE = 0.03
"""Transfers or data-parallel sync are a finding from this share of the iteration on."""
TIGHT_MEMORY = 0.1
"""A stage whose headroom is below this share of its capacity is reported as tight."""
NIC_WHATIF_SHARE = 0.02
"""Doubling a group's NICs is tried when its exposed data-parallel sync is at least this share of the step."""
BUBBLE_FINDING = 0.05
"""The bubble is a finding from this share of the bottleneck stage's time on."""
BUBBLE_WHATIF = 0.08
"""Interleaving is tried as a what-if from this bubble share on."""
MAX_WHATIF_VPP = 8
"""Deepest interleaving the bubble's what-if tries (SC'21's runs went to 8; search --max-vpp goes further)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """What `explain` returns: the report, and the text timeline when one was asked for."""

    report: ExplainReport
    timeline: str | None = None
    ops: tuple[Op, ...] = ()
    """The simulator's ops of one iteration (with the timeline only)."""


def build_plan(*, fleet: Fleet, model: ModelArch, tp: int, pp: int, dp: int, cp: int, mbs: int, vpp: int,
               recompute: str, sequence_parallel: bool, zero_stage: int, overlap_grad_reduce: bool,
               allow_cross_node_tp: bool, layers: list[int] | None, stage_groups: list[str]) -> Plan:
    """A plan from explain's flags; layers None splits them evenly (exit 2 when they do not divide)."""
    if layers is None:
        if pp > model.num_layers:
            raise InputError(f"--pp: pp = {pp} is more stages than the model's {model.num_layers} layers, and every "
                             f"stage holds at least one layer; choose pp <= {model.num_layers}")
        if model.num_layers % pp:
            raise InputError(f"--layers: {model.num_layers} layers do not split evenly over pp = {pp}; give --layers "
                             f"with {pp} comma-separated counts that sum to {model.num_layers}")
        layers = [model.num_layers // pp] * pp
    cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch_size=mbs, vpp=vpp, recompute=Recompute(recompute),
                         sequence_parallel=sequence_parallel, zero_stage=zero_stage,
                         overlap_grad_reduce=overlap_grad_reduce, allow_cross_node_tp=allow_cross_node_tp)
    return Plan(config=cfg, stages=tuple(StageAssignment(node_group=g, num_layers=n) for g, n in zip(stage_groups, layers)))


def require_valid(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, source: str = "<plan>") -> None:
    """InputError listing every rule the plan breaks."""
    violations = check_plan(plan, fleet, model, train)
    if violations:
        raise InputError([InputIssue(source=source, line=None, path=v.rule, message=v.message) for v in violations])


def attention_findings(plan: Plan, fleet: Fleet, train: TrainingSettings) -> list[str]:
    """Which attention kernel each GPU type runs, when GPUs of the plan cannot run the one asked for."""
    from hgplan.costmodel.compute import attention_kernel

    gpus = sorted({fleet.group(s.node_group).gpu.id: fleet.group(s.node_group).gpu for s in plan.stages}.items())
    fallback = [gid for gid, g in gpus if not g.eff.flash_attention]
    if not fallback:
        return []
    kernels = ", ".join(f"{gid} {attention_kernel(train, g).value}" for gid, g in gpus)
    return [f"attention: {', '.join(fallback)} {'has' if len(fallback) == 1 else 'have'} no FlashAttention-class kernel "
            f"and {'runs' if len(fallback) == 1 else 'run'} Megatron's unfused attention (kernels: {kernels})"]


def tied_syncs(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings) -> list[float]:
    """Per stage, the part of its exposed sync after the flush that is the tied embedding's gradient all-reduce
    between the first and last stage (evaluate adds it to those two stages' data-parallel sync; 0 elsewhere, and
    when the embeddings are untied or pp = 1)."""
    p, tied = plan.config.pp, plan_tied_sync_s(plan, fleet, model, train)
    return [tied if i in (0, p - 1) else 0.0 for i in range(p)]


def _sync_parts(stage: StagePrediction, tied: list[float]) -> str:
    """What a stage waits for after the flush, where the tied embedding's all-reduce is part of it."""
    if tied[stage.index] <= 0:
        return "for gradient reduction after the flush"
    both = f"all-reducing the tied embedding's gradient with stage {len(tied) - 1 if stage.index == 0 else 0}"
    dp = stage.dp_sync_s - tied[stage.index]
    if dp < 0.005:
        return f"after the flush, {both}"
    return f"after the flush: {tied[stage.index]:.2f} s {both}, {dp:.2f} s reducing gradients"


def findings(pred: Prediction, fleet: Fleet, tied: list[float]) -> list[str]:
    """Plain-language reasons: bottleneck stage, bubble, exposed communication, memory."""
    out = []
    b = pred.stages[pred.bottleneck_stage]
    # the pace is the stage's whole busy time per micro-batch: a stage that sends over a slow link can set it with
    # less compute than its neighbours, so its sends are named beside its forward and backward (the parts as
    # printed add up to the whole as printed)
    work_ms = round((b.fwd_s + b.bwd_s) * 1e3, 1)
    whole_ms = round((b.fwd_s + b.bwd_s + b.p2p_s / pred.num_microbatches) * 1e3, 1)
    split = f" ({work_ms:.1f} ms forward and backward, {whole_ms - work_ms:.1f} ms sending)" if whole_ms > work_ms else ""
    out.append(f"bottleneck: stage {b.index} on {b.node_group} ({b.gpu}, {b.layers} layers) at {whole_ms:.1f} ms "
               f"per micro-batch{split}; it sets the pipeline's pace")
    total = pred.iteration_time_s
    if pred.bubble_fraction > BUBBLE_FINDING:
        sending = b.p2p_s / pred.pipeline_s if pred.pipeline_s > 0 else 0.0
        if sending >= 0.005:  # the bubble is the time without a forward or backward: part of it the stage sends
            out.append(f"pipeline bubble: {pred.bubble_fraction:.0%} of the bottleneck stage's time runs no forward "
                       f"or backward: {sending:.0%} sending, {max(0.0, pred.bubble_fraction - sending):.0%} idle "
                       "(more micro-batches per iteration shrink the idle part)")
        else:
            out.append(f"pipeline bubble: {pred.bubble_fraction:.0%} of the bottleneck stage's time is idle "
                       "(more micro-batches per iteration shrink it)")
    worst_p2p = max(pred.stages, key=lambda s: s.p2p_s)
    if worst_p2p.p2p_s > EXPOSED_SHARE * total:
        busy, pace = worst_p2p.compute_s + worst_p2p.p2p_s, b.compute_s + b.p2p_s
        hidden = (f"; its compute and sends together ({busy:.2f} s) stay below the bottleneck stage's ({pace:.2f} s), "
                  "so they fill time it would otherwise wait" if worst_p2p.index != b.index and busy < pace else "")
        out.append(f"pipeline transfers: stage {worst_p2p.index} spends {worst_p2p.p2p_s:.2f} s "
                   f"({worst_p2p.p2p_s / total:.0%} of the iteration) sending activations and gradients{hidden}")
    worst_dp = max(pred.stages, key=lambda s: s.dp_sync_s)
    if worst_dp.dp_sync_s > EXPOSED_SHARE * total:
        parts = _sync_parts(worst_dp, tied)
        out.append(f"data-parallel sync: stage {worst_dp.index} waits {worst_dp.dp_sync_s:.2f} s "
                   f"({worst_dp.dp_sync_s / total:.0%}) {parts}" + _ends_early(worst_dp, pred))
    for v in check_memory(pred):
        out.append(f"does not fit: {v.message}")
    tight = [s for s in pred.stages if s.fits and s.headroom_gib < TIGHT_MEMORY * s.memory_capacity_gib]
    for s in tight:
        out.append(f"tight memory: stage {s.index} leaves {s.headroom_gib:.1f} GiB of {s.memory_capacity_gib:g} GiB")
    return out


def mesh_findings(plan: Plan, pred: Prediction) -> list[str]:
    """An asymmetric plan's mesh boundaries: what re-sharding the activations between two meshes costs (each way,
    every micro-batch), and the host-memory hop where NCCL cannot join the meshes (reshard.host_copies)."""
    if not plan.asymmetric:
        return []
    out = []
    total = pred.iteration_time_s
    for b in pred.boundaries:
        r = b.get("reshard")
        if r is None:
            continue
        busy = pred.num_microbatches * b["send_s"]  # each side's: activations forward, gradients backward
        via = (" through host memory over gloo (hetero_use_cpu_communication; one TCP connection per pair of ranks)"
               if b.get("host_copy") else "")
        out.append(f"mesh boundary: stage {b['from_stage']} (tp {r['from_tp']}, dp {r['from_dp']}) -> stage "
                   f"{b['to_stage']} (tp {r['to_tp']}, dp {r['to_dp']}) re-shards each micro-batch's activation"
                   f"{via}: {b['send_s'] * 1e3:.2f} ms per message each way; over {pred.num_microbatches} "
                   f"micro-batches stage {b['from_stage']} sends activations and stage {b['to_stage']} gradients "
                   f"for {busy:.2f} s each ({busy / total:.0%} of the iteration)")
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


def _with_nics(fleet: Fleet, group_key: str, factor: int = 2) -> Fleet:
    """The fleet with `factor` times the NICs per node in one group."""
    groups = tuple(replace(g, nic_count=g.nic_count * factor) if g.key == group_key else g for g in fleet.groups)
    return replace(fleet, groups=groups)


def _pipeline_links(plan: Plan, fleet: Fleet) -> list[Link]:
    """The links (between islands or sites) that the plan's stage boundaries cross, once each."""
    out: list[Link] = []
    for a, b in zip(plan.stages, plan.stages[1:]):
        path = fleet.path(fleet.group(a.node_group), fleet.group(b.node_group))
        if path is not None and path.link is not None and all(path.link is not lk for lk in out):
            out.append(path.link)
    return out


def _ends_early(stage: StagePrediction, pred: Prediction) -> str:
    """A clause for a stage whose sync after the flush ends at least 1 ms before the iteration does: other stages
    still run then, so that sync lengthens no step ('' where it ends the iteration)."""
    lead = pred.iteration_time_s - stage.end_s
    if lead < 1e-3:
        return ""
    last = max(pred.stages, key=lambda s: s.end_s)
    by = (f"stage {last.index} ends it" if last.end_s >= pred.iteration_time_s - 1e-9 else
          "the pipeline's last backward ends it")
    return f", but it ends {lead:.2f} s before the iteration does ({by}), so it lengthens no step"


def signed_pct(x: float, sign: str = "+") -> str:
    """A what-if's change as a percentage (signed unless sign=""): whole points, but one decimal from 0.05% to 1% (a
    0.4% gain read "+0%")."""
    return format(x, f"{sign}.1%" if 0.0005 <= abs(x) < 0.0095 else f"{sign}.0%")


def what_ifs(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, pred: Prediction, *,
             tied: list[float] | None = None, target: str = "megatron") -> list[WhatIf]:
    """Cost of each binding resource and the gain from improving it, re-evaluated by the cost model (`tied`: each
    stage's part of its sync that is the tied embedding's, tied_syncs, computed here unless the caller has it;
    `target`: the framework the plan was searched for; only Megatron-LM interleaves)."""
    base = pred.iteration_time_s
    out = []
    for lk in _pipeline_links(plan, fleet):
        free = evaluate(plan, _with_link(fleet, lk, gbps=1e9, latency_ms=0.0), model, train).iteration_time_s
        doubled = evaluate(plan, _with_link(fleet, lk, gbps=2 * lk.gbps, latency_ms=lk.latency_ms), model,
                           train).iteration_time_s
        share = (base - free) / base
        if share > SIGNIFICANT_SHARE:
            out.append(WhatIf(resource=f"link {lk.a} <-> {lk.b}", share_of_step=round(share, 4),
                              what_if="double its bandwidth", speedup=round(base / doubled - 1, 4),
                              text=f"the {lk.gbps:g} Gbit/s link between {lk.a} and {lk.b} costs {share:.0%} of step "
                                   f"time; doubling it gives {signed_pct(base / doubled - 1)}"))
    # the NICs carry the data-parallel reduction, not the tied embedding's all-reduce between the first and last
    # stage (a link what-if above prices that where it crosses one)
    tied = tied_syncs(plan, fleet, model, train) if tied is None else tied
    worst_dp = max(pred.stages, key=lambda s: s.dp_sync_s - tied[s.index])
    exposed = worst_dp.dp_sync_s - tied[worst_dp.index]
    if exposed > NIC_WHATIF_SHARE * base and _crosses_nodes(plan, fleet, worst_dp.index):
        ring = (f"; its {plan.config.cp}-rank CP ring crosses nodes too, so the NICs also carry K and V"
                if _crosses_nodes(plan, fleet, worst_dp.index, cp=True) else "")
        faster = evaluate(plan, _with_nics(fleet, worst_dp.node_group), model, train).iteration_time_s
        out.append(WhatIf(resource=f"NICs of {worst_dp.node_group}", share_of_step=round(exposed / base, 4),
                          what_if="double the NICs per node", speedup=round(base / faster - 1, 4),
                          text=f"gradient sync on {worst_dp.node_group} is exposed for {exposed / base:.0%} "
                               f"of step time{_ends_early(worst_dp, pred)}{ring}; twice the NICs per node gives "
                               f"{signed_pct(base / faster - 1)}"))
    elif _crosses_nodes(plan, fleet, pred.bottleneck_stage, cp=True):
        out += _cp_ring_what_if(plan, fleet, model, train, pred)
    if pred.bubble_fraction > BUBBLE_WHATIF and plan.config.pp > 1 and target == "megatron" \
            and train.runtime is Runtime.MEGATRON:  # DeepSpeed's pipeline engine has no interleaved schedule
        out += _interleaving(plan, fleet, model, train, pred)
    return out


def _crosses_nodes(plan: Plan, fleet: Fleet, stage: int, *, cp: bool = False) -> bool:
    """Whether the stage's data-parallel group (with `cp`, its CP ring) spans nodes, so that its reduction (its K and
    V) go over the NICs (inside a node they run over NVLink or PCIe, as the cost model prices them; 32 RTX 4090s at
    pp 8 and dp 4 were offered twice the NICs, "+0%")."""
    c = plan.stage_config(stage)
    return (c.cp if cp else c.dp * c.cp) > members_per_node(fleet.group(plan.stages[stage].node_group), c.tp)


def _cp_ring_what_if(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings,
                     pred: Prediction) -> list[WhatIf]:
    """The NICs' what-if of a plan whose bottleneck stage's CP ring crosses nodes (tp x cp above a node, since
    2026-11-29 in the search's space): what the ring's sends over the NICs cost (the NICs made free) and twice them."""
    key, base = pred.stages[pred.bottleneck_stage].node_group, pred.iteration_time_s
    free = evaluate(plan, _with_nics(fleet, key, 1024), model, train).iteration_time_s
    if (base - free) / base <= NIC_WHATIF_SHARE:
        return []
    faster = evaluate(plan, _with_nics(fleet, key), model, train).iteration_time_s
    return [WhatIf(resource=f"NICs of {key}", share_of_step=round((base - free) / base, 4),
                   what_if="double the NICs per node", speedup=round(base / faster - 1, 4),
                   text=f"the {plan.config.cp}-rank CP ring on {key} crosses nodes: its K and V over the NICs cost "
                        f"{(base - free) / base:.0%} of step time; twice the NICs per node gives "
                        f"{signed_pct(base / faster - 1)}")]


def _interleaving(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings,
                  pred: Prediction) -> list[WhatIf]:
    """The bubble's what-if: the plan with more virtual stages, up to MAX_WHATIF_VPP (each depth that divides every
    stage's layers and that the validator accepts), the fastest of them. Until 2026-11-29 only 2 was tried, and only
    on a plan without interleaving."""
    base, best = pred.iteration_time_s, None
    for v in range(plan.config.vpp + 1, MAX_WHATIF_VPP + 1):
        alt = replace(plan, config=replace(plan.config, vpp=v))
        # a plan the validator refuses is no what-if (an asymmetric plan runs on FlagScale, which refuses
        # interleaving: until 2026-11-29 its what-if priced --vpp 2 all the same)
        alt_pred = None if check_plan(alt, fleet, model, train) else evaluate(alt, fleet, model, train)
        if alt_pred is not None and alt_pred.fits and (best is None or alt_pred.iteration_time_s < best[1]):
            best = (v, alt_pred.iteration_time_s)
    if best is None:
        return []
    v, alt_s = best
    gain = base / alt_s - 1
    search = f" (search --max-vpp {v} searches such plans)" if v > DEFAULT_MAX_VPP else ""
    times = "twice" if v == 2 else f"{v} times"
    effect = (f"--vpp {v} cuts it and gives {signed_pct(gain)}{search}" if gain > 0 else
              f"no interleaving the stages' layers allow (up to {MAX_WHATIF_VPP} virtual stages) helps: --vpp {v}, "
              f"the least slow, would be {signed_pct(-gain, '')} slower; it sends each micro-batch through the "
              f"pipeline {times}, which costs more here than the bubble it removes")
    return [WhatIf(resource="pipeline bubble", share_of_step=round(pred.bubble_fraction, 4),
                   what_if=f"interleave {v} virtual stages (--vpp {v})", speedup=round(gain, 4),
                   text=f"the pipeline bubble is {pred.bubble_fraction:.0%} of the bottleneck stage's time; {effect}")]


def _memory_changes(plan: Plan) -> list[list[tuple[str, dict]]]:
    """Per setting that shrinks memory without changing the plan's GPUs or layers, its choices: (flag, config
    changes); the first choice of each keeps the plan's own."""
    c, keep = plan.config, [("", {})]
    out = []
    if c.zero_stage == 0 and c.dp > 1:
        out.append(keep + [("--distributed-optimizer", {"zero_stage": 1})])
    if c.tp > 1 and not c.sequence_parallel:
        out.append(keep + [("--sequence-parallel", {"sequence_parallel": True})])
    order = list(Recompute)  # none, selective, full: each recomputes more
    deeper = order[order.index(c.recompute) + 1:]
    if deeper:
        out.append(keep + [(f"--recompute {r.value}", {"recompute": r}) for r in deeper])
    if c.micro_batch_size > 1:
        out.append(keep + [("--mbs 1", {"micro_batch_size": 1})])
    return out


def memory_fix(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, pred: Prediction) -> str | None:
    """For a stock plan that does not fit: the fastest combination of the settings that shrink memory on the same
    GPUs and layers (optimizer sharding, sequence parallelism, recomputation, micro-batch 1) that makes every stage
    fit, re-evaluated by the cost model; or, when none does, the least memory they reach."""
    if pred.fits or plan.asymmetric:
        return None
    choices = _memory_changes(plan)
    best = closest = None
    for combo in product(*choices):
        flags = [f for f, _ in combo if f]
        if not flags:
            continue
        alt = replace(plan, config=replace(plan.config, **{k: v for _, ch in combo for k, v in ch.items()}))
        if check_plan(alt, fleet, model, train):
            continue
        alt_pred = evaluate(alt, fleet, model, train)
        fullest = max(alt_pred.stages, key=lambda st: st.memory_gib / st.memory_capacity_gib)
        ratio = fullest.memory_gib / fullest.memory_capacity_gib
        key = (alt_pred.iteration_time_s, len(flags))
        if alt_pred.fits and (best is None or key < best[0]):
            best = (key, flags, alt_pred, fullest)
        if closest is None or (ratio, len(flags)) < closest[0]:
            closest = ((ratio, len(flags)), flags, fullest)
    if best is not None:
        _, flags, alt_pred, fullest = best
        change = alt_pred.iteration_time_s / pred.iteration_time_s - 1
        return (f"to fit: {' '.join(flags)} (the fastest of these settings' combinations that fit): fullest stage "
                f"{fullest.index} at {fullest.memory_gib:.1f} of {fullest.memory_capacity_gib:g} GiB, "
                f"{alt_pred.iteration_time_s:.3f} s per iteration ({change:+.0%})")
    tried = ", ".join(" or ".join(f for f, _ in options[1:]) for options in choices)
    if closest is None:
        return "to fit: add pipeline stages (--pp) or GPUs; no setting on these GPUs shrinks memory further"
    _, flags, fullest = closest
    return (f"to fit: no combination of {tried} fits; the closest ({' '.join(flags)}) still needs "
            f"{fullest.memory_gib:.1f} GiB on stage {fullest.index} of {fullest.memory_capacity_gib:g}: add pipeline "
            "stages (--pp) or GPUs")


def fleet_upper_bound(fleet: Fleet, model: ModelArch, train: TrainingSettings) -> float:
    """HETHUB's yardstick: every GPU of the fleet busy at its achievable matmul rate, no communication or bubble."""
    from hgplan.costmodel.compute import compute_precision
    from hgplan.costmodel.flops import megatron_model_flops

    rate = sum(g.num_gpus * g.gpu.peak_tflops(compute_precision(train)) * 1e12 * g.gpu.eff.gemm_efficiency
               * g.gpu.eff.sustained_clock_fraction for g in fleet.groups if g.gpu.trains(train))
    per_token = megatron_model_flops(model, global_batch_size=1, seq_length=train.seq_length) / train.seq_length
    return rate / per_token


UPPER_BOUND_DEFINITION = ("all GPUs of the fleet at their achievable matmul rate on the model's FLOPs, no "
                          "communication, bubble or memory limit")


def _boundaries(pred: Prediction) -> list[BoundaryRecord]:
    return [BoundaryRecord(**{k: (rounded(v) if isinstance(v, float) else v) for k, v in b.items()})
            for b in pred.boundaries]


def explain(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *, cluster_ref: str,
            model_ref: str, timeline: bool = False,
            baselines: dict[str, BaselineRecord] | None = None, warnings: list[str] | None = None,
            validation: dict | None = None, target: str = "megatron") -> Explanation:
    """Predict a valid plan and say why: findings, what-ifs, the fleet's upper bound and the baselines' speedups
    (`target`: the framework a plan file was searched for)."""
    require_valid(plan, fleet, model, train)
    pred = evaluate(plan, fleet, model, train, keep_ops=timeline)
    tied = tied_syncs(plan, fleet, model, train)
    ifs = what_ifs(plan, fleet, model, train, pred, tied=tied, target=target)
    fix = memory_fix(plan, fleet, model, train, pred)
    notes = (findings(pred, fleet, tied) + ([fix] if fix else [])
             + mesh_findings(plan, pred) + attention_findings(plan, fleet, train) + [w.text for w in ifs])
    upper = fleet_upper_bound(fleet, model, train)
    notes.append(f"{pred.tokens_per_s / upper:.0%} of the fleet's upper bound "
                 f"({upper:,.0f} tokens/s with every GPU at its achievable matmul rate)")
    extra: dict = {}
    if baselines:
        kept = {name: ExplainBaseline(available=True, speedup=b.speedup, description=b.description)
                for name, b in baselines.items() if b.available and b.speedup is not None}
        extra["baselines"] = kept
        notes += [f"{speedup_text(b.speedup)} faster than {name} ({b.description})" for name, b in kept.items()]
    if warnings is not None:
        extra["warnings"] = warnings
    if validation is not None:
        from hgplan.basis import basis

        extra["basis"] = basis(plan, fleet, train, validation)
    report = ExplainReport(
        schema_version=SCHEMA_VERSION, hgplan_version=__version__,
        inputs=ExplainInputs(cluster=cluster_ref, model=model_ref, model_name=model.name,
                             training=training_record(train)),
        plan=plan_record(plan), prediction=prediction_record(pred), stages=stage_results(pred),
        boundaries=_boundaries(pred), findings=notes, what_if=ifs,
        upper_bound=UpperBound(tokens_per_s=upper, definition=UPPER_BOUND_DEFINITION,
                               share_reached=round(pred.tokens_per_s / upper, 4)), **extra)
    return Explanation(report=report, timeline=timeline_text(list(pred.ops), plan.config.pp) if timeline else None,
                       ops=pred.ops)
