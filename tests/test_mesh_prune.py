"""Issue 12: dominance pruning of a host's mesh options (planner/mesh_tables._prune) keeps exactly the options no
other option beats or ties in every table entry (ties keep the first; with tied embeddings only options of the same
tp compete). Hand-made rows, one entry changed at a time."""

from __future__ import annotations

import numpy as np
import pytest

from hgplan.planner.mesh_tables import TAIL_CLASSES, _HostRows, _prune
from hgplan.plan import ParallelConfig

P = 2


def _rows(*options: dict) -> _HostRows:
    """Options with every entry 10 (slots 4, tp 1) unless given: slots, layer, first, last, isend, ilat, mem (a, b
    per stage), tp; the tail entries (a, b per class) are 10 for all."""
    keys = ("slots", "layer", "first", "last", "isend", "ilat")
    rows = {k: [o.get(k, 4 if k == "slots" else 10) for o in options] for k in keys}
    rows["mem"] = np.array([o.get("mem", [(10, 10)] * P) for o in options], dtype=np.int64)
    rows["tail"] = [[(10, 10)] * len(TAIL_CLASSES) for _ in options]
    cfgs = [ParallelConfig(tp=o.get("tp", 1), pp=P, dp=1) for o in options]
    return _HostRows(group=None, options=cfgs, rows=rows)


@pytest.mark.parametrize(("second", "kept"), [
    ({}, [0]),                                   # the same in every entry: the first stays
    ({"layer": 9}, [1]),                         # faster per layer, nothing worse: the second wins
    ({"layer": 9, "slots": 3}, [0, 1]),          # faster, but fewer stages fit: neither beats the other
    ({"mem": [(10, 10), (10, 11)]}, [0]),        # more memory on one stage: beaten
    ({"layer": 9, "mem": [(9, 10), (10, 11)]}, [0, 1]),
    ({"layer": 9, "tp": 2}, [0, 1]),             # with tied embeddings a different tp is no substitute
])
def test_prune_keeps_what_no_other_option_beats(second, kept):
    assert _prune(_rows({}, second), [], True, P) == kept


def test_prune_reads_the_cross_host_rows():
    """An option cheaper on the host's own tables but dearer to send to another host stays; None (no path) is the
    dearest."""
    hr = _rows({}, {"layer": 9})
    assert _prune(hr, [[5, 6]], False, P) == [0, 1]
    assert _prune(hr, [[5, 5]], False, P) == [1]
    assert _prune(hr, [[5, None]], False, P) == [0, 1]
    assert _prune(hr, [None, [5, 5]], False, P) == [1]
