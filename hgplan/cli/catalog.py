"""validate, profiles list|show, schema: the commands that read the catalog and the inputs."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, handles_errors, out, profiles_app, warn
from hgplan.errors import InputError

@app.command()
@handles_errors
def validate(
    cluster: Annotated[str | None, typer.Argument(help="Cluster YAML file, or the name of a shipped example "
                                                       "fleet.")] = None,
    cluster_opt: Annotated[str | None, typer.Option("--cluster", "-c", help="The same, spelled as on search and "
                                                    "explain.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model preset name or model YAML file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a cluster file (and optionally a model): report every error in one pass, or summarise the fleet."""
    from hgplan import render
    from hgplan.io import resolve_cluster, resolve_model
    from hgplan.summary import fleet_summary

    if cluster is None and cluster_opt is None:
        raise InputError("no cluster to check: give a cluster YAML file or a shipped fleet name, as `hgplan validate "
                         "CLUSTER` or `hgplan validate -c CLUSTER`")
    if cluster is not None and cluster_opt is not None and cluster != cluster_opt:
        raise InputError(f"two clusters given ({cluster!r} and -c {cluster_opt!r}); validate checks one: keep one")
    cluster = cluster if cluster is not None else cluster_opt
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
        rows = [gpu_row(g, cat.gpu_type(g)) for g in cat.gpus.values()]
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
    profile = "profile"
    bench = "bench"
    error = "error"


@app.command()
@handles_errors
def schema(kind: Annotated[SchemaKind, typer.Argument(help="cluster, model, training (inputs), plan (plan files), "
                                                           "or search, explain, export (their --json output), "
                                                           "profile (calibrate), bench (bench), error (what --json "
                                                           "writes on exit 1, 2 or 3).")]) -> None:
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
