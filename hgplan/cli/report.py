"""report: a plan file as one self-contained HTML page."""

from __future__ import annotations

from typing import Annotated

import typer

from hgplan.cli.base import app, handles_errors, warn, wrote
from hgplan.domain import ExportFormat


def write_report(lp, output: str, *, source: str, fmt: ExportFormat | None = None) -> bool:
    """Build the HTML report of a loaded plan and write it atomically; whether the plan fits its GPUs' memory."""
    from hgplan.htmlreport import build_report
    from hgplan.io import catalog, write_file_atomic

    page = build_report(lp, source=source, fmt=fmt, validation=catalog().validation)
    write_file_atomic(output, page.html)
    wrote(output, "HTML report")
    return page.fits


@app.command()
@handles_errors
def report(
    plan_file: Annotated[str, typer.Argument(help="Plan file written by `hgplan search -o` ('-': standard input).")],
    output: Annotated[str, typer.Option("-o", "--output", help="The HTML file to write ('-': standard output).")],
    fmt: Annotated[ExportFormat | None, typer.Option(
        "--format", "-f", help="Launch target whose commands the report shows (default: the plan's target; "
                               "flagscale for a plan whose stages have their own degrees).")] = None,
) -> None:
    """Write one self-contained HTML page of a plan: the fleet with the plan drawn on it, one iteration as a Gantt
    chart, memory per stage, throughput against the baselines, what-ifs, the basis of each number and the launch
    commands. Opens offline (inline SVG and CSS, no script); exit 1 when the plan does not fit."""
    from hgplan.io import catalog, check_writable_file, read_json
    from hgplan.planfile import load_plan

    check_writable_file(output)
    lp = load_plan(read_json(plan_file, "plan"), plan_file, catalog())
    if not write_report(lp, output, source=plan_file, fmt=fmt):
        warn("the plan does not fit its GPUs' memory: the report shows where memory goes, but its throughput is "
             "not achievable", "finding")
        raise typer.Exit(1)
