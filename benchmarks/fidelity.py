"""Predicted vs published iteration time for every calibration row hgplan can express.

Usage: python benchmarks/fidelity.py [--json] [--calibration PATH]
Targets (issue 3): median absolute error <= 10%, every row <= 25%. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

import fidelity_cases as fidelity
from hgplan.io import catalog

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", default=str(HERE / "data" / "calibration.yaml"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = yaml.safe_load(Path(args.calibration).read_text())["rows"]
    results, skipped = fidelity.run(rows, catalog())
    summ = fidelity.summary(results)
    if args.json:
        print(json.dumps({"summary": summ, "rows": [{"id": r.id, "family": r.family, "published_s": r.published_s,
                                                      "predicted_s": r.predicted_s, "error": r.error} for r in results],
                          "skipped": [{"id": i, "reason": why} for i, why in skipped]}, indent=2))
    else:
        print(f"{'row':58} {'published':>10} {'predicted':>10} {'error':>7}  chosen knobs")
        for r in results:
            c = r.plan.config if r.plan else None
            knobs = f"mbs={c.micro_batch_size} vpp={c.vpp} tp={c.tp} pp={c.pp}" if c else ""
            print(f"{r.id:58} {r.published_s:10.3f} {r.predicted_s:10.3f} {r.error:+7.1%}  {knobs}")
        by_family: dict[str, list[float]] = {}
        for r in results:
            by_family.setdefault(r.family, []).append(abs(r.error))
        print()
        for fam, errs in sorted(by_family.items()):
            errs.sort()
            print(f"{fam:22} rows {len(errs):3}  median {errs[len(errs) // 2]:6.1%}  worst {errs[-1]:6.1%}")
        print(f"\nall rows: {summ['rows']}  median |error| {summ['median_abs_error']:.1%}  "
              f"worst {summ['worst_abs_error']:.1%} ({summ['worst_row']})")
        for rid, why in skipped:
            print(f"skipped {rid}: {why}")
    ok = summ["median_abs_error"] <= 0.10 and summ["worst_abs_error"] <= 0.25
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
