"""costmodel/pipeline.loops_cycle, the tables' 1F1B loops without the generator: the same cycle as the maximum over
segment_loops, on random whole-microsecond pipelines (short and long, with and without slow links)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from hgplan.costmodel.pipeline import loops_cycle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from loops_cycle import by_the_generator  # noqa: E402  (the form the tables used before; the benchmark times both)


def test_the_same_cycle_as_the_loops_one_by_one():
    rng = random.Random(7)
    raised = 0
    for _ in range(3000):
        p = rng.randint(1, 40)
        m = rng.randint(1, 3 * p + 2)
        stage = [rng.randint(1, 60_000) for _ in range(p)]
        send = [rng.randint(0, 3_000) for _ in range(p - 1)] + [0]
        lat = [rng.choice([0, 5, 20, rng.randint(0, 40_000)]) for _ in range(p - 1)] + [0]
        cycle = max(w + (send[s - 1] if s else 0) + send[s] for s, w in enumerate(stage)) + rng.randint(0, 2_000)
        want = by_the_generator(cycle, stage, send, lat, m)
        assert loops_cycle(cycle, stage, send, lat, microbatches=m) == want
        raised += want > cycle
    assert raised > 300  # slow links often set the cycle: the loops are exercised, not just the stages
