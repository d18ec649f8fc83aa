"""The slack 1F1B's loops leave next to the WAN, as layers a placement's capacity loses (planner/block_bound.py).

Without interleaving the cycle C is at least every loop of n micro-batches through the steady state
(costmodel/pipeline.py, segment_loops): n C >= the demands of n consecutive stages plus twice the latencies between
them. Stages that must leave slack hold fewer layers than the block bound's capacity counted at C. Legend as in
planner/bounds.py (C, tau, v, m, r).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hgplan.planner.bounds import FLOOR_EPS


@dataclass(frozen=True, slots=True)
class LoopSlack:
    """The slack 1F1B's loops demand around the WAN (without interleaving; costmodel/pipeline.py, segment_loops).

    A maximal run of consecutive WAN crossings joins stages j..j+n-1 (n - 1 crossings, so n >= 2); if n < m it is a
    loop: n C >= the stages' cycle demands plus twice each crossing's latency, i.e. the run's stages leave slack
    C - demand summing to at least twice the run's latencies. Runs share no stage, so over all W WAN crossings of
    the path (sites - 1 <= W <= r - 1, each a distinct pair of groups in two sites, so their latencies are at least
    the W cheapest such) the stages next to them leave at least S(W) = 2 x those latencies, in at most 2W stages, at
    most two per group (a block has two ends). A stage of group k leaving slack x holds at most (C - e' - x) / tau
    layers (e' its extras, at least the group's cheapest WAN send), while the capacity counted it at
    v floor((C - e) / (v tau)) > (C - e) / tau - v with e <= e': so it holds more than x / tau - v layers fewer, and
    it keeps >= v layers, so x <= C - send - v tau. The least total loss puts the slack on the slowest groups first
    (dropping the limit of 2W stages only lowers it)."""

    stages: tuple[tuple[float, float], ...]
    """(tau, cheapest WAN send) of each group, twice (two block ends), slowest first."""
    need: tuple[tuple[int, float], ...]
    """(W, S(W)) for every possible number of WAN crossings (none: some run may be longer than a loop)."""
    v: int
    pairs: PairLoops | None = None
    """Each crossing's own loop, crossing by crossing (the larger of the two losses counts)."""

    def loss(self, c: float) -> float:
        """Least layers the loops cost the stages next to the WAN at cycle c (inf: they cannot leave the slack)."""
        by_pair = self.pairs.loss(c) if self.pairs else 0.0
        return max(self._pooled(c), by_pair)

    def _pooled(self, c: float) -> float:
        """The bound of the class docstring: every run's slack pooled, on the slowest groups first."""
        if not self.need:
            return 0.0
        room = [(tau, max(0.0, c - send - self.v * tau)) for tau, send in self.stages]
        least = math.inf
        for w, need in self.need:
            fewer, left = 0.0, need
            for tau, cap in room:
                take = min(cap, left)
                fewer, left = fewer + take / tau, left - take
                if left <= 0:
                    break
            if left <= 1e-12:
                least = min(least, fewer - self.v * 2 * w)
        if least < 0:
            return 0.0
        # strictly more than `least` layers, in whole layers; the 1e-9 keeps rounding on the safe side
        return least if math.isinf(least) else math.floor(least - 1e-9) + 1.0


@dataclass(frozen=True, slots=True)
class PairLoops:
    """1F1B's loop of two micro-batches at each WAN crossing, crossing by crossing (v = 1; costmodel/pipeline.py).

    The W >= sites - 1 WAN crossings of the path each join two stages in two sites (the end of one group's block and
    the start of another's), holding n_a, n_b layers with n_a tau_a + e_a + n_b tau_b + e_b + 2 lat <= 2C (their
    loop) besides each n tau + e <= C. The capacity counted such a stage as floor((C - e) / tau) for the extras e of
    its role (a block end: its send inside the block plus one of its group's cheapest send to a partner, second
    cheapest, cheapest to another site or the larger of the last two; a block of one stage: one or two of those
    sends, or one and a path end's edge work), at most its own, and with larger extras the pair holds no more; so
    the pair loses at least w_a (cap_a - n_a) + w_b (cap_b - n_b) for the best n_a, n_b the loop allows. A stage is
    in one crossing, or two when its block is a single stage: it gets weight 1 when its group must host two or more
    stages (distinct block ends), else 1/2, so the crossings' losses sum to at most the stages'. The path loses W
    times the least pair's. The pooled bound of LoopSlack lets the latency slack of one crossing be met by stages
    next to another; this one does not."""

    rows: np.ndarray
    """(tau_a, e_a, w_a, tau_b, e_b, w_b, latency) of every pair of groups in two sites and choice of extras."""
    crossings: int
    """W: the fewest WAN crossings of a path through the set's sites."""
    memo: dict[float, float] = field(default_factory=dict)
    """loss() per cycle: the bound bisects the same cycles for every choice of end groups."""

    def loss(self, c: float) -> float:
        """Least layers the crossings' loops cost at cycle c (inf: no pair of stages can close its loop).

        The best n_a, n_b are bounded by the linear relaxation (real n, each >= 1 and <= its cap): fill the stage of
        more weight per second first, leaving the other one layer; the loss of whole layers is a multiple of the
        smaller weight, so the relaxation's is rounded up to one."""
        if c in self.memo:
            return self.memo[c]
        tau_a, e_a, w_a, tau_b, e_b, w_b, lat = self.rows.T
        cap_a = np.floor((c - e_a) / tau_a + FLOOR_EPS)
        cap_b = np.floor((c - e_b) / tau_b + FLOOR_EPS)
        budget = 2 * c - e_a - e_b - 2 * lat
        a_first = w_a * tau_b >= w_b * tau_a
        n_a = np.where(a_first, np.minimum(cap_a, (budget - tau_b) / tau_a), 0.0)
        n_b = np.minimum(cap_b, (budget - np.maximum(n_a, 1.0) * tau_a) / tau_b)
        n_a = np.where(a_first, n_a, np.minimum(cap_a, (budget - np.maximum(n_b, 1.0) * tau_b) / tau_a))
        ok = (n_a >= 1 - 1e-9) & (n_b >= 1 - 1e-9)
        least = math.inf
        if ok.any():
            grid = np.minimum(w_a, w_b)  # the losses of whole layers, weighted, are multiples of the smaller weight
            lost = np.ceil(np.maximum(0.0, w_a * (cap_a - n_a) + w_b * (cap_b - n_b)) / grid - 1e-6) * grid
            least = self.crossings * float(np.min(lost[ok]))
        self.memo[c] = least
        return least
