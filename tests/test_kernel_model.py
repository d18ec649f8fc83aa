"""Issue 10 (kernel model from measurement): attention families, the local spec, recompute, optimizer bytes,
GEMM tiles, and the real H100 measurements of shared/reference/h100-measured.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from optimizer_bytes import HGPLAN_BYTES, STEPS, copy_rate, effective_bytes

from hgplan.costmodel.compute import (MAIN_GRAD_BYTES_PER_PARAM, attention_kernel, embedding_time, gemm_compute_s,
                                      gemm_s, head_time, hbm_s, main_grad_s, tile_efficiency)
from hgplan.costmodel.evaluate import dp_tail, edge_costs
from hgplan.costmodel.optimizer import (GRAD_ZERO_BYTES_PER_PARAM, LOCAL_PARAM_COPY_BYTES_PER_PARAM,
                                        OPTIMIZER_BYTES_PER_PARAM, TORCH_ADAMW_BYTES_PER_PARAM,
                                        optimizer_bytes_per_param)
from hgplan.costmodel.memory import activation_bytes_per_layer
from hgplan.domain import Attention, Fleet, Precision, Runtime, TrainingSettings, TransformerImpl
from hgplan.inputs import load_model
from hgplan.io import catalog
from hgplan.plan import ParallelConfig, Recompute

H100_DATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "h100-measured.json"


def gpu(name: str):
    cat = catalog()
    return cat.gpu_type(cat.gpus[name])


def llama8b():
    return load_model(catalog().model_texts["llama3.1-8b"], "llama3.1-8b")


@pytest.mark.parametrize("gpu_id, train, expected", [
    ("H100-SXM5-80GB", TrainingSettings(seq_length=4096, global_batch_size=8), Attention.FUSED),
    ("A100-SXM4-80GB", TrainingSettings(seq_length=4096, global_batch_size=8), Attention.FUSED),
    ("H100-SXM5-80GB", TrainingSettings(seq_length=4096, global_batch_size=8, runtime=Runtime.FSDP), Attention.FLASH2),
    ("H100-SXM5-80GB", TrainingSettings(seq_length=4096, global_batch_size=8, transformer_impl=TransformerImpl.LOCAL),
     Attention.UNFUSED),
    ("H100-SXM5-80GB", TrainingSettings(seq_length=4096, global_batch_size=8, attention=Attention.FLASH2),
     Attention.FLASH2),
    # Volta has no FlashAttention-class kernel: whatever is asked for, the unfused path runs
    ("V100-SXM2-32GB", TrainingSettings(seq_length=2048, global_batch_size=8), Attention.UNFUSED),
    ("V100-SXM2-32GB", TrainingSettings(seq_length=2048, global_batch_size=8, attention=Attention.FUSED),
     Attention.UNFUSED),
])
def test_attention_kernel_follows_runtime_and_gpu(gpu_id, train, expected):
    assert attention_kernel(train, gpu(gpu_id)) is expected


def test_fused_attention_is_faster_than_flash2_on_hopper():
    """h100-measured inside training steps: cuDNN fused attention at 0.455 of peak, FlashAttention-2 at 0.225."""
    from hgplan.costmodel.compute import attention_rate
    from hgplan.domain import Precision
    h = gpu("H100-SXM5-80GB")
    fused, flash2 = (attention_rate(h, Precision.BF16, k) for k in (Attention.FUSED, Attention.FLASH2))
    assert fused / (h.bf16_tflops * 1e12) == pytest.approx(0.455, abs=0.01)
    assert flash2 / (h.bf16_tflops * 1e12) == pytest.approx(0.225, abs=0.01)


def test_flash1_is_flashattention_1_class_on_ampere_and_as_flash2_on_hopper():
    """FlashAttention-1-class kernels (flash-attn 1.x, llm-foundry's Triton port) at the top of FlashAttention's
    published 25-40% of A100 peak; no published Hopper figure, so there they run at FA2's in-step rate."""
    from hgplan.costmodel.compute import attention_rate
    a, h = gpu("A100-SXM4-80GB"), gpu("H100-SXM5-80GB")
    a_flash1, a_flash2 = (attention_rate(a, Precision.BF16, k) for k in (Attention.FLASH1, Attention.FLASH2))
    assert a_flash1 / (a.bf16_tflops * 1e12) == pytest.approx(0.40)
    assert a_flash1 < a_flash2
    assert attention_rate(h, Precision.BF16, Attention.FLASH1) == attention_rate(h, Precision.BF16, Attention.FLASH2)
    # asked for, it runs where FlashAttention-class kernels exist; Volta still falls back to the unfused path
    asked = TrainingSettings(seq_length=2048, global_batch_size=8, attention=Attention.FLASH1, runtime=Runtime.FSDP)
    assert attention_kernel(asked, a) is Attention.FLASH1
    assert attention_kernel(asked, gpu("V100-SXM2-32GB")) is Attention.UNFUSED


def test_llm_foundry_rows_are_priced_with_the_kernel_they_ran():
    """The calibration set's llm-foundry rows ran attn_impl: triton (submit_benchmarks.py's default): flash1."""
    import yaml

    import fidelity_cases as fidelity
    rows = yaml.safe_load((Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "calibration.yaml")
                          .read_text())["rows"]
    mosaic = [fidelity.case_from_row(r, catalog()) for r in rows if r["id"].startswith("mosaic")]
    cases = [c for c in mosaic if not isinstance(c, str)]
    assert len(cases) >= 130 and all(c.train.attention is Attention.FLASH1 for c in cases)


def test_full_recompute_does_not_rerun_the_output_layer():
    """Megatron's full recompute checkpoints transformer layers only: the LM head's backward is the same."""
    h, model = gpu("H100-SXM5-80GB"), llama8b()
    train = TrainingSettings(seq_length=4096, global_batch_size=8)
    none = ParallelConfig(tp=1, pp=1, dp=1)
    full = replace(none, recompute=Recompute.FULL)
    assert edge_costs(h_group(h), model, full, train) == edge_costs(h_group(h), model, none, train)
    assert head_time(model, h, full, train) == head_time(model, h, none, train)


def h_group(g):
    from hgplan.domain import NodeGroup, Transport
    return NodeGroup(site="s", name="g", num_nodes=1, gpu=g, gpus_per_node=8, intra_node_kind="nvlink",
                     intra_node_gbytes_per_s=900, nic_transport=Transport.INFINIBAND, nic_gbps=400, nic_count=8,
                     gpu_hour_usd=None, order=0)


def test_optimizer_moves_at_least_38_bytes_per_parameter():
    """Gradient norm (4) + Adam (28) + the bf16 copy of the weights (6), and the main-grad buffer zeroed (4)."""
    assert OPTIMIZER_BYTES_PER_PARAM == 38 and GRAD_ZERO_BYTES_PER_PARAM == 4


def test_local_spec_steps_with_pytorchs_multi_tensor_adamw():
    """Without Transformer Engine or Apex megatron-core falls back to torch.optim.AdamW: 80 bytes per parameter in
    eight fp32 passes instead of a fused kernel's 28, and to its local multi-tensor copy, which multiplies each fp32
    tensor by 1.0 into a temporary before the bf16 copy (14 bytes instead of 6). The fallback is Megatron's: other
    runtimes bring their own optimizer."""
    assert LOCAL_PARAM_COPY_BYTES_PER_PARAM == 14
    te = TrainingSettings(seq_length=4096, global_batch_size=8)
    local = replace(te, transformer_impl=TransformerImpl.LOCAL)
    assert optimizer_bytes_per_param(te) == OPTIMIZER_BYTES_PER_PARAM == 38
    assert optimizer_bytes_per_param(local) == TORCH_ADAMW_BYTES_PER_PARAM == 98
    assert optimizer_bytes_per_param(replace(local, runtime=Runtime.DEEPSPEED)) == 38
    h = gpu("H100-SXM5-80GB")
    g = h_group(h)
    fleet = Fleet(name="f", groups=(g,), links=(), transports=catalog().transports)
    cfg = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=1)
    for train, per_param in ((te, 38), (local, 98)):
        step_s = dp_tail(fleet, g, cfg, train, params=1e9, layers=4, fwd_s=0.1, bwd_s=0.2)[1]
        assert step_s == pytest.approx(hbm_s(h, 1e9 * (per_param + GRAD_ZERO_BYTES_PER_PARAM)))


def test_main_grad_add_only_without_gradient_accumulation_fusion():
    h, model = gpu("H100-SXM5-80GB"), llama8b()
    te = TrainingSettings(seq_length=4096, global_batch_size=8)
    local = replace(te, transformer_impl=TransformerImpl.LOCAL)
    params = model.layer_params()
    assert main_grad_s(h, te, params) == 0.0
    assert main_grad_s(h, local, params) == pytest.approx(hbm_s(h, params * MAIN_GRAD_BYTES_PER_PARAM))
    cfg = ParallelConfig(tp=1, pp=1, dp=1)
    assert embedding_time(model, h, cfg, local)[1] > embedding_time(model, h, cfg, te)[1]


def test_local_spec_keeps_more_activations_per_llama_layer():
    """The unfused SwiGLU keeps silu(gate) (2F), the unfused RMSNorms their normalised output (2 x 2h), SDPA's output
    is copied (2q): the difference is exactly those bytes per token."""
    model = llama8b()
    kw = dict(micro_batch=1, seq_length=4096, tp=1, cp=1, sequence_parallel=False, recompute=Recompute.NONE, flash=True)
    te = activation_bytes_per_layer(model, **kw)
    local = activation_bytes_per_layer(model, **kw, local=True)
    h, q, F = model.hidden_size, model.query_dim, model.ffn_hidden_size
    assert local - te == pytest.approx(4096 * (2 * F + 4 * h + 2 * q))


def test_tile_efficiency_in_whole_tiles_and_waves():
    """With gemm_waves, a GEMM whose tiles fill whole waves wastes nothing; one tile more costs a whole wave."""
    h = gpu("H100-SXM5-80GB")
    waves = replace(h, eff=replace(h.eff, gemm_waves=True))
    assert waves.sm_count == 132
    full = 132 * 128  # 132 tiles of 128 x 256: one full wave
    assert tile_efficiency(waves, full, 256, 4096) == pytest.approx(1.0)
    assert tile_efficiency(waves, full + 128, 256, 4096) == pytest.approx(133 / 264)
    assert tile_efficiency(waves, 4096, 4096, 4096) == pytest.approx(1.0 * 512 / (4 * 132), rel=1e-9)
    # without gemm_waves (every architecture today), 0.1.0's smooth penalty applies
    assert tile_efficiency(h, 4096, 4096, 4096) == pytest.approx((4096 / 4352) ** 2 * 4096 / 4224)


def test_fp8_gemms_at_the_measured_share_of_the_fp8_peak():
    """Hopper's fp8 GEMMs run at fp8_gemm_efficiency of the fp8 peak: 1.850x bf16 on a Llama shape (measured on a lent
    H100, benchmarks/fp8_gemm_clock.py), not the peaks' 2x. Where the catalog has no fp8 figure (CDNA3), fp8 takes
    bf16's share of the fp8 peak; a profile's fp8_gemm_efficiency replaces the catalog's."""
    h = gpu("H100-SXM5-80GB")
    shape = (8192, 28672, 4096)
    speedup = gemm_compute_s(h, Precision.BF16, *shape) / gemm_compute_s(h, Precision.FP8, *shape)
    assert speedup == pytest.approx(2 * 0.743 / 0.803) and speedup == pytest.approx(1.850, abs=0.005)
    mi = gpu("MI300X")
    assert mi.eff.fp8_gemm_efficiency is None
    assert gemm_compute_s(mi, Precision.BF16, *shape) / gemm_compute_s(mi, Precision.FP8, *shape) == pytest.approx(
        mi.peak_tflops(Precision.FP8) / mi.peak_tflops(Precision.BF16))
    tuned = replace(h, eff=replace(h.eff, fp8_gemm_efficiency=0.5))
    assert gemm_compute_s(tuned, Precision.FP8, *shape) == pytest.approx(
        gemm_compute_s(h, Precision.FP8, *shape) * 0.743 / 0.5)
    assert gemm_compute_s(tuned, Precision.BF16, *shape) == gemm_compute_s(h, Precision.BF16, *shape)
    # a memory-bound GEMM (here: HBM at a tenth of its rate) reads one byte per fp8 operand element and writes a bf16
    # result; a bf16 GEMM two bytes each
    slow = replace(h, eff=replace(h.eff, hbm_efficiency=0.085))
    m, n, k = 16, 8192, 8192
    assert gemm_s(slow, Precision.FP8, m, n, k) == pytest.approx(hbm_s(slow, m * k + k * n + 2 * m * n))
    assert gemm_s(slow, Precision.BF16, m, n, k) == pytest.approx(hbm_s(slow, 2 * (m * k + k * n + m * n)))


@pytest.mark.skipif(not H100_DATA.exists(), reason="shared/reference/h100-measured.json is not beside the checkout")
def test_h100_measured_configurations():
    """The megatron-core configurations measured on a real H100 (local spec). fwd+bwd of every configuration within
    7%, issue 10's target (6.7% at worst with Hopper's HBM rate at the measured copies; 8.6% at 0.85), every Llama
    layer's activations within 8%, peak memory of every configuration within 8% (unfused attention included, with
    its backward's score gradients), the optimizer step within 15% (5.0% at worst): torch's fused AdamW and the
    default multi-tensor one as the script timed them (-57% when the local spec was charged the fused bytes)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from h100_measured import compare

    out = compare(json.loads(H100_DATA.read_text()))
    fused = [r for r in out["configs"] if r["meas"]["attn"] != "unfused"]
    assert len(fused) >= 14
    assert max(abs(r["fwd_bwd"]) for r in out["configs"]) <= 0.07, [(r["name"], round(r["fwd_bwd"], 3))
                                                                     for r in out["configs"]]
    assert max(abs(r["peak"]) for r in out["configs"]) <= 0.08, [(r["name"], round(r["peak"], 3))
                                                                  for r in out["configs"]]
    assert max(abs(r["act"]) for r in out["per_layer"]) <= 0.08
    assert len(out["optimizer"]) >= 2 and all(abs(r["error"]) <= 0.15 for r in out["optimizer"]), out["optimizer"]


def test_v100_and_t4_fleet_trains_in_fp16_with_unfused_attention(cli, tmp_path):
    """Without a precision, a fleet with GPUs that lack bf16 trains in fp16 (announced) and uses every GPU; explain
    says which attention path the older GPUs run."""
    cluster = tmp_path / "v100-t4.yaml"
    cluster.write_text(
        "name: v100-t4\nsites:\n  - name: lab\n    node_groups:\n"
        "      - {name: v100, count: 2, gpu: V100-SXM2-32GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 100}}\n"
        "      - {name: t4, count: 4, gpu: T4, gpus_per_node: 4, nics: {transport: ethernet, gbps: 25}}\n"
        "    links:\n      - {between: [v100, t4], gbps: 25, latency_ms: 0.05, transport: ethernet}\n")
    plan = tmp_path / "plan.json"
    r = cli("search", "-c", cluster, "-m", "llama2-7b", "--seq-len", "2048", "--global-batch", "256", "--json",
            "-o", plan)
    assert r.code == 0, r.stderr
    assert "training in fp16" in r.stderr
    doc = r.json()
    assert doc["inputs"]["training"]["precision"] == "fp16"
    used = {s["node_group"] for s in doc["plans"][0]["plan"]["stages"]}
    assert used == {"lab/v100", "lab/t4"} and doc["idle_gpus"] == []
    r = cli("explain", plan, "--json")
    assert any("run Megatron's unfused attention" in f for f in r.json()["findings"])


def test_fp8_linear_layers_on_hopper(cli):
    """fp8 runs the transformer layers' linear layers at the fp8 rate (faster than bf16), keeps fp8 weight copies
    (more weight memory), is refused on Ampere, and exports Transformer Engine's fp8 flags to Megatron-LM."""
    args = ["explain", "-c", "two-site", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "64", "--tp", "1",
            "--pp", "1", "--dp", "8", "--json"]
    bf16 = cli(*args, "--stage-groups", "beijing/h100", "--precision", "bf16").json()
    fp8 = cli(*args, "--stage-groups", "beijing/h100", "--precision", "fp8").json()
    assert fp8["stages"][0]["fwd_s"] < 0.8 * bf16["stages"][0]["fwd_s"]
    assert fp8["stages"][0]["memory"]["weights_gib"] > bf16["stages"][0]["memory"]["weights_gib"]
    assert fp8["stages"][0]["memory"]["activations_gib"] < bf16["stages"][0]["memory"]["activations_gib"]
    r = cli(*args, "--stage-groups", "shanghai/a100", "--precision", "fp8")
    assert r.code == 2 and "does not support fp8" in r.stderr


def test_fp8_export_flags(plan_from_search):
    from hgplan.export.common import parallel_args
    from hgplan.domain import Precision
    plan, train = plan_from_search
    argv = parallel_args(plan, replace(train, precision=Precision.FP8))
    assert argv[-5:] == ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed"]
    assert "--fp8-recipe" not in parallel_args(plan, train)


@pytest.fixture
def plan_from_search():
    from hgplan.plan import Plan, StageAssignment
    plan = Plan(config=ParallelConfig(tp=1, pp=1, dp=8), stages=(StageAssignment(node_group="a/b", num_layers=32),))
    return plan, TrainingSettings(seq_length=4096, global_batch_size=64)


def test_unfused_attention_backward_holds_two_score_gradients():
    """The last layer's backward under unfused attention holds the gradients of the probabilities and of the scores
    (two b a s^2 x 2-byte tensors) once the logits are gone: the stage's peak takes the larger of the two."""
    from hgplan.costmodel.memory import FRAGMENTATION, GIB, UNFUSED_BACKWARD_SCORE_TENSORS, stage_memory
    model, s = llama8b(), 8192
    cfg = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=1)
    kw = dict(precision=Precision.BF16, seq_length=s, num_microbatches=1, stage=0, layers=4)
    flash = stage_memory(model, cfg, flash=True, **kw)
    unfused = stage_memory(model, cfg, flash=False, **kw)
    score = 2 * model.num_attention_heads * s * s
    per_layer = (activation_bytes_per_layer(model, micro_batch=1, seq_length=s, tp=1, cp=1, sequence_parallel=False,
                                            recompute=Recompute.NONE, flash=False)
                 - activation_bytes_per_layer(model, micro_batch=1, seq_length=s, tp=1, cp=1, sequence_parallel=False,
                                              recompute=Recompute.NONE, flash=True))
    logits = 4 * s * model.hidden_size + 4 * s * model.padded_vocab(1)  # output layer input, fp32 logits
    assert UNFUSED_BACKWARD_SCORE_TENSORS == 2 and UNFUSED_BACKWARD_SCORE_TENSORS * score > logits
    extra = 4 * per_layer + UNFUSED_BACKWARD_SCORE_TENSORS * score - logits
    assert (unfused.activations_gib - flash.activations_gib) * GIB / FRAGMENTATION == pytest.approx(extra, rel=1e-9)


def test_fp8_under_fsdp_casts_every_linear_input_and_weight():
    """Stand-alone Transformer Engine Linear modules (FSDP) cast and transpose each of the four inputs and, on every
    micro-batch, each weight; Megatron's fused layers cast only the projection's input on its own."""
    from hgplan.costmodel.compute import FP8_CAST_BYTES_FWD, FP8_CAST_TRANSPOSE_BYTES, RUNTIME_EFFICIENCY, layer_time
    h = gpu("H100-SXM5-80GB")
    model = llama8b()
    cfg = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=2)
    hs, q, F = model.hidden_size, model.query_dim, model.ffn_hidden_size
    tok = 2 * 4096

    def fwd(runtime: Runtime, precision: Precision) -> float:
        train = TrainingSettings(seq_length=4096, global_batch_size=16, precision=precision, runtime=runtime,
                                 attention=Attention.FLASH2)
        return layer_time(model, h, cfg, train, tp_busbw_gbytes_per_s=1.0, tp_latency_s=0.0).fwd_s

    # the runtimes' bf16 difference is only the framework's efficiency; under fp8 the casts differ on top of it
    eff = {r: RUNTIME_EFFICIENCY[r] for r in (Runtime.MEGATRON, Runtime.FSDP)}
    fsdp_casts = hbm_s(h, tok * FP8_CAST_TRANSPOSE_BYTES * (2 * hs + q + F)
                       + FP8_CAST_TRANSPOSE_BYTES * model.layer_params())
    megatron_casts = hbm_s(h, tok * FP8_CAST_BYTES_FWD * q)
    # fp8 minus bf16, undone of the framework factor: the linear layers' gain (same in both) plus the casts
    delta = {r: (fwd(r, Precision.FP8) - fwd(r, Precision.BF16)) * eff[r] for r in eff}
    assert delta[Runtime.FSDP] - delta[Runtime.MEGATRON] == pytest.approx(fsdp_casts - megatron_casts, rel=1e-6)


def test_held_out_h200_megatron_core_steps():
    """25 megatron-core steps measured on a lent H200 (benchmarks/data/h200-2026-11-25, the script that measured the
    shared H100 sheet), a GPU nothing but its HBM rate was set from (its own measured copies, 0.868): fwd+bwd within
    5% (4.8% measured), peak within 8% (7.0%), per-layer activations within 8%, the optimizer steps within 10%
    (8.4%)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from h100_measured import compare, from_mcore_jsonl

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "h200-2026-11-25" / "mcore.jsonl"
    out = compare(from_mcore_jsonl(path.read_text().splitlines()), gpu_id="H200-SXM-141GB")
    assert len(out["configs"]) == 25 and len(out["per_layer"]) == 8 and len(out["optimizer"]) == 2
    assert max(abs(r["fwd_bwd"]) for r in out["configs"]) < 0.05
    assert max(abs(r["peak"]) for r in out["configs"]) < 0.08
    assert max(abs(r["act"]) for r in out["per_layer"]) < 0.08
    assert all(abs(r["error"]) < 0.10 for r in out["optimizer"])


def test_lent_h100_megatron_core_steps():
    """The same 25 steps on a lent H100 (benchmarks/data/h100-2026-11-25/mcore): hgplan within 8.5% (7.8% measured;
    the shared sheet's steps are within 6.7%, docs/cost-model.md), its optimizer steps within 5%; where the shared
    sheet is beside the checkout, every step the two cards ran is within 2.5% of the other (card to card)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from h100_measured import compare, from_mcore_jsonl

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "h100-2026-11-25" / "mcore" / "mcore.jsonl"
    lent = from_mcore_jsonl(path.read_text().splitlines())
    out = compare(lent)
    assert len(out["configs"]) == 25 and max(abs(r["fwd_bwd"]) for r in out["configs"]) < 0.085
    assert len(out["optimizer"]) == 2 and all(abs(r["error"]) < 0.05 for r in out["optimizer"])
    if H100_DATA.exists():
        shared = {c["name"]: c["meas_fwd_bwd_ms"] for c in json.loads(H100_DATA.read_text())["megatron_configs"]
                  if "meas_fwd_bwd_ms" in c}
        pairs = [(c["meas_fwd_bwd_ms"], shared[c["name"]]) for c in lent["megatron_configs"] if c["name"] in shared]
        assert len(pairs) >= 25 and all(abs(a / b - 1) < 0.025 for a, b in pairs)


def _optimizer_runs() -> list[dict]:
    """benchmarks/optimizer_bytes.py's runs on the lent H100 (three) and H200 (two)."""
    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    runs = [json.loads(f.read_text()) for f in sorted(data.glob("h*-2026-11-25/optimizer/optimizer_bytes_*.json"))]
    assert len(runs) == 5
    return runs


def test_hopper_hbm_rates_are_the_measured_copies():
    """Hopper's HBM rate is the median of the large copies measured on H100 SXM cards (0.891 of 3350 GB/s); the H200,
    whose HBM3e copies reached 4166 of 4800 GB/s on a lent card, carries its own (a GPU spec's hbm_efficiency
    overrides its architecture's, as gemm_efficiency does). The measurements are in the repository."""
    h100, h200 = gpu("H100-SXM5-80GB"), gpu("H200-SXM-141GB")
    assert h100.eff.hbm_efficiency == 0.891 and h200.eff.hbm_efficiency == 0.868
    assert h200.eff.gemm_efficiency == h100.eff.gemm_efficiency  # only the HBM rate is the H200's own
    for card, spec in (("H100", h100), ("H200", h200)):
        rates = [copy_rate(r) / 1e9 / spec.hbm_gbytes_per_s for r in _optimizer_runs() if card in r["device"]]
        assert rates and all(abs(x - spec.eff.hbm_efficiency) < 0.005 for x in rates), rates


def test_optimizer_bytes_match_the_measured_kernels():
    """benchmarks/optimizer_bytes.py on a lent H100 and H200: megatron-core's local copy moved 13.9-14.1 effective
    bytes per parameter at the copy rate (hgplan counts 14), the fused-equivalent copy 5.9-6.0 (6), the gradient
    norm 4.6-5.4 (4) and the Adam kernels 31.7-34.4 (fused, 28) and 89.6-91.8 (multi-tensor, 80). The copies move
    what is counted (within 3%); the norm and Adam run below the copy rate (0.75-0.89 of it: never fewer bytes than
    counted, at most 1.4 times), which the whole megatron-core step does not show (docs/cost-model.md, section 3)."""
    for r in _optimizer_runs():
        for part, n in HGPLAN_BYTES.items():
            if part == "zero_grad":
                continue
            eff = effective_bytes(r, r["ms"][part])
            ok = abs(eff / n - 1) < 0.03 if part.startswith("copy") else 0.97 <= eff / n < 1.4
            assert ok, (r["device"], part, eff, n)


def test_the_whole_optimizer_step_outruns_its_parts():
    """docs/cost-model.md, section 3: megatron-core's whole `opt.step()` (mcore_bench.py, the lent cards' steps) took
    5-9% less than its parts timed one by one (benchmarks/optimizer_bytes.py), for both AdamWs, on the H100 and the
    H200: why the model prices every part at the copy rate rather than at the rates the parts reach alone."""
    from h100_measured import from_mcore_jsonl

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    steps = {"H100": data / "h100-2026-11-25" / "mcore" / "mcore.jsonl",
             "H200": data / "h200-2026-11-25" / "mcore.jsonl"}
    for card, path in steps.items():
        meas = [c for c in from_mcore_jsonl(path.read_text().splitlines())["megatron_configs"]
                if "optimizer_result" in c]
        runs = [r for r in _optimizer_runs() if card in r["device"]]
        assert len(meas) == 1 and runs
        for adam, key in (("fused", "optimizer_result_fused"), ("foreach", "optimizer_result")):
            whole = meas[0][key]["optimizer_step_ms"]
            for r in runs:
                parts = sum(r["ms"][p] for p in STEPS[adam])
                assert 0.90 <= whole / parts <= 0.95, (card, adam, whole, parts)
