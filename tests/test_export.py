"""Issue 5: export, checked by megatron-core's own parser where it matters; plan files; the CI gate."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import jsonschema
import pytest
import yaml

from hgplan.export.deepspeed import ds_config, export_deepspeed
from hgplan.export.layout import build_layout
from hgplan.export.megatron import export_megatron, layout_string
from hgplan.io import catalog
from hgplan.plan import Plan, Recompute
from hgplan.planfile import load_plan


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    from typer.testing import CliRunner

    from hgplan.cli import app
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    r = CliRunner().invoke(app, ["search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096",
                                 "--global-batch", "512", "--time-limit", "30", "-o", str(path)])
    assert r.exit_code == 0, r.stderr
    return path


def loaded(path):
    doc = json.loads(path.read_text())
    lp = load_plan(doc, str(path), catalog())
    return lp.plan, lp.fleet, lp.model, lp.train, doc


def one_site(path):
    """The searched two-site plan's fleet, model and Megatron-LM settings, with a plan on the Beijing H100s alone
    (tp 8, pp 2, dp 4, uneven layers): the two-site plan's WAN boundary joins InfiniBand to RoCE, which DeepSpeed's
    export refuses (one NCCL transport per communicator and no per-communicator settings)."""
    from hgplan.explainer import build_plan
    _, fleet, model, train, doc = loaded(path)
    plan = build_plan(fleet=fleet, model=model, tp=8, pp=2, dp=4, cp=1, mbs=1, vpp=1, recompute="full",
                      sequence_parallel=True, zero_stage=1, overlap_grad_reduce=True, allow_cross_node_tp=False,
                      layers=[38, 42], stage_groups=["beijing/h100"] * 2)
    return plan, fleet, model, train, doc


def megatron_layout():
    if os.environ.get("CI") == "true":
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
    else:
        mod = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
        PipelineParallelLayerLayout = mod.PipelineParallelLayerLayout
    return PipelineParallelLayerLayout


def _per_stage_decoders(layout_str: str, pp: int) -> list[int]:
    """Per PP rank decoder counts, read by megatron-core's parser (all virtual chunks of a rank summed)."""
    P = megatron_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = P.from_str(layout_str, pp)
    stages = P.parse_str_to_list(layout_str)
    counts = [0] * pp
    for i, stage in enumerate(stages):
        counts[i % pp] += sum(1 for layer in stage if layer.name == "decoder")
    assert parsed is not None
    return counts


def test_exported_layout_passes_megatron_parser(plan_path):
    plan, fleet, model, train, _ = loaded(plan_path)
    ex = export_megatron(plan, fleet, model, train)
    layout = ex.argv[ex.argv.index("--pipeline-model-parallel-layout") + 1]
    assert _per_stage_decoders(layout, plan.config.pp) == [s.num_layers for s in plan.stages]
    P = megatron_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        P.from_str(layout, plan.config.pp).validate_layer_layout(num_layers=model.num_layers, mtp_num_layers=0)


@pytest.mark.parametrize("layers, vpp", [([10, 9, 9, 8], 1), ([2, 30, 3, 1], 1), ([12, 8, 8, 4], 2), ([8, 8, 8, 8], 4)])
def test_layout_strings_uneven_and_interleaved(layers, vpp):
    from hgplan.plan import ParallelConfig, StageAssignment
    plan = Plan(config=ParallelConfig(tp=1, pp=4, dp=1, vpp=vpp),
                stages=tuple(StageAssignment(node_group="a/b", num_layers=n) for n in layers))
    s = layout_string(plan)
    assert _per_stage_decoders(s, 4) == layers
    P = megatron_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = P.from_str(s, 4)
        parsed.validate_layer_layout(num_layers=sum(layers), mtp_num_layers=0)
    assert P.get_num_stages_from_str(s) == 4 * vpp


def test_generated_flags_exist_in_megatron_core(plan_path):
    """Flags that Megatron generates from dataclass fields must match megatron-core's fields (export-targets.md)."""
    megatron_layout()
    from megatron.core.transformer.transformer_config import TransformerConfig
    plan, fleet, model, train, _ = loaded(plan_path)
    argv = export_megatron(plan, fleet, model, train).argv
    fields = set(TransformerConfig.__dataclass_fields__)
    generated = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--sequence-parallel",
                 "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
                 "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--bf16", "--fp16",
                 "--hidden-dropout", "--attention-dropout", "--normalization", "--kv-channels", "--context-parallel-size",
                 "--attention-backend", "--transformer-impl"}
    for flag in argv:
        if flag in generated:
            assert flag[2:].replace("-", "_") in fields, flag
    # explicit add_argument flags of megatron/training/arguments.py (Megatron-LM main @ d98e8a64dd, export-targets.md 1.1)
    explicit = {"--pipeline-model-parallel-layout", "--micro-batch-size", "--global-batch-size", "--seq-length",
                "--max-position-embeddings", "--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights",
                "--disable-bias-linear", "--position-embedding-type", "--use-distributed-optimizer",
                "--overlap-grad-reduce", "--overlap-param-gather", "--nccl-communicator-config-path",
                "--distributed-timeout-minutes", "--make-vocab-size-divisible-by", "--squared-relu", "--rotary-base",
                "--use-rope-scaling", "--rope-scaling-factor"}
    # generated under another name (TransformerConfig's argparse_meta arg_names at d98e8a6)
    renamed = {"--norm-epsilon": "layernorm_epsilon"}
    assert set(renamed.values()) <= fields
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= generated | explicit | set(renamed), flags - generated - explicit - set(renamed)


def test_megatron_export_places_stages_on_their_groups(plan_path):
    plan, fleet, model, train, _ = loaded(plan_path)
    layout = build_layout(plan, fleet)
    size = plan.config.gpus_per_stage
    for r in layout.ranks:
        assert r.stage == r.rank // size
        assert fleet.group(plan.stages[r.stage].node_group).site in r.host
    ex = export_megatron(plan, fleet, model, train)
    assert "nccl_pg.yaml" in ex.files and "pp: {net_name: Socket}" in ex.files["nccl_pg.yaml"]
    pg = yaml.safe_load(ex.files["nccl_pg.yaml"])
    # every group that spans the pipeline stages (megatron/core/parallel_state.py) is on sockets
    assert {"pp", "mp", "tp_ep_pp"} <= set(pg) and all(v == {"net_name": "Socket"} for v in pg.values())
    assert ("intra_dist_opt_instance" in pg) == (plan.config.zero_stage == 1)
    assert any("world" in w for w in ex.warnings)  # the one group the file cannot configure is named
    assert all(n.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" for n in ex.nodes)
    assert [n.node_rank for n in ex.nodes] == list(range(len(ex.nodes)))
    assert sum(n.nproc for n in ex.nodes) == plan.config.world_size


def test_deepspeed_batch_identity_and_partition(plan_path):
    plan, fleet, model, train, _ = one_site(plan_path)
    cfg = ds_config(plan, train)
    c = plan.config
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * c.dp
    assert cfg["zero_optimization"]["stage"] <= 1  # pipeline parallel
    ex = export_deepspeed(plan, fleet, model, train)
    lines = ex.files["hostfile"].splitlines()
    assert len(lines) == len(build_layout(plan, fleet).nodes) and all(" slots=" in ln for ln in lines)
    if len({s.num_layers for s in plan.stages}) > 1:
        part = json.loads(ex.files["partition.json"])
        assert part["layers_per_stage"] == [s.num_layers for s in plan.stages]
        assert ex.warnings and "partition.json" in ex.warnings[0]


def test_cli_export_json_and_directory(cli, plan_path, tmp_path):
    r = cli("export", plan_path, "--format", "megatron", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["format"] == "megatron" and doc["argv"] and doc["nodes"][0]["argv"][0] == "torchrun"
    out = tmp_path / "launch"
    r = cli("export", plan_path, "--format", "torchrun", "-o", out)
    assert r.code == 0 and (out / "rank_map.csv").exists()
    again = cli("export", plan_path, "--format", "megatron", "-o", out)
    assert again.code == 2 and "not an empty directory" in again.stderr
    assert not (out / "megatron_args.txt").exists()  # nothing half-written


def test_export_refusals(cli, tmp_path, plan_path):
    """Features DeepSpeed cannot run are refused; a plan file with a swapped model is rejected."""
    from hgplan.errors import PlanningError
    from hgplan.plan import ParallelConfig, StageAssignment
    plan, fleet, model, train, _ = loaded(plan_path)
    groups = [s.node_group for s in plan.stages[:4]]
    interleaved = Plan(config=ParallelConfig(tp=8, pp=4, dp=1, vpp=2, sequence_parallel=True, zero_stage=1),
                       stages=tuple(StageAssignment(node_group=g, num_layers=20) for g in groups))
    with pytest.raises(PlanningError, match="no interleaved schedule"):
        export_deepspeed(interleaved, fleet, model, train)
    with pytest.raises(PlanningError, match="context parallelism"):
        export_deepspeed(Plan(config=ParallelConfig(tp=8, pp=1, dp=1, cp=2, zero_stage=1),
                              stages=(StageAssignment(node_group=groups[0], num_layers=80),)), fleet, model, train)
    bloom = json.loads(plan_path.read_text())
    bloom["inputs"]["model"]["yaml"] = catalog().model_texts["bloom-176b"]
    p = tmp_path / "bloom.json"
    p.write_text(json.dumps(bloom))
    r = cli("export", p, "--format", "megatron")
    assert r.code == 2 and "inputs.model.yaml" in r.stderr  # the swapped text no longer has its recorded digest
    # with a digest that matches the swapped text, the model itself is refused: BLOOM's positions stop at 2048
    bloom["inputs"]["model"]["sha256"] = hashlib.sha256(bloom["inputs"]["model"]["yaml"].encode()).hexdigest()
    p.write_text(json.dumps(bloom))
    r = cli("export", p, "--format", "megatron")
    assert r.code == 2
    assert "exceeds the model's max_position_embeddings (2048)" in r.stderr


def test_alibi_model_is_refused(plan_path):
    """The refusal depends only on the model: ALiBi positions cannot be expressed by Megatron-LM or
    Megatron-DeepSpeed, whatever the plan (tested on the exporters directly, no search needed)."""
    from hgplan.errors import PlanningError
    from hgplan.inputs import load_model
    plan, fleet, _, train, _ = loaded(plan_path)
    bloom = load_model(catalog().model_texts["bloom-176b"], "bloom-176b")
    for exporter in (export_megatron, export_deepspeed):
        with pytest.raises(PlanningError, match="ALiBi"):
            exporter(plan, fleet, bloom, train)


def test_plan_file_schema_and_tampering(cli, plan_path, tmp_path):
    schema = cli("schema", "plan").json()
    doc = json.loads(plan_path.read_text())
    jsonschema.validate(doc, schema)
    old = dict(doc, schema_version="0")
    p = tmp_path / "old.json"
    p.write_text(json.dumps(old))
    r = cli("explain", p)
    assert r.code == 2 and "schema version '0' is not supported" in r.stderr
    bad = json.loads(json.dumps(doc))
    bad["plan"]["stages"][0]["layers"] += 1
    p.write_text(json.dumps(bad))
    r = cli("export", p, "--format", "megatron")
    assert r.code == 2 and "sum to 81" in r.stderr
    bad = json.loads(json.dumps(doc))
    bad["plan"]["stages"][0]["node_group"] = "mars/h100"
    p.write_text(json.dumps(bad))
    r = cli("explain", p)
    assert r.code == 2 and "unknown node group 'mars/h100'" in r.stderr
    p.write_text("{not json")
    assert cli("explain", p).code == 2


def test_gate_names_a_search_that_searched_otherwise(plan_path):
    """A gate whose baseline was searched over another space or budget (--max-pp, --max-vpp, --time-limit, --max-gap,
    --solver-params) says so: a slower best plan may come from the search, not from the inputs. A plan file written
    before max_vpp was recorded (null) is not said to differ in it."""
    from hgplan.io import catalog
    from hgplan.planfile import load_plan, search_differences

    base = load_plan(json.loads(plan_path.read_text()), str(plan_path), catalog()).file
    assert search_differences(base, base.solver) == []
    other = base.solver.model_copy(update={"max_vpp": 4, "max_pp": 8, "max_gap": 0.01})
    notes = search_differences(base, other)
    assert [n.split(",")[0] for n in notes] == ["the baseline was searched with --max-pp unset (every layer count)",
                                                "the baseline was searched with --max-vpp 2",
                                                "the baseline was searched with --max-gap 0.50%"]
    assert "this search with 8:" in notes[0] and "this search with 1.00%" in notes[2]
    doc = json.loads(plan_path.read_text())
    del doc["solver"]["max_vpp"]
    old = load_plan(doc, "old.json", catalog()).file
    assert old.solver.max_vpp is None and search_differences(old, other) == notes[:1] + notes[2:]


def test_explain_plan_file(cli, plan_path):
    r = cli("explain", plan_path, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert 0 < doc["upper_bound"]["share_reached"] < 1
    assert any("link beijing <-> shanghai" in w["resource"] for w in doc["what_if"])
    assert "single_group" in doc["baselines"]
    r = cli("explain", plan_path, "--timeline")
    assert r.code == 0 and "stage  0 |" in r.stdout


def test_ci_gate_and_diff(cli, plan_path, tmp_path):
    args = ["search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
            "--time-limit", "30", "--no-baselines"]
    r = cli(*args, "--baseline", plan_path, "--max-regression", "3%")
    assert r.code == 0 and "ok: best plan" in r.stderr and "the baseline was searched with" not in r.stderr
    better = json.loads(plan_path.read_text())
    better["prediction"]["tokens_per_s"] *= 1.10  # the committed plan claims 10% more
    lock = tmp_path / "plan.lock.json"
    lock.write_text(json.dumps(better))
    r = cli(*args, "--baseline", lock, "--max-regression", "3%")
    assert r.code == 2 and "prediction.tokens_per_s" in r.stderr  # this version's inputs do not give that number
    # a baseline written by another hgplan version (another cost model) is gated on its stored prediction
    better["hgplan_version"] = "0.0.9"
    lock.write_text(json.dumps(better))
    r = cli(*args, "--baseline", lock, "--max-regression", "3%")
    assert r.code == 1 and "REGRESSION" in r.stderr and "-9.09%" in r.stderr
    # diff recomputes both predictions from the embedded inputs: the same plan, whatever the file claims
    assert cli("diff", plan_path, lock).stdout.startswith("plans are identical")
    faster = json.loads(plan_path.read_text())
    faster["plan"]["micro_batch_size"] = 2 if faster["plan"]["micro_batch_size"] != 2 else 1
    other = tmp_path / "other.json"
    other.write_text(json.dumps(faster))
    r = cli("diff", plan_path, other, "--json")
    assert r.code == 1 and r.json()["prediction"]["change"] != 0  # different: exit 1
    assert cli("diff", plan_path, other, "--exit-zero").code == 0
    assert cli("diff", plan_path, plan_path).stdout.startswith("plans are identical")
    # the same plan made for another global batch is not identical: the inputs are compared too
    half = json.loads(plan_path.read_text())
    half["inputs"]["training"]["global_batch_size"] //= 2
    other.write_text(json.dumps(half))
    r = cli("diff", plan_path, other, "--json")
    assert r.code == 1 and [c["field"] for c in r.json()["changes"]] == ["inputs.training.global_batch_size"]


def test_diff_names_an_asymmetric_plans_own_degrees(cli, tmp_path):
    """Two mesh plans that differ only in one stage's own tp (the plan-level fields equal) are not identical."""
    path = tmp_path / "mesh.json"
    r = cli("search", "-c", "mixed-vendor", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "512",
            "--target", "flagscale", "--time-limit", "20", "--no-baselines", "--json", "-o", path)
    assert r.code == 0, r.stderr
    # the ranking lists each plan once (the mesh search starts from the stock best and finds it again)
    listed = [json.dumps(p["plan"], sort_keys=True) for p in r.json()["plans"]]
    assert len(listed) == 5 and len(set(listed)) == 5
    doc = json.loads(path.read_text())
    stage = doc["plan"]["stages"][0]
    assert stage["tp"] is not None
    stage["tp"], stage["dp"] = stage["tp"] * 2, stage["dp"] // 2
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    from hgplan.documents import PlanRecord
    from hgplan.render import schedule_cell

    # the search table's mbs column: the meshes' own micro-batches (dp x micro-batch / their dp), 'per mesh' where
    # they differ (it showed the plan-level micro-batch, the first mesh's)
    for d in (json.loads(path.read_text()), doc):
        rec = PlanRecord.model_validate(d["plan"])
        own = {rec.dp * rec.micro_batch_size // st.dp for st in rec.stages}
        assert schedule_cell(rec).split(",")[0] == (str(own.pop()) if len(own) == 1 else "per mesh"), own
    assert schedule_cell(PlanRecord.model_validate(doc["plan"])).startswith("per mesh,")
    r = cli("diff", path, other, "--json")
    assert r.code == 1, r.stderr
    [change] = r.json()["changes"]
    assert change["field"] == "stages" and f"({stage['tp'] // 2}/{stage['dp'] * 2}/" in change["a"]
    assert f"({stage['tp']}/{stage['dp']}/" in change["b"]


def test_plan_file_and_flags_contradict(cli, plan_path):
    r = cli("explain", plan_path, "--tp", "8")
    assert r.code == 2 and "drop --tp" in r.stderr


def test_cross_vendor_pipeline_is_flagged(cli, tmp_path):
    path = tmp_path / "mv.json"
    r = cli("search", "-c", "mixed-vendor", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
            "--time-limit", "20", "--no-baselines", "-o", path)
    assert r.code == 0, r.stderr
    doc = json.loads(path.read_text())
    vendors = {("MI300X" if "mi300x" in s["node_group"] else "A100") for s in doc["plan"]["stages"]}
    r = cli("export", path, "--format", "megatron")
    assert r.code == 0
    assert ("spans AMD and NVIDIA GPUs" in r.stderr) == (len(vendors) == 2)


def test_search_reports_a_cross_vendor_pipeline_as_a_finding(cli):
    """Issue 13: search itself says when its best plan's pipeline crosses AMD and NVIDIA (table and JSON), not only
    export; with --target flagscale it says how FlagScale crosses it; single-vendor plans have no finding."""
    args = ["-c", "mixed-vendor", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "256",
            "--time-limit", "20", "--no-baselines"]
    doc = cli("search", *args, "--json").json()
    groups = sorted({s["node_group"] for s in doc["plans"][0]["plan"]["stages"]})
    assert len({g.split("/")[1][:2] for g in groups}) == 2  # mi300x and a100 stages
    assert doc["findings"] == [{"kind": "cross_vendor_pipeline", "node_groups": groups,
                                "message": doc["findings"][0]["message"]}]
    assert "spans AMD and NVIDIA GPUs" in doc["findings"][0]["message"] and "gloo" in doc["findings"][0]["message"]
    assert "finding: the pipeline spans AMD and NVIDIA GPUs" in cli("search", *args).stdout
    fs = cli("search", *args, "--target", "flagscale", "--json").json()
    assert "hetero_use_cpu_communication" in fs["findings"][0]["message"]
    single = cli("search", "-c", "two-site", "-m", "llama3.1-8b", "--seq-len", "2048", "--global-batch", "64",
                 "--time-limit", "20", "--no-baselines", "--json").json()
    assert "findings" not in single


def test_diff_and_gate_reject_non_plan_files(cli, plan_path, tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    r = cli("diff", plan_path, other)
    assert r.code == 2 and "not a plan file" in r.stderr
    broken = json.loads(plan_path.read_text())
    del broken["prediction"]
    other.write_text(json.dumps(broken))
    r = cli("diff", plan_path, other)
    assert r.code == 2 and "prediction.tokens_per_s" in r.stderr
    r = cli("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
            "--baseline", other)
    assert r.code == 2 and "prediction.tokens_per_s" in r.stderr


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def test_tampered_plan_files_never_traceback(cli, plan_path, tmp_path):
    """Random deletions and wrong-typed values anywhere in a plan file: exit 0, 1 or 2, never a traceback."""
    import random

    base = json.loads(plan_path.read_text())
    paths = [p for p in _paths(base) if p[0] != "inputs" or len(p) <= 3]
    rng = random.Random(int(os.environ.get("HGPLAN_FUZZ_SEED", "11")))
    values = [None, -1, 0, 3.5, "x", [], {}, True, "sites: [", 10 ** 9]
    target = tmp_path / "tampered.json"
    for _ in range(int(os.environ.get("HGPLAN_FUZZ_N", "40"))):
        doc = json.loads(json.dumps(base))
        path = rng.choice(paths)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.4 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(values)
        target.write_text(json.dumps(doc))
        for args in (["explain", target], ["export", target, "--format", "torchrun"],
                     ["diff", plan_path, target]):
            r = cli(*args)
            assert r.code in (0, 1, 2), (path, r.code)
            assert "Traceback" not in r.stderr


def test_qkv_bias_and_qk_norm_flags(plan_path):
    """Qwen2's QKV bias and Qwen3's query/key norms: Megatron-LM's export names them (--add-qkv-bias, --qk-layernorm:
    megatron-core TransformerConfig fields, so flags Megatron generates), FlagScale's carries the same keys, and
    Megatron-DeepSpeed, which has neither flag (megatron/arguments.py at 4efb479d), refuses the model. Tested on the
    exporters directly with llama3.1-70b given the two features (the plan is llama3.1-70b's)."""
    from dataclasses import replace

    from hgplan.errors import PlanningError
    from megatron.core.transformer.transformer_config import TransformerConfig
    plan, fleet, model, train, _ = loaded(plan_path)
    qwenish = replace(model, add_qkv_bias=True, qk_layernorm=True)
    argv = export_megatron(plan, fleet, qwenish, train).argv
    assert "--add-qkv-bias" in argv and "--qk-layernorm" in argv and "--disable-bias-linear" in argv
    assert {"add_qkv_bias", "qk_layernorm"} <= set(TransformerConfig.__dataclass_fields__)
    assert "--add-qkv-bias" not in export_megatron(plan, fleet, model, train).argv
    with pytest.raises(PlanningError, match="--add-qkv-bias.*--qk-layernorm"):
        export_deepspeed(plan, fleet, qwenish, train)


def test_rope_and_norm_epsilon_flags(plan_path):
    """Llama 3.1's RoPE (base 500000, scaling) reaches every launch: Megatron-LM's --rotary-base and
    --use-rope-scaling (its base defaults to 10000: without the flag the run trains another model), FlagScale's keys,
    Megatron-DeepSpeed's --rotary-position-embeddings-theta with a warning that it has no scaling; the factor and the
    norms' epsilon are written only where they differ from Megatron's defaults (8, 1e-5)."""
    from dataclasses import replace

    from hgplan.export.flagscale import export_flagscale
    plan, fleet, model, train, _ = loaded(plan_path)
    assert model.name == "llama3.1-70b" and model.rotary_base == 500000 and model.use_rope_scaling
    argv = export_megatron(plan, fleet, model, train).argv
    assert argv[argv.index("--rotary-base") + 1] == "500000" and "--use-rope-scaling" in argv
    assert "--rope-scaling-factor" not in argv and "--norm-epsilon" not in argv
    other = replace(model, rope_scaling_factor=32.0, norm_epsilon=1e-6)
    argv = export_megatron(plan, fleet, other, train).argv
    assert argv[argv.index("--rope-scaling-factor") + 1] == "32" and argv[argv.index("--norm-epsilon") + 1] == "1e-06"
    plain = replace(model, rotary_base=10000, use_rope_scaling=False)
    assert not {"--rotary-base", "--use-rope-scaling"} & set(export_megatron(plan, fleet, plain, train).argv)
    beijing = one_site(plan_path)[0]
    ds = export_deepspeed(beijing, fleet, other, train)
    assert ds.argv[ds.argv.index("--rotary-position-embeddings-theta") + 1] == "500000"
    assert ds.argv[ds.argv.index("--layernorm-epsilon") + 1] == "1e-06" and "--use-rope-scaling" not in ds.argv
    assert any("no Llama 3.x RoPE scaling" in w for w in ds.warnings)
    assert not any("RoPE" in w for w in export_deepspeed(beijing, fleet, plain, train).warnings)
    files = export_flagscale(plan, fleet, other, train).files
    mkeys = yaml.safe_load(next(v for k, v in files.items() if k.startswith("conf/train/")))["model"]
    assert (mkeys["rotary_base"], mkeys["use_rope_scaling"], mkeys["norm_epsilon"]) == (500000, True, 1e-6)


MEGATRON_DEEPSPEED_FLAGS = {
    # megatron/arguments.py of Megatron-DeepSpeed at 4efb479d: flag -> its line (choices where argparse has them)
    "--num-layers": 602, "--hidden-size": 616, "--ffn-hidden-size": 618, "--num-attention-heads": 621,
    "--num-key-value-heads": 623, "--kv-channels": 625, "--max-position-embeddings": 630,
    "--use-rotary-position-embeddings": 633, "--rotary-position-embeddings-theta": 635,
    "--make-vocab-size-divisible-by": 644, "--normalization": 647, "--layernorm-epsilon": 652, "--squared-relu": 668,
    "--swiglu": 670, "--untie-embeddings-and-output-weights": 680, "--attention-dropout": 768, "--hidden-dropout": 770,
    "--micro-batch-size": 801, "--global-batch-size": 808, "--recompute-granularity": 830, "--recompute-method": 842,
    "--recompute-num-layers": 851, "--use-flash-attn-v1": 927, "--use-flash-attn-v2": 930,
    "--disable-bias-linear": 937, "--no-pipeline-parallel": 954, "--sequence-parallel": 972, "--fp16": 1111,
    "--bf16": 1113, "--tensor-model-parallel-size": 1149, "--pipeline-model-parallel-size": 1154, "--seq-length": 1278,
    "--zero-stage": 1487,
    # added by deepspeed.add_config_arguments
    "--deepspeed": None, "--deepspeed_config": None}


@pytest.mark.parametrize("variant", ["llama", "gpt"])
def test_deepspeed_flags_exist_in_megatron_deepspeed(plan_path, variant):
    """Every flag the DeepSpeed export writes is one Megatron-DeepSpeed's argparse defines, with a value its choices
    take: until 2026-11-29 it wrote Megatron-LM's `--normalization RMSNorm` (or LayerNorm), which argparse refuses
    (choices layernorm, rmsnorm), so no exported DeepSpeed launch started. A model without position embeddings is
    refused (Megatron-DeepSpeed has no --position-embedding-type)."""
    from dataclasses import replace

    from hgplan.errors import PlanningError
    plan, fleet, model, train, _ = one_site(plan_path)
    if variant == "gpt":
        model = replace(model, normalization="LayerNorm", position_embedding_type="learned_absolute",
                        activation="gelu", add_bias_linear=True, rotary_base=10000, use_rope_scaling=False)
    for rc in ("none", "selective", "full"):
        argv = export_deepspeed(replace(plan, config=replace(plan.config, recompute=Recompute(rc))), fleet, model,
                                train).argv
        flags = {a for a in argv if a.startswith("--")}
        assert flags <= set(MEGATRON_DEEPSPEED_FLAGS), flags - set(MEGATRON_DEEPSPEED_FLAGS)
        assert argv[argv.index("--normalization") + 1] in ("layernorm", "rmsnorm")
    with pytest.raises(PlanningError, match="--position-embedding-type none"):
        export_deepspeed(plan, fleet, replace(model, position_embedding_type="none"), train)
    # Megatron-DeepSpeed refuses sequence parallelism without CUDA_DEVICE_MAX_CONNECTIONS=1 on every rank
    # (megatron/arguments.py:403); DeepSpeed's multi-node launcher passes it on only from .deepspeed_env
    files = export_deepspeed(plan, fleet, model, train).files
    assert files[".deepspeed_env"] == "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" in files["launch.sh"]


def test_deepspeed_export_launches_the_attention_it_was_priced_with(plan_path):
    """Megatron-DeepSpeed runs FlashAttention only with --use-flash-attn-v1/-v2 (megatron/arguments.py:927-930 at
    4efb479d); without it its attention stores the scores, which the plan's memory has no room for. A plan priced with
    fused attention (a Megatron-LM plan) gets FlashAttention-2 and a warning that it is slower; GPUs priced with
    different kernels (V100's unfused beside A100's) get no flag and a warning."""
    from dataclasses import replace

    from hgplan.enums import Attention
    from hgplan.explainer import build_plan
    from hgplan.export.deepspeed import attention_args
    from hgplan.inputs import load_cluster, load_model
    from hgplan.io import catalog
    plan, fleet, model, train, _ = one_site(plan_path)
    ex = export_deepspeed(plan, fleet, model, train)
    assert "--use-flash-attn-v2" in ex.argv and any("priced with fused attention" in w for w in ex.warnings)
    flash2 = replace(train, attention=Attention.FLASH2)
    assert attention_args(plan, fleet, flash2) == (["--use-flash-attn-v2"], [])
    assert attention_args(plan, fleet, replace(train, attention=Attention.FLASH1))[0] == ["--use-flash-attn-v1"]
    assert attention_args(plan, fleet, replace(train, attention=Attention.UNFUSED)) == ([], [])
    cat = catalog()
    gens = load_cluster(cat.cluster_texts["three-generations"], "three-generations", cat)[0]
    mixed = build_plan(fleet=gens, model=load_model(cat.model_texts["llama2-13b"], "m"), tp=8, pp=2, dp=1, cp=1, mbs=1,
                       vpp=1, recompute="full", sequence_parallel=True, zero_stage=1, overlap_grad_reduce=True,
                       allow_cross_node_tp=False, layers=None, stage_groups=["campus/v100", "campus/a100"])
    flags, warnings = attention_args(mixed, gens, flash2)
    assert flags == [] and "different attention kernels (flash2, unfused)" in warnings[0]
    # what --target deepspeed prices, for the CLI and for plan_training alike (TrainingSettings.for_target)
    auto = replace(train, attention=Attention.AUTO)
    assert auto.for_target("deepspeed").attention is Attention.FLASH2 and auto.for_target("megatron") == auto
    assert flash2.for_target("deepspeed") == flash2 and replace(train, attention=Attention.UNFUSED).for_target(
        "deepspeed").attention is Attention.UNFUSED


def test_megatron_export_runs_the_kernels_it_was_priced_with(plan_path):
    """--transformer-impl local for a plan priced with megatron-core's local spec, --attention-backend for an attention
    kernel asked for (flash2 -> flash, unfused, fused), nothing for auto (Megatron's default); FlashAttention-1, which
    Megatron-LM lacks, is a warning. The flags and their values are megatron-core's (TransformerConfig fields, AttnBackend
    members)."""
    from dataclasses import replace

    from hgplan.enums import Attention, TransformerImpl
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig
    plan, fleet, model, train, _ = loaded(plan_path)

    def argv(**kw):
        ex = export_megatron(plan, fleet, model, replace(train, **kw))
        return ex.argv, ex.warnings

    assert not {"--attention-backend", "--transformer-impl"} & set(argv()[0])
    for kernel, backend in ((Attention.FLASH2, "flash"), (Attention.UNFUSED, "unfused"), (Attention.FUSED, "fused")):
        a = argv(attention=kernel)[0]
        assert a[a.index("--attention-backend") + 1] == backend and AttnBackend[backend]
    a = argv(transformer_impl=TransformerImpl.LOCAL)[0]
    assert a[a.index("--transformer-impl") + 1] == "local" and "--attention-backend" not in a
    assert {"attention_backend", "transformer_impl"} <= set(TransformerConfig.__dataclass_fields__)
    a, warnings = argv(attention=Attention.FLASH1)
    assert "--attention-backend" not in a and any("FlashAttention-1" in w for w in warnings)
    # FlagScale's train YAML takes them as model keys, as its own examples write them (examples/llama3/conf/train/
    # 8b_hetero.yaml: transformer_impl; examples/qwen2_5_vl/conf/train/7b.yaml: attention_backend; at da4935ec)
    from hgplan.export.flagscale import export_flagscale
    for kw, key, value in ((dict(attention=Attention.FLASH2), "attention_backend", "flash"),
                           (dict(transformer_impl=TransformerImpl.LOCAL), "transformer_impl", "local")):
        files = export_flagscale(plan, fleet, model, replace(train, **kw)).files
        mkeys = yaml.safe_load(next(v for k, v in files.items() if k.startswith("conf/train/")))["model"]
        assert mkeys[key] == value
