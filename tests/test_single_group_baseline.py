"""The single-group baseline of a fleet of one node group: the search was that group's own, so its plans are the
baseline's (planner/api.py), the same baseline as searching the group again, without the second search."""

from __future__ import annotations

from dataclasses import replace

from hgplan.documents import ClusterInput
from hgplan.domain import Precision, TrainingSettings
from hgplan.inputs import load_cluster, load_model
from hgplan.io import catalog
from hgplan.planner import api
from hgplan.planner import baselines as bl
from hgplan.planner.options import SearchOptions
from hgplan.report import plan_record, prediction_record


def test_one_group_takes_the_search_plans_for_its_baseline(monkeypatch):
    cat = catalog()
    two_site, _ = load_cluster(cat.cluster_texts["two-site"], "two-site", cat)
    fleet = replace(two_site, name="one-group", groups=two_site.groups[:1], links=())
    model = load_model(cat.model_texts["llama3.1-8b"], "llama3.1-8b")
    train = TrainingSettings(seq_length=4096, global_batch_size=512)
    opts = SearchOptions(budget_s=60)
    again = bl.single_group(fleet, model, train, opts)  # what the baseline was: the group searched once more

    def no_second_search(*args, **kwargs):
        raise AssertionError("the only group was searched again for its baseline")

    monkeypatch.setattr(bl, "single_group", no_second_search)
    report, _ = api.plan_training(fleet, model, train, opts, cluster=ClusterInput(ref="one-group", sha256=""),
                                  model_ref=model.name)
    single = report.baselines["single_group"].to_json_dict()
    assert single["available"] and again.prediction is not None
    assert single["prediction"] == prediction_record(again.prediction).to_json_dict()
    assert single["plan"] == plan_record(again.plan).to_json_dict()


def test_the_baseline_is_never_behind_a_searched_plan_on_one_group():
    """The single-group baseline chooses among every checked plan on one group, polished ones included. On 512
    H100s (llama3.1-70b, fp8, global batch 256) the search returns a polished pp 8 plan of 3.180 s; until 2026-11-29
    the baseline took the search's first plans before polishing, 3.355 s, and read "1.055x faster than single_group"
    on a fleet that has no other group."""
    cat = catalog()
    text = ("name: h512\nsites:\n  - name: dc\n    node_groups:\n      - {name: h100, count: 64, gpu: H100-SXM5-80GB, "
            "gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}\n")
    fleet, _ = load_cluster(text, "h512", cat)
    model = load_model(cat.model_texts["llama3.1-70b"], "llama3.1-70b")
    train = TrainingSettings(seq_length=8192, global_batch_size=256, precision=Precision.FP8)
    report, _ = api.plan_training(fleet, model, train, SearchOptions(budget_s=60),
                                  cluster=ClusterInput(ref="h512", sha256=""), model_ref=model.name)
    single = report.baselines["single_group"].to_json_dict()
    best = report.plans[0].prediction.iteration_time_s
    assert single["prediction"]["iteration_time_s"] == best and single["speedup"] == 1.0, (single, best)
