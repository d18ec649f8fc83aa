"""The tables' 1F1B loops (costmodel/pipeline.loops_cycle) against the same maximum over segment_loops, the form the
tables' objectives used before: microseconds per call on random whole-microsecond pipelines (a slow link at about
one boundary in three), medians of the repeats, and a check that the two agree on every pipeline timed.

Usage: python benchmarks/loops_cycle.py [--stages 28] [--microbatches 64] [--pipelines 200] [--repeat 5]
docs/planner.md ("Performance") quotes the default run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from hgplan.costmodel.pipeline import loops_cycle, segment_loops


def by_the_generator(cycle: int, stage: list[int], send: list[int], lat: list[int], m: int) -> int:
    return max([cycle] + [-(-loop // n) for _, n, loop in segment_loops(stage, [0] * len(stage), send, send, lat,
                                                                        microbatches=m)])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, default=28)
    ap.add_argument("--microbatches", type=int, default=64)
    ap.add_argument("--pipelines", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng, p, m = random.Random(1), args.stages, args.microbatches
    cases = []
    for _ in range(args.pipelines):
        stage = [rng.randint(40_000, 60_000) for _ in range(p)]
        send = [rng.randint(100, 3_000) for _ in range(p - 1)] + [0]
        lat = [rng.choice([20, 20, 20_000]) for _ in range(p - 1)] + [0]
        cases.append((max(w + (send[s - 1] if s else 0) + send[s] for s, w in enumerate(stage)), stage, send, lat))
    assert all(loops_cycle(c, st, se, la, microbatches=m) == by_the_generator(c, st, se, la, m)
               for c, st, se, la in cases)
    for name, f in (("segment_loops", lambda c, st, se, la: by_the_generator(c, st, se, la, m)),
                    ("loops_cycle", lambda c, st, se, la: loops_cycle(c, st, se, la, microbatches=m))):
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for case in cases:
                f(*case)
            runs.append((time.perf_counter() - t0) / len(cases) * 1e6)
        print(f"{name:14s} {statistics.median(runs):7.1f} us per call ({p} stages, {m} micro-batches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
