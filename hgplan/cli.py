"""Command-line shell. Only this module (and hgplan.io) reads files, writes stdout or sees the environment.

Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time
limit; 101 internal error (a bug in hgplan).
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from enum import StrEnum
from typing import Annotated, Any, Callable

import typer
from rich.console import Console
from rich.table import Table

from hgplan import __version__
from hgplan.errors import InputError, NoAnswerError, PlanningError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan LLM training on heterogeneous, geo-distributed GPU fleets.")
profiles_app = typer.Typer(no_args_is_help=True, help="List and show the shipped GPU, model and cluster catalog.")
app.add_typer(profiles_app, name="profiles")

out = Console(soft_wrap=True)
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


@app.command()
@handles_errors
def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which document: cluster, model or training.")]) -> None:
    """Print the JSON Schema of an input document (for editor validation)."""
    from hgplan import schema as s

    cls = {SchemaKind.cluster: s.ClusterSpec, SchemaKind.model: s.ModelSpec, SchemaKind.training: s.TrainingSpec}[kind]
    doc = cls.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["$id"] = f"https://hgplan.dev/schema/{kind.value}.json"
    emit_json(doc)


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
