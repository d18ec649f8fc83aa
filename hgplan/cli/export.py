"""export and diff: what a plan file launches, and what changed between two."""

from __future__ import annotations

from typing import Annotated

import typer

from hgplan.cli.base import JsonOpt, app, emit_json, handles_errors, out, warn
from hgplan.domain import ExportFormat


def _require_fit(lp) -> None:
    """A plan (hand-edited, or from another catalog) whose stage does not fit its GPUs' memory is not exported."""
    from hgplan.costmodel.evaluate import evaluate
    from hgplan.errors import PlanningError
    from hgplan.validate import check_memory

    problems = check_memory(evaluate(lp.plan, lp.fleet, lp.model, lp.train))
    if problems:
        raise PlanningError(f"the plan does not fit: {problems[0].message}; re-run `hgplan search`")


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
    """Write launch arguments, per-node scripts and NCCL settings for Megatron-LM, DeepSpeed or torchrun, or
    FlagScale's heterogeneous configuration (experiment and train YAML, typed hostfile)."""
    from hgplan import render
    from hgplan.export import export_plan
    from hgplan.io import catalog, check_output_dir, read_json, write_dir_atomic
    from hgplan.planfile import load_plan

    if output is not None:
        check_output_dir(output)
    lp = load_plan(read_json(plan_file, "plan"), plan_file, catalog())
    _require_fit(lp)
    ex = export_plan(fmt, lp.plan, lp.fleet, lp.model, lp.train, **({"script": script} if script else {}))
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
         exit_zero: Annotated[bool, typer.Option("--exit-zero", help="Exit 0 even when the plans differ.")] = False,
         as_json: JsonOpt = False) -> None:
    """Show what changed between two plan files: degrees, stages, layers and predicted throughput. Exit 0 when
    they are identical, 1 when they differ (like diff), 2 on bad input."""
    from hgplan import render
    from hgplan.io import catalog, read_json
    from hgplan.planfile import diff_plans, load_plan

    files = [load_plan(read_json(path, "plan"), path, catalog()).recomputed() for path in (a, b)]
    d = diff_plans(files[0], files[1], a, b)
    if as_json:
        emit_json(d)
    else:
        render.plan_diff(out, d)
    if (d["changes"] or d["prediction"]["change"] != 0) and not exit_zero:
        raise typer.Exit(1)
