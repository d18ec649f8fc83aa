"""The reported pipeline model (simulator) against the search objective's closed form.

Usage: python benchmarks/pipeline_models.py [--repeat 3] [--pipelines 12000]
Prints, for the calibration set, the wall time of evaluating every row's plans with each form (median of the
repeats) and their largest disagreement; and for random heterogeneous pipelines (links from NVLink to WAN), how
often and by how much the closed form is above or below the simulator (docs/cost-model.md section 5 and
docs/planner.md "What the gap means" quote these numbers).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import yaml

import fidelity_cases as fidelity
from hgplan.costmodel import evaluate as ev
from hgplan.costmodel.pipeline import closed_form, simulate
from hgplan.io import catalog

HERE = Path(__file__).resolve().parent


def calibration_rows(repeat: int) -> None:
    rows = yaml.safe_load((HERE / "data" / "calibration.yaml").read_text())["rows"]
    cases = [c for c in (fidelity.case_from_row(r, catalog()) for r in rows) if not isinstance(c, str)]
    cases = [c for c in cases if c.metric != "layer"]
    times: dict[bool, list[float]] = {True: [], False: []}
    predicted: dict[bool, list[float]] = {}
    for _ in range(repeat):
        for sim in (False, True):
            start = time.perf_counter()
            predicted[sim] = [ev.evaluate(plan, c.fleet, c.model, c.train, use_simulator=sim).iteration_time_s
                              for c in cases for plan in c.plans]
            times[sim].append(time.perf_counter() - start)
    diff = [s / c - 1 for s, c in zip(predicted[True], predicted[False])]
    print(f"calibration set: {len(cases)} rows, {len(diff)} plans; median wall time over {repeat} runs: simulator "
          f"{statistics.median(times[True]):.2f} s, closed form {statistics.median(times[False]):.2f} s")
    print(f"  simulator vs closed form: from {min(diff):+.2%} to {max(diff):+.2%}")


def random_pipelines(n: int) -> None:
    rng = random.Random(1)
    ratios: dict[bool, list[float]] = {False: [], True: []}
    far_below: dict[bool, list[int]] = {False: [], True: []}  # stages of the pipelines more than 5% below
    while len(ratios[False]) + len(ratios[True]) < n:
        p, v, m = rng.randint(1, 8), rng.choice([1, 1, 2, 3]), rng.randint(1, 24)
        if v > 1 and (p < 2 or m % p):
            continue
        fwd = [rng.uniform(0.1, 2) for _ in range(p)]
        bwd = [f * rng.uniform(1.5, 3) for f in fwd]
        x = [rng.choice([0.0, rng.uniform(0, 0.1), rng.uniform(0, 3)]) for _ in range(p)]
        lat = [rng.choice([0.0, rng.uniform(0, 0.5)]) for _ in range(p)]
        c = closed_form(fwd, bwd, x, list(x), lat, microbatches=m, vpp=v).iteration_s
        s = simulate(fwd, bwd, x, list(x), lat, microbatches=m, vpp=v)[0].iteration_s
        ratios[v > 1].append(c / s - 1)
        if c / s - 1 < -0.05:
            far_below[v > 1].append(p)
    print(f"random pipelines: {n}")
    for interleaved, rows in ratios.items():
        above = [r for r in rows if r > 1e-9]
        below = [r for r in rows if r < -1e-9]
        print(f"  {'interleaved' if interleaved else '1F1B'} ({len(rows)}): closed form above the simulator on "
              f"{len(above) / len(rows):.0%} (up to {max(above, default=0):+.1%}), below on "
              f"{len(below) / len(rows):.0%} (down to {min(below, default=0):+.1%}), median |difference| "
              f"{statistics.median(map(abs, rows)):.1%}, "
              f"10th percentile {sorted(rows)[len(rows) // 10]:+.1%}; more than 5% below on "
              f"{len(far_below[interleaved])} ({sum(p == 2 for p in far_below[interleaved])} of two stages)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pipelines", type=int, default=12000)
    args = ap.parse_args()
    calibration_rows(args.repeat)
    random_pipelines(args.pipelines)


if __name__ == "__main__":
    main()
