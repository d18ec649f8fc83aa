"""calibrate: fit the cost model's constants to runs on the user's fleet (Megatron-LM logs or measured times)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, err, file_to_stdout, handles_errors, out, warn, wrote
from hgplan.errors import InputError, InputIssue


def _relative(base: Path, ref: str) -> str:
    """A file named in the runs file is relative to it; example and preset names stay as they are."""
    candidate = base / ref
    return str(candidate) if ("/" in ref or ref.endswith((".yaml", ".yml", ".log", ".txt")) or candidate.exists()) \
        else ref


def _load_bench(paths: list[str]) -> tuple[list, list[str]]:
    """The constants the bench reports measure, and notes on what they could not measure; one report per GPU type."""
    from hgplan.bench.fit import bench_constants
    from hgplan.io import catalog, read_text
    from hgplan.planfile import parse_bench

    cat, constants, notes, seen = catalog(), [], [], {}
    for path in paths:
        report = parse_bench(read_text(path, "bench report"), path)
        if report.gpu is not None and report.gpu not in cat.gpus:
            raise InputError(f"{path}: gpu {report.gpu!r} is not in this hgplan's catalog")
        if report.gpu in seen:
            raise InputError(f"--bench {path} and --bench {seen[report.gpu]} both measure {report.gpu}; give one "
                             "report per GPU type")
        seen[report.gpu] = path
        found, why = bench_constants(report, cat.gpu_type(cat.gpus[report.gpu]) if report.gpu else None, path)
        constants += found
        notes += [f"{path}: {line}" for line in why]
    return constants, notes


def _load_runs(path: str, cat=None) -> list:
    """The runs of a runs file, each resolved and checked (exit 2 with the run's name on any problem)."""
    from pydantic import ValidationError

    from hgplan.calibrate import Run, parse_megatron_log
    from hgplan.documents import PlanRecord
    from hgplan.inputs import make_training, pydantic_issues
    from hgplan.io import read_text, resolve_cluster, resolve_model
    from hgplan.plan import Plan
    from hgplan.schema import CalibrationRunsSpec
    from hgplan.validate import check_plan
    from hgplan.yamlio import parse_yaml

    data, lines = parse_yaml(read_text(path, "calibration runs"), path)
    try:
        spec = CalibrationRunsSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(pydantic_issues(exc, data=data, lines=lines, source=path, root=CalibrationRunsSpec)) from None
    base = Path(path).resolve().parent
    runs = []
    for i, rs in enumerate(spec.runs):
        where = f"{path}: runs.{i} ({rs.name})"
        fleet, _, _ = resolve_cluster(_relative(base, rs.cluster), cat)
        model, _ = resolve_model(_relative(base, rs.model))
        train = make_training(dict(rs.training), model, f"{where}.training")
        try:
            plan = Plan.from_record(PlanRecord.model_validate(rs.plan))
        except ValidationError as exc:
            raise InputError(f"{where}.plan: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
        bad = check_plan(plan, fleet, model, train)
        if bad:
            raise InputError([InputIssue(source=where, line=None, path=f"plan ({v.rule})", message=v.message)
                              for v in bad])
        if (rs.log is None) == (rs.iteration_time_ms is None):
            raise InputError(f"{where}: give exactly one of log (a Megatron-LM log) and iteration_time_ms")
        if rs.log is not None:
            log_path = _relative(base, rs.log)
            measured = parse_megatron_log(read_text(log_path, "Megatron-LM log", "text"), log_path).iteration_s
        else:
            measured = rs.iteration_time_ms / 1e3
        runs.append(Run(name=rs.name, plan=plan, fleet=fleet, model=model, train=train, measured_s=measured))
        _warn_if_it_cannot_fit(where, runs[-1])
    return runs


def _warn_if_it_cannot_fit(where: str, run) -> None:
    """A run ran, so its plan fit: where the cost model says it cannot, the plan or settings given are likely not what
    ran (or the memory model is off for it); the fit still uses its time."""
    from hgplan.costmodel.evaluate import evaluate
    from hgplan.validate import check_memory

    over = check_memory(evaluate(run.plan, run.fleet, run.model, run.train))
    if over:
        warn(f"{where}: by the cost model this plan does not fit ({over[0].message}); a plan that ran fits, so check "
             "its degrees, micro-batch, recompute and ZeRO stage against the run's arguments")


@app.command()
@handles_errors
def calibrate(
    runs_file: Annotated[str | None, typer.Argument(help="Runs file: for each run the cluster, model, training "
                                                         "settings, plan and its Megatron-LM log (or "
                                                         "iteration_time_ms).")] = None,
    bench: Annotated[list[str] | None, typer.Option("--bench", help="A report of `hgplan bench` (one per GPU "
                                                                    "type; repeatable). Its constants are measured, "
                                                                    "and held fixed while runs are fitted.")] = None,
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the profile (YAML) here, for "
                                                                    "--profile on search and explain ('-': standard "
                                                                    "output).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit GPU and network constants to runs on your own fleet and/or kernel timings of `hgplan bench`; write a
    profile that search and explain use."""
    import yaml

    from hgplan.calibrate import apply_profile, bench_params, calibrate as fit, with_bench
    from hgplan.io import catalog, check_writable_file, write_file_atomic

    if runs_file is None and not bench:
        raise InputError("calibrate needs a runs file, --bench FILE, or both")
    if output is not None:
        check_writable_file(output)
    to_stdout = file_to_stdout(output, as_json=as_json)
    measured, notes = _load_bench(bench or [])
    profile = None
    if runs_file is not None:
        cat = apply_profile(catalog(), with_bench(None, measured)) if measured else None
        profile = fit(_load_runs(runs_file, cat), fixed=bench_params(measured))
    if measured:
        profile = with_bench(profile, measured)
    doc = profile.to_json_dict()
    if output is not None:
        write_file_atomic(output, "# hgplan calibration profile: use with --profile\n"
                          + yaml.safe_dump(doc, sort_keys=False))
        wrote(output, "profile")
    for line in notes:
        warn(line, "note")
    for name in (profile.fit.not_identifiable if profile.fit else []):
        warn(f"{name}: no run depends on it; kept at the catalog's value", "note")
    if as_json:
        emit_json(doc)
        return
    _print_profile(profile, err if to_stdout else out)


def _catalog_cell(cat, gid: str, name: str, measured) -> str:
    """The catalog's value of a GPU constant ('' where the catalog has none: an inline GPU, a kernel it leaves out)."""
    value = measured.catalog_value if measured else (getattr(cat.gpu_type(cat.gpus[gid]).eff, name, None)
                                                     if gid in cat.gpus else None)
    return "" if value is None else f"{value:.4f}"


def _print_profile(profile, console) -> None:
    from rich.table import Table

    from hgplan.io import catalog

    cat = catalog()
    measured = {(c.gpu, c.constant): c for c in profile.bench or []}
    table = Table("constant", "value", "from", "catalog", "kernel error before -> after")
    for gid, c in profile.gpus.items():
        for name, value in c.model_dump(exclude_none=True).items():
            b = measured.get((gid, name))
            table.add_row(f"{gid}.{name}", f"{value:.4f}", f"bench ({b.measurements})" if b else "runs",
                          _catalog_cell(cat, gid, name, b),
                          f"{b.median_abs_error_before:.1%} -> {b.median_abs_error_after:.1%}" if b else "")
    for name, t in profile.transports.items():
        table.add_row(f"transport {name}.efficiency", f"{t.efficiency:.4f}", "runs",
                      f"{cat.transports[name].efficiency:.4f}" if name in cat.transports else "", "")
    console.print(table)
    if profile.fit is None:
        return
    res = Table("run", "measured s", "fitted s", "error")
    for r in profile.fit.residuals:
        res.add_row(r.run, f"{r.measured_s:.4f}", f"{r.predicted_s:.4f}", f"{r.error:+.2%}")
    console.print(res)
    console.print(f"rms error {profile.fit.rms_error:.2%} over {profile.fit.runs} runs")
