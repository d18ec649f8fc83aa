"""The exported FlagScale configuration through FlagScale's own argument path.

Runs only where HGPLAN_FLAGSCALE names a FlagScale checkout (the docs cite da4935ec) and HGPLAN_FLAGSCALE_MEGATRON
its Megatron-LM backend: <FlagScale>/third_party/Megatron-LM after FlagScale's `python tools/patch/unpatch.py
--backend Megatron-LM` (its README, step 3), i.e. Megatron-LM at the pinned 8479eb35 with every patch under
flagscale/backends/Megatron-LM applied; CI has neither, and hgplan vendors no code of either. For the first rank of each mesh it does what FlagScale does before training: the runner's YAML to arguments
(runner/utils.py flatten_dict_to_args, FlagScale's own function, read from its source), the runner's
--hetero-current-device-type from the host's hostfile type, then parse_args, FSTrainArguments.pre_validate_args
(with torch.distributed answered from the hostfile: rank, world size, every rank's device type), validate_args and
post_validate_args; and it checks that the rank got its mesh's degrees. Checked on 2026-11-29 with the plans below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FLAGSCALE, BACKEND = os.environ.get("HGPLAN_FLAGSCALE"), os.environ.get("HGPLAN_FLAGSCALE_MEGATRON")
pytestmark = pytest.mark.skipif(not (FLAGSCALE and BACKEND),
                                reason="HGPLAN_FLAGSCALE and HGPLAN_FLAGSCALE_MEGATRON name no FlagScale checkout")
ROOT = Path(__file__).resolve().parent.parent

PARSE = textwrap.dedent("""
    import ast, contextlib, io, json, os, sys, typing
    typing.override = getattr(typing, "override", lambda f: f)  # Python 3.11: megatron.training imports it
    sys.path[:0] = [os.environ["HGPLAN_FLAGSCALE_MEGATRON"], os.environ["HGPLAN_FLAGSCALE"]]
    import torch
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: type("Props", (), {"major": 9, "minor": 0, "name": "H100"})()
    from omegaconf import OmegaConf
    src = open(os.path.join(os.environ["HGPLAN_FLAGSCALE"], "flagscale", "runner", "utils.py")).read()
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "flatten_dict_to_args")
    exec(compile(ast.Module([fn], []), "flagscale/runner/utils.py", "exec"))
    from megatron.training.arguments import parse_args, validate_args
    from flagscale.train.arguments import FSTrainArguments
    out = sys.argv[1]
    exp = OmegaConf.load(os.path.join(out, "conf", "train_hgplan.yaml"))
    cfg = OmegaConf.merge(exp, {"train": OmegaConf.load(os.path.join(out, "conf", "train", "hgplan.yaml"))})
    train = OmegaConf.to_container(cfg, resolve=True)["train"]
    flat = {**train["system"], **train["model"], **train["data"]}
    argv = flatten_dict_to_args(flat, ["log_dir", "details_dir", "scripts_dir", "pids_dir"])
    ranks = []
    for line in open(os.path.join(out, "hostfile")):
        host, slots, typ = line.split()
        ranks += [typ.split("=")[1]] * int(slots.split("=")[1])
    meshes = flat["hetero"]["hetero_process_meshes"]
    firsts, at = [], 0
    for i in range(0, len(meshes), 5):
        firsts.append(at)
        tp, cp, ep, dp, pp = meshes[i:i + 5]
        at += tp * cp * dp * pp
    dist = torch.distributed
    got = []
    for rank in firsts:
        args_in = list(argv)
        args_in[args_in.index("--hetero-current-device-type") + 1] = ranks[rank]
        sys.argv = ["train_gpt.py", *args_in, "--train-iters", "10", "--tokenizer-type", "NullTokenizer",
                    "--vocab-size", "32000", "--lr", "1e-4"]
        os.environ.update(WORLD_SIZE=str(len(ranks)), RANK=str(rank), LOCAL_RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
        fake = {"is_initialized": lambda: True, "get_rank": lambda: rank, "get_world_size": lambda: len(ranks),
                "all_gather_object": lambda lst, obj: lst.__setitem__(
                    slice(None), [{"rank": i, "device_type": t} for i, t in enumerate(ranks)])}
        saved = {k: getattr(dist, k) for k in fake}
        for k, v in fake.items():
            setattr(dist, k, v)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                args = parse_args()
                fs = FSTrainArguments(args)
                fs.pre_validate_args()
                validate_args(args, {})
                fs.post_validate_args()
        finally:
            for k, v in saved.items():
                setattr(dist, k, v)
        got.append([args.tensor_model_parallel_size, args.data_parallel_size, args.pipeline_model_parallel_size,
                    args.micro_batch_size, bool(args.sequence_parallel)])
    print(json.dumps(got))
""")

DATA = ROOT / "benchmarks" / "data"
CASES = {
    "a100-t4": (str(DATA / "a100-t4.yaml"), ["-m", "gpt-1.7b", "--seq-len", "2048", "--global-batch", "128",
                                             "--precision", "fp16"]),
    "v100-a100-t4": (str(DATA / "v100-a100-t4.yaml"), ["-m", "llama3.1-8b", "--seq-len", "2048",
                                                       "--global-batch", "256", "--precision", "fp16"]),
    "three-generations": ("three-generations", ["-m", "llama2-13b", "--seq-len", "4096", "--global-batch", "512"]),
    "mixed-vendor": ("mixed-vendor", ["-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "512"]),
    "mixed-nic": ("mixed-nic", ["-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "512"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exported_configuration_passes_flagscale(cli, tmp_path, case):
    cluster, args = CASES[case]
    plan = tmp_path / "plan.json"
    r = cli("search", "-c", cluster, *args, "--target", "flagscale", "--no-baselines", "-o", plan)
    assert r.code == 0, r.stderr
    out = tmp_path / "fs"
    r = cli("export", plan, "--format", "flagscale", "-o", out)
    assert r.code == 0, r.stderr
    run = subprocess.run([sys.executable, "-c", PARSE, str(out)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HGPLAN_FLAGSCALE": FLAGSCALE, "HGPLAN_FLAGSCALE_MEGATRON": BACKEND})
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    doc = json.loads(plan.read_text())["plan"]
    keys = [(st["node_group"], st.get("tp") or doc["tp"], st.get("dp") or doc["dp"]) for st in doc["stages"]]
    want = []
    for i, key in enumerate(keys):  # the plan's meshes: runs of one node group, tp and dp
        if i and key == keys[i - 1]:
            want[-1][2] += 1
        else:
            want.append([key[1], key[2], 1, doc["dp"] * doc["micro_batch_size"] // key[2], key[1] > 1])
    assert got == want


def test_recompute_per_mesh_passes_flagscale(tmp_path):
    """Full recomputation on one mesh and none on the other: FlagScale's per-stage rows, which its
    post_validate_args parses and checks against each mesh's micro-batches."""
    from hgplan.export.flagscale import export_flagscale
    from hgplan.inputs import make_training
    from hgplan.io import catalog, resolve_cluster, resolve_model
    from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
    fleet, _, _ = resolve_cluster(str(DATA / "a100-t4.yaml"), catalog())
    model, _ = resolve_model("gpt-1.7b")
    train = make_training({"seq_length": 2048, "global_batch_size": 128, "precision": "fp16"}, model)
    plan = Plan(config=ParallelConfig(tp=1, pp=4, dp=4, micro_batch_size=2, zero_stage=1), stages=(
        StageAssignment(node_group="dc/a100", num_layers=16, tp=1, dp=4, recompute=Recompute.FULL),
        *(StageAssignment(node_group="dc/t4", num_layers=n, tp=1, dp=8, recompute=Recompute.NONE) for n in (3, 3, 2))))
    for name, text in export_flagscale(plan, fleet, model, train).files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-c", PARSE, str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HGPLAN_FLAGSCALE": FLAGSCALE, "HGPLAN_FLAGSCALE_MEGATRON": BACKEND})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [[1, 4, 1, 2, False], [1, 8, 3, 1, False]]
