"""Issue 14 (Megatron-style flags): every training and parallelism option also answers to Megatron-LM's spelling,
and help piped into a file or CI log never cuts an option name."""

from __future__ import annotations

import os
import subprocess
import sys

SHORT = ["-c", "mixed-vendor", "-m", "llama3.1-8b", "--tp", "2", "--pp", "2", "--dp", "4", "--cp", "1", "--mbs", "2",
         "--vpp", "1", "--recompute", "selective", "--distributed-optimizer", "--stage-groups", "dc1/a100,dc1/a100",
         "--seq-len", "4096", "--global-batch", "64", "--json"]
MEGATRON = ["-c", "mixed-vendor", "-m", "llama3.1-8b", "--tensor-model-parallel-size", "2",
            "--pipeline-model-parallel-size", "2", "--dp", "4", "--context-parallel-size", "1",
            "--micro-batch-size", "2", "--num-virtual-stages-per-pipeline-rank", "1",
            "--recompute-granularity", "selective", "--use-distributed-optimizer", "--stage-groups", "dc1/a100,dc1/a100",
            "--seq-length", "4096", "--global-batch-size", "64", "--json"]


def _without_timing(doc):
    """The document without wall-clock fields."""
    if isinstance(doc, dict):
        return {k: _without_timing(v) for k, v in doc.items() if k not in ("wall_time_s",)}
    if isinstance(doc, list):
        return [_without_timing(v) for v in doc]
    return doc


def test_explain_takes_megatron_spellings(cli):
    short, long = cli("explain", *SHORT), cli("explain", *MEGATRON)
    assert short.code == 0, short.stderr
    assert long.code == 0, long.stderr
    assert _without_timing(long.json()) == _without_timing(short.json())


def test_search_takes_megatron_spellings(cli):
    args = ["search", "-c", "mixed-vendor", "-m", "llama3.1-8b", "--time-limit", "20", "--no-baselines", "--json"]
    short = cli(*args, "--seq-len", "2048", "--global-batch", "64")
    long = cli(*args, "--seq-length", "2048", "--global-batch-size", "64")
    assert short.code == 0 and long.code == 0, long.stderr
    assert _without_timing(long.json())["plans"] == _without_timing(short.json())["plans"]


def test_piped_help_keeps_every_option_name_whole():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for command in ("search", "explain", "export", "validate"):
        text = subprocess.run([sys.executable, "-m", "hgplan.cli", command, "--help"], capture_output=True, text=True,
                              env=env, check=True).stdout
        assert "…" not in text, command
    text = subprocess.run([sys.executable, "-m", "hgplan.cli", "explain", "--help"], capture_output=True, text=True,
                          env=env, check=True).stdout
    assert "--tensor-model-parallel-size" in text and "--num-virtual-stages-per-pipeline-rank" in text
