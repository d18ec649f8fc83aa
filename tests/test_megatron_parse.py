"""The exported Megatron-LM arguments through Megatron-LM's own parse_args and validate_args.

Runs only where HGPLAN_MEGATRON_LM names a Megatron-LM checkout (the docs cite commit d98e8a6; its `megatron/`
package must import with the installed torch): CI has none, and hgplan does not vendor Megatron-LM's code. On a
machine without a GPU, torch.cuda's device queries are answered as an H100's (validate_args asks for them) and the
data, tokenizer and iteration count the plan does not choose are given (mock data, NullTokenizer). Checked on
2026-11-29 against d98e8a6 with plans of: one and two sites, 3-GPU nodes (world 15, pp 5, uneven layout), CP 16
across nodes, fp8 with CP 4, interleaving 4 deep, the local spec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

MEGATRON = os.environ.get("HGPLAN_MEGATRON_LM")
pytestmark = pytest.mark.skipif(not MEGATRON, reason="HGPLAN_MEGATRON_LM names no Megatron-LM checkout")

PARSE = textwrap.dedent("""
    import json, os, sys, typing
    typing.override = getattr(typing, "override", lambda f: f)  # Python 3.11: megatron.training imports it
    import torch
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: type("Props", (), {"major": 9, "minor": 0, "name": "H100"})()
    sys.path.insert(0, os.environ["HGPLAN_MEGATRON_LM"])
    from megatron.training.arguments import parse_args, validate_args
    doc = json.load(sys.stdin)
    world = sum(n["nproc"] for n in doc["nodes"])
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0", **doc["nodes"][0]["env"])
    sys.argv = ["pretrain_gpt.py", *doc["argv"], "--train-iters", "10", "--mock-data", "--tokenizer-type",
                "NullTokenizer", "--vocab-size", "128256", "--lr", "1e-4"]
    args = validate_args(parse_args(), {})
    print(json.dumps({"tp": args.tensor_model_parallel_size, "cp": args.context_parallel_size,
                      "pp": args.pipeline_model_parallel_size, "dp": args.data_parallel_size}))
""")

CASES = {
    "cp-across-nodes": (["-m", "llama3.1-8b", "--seq-len", "65536", "--global-batch", "2"], (2, 16, 1, 2)),
    "interleaved": (["-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "32", "--max-vpp", "4"], None),
    "local-spec": (["-m", "gpt-18.4b", "--seq-len", "2048", "--global-batch", "64", "--transformer-impl", "local"],
                   None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exported_arguments_pass_megatron_lm(cli, tmp_path, case):
    fleet = tmp_path / "h64.yaml"
    fleet.write_text("name: h64\nsites:\n  - name: dc\n    node_groups:\n      - {name: h100, count: 8, gpu: "
                     "H100-SXM5-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}\n")
    args, degrees = CASES[case]
    plan = tmp_path / "plan.json"
    r = cli("search", "-c", fleet, *args, "--no-baselines", "-o", plan)
    assert r.code == 0, r.stderr
    exported = cli("export", plan, "--format", "megatron", "--json")
    assert exported.code == 0, exported.stderr
    run = subprocess.run([sys.executable, "-c", PARSE], input=exported.stdout, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    doc = json.loads(plan.read_text())["plan"]
    assert (got["tp"], got["cp"], got["pp"], got["dp"]) == (degrees or (doc["tp"], doc["cp"], doc["pp"], doc["dp"]))
