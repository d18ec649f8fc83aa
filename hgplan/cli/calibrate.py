"""calibrate: fit the cost model's constants to runs on the user's fleet (Megatron-LM logs or measured times)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, handles_errors, out, warn
from hgplan.errors import InputError, InputIssue


def _relative(base: Path, ref: str) -> str:
    """A file named in the runs file is relative to it; example and preset names stay as they are."""
    candidate = base / ref
    return str(candidate) if ("/" in ref or ref.endswith((".yaml", ".yml", ".log", ".txt")) or candidate.exists()) \
        else ref


def _load_runs(path: str) -> list:
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
        fleet, _, _ = resolve_cluster(_relative(base, rs.cluster))
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
    return runs


@app.command()
@handles_errors
def calibrate(
    runs_file: Annotated[str, typer.Argument(help="Runs file: for each run the cluster, model, training settings, "
                                                  "plan and its Megatron-LM log (or iteration_time_ms).")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the profile (YAML) here, for "
                                                                    "--profile on search and explain.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit GPU and network constants to runs on your own fleet; write a profile that search and explain use."""
    import yaml

    from hgplan.calibrate import calibrate as fit
    from hgplan.io import check_writable_file, write_file_atomic

    if output is not None:
        check_writable_file(output)
    profile = fit(_load_runs(runs_file))
    doc = profile.to_json_dict()
    if output is not None:
        write_file_atomic(output, "# hgplan calibration profile: use with --profile\n"
                          + yaml.safe_dump(doc, sort_keys=False))
        warn(f"wrote {output}", "")
    for name in profile.fit.not_identifiable:
        warn(f"{name}: no run depends on it; kept at the catalog's value", "note")
    if as_json:
        emit_json(doc)
        return
    from rich.table import Table

    table = Table("constant", "fitted")
    for gid, c in profile.gpus.items():
        for name, value in c.model_dump(exclude_none=True).items():
            table.add_row(f"{gid}.{name}", f"{value:.4f}")
    for name, t in profile.transports.items():
        table.add_row(f"transport {name}.efficiency", f"{t.efficiency:.4f}")
    out.print(table)
    res = Table("run", "measured s", "fitted s", "error")
    for r in profile.fit.residuals:
        res.add_row(r.run, f"{r.measured_s:.4f}", f"{r.predicted_s:.4f}", f"{r.error:+.2%}")
    out.print(res)
    out.print(f"rms error {profile.fit.rms_error:.2%} over {profile.fit.runs} runs")
