"""FLOP counts. Model FLOPs follow Megatron-LM's num_floating_point_operations exactly."""

from __future__ import annotations

from hgplan.domain import ModelArch


def megatron_model_flops(model: ModelArch, *, global_batch_size: int, seq_length: int) -> float:
    """FLOPs of one iteration as megatron/training/training.py counts them (no recompute, causal s^2 halved).

    6*T*[L*(f*h*F + 2*h*q + 2*h*g*d) + h*V] + 6*B*s^2*L*q, with T = B*s tokens, f = 3 for swiglu else 2,
    V the padded vocabulary at TP=1 (Megatron logs use the padded size of the run; the difference is < 0.3%).
    """
    h, q, kv, f_ffn, L = model.hidden_size, model.query_dim, model.kv_dim, model.ffn_hidden_size, model.num_layers
    f = 3 if model.gated else 2
    tokens = global_batch_size * seq_length
    vocab = model.padded_vocab(1)
    per_token = L * (f * h * f_ffn + 2 * h * q + 2 * h * kv) + h * vocab
    return 6.0 * tokens * per_token + 6.0 * global_batch_size * seq_length ** 2 * L * q
