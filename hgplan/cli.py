"""Command-line shell. Only this module (and hgplan.io) reads files, writes stdout or sees the environment.

Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time
limit; 101 internal error (a bug in hgplan).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from enum import StrEnum
from typing import Annotated, Any, Callable

import typer
from rich.console import Console
from rich.table import Table

from hgplan import __version__
from hgplan.errors import InputError, InputIssue, NoAnswerError, PlanningError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan LLM training on heterogeneous, geo-distributed GPU fleets.")
profiles_app = typer.Typer(no_args_is_help=True, help="List and show the shipped GPU, model and cluster catalog.")
app.add_typer(profiles_app, name="profiles")

# Piped into a file or a CI log, rich would cut tables at 80 columns; use a wide page there unless COLUMNS says
# otherwise.
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180)
err = Console(stderr=True, soft_wrap=True)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def handles_errors(fn: Callable) -> Callable:
    """Map library errors to documented exit codes with a message on stderr, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            for issue in exc.issues:
                err.print(f"error: {issue.render()}", markup=False, highlight=False)
            raise typer.Exit(2) from None
        except PlanningError as exc:
            err.print(f"finding: {exc}", markup=False, highlight=False)
            raise typer.Exit(1) from None
        except NoAnswerError as exc:
            err.print(f"no answer: {exc}", markup=False, highlight=False)
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


# ---------------------------------------------------------------------------- validate

@app.command()
@handles_errors
def validate(
    cluster: Annotated[str, typer.Argument(help="Cluster YAML file, or the name of a shipped example fleet.")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a cluster file (and optionally a model): report every error in one pass, or summarise the fleet."""
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
        err.print(f"warning: {w}", markup=False, highlight=False)
    if as_json:
        emit_json(summary)
        return
    out.print(f"[bold]{summary['name']}[/]: {summary['num_gpus']} GPUs in {summary['num_nodes']} nodes, "
              f"{len(summary['sites'])} site(s); peak {summary['peak_pflops']:g} PFLOP/s "
              f"({summary['common_precision']}), {summary['hbm_tib']:g} TiB HBM")
    table = Table("node group", "nodes", "GPU", "GPUs", "intra-node", "NICs per node", "PFLOP/s", "HBM TiB")
    for g in summary["node_groups"]:
        table.add_row(g["key"], str(g["nodes"]), g["gpu"], str(g["gpus"]), g["intra_node"], g["nics"],
                      f"{g['peak_pflops']:g}", f"{g['hbm_tib']:g}")
    out.print(table)
    if summary["links"]:
        lt = Table("link", "between", "Gbit/s", "latency ms", "transport")
        for lk in summary["links"]:
            lt.add_row(lk["scope"], " <-> ".join(lk["between"]), f"{lk['gbps']:g}", f"{lk['latency_ms']:g}", lk["transport"])
        out.print(lt)
    if "model" in summary:
        out.print(f"model {summary['model']['name']}: {summary['model']['params_b']:g} B parameters")


# ---------------------------------------------------------------------------- profiles

class ProfileKind(StrEnum):
    gpus = "gpus"
    models = "models"
    clusters = "clusters"


@profiles_app.command("list")
@handles_errors
def profiles_list(kind: Annotated[ProfileKind, typer.Argument(help="gpus, models or clusters.")],
                  as_json: JsonOpt = False) -> None:
    """List the shipped GPUs, model presets or example fleets."""
    from hgplan.io import catalog
    from hgplan.inputs import load_cluster, load_model

    cat = catalog()
    rows: list[dict[str, Any]]
    if kind is ProfileKind.gpus:
        rows = [{"id": g.id, "vendor": g.vendor, "arch": g.arch, "bf16_tflops": g.bf16_tflops, "fp16_tflops": g.fp16_tflops,
                 "hbm_gib": g.hbm_gib, "hbm_gbytes_per_s": g.hbm_gbytes_per_s,
                 "intra_node": f"{g.intra_node.kind} {g.intra_node.gbytes_per_s:g} GB/s"} for g in cat.gpus.values()]
    elif kind is ProfileKind.models:
        rows = []
        for name, text in cat.model_texts.items():
            m = load_model(text, f"<preset:{name}>")
            rows.append({"name": name, "params_b": round(m.num_params() / 1e9, 3), "num_layers": m.num_layers,
                         "hidden_size": m.hidden_size, "heads": m.num_attention_heads, "query_groups": m.num_query_groups,
                         "vocab_size": m.vocab_size, "source": m.source})
    else:
        rows = []
        for name, text in cat.cluster_texts.items():
            fleet, _ = load_cluster(text, f"<example:{name}>", cat)
            types = sorted({g.gpu.id for g in fleet.groups})
            rows.append({"name": name, "gpus": fleet.num_gpus, "sites": len(fleet.sites), "gpu_types": types})
    if as_json:
        emit_json(rows)
        return
    table = Table(*rows[0].keys()) if rows else Table()
    for r in rows:
        table.add_row(*(", ".join(v) if isinstance(v, list) else ("-" if v is None else str(v)) for v in r.values()))
    out.print(table)


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
        table = {k: v.model_dump(mode="json") for k, v in cat.gpus.items()}
        text_of = {k: yaml.safe_dump(v, sort_keys=False) for k, v in table.items()}
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


# ---------------------------------------------------------------------------- schema

class SchemaKind(StrEnum):
    cluster = "cluster"
    model = "model"
    training = "training"
    plan = "plan"


@app.command()
@handles_errors
def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which document: cluster, model, training or plan.")]) -> None:
    """Print the JSON Schema of an input document (for editor validation)."""
    from hgplan import schema as s

    if kind is SchemaKind.plan:
        from hgplan.planfile import plan_json_schema

        emit_json(plan_json_schema())
        return
    cls = {SchemaKind.cluster: s.ClusterSpec, SchemaKind.model: s.ModelSpec, SchemaKind.training: s.TrainingSpec}[kind]
    doc = cls.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["$id"] = f"https://hgplan.dev/schema/{kind.value}.json"
    emit_json(doc)


# ---------------------------------------------------------------------------- shared planning options

def training_settings(model, *, training_file: str | None, seq_len: int | None, global_batch: int | None,
                      precision: str | None, attention: str | None, runtime: str | None):
    from hgplan.inputs import load_training, make_training
    from hgplan.io import read_text

    values: dict[str, Any] = {}
    if training_file:
        values.update(load_training(read_text(training_file, "training"), training_file))
    for key, val in (("seq_length", seq_len), ("global_batch_size", global_batch), ("precision", precision),
                     ("attention", attention), ("runtime", runtime)):
        if val is not None:
            values[key] = val
    return make_training(values, model)


class RecomputeOpt(StrEnum):
    none = "none"
    selective = "selective"
    full = "full"


ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model preset name or model YAML file.")]
SeqOpt = Annotated[int | None, typer.Option("--seq-len", help="Sequence length (tokens).")]
GbsOpt = Annotated[int | None, typer.Option("--global-batch", help="Global batch size (sequences per iteration).")]
PrecisionOpt = Annotated[str | None, typer.Option("--precision", help="bf16 (default) or fp16.")]
TrainingOpt = Annotated[str | None, typer.Option("--training", help="Training settings YAML (flags override it).")]
AttentionOpt = Annotated[str | None, typer.Option("--attention", help="flash (default) or unfused.")]
RuntimeOpt = Annotated[str | None, typer.Option("--runtime", help="megatron (default), deepspeed or fsdp.")]


def _parse_layers(text: str | None, pp: int, num_layers: int) -> list[int]:
    if text is None:
        if num_layers % pp:
            raise InputError(f"--layers: {num_layers} layers do not split evenly over pp = {pp}; give --layers with "
                             f"{pp} comma-separated counts that sum to {num_layers}")
        return [num_layers // pp] * pp
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
    out = []
    for r in refs:
        g = fleet.find_group(r)
        if g is None:
            raise InputError(f"--stage-groups: unknown node group '{r}'; choices: {', '.join(keys)}")
        out.append(g.key)
    return out


# ---------------------------------------------------------------------------- explain

@app.command()
@handles_errors
def explain(
    plan_file: Annotated[str | None, typer.Argument(help="A plan file written by `hgplan search -o` (optional).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    seq_len: SeqOpt = None, global_batch: GbsOpt = None, precision: PrecisionOpt = None, training: TrainingOpt = None,
    attention: AttentionOpt = None, runtime: RuntimeOpt = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline stages.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel degree.")] = None,
    cp: Annotated[int, typer.Option("--cp", help="Context-parallel degree.")] = 1,
    mbs: Annotated[int, typer.Option("--mbs", help="Micro-batch size.")] = 1,
    vpp: Annotated[int, typer.Option("--vpp", help="Virtual stages per pipeline rank (interleaved 1F1B).")] = 1,
    recompute: Annotated[RecomputeOpt, typer.Option("--recompute", help="Activation recomputation.")] = RecomputeOpt.none,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism.")] = False,
    distributed_optimizer: Annotated[bool, typer.Option("--distributed-optimizer", help="Shard optimizer state (ZeRO-1).")] = False,
    zero_stage: Annotated[int | None, typer.Option("--zero-stage", help="ZeRO stage 0-3.")] = None,
    no_overlap_grad_reduce: Annotated[bool, typer.Option("--no-overlap-grad-reduce",
                                                         help="Do not overlap the DP reduction with backward.")] = False,
    allow_cross_node_tp: Annotated[bool, typer.Option("--allow-cross-node-tp", help="Permit TP across nodes (costed on NICs).")] = False,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers per stage, e.g. 10,9,9,8.")] = None,
    stage_groups: Annotated[str | None, typer.Option("--stage-groups", help="Node group of each stage, SITE/GROUP,...")] = None,
    simulate: Annotated[bool, typer.Option("--simulate/--no-simulate", help="Also run the pipeline simulator.")] = True,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw one iteration as a text Gantt chart.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Predict a configuration you run today (or a plan file): throughput, MFU, per-stage time and memory."""
    from hgplan import explainer
    from hgplan.io import resolve_cluster, resolve_model

    if plan_file is not None:
        from hgplan.io import catalog
        from hgplan.planfile import load_plan_doc

        given = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", tp), ("--pp", pp), ("--dp", dp),
                                ("--layers", layers), ("--stage-groups", stage_groups), ("--seq-len", seq_len),
                                ("--global-batch", global_batch), ("--training", training)) if v is not None]
        if given:
            raise InputError(f"a plan file carries its own configuration; drop {', '.join(given)} or the plan file")

        pdoc = _read_json(plan_file, "plan")
        plan, fleet, arch, train = load_plan_doc(pdoc, plan_file, catalog())
        doc = explainer.explain(plan, fleet, arch, train, cluster_ref=pdoc["inputs"]["cluster"]["ref"],
                                model_ref=pdoc["inputs"]["model"]["ref"], simulate=simulate, timeline=timeline,
                                baselines=pdoc.get("baselines"))
        if as_json:
            emit_json({k: v for k, v in doc.items() if k != "timeline_text"})
        else:
            explainer_render(doc)
        return
    missing = [f for f, v in (("--cluster", cluster), ("--model", model), ("--tp", tp), ("--pp", pp), ("--dp", dp))
               if v is None]
    if missing:
        raise InputError(f"explain needs a plan file or {', '.join(missing)} (see `hgplan explain --help`)")
    if distributed_optimizer and zero_stage is not None and zero_stage != 1:
        raise InputError(f"--distributed-optimizer is ZeRO stage 1 but --zero-stage {zero_stage} was given; keep one")
    zs = zero_stage if zero_stage is not None else (1 if distributed_optimizer else 0)
    fleet, warnings, cluster_ref = resolve_cluster(cluster)
    arch, model_ref = resolve_model(model)
    train = training_settings(arch, training_file=training, seq_len=seq_len, global_batch=global_batch,
                              precision=precision, attention=attention, runtime=runtime)
    plan = explainer.build_plan(
        fleet=fleet, model=arch, tp=tp, pp=pp, dp=dp, cp=cp, mbs=mbs, vpp=vpp, recompute=recompute.value,
        sequence_parallel=sequence_parallel, zero_stage=zs, overlap_grad_reduce=not no_overlap_grad_reduce,
        allow_cross_node_tp=allow_cross_node_tp, layers=_parse_layers(layers, pp, arch.num_layers),
        stage_groups=_parse_stage_groups(stage_groups, pp, fleet))
    doc = explainer.explain(plan, fleet, arch, train, cluster_ref=cluster_ref, model_ref=model_ref,
                            simulate=simulate, timeline=timeline)
    doc["warnings"] = warnings
    for w in doc.get("warnings", []):
        err.print(f"warning: {w}", markup=False, highlight=False)
    if as_json:
        doc = {k: v for k, v in doc.items() if k != "timeline_text"}
        emit_json(doc)
        return
    explainer_render(doc)


def _read_json(path_str: str, what: str) -> Any:
    from hgplan.io import read_text

    text = read_text(path_str, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError([InputIssue(source=path_str, line=exc.lineno, path="",
                                     message=f"not valid JSON: {exc.msg}")]) from None


def explainer_render(doc: dict) -> None:
    p = doc["prediction"]
    plan = doc["plan"]
    out.print(f"[bold]{doc['inputs']['model_name']}[/] on {doc['inputs']['cluster']}: TP {plan['tp']} CP {plan['cp']} "
              f"PP {plan['pp']} DP {plan['dp']}, micro-batch {plan['micro_batch_size']} x {p['num_microbatches']}, "
              f"vpp {plan['vpp']}, recompute {plan['recompute']}, ZeRO {plan['zero_stage']}")
    sim = f" (simulator {p['simulator_iteration_time_s']:.3f} s)" if "simulator_iteration_time_s" in p else ""
    out.print(f"iteration {p['iteration_time_s']:.3f} s{sim}  |  {p['tokens_per_s']:,.0f} tokens/s  |  "
              f"{p['model_tflops_per_gpu']:.1f} model TFLOP/s/GPU  |  MFU {p['mfu']:.1%}  |  bubble {p['bubble_fraction']:.1%}")
    table = Table("stage", "node group", "GPUs", "layers", "fwd+bwd s/mb", "compute s", "p2p s", "DP sync s",
                  "memory GiB", "capacity", "headroom")
    for s in doc["stages"]:
        mark = "" if s["fits"] else " [red]OOM[/]"
        table.add_row(str(s["index"]), s["node_group"], str(s["gpus"]), str(s["layers"]), f"{s['fwd_s'] + s['bwd_s']:.4f}",
                      f"{s['compute_s']:.3f}", f"{s['p2p_s']:.3f}", f"{s['dp_sync_s']:.3f}", f"{s['memory_gib']:.1f}{mark}",
                      f"{s['memory_capacity_gib']:g}", f"{s['headroom_gib']:.1f}")
    out.print(table)
    for line in doc.get("findings", []):
        out.print(line, markup=False, highlight=False)
    if doc.get("timeline_text"):
        out.print(doc["timeline_text"], markup=False, highlight=False)


# ---------------------------------------------------------------------------- search

class TargetOpt(StrEnum):
    megatron = "megatron"
    deepspeed = "deepspeed"


def _parse_percent(text: str, flag: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{flag}: expected a fraction or a percentage such as 0.5% (got {text!r})") from None
    if not 0 <= value < 1:
        raise InputError(f"{flag}: must be between 0 and 100% (got {text!r})")
    return value


@app.command()
@handles_errors
def search(
    cluster: ClusterOpt, model: ModelOpt,
    seq_len: SeqOpt = None, global_batch: GbsOpt = None, precision: PrecisionOpt = None, training: TrainingOpt = None,
    attention: AttentionOpt = None,
    target: Annotated[TargetOpt, typer.Option("--target", help="Framework the plan must run on.")] = TargetOpt.megatron,
    top: Annotated[int, typer.Option("--top", help="How many ranked plans to show.")] = 5,
    time_limit: Annotated[float, typer.Option("--time-limit", help="Search time limit in seconds: a reproducible budget "
                                                                   "of 0.6 x this in CP-SAT deterministic time, and a hard "
                                                                   "wall-clock stop at this.")] = 60.0,
    max_gap: Annotated[str, typer.Option("--max-gap", help="Stop when the best plan is proven within this gap.")] = "0.5%",
    max_pp: Annotated[int | None, typer.Option("--max-pp", help="Largest number of pipeline stages to consider.")] = None,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Evaluate the three baselines.")] = True,
    solver_log: Annotated[bool, typer.Option("--solver-log", help="CP-SAT progress to stderr.")] = False,
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the best plan as a plan file.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="A committed plan file to gate against (CI).")] = None,
    max_regression: Annotated[str, typer.Option("--max-regression", help="With --baseline: exit 1 when the best plan "
                                                                        "is predicted slower by more than this.")] = "3%",
    as_json: JsonOpt = False,
) -> None:
    """Find the fastest plan stock Megatron-LM/DeepSpeed can run on the fleet, with a proven optimality gap."""
    import hashlib

    from hgplan.io import resolve_cluster, resolve_model
    from hgplan.planner.api import plan_training
    from hgplan.planner.options import SearchOptions

    if top < 1:
        raise InputError(f"--top must be >= 1 (got {top})")
    if time_limit <= 0:
        raise InputError(f"--time-limit must be > 0 seconds (got {time_limit})")
    if max_pp is not None and max_pp < 1:
        raise InputError(f"--max-pp must be >= 1 (got {max_pp})")
    gap = _parse_percent(max_gap, "--max-gap")
    bound = _parse_percent(max_regression, "--max-regression")
    base_doc = None
    if baseline is not None:
        from hgplan.io import catalog as _catalog
        from hgplan.planfile import load_plan_doc

        base_doc = _read_json(baseline, "baseline plan")
        load_plan_doc(base_doc, baseline, _catalog())  # schema and consistency of the committed plan
    fleet, warnings, cluster_ref = resolve_cluster(cluster)
    arch, model_ref = resolve_model(model)
    # Megatron-DeepSpeed runs Megatron's model code: both targets are costed with the Megatron runtime; the target
    # only narrows the plan family (no interleaving, ZeRO <= 1 with pipeline parallelism).
    train = training_settings(arch, training_file=training, seq_len=seq_len, global_batch=global_batch,
                              precision=precision, attention=attention, runtime=None)
    cluster_text, model_text = _input_texts(cluster, model)
    inputs = {"cluster": {"ref": cluster_ref, "sha256": hashlib.sha256(cluster_text.encode()).hexdigest()},
              "model": {"ref": model_ref, "name": arch.name}}
    opts = SearchOptions(target=target.value, top_k=top, budget_s=time_limit, max_gap=gap, max_pp=max_pp,
                         solver_log=solver_log)
    doc = _run_with_progress(lambda cb: plan_training(fleet, arch, train, opts, inputs=inputs, progress=cb,
                                                      with_baselines=baselines), solver_log)
    doc["warnings"] = warnings + doc["warnings"]
    for w in doc["warnings"]:
        err.print(f"warning: {w}", markup=False, highlight=False)
    if output:
        _write_plan_file(output, doc, cluster_text=cluster_text, model_text=model_text)
    regression = None
    if base_doc is not None:
        from hgplan.planfile import regression_check

        regression = regression_check(base_doc, doc, bound)
        doc["regression"] = regression
    if as_json:
        emit_json(doc)
    else:
        _render_search(doc)
    if regression is not None:
        err.print(regression["message"], markup=False, highlight=False)
        if regression["failed"]:
            raise typer.Exit(1)


def _input_texts(cluster: str, model: str) -> tuple[str, str]:
    from pathlib import Path

    from hgplan.io import catalog, read_text

    cat = catalog()
    ctext = cat.cluster_texts[cluster] if cluster in cat.cluster_texts and not Path(cluster).exists() \
        else read_text(cluster, "cluster")
    mtext = cat.model_texts[model] if model in cat.model_texts and not Path(model).exists() else read_text(model, "model")
    return ctext, mtext


def _run_with_progress(fn, solver_log: bool):
    if not err.is_terminal or solver_log:
        return fn(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("searching"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("search", total=None)

        def cb(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return fn(cb)


def _write_plan_file(path: str, doc: dict, *, cluster_text: str, model_text: str) -> None:
    from pathlib import Path

    from hgplan.planfile import make_plan_file

    plan_doc = make_plan_file(doc, cluster_text=cluster_text, model_text=model_text)
    target = Path(path)
    if target.is_dir():
        raise InputError(f"-o {path}: is a directory; give a file name such as {path}/plan.json")
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(plan_doc, indent=2) + "\n")
    tmp.replace(target)
    err.print(f"wrote {path}", markup=False, highlight=False)


def _stage_summary(stages: list[dict]) -> str:
    parts: list[tuple[str, list[int]]] = []
    for st in stages:
        if parts and parts[-1][0] == st["node_group"]:
            parts[-1][1].append(st["layers"])
        else:
            parts.append((st["node_group"], [st["layers"]]))
    return " | ".join(f"{g}: {','.join(map(str, ls))}" for g, ls in parts)


def _render_search(doc: dict) -> None:
    s = doc["search"]
    table = Table("#", "tokens/s", "iter s", "MFU", "GPUs", "TP/CP/PP/DP", "mbs,vpp,recompute",
                  "stages (node group: layers)", "headroom GiB", title="plans")
    for e in doc["plans"]:
        p, pl = e["prediction"], e["plan"]
        table.add_row(str(e["rank"]), f"{p['tokens_per_s']:,.0f}", f"{p['iteration_time_s']:.3f}", f"{p['mfu']:.1%}",
                      str(e["gpus_used"]), f"{pl['tp']}/{pl['cp']}/{pl['pp']}/{pl['dp']}",
                      f"{pl['micro_batch_size']},{pl['vpp']},{pl['recompute']}", _stage_summary(pl["stages"]),
                      f"{e['worst_headroom_gib']:.1f}")
    out.print(table)
    c = s["candidates"]
    out.print(f"search: best {s['best_objective_s']:.3f} s, proven bound {s['bound_s']:.3f} s, gap "
              f"{s['relative_gap']:.2%} ({c['solved']} solved, {c['pruned_by_bound']} pruned by bound, "
              f"{c['skipped_by_budget']} skipped by budget of {c['total']}; {s['stopped_by']})")
    for name, b in doc.get("baselines", {}).items():
        if b["available"]:
            out.print(f"baseline {name}: {b['prediction']['tokens_per_s']:,.0f} tokens/s; hgplan is "
                      f"{b['speedup']:.2f}x faster ({b['description']}{'; ' + b['note'] if b.get('note') else ''})")
        else:
            out.print(f"baseline {name}: not available ({b.get('note', '')})")
    for idle in doc["idle_gpus"]:
        out.print(f"idle: {idle['gpus']} GPUs of {idle['node_group']}: {idle['reason']}")


# ---------------------------------------------------------------------------- export

class ExportFormat(StrEnum):
    megatron = "megatron"
    deepspeed = "deepspeed"
    torchrun = "torchrun"


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
    from pathlib import Path

    from hgplan.export.deepspeed import export_deepspeed
    from hgplan.export.megatron import export_megatron
    from hgplan.export.torchrun import export_torchrun
    from hgplan.io import catalog
    from hgplan.planfile import load_plan_doc

    pdoc = _read_json(plan_file, "plan")
    plan, fleet, arch, train = load_plan_doc(pdoc, plan_file, catalog())
    fn = {ExportFormat.megatron: export_megatron, ExportFormat.deepspeed: export_deepspeed,
          ExportFormat.torchrun: export_torchrun}[fmt]
    kwargs = {"script": script} if script else {}
    ex = fn(plan, fleet, arch, train, **kwargs)
    if output is not None:
        target = Path(output)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise InputError(f"-o {output}: exists and is not an empty directory; choose a new directory (nothing "
                             "was written)")
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix=".hgplan-export-", dir=str(target.parent.resolve())))
        try:
            for name, content in sorted(ex.files.items()):
                (tmp / name).write_text(content)
                if name.endswith(".sh"):
                    (tmp / name).chmod(0o755)
            if target.exists():
                target.rmdir()
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        err.print(f"wrote {len(ex.files)} files to {output}", markup=False, highlight=False)
    for w in ex.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False)
    if as_json:
        emit_json(ex.to_dict() | {"file_contents": dict(sorted(ex.files.items()))})
        return
    if ex.argv:
        out.print(f"# {fmt.value} arguments", markup=False)
        sys.stdout.write(" ".join(__import__("shlex").quote(a) for a in ex.argv) + "\n")
    for n in ex.nodes[:1]:
        if "argv" in n:
            out.print(f"# node 0 ({n['host']}, {n['node_group']}); {len(ex.nodes)} nodes in all", markup=False)
            sys.stdout.write(" ".join(__import__("shlex").quote(a) for a in n["argv"]) + "\n")
    for note in ex.notes:
        out.print(f"# note: {note}", markup=False, highlight=False)
    if output is None:
        out.print(f"# {len(ex.files)} files (give -o DIR to write them): {', '.join(sorted(ex.files))}", markup=False)


# ---------------------------------------------------------------------------- diff

@app.command()
@handles_errors
def diff(a: Annotated[str, typer.Argument(help="Plan file A (e.g. the committed plan.lock.json).")],
         b: Annotated[str, typer.Argument(help="Plan file B (e.g. a fresh plan).")],
         as_json: JsonOpt = False) -> None:
    """Show what changed between two plan files: degrees, stages, layers and predicted throughput."""
    from hgplan.io import catalog
    from hgplan.planfile import diff_plans, load_plan_doc

    docs = []
    for path in (a, b):
        doc = _read_json(path, "plan")
        load_plan_doc(doc, path, catalog())  # kind, schema version, consistency
        docs.append(doc)
    d = diff_plans(docs[0], docs[1], a, b)
    if as_json:
        emit_json(d)
        return
    if not d["changes"]:
        out.print("plans are identical", markup=False)
    for c in d["changes"]:
        out.print(f"{c['field']}: {c['a']} -> {c['b']}", markup=False, highlight=False)
    p = d["prediction"]
    out.print(f"tokens/s: {p['a_tokens_per_s']:,.0f} -> {p['b_tokens_per_s']:,.0f} ({p['change']:+.1%})", markup=False)


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
