"""search: the fastest plan with its proven gap, plan files, the CI gate."""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer

from hgplan.cli.base import (ClusterOpt, JsonOpt, ModelOpt, app, emit_json, err, file_to_stdout,
                             command_started_s, handles_errors, out, warn, wrote)
from hgplan.cli.options import TrainingFlags, parse_percent, training_options
from hgplan.cli.progress import SearchProgress
from hgplan.domain import Target
from hgplan.errors import InputError

OUTPUT_SHARE = 0.15
"""Share of --time-limit kept for what follows the search: ranking the plans by the simulator, the baselines and
the output. The search's phases stop at the rest, counted from the command's start (reading the inputs included)."""


def _check_search_flags(top: int, time_limit: float, max_pp: int | None, solver_params: str | None, *,
                        writes: tuple[str | None, ...]) -> None:
    """Bad flags and unwritable output paths are exit 2 before any work."""
    from hgplan.io import check_writable_file

    for path in writes:
        if path is not None:
            check_writable_file(path)
    if top < 1:
        raise InputError(f"--top must be >= 1 (got {top})")
    if not math.isfinite(time_limit) or time_limit <= 0:
        raise InputError(f"--time-limit must be a finite number of seconds > 0 (got {time_limit})")
    if max_pp is not None and max_pp < 1:
        raise InputError(f"--max-pp must be >= 1 (got {max_pp})")
    if solver_params:
        from hgplan.planner.limits import extra_params_error

        problem = extra_params_error(solver_params)
        if problem:
            raise InputError(f"--solver-params {solver_params!r}: {problem}")


def _vpp_options(max_vpp: int | None, target: Target) -> tuple[int, ...] | None:
    """--max-vpp as the search's interleaving choices (None: the default, planner/options.DEFAULT_MAX_VPP)."""
    if max_vpp is None:
        return None
    if max_vpp < 1:
        raise InputError(f"--max-vpp must be >= 1 (got {max_vpp})")
    if max_vpp > 1 and target is not Target.MEGATRON:
        raise InputError(f"--max-vpp {max_vpp} with --target {target.value}: only Megatron-LM interleaves virtual "
                         "stages (DeepSpeed's pipeline engine has no interleaved schedule, FlagScale's heterogeneous "
                         "meshes refuse it); use --target megatron or leave --max-vpp out")
    return tuple(range(1, max_vpp + 1))


def _check_gate_flags(baseline: str | None, *, max_regression: str | None, allow_different_inputs: bool) -> None:
    """The gate's own flags without --baseline would gate nothing: a CI job that forgot --baseline must not pass."""
    given = [flag for flag, on in (("--max-regression", max_regression is not None),
                                   ("--allow-different-inputs", allow_different_inputs)) if on]
    if baseline is None and given:
        raise InputError(f"{' and '.join(given)} set{'s' if len(given) == 1 else ''} the regression gate, but there "
                         "is no --baseline to gate against: give --baseline PLAN_FILE (a committed plan file), or "
                         f"drop {' and '.join(given)}")


def _inputs(cluster: str, model: str, profile: str | None, flags: TrainingFlags):
    """Fleet (with the calibration profile applied), model and training settings, each resolved once."""
    from hgplan.io import resolve_cluster, resolve_model, resolve_profile

    cat, psrc = resolve_profile(profile)
    fleet, warnings, csrc = resolve_cluster(cluster, cat)
    arch, msrc = resolve_model(model)
    # Megatron-DeepSpeed runs Megatron's model code: both targets are costed with the Megatron runtime; the target
    # narrows the plan family (no interleaving, ZeRO <= 1 with pipeline parallelism) and, for DeepSpeed, sets the
    # attention kernel (TrainingSettings.for_target).
    return fleet, warnings, csrc, arch, msrc, flags.settings(arch, fleet), psrc


def _baseline_file(path: str | None):
    """The committed plan file to gate against, read and checked before the search (None without --baseline)."""
    if path is None:
        return None
    from hgplan.io import catalog, read_json
    from hgplan.planfile import load_plan

    return load_plan(read_json(path, "baseline plan"), path, catalog(), verify_prediction=True).file


def _same_inputs(base_file, path: str, csrc, msrc, train, target: str) -> None:
    """A baseline planned for other inputs cannot gate this search: InputError naming the differences."""
    from hgplan.errors import InputError, InputIssue
    from hgplan.planfile import input_differences

    diffs = input_differences(base_file, cluster_sha256=csrc.sha256, model_sha256=msrc.sha256, train=train,
                              target=target)
    if diffs:
        raise InputError([InputIssue(source=path, line=None, path="inputs",
                                     message=f"{d}: the baseline was planned for other inputs, so its throughput is "
                                             "no reference; re-plan the baseline, or pass --allow-different-inputs "
                                             "to gate anyway") for d in diffs])


def _write_outputs(report, result, *, output: str | None, export_model: str | None, html: str | None, cluster,
                   model, profile=None) -> None:
    """The plan file (-o), its HTML report (--report) and the last CP-SAT model (--export-model), each written
    atomically."""
    from hgplan.io import write_file_atomic
    from hgplan.planfile import make_plan_file

    if output or html:
        pf = make_plan_file(report, cluster_text=cluster.text, model_text=model.text, model_sha256=model.sha256,
                            profile_text=profile.text if profile else None)
        if output:
            write_file_atomic(output, json.dumps(pf.to_json_dict(), indent=2) + "\n")
            wrote(output, "plan file")
        if html:
            from hgplan.cli.report import write_report
            from hgplan.io import catalog
            from hgplan.planfile import load_plan

            source = output if output and output != "-" else "(this search)"
            write_report(load_plan(pf.to_json_dict(), source, catalog()), html, source=source)
    if export_model and result.last_model_text:
        write_file_atomic(export_model, result.last_model_text)
        wrote(export_model, "last CP-SAT model")


def _write_or_print(report, result, outputs: dict, *, as_json: bool, to_stdout: bool) -> None:
    """The files (_write_outputs); if one cannot be written after all (its path went away during the search), the
    result is still printed, then exit 2."""
    try:
        _write_outputs(report, result, **outputs)
    except (OSError, InputError) as exc:
        _print_report(report, as_json, to_stdout)
        warn(f"the search finished but its output could not be written ({exc}); the result is on stdout; fix the "
             "path and re-run", "error")
        raise typer.Exit(2) from None


def _print_report(report, as_json: bool, to_stdout: bool) -> None:
    from hgplan import render

    if as_json:
        emit_json(report)
    else:
        render.search_report(err if to_stdout else out, report)


@app.command()
@handles_errors
@training_options(runtime=False)
def search(
    cluster: ClusterOpt, model: ModelOpt,
    target: Annotated[Target, typer.Option("--target", help=(
        "Framework the plan must run on: megatron (Megatron-LM), deepspeed (Megatron-DeepSpeed: no interleaving or "
        "CP, FlashAttention-2, the pipeline on one network transport) or flagscale (also per-mesh TP, DP and "
        "recompute; docs/export.md)."))] = Target.MEGATRON,
    top: Annotated[int, typer.Option("--top", help="How many ranked plans to show.")] = 5,
    time_limit: Annotated[float, typer.Option("--time-limit", help="Search time limit in seconds: a reproducible budget "
                                                                   "of 0.6 x this in CP-SAT deterministic time, and a hard "
                                                                   "wall-clock stop at this.")] = 60.0,
    max_gap: Annotated[str, typer.Option("--max-gap", help="Stop when the best plan is proven within this gap.")] = "0.5%",
    max_pp: Annotated[int | None, typer.Option("--max-pp", help="Largest number of pipeline stages to consider.")] = None,
    max_vpp: Annotated[int | None, typer.Option("--max-vpp", help="Deepest interleaving to consider: virtual stages "
                                                "per rank, those dividing the layers (default 2; deeper pays on fleets "
                                                "of one GPU type with few micro-batches, docs/planner.md).")] = None,
    prove_gap: Annotated[bool, typer.Option("--prove-gap", help="After the search, prove the gap on the reported "
                                            "(simulated) iteration time, in what the search left of --time-limit; "
                                            "a plan the proof finds faster is ranked too.")] = False,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Evaluate the three baselines.")] = True,
    solver_log: Annotated[bool, typer.Option("--solver-log", help="CP-SAT progress to stderr.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (a live display on a "
                                                              "terminal, a line every 5 s elsewhere).")] = False,
    solver_params: Annotated[str | None, typer.Option("--solver-params", help="Extra CP-SAT parameters in text "
                                                      "format, e.g. 'linearization_level: 2' (recorded in the JSON; "
                                                      "num_workers > 1 makes runs non-reproducible).")] = None,
    export_model: Annotated[str | None, typer.Option("--export-model", help="Write the last CP-SAT model solved "
                                                                            "(text CpModelProto) to this file.")] = None,
    output: Annotated[str | None, typer.Option("-o", "--output", help="Write the best plan as a plan file "
                                                                    "('-': standard output; the table then goes to "
                                                                    "stderr).")] = None,
    html_report: Annotated[str | None, typer.Option("--report", help="Write the best plan's HTML report (as `hgplan "
                                                                     "report` does) to this file.")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Calibration profile from `hgplan calibrate`: "
                                                                  "constants measured on your fleet.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="A committed plan file to gate against (CI).")] = None,
    max_regression: Annotated[str | None, typer.Option("--max-regression", help="With --baseline: exit 1 when the best "
                                                   "plan is predicted slower by more than this (default 3%).")] = None,
    allow_different_inputs: Annotated[bool, typer.Option(
        "--allow-different-inputs", help="With --baseline: gate even when the baseline was planned for another "
                                         "fleet, model, training settings or target (otherwise exit 2).")] = False,
    as_json: JsonOpt = False,
    *, flags: TrainingFlags,
) -> None:
    """Find the fastest plan stock Megatron-LM/DeepSpeed can run on the fleet, with its gap to the search's bound."""
    _check_search_flags(top, time_limit, max_pp, solver_params, writes=(output, export_model, html_report))
    _check_gate_flags(baseline, max_regression=max_regression, allow_different_inputs=allow_different_inputs)
    to_stdout = file_to_stdout(output, export_model, html_report, as_json=as_json)
    gap, bound = parse_percent(max_gap, "--max-gap"), parse_percent(max_regression or "3%", "--max-regression")
    vpps = _vpp_options(max_vpp, target)
    with SearchProgress(started_s=command_started_s(), time_limit_s=time_limit, quiet=quiet,
                        solver_log=solver_log) as progress:
        from hgplan.documents import ClusterInput
        from hgplan.planfile import regression_check
        from hgplan.planner.api import plan_training
        from hgplan.planner.options import SearchOptions

        base_file = _baseline_file(baseline)
        fleet, warnings, csrc, arch, msrc, train, psrc = _inputs(cluster, model, profile, flags)
        train = train.for_target(target)  # as plan_training does, before the gate compares the settings
        if base_file is not None and not allow_different_inputs:
            _same_inputs(base_file, baseline, csrc, msrc, train, target.value)
        opts = SearchOptions(target=target.value, top_k=top, budget_s=time_limit, max_gap=gap, max_pp=max_pp,
                             vpp_options=vpps,
                             solver_log=solver_log, solver_params=solver_params or "",
                             keep_model=export_model is not None, prove_gap=prove_gap,
                             wall_deadline_s=command_started_s() + time_limit * (1 - OUTPUT_SHARE))
        report, result = plan_training(
            fleet, arch, train, opts, cluster=ClusterInput(ref=csrc.ref, sha256=csrc.sha256), model_ref=msrc.ref,
            progress=progress, log=lambda line: warn(line, ""), with_baselines=baselines)
    if psrc is not None:
        report.inputs.profile = ClusterInput(ref=psrc.ref, sha256=psrc.sha256)
    report.warnings[:0] = warnings
    if base_file is not None:
        from hgplan.planfile import search_differences

        report.warnings += search_differences(base_file, report.solver)
    for w in report.warnings:
        warn(w)
    _write_or_print(report, result, dict(output=output, export_model=export_model, html=html_report, cluster=csrc,
                                         model=msrc, profile=psrc), as_json=as_json, to_stdout=to_stdout)
    if base_file is not None:
        report.regression = regression_check(base_file, report, bound)
    _print_report(report, as_json, to_stdout)
    if report.regression is not None:
        warn(report.regression.message, "")
        if report.regression.failed:
            raise typer.Exit(1)
