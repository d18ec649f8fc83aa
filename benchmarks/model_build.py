"""What the search spends outside CP-SAT on the largest benchmark fleet (search_scaling.py's 64 node groups, 4096
GPUs, llama3.1-405b): building the stage-level CP-SAT model of its pp 64 tp 8 item over all 64 groups (the search's
first solve there), and the subset bounds (planner/subset_split.subset_bounds_us) of the N candidates with the lowest
lower bounds, the first the search expands. Medians over --repeat runs (docs/planner.md, Performance).

Usage: python benchmarks/model_build.py [--repeat 3] [--candidates 60]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from search_scaling import model_for, synthetic

from hgplan.domain import TrainingSettings
from hgplan.planner.subset_split import subset_bounds_us
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.model import build_model
from hgplan.planner.options import SearchOptions
from hgplan.planner.symmetry import table_classes
from hgplan.planner.tables import build_tables


def median_s(run, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--candidates", type=int, default=60)
    args = ap.parse_args()
    fleet = synthetic(4096, 4, 4, 64)
    _, model = model_for(4096)
    train = TrainingSettings(seq_length=4096, global_batch_size=2048)
    costs = CostSource(fleet, model, train)
    cands = sorted(enumerate_candidates(costs, SearchOptions(), list(fleet.groups))[0],
                   key=lambda c: (c.lower_bound_us, c.key))
    item = next(c for c in cands if (c.cfg.pp, c.cfg.tp, c.cfg.vpp) == (64, 8, 1))
    tables = replace(build_tables(costs, item.cfg, list(fleet.groups)), require_all=True)
    classes = table_classes(tables)
    build, times = median_s(lambda: build_model(tables, classes=classes), args.repeat)
    print(f"stage-level model, {len(tables.groups)} groups x {tables.pp} stages: build {build:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)})")
    first = cands[:args.candidates]
    sets = [0]

    def bounds():
        sets[0] = sum(len(subset_bounds_us(c.ctx, c.cfg, L=model.num_layers,
                                           m=c.cfg.num_microbatches(train.global_batch_size))) for c in first)

    took, times = median_s(bounds, args.repeat)
    print(f"subset bounds of the {len(first)} lowest-bound candidates ({sets[0]} sets): {took:.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
