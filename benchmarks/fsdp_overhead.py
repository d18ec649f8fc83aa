"""What the `fsdp` runtime's 0.85 efficiency stands for, read from the llm-foundry rows of the calibration set.

Every bf16 llm-foundry row (PyTorch FSDP, Triton FlashAttention) is predicted with the runtime efficiency at 1.0,
and its shortfall against the published time is split by least squares (relative errors), per GPU type, into
  o x (micro-batches x layers x passes)   a fixed cost per layer and pass (forward, backward, recompute)
  alpha x (the attention core's time)     the attention kernel running slower than its efficiency says
Nothing in the cost model changes; the script prints the two figures, the fit's median and worst error and its
worst rows, beside the error of the model as it is. See docs/cost-model.md, section 2 ("Runtime efficiency").

Usage: python benchmarks/fsdp_overhead.py [--calibration PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

import fidelity_cases as fidelity
from hgplan.costmodel import compute
from hgplan.costmodel.evaluate import evaluate
from hgplan.domain import Runtime
from hgplan.io import catalog

HERE = Path(__file__).resolve().parent


def rows_by_gpu(calibration: list[dict]) -> dict[str, list[tuple[str, float, float, float, float]]]:
    """Per GPU type (the row id's), each bf16 llm-foundry row as (id, published s, predicted s at runtime efficiency
    1.0, layer passes, attention seconds) over the iteration."""
    cat, out = catalog(), {}
    saved = compute.RUNTIME_EFFICIENCY[Runtime.FSDP]
    compute.RUNTIME_EFFICIENCY[Runtime.FSDP] = 1.0
    try:
        for row in calibration:
            if not row["id"].startswith("mosaic") or "fp8" in row["id"]:
                continue
            case = fidelity.case_from_row(row, cat)
            if isinstance(case, str):
                continue
            plan = case.plans[0]
            pred = evaluate(plan, case.fleet, case.model, case.train)
            full = plan.config.recompute.value == "full"
            gpu = case.fleet.groups[0].gpu
            fwd, bwd, _, _ = compute._attention_s(case.model, gpu, plan.config, case.train,
                                                  compute.attention_kernel(case.train, gpu))
            per_layer = pred.num_microbatches * case.model.num_layers
            key = row["id"].removeprefix("mosaic_").split("_bf16")[0]
            attention_s = per_layer * (fwd * (2 if full else 1) + bwd)
            out.setdefault(key, []).append((row["id"], case.published_s, pred.iteration_time_s,
                                            per_layer * (3 if full else 2), attention_s))
    finally:
        compute.RUNTIME_EFFICIENCY[Runtime.FSDP] = saved
    return out


def fit(rows: list[tuple[str, float, float, float, float]],
        fixed: tuple[float, float] | None = None) -> dict:
    """Least squares of the relative shortfall on (passes, attention): o (s per layer pass), alpha, and the errors;
    with `fixed`, (o, alpha) from elsewhere, only the errors."""
    pub, pred, passes, attn = (np.array([r[i] for r in rows]) for i in range(1, 5))
    if fixed is None:
        (o, alpha), *_ = np.linalg.lstsq(np.stack([passes / pub, attn / pub], axis=1), (pub - pred) / pub, rcond=None)
    else:
        o, alpha = fixed
    err = (pred + o * passes + alpha * attn - pub) / pub
    now = (pred / compute.RUNTIME_EFFICIENCY[Runtime.FSDP] - pub) / pub  # approximately: the rows are nearly all
    # kernel time (the model divides only the kernels by the efficiency)
    return {"o_s": float(o), "alpha": float(alpha), "errors": dict(zip([r[0] for r in rows], err.tolist())),
            "median": float(np.median(abs(err))), "worst": float(abs(err).max()),
            "median_now": float(np.median(abs(now))), "worst_now": float(abs(now).max())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", type=Path, default=HERE / "data" / "calibration.yaml")
    args = ap.parse_args()
    data = yaml.safe_load(args.calibration.read_text())
    by_gpu = rows_by_gpu(data if isinstance(data, list) else data["rows"])
    for gpu, rows in by_gpu.items():
        f = fit(rows)
        others = fit([r for g, rs in by_gpu.items() if g != gpu for r in rs])
        held = fit(rows, fixed=(others["o_s"], others["alpha"]))
        print(f"{gpu:10s} rows {len(rows):3d}  o {f['o_s'] * 1e3:5.2f} ms per layer pass  alpha {f['alpha']:+.3f}  "
              f"fit: median {f['median']:.1%} worst {f['worst']:.1%}")
        print(f"           with the other types' o {others['o_s'] * 1e3:.2f} ms, alpha {others['alpha']:+.3f}: median "
              f"{held['median']:.1%} worst {held['worst']:.1%}; the model now (about): median {f['median_now']:.1%} "
              f"worst {f['worst_now']:.1%}")
        worst = sorted(f["errors"].items(), key=lambda e: -abs(e[1]))[:3]
        print("           worst rows of the fit: " + ", ".join(f"{rid} {e:+.1%}" for rid, e in worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
