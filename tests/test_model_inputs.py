"""Issue 2: model presets and model files."""

from __future__ import annotations

import pytest

from hgplan.inputs import load_model
from hgplan.io import catalog

PRESETS = sorted(catalog().model_texts)
REQUIRED = {"gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b", "gpt-310.1b",
            "gpt-529.6b", "gpt-1t", "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b",
            "llama3.1-70b", "llama3.1-405b", "opt-175b", "bloom-176b"}


def test_all_required_presets_exist():
    assert REQUIRED <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_parameter_count_matches_publication(name):
    """Computed from the architecture, the count matches the published total within 1%.

    Published figures rounded to a stated number of decimals (SC'21 Table 1 prints "1.7" for 1.652 B)
    also pass when the computed count rounds to the same figure.
    """
    m = load_model(catalog().model_texts[name], name)
    assert m.source, "every preset cites its source"
    computed_b = m.num_params() / 1e9
    published = m.published_params_b
    assert published is not None
    within = abs(computed_b - published) / published <= 0.01
    rounds = m.published_params_decimals is not None and round(computed_b, m.published_params_decimals) == published
    assert within or rounds, f"{name}: computed {computed_b:.4f} B vs published {published} B"


def test_llama2_7b_exact():
    m = load_model(catalog().model_texts["llama2-7b"], "x")
    assert m.num_params() == 6_738_415_616  # released checkpoint


QWEN = """\
num_layers: {layers}
hidden_size: {h}
ffn_hidden_size: {f}
num_attention_heads: {heads}
num_query_groups: {groups}
kv_channels: 128
vocab_size: {vocab}
max_position_embeddings: 32768
activation: swiglu
normalization: RMSNorm
position_embedding_type: rope
add_bias_linear: false
untie_embeddings_and_output_weights: true
{extra}: true
"""


def test_qkv_bias_and_qk_norm_count_their_parameters():
    """Qwen2.5-7B (a bias on QKV alone) and Qwen3-8B (per-head query and key RMSNorms): 7,615,616,512 and 8,190,735,360
    parameters, their model cards' 7.61 B and 8.2 B; add_bias_linear implies the QKV bias (Megatron-LM keeps the two in
    sync), so GPT-style models count theirs once."""
    qwen25 = load_model(QWEN.format(layers=28, h=3584, f=18944, heads=28, groups=4, vocab=152064,
                                    extra="add_qkv_bias"), "qwen2.5-7b")
    qwen3 = load_model(QWEN.format(layers=36, h=4096, f=12288, heads=32, groups=8, vocab=151936,
                                   extra="qk_layernorm"), "qwen3-8b")
    assert (qwen25.num_params(), qwen3.num_params()) == (7_615_616_512, 8_190_735_360)
    gpt = load_model(catalog().model_texts["gpt-7.5b"], "gpt-7.5b")
    assert gpt.add_qkv_bias and gpt.num_params() == load_model(
        catalog().model_texts["gpt-7.5b"] + "add_qkv_bias: true\n", "again").num_params()


def test_qk_norm_keeps_its_inputs():
    """--qk-layernorm keeps the projected queries and keys (bf16) for its backward, beside the normalised ones."""
    from dataclasses import replace

    from hgplan.costmodel.memory import activation_bytes_per_layer
    from hgplan.plan import Recompute
    m = load_model(QWEN.format(layers=36, h=4096, f=12288, heads=32, groups=8, vocab=151936, extra="qk_layernorm"),
                   "qwen3-8b")
    kw = dict(micro_batch=2, seq_length=4096, tp=4, cp=1, sequence_parallel=True, recompute=Recompute.NONE, flash=True)
    extra = activation_bytes_per_layer(m, **kw) - activation_bytes_per_layer(replace(m, qk_layernorm=False), **kw)
    assert extra == 2 * 4096 * 2 * (m.query_dim + m.kv_dim) / 4


MODEL = """\
num_layers: 32
hidden_size: 4096
num_attention_heads: 32
num_query_groups: 8
vocab_size: 32000
max_position_embeddings: 4096
swiglu: true
normalization: RMSNorm
"""


def test_model_defaults(write, cli):
    m = load_model(MODEL, "m.yaml")
    assert m.ffn_hidden_size == 10880  # int((4*4096*2/3)/64)*64 = 170*64, Megatron swiglu default
    assert m.kv_channels == 128 and m.activation == "swiglu"
    r = cli("validate", "two-site", "--model", write(MODEL), "--json")
    assert r.code == 0, r.stderr


@pytest.mark.parametrize("text, expected", [
    (MODEL.replace("num_query_groups: 8", "num_query_groups: 6"),
     "num_attention_heads (32) must be divisible by num_query_groups (6)"),
    (MODEL.replace("hidden_size: 4096", "hidden_size: 4100"),
     "hidden_size (4100) must be divisible by num_attention_heads (32)"),
    (MODEL + "num_experts: 8\n", "mixture-of-experts models are not supported yet ('num_experts')"),
    (MODEL + "activation: gelu\n", "swiglu: true contradicts activation: gelu"),
    (MODEL.replace("num_layers: 32", "num_layer: 32"), "unknown key 'num_layer'; did you mean 'num_layers'?"),
    # Hugging Face's names: the meaning, not the nearest spelling ('num_attention_heads')
    (MODEL.replace("num_query_groups: 8", "num_key_value_heads: 8"),
     "unknown key 'num_key_value_heads'; did you mean 'num_query_groups'?"),
    (MODEL.replace("num_layers: 32", "num_hidden_layers: 32"),
     "unknown key 'num_hidden_layers'; did you mean 'num_layers'?"),
    (MODEL.replace("num_layers: 32", "num_layers: 0"), "num_layers: must be >= 1 (got 0)"),
    (MODEL.replace("normalization: RMSNorm", "normalization: rmsnorm"), "must be one of 'LayerNorm' or 'RMSNorm'"),
    ("", "the file is empty"),
])
def test_bad_model(write, cli, text, expected):
    r = cli("validate", "two-site", "--model", write(text, "model.yaml"))
    assert r.code == 2
    assert expected in r.stderr, r.stderr


def test_unknown_preset_lists_choices(cli):
    r = cli("validate", "two-site", "--model", "llama3-70b")
    assert r.code == 2 and "did you mean" in r.stderr and "llama3.1-70b" in r.stderr


ROPE = """\
num_layers: 4
hidden_size: 1024
num_attention_heads: 16
vocab_size: 32000
max_position_embeddings: 8192
position_embedding_type: {pos}
"""


def test_rope_base_scaling_and_norm_epsilon():
    """rotary_base, use_rope_scaling, rope_scaling_factor and norm_epsilon (Megatron-LM's --rotary-base,
    --use-rope-scaling, --rope-scaling-factor, --norm-epsilon) are read; they change no cost. The Llama 3.1 presets
    carry theta 500,000 and the scaling; RoPE keys on a model without RoPE, and a factor without the scaling, are
    refused with the fix; `1e-5`, a string to YAML 1.1, is read as the number."""
    from dataclasses import replace

    from hgplan.errors import InputError
    m = load_model(ROPE.format(pos="rope") + "rotary_base: 1000000\nuse_rope_scaling: true\nrope_scaling_factor: 32\n"
                   "norm_epsilon: 1e-6\n", "m")
    assert (m.rotary_base, m.use_rope_scaling, m.rope_scaling_factor, m.norm_epsilon) == (1000000, True, 32.0, 1e-6)
    plain = load_model(ROPE.format(pos="rope"), "p")
    assert (plain.rotary_base, plain.use_rope_scaling, plain.norm_epsilon) == (10000, False, 1e-5)
    assert m.num_params() == plain.num_params() and replace(m, name="p", rotary_base=10000, use_rope_scaling=False,
                                                            rope_scaling_factor=8.0, norm_epsilon=1e-5) == plain
    for size in ("8b", "70b", "405b"):
        llama = load_model(catalog().model_texts[f"llama3.1-{size}"], size)
        assert llama.rotary_base == 500000 and llama.use_rope_scaling and llama.rope_scaling_factor == 8.0
    with pytest.raises(InputError, match="rotary_base sets RoPE, but position_embedding_type is learned_absolute"):
        load_model(ROPE.format(pos="learned_absolute") + "rotary_base: 500000\n", "bad")
    with pytest.raises(InputError, match="only with use_rope_scaling: true"):
        load_model(ROPE.format(pos="rope") + "rope_scaling_factor: 4\n", "bad")
    for bad in ("0", "1", "abc"):
        with pytest.raises(InputError, match="norm_epsilon: must be"):
            load_model(ROPE.format(pos="rope") + f"norm_epsilon: {bad}\n", "bad")
    assert load_model(ROPE.format(pos="learned_absolute") + "use_rope_scaling: false\n", "ok").use_rope_scaling is False
