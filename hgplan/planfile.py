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
