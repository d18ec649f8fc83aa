"""The single-group baseline of a fleet of one node group: the search was that group's own, so its plans are the
baseline's (planner/api.py), the same baseline as searching the group again, without the second search."""

from __future__ import annotations

from dataclasses import replace

from hgplan.documents import ClusterInput
from hgplan.domain import TrainingSettings
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
