"""Issue 14 (Megatron-style flags): every training and parallelism option also answers to Megatron-LM's spelling,
and help piped into a file or CI log never cuts an option name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

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


TRAIN_EXPLAIN = ["explain", "-c", "mixed-nic", "-m", "gpt-1.7b", "--tp", "1", "--pp", "1", "--dp", "32",
                 "--stage-groups", "lab/ib", "--json"]


def _training(cli, tmp_path, text: str, name: str = "train.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return cli(*TRAIN_EXPLAIN, "--training", path)


def test_training_yaml_takes_megatron_keys(cli, tmp_path):
    ours = _training(cli, tmp_path, "seq_length: 2048\nglobal_batch_size: 64\nprecision: bf16\nattention: flash2\n")
    theirs = _training(cli, tmp_path, "seq_length: 2048\nglobal_batch_size: 64\nbf16: true\nattention_backend: flash\n")
    assert ours.code == theirs.code == 0, theirs.stderr
    assert ours.json() == theirs.json()
    h100 = ["explain", "-c", "two-site", "-m", "gpt-1.7b", "--tp", "1", "--pp", "1", "--dp", "128", "--stage-groups",
            "beijing/h100", "--json", "--training"]
    (tmp_path / "a.yaml").write_text("seq_length: 2048\nglobal_batch_size: 128\nbf16: true\nfp8_format: hybrid\n")
    (tmp_path / "b.yaml").write_text("seq_length: 2048\nglobal_batch_size: 128\nprecision: fp8\n")
    fp8, own = cli(*h100, tmp_path / "a.yaml"), cli(*h100, tmp_path / "b.yaml")
    assert fp8.code == own.code == 0 and fp8.json() == own.json(), fp8.stderr
    assert fp8.json()["inputs"]["training"]["precision"] == "fp8"


@pytest.mark.parametrize("text, says", [
    ("seq_length: 2048\nglobal_batch_size: 64\nbf16: true\nfp16: true\n", "bf16 and fp16 are both set"),
    ("seq_length: 2048\nglobal_batch_size: 64\nfp16: true\nfp8_format: e4m3\n", "needs one of --bf16/--fp16"),
    ("seq_length: 2048\nglobal_batch_size: 64\nprecision: fp16\nbf16: true\n", "contradicts"),
    ("seq_length: 2048\nglobal_batch_size: 64\nbf16: 'yes'\n", "bf16"),
    ("seq_length: 2048\nglobal_batch_size: 64\nattention_backend: fast\n", "attention_backend"),
    ("--seq-length 2048 --global-batch-size 64\n", "trains in fp32"),
    ("--seq-length --global-batch-size 64 --bf16\n", "--seq-length needs a value"),
    ("--seq-length 2k --global-batch-size 64 --bf16\n", "must be an integer"),
])
def test_contradicting_or_unmodelled_megatron_settings_are_exit_2(cli, tmp_path, text, says):
    r = _training(cli, tmp_path, text)
    assert r.code == 2 and says in r.stderr, r.stderr


def test_an_exported_argument_file_reads_back_as_the_plans_training(cli, tmp_path):
    """A plan's megatron_args.txt (hgplan export) as --training gives the plan's own training settings, and says
    which of its flags it did not read."""
    plan = tmp_path / "plan.json"
    r = cli("search", "-c", "mixed-nic", "-m", "gpt-1.7b", "--seq-len", "1024", "--global-batch", "64", "--top", "1",
            "--no-baselines", "-o", plan)
    assert r.code == 0, r.stderr
    assert cli("export", plan, "-f", "megatron", "-o", tmp_path / "launch").code == 0
    args = tmp_path / "launch" / "megatron_args.txt"
    r = cli(*TRAIN_EXPLAIN, "--training", args)
    assert r.code == 0, r.stderr
    import json
    assert r.json()["inputs"]["training"] == json.loads(plan.read_text())["inputs"]["training"]
    assert "not read" in r.stderr and "--tensor-model-parallel-size" in r.stderr and "--num-layers" in r.stderr
    # one flag per line with shell continuations and comments, as people write them
    spelled = tmp_path / "args.sh"
    spelled.write_text("# my run\n--seq-length \\\n  1024 \\\n  --global-batch-size=64 \\\n  --bf16  # precision\n")
    again = cli(*TRAIN_EXPLAIN, "--training", spelled)
    assert again.code == 0 and again.json()["inputs"]["training"] == r.json()["inputs"]["training"], again.stderr


RECIPE = """\
# Megatron-Bridge ConfigContainer excerpt
model:
  seq_length: 2048
  tensor_model_parallel_size: 1
  attention_backend: flash
train:
  global_batch_size: 64
  micro_batch_size: 1
dataset:
  sequence_length: 2048
mixed_precision: bf16_mixed
optimizer: {lr: 0.0003}
"""


def test_a_megatron_bridge_recipe_excerpt_is_a_training_file(cli, tmp_path):
    flat = _training(cli, tmp_path, "seq_length: 2048\nglobal_batch_size: 64\nprecision: bf16\nattention: flash2\n")
    recipe = _training(cli, tmp_path, RECIPE, "recipe.yaml")
    assert recipe.code == 0, recipe.stderr
    assert recipe.json() == flat.json()
    assert "model.tensor_model_parallel_size" in recipe.stderr and "train.micro_batch_size" in recipe.stderr


@pytest.mark.parametrize("change, says", [
    (("mixed_precision: bf16_mixed", "mixed_precision: bf16_with_fp8_current_scaling_mixed"), "not modelled exactly"),
    (("mixed_precision: bf16_mixed", "mixed_precision: {bf16: true, fp8: hybrid, fp8_recipe: blockwise}"),
     "not modelled exactly"),
    (("mixed_precision: bf16_mixed", "mixed_precision: {bf16: true, fp8: hybrid, first_last_layers_bf16: true}"),
     "not modelled exactly"),
    (("  sequence_length: 2048", "  sequence_length: 4096"), "differ"),
    (("  attention_backend: flash", "  attention_backend: flash\n  fp16: true"), "both set"),
])
def test_recipes_hgplan_cannot_model_exactly_are_exit_2(cli, tmp_path, change, says):
    r = _training(cli, tmp_path, RECIPE.replace(*change), "recipe.yaml")
    assert r.code == 2 and says in r.stderr, r.stderr


def test_shell_completion_completes_commands_and_options():
    """`hgplan --install-completion` (README) installs typer's completion; the script it installs asks hgplan
    itself, as this does."""
    def complete(words: str, cword: int) -> list[str]:
        env = dict(os.environ, _HGPLAN_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
        return subprocess.run([shutil.which("hgplan")], env=env, capture_output=True, text=True,
                              check=True).stdout.split()  # the console script: completion keys on its name

    assert complete("hgplan rep", 1) == ["report"]
    assert complete("hgplan search --global-b", 2) == ["--global-batch", "--global-batch-size"]
