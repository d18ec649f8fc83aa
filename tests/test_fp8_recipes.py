"""Issue 10 (precisions): Transformer Engine's fp8 recipes. delayed, tensorwise (current scaling) and mxfp8 differ
in the bytes their casts move and in the GPUs that run them; each is read from the training settings in hgplan's and
Megatron's spellings and exported as Megatron-LM's --fp8-recipe."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hgplan.costmodel.compute import (FP8_CAST_BYTES_BWD, TENSORWISE_AMAX_BYTES, UNFUSED_NORM_CAST_BYTES, hbm_s,
                                      layer_time)
from hgplan.costmodel.memory import GIB, MXFP8_SCALE_BYTES, stage_memory
from hgplan.domain import ACTIVATION_FFN_MATRICES, Fp8Recipe, Precision, Runtime, TrainingSettings
from hgplan.errors import InputError
from hgplan.inputs import load_model, make_training
from hgplan.io import catalog
from hgplan.plan import ParallelConfig

B200_FLEET = """name: b200-h100
sites:
  - name: dc
    node_groups:
      - {name: b200, count: 2, gpu: B200-HGX, gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}
      - {name: h100, count: 2, gpu: H100-SXM5-80GB, gpus_per_node: 8,
         nics: {transport: infiniband, gbps: 400, count: 8}}
    links:
      - {between: [b200, h100], gbps: 400, latency_ms: 0.01, transport: infiniband}
"""


def _gpu(gid: str):
    cat = catalog()
    return cat.gpu_type(cat.gpus[gid])


def _layer(gid: str, recipe: Fp8Recipe, cfg: ParallelConfig, runtime: Runtime = Runtime.MEGATRON):
    model = load_model(catalog().model_texts["llama3.1-8b"], "m")
    train = TrainingSettings(seq_length=4096, global_batch_size=64, precision=Precision.FP8, fp8_recipe=recipe,
                             runtime=runtime)
    return layer_time(model, _gpu(gid), cfg, train, tp_busbw_gbytes_per_s=100.0, tp_latency_s=0.0), model


@pytest.mark.parametrize("sp", [False, True])
def test_current_scaling_reads_each_tensor_once_more_and_unfuses_the_norm_casts(sp):
    """tensorwise minus delayed is exactly the amax reads (projection input forward, every output gradient backward)
    and the unfused quantize of the norms' and the activation's outputs, at the HBM rate; the GEMMs are the same."""
    cfg = ParallelConfig(tp=2, pp=1, dp=4, micro_batch_size=1, sequence_parallel=sp)
    delayed, model = _layer("H100-SXM5-80GB", Fp8Recipe.DELAYED, cfg)
    current, _ = _layer("H100-SXM5-80GB", Fp8Recipe.TENSORWISE, cfg)
    h, q, kv, F, t, tok = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size, 2, 4096
    n_mat = ACTIVATION_FFN_MATRICES[model.activation]
    norm = 2 * (h / t if sp else h)
    fwd = hbm_s(_gpu("H100-SXM5-80GB"),
                tok * (TENSORWISE_AMAX_BYTES * q / t + UNFUSED_NORM_CAST_BYTES * (norm + F / t)))
    grads = (q + 2 * kv) / t + h + (n_mat - 1) * F / t + h
    bwd = hbm_s(_gpu("H100-SXM5-80GB"), tok * TENSORWISE_AMAX_BYTES * grads)
    assert current.fwd_s - delayed.fwd_s == pytest.approx(fwd, rel=1e-9)
    assert current.bwd_s - delayed.bwd_s == pytest.approx(bwd, rel=1e-9)
    assert TENSORWISE_AMAX_BYTES == 2 and UNFUSED_NORM_CAST_BYTES == 3 and FP8_CAST_BYTES_BWD == 4


def test_current_scaling_under_fsdp_reads_every_input_and_weight_once_more():
    cfg = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1)
    delayed, model = _layer("H100-SXM5-80GB", Fp8Recipe.DELAYED, cfg, Runtime.FSDP)
    current, _ = _layer("H100-SXM5-80GB", Fp8Recipe.TENSORWISE, cfg, Runtime.FSDP)
    h, q, F = model.hidden_size, model.query_dim, model.ffn_hidden_size
    extra = TENSORWISE_AMAX_BYTES * (4096 * (2 * h + q + F) + model.layer_params())
    from hgplan.costmodel.compute import RUNTIME_EFFICIENCY
    assert (current.fwd_s - delayed.fwd_s) * RUNTIME_EFFICIENCY[Runtime.FSDP] == pytest.approx(
        hbm_s(_gpu("H100-SXM5-80GB"), extra), rel=1e-9)


def test_mxfp8_pays_block_scales_and_unfused_norm_casts_on_blackwell():
    """mxfp8 on a B200: slower than delayed by the norms' quantize and 1/16 byte per fp8 element written, never by
    more than 10%; its weight copies carry the scales too (2/32 byte per parameter)."""
    cfg = ParallelConfig(tp=1, pp=1, dp=16, micro_batch_size=1)
    delayed, model = _layer("B200-HGX", Fp8Recipe.DELAYED, cfg)
    mx, _ = _layer("B200-HGX", Fp8Recipe.MXFP8, cfg)
    h, q, F = model.hidden_size, model.query_dim, model.ffn_hidden_size
    fwd = hbm_s(_gpu("B200-HGX"), 4096 * (UNFUSED_NORM_CAST_BYTES * 2 * h + 2 * MXFP8_SCALE_BYTES * (2 * h + q + F)))
    assert mx.fwd_s - delayed.fwd_s == pytest.approx(fwd, rel=1e-9)
    assert delayed.bwd_s < mx.bwd_s < 1.1 * delayed.bwd_s
    kw = dict(precision=Precision.FP8, seq_length=4096, num_microbatches=1, stage=0, layers=32, flash=True)
    plain, scaled = stage_memory(model, cfg, **kw), stage_memory(model, cfg, mx_scales=True, **kw)
    assert (scaled.weights_gib - plain.weights_gib) * GIB == pytest.approx(
        2 * MXFP8_SCALE_BYTES * 32 * model.layer_params(), rel=1e-9)
    assert scaled.activations_gib == plain.activations_gib


def test_mxfp8_only_where_the_tensor_cores_take_it(cli, tmp_path):
    """explain refuses mxfp8 on H100s (exit 2, the rule and the fix); search on a B200 + H100 fleet leaves the H100s
    idle and says why; the plan file records the recipe and the Megatron export carries it."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(B200_FLEET)
    args = ["-c", fleet, "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "128", "--precision", "fp8"]
    r = cli("explain", *args, "--fp8-recipe", "mxfp8", "--tp", "1", "--pp", "1", "--dp", "16", "--stage-groups",
            "dc/h100")
    assert r.code == 2 and "does not support fp8 (mxfp8)" in r.stderr and "MXFP8 needs Blackwell" in r.stderr
    assert "Traceback" not in r.stderr
    plan = tmp_path / "plan.json"
    r = cli("search", *args, "--fp8-recipe", "mxfp8", "--json", "-o", plan)
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["inputs"]["training"]["fp8_recipe"] == "mxfp8"
    assert {s["node_group"] for s in doc["plans"][0]["plan"]["stages"]} == {"dc/b200"}
    assert any(i["node_group"] == "dc/h100" and "does not support fp8 (mxfp8)" in i["reason"] for i in doc["idle_gpus"])
    r = cli("export", plan, "--format", "megatron", "--json")
    assert r.code == 0, r.stderr
    argv = r.json()["argv"]
    assert argv[argv.index("--fp8-recipe") + 1] == "mxfp8"
    bf16 = cli("search", *args[:-2], "--json").json()
    assert "fp8_recipe" not in bf16["inputs"]["training"]  # recorded with fp8 only


@pytest.mark.parametrize("values, recipe", [
    ({"precision": "fp8", "fp8_recipe": "tensorwise"}, Fp8Recipe.TENSORWISE),
    ({"bf16": True, "fp8_format": "hybrid", "fp8_recipe": "mxfp8"}, Fp8Recipe.MXFP8),  # Megatron's dests
    ({"precision": "fp8"}, Fp8Recipe.DELAYED),
])
def test_recipe_read_from_training_settings(values, recipe):
    from hgplan.megatron_args import from_megatron_keys
    model = load_model(catalog().model_texts["llama3.1-8b"], "m")
    train = make_training({"seq_length": 4096, "global_batch_size": 8, **from_megatron_keys(values, "<t>")}, model)
    assert train.precision is Precision.FP8 and train.fp8_recipe is recipe


@pytest.mark.parametrize("values, says", [
    ({"precision": "bf16", "fp8_recipe": "tensorwise"}, "give precision fp8"),
    ({"precision": "fp8", "fp8_recipe": "blockwise"}, "fp8_recipe"),
])
def test_recipe_refused(values, says):
    model = load_model(catalog().model_texts["llama3.1-8b"], "m")
    with pytest.raises(InputError) as exc:
        make_training({"seq_length": 4096, "global_batch_size": 8, **values}, model)
    assert says in str(exc.value)


def test_recipe_from_an_argument_file_and_a_bridge_mapping():
    from hgplan.megatron_args import from_megatron_keys, from_recipe, parse_argument_file
    values, _ = parse_argument_file("--seq-length 4096 --global-batch-size 8 --bf16 --fp8-format hybrid "
                                    "--fp8-recipe tensorwise --tensor-model-parallel-size 2", "<args>")
    assert from_megatron_keys(values, "<args>")["fp8_recipe"] == "tensorwise"
    out, _ = from_recipe({"model": {"seq_length": 4096}, "train": {"global_batch_size": 8},
                          "mixed_precision": {"bf16": True, "fp8": "hybrid", "fp8_recipe": "mxfp8"}}, "<r>")
    assert out["fp8_recipe"] == "mxfp8"
    with pytest.raises(InputError, match="not modelled exactly"):
        from_recipe({"model": {"seq_length": 4096}, "mixed_precision": {"bf16": True, "fp8": "hybrid",
                                                                        "fp8_recipe": "blockwise"}}, "<r>")
    assert TrainingSettings(seq_length=1, global_batch_size=1, precision=Precision.FP8,
                            fp8_recipe=Fp8Recipe.MXFP8).precision_name == "fp8 (mxfp8)"


def test_the_catalog_lists_mxfp8_where_the_tensor_cores_take_it(cli):
    rows = {r["id"]: r["precisions"].split() for r in cli("profiles", "list", "gpus", "--json").json()}
    assert "mxfp8" in rows["B200-HGX"] and "mxfp8" in rows["GB200"]
    assert rows["H100-SXM5-80GB"] == ["bf16", "fp16", "fp8"] and "mxfp8" not in rows["MI300X"]


def test_mesh_plans_and_the_upper_bound_leave_out_gpus_without_mxfp8(cli, tmp_path):
    """--target flagscale builds no mesh on the H100s under mxfp8; explain's fleet upper bound counts only the GPUs
    that can train."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(B200_FLEET)
    args = ["-c", fleet, "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "128", "--precision", "fp8"]
    r = cli("search", *args, "--fp8-recipe", "mxfp8", "--target", "flagscale", "--json")
    assert r.code == 0, r.stderr
    assert {s["node_group"] for s in r.json()["plans"][0]["plan"]["stages"]} == {"dc/b200"}
    from hgplan.explainer import fleet_upper_bound
    from hgplan.inputs import load_cluster
    cat = catalog()
    f, _ = load_cluster(B200_FLEET, "b200-h100", cat)
    model = load_model(cat.model_texts["llama3.1-8b"], "m")
    train = TrainingSettings(seq_length=4096, global_batch_size=128, precision=Precision.FP8)
    both = fleet_upper_bound(f, model, train)
    only_b200 = fleet_upper_bound(f, model, replace(train, fp8_recipe=Fp8Recipe.MXFP8))
    b200, h100 = _gpu("B200-HGX"), _gpu("H100-SXM5-80GB")
    rate = {g: g.peak_tflops(Precision.BF16) * g.eff.gemm_efficiency * g.eff.sustained_clock_fraction
            for g in (b200, h100)}
    assert only_b200 / both == pytest.approx(rate[b200] / (rate[b200] + rate[h100]), rel=1e-9)


def test_the_recipe_costs_docs_quote(cli, tmp_path):
    """docs/cost-model.md's figures, on plans that fit (ZeRO-1): Llama-3.1-8B, 4096 tokens, tp 2 x dp 4 on two-site's
    H100s, tensorwise 2.9% slower per iteration than delayed; 8192 tokens, dp 16 on B200s, mxfp8 0.5% slower and 0.40
    GiB more weights per GPU."""
    def run(*args: str) -> dict:
        r = cli("explain", "-m", "llama3.1-8b", "--pp", "1", "--zero-stage", "1", "--precision", "fp8", "--json", *args)
        assert r.code == 0, r.stderr
        return r.json()

    h100 = ["-c", "two-site", "--seq-len", "4096", "--global-batch", "64", "--tp", "2", "--dp", "4",
            "--stage-groups", "beijing/h100"]
    delayed, current = (run(*h100, "--fp8-recipe", r)["prediction"]["iteration_time_s"]
                        for r in ("delayed", "tensorwise"))
    assert current / delayed - 1 == pytest.approx(0.029, abs=0.0015)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(B200_FLEET)
    b200 = ["-c", str(fleet), "--seq-len", "8192", "--global-batch", "128", "--tp", "1", "--dp", "16",
            "--stage-groups", "dc/b200"]
    delayed, mx = (run(*b200, "--fp8-recipe", r) for r in ("delayed", "mxfp8"))
    slower = mx["prediction"]["iteration_time_s"] / delayed["prediction"]["iteration_time_s"] - 1
    assert slower == pytest.approx(0.005, abs=0.0015)
    more = mx["stages"][0]["memory"]["weights_gib"] - delayed["stages"][0]["memory"]["weights_gib"]
    assert more == pytest.approx(0.40, abs=0.015)
