"""Command-line shell: parse flags, resolve inputs (hgplan.io), call the library, print (hgplan.render).

Only this module and hgplan.io read files, write stdout or see the environment; the library never imports it.
Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time limit;
101 internal error (a bug in hgplan).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import traceback
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Callable

import typer
from rich.console import Console

from hgplan import __version__
from hgplan.domain import ExportFormat, Target
from hgplan.errors import InputError, NoAnswerError, PlanningError
from hgplan.plan import Recompute

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan LLM training on heterogeneous, geo-distributed GPU fleets.")
profiles_app = typer.Typer(no_args_is_help=True, help="List and show the shipped GPU, model and cluster catalog.")
app.add_typer(profiles_app, name="profiles")

# Piped into a file or a CI log, rich would cut tables at 80 columns; use a wide page there unless COLUMNS says
# otherwise.
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180)
err = Console(stderr=True, soft_wrap=True)


def warn(message: str, prefix: str = "warning") -> None:
    """One line on stderr, printed as is."""
    err.print(f"{prefix}: {message}" if prefix else message, markup=False, highlight=False)


def emit_json(obj: Any) -> None:
    """A JSON document on stdout (documents are dumped with their own key order)."""
    if hasattr(obj, "to_json_dict"):
        obj = obj.to_json_dict()
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def handles_errors(fn: Callable) -> Callable:
    """Map library errors to documented exit codes with a message on stderr, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            for issue in exc.issues:
                warn(issue.render(), "error")
            raise typer.Exit(2) from None
        except PlanningError as exc:
            warn(str(exc), "finding")
            raise typer.Exit(1) from None
        except NoAnswerError as exc:
            warn(str(exc), "no answer")
            raise typer.Exit(3) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"hgplan {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """hgplan: plan, explain and export LLM training on heterogeneous GPU fleets."""


JsonOpt = Annotated[bool, typer.Option("--json", help="Write JSON to stdout instead of a table.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model preset name or model YAML file.")]


# ---------------------------------------------------------------------------- shared training options

@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingFlags:
    """The training-setting flags `search` and `explain` share (None: not given)."""

    seq_len: int | None = None
    global_batch: int | None = None
    precision: str | None = None
    training: str | None = None
    attention: str | None = None
    runtime: str | None = None

    def given(self) -> list[str]:
        """The flags the user gave, as spelled on the command line."""
        names = {"seq_len": "--seq-len", "global_batch": "--global-batch", "training": "--training"}
        return [flag for name, flag in names.items() if getattr(self, name) is not None]

    def settings(self, model):
        """TrainingSettings from the training file (if any) overridden by the flags; InputError when invalid."""
        from hgplan.inputs import load_training, make_training
        from hgplan.io import read_text

        values: dict[str, Any] = {}
        if self.training:
            values.update(load_training(read_text(self.training, "training"), self.training))
        for key, val in (("seq_length", self.seq_len), ("global_batch_size", self.global_batch),
                         ("precision", self.precision), ("attention", self.attention), ("runtime", self.runtime)):
            if val is not None:
                values[key] = val
        return make_training(values, model)


_TRAINING_OPTIONS: dict[str, Any] = {
    "seq_len": Annotated[int | None, typer.Option("--seq-len", help="Sequence length (tokens).")],
    "global_batch": Annotated[int | None, typer.Option("--global-batch",
                                                       help="Global batch size (sequences per iteration).")],
    "precision": Annotated[str | None, typer.Option("--precision", help="bf16 (default) or fp16.")],
    "training": Annotated[str | None, typer.Option("--training", help="Training settings YAML (flags override it).")],
    "attention": Annotated[str | None, typer.Option("--attention", help="flash (default) or unfused.")],
    "runtime": Annotated[str | None, typer.Option("--runtime", help="megatron (default), deepspeed or fsdp.")],
}


def training_options(*, runtime: bool) -> Callable[[Callable], Callable]:
    """Add the training-setting flags to a command and hand them over as one `flags: TrainingFlags` argument
    (sqlite-utils' output_options pattern): one definition, one help text, for every command that takes them."""
    names = [n for n in _TRAINING_OPTIONS if runtime or n != "runtime"]

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        kept = [p for p in sig.parameters.values() if p.name != "flags"]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_TRAINING_OPTIONS[n])
                 for n in names]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags = TrainingFlags(**{n: kwargs.pop(n) for n in names})
            return fn(*args, flags=flags, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=kept + added)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {**{p.name: p.annotation for p in kept}, **{n: _TRAINING_OPTIONS[n] for n in names},
                                   "return": sig.return_annotation}
        return wrapper

    return decorate


# ---------------------------------------------------------------------------- validate, profiles, schema

@app.command()
@handles_errors
def validate(
    cluster: Annotated[str, typer.Argument(help="Cluster YAML file, or the name of a shipped example fleet.")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a cluster file (and optionally a model): report every error in one pass, or summarise the fleet."""
    from hgplan import render
    from hgplan.io import resolve_cluster, resolve_model
    from hgplan.summary import fleet_summary

    issues: list = []
    fleet = warnings = arch = None
    try:
        fleet, warnings, _ = resolve_cluster(cluster)
    except InputError as exc:
        issues.extend(exc.issues)
    if model is not None:
        try:
            arch, _ = resolve_model(model)
        except InputError as exc:
            issues.extend(exc.issues)
    if issues:
        raise InputError(issues)
    summary = fleet_summary(fleet, warnings, arch)
    for w in warnings:
        warn(w)
    if as_json:
        emit_json(summary)
    else:
        render.validate_summary(out, summary)


class ProfileKind(StrEnum):
    """The shipped catalog's sections."""

    gpus = "gpus"
    models = "models"
    clusters = "clusters"


@profiles_app.command("list")
@handles_errors
def profiles_list(kind: Annotated[ProfileKind, typer.Argument(help="gpus, models or clusters.")],
                  as_json: JsonOpt = False) -> None:
    """List the shipped GPUs, model presets or example fleets."""
    from hgplan import render
    from hgplan.inputs import load_cluster, load_model
    from hgplan.io import catalog
    from hgplan.summary import cluster_row, gpu_row, model_row

    cat = catalog()
    if kind is ProfileKind.gpus:
        rows = [gpu_row(g) for g in cat.gpus.values()]
    elif kind is ProfileKind.models:
        rows = [model_row(name, load_model(text, f"<preset:{name}>")) for name, text in cat.model_texts.items()]
    else:
        rows = [cluster_row(name, load_cluster(text, f"<example:{name}>", cat)[0])
                for name, text in cat.cluster_texts.items()]
    if as_json:
        emit_json(rows)
    else:
        render.rows_table(out, rows)


@profiles_app.command("show")
@handles_errors
def profiles_show(kind: Annotated[ProfileKind, typer.Argument(help="gpus, models or clusters.")],
                  name: Annotated[str, typer.Argument(help="GPU id, preset name or example fleet name.")],
                  as_json: JsonOpt = False) -> None:
    """Show one catalog entry (the YAML as shipped; --json gives it parsed)."""
    import yaml

    from hgplan.io import catalog

    cat = catalog()
    if kind is ProfileKind.gpus:
        text_of = {k: yaml.safe_dump(v.model_dump(mode="json"), sort_keys=False) for k, v in cat.gpus.items()}
    elif kind is ProfileKind.models:
        text_of = cat.model_texts
    else:
        text_of = cat.cluster_texts
    if name not in text_of:
        raise InputError(f"unknown {kind.value[:-1]} '{name}'; known: {', '.join(text_of)}")
    if as_json:
        emit_json(yaml.safe_load(text_of[name]))
    else:
        sys.stdout.write(text_of[name])


class SchemaKind(StrEnum):
    """Documents with a JSON Schema: the three inputs, the plan file and the --json outputs."""

    cluster = "cluster"
    model = "model"
    training = "training"
    plan = "plan"
    search = "search"
    explain = "explain"
    export = "export"


@app.command()
@handles_errors
def schema(kind: Annotated[SchemaKind, typer.Argument(help="cluster, model, training (inputs), plan (plan files), "
                                                           "or search, explain, export (their --json output).")]) -> None:
    """Print the JSON Schema of an input document, a plan file or a command's --json output."""
    from hgplan import documents
    from hgplan import schema as s

    if kind.value in documents.SCHEMAS:
        emit_json(documents.json_schema(kind.value))
        return
    cls = {SchemaKind.cluster: s.ClusterSpec, SchemaKind.model: s.ModelSpec, SchemaKind.training: s.TrainingSpec}[kind]
    doc = cls.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["$id"] = f"https://hgplan.dev/schema/{kind.value}.json"
    emit_json(doc)


# ---------------------------------------------------------------------------- explain

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
        raise InputError(f"--stage-groups: the fleet has {len(keys)} node groups; name the group of each stage, "
                         f"e.g. --stage-groups {','.join([keys[0]] * pp)} (choices: {', '.join(keys)})")
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


def _explain_plan_file(plan_file: str, cfg: ConfigFlags, cluster: str | None, model: str | None,
                       flags: TrainingFlags, simulate: bool, timeline: bool):
    from hgplan import explainer
    from hgplan.io import catalog, read_json
    from hgplan.planfile import load_plan

    given = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", cfg.tp), ("--pp", cfg.pp),
                            ("--dp", cfg.dp), ("--layers", cfg.layers), ("--stage-groups", cfg.stage_groups))
             if v is not None] + flags.given()
    if given:
        raise InputError(f"a plan file carries its own configuration; drop {', '.join(given)} or the plan file")
    lp = load_plan(read_json(plan_file, "plan"), plan_file, catalog())
    return explainer.explain(lp.plan, lp.fleet, lp.model, lp.train, cluster_ref=lp.file.inputs.cluster.ref,
                             model_ref=lp.file.inputs.model.ref, simulate=simulate, timeline=timeline,
                             baselines=lp.file.baselines)


def _explain_config(cfg: ConfigFlags, cluster: str | None, model: str | None, flags: TrainingFlags, simulate: bool,
                    timeline: bool):
    from hgplan import explainer
    from hgplan.io import resolve_cluster, resolve_model

    missing = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", cfg.tp), ("--pp", cfg.pp),
                              ("--dp", cfg.dp)) if v is None]
    if missing:
        raise InputError(f"explain needs a plan file or {', '.join(missing)} (see `hgplan explain --help`)")
    if cfg.distributed_optimizer and cfg.zero_stage is not None and cfg.zero_stage != 1:
        raise InputError(f"--distributed-optimizer is ZeRO stage 1 but --zero-stage {cfg.zero_stage} was given; keep one")
    zs = cfg.zero_stage if cfg.zero_stage is not None else (1 if cfg.distributed_optimizer else 0)
    fleet, warnings, csrc = resolve_cluster(cluster)
    arch, msrc = resolve_model(model)
    train = flags.settings(arch)
    plan = explainer.build_plan(
        fleet=fleet, model=arch, tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, cp=cfg.cp, mbs=cfg.mbs, vpp=cfg.vpp,
        recompute=cfg.recompute.value, sequence_parallel=cfg.sequence_parallel, zero_stage=zs,
        overlap_grad_reduce=not cfg.no_overlap_grad_reduce, allow_cross_node_tp=cfg.allow_cross_node_tp,
        layers=_parse_layers(cfg.layers, cfg.pp), stage_groups=_parse_stage_groups(cfg.stage_groups, cfg.pp, fleet))
    for w in warnings:
        warn(w)
    return explainer.explain(plan, fleet, arch, train, cluster_ref=csrc.ref, model_ref=msrc.ref, simulate=simulate,
                             timeline=timeline, warnings=warnings)


@app.command()
@handles_errors
@training_options(runtime=True)
def explain(
    plan_file: Annotated[str | None, typer.Argument(help="A plan file written by `hgplan search -o` (optional).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline stages.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel degree.")] = None,
    cp: Annotated[int, typer.Option("--cp", help="Context-parallel degree.")] = 1,
    mbs: Annotated[int, typer.Option("--mbs", help="Micro-batch size.")] = 1,
    vpp: Annotated[int, typer.Option("--vpp", help="Virtual stages per pipeline rank (interleaved 1F1B).")] = 1,
    recompute: Annotated[Recompute, typer.Option("--recompute", help="Activation recomputation.")] = Recompute.NONE,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism.")] = False,
    distributed_optimizer: Annotated[bool, typer.Option("--distributed-optimizer",
                                                        help="Shard optimizer state (ZeRO-1).")] = False,
    zero_stage: Annotated[int | None, typer.Option("--zero-stage", help="ZeRO stage 0-3.")] = None,
    no_overlap_grad_reduce: Annotated[bool, typer.Option("--no-overlap-grad-reduce",
                                                         help="Do not overlap the DP reduction with backward.")] = False,
    allow_cross_node_tp: Annotated[bool, typer.Option("--allow-cross-node-tp",
                                                      help="Permit TP across nodes (costed on NICs).")] = False,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers per stage, e.g. 10,9,9,8.")] = None,
    stage_groups: Annotated[str | None, typer.Option("--stage-groups",
                                                     help="Node group of each stage, SITE/GROUP,...")] = None,
    simulate: Annotated[bool, typer.Option("--simulate/--no-simulate", help="Also run the pipeline simulator.")] = True,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw one iteration as a text Gantt chart.")] = False,
    as_json: JsonOpt = False,
    *, flags: TrainingFlags,
) -> None:
    """Predict a configuration you run today (or a plan file): throughput, MFU, per-stage time and memory."""
    from hgplan import render

    cfg = ConfigFlags(tp=tp, pp=pp, dp=dp, cp=cp, mbs=mbs, vpp=vpp, recompute=recompute,
                      sequence_parallel=sequence_parallel, distributed_optimizer=distributed_optimizer,
                      zero_stage=zero_stage, no_overlap_grad_reduce=no_overlap_grad_reduce,
                      allow_cross_node_tp=allow_cross_node_tp, layers=layers, stage_groups=stage_groups)
    if plan_file is not None:
        result = _explain_plan_file(plan_file, cfg, cluster, model, flags, simulate, timeline)
    else:
        result = _explain_config(cfg, cluster, model, flags, simulate, timeline)
    if as_json:
        emit_json(result.report)
    else:
        render.explanation(out, result.report, result.timeline)


# ---------------------------------------------------------------------------- search

def _parse_percent(text: str, flag: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{flag}: expected a fraction or a percentage such as 0.5% (got {text!r})") from None
    if not 0 <= value < 1:
        raise InputError(f"{flag}: must be between 0 and 100% (got {text!r})")
    return value


def _check_search_flags(top: int, time_limit: float, max_pp: int | None, solver_params: str | None) -> None:
    if top < 1:
        raise InputError(f"--top must be >= 1 (got {top})")
    if time_limit <= 0:
        raise InputError(f"--time-limit must be > 0 seconds (got {time_limit})")
    if max_pp is not None and max_pp < 1:
        raise InputError(f"--max-pp must be >= 1 (got {max_pp})")
    if solver_params:
        from hgplan.planner.model import extra_params_error

        problem = extra_params_error(solver_params)
        if problem:
            raise InputError(f"--solver-params {solver_params!r}: {problem}")


def _run_with_progress(fn: Callable, solver_log: bool):
    if not err.is_terminal or solver_log:
        return fn(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("searching"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("search", total=None)

        def cb(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return fn(cb)


@app.command()
@handles_errors
@training_options(runtime=False)
def search(
    cluster: ClusterOpt, model: ModelOpt,
    target: Annotated[Target, typer.Option("--target", help="Framework the plan must run on.")] = Target.MEGATRON,
    top: Annotated[int, typer.Option("--top", help="How many ranked plans to show.")] = 5,
    time_limit: Annotated[float, typer.Option("--time-limit", help="Search time limit in seconds: a reproducible budget "
                                                                   "of 0.6 x this in CP-SAT deterministic time, and a hard "
                                                                   "wall-clock stop at this.")] = 60.0,
    max_gap: Annotated[str, typer.Option("--max-gap", help="Stop when the best plan is proven within this gap.")] = "0.5%",
    max_pp: Annotated[int | None, typer.Option("--max-pp", help="Largest number of pipeline stages to consider.")] = None,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Evaluate the three baselines.")] = True,
    solver_log: Annotated[bool, typer.Option("--solver-log", help="CP-SAT progress to stderr.")] = False,
    solver_params: Annotated[str | None, typer.Option("--solver-params", help="Extra CP-SAT parameters in text "
                                                      "format, e.g. 'linearization_level: 2' (recorded in the JSON; "
                                                      "num_workers > 1 makes runs non-reproducible).")] = None,
    export_model: Annotated[str | None, typer.Option("--export-model", help="Write the last CP-SAT model solved "
                                                                            "(text CpModelProto) to this file.")] = None,
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the best plan as a plan file.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="A committed plan file to gate against (CI).")] = None,
    max_regression: Annotated[str, typer.Option("--max-regression", help="With --baseline: exit 1 when the best plan "
                                                                        "is predicted slower by more than this.")] = "3%",
    as_json: JsonOpt = False,
    *, flags: TrainingFlags,
) -> None:
    """Find the fastest plan stock Megatron-LM/DeepSpeed can run on the fleet, with a proven optimality gap."""
    from hgplan import render
    from hgplan.documents import ClusterInput
    from hgplan.io import catalog, check_writable_file, read_json, resolve_cluster, resolve_model, write_file_atomic
    from hgplan.planfile import make_plan_file, parse_plan_file, regression_check
    from hgplan.planner.api import plan_training
    from hgplan.planner.options import SearchOptions

    _check_search_flags(top, time_limit, max_pp, solver_params)
    gap, bound = _parse_percent(max_gap, "--max-gap"), _parse_percent(max_regression, "--max-regression")
    for path in (output, export_model):
        if path is not None:
            check_writable_file(path)
    base_file = None
    if baseline is not None:
        from hgplan.planfile import load_plan

        base_file = load_plan(read_json(baseline, "baseline plan"), baseline, catalog()).file
    fleet, warnings, csrc = resolve_cluster(cluster)
    arch, msrc = resolve_model(model)
    # Megatron-DeepSpeed runs Megatron's model code: both targets are costed with the Megatron runtime; the target
    # only narrows the plan family (no interleaving, ZeRO <= 1 with pipeline parallelism).
    train = flags.settings(arch)
    opts = SearchOptions(target=target.value, top_k=top, budget_s=time_limit, max_gap=gap, max_pp=max_pp,
                         solver_log=solver_log, solver_params=solver_params or "", keep_model=export_model is not None)
    report, result = _run_with_progress(lambda cb: plan_training(
        fleet, arch, train, opts, cluster=ClusterInput(ref=csrc.ref, sha256=csrc.sha256), model_ref=msrc.ref,
        progress=cb, log=lambda line: warn(line, ""), with_baselines=baselines), solver_log)
    report.warnings[:0] = warnings
    for w in report.warnings:
        warn(w)
    if output:
        pf = make_plan_file(report, cluster_text=csrc.text, model_text=msrc.text, model_sha256=msrc.sha256)
        write_file_atomic(output, json.dumps(pf.to_json_dict(), indent=2) + "\n")
        warn(f"wrote {output}", "")
    if export_model and result.last_model_text:
        write_file_atomic(export_model, result.last_model_text)
        warn(f"wrote the last CP-SAT model to {export_model}", "")
    if base_file is not None:
        report.regression = regression_check(base_file, report, bound)
    if as_json:
        emit_json(report)
    else:
        render.search_report(out, report)
    if report.regression is not None:
        warn(report.regression.message, "")
        if report.regression.failed:
            raise typer.Exit(1)


# ---------------------------------------------------------------------------- export, diff

@app.command()
@handles_errors
def export(
    plan_file: Annotated[str, typer.Argument(help="Plan file written by `hgplan search -o`.")],
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="Launch target.")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Directory to write the launch files into "
                                                                    "(must be new or empty).")] = None,
    script: Annotated[str | None, typer.Option("--script", help="Training script (default pretrain_gpt.py; "
                                                                "train.py for torchrun).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write launch arguments, per-node scripts and NCCL settings for Megatron-LM, DeepSpeed or torchrun."""
    from hgplan import render
    from hgplan.export import EXPORTERS
    from hgplan.io import catalog, read_json, write_dir_atomic
    from hgplan.planfile import load_plan

    lp = load_plan(read_json(plan_file, "plan"), plan_file, catalog())
    ex = EXPORTERS[fmt](lp.plan, lp.fleet, lp.model, lp.train, **({"script": script} if script else {}))
    if output is not None:
        write_dir_atomic(output, ex.files)
        warn(f"wrote {len(ex.files)} files to {output}", "")
    for w in ex.warnings:
        warn(w)
    if as_json:
        emit_json(ex.report())
    else:
        render.export_summary(out, ex, written=output is not None)


@app.command()
@handles_errors
def diff(a: Annotated[str, typer.Argument(help="Plan file A (e.g. the committed plan.lock.json).")],
         b: Annotated[str, typer.Argument(help="Plan file B (e.g. a fresh plan).")],
         as_json: JsonOpt = False) -> None:
    """Show what changed between two plan files: degrees, stages, layers and predicted throughput."""
    from hgplan import render
    from hgplan.io import catalog, read_json
    from hgplan.planfile import diff_plans, load_plan

    files = [load_plan(read_json(path, "plan"), path, catalog()).file for path in (a, b)]
    d = diff_plans(files[0], files[1], a, b)
    if as_json:
        emit_json(d)
    else:
        render.plan_diff(out, d)


def main() -> None:
    """Console entry point; turns unexpected exceptions into exit 101 with a bug-report hint."""
    try:
        app()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001 - last-resort guard; user errors never get here
        err.print("internal error in hgplan (please report it with the input files):", markup=False)
        err.print(traceback.format_exc(), markup=False, highlight=False)
        sys.exit(101)
