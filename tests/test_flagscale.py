"""The asymmetric (FlagScale process-mesh) family: plan objects, cost model, search, validator, export round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from hgplan.cli import app
from hgplan.costmodel.evaluate import evaluate
from hgplan.costmodel.reshard import rank_slice_bytes
from hgplan.documents import PlanRecord
from hgplan.domain import Target
from hgplan.errors import PlanningError
from hgplan.export.flagscale import export_flagscale
from hgplan.export.flagscale_rules import flagscale_violations, read_back
from hgplan.inputs import make_training
from hgplan.io import catalog, resolve_cluster, resolve_model
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
from hgplan.planner.costs import CostSource
from hgplan.planner.mesh_search import mesh_search
from hgplan.planner.mesh_tables import MESH_RECOMPUTE, host_options
from hgplan.planner.options import SearchOptions
from hgplan.render import stage_summary
from hgplan.planner.seeded import seeded_search
from hgplan.validate import check_plan

ROOT = Path(__file__).resolve().parent.parent
A100_T4 = (ROOT / "benchmarks" / "data" / "a100-t4.yaml").read_text()  # 4 A100 + 28 T4


@pytest.fixture(scope="module")
def a100_t4(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "a100-t4.yaml"
    path.write_text(A100_T4)
    fleet, _, _ = resolve_cluster(str(path), catalog())
    model, _ = resolve_model("gpt-1.7b")
    train = make_training({"seq_length": 2048, "global_batch_size": 128, "precision": "fp16"}, model)
    return path, fleet, model, train


def _mesh_plan() -> Plan:
    """A100 mesh dp 4 (16 layers), T4 mesh dp 8 over three stages, micro-batch 2 on the first mesh."""
    cfg = ParallelConfig(tp=1, pp=4, dp=4, micro_batch_size=2, zero_stage=1)
    t4 = {"tp": 1, "dp": 8, "recompute": Recompute.NONE}
    return Plan(config=cfg, stages=(StageAssignment(node_group="dc/a100", num_layers=16, tp=1, dp=4,
                                                    recompute=Recompute.NONE),
                                    *(StageAssignment(node_group="dc/t4", num_layers=n, **t4) for n in (3, 3, 2))))


def test_stage_config_keeps_samples_per_step():
    plan = _mesh_plan()
    assert plan.asymmetric and plan.world_size == 4 + 3 * 8
    t4 = plan.stage_config(1)
    assert (t4.dp, t4.micro_batch_size) == (8, 1)  # 4 x 2 samples per step over dp 8
    assert t4.num_microbatches(128) == plan.config.num_microbatches(128) == 16
    assert plan.meshes() == [(0, 1), (1, 3)]


def test_reshard_slices():
    model, _ = resolve_model("gpt-1.7b")
    train = make_training({"seq_length": 2048, "global_batch_size": 128}, model)
    a = ParallelConfig(tp=2, pp=2, dp=4, micro_batch_size=2, sequence_parallel=True)
    b = ParallelConfig(tp=4, pp=2, dp=2, micro_batch_size=4, sequence_parallel=True)
    whole = 8 * 2048 * model.hidden_size * 2
    assert rank_slice_bytes(model, a, train) == whole / 8 == rank_slice_bytes(model, b, train)


def test_mesh_plan_is_valid_and_beats_stock(a100_t4):
    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    assert check_plan(plan, fleet, model, train) == []
    pred = evaluate(plan, fleet, model, train)
    assert pred.fits and any(b.get("reshard") for b in pred.boundaries)
    stock = Plan(config=ParallelConfig(tp=1, pp=6, dp=4, micro_batch_size=1, zero_stage=1),
                 stages=(StageAssignment(node_group="dc/a100", num_layers=17),
                         *(StageAssignment(node_group="dc/t4", num_layers=n) for n in (2, 2, 1, 1, 1))))
    assert pred.iteration_time_s < evaluate(stock, fleet, model, train).iteration_time_s


@pytest.mark.parametrize("change,rule", [
    ({"dp": 3}, "mesh_dp"), ({"tp": 2}, "mesh_tied_tp"), ({"dp": 16}, "capacity"),
    ({"recompute": Recompute.SELECTIVE}, "mesh_recompute")])
def test_validator_refuses_broken_meshes(a100_t4, change, rule):
    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    last = replace(plan.stages[-1], **change)
    rules = {v.rule for v in check_plan(replace(plan, stages=plan.stages[:-1] + (last,)), fleet, model, train)}
    assert rule in rules


def test_selective_is_refused_only_beside_other_kinds(a100_t4):
    """FlagScale takes selective recomputation for the whole model only: on every stage it is a valid plan."""
    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    every = replace(plan, stages=tuple(replace(st, recompute=Recompute.SELECTIVE) for st in plan.stages))
    assert "mesh_recompute" not in {v.rule for v in check_plan(every, fleet, model, train)}
    full = replace(plan, stages=plan.stages[:-1] + (replace(plan.stages[-1], recompute=Recompute.FULL),))
    assert "mesh_recompute" not in {v.rule for v in check_plan(full, fleet, model, train)}


def test_mesh_options_are_full_or_none(a100_t4):
    _, fleet, model, train = a100_t4
    costs = CostSource(fleet, model, train)
    kinds = {c.recompute for g in fleet.groups for c in host_options(costs, g, 8, 4, SearchOptions())}
    assert kinds == set(MESH_RECOMPUTE) == {Recompute.NONE, Recompute.FULL}
    only = SearchOptions(recompute_options=(Recompute.SELECTIVE, Recompute.FULL))
    assert {c.recompute for g in fleet.groups for c in host_options(costs, g, 8, 4, only)} == {Recompute.FULL}


LAB = Path(__file__).resolve().parent / "data" / "lab.yaml"


def test_the_searched_best_exports():
    """H100 and L40S nodes, llama3.1-8b at 8,192 tokens: the best plan was an L40S mesh with selective recomputation
    beside an H100 mesh with none, which FlagScale cannot run (export refused it, rule R13); now every plan of the
    family is one it runs, and the best exports."""
    from hgplan.documents import ClusterInput
    from hgplan.planner.api import plan_training

    fleet, _, _ = resolve_cluster(str(LAB), catalog())
    model, _ = resolve_model("llama3.1-8b")
    train = make_training({"seq_length": 8192, "global_batch_size": 256}, model)
    # twenty plans: the stock family's come first on this fleet (since 2026-11-30 with the probes' plans among them,
    # planner/probe.py), and the asymmetric ones after them
    report, _ = plan_training(fleet, model, train, SearchOptions(target=Target.FLAGSCALE, budget_s=60, top_k=20),
                              cluster=ClusterInput(ref="lab", sha256=""), model_ref="llama3.1-8b",
                              with_baselines=False)
    plans = [Plan.from_record(p.plan) for p in report.plans]
    assert any(p.asymmetric for p in plans)
    for plan in (p for p in plans if p.asymmetric):
        assert Recompute.SELECTIVE not in {plan.stage_config(i).recompute for i in range(len(plan.stages))}
    export_flagscale(plans[0], fleet, model, train)


def test_prove_gap_says_it_covers_the_stock_family_only(a100_t4):
    """--prove-gap with --target flagscale proves the stock family's bound under the simulator, not the mesh
    family's: the gap stays an estimate, and a warning says why, with the bound it did prove."""
    from hgplan.documents import ClusterInput
    from hgplan.planner.api import plan_training

    _, fleet, model, train = a100_t4
    report, _ = plan_training(fleet, model, train, SearchOptions(target=Target.FLAGSCALE, budget_s=60, prove_gap=True),
                              cluster=ClusterInput(ref="a100-t4", sha256=""), model_ref="gpt-1.7b",
                              with_baselines=False)
    s = report.search
    assert s.proof is not None and s.proof.bound_s > 0 and not s.gap_proven
    said = [w for w in report.warnings if w.startswith("--prove-gap covers the stock family only")]
    assert len(said) == 1 and f"{s.proof.bound_s:.3f} s" in said[0]


def test_what_ifs_of_a_mesh_plan_propose_nothing_flagscale_refuses(a100_t4):
    """A mesh plan with a 14% bubble, even layers and micro-batches a multiple of its stages: the interleaving
    what-if priced --vpp 2, which FlagScale's heterogeneous mode refuses (the validator's mesh_cp_vpp); now none."""
    from hgplan.explainer import BUBBLE_WHATIF, what_ifs

    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    plan = replace(plan, stages=plan.stages[:1] + tuple(replace(st, num_layers=n)
                                                        for st, n in zip(plan.stages[1:], (4, 2, 2))))
    assert check_plan(plan, fleet, model, train) == []
    pred = evaluate(plan, fleet, model, train)
    assert pred.bubble_fraction > BUBBLE_WHATIF and pred.num_microbatches % plan.config.pp == 0
    assert "mesh_cp_vpp" in {v.rule for v in check_plan(replace(plan, config=replace(plan.config, vpp=2)), fleet,
                                                        model, train)}
    assert not [w for w in what_ifs(plan, fleet, model, train, pred) if "vpp" in w.what_if]


def test_a_search_complete_above_its_max_gap_says_so(a100_t4, monkeypatch):
    """Every mesh solve stopping unproven (as CP-SAT's do on the 16-group fleet): the search ends complete, its
    retries spent, with its gap above --max-gap; a warning says so (before, only the figures did)."""
    from hgplan.documents import ClusterInput
    from hgplan.planner import mesh_search as search_module
    from hgplan.planner.api import plan_training
    from hgplan.planner.mesh_model import MeshSolution

    def unproven(t, params, **kw):
        return MeshSolution(status="UNKNOWN", objective=None, bound=0.0, assign=(), choice=(), layers=(),
                            deterministic_time=0.0, wall_time_s=0.0)

    monkeypatch.setattr(search_module, "solve_mesh", unproven)
    _, fleet, model, train = a100_t4
    report, _ = plan_training(fleet, model, train, SearchOptions(target=Target.FLAGSCALE, budget_s=60),
                              cluster=ClusterInput(ref="a100-t4", sha256=""), model_ref="gpt-1.7b",
                              with_baselines=False)
    assert report.asymmetric.stopped_by == "complete" and report.search.relative_gap > 0.005
    said = [w for w in report.warnings if w.startswith("the search ended with a gap of")]
    assert len(said) == 1 and f"{report.search.relative_gap:.2%}" in said[0] and "above --max-gap 0.50%" in said[0]


def test_mesh_search_never_slower_than_stock(a100_t4):
    _, fleet, model, train = a100_t4
    opts = SearchOptions(target=Target.FLAGSCALE, budget_s=60)
    stock, _ = seeded_search(fleet, model, train, opts)
    res = mesh_search(CostSource(fleet, model, train), list(fleet.groups), opts, incumbent_us=stock.best_us)
    assert res.found and res.best_us < stock.best_us
    best = res.found[0].plan()
    assert best.asymmetric and check_plan(best, fleet, model, train) == []
    assert res.bound_us <= res.best_us
    assert res.found[0].tables.objective(list(res.found[0].solution.assign), dict(res.found[0].solution.choice),
                                         list(res.found[0].solution.layers)) == res.found[0].solution.objective


def test_export_round_trips_through_omegaconf(a100_t4):
    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    ex = export_flagscale(plan, fleet, model, train)
    cfg = OmegaConf.to_container(OmegaConf.create(ex.files["conf/train/hgplan.yaml"]))
    back = read_back(cfg, ex.files["hostfile"].splitlines())
    assert back.meshes == [(1, 1, 1, 4, 1), (1, 1, 1, 8, 3)]
    assert back.layer_split == [16, 3, 3, 2]
    assert back.rank_blocks == [("A100-SXM4-40GB", 0, 3), ("T4", 4, 27)]
    exp = OmegaConf.to_container(OmegaConf.create(ex.files["conf/train_hgplan.yaml"]))
    assert exp["experiment"]["runner"]["rdzv_backend"] == "static"
    assert flagscale_violations(cfg, exp, ex.files["hostfile"].splitlines(), world_size=28, num_layers=24) == []


def test_llama3_8b_reference_example_round_trips(tmp_path):
    """flagscale-hetero.md section 7: two meshes (tp 2 dp 4, tp 4 dp 2) of A800 and A100, split 18/14."""
    (tmp_path / "f.yaml").write_text("""name: ref
description: A800 + A100
sites:
  - name: dc
    node_groups:
      - {name: a800, count: 1, gpu: A800-SXM4-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
      - {name: a100, count: 1, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
""")
    fleet, _, _ = resolve_cluster(str(tmp_path / "f.yaml"), catalog())
    model, _ = resolve_model("llama3.1-8b")
    train = make_training({"seq_length": 4096, "global_batch_size": 16}, model)
    plan = Plan(config=ParallelConfig(tp=2, pp=2, dp=4, micro_batch_size=1, sequence_parallel=True, zero_stage=1),
                stages=(StageAssignment(node_group="dc/a800", num_layers=18, tp=2, dp=4, recompute=Recompute.NONE),
                        StageAssignment(node_group="dc/a100", num_layers=14, tp=4, dp=2, recompute=Recompute.NONE)))
    assert check_plan(plan, fleet, model, train) == []
    assert plan.stage_config(1).micro_batch_size == 2 and plan.config.num_microbatches(16) == 4
    ex = export_flagscale(plan, fleet, model, train)
    cfg = OmegaConf.to_container(OmegaConf.create(ex.files["conf/train/hgplan.yaml"]))
    h = cfg["system"]["hetero"]
    assert h["hetero_process_meshes"] == [2, 1, 1, 4, 1, 4, 1, 1, 2, 1]
    assert h["hetero_pipeline_layer_split"] == [18, 14]
    assert cfg["system"]["tensor_model_parallel_size"] == 4 and cfg["system"]["sequence_parallel"] is True
    back = read_back(cfg, ex.files["hostfile"].splitlines())
    assert [(s, e) for _, s, e in back.rank_blocks] == [(0, 7), (8, 15)]


def test_violations_name_the_rule():
    cfg = {"system": {"pipeline_model_parallel_size": 3, "hetero": {
        "hetero_process_meshes": [2, 1, 1, 4, 1, 4, 2, 1, 3, 1], "hetero_pipeline_layer_split": [10, 10],
        "hetero_device_types": ["A", "B"], "hetero_current_device_type": "A"}},
        "model": {"micro_batch_size": 1, "global_batch_size": 16}}
    exp = {"experiment": {"runner": {}}}
    rules = {r for r, _ in flagscale_violations(cfg, exp, ["h1 slots=8 type=A", "h1 slots=8"], world_size=16,
                                                num_layers=32)}
    assert {"R2", "R3", "R5", "R7", "R9", "R11", "R14", "R15"} <= rules


def test_cli_search_and_export_flagscale(a100_t4, tmp_path):
    path = a100_t4[0]
    runner = CliRunner()
    r = runner.invoke(app, ["search", "-c", str(path), "-m", "gpt-1.7b", "--seq-len", "2048", "--global-batch", "128",
                            "--precision", "fp16", "--target", "flagscale", "--time-limit", "60", "--json",
                            "-o", str(tmp_path / "plan.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["asymmetric"]["speedup_over_stock"] >= 1.0
    # what the stock best leaves out, said
    assert "no interleaving, no context parallelism" in doc["asymmetric"]["stock_family"]
    # the mesh models' own CP-SAT parameters, recorded (plain search has no such field: tests/test_cli_contract.py)
    assert doc["solver"]["mesh_params"] == "cp_model_probing_level: 0 add_mir_cuts: false add_cg_cuts: false " \
                                           "symmetry_level: 0 max_presolve_iterations: 1 add_zero_half_cuts: false"
    assert doc["plans"][0]["prediction"]["iteration_time_s"] <= doc["asymmetric"]["stock_iteration_time_s"]
    r = runner.invoke(app, ["export", str(tmp_path / "plan.json"), "-f", "flagscale", "-o", str(tmp_path / "fs")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fs" / "conf" / "train" / "hgplan.yaml").exists()
    assert doc["asymmetric"]["best_is_asymmetric"]
    r = runner.invoke(app, ["export", str(tmp_path / "plan.json"), "-f", "megatron"])
    assert r.exit_code == 1 and "flagscale" in r.output
    # report: FlagScale's launch by default for an asymmetric plan; another target's refusal shown, not an error
    r = runner.invoke(app, ["report", str(tmp_path / "plan.json"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert 'data-launch="flagscale"' in (tmp_path / "r.html").read_text()
    r = runner.invoke(app, ["report", str(tmp_path / "plan.json"), "-f", "megatron", "-o", str(tmp_path / "m.html")])
    assert r.exit_code == 0 and 'data-launch="refused"' in (tmp_path / "m.html").read_text()
    # explain: the mesh boundary's re-sharding and the speedup over the stock best, both from the plan file
    r = runner.invoke(app, ["explain", str(tmp_path / "plan.json"), "--json"])
    assert r.exit_code == 0, r.output
    ex = json.loads(r.stdout)
    assert ex["prediction"]["iteration_time_s"] == doc["plans"][0]["prediction"]["iteration_time_s"]
    meshes = [b for b in ex["boundaries"] if "reshard" in b]
    assert meshes and all((b["reshard"]["from_tp"], b["reshard"]["from_dp"])
                          != (b["reshard"]["to_tp"], b["reshard"]["to_dp"]) for b in meshes)
    # each side sends for num_microbatches x one message (the line summed both sides as one share of the iteration)
    b, n = meshes[0], ex["prediction"]["num_microbatches"]
    [line] = [f for f in ex["findings"] if f.startswith(f"mesh boundary: stage {b['from_stage']} ")]
    assert f"stage {b['from_stage']} sends activations and stage {b['to_stage']} gradients for " \
           f"{n * b['send_s']:.2f} s each" in line, line
    assert ex["baselines"]["stock"]["speedup"] == pytest.approx(doc["asymmetric"]["speedup_over_stock"], abs=1e-3)
    # the table as a terminal 220 columns wide shows it (the in-process console keeps the width it started with)
    r = subprocess.run([sys.executable, "-m", "hgplan.cli", "explain", str(tmp_path / "plan.json")],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "220"}, timeout=120)
    assert r.returncode == 0 and "process meshes" in r.stdout and " (first mesh) x " in r.stdout
    # each mesh's own degrees and micro-batch: dp x micro-batch samples per step on every mesh
    plan = doc["plans"][0]["plan"]
    for st in plan["stages"]:
        mbs = plan["dp"] * plan["micro_batch_size"] // st["dp"]
        assert f" {st['tp']}/{st['dp']}/{mbs}/{st['recompute']} " in r.stdout, (st, r.stdout)
    assert len({st["dp"] for st in plan["stages"]}) > 1  # meshes of different dp: micro-batches differ
    # and the search table's stages column says the same
    summary = stage_summary(PlanRecord.model_validate(plan))
    for st in plan["stages"]:
        mbs = plan["dp"] * plan["micro_batch_size"] // st["dp"]
        assert f"{st['node_group']} (tp {st['tp']} dp {st['dp']} mbs {mbs} {st['recompute']}): " in summary, summary


def test_export_refuses_a_plan_breaking_a_rule(a100_t4):
    _, fleet, model, train = a100_t4
    plan = _mesh_plan()
    mixed = replace(plan, stages=(replace(plan.stages[0], recompute=Recompute.SELECTIVE),) + plan.stages[1:])
    with pytest.raises(PlanningError, match="R13"):
        export_flagscale(mixed, fleet, model, train)


def test_flagscale_target_keeps_the_polished_stock_plan():
    """--target flagscale polishes the stock family within its half of the time limit, before the mesh search runs
    to the deadline: its stock best is the plain search's (two-site: 10.228 s, not the closed form's 10.935 s)."""
    from hgplan.documents import ClusterInput
    from hgplan.domain import TrainingSettings
    from hgplan.planner.api import plan_training

    fleet, _, _ = resolve_cluster("two-site", catalog())
    model, _ = resolve_model("llama3.1-70b")
    train = TrainingSettings(seq_length=4096, global_batch_size=512)
    ref = ClusterInput(ref="two-site", sha256="")
    plain, _ = plan_training(fleet, model, train, SearchOptions(budget_s=20), cluster=ref, model_ref="llama3.1-70b",
                             with_baselines=False)
    flag, _ = plan_training(fleet, model, train, SearchOptions(target=Target.FLAGSCALE, budget_s=20), cluster=ref,
                            model_ref="llama3.1-70b", with_baselines=False)
    assert flag.asymmetric.stock_iteration_time_s == plain.plans[0].prediction.iteration_time_s
    assert flag.plans[0].prediction.iteration_time_s <= plain.plans[0].prediction.iteration_time_s


def test_mesh_solves_run_without_probing_unless_the_user_says(a100_t4, monkeypatch):
    """Every mesh solve gets MESH_MODEL_PARAMS, and --solver-params after them (so the user's word wins)."""
    from hgplan.planner import mesh_model
    from hgplan.planner.model import SolverParams
    from hgplan.planner.mesh_tables import build_mesh_tables

    _, fleet, model, train = a100_t4
    t = build_mesh_tables(CostSource(fleet, model, train), 8, 2, list(fleet.groups),
                          SearchOptions(target=Target.FLAGSCALE))
    seen = []
    real = mesh_model.configure_solver
    monkeypatch.setattr(mesh_model, "configure_solver", lambda solver, params, log: (seen.append(params.extra),
                                                                                     real(solver, params, log)))
    mesh_model.solve_mesh(t, SolverParams(max_deterministic_time=1.0))
    n = len(seen)  # one per pair of end hosts where the candidate is solved per pair
    mesh_model.solve_mesh(t, SolverParams(max_deterministic_time=1.0, extra="cp_model_probing_level: 2"))
    assert n >= 1 and seen == [mesh_model.MESH_MODEL_PARAMS] * n + [
        mesh_model.MESH_MODEL_PARAMS + " cp_model_probing_level: 2"] * n


def test_polishing_runs_beside_the_mesh_search_and_changes_nothing(a100_t4, monkeypatch):
    """With --target flagscale the stock plans are polished in a thread while the mesh search runs
    (api._polish_and_meshes): on different threads, and the report is the one they give one after the other."""
    import threading
    from concurrent.futures import Future

    from hgplan.documents import ClusterInput
    from hgplan.planner import api

    _, fleet, model, train = a100_t4
    threads: dict[str, int] = {}

    def traced(name, real):
        return lambda *a, **k: (threads.__setitem__(name, threading.get_ident()), real(*a, **k))[1]

    monkeypatch.setattr(api, "polish", traced("polish", api.polish))
    monkeypatch.setattr(api, "_mesh_family", traced("meshes", api._mesh_family))

    def report() -> dict:
        doc, _ = api.plan_training(fleet, model, train, SearchOptions(target=Target.FLAGSCALE, budget_s=30),
                                   cluster=ClusterInput(ref="a100-t4", sha256=""), model_ref="gpt-1.7b",
                                   with_baselines=False)
        out = doc.to_json_dict()
        out["search"].pop("wall_time_s")
        return out

    beside = report()
    assert threads["polish"] != threads["meshes"]

    class OneAfterTheOther:  # runs each submitted call at once, in the caller's thread
        def __init__(self, n):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn):
            done = Future()
            done.set_result(fn())
            return done

    monkeypatch.setattr(api, "ThreadPoolExecutor", OneAfterTheOther)
    after = report()
    assert threads["polish"] == threads["meshes"]
    assert beside["search"]["stopped_by"] == "complete" and beside["asymmetric"]["speedup_over_stock"] > 1
    assert json.dumps(beside, sort_keys=True) == json.dumps(after, sort_keys=True)
