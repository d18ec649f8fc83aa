"""hgplan's predictions beside the real H100 measurements of megatron-core steps (shared/reference/h100-measured.json).

Usage: python benchmarks/h100_measured.py [--json FILE] [--data PATH] [--profile FILE] [--as-bench FILE]
       python benchmarks/h100_measured.py --mcore-jsonl mcore.jsonl --gpu H200-SXM-141GB  (another GPU's steps)

Each measured configuration (one H100 80GB HBM3 SXM, megatron-core 0.16.1 local spec, bf16, TP = PP = DP = 1)
becomes a one-GPU fleet, a Llama model of the measured depth and a plan, predicted with `transformer_impl: local`
(the spec measured) and the attention kernel the run used. Printed per configuration: forward+backward time,
forward time, activation memory (peak allocated minus weights and the fp32 gradient buffer) and peak memory of a
forward+backward; then the per-layer activation memory from differencing two depths and the optimizer step.
Targets (issue 10): fwd+bwd within +-7%, per-layer activations +-8%, peak +-8%, optimizer step +-15%.
Errors are (hgplan - measured) / measured. `--mcore-jsonl` reads the raw output of shared/gpu-bench/mcore_bench.py
(the script that measured the sheet) from another GPU instead, `--gpu` names its catalog id; benchmarks/data/
h200-2026-11-25/mcore.jsonl is one, from a lent H200.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from optimizer_bytes import HGPLAN_BYTES, STEPS

from hgplan.costmodel.compute import hbm_s
from hgplan.costmodel.evaluate import evaluate
from hgplan.domain import Attention, Fleet, NodeGroup, TrainingSettings, TransformerImpl, Transport
from hgplan.inputs import Catalog, load_model
from hgplan.io import catalog, resolve_profile
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "h100-measured.json"
ATTENTION = {"flash": Attention.FLASH2, "cudnn": Attention.FUSED, "unfused": Attention.UNFUSED}
"""The measured attention implementations: PyTorch SDPA's flash backend is FlashAttention-2, its cuDNN backend is
the fused attention Transformer Engine uses on Hopper, and the local spec's own DotProductAttention is unfused."""


def one_gpu_fleet(cat: Catalog | None = None, gpu_id: str = "H100-SXM5-80GB") -> Fleet:
    """One GPU in one node: the measured machine (with the catalog's constants, or a calibrated catalog's)."""
    cat = cat or catalog()
    gpu = cat.gpu_type(cat.gpus[gpu_id])
    group = NodeGroup(site="lab", name="h100", num_nodes=1, gpu=gpu, gpus_per_node=1, intra_node_kind="nvlink",
                      intra_node_gbytes_per_s=gpu.intra_node_gbytes_per_s, nic_transport=Transport.INFINIBAND,
                      nic_gbps=400, nic_count=1, gpu_hour_usd=None, order=0)
    return Fleet(name="h100-measured", groups=(group,), links=(), transports=cat.transports)


def model_of(name: str, layers: int):
    """The catalog preset with the measured number of layers (untied embeddings, as Llama 3.1)."""
    text = catalog().model_texts[name]
    lines = [ln for ln in text.splitlines() if not ln.startswith("num_layers:")]
    return load_model("\n".join(lines + [f"num_layers: {layers}"]) + "\n", f"{name}-L{layers}")


def predict(cfg: dict, cat: Catalog | None = None, impl: TransformerImpl = TransformerImpl.LOCAL,
            gpu_id: str = "H100-SXM5-80GB") -> dict:
    """hgplan's prediction of one measured configuration (as the local spec it ran, or as `impl`)."""
    fleet = one_gpu_fleet(cat, gpu_id)
    model = model_of(cfg["model"], cfg["layers"])
    train = TrainingSettings(seq_length=cfg["seq"], global_batch_size=cfg["mbs"], attention=ATTENTION[cfg["attn"]],
                             transformer_impl=impl)
    rc = Recompute.FULL if cfg["recompute"] == "full" else Recompute.NONE
    plan = Plan(config=ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=cfg["mbs"], recompute=rc),
                stages=(StageAssignment(node_group="lab/h100", num_layers=cfg["layers"]),))
    st = evaluate(plan, fleet, model, train).stages[0]
    mem = st.memory
    return {"fwd_bwd_ms": (st.fwd_s + st.bwd_s) * 1e3, "fwd_ms": st.fwd_s * 1e3, "act_gib": mem.activations_gib,
            "peak_gib": mem.weights_gib + mem.gradients_gib + mem.activations_gib, "optimizer_ms": st.optimizer_s * 1e3,
            "params": mem.params}


def timed_step_bytes_per_param(fused: bool) -> int:
    """HBM bytes per parameter of what mcore_bench.py times as `opt.step()` in its build without Transformer Engine
    or Apex (optimizer_bytes.STEPS: the gradient norm, Adam (torch's fused AdamW where the script swaps it in,
    standing in for the fused Adam that TE or Apex brings, else torch's multi-tensor AdamW, the local spec's
    fallback) and megatron-core's local multi-tensor copy of the weights; the main-gradient buffer is zeroed outside
    the timed step), as hgplan counts each part."""
    return sum(HGPLAN_BYTES[part] for part in STEPS["fused" if fused else "foreach"])


def _err(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def compare(data: dict, cat: Catalog | None = None, gpu_id: str = "H100-SXM5-80GB") -> dict:
    """Per-configuration and per-layer errors, and the optimizer step."""
    configs = [c for c in data["megatron_configs"] if c["model"].startswith("llama") and "meas_fwd_bwd_ms" in c
               and not c.get("softmax_fp32")]
    rows = []
    for c in configs:
        p = predict(c, cat, gpu_id=gpu_id)
        rows.append({"name": c["name"], "fwd_bwd": _err(p["fwd_bwd_ms"], c["meas_fwd_bwd_ms"]),
                     "fwd": _err(p["fwd_ms"], c["meas_fwd_ms"]), "act": _err(p["act_gib"], c["meas_act_peak_gib"]),
                     "peak": _err(p["peak_gib"], c["meas_peak_gib"]), "pred": p, "meas": c})
    layers = []
    for pl in data["per_layer"]:
        name = pl["name"].replace(" (per layer)", "")
        model, rest = name.split("-", 1)
        deep = [r for r in rows if r["name"].startswith(model + "-L") and r["name"].split("-", 2)[2] == rest]
        if len(deep) < 2:
            continue
        a, b = sorted(deep, key=lambda r: r["meas"]["layers"])[-1], sorted(deep, key=lambda r: r["meas"]["layers"])[0]
        dl = a["meas"]["layers"] - b["meas"]["layers"]
        pred_act = (a["pred"]["act_gib"] - b["pred"]["act_gib"]) / dl
        layers.append({"name": pl["name"], "act": _err(pred_act, pl["meas_act_gib"]),
                       "ms": _err((a["pred"]["fwd_bwd_ms"] - b["pred"]["fwd_bwd_ms"]) / dl, pl["meas_ms"])})
    opt = []
    gpu = one_gpu_fleet(cat, gpu_id).groups[0].gpu
    for r in rows:
        for key in ("optimizer_result_fused", "optimizer_result"):
            res = r["meas"].get(key)
            if isinstance(res, dict) and "optimizer_step_ms" in res:
                fused = key.endswith("fused")
                pred_ms = hbm_s(gpu, r["pred"]["params"] * timed_step_bytes_per_param(fused)) * 1e3
                opt.append({"name": f"{r['name']} ({key.replace('optimizer_result', 'torch AdamW') or 'foreach'})",
                            "error": _err(pred_ms, res["optimizer_step_ms"]), "fused": fused})
    return {"configs": rows, "per_layer": layers, "optimizer": opt}


def from_mcore_jsonl(lines: list[str]) -> dict:
    """mcore_bench.py's output (one JSON object per line) in the sheet's form: each finished configuration with the
    sheet's fields, and the per-layer figures of every pair of depths of one configuration (deeper minus shallower)."""
    gib = 2**30
    configs = []
    for row in (json.loads(line) for line in lines if line.strip()):
        if row.get("fwd_bwd_ms_median") is None:
            continue
        c = {k: row[k] for k in ("name", "model", "layers", "seq", "mbs", "attn", "softmax_fp32")}
        c.update(recompute=row["recompute"] or "none", meas_fwd_bwd_ms=row["fwd_bwd_ms_median"],
                 meas_fwd_ms=row["fwd_ms_median"], meas_params=row["params"],
                 meas_act_peak_gib=(row["peak_allocated"] - row["mem_after_ddp"]) / gib,
                 meas_peak_gib=row["peak_allocated"] / gib)
        c.update({k: row[k] for k in ("optimizer_result", "optimizer_result_fused") if k in row})
        configs.append(c)
    per_layer = []
    by_rest: dict[tuple[str, str], list[dict]] = {}
    for c in configs:
        model, depth, rest = c["name"].split("-", 2)
        by_rest.setdefault((model, rest), []).append(c)
    for (model, rest), group in sorted(by_rest.items()):
        if len(group) >= 2 and not group[0]["softmax_fp32"]:
            a, b = max(group, key=lambda c: c["layers"]), min(group, key=lambda c: c["layers"])
            dl = a["layers"] - b["layers"]
            per_layer.append({"name": f"{model}-{rest} (per layer)",
                              "meas_ms": (a["meas_fwd_bwd_ms"] - b["meas_fwd_bwd_ms"]) / dl,
                              "meas_act_gib": (a["meas_act_peak_gib"] - b["meas_act_peak_gib"]) / dl})
    return {"megatron_configs": configs, "per_layer": per_layer}


SDPA_KERNELS = {"sdpa_flash": "flash2", "sdpa_cudnn": "fused", "unfused": "unfused"}
"""h100-measured's attention implementations as `hgplan bench` names the kernel families."""


def as_bench_report(data: dict) -> dict:
    """The shared H100 kernel measurements as the report `hgplan bench` writes (for `hgplan calibrate --bench`):
    its GEMM sweep (section A), its attention kernels (A3, head dim from the model preset) and its copy ceilings."""
    dev = data["device"]
    copies = [{"bytes": round(c["copy_gbytes_per_s_read_plus_write"] * c["copy_ms"] * 1e6 / 2), "ms": c["copy_ms"]}
              for c in data["ceilings"]]
    return {
        "schema_version": "1", "kind": "hgplan.bench", "hgplan_version": "h100-measured", "gpu": "H100-SXM5-80GB",
        "device": {"name": dev["device"], "backend": "cuda", "count": 1, "torch_version": dev["torch"],
                   "runtime_version": dev["cuda"], "sm_count": dev["sm_count"],
                   "memory_gib": round(dev["total_memory"] / 2**30, 3)},
        "precision": "bf16", "repeats": min(len(g["ms_runs"]) for g in data["gemms"]),
        "gemms": [{"m": g["m"], "n": g["n"], "k": g["k"], "ms": g["ms"], "runs_ms": g["ms_runs"]}
                  for g in data["gemms"]],
        "attention": [{"kernel": SDPA_KERNELS[a["impl"]], "batch": a["mbs"], "heads": a["heads"], "seq": a["seq"],
                       "head_dim": model_of(a["model"], 1).kv_channels, "fwd_ms": a["fwd_ms"],
                       "fwd_bwd_ms": a["fwd_bwd_ms"]}
                      for a in data["attention_kernels"]],
        "copies": copies, "skipped": ["collectives: one GPU was measured"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--json", help="also write the comparison to this file")
    ap.add_argument("--profile", help="predict with a calibration profile's constants (hgplan calibrate -o FILE)")
    ap.add_argument("--mcore-jsonl", metavar="FILE", help="read mcore_bench.py's raw output instead of --data")
    ap.add_argument("--gpu", default="H100-SXM5-80GB", help="catalog id of the GPU measured")
    ap.add_argument("--as-bench", metavar="FILE", help="write the kernel measurements as an `hgplan bench` report "
                                                     "(for `hgplan calibrate --bench FILE`) and stop")
    args = ap.parse_args()
    if args.mcore_jsonl:
        data = from_mcore_jsonl(Path(args.mcore_jsonl).read_text().splitlines())
    else:
        data = json.loads(Path(args.data).read_text())
    if args.as_bench:
        Path(args.as_bench).write_text(json.dumps(as_bench_report(data), indent=2) + "\n")
        return 0
    out = compare(data, resolve_profile(args.profile)[0] if args.profile else None, args.gpu)
    print(f"{'configuration':34} {'fwd+bwd':>8} {'fwd':>8} {'act':>8} {'peak':>8}")
    for r in out["configs"]:
        print(f"{r['name']:34} {r['fwd_bwd']:+8.1%} {r['fwd']:+8.1%} {r['act']:+8.1%} {r['peak']:+8.1%}")
    for r in out["per_layer"]:
        print(f"{r['name']:34} per-layer time {r['ms']:+.1%}, activations {r['act']:+.1%}")
    for r in out["optimizer"]:
        print(f"optimizer step {r['name']}: {r['error']:+.1%}")

    def med(key: str, rows: list) -> str:
        vals = [abs(r[key]) for r in rows]
        return f"median |error| {statistics.median(vals):.1%}, worst {max(vals):.1%}"

    fused = [r for r in out["configs"] if r["meas"]["attn"] != "unfused"]
    print(f"fwd+bwd, fused or flash attention ({len(fused)}): {med('fwd_bwd', fused)}")
    print(f"fwd+bwd, all ({len(out['configs'])}): {med('fwd_bwd', out['configs'])}")
    print(f"peak memory, all: {med('peak', out['configs'])}")
    print(f"per-layer activations ({len(out['per_layer'])}): {med('act', out['per_layer'])}")
    if args.json:
        Path(args.json).write_text(json.dumps({k: [{kk: vv for kk, vv in r.items() if kk != "meas"} for r in v]
                                               for k, v in out.items()}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
