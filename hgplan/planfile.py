"""Plan files: the best plan of a search, self-contained (the cluster and model texts travel inside).

Reading one validates it three ways: its shape (documents.PlanFile), its inputs (parsed as a cluster, a model
and training settings), and its plan (the solver-independent validator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hgplan import __version__
from hgplan.documents import (
    PLAN_KIND,
    SCHEMA_VERSION,
    SEARCH_KIND,
    BenchReport,
    CalibrationProfile,
    ModelSourceText,
    PlanFile,
    PlanInputs,
    PlanRecord,
    RegressionRecord,
    SearchReport,
    SolverRecord,
    SourceText,
    text_sha256,
)
from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.errors import InputError, InputIssue
from hgplan.plan import Plan


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedPlan:
    """A plan file read and checked: the plan with the fleet, model and training it was made for."""

    plan: Plan
    fleet: Fleet
    model: ModelArch
    train: TrainingSettings
    file: PlanFile

    def recomputed(self) -> PlanFile:
        """The plan file with its prediction recomputed from the embedded inputs (what diff compares)."""
        from hgplan.costmodel.evaluate import evaluate
        from hgplan.report import prediction_record

        fresh = prediction_record(evaluate(self.plan, self.fleet, self.model, self.train))
        return self.file.model_copy(update={"prediction": fresh})


def make_plan_file(report: SearchReport, *, cluster_text: str, model_text: str, model_sha256: str,
                   profile_text: str | None = None) -> PlanFile:
    """The plan file of a search's best plan, with the input texts (and the calibration profile) embedded."""
    best = report.plans[0]
    inputs = report.inputs
    stats = report.search.model_copy()
    stats.__pydantic_fields_set__.discard("wall_time_s")  # a plan file is the same whatever the clock said
    return PlanFile(
        schema_version=SCHEMA_VERSION, kind=PLAN_KIND, hgplan_version=__version__,
        inputs=PlanInputs(cluster=SourceText(ref=inputs.cluster.ref, sha256=inputs.cluster.sha256, yaml=cluster_text),
                          model=ModelSourceText(ref=inputs.model.ref, name=inputs.model.name, yaml=model_text,
                                                sha256=model_sha256),
                          training=inputs.training, target=inputs.target,
                          **({"profile": SourceText(ref=inputs.profile.ref, sha256=inputs.profile.sha256,
                                                    yaml=profile_text)} if inputs.profile and profile_text else {})),
        plan=best.plan, prediction=best.prediction, stages=best.stages, search=stats, solver=report.solver,
        baselines=dict(report.baselines or {}))


def parse_profile(text: str, source: str) -> CalibrationProfile:
    """A calibration profile (YAML or JSON) checked against its schema; InputError naming what is wrong."""
    from hgplan.yamlio import parse_yaml

    data, _ = parse_yaml(text, source)
    if not isinstance(data, dict) or data.get("kind") != "hgplan.profile":
        raise _fail(source, "not a calibration profile (kind hgplan.profile); write one with `hgplan calibrate`",
                    "kind")
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as exc:
        raise _shape_errors(exc, source, "calibration profile") from None


def parse_bench(text: str, source: str) -> BenchReport:
    """An `hgplan bench` report (JSON) checked against its schema; InputError naming what is wrong."""
    from hgplan.yamlio import parse_yaml

    data, _ = parse_yaml(text, source)
    if not isinstance(data, dict) or data.get("kind") != "hgplan.bench":
        raise _fail(source, "not a bench report (kind hgplan.bench); write one with `hgplan bench -o FILE`", "kind")
    try:
        return BenchReport.model_validate(data)
    except ValidationError as exc:
        raise _shape_errors(exc, source, "bench report") from None


def _fail(source: str, msg: str, path: str = "") -> InputError:
    return InputError([InputIssue(source=source, line=None, path=path, message=msg)])


def _shape_errors(exc: ValidationError, source: str, what: str = "plan file") -> InputError:
    issues = []
    for e in exc.errors()[:10]:
        where = ".".join(str(p) for p in e["loc"])
        issues.append(InputIssue(source=source, line=None, path=where,
                                 message=f"malformed {what}: {e['msg'].lower()} (got {e.get('input')!r:.60})"))
    return InputError(issues)


def parse_plan_file(doc: Any, source: str) -> PlanFile:
    """The typed plan file, or InputError naming what is wrong (not a plan file, another version, a bad field)."""
    if not isinstance(doc, dict):
        raise _fail(source, "not a plan file: expected a JSON object")
    if doc.get("kind") not in (PLAN_KIND, SEARCH_KIND):
        raise _fail(source, f"not a plan file (kind {doc.get('kind')!r}); write one with `hgplan search -o plan.json`",
                    "kind")
    if str(doc.get("schema_version")) != SCHEMA_VERSION:
        raise _fail(source, f"plan file schema version {doc.get('schema_version')!r} is not supported by hgplan "
                            f"{__version__} (expects {SCHEMA_VERSION}); re-run `hgplan search -o` with this version",
                    "schema_version")
    if doc["kind"] == SEARCH_KIND:
        raise _fail(source, "this is search output, not a plan file; write the plan with `hgplan search -o plan.json`",
                    "kind")
    pred = doc.get("prediction")
    if not isinstance(pred, dict) or not isinstance(pred.get("tokens_per_s"), (int, float)) or pred["tokens_per_s"] <= 0:
        raise _fail(source, "malformed plan file: prediction.tokens_per_s is missing or not a positive number",
                    "prediction")
    try:
        return PlanFile.model_validate(doc)
    except ValidationError as exc:
        raise _shape_errors(exc, source) from None


def load_plan(doc: Any, source: str, catalog, *, verify_prediction: bool = False) -> LoadedPlan:
    """A plan file's plan, fleet, model and training, checked; InputError on any inconsistency.

    The embedded input texts must match their recorded digests. With verify_prediction (the commands that report
    the stored prediction as the plan's number: the CI gate's baseline) the stored prediction must also be what the
    embedded inputs give; diff, explain and export recompute it from the inputs and never read it."""
    from hgplan.inputs import load_cluster, load_model, make_training
    from hgplan.validate import check_plan

    pf = parse_plan_file(doc, source)
    _verify_digests(pf, source)
    if pf.inputs.profile is not None:
        from hgplan.calibrate import apply_profile

        catalog = apply_profile(catalog, parse_profile(pf.inputs.profile.yaml, f"{source}#inputs.profile"))
    fleet, _ = load_cluster(pf.inputs.cluster.yaml, f"{source}#inputs.cluster", catalog)
    model = load_model(pf.inputs.model.yaml, f"{source}#inputs.model")
    train = make_training(pf.inputs.training.model_dump(), model, f"{source}#inputs.training")
    plan = Plan.from_record(pf.plan)
    violations = check_plan(plan, fleet, model, train)
    if violations:
        raise InputError([InputIssue(source=source, line=None, path=f"plan ({v.rule})", message=v.message)
                          for v in violations])
    lp = LoadedPlan(plan=plan, fleet=fleet, model=model, train=train, file=pf)
    if verify_prediction:
        _verify_prediction(lp, source)
    return lp


def _verify_digests(pf: PlanFile, source: str) -> None:
    """Each embedded input text must still have the sha256 the search recorded for it."""
    issues = []
    for key in ("cluster", "model", "profile"):
        embedded = getattr(pf.inputs, key, None)
        if embedded is None or not embedded.sha256:
            continue
        actual = text_sha256(embedded.yaml)
        if actual != embedded.sha256:
            issues.append(InputIssue(source=source, line=None, path=f"inputs.{key}.yaml",
                                     message=f"the embedded {key} text has sha256 {actual[:12]}... but the plan file "
                                             f"records {embedded.sha256[:12]}...: it was edited after the search; "
                                             "re-run `hgplan search -o` on the changed input instead of editing the "
                                             "plan file"))
    if issues:
        raise InputError(issues)


VERIFIED_FIELDS = ("iteration_time_s", "tokens_per_s", "mfu", "num_microbatches", "fits")
"""Stored prediction fields a plan file must reproduce from its embedded inputs (same hgplan version)."""


def _verify_prediction(lp: LoadedPlan, source: str) -> None:
    """The stored prediction must be what the embedded inputs give. Only checked when the file was written by this
    hgplan version: another version's cost model may predict otherwise, and that is not tampering."""
    pf = lp.file
    if pf.hgplan_version != __version__:
        return
    fresh = lp.recomputed().prediction
    issues = [InputIssue(source=source, line=None, path=f"prediction.{name}",
                         message=f"the plan file says {getattr(pf.prediction, name)!r} but its embedded inputs give "
                                 f"{getattr(fresh, name)!r} with hgplan {__version__}: the prediction was edited; "
                                 "re-run `hgplan search -o` to get a plan file that tells the truth")
              for name in VERIFIED_FIELDS if getattr(pf.prediction, name) != getattr(fresh, name)]
    if issues:
        raise InputError(issues)


def input_differences(baseline: PlanFile, *, cluster_sha256: str, model_sha256: str, train: TrainingSettings,
                      target: str) -> list[str]:
    """What a CI gate's baseline was planned for that this search is not: fleet, model, training settings, target.
    Comparing throughput across different inputs says nothing about a regression."""
    from hgplan.report import training_record

    out = []
    if baseline.inputs.cluster.sha256 != cluster_sha256:
        out.append(f"the cluster differs (baseline {baseline.inputs.cluster.ref}, sha256 "
                   f"{baseline.inputs.cluster.sha256[:12]}...; now {cluster_sha256[:12]}...)")
    if baseline.inputs.model.sha256 != model_sha256:
        out.append(f"the model differs (baseline {baseline.inputs.model.name}, sha256 "
                   f"{baseline.inputs.model.sha256[:12]}...; now {model_sha256[:12]}...)")
    old, new = baseline.inputs.training.model_dump(), training_record(train).model_dump()
    out += [f"training {key} differs (baseline {old.get(key)!r}, now {new.get(key)!r})"
            for key in changed_keys(old, new)]
    if str(baseline.inputs.target) != str(target):
        out.append(f"the target differs (baseline {baseline.inputs.target}, now {target})")
    return out


SEARCH_SPACE = (("max_pp", "--max-pp"), ("max_vpp", "--max-vpp"), ("time_limit_s", "--time-limit"),
                ("max_gap", "--max-gap"), ("solver_params", "--solver-params"))
"""What a gate's baseline and the new search may have searched differently (SolverRecord fields, their flags)."""


def search_differences(baseline: PlanFile, solver: SolverRecord) -> list[str]:
    """How the new search differs from the baseline's in what it searched and for how long: a slower best plan may
    then come from the search, not from the inputs (a warning; a field the baseline's file lacks is skipped)."""
    if baseline.solver is None:
        return []
    out = []
    for key, flag in SEARCH_SPACE:
        old, new = getattr(baseline.solver, key), getattr(solver, key)
        if key in baseline.solver.model_fields_set and old != new:
            out.append(f"the baseline was searched with {flag} {_flag_value(key, old)}, this search with "
                       f"{_flag_value(key, new)}: a change in its best plan may come from the search, not from the "
                       "fleet, model or settings")
    return out


def _flag_value(key: str, value) -> str:
    if key == "max_gap":
        return f"{value:.2%}"
    if key == "max_pp" and value is None:
        return "unset (every layer count)"
    if key == "solver_params":
        return repr(value) if value else "unset"
    return f"{value:g}" if isinstance(value, float) else str(value)


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys whose values differ between two records (a key missing from one counts as None there), sorted."""
    return [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def regression_check(baseline: PlanFile, report: SearchReport, bound: float) -> RegressionRecord:
    """Compare the fresh best plan with a committed one: failed when it is slower by more than `bound`."""
    old = float(baseline.prediction.tokens_per_s)
    new = float(report.plans[0].prediction.tokens_per_s)
    change = new / old - 1
    failed = change < -bound
    verdict = "REGRESSION" if failed else "ok"
    return RegressionRecord(baseline_tokens_per_s=old, tokens_per_s=new, change=round(change, 6), max_regression=bound,
                            failed=failed,
                            message=f"{verdict}: best plan {new:,.0f} tokens/s vs baseline {old:,.0f} ({change:+.2%}; "
                                    f"allowed -{bound:.2%})")


DIFF_FIELDS = ("tp", "pp", "dp", "cp", "micro_batch_size", "vpp", "recompute", "sequence_parallel", "zero_stage",
               "distributed_optimizer", "overlap_grad_reduce")
"""Plan fields `diff` compares one by one (the stages are compared as a whole)."""


def _stages_text(plan: PlanRecord) -> str:
    """A plan's stages as `diff` prints them: group:layers, with an asymmetric plan's own tp/dp/recompute."""
    return " ".join(f"{s.node_group}:{s.layers}" + (f"({s.tp}/{s.dp}/{s.recompute})" if s.tp is not None else "")
                    for s in plan.stages)


def diff_plans(a: PlanFile, b: PlanFile, name_a: str, name_b: str) -> dict[str, Any]:
    """What changed between two plan files: degrees, stages (with an asymmetric plan's per-stage degrees), the inputs
    (cluster, model and profile digests, training settings, target) and predicted throughput."""
    changes = []
    for key in DIFF_FIELDS:
        va, vb = getattr(a.plan, key), getattr(b.plan, key)
        if va != vb:
            changes.append({"field": key, "a": va, "b": vb})
    sa, sb = _stages_text(a.plan), _stages_text(b.plan)
    if sa != sb:
        changes.append({"field": "stages", "a": sa, "b": sb})
    for key in ("cluster", "model", "profile"):
        ha, hb = (getattr(f.inputs, key).sha256 if getattr(f.inputs, key) else None for f in (a, b))
        if ha != hb:
            changes.append({"field": f"inputs.{key}", "a": ha and ha[:12], "b": hb and hb[:12]})
    train_a, train_b = a.inputs.training.model_dump(), b.inputs.training.model_dump()
    changes += [{"field": f"inputs.training.{key}", "a": train_a.get(key), "b": train_b.get(key)}
                for key in changed_keys(train_a, train_b)]
    if a.inputs.target != b.inputs.target:
        changes.append({"field": "inputs.target", "a": a.inputs.target, "b": b.inputs.target})
    ta, tb = a.prediction.tokens_per_s, b.prediction.tokens_per_s
    return {"a": name_a, "b": name_b, "changes": changes,
            "prediction": {"a_tokens_per_s": ta, "b_tokens_per_s": tb, "change": round(tb / ta - 1, 6),
                           "a_iteration_time_s": a.prediction.iteration_time_s,
                           "b_iteration_time_s": b.prediction.iteration_time_s}}
