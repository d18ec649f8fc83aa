"""hgplan's per-stage memory vs Megatron-LM's theoretical_memory_usage for the first stage.

Usage: python benchmarks/memory_compare.py
"""

from __future__ import annotations

from hgplan.costmodel.memory import megatron_theoretical_gib, stage_memory
from hgplan.inputs import load_model
from hgplan.io import catalog
from hgplan.domain import Precision
from hgplan.plan import ParallelConfig, Recompute

CASES = [
    ("gpt3-175b", 2048, dict(tp=8, pp=8, dp=4, micro_batch_size=1, recompute=Recompute.SELECTIVE, sequence_parallel=True,
                             zero_stage=1), 64),
    ("gpt3-175b", 2048, dict(tp=8, pp=8, dp=4, micro_batch_size=1, recompute=Recompute.NONE, zero_stage=0), 64),
    ("llama2-70b", 4096, dict(tp=8, pp=4, dp=8, micro_batch_size=1, recompute=Recompute.SELECTIVE, sequence_parallel=True,
                              zero_stage=1), 64),
    ("llama3.1-8b", 8192, dict(tp=2, pp=1, dp=32, micro_batch_size=1, recompute=Recompute.SELECTIVE,
                               sequence_parallel=True, zero_stage=1), 16),
    ("gpt-1t", 2048, dict(tp=8, pp=64, dp=6, micro_batch_size=1, vpp=2, recompute=Recompute.SELECTIVE,
                          sequence_parallel=True, zero_stage=1), 512),
]


def main() -> None:
    print(f"{'model':14} {'config':42} {'hgplan GiB':>10} {'Megatron GiB':>12} {'diff':>7}")
    for name, seq, kw, m in CASES:
        model = load_model(catalog().model_texts[name], name)
        cfg = ParallelConfig(**kw)
        layers = model.num_layers // cfg.pp
        ours = stage_memory(model, cfg, precision=Precision.BF16, seq_length=seq, num_microbatches=m, stage=0,
                            layers=layers, flash=False)
        # Megatron's estimate has no framework overhead and no flash attention: compare like with like
        ours_total = ours.total_gib - ours.overhead_gib
        theirs = megatron_theoretical_gib(model, cfg, seq_length=seq, num_microbatches=m)
        desc = (f"tp{cfg.tp} pp{cfg.pp} dp{cfg.dp} vpp{cfg.vpp} mbs{cfg.micro_batch_size} {cfg.recompute.value}"
                f"{' sp' if cfg.sequence_parallel else ''} zero{cfg.zero_stage}")
        print(f"{name:14} {desc:42} {ours_total:10.2f} {theirs:12.2f} {ours_total / theirs - 1:+7.1%}")


if __name__ == "__main__":
    main()
