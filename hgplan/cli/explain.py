"""explain: a plan file or a hand-given configuration, predicted and explained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, handles_errors, out, warn
from hgplan.cli.options import TrainingFlags, training_options
from hgplan.errors import InputError
from hgplan.plan import Recompute

def _parse_layers(text: str | None, pp: int) -> list[int] | None:
    if text is None:
        return None
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"--layers: expected comma-separated integers such as 10,9,9,8 (got {text!r})") from None
    if len(layers) != pp:
        raise InputError(f"--layers lists {len(layers)} stages but --pp is {pp}; give one count per stage")
    return layers


def _parse_stage_groups(text: str | None, pp: int, fleet) -> list[str]:
    keys = [g.key for g in fleet.groups]
    if text is None:
        if len(keys) == 1:
            return keys * pp
        split = [keys[0]] * (pp - pp // 2) + [keys[1]] * (pp // 2)
        per_stage = "" if pp == 1 else f", or one per stage in pipeline order ({pp} names)" if pp > 8 else \
            f", or one per stage in pipeline order, e.g. --stage-groups {','.join(split)}"
        raise InputError(f"--stage-groups: the fleet has {len(keys)} node groups; name where the stages run: one group "
                         f"for all, e.g. --stage-groups {keys[0]}{per_stage} (choices: {', '.join(keys)})")
    refs = [r.strip() for r in text.split(",")]
    if len(refs) == 1:
        refs = refs * pp
    if len(refs) != pp:
        raise InputError(f"--stage-groups lists {len(refs)} groups but --pp is {pp}; give one per stage (or one for all)")
    found = []
    for r in refs:
        g = fleet.find_group(r)
        if g is None:
            raise InputError(f"--stage-groups: unknown node group '{r}'; choices: {', '.join(keys)}")
        found.append(g.key)
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigFlags:
    """explain's hand-given configuration."""

    tp: int | None
    pp: int | None
    dp: int | None
    cp: int
    mbs: int
    vpp: int
    recompute: Recompute
    sequence_parallel: bool
    distributed_optimizer: bool
    zero_stage: int | None
    no_overlap_grad_reduce: bool
    allow_cross_node_tp: bool
    layers: str | None
    stage_groups: str | None
    profile: str | None = None


def _explain_plan_file(plan_file: str, cfg: ConfigFlags, cluster: str | None, model: str | None,
                       flags: TrainingFlags, timeline: bool):
    from hgplan import explainer
    from hgplan.io import catalog, read_json
    from hgplan.planfile import load_plan

    given = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", cfg.tp), ("--pp", cfg.pp),
                            ("--dp", cfg.dp), ("--layers", cfg.layers), ("--stage-groups", cfg.stage_groups),
                            ("--profile", cfg.profile))
             if v is not None] + flags.given()
    if given:
        raise InputError(f"a plan file carries its own configuration; drop {', '.join(given)} or the plan file")
    lp = load_plan(read_json(plan_file, "plan"), plan_file, catalog())
    return explainer.explain(lp.plan, lp.fleet, lp.model, lp.train, cluster_ref=lp.file.inputs.cluster.ref,
                             model_ref=lp.file.inputs.model.ref, timeline=timeline,
                             baselines=lp.file.baselines, validation=catalog().validation,
                             target=lp.file.inputs.target)


def _explain_config(cfg: ConfigFlags, cluster: str | None, model: str | None, flags: TrainingFlags, timeline: bool):
    from hgplan import explainer
    from hgplan.io import catalog, resolve_cluster, resolve_model, resolve_profile

    missing = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", cfg.tp), ("--pp", cfg.pp),
                              ("--dp", cfg.dp)) if v is None]
    if missing:
        raise InputError(f"explain needs a plan file or {', '.join(missing)} (see `hgplan explain --help`)")
    if cfg.distributed_optimizer and cfg.zero_stage is not None and cfg.zero_stage != 1:
        raise InputError(f"--distributed-optimizer is ZeRO stage 1 but --zero-stage {cfg.zero_stage} was given; keep one")
    zs = cfg.zero_stage if cfg.zero_stage is not None else (1 if cfg.distributed_optimizer else 0)
    fleet, warnings, csrc = resolve_cluster(cluster, resolve_profile(cfg.profile)[0])
    arch, msrc = resolve_model(model)
    train = flags.settings(arch, fleet)
    plan = explainer.build_plan(
        fleet=fleet, model=arch, tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, cp=cfg.cp, mbs=cfg.mbs, vpp=cfg.vpp,
        recompute=cfg.recompute.value, sequence_parallel=cfg.sequence_parallel, zero_stage=zs,
        overlap_grad_reduce=not cfg.no_overlap_grad_reduce, allow_cross_node_tp=cfg.allow_cross_node_tp,
        layers=_parse_layers(cfg.layers, cfg.pp), stage_groups=_parse_stage_groups(cfg.stage_groups, cfg.pp, fleet))
    for w in warnings:
        warn(w)
    return explainer.explain(plan, fleet, arch, train, cluster_ref=csrc.ref, model_ref=msrc.ref, timeline=timeline,
                             warnings=warnings, validation=catalog().validation)


@app.command()
@handles_errors
@training_options(runtime=True)
def explain(
    plan_file: Annotated[str | None, typer.Argument(help="A plan file written by `hgplan search -o` (optional).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    tp: Annotated[int | None, typer.Option("--tp", "--tensor-model-parallel-size",
                                           help="Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option("--pp", "--pipeline-model-parallel-size", help="Pipeline stages.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel degree.")] = None,
    cp: Annotated[int, typer.Option("--cp", "--context-parallel-size", help="Context-parallel degree.")] = 1,
    mbs: Annotated[int, typer.Option("--mbs", "--micro-batch-size", help="Micro-batch size.")] = 1,
    vpp: Annotated[int, typer.Option("--vpp", "--num-virtual-stages-per-pipeline-rank",
                                           help="Virtual stages per pipeline rank (interleaved 1F1B).")] = 1,
    recompute: Annotated[Recompute, typer.Option("--recompute", "--recompute-granularity",
                                                           help="Activation recomputation.")] = Recompute.NONE,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism.")] = False,
    distributed_optimizer: Annotated[bool, typer.Option("--distributed-optimizer", "--use-distributed-optimizer",
                                                        help="Shard optimizer state (ZeRO-1).")] = False,
    zero_stage: Annotated[int | None, typer.Option("--zero-stage", help="ZeRO stage 0-3.")] = None,
    no_overlap_grad_reduce: Annotated[bool, typer.Option("--no-overlap-grad-reduce",
                                                         help="Do not overlap the DP reduction with backward.")] = False,
    allow_cross_node_tp: Annotated[bool, typer.Option("--allow-cross-node-tp",
                                                      help="Permit TP across nodes (costed on NICs).")] = False,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers per stage, e.g. 10,9,9,8.")] = None,
    stage_groups: Annotated[str | None, typer.Option("--stage-groups",
                                                     help="Node group of each stage, SITE/GROUP,...")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Calibration profile from `hgplan calibrate` "
                                                                  "(a plan file carries its own).")] = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw one iteration as a text Gantt chart.")] = False,
    as_json: JsonOpt = False,
    *, flags: TrainingFlags,
) -> None:
    """Predict a configuration you run today (or a plan file): throughput, MFU, per-stage time and memory."""
    from hgplan import render

    cfg = ConfigFlags(tp=tp, pp=pp, dp=dp, cp=cp, mbs=mbs, vpp=vpp, recompute=recompute,
                      sequence_parallel=sequence_parallel, distributed_optimizer=distributed_optimizer,
                      zero_stage=zero_stage, no_overlap_grad_reduce=no_overlap_grad_reduce,
                      allow_cross_node_tp=allow_cross_node_tp, layers=layers, stage_groups=stage_groups,
                      profile=profile)
    if plan_file is not None:
        result = _explain_plan_file(plan_file, cfg, cluster, model, flags, timeline)
    else:
        result = _explain_config(cfg, cluster, model, flags, timeline)
    if as_json:
        emit_json(result.report)
    else:
        render.explanation(out, result.report, result.timeline)
    p = result.report.prediction
    if not p.fits:  # explained in full (the findings say where memory goes), but not achievable: exit 1 (README)
        warn(f"stage(s) {', '.join(map(str, p.overflow_stages))} exceed GPU memory: the plan does not fit, so its "
             "throughput and MFU are not achievable", "finding")
        raise typer.Exit(1)
