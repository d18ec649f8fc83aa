"""Plan files: the best plan of a search, self-contained (the cluster and model texts travel inside)."""

from __future__ import annotations

import hashlib
from typing import Any

from hgplan import __version__
from hgplan.report import SCHEMA_VERSION

PLAN_KIND = "hgplan.plan"


def make_plan_file(search_doc: dict[str, Any], *, cluster_text: str, model_text: str) -> dict[str, Any]:
    best = search_doc["plans"][0]
    inputs = dict(search_doc["inputs"])
    inputs["cluster"] = {**inputs["cluster"], "yaml": cluster_text}
    inputs["model"] = {**inputs["model"], "yaml": model_text,
                       "sha256": hashlib.sha256(model_text.encode()).hexdigest()}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": PLAN_KIND,
        "hgplan_version": __version__,
        "inputs": inputs,
        "plan": best["plan"],
        "prediction": best["prediction"],
        "stages": best["stages"],
        "search": {k: v for k, v in search_doc["search"].items() if k != "wall_time_s"},
        "solver": search_doc["solver"],
        "baselines": {k: {kk: vv for kk, vv in v.items() if kk in ("available", "speedup", "description", "note",
                                                                     "prediction", "plan")}
                      for k, v in search_doc.get("baselines", {}).items()},
    }


def load_plan_doc(doc: Any, source: str, catalog) -> tuple:
    """(plan, fleet, model, train, doc) from a parsed plan file; InputError on another schema or inconsistency."""
    from hgplan.errors import InputError, InputIssue
    from hgplan.inputs import load_cluster, load_model, make_training
    from hgplan.plan import Plan
    from hgplan.validate import check_plan

    def fail(msg: str, path: str = "") -> None:
        raise InputError([InputIssue(source=source, line=None, path=path, message=msg)])

    if not isinstance(doc, dict):
        fail("not a plan file: expected a JSON object")
    if doc.get("kind") not in (PLAN_KIND, "hgplan.search"):
        fail(f"not a plan file (kind {doc.get('kind')!r}); write one with `hgplan search -o plan.json`", "kind")
    if str(doc.get("schema_version")) != SCHEMA_VERSION:
        fail(f"plan file schema version {doc.get('schema_version')!r} is not supported by hgplan {__version__} "
             f"(expects {SCHEMA_VERSION}); re-run `hgplan search -o` with this version", "schema_version")
    if doc["kind"] == "hgplan.search":
        fail("this is search output, not a plan file; write the plan with `hgplan search -o plan.json`", "kind")
    try:
        inputs = doc["inputs"]
        for key in ("cluster", "model"):
            if not isinstance(inputs[key]["yaml"], str):
                fail(f"malformed plan file: inputs.{key}.yaml must be the {key} file's text", f"inputs.{key}.yaml")
        fleet, _ = load_cluster(inputs["cluster"]["yaml"], f"{source}#inputs.cluster", catalog)
        model = load_model(inputs["model"]["yaml"], f"{source}#inputs.model")
        t = inputs["training"]
        if not isinstance(t, dict):
            fail("malformed plan file: inputs.training must be a mapping", "inputs.training")
        train = make_training(dict(t), model, f"{source}#inputs.training")
        plan = Plan.from_dict(doc["plan"])
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        fail(f"malformed plan file: {exc!r} is missing or invalid")
    pred = doc.get("prediction")
    if not isinstance(pred, dict) or not isinstance(pred.get("tokens_per_s"), (int, float)) or pred["tokens_per_s"] <= 0:
        fail("malformed plan file: prediction.tokens_per_s is missing or not a positive number", "prediction")
    violations = check_plan(plan, fleet, model, train)
    if violations:
        raise InputError([InputIssue(source=source, line=None, path=f"plan ({v.rule})", message=v.message)
                          for v in violations])
    _normalise(doc, plan)
    return plan, fleet, model, train


def _normalise(doc: dict[str, Any], plan) -> None:
    """Make every field that later code reads well-typed; drop malformed optional parts (baselines)."""
    for key in ("cluster", "model"):
        item = doc["inputs"][key]
        item["ref"] = item["ref"] if isinstance(item.get("ref"), str) else "(unnamed)"
        item["sha256"] = item["sha256"] if isinstance(item.get("sha256"), str) else ""
    pred = doc["prediction"]
    if not isinstance(pred.get("iteration_time_s"), (int, float)):
        pred["iteration_time_s"] = float("nan")
    doc["plan"] = plan.to_dict()
    clean = {}
    baselines = doc.get("baselines")
    for name, b in (baselines.items() if isinstance(baselines, dict) else []):
        if (isinstance(b, dict) and b.get("available") is True and isinstance(b.get("speedup"), (int, float))
                and isinstance(b.get("description"), str)):
            clean[str(name)] = {"available": True, "speedup": b["speedup"], "description": b["description"]}
    doc["baselines"] = clean


def regression_check(baseline_doc: dict[str, Any], search_doc: dict[str, Any], bound: float) -> dict[str, Any]:
    """Compare the fresh best plan with a committed one: failed when it is slower by more than `bound`."""
    old = float(baseline_doc["prediction"]["tokens_per_s"])
    new = float(search_doc["plans"][0]["prediction"]["tokens_per_s"])
    change = new / old - 1
    failed = change < -bound
    verdict = "REGRESSION" if failed else "ok"
    return {"baseline_tokens_per_s": old, "tokens_per_s": new, "change": round(change, 6), "max_regression": bound,
            "failed": failed,
            "message": f"{verdict}: best plan {new:,.0f} tokens/s vs baseline {old:,.0f} ({change:+.2%}; allowed "
                       f"-{bound:.2%})"}


def diff_plans(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> dict[str, Any]:
    changes = []
    for key in ("tp", "pp", "dp", "cp", "micro_batch_size", "vpp", "recompute", "sequence_parallel", "zero_stage"):
        if a["plan"].get(key) != b["plan"].get(key):
            changes.append({"field": key, "a": a["plan"].get(key), "b": b["plan"].get(key)})
    sa = [(s["node_group"], s["layers"]) for s in a["plan"]["stages"]]
    sb = [(s["node_group"], s["layers"]) for s in b["plan"]["stages"]]
    if sa != sb:
        changes.append({"field": "stages", "a": " ".join(f"{g}:{n}" for g, n in sa),
                        "b": " ".join(f"{g}:{n}" for g, n in sb)})
    for key in ("cluster", "model"):
        ha, hb = a["inputs"][key].get("sha256"), b["inputs"][key].get("sha256")
        if ha != hb:
            changes.append({"field": f"inputs.{key}", "a": (ha or "")[:12], "b": (hb or "")[:12]})
    ta, tb = a["prediction"]["tokens_per_s"], b["prediction"]["tokens_per_s"]
    return {"a": name_a, "b": name_b, "changes": changes,
            "prediction": {"a_tokens_per_s": ta, "b_tokens_per_s": tb, "change": round(tb / ta - 1, 6),
                           "a_iteration_time_s": a["prediction"]["iteration_time_s"],
                           "b_iteration_time_s": b["prediction"]["iteration_time_s"]}}


def plan_json_schema() -> dict[str, Any]:
    """JSON Schema of plan files (schema_version 1)."""
    stage = {"type": "object", "required": ["node_group", "layers"], "properties": {
        "node_group": {"type": "string", "description": "site/group hosting every GPU of the stage"},
        "layers": {"type": "integer", "minimum": 1}}}
    plan = {"type": "object", "required": ["tp", "pp", "dp", "micro_batch_size", "stages"], "properties": {
        "tp": {"type": "integer", "minimum": 1}, "pp": {"type": "integer", "minimum": 1},
        "dp": {"type": "integer", "minimum": 1}, "cp": {"type": "integer", "minimum": 1},
        "micro_batch_size": {"type": "integer", "minimum": 1}, "vpp": {"type": "integer", "minimum": 1},
        "recompute": {"enum": ["none", "selective", "full"]}, "sequence_parallel": {"type": "boolean"},
        "zero_stage": {"enum": [0, 1, 2, 3]}, "distributed_optimizer": {"type": "boolean"},
        "overlap_grad_reduce": {"type": "boolean"}, "stages": {"type": "array", "items": stage, "minItems": 1}}}
    prediction = {"type": "object", "required": ["iteration_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu"],
                  "properties": {k: {"type": "number"} for k in (
                      "iteration_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
                      "hfu", "bubble_fraction", "pipeline_s", "simulator_iteration_time_s")}}
    source = {"type": "object", "required": ["ref", "yaml"], "properties": {
        "ref": {"type": "string"}, "sha256": {"type": "string"}, "yaml": {"type": "string"}}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://hgplan.dev/schema/plan.json",
        "title": "hgplan plan file",
        "type": "object",
        "required": ["schema_version", "kind", "inputs", "plan", "prediction"],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "kind": {"const": PLAN_KIND},
            "hgplan_version": {"type": "string"},
            "inputs": {"type": "object", "required": ["cluster", "model", "training"], "properties": {
                "cluster": source, "model": source,
                "training": {"type": "object", "required": ["seq_length", "global_batch_size", "precision"]},
                "target": {"enum": ["megatron", "deepspeed"]}}},
            "plan": plan,
            "prediction": prediction,
            "stages": {"type": "array"},
            "search": {"type": "object"},
            "solver": {"type": "object"},
            "baselines": {"type": "object"},
        },
    }
