"""What the proof's first bounds cost and how much they settle (planner/certify.py, docs/planner.md "What the gap
means"): per fleet, the time of every configuration's cycle bound and of its cheap bound (per class of interchangeable
groups, and with every group a class of its own), and the share of configurations each puts at or above T, the
reported time of the plan `hgplan search` returns (found by running it). Also checks that no cycle bound is above its
cheap bound.

Usage: python benchmarks/proof_bounds.py [--fleets two-site,504,large,16groups]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from search_scaling import model_for, synthetic

from hgplan.documents import ClusterInput
from hgplan.domain import TrainingSettings
from hgplan.inputs import load_cluster, load_model
from hgplan.io import catalog
from hgplan.planner.api import plan_training
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.certify import cheap_bound_us, cycle_bound_us
from hgplan.planner.costs import US, CostSource
from hgplan.planner.options import SearchOptions

EXAMPLES = {"two-site": ("llama3.1-70b", 512), "large": ("llama3.1-405b", 1024)}
SYNTHETIC = {"504": (512, 2, 3, None), "16groups": (1024, 4, 4, 16)}


def fleet_case(name: str):
    cat = catalog()
    if name in EXAMPLES:
        mname, gbs = EXAMPLES[name]
        fleet, _ = load_cluster(cat.cluster_texts[name], name, cat)
        train = TrainingSettings(seq_length=4096, global_batch_size=gbs)
        return fleet, load_model(cat.model_texts[mname], mname), train
    n, s, k, g = SYNTHETIC[name]
    _, model = model_for(n)
    return synthetic(n, s, k, g), model, TrainingSettings(seq_length=4096, global_batch_size=max(512, n // 2))


def timed(fn, items) -> tuple[list[float], float]:
    t0 = time.perf_counter()
    out = [fn(x) for x in items]
    return out, time.perf_counter() - t0


def row(name: str) -> dict:
    fleet, model, train = fleet_case(name)
    report, _ = plan_training(fleet, model, train, SearchOptions(), cluster=ClusterInput(ref=name, sha256=""),
                              model_ref=model.name)
    t_us = report.plans[0].prediction.iteration_time_s * US
    L = model.num_layers
    cands, _ = enumerate_candidates(CostSource(fleet, model, train), SearchOptions(), list(fleet.groups))
    # each timing with a fresh cost cache: the cheap bounds' time is mostly building memory rows, which it caches
    cycle, cycle_s = timed(lambda c, costs=CostSource(fleet, model, train): cycle_bound_us(costs, c, L), cands)
    cheap, cheap_s = timed(lambda c, costs=CostSource(fleet, model, train): cheap_bound_us(costs, c, L), cands)
    singles = [dataclasses.replace(c, ctx=dataclasses.replace(c.ctx, classes=tuple((k,) for k in sorted(c.ctx.groups))))
               for c in cands]
    _, per_group_s = timed(lambda c, costs=CostSource(fleet, model, train): cheap_bound_us(costs, c, L), singles)
    return {"fleet": name, "configurations": len(cands), "T_s": t_us / US, "cycle_s": cycle_s, "cheap_s": cheap_s,
            "cheap_per_group_s": per_group_s, "cycle_at_T": sum(x >= t_us for x in cycle) / len(cands),
            "cheap_at_T": sum(x >= t_us for x in cheap) / len(cands),
            "cycle_above_cheap": sum(a > b for a, b in zip(cycle, cheap))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", default="two-site,504,large,16groups")
    rows = [row(name) for name in ap.parse_args().fleets.split(",")]
    print(f"{'fleet':10} {'configs':>8} {'T s':>8} {'cycle s':>8} {'cheap s':>8} {'per group s':>11} "
          f"{'cycle>=T':>9} {'cheap>=T':>9} {'cycle>cheap':>11}")
    for r in rows:
        print(f"{r['fleet']:10} {r['configurations']:8d} {r['T_s']:8.3f} {r['cycle_s']:8.2f} {r['cheap_s']:8.2f} "
              f"{r['cheap_per_group_s']:11.2f} {r['cycle_at_T']:9.0%} {r['cheap_at_T']:9.0%} "
              f"{r['cycle_above_cheap']:11d}")
    return 0 if all(r["cycle_above_cheap"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
