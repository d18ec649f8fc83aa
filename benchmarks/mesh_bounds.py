"""What the mesh search's tables' bound costs (planner/mesh_sites.site_set_bound with the stage coupling and 1F1B's
loops, docs/planner.md "A cheaper bound with the loops"): per fleet, the first N candidates of the mesh search's first
bound, each bounded twice (against the stock search's best as the incumbent, and with none), the seconds all of that
took and each bound over the incumbent. Run it on two versions of the code to compare their time and their bounds.

Usage: python benchmarks/mesh_bounds.py [--candidates 8] [--fleets 16groups,three-site,8groups,four-site]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

from search_scaling import model_for, synthetic

from hgplan.domain import Target, TrainingSettings
from hgplan.planner.costs import CostSource
from hgplan.planner.mesh_first import first_bounds
from hgplan.planner.mesh_sites import site_set_bound
from hgplan.planner.mesh_tables import build_mesh_tables
from hgplan.planner.options import RERANKED, SearchOptions
from hgplan.planner.seeded import seeded_search

FLEETS = {"16groups": (1024, 4, 4, 16), "three-site": (1024, 3, 4, None), "8groups": (1024, 4, 5, 8),
          "four-site": (1024, 4, 5, None)}


def measure(name: str, count: int) -> dict:
    """The bounds of the fleet's first `count` candidates, as mesh_search receives them (the stock search's best, on
    half the default 60 s limit as `search --target flagscale` gives it, is the incumbent)."""
    n, s, k, g = FLEETS[name]
    fleet = synthetic(n, s, k, g)
    _, model = model_for(n)
    train = TrainingSettings(seq_length=4096, global_batch_size=max(512, n // 2))
    opts = SearchOptions(target=Target.FLAGSCALE)
    stock_opts = dataclasses.replace(opts, top_k=max(opts.top_k, RERANKED), budget_s=opts.budget_s / 2)
    costs = CostSource(fleet, model, train)
    result, _ = seeded_search(fleet, model, train, stock_opts, costs=costs)
    incumbent, groups = result.best_us, list(fleet.groups)
    heap, fills, floors = first_bounds(costs, groups, opts, incumbent)
    seconds, ratios = 0.0, []
    for _, B, P, _, cycle, *_ in sorted(heap)[:count]:
        tables = build_mesh_tables(costs, B, P, groups, opts)
        if tables is None:
            continue
        began = time.perf_counter()
        for enough in (incumbent, math.inf):
            bound = site_set_bound(tables, fills[B], cycle_us=cycle, enough_us=enough, stages=True,
                                   floors_us=floors.get((B, P)), loops=True)
            ratios.append(bound.bound_us / incumbent)
        seconds += time.perf_counter() - began
    return {"fleet": name, "seconds": seconds, "bounds": ratios}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--fleets", default=",".join(FLEETS), help=f"a comma-separated subset of {', '.join(FLEETS)}")
    args = ap.parse_args()
    for name in args.fleets.split(","):
        row = measure(name, args.candidates)
        print(f"{row['fleet']:12s} {row['seconds']:6.1f} s  bounds / incumbent: "
              + " ".join(f"{r:.5f}" for r in row["bounds"]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
