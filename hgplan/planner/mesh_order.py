"""The least cycle of a mesh candidate with the host order taken into account (planner/mesh_bound.py's stage-coupled
refinement uses it where the candidate is small enough, ORDERED_SIZE_MAX).

mesh_bound's knapsack over hosts is order-free: a block's end pays the least send to or from *any* other host, and
every stage may hold what its memory fits at the pipeline position that fits most. Both are loose where one host is
reached only over a slow link (an Ethernet T4 group beside InfiniBand A100 and V100 groups: whichever host
neighbours it pays the slow send, not the fast one between the other two) and where early stages, which keep more
micro-batches in flight, fit fewer layers.

Here the pipeline is built host block by host block, left to right: a state is (the hosts used, the host before
the current block, the current host) with, per start position of the current block, the most layers the blocks
before it hold. Placing the current block with its next host known prices both of its ends by their neighbours:
a boundary h -> h2 costs max(snd[h][h2][o], rcv[h][h2][o2]), so h's last stage pays at least
max(snd[h][h2][o], least rcv[h][h2]) and h2's first stage at least max(rcv[h][h2][o2], least snd[h][h2]); every
stage holds at most what its memory fits at its own position. At cycle c a stage holds
min(floor((c - its sends, embedding, head) / tau_o), memory) whole layers, at least one, so the most layers over
all orders, options and block sizes bounds from above what any plan with cycle <= c holds. The state space is
2^H x H^2 x P and each evaluation builds up to H^3 gain arrays, hence the size limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hgplan.planner.mesh_tables import MeshTables

ORDERED_SIZE_MAX = 500_000
"""The ordered capacity is computed where H^3 x P^2 x (most options of a host + 2^H) is at most this: one
evaluation builds up to H^3 block-gain arrays of P x P x options and makes up to 2^H x H^3 transitions of P x P
(about 3 ms at 3 hosts, 12 stages and 33 options; 20 ms at 3 hosts, 63 stages and 44 options, too slow for a
bisection on every candidate)."""
LAYER_SLACK = 1e-6
"""Layers the bounds' float arithmetic may lose; counting them as held keeps a bound a lower bound."""
NONE = -1e18
"""Stands for "cannot" in the knapsacks (numpy max-plus arithmetic)."""


def whole_layers(cycle: float, penalty: np.ndarray, tau: np.ndarray, most: np.ndarray) -> np.ndarray:
    """Whole layers a stage of per-layer time tau holds at this cycle with `penalty` else to do, at most `most`
    (its memory); NONE below one. Shared by this module and planner/mesh_bound.py."""
    with np.errstate(invalid="ignore"):
        k = np.minimum(np.floor((cycle - penalty) / tau + LAYER_SLACK), most)
    return np.where(k >= 1, k, NONE)


@dataclass(frozen=True, slots=True)
class OrderHost:
    """One host's options (those that hold a layer somewhere) as arrays, and its boundary terms per neighbour."""

    tau: np.ndarray
    slots: np.ndarray
    mem: np.ndarray
    """[s, o]: most layers stage s holds under option o (its memory, at most L)."""
    intra: np.ndarray
    first: np.ndarray
    last: np.ndarray
    left: dict[int, np.ndarray]
    """left[h2][o]: least busy time of a boundary from host h2 into this host's first stage under option o."""
    right: dict[int, np.ndarray]
    """right[h2][o]: ... from this host's last stage under option o into host h2."""


def order_hosts(t: MeshTables, size_max: int = ORDERED_SIZE_MAX) -> list[OrderHost] | None:
    """The candidate's hosts as the ordered capacity reads them (indexed as t.hosts; None for a host without an
    option that holds a layer), or None when the candidate is over size_max (ORDERED_SIZE_MAX's measure)."""
    H, P, L = len(t.hosts), t.pp, t.num_layers
    if H ** 3 * P * P * (max(len(o) for o in t.options) + 2 ** H) > size_max:
        return None
    out: list[OrderHost | None] = []
    for h in range(H):
        mem = np.minimum(t.memory_matrix(h), L).astype(float)
        keep = np.flatnonzero(mem.max(axis=0) >= 1)
        if keep.size == 0:
            out.append(None)
            continue
        left = {h2: np.maximum([t.rcv_us[h2][h][o] for o in keep], min(t.snd_us[h2][h]))
                for h2 in range(H) if h2 != h and t.snd_us[h2][h] is not None}
        right = {h2: np.maximum([t.snd_us[h][h2][o] for o in keep], min(t.rcv_us[h][h2]))
                 for h2 in range(H) if h2 != h and t.snd_us[h][h2] is not None}
        pick = [int(o) for o in keep]
        out.append(OrderHost(
            tau=np.array([t.layer_us[h][o] for o in pick], dtype=float),
            slots=np.array([t.slots[h][o] for o in pick], dtype=float), mem=mem[:, keep],
            intra=np.array([t.intra_send_us[h][o] if t.slots[h][o] >= 2 else math.inf for o in pick], dtype=float),
            first=np.array([t.first_us[h][o] for o in pick], dtype=float),
            last=np.array([t.last_us[h][o] for o in pick], dtype=float), left=left, right=right))
    return out


class _Gains:
    """Block gains of every host at one cycle, per (host, host before, host after), computed on first use."""

    def __init__(self, hosts: list[OrderHost | None], cycle: float, P: int):
        self.hosts, self.cycle, self.P = hosts, cycle, P
        self.cache: dict[tuple[int, int, int], np.ndarray] = {}
        self.middle: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # [t0, p] index arrays of a block on stages t0 .. p - 1: its size, its last stage, its middle's ends
        t0, p = np.arange(P)[:, None], np.arange(P + 1)[None, :]
        self.j, self.e = p - t0, np.clip(p - 1, 0, P - 1)
        lo, hi = np.clip(t0 + 1, 0, P), np.clip(p - 1, 0, P)
        self.lo, self.hi = lo, np.maximum(hi, lo)

    def _hold(self, a: OrderHost, penalty: np.ndarray) -> np.ndarray:
        """[s, o]: whole layers stage s holds under option o with this much else to do (NONE below one)."""
        return whole_layers(self.cycle, penalty, a.tau, a.mem)

    def _middle(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        """[t0, p, o]: what the middle stages of a block on t0 .. p - 1 hold (each between two of its own mesh's
        sends; prefix sums over positions), and whether the block can be (one stage or more, within the option's
        slots, no middle stage that holds none)."""
        if h not in self.middle:
            a = self.hosts[h]
            mid = self._hold(a, np.broadcast_to(2 * a.intra, a.mem.shape))
            zero = np.zeros((1, mid.shape[1]))
            csum = np.concatenate([zero, np.cumsum(np.where(mid > 0, mid, 0.0), axis=0)])
            cbad = np.concatenate([zero, np.cumsum(mid <= 0, axis=0)])
            bad = (cbad[self.hi] - cbad[self.lo]) > 0
            self.middle[h] = (csum[self.hi] - csum[self.lo], (self.j >= 1)[..., None] & (self.j[..., None] <= a.slots)
                              & ~bad)
        return self.middle[h]

    def __call__(self, h: int, before: int, after: int) -> np.ndarray:
        """G[t0, p]: most layers host h's block on stages t0 .. p - 1 holds under its best option (NONE where it
        cannot), its first stage entered from host `before` (-1: it is the pipeline's first stage, t0 = 0) and its
        last stage sending to host `after` (-1: it is the last, p = P)."""
        key = (h, before, after)
        if key in self.cache:
            return self.cache[key]
        a, P = self.hosts[h], self.P
        s = np.arange(P)[:, None]
        inf = np.full_like(a.tau, math.inf)
        left = np.where(s == 0, a.first, a.left[before] if before >= 0 else inf)
        right = np.where(s == P - 1, a.last, a.right[after] if after >= 0 else inf)
        single, head, tail = self._hold(a, np.stack([left + right, left + a.intra, a.intra + right]))
        mid_sum, can = self._middle(h)
        block = np.where((self.j == 1)[..., None], single[:, None, :], head[:, None, :] + tail[self.e] + mid_sum)
        g = np.where(can & (block > 0), block, NONE).max(axis=2)
        self.cache[key] = g
        return g


def ordered_capacity(hosts: list[OrderHost | None], cycle: float, P: int,
                     ends: tuple[int, int] | None = None) -> float:
    """Most whole layers P stages hold at this cycle over every host order, option and block size (NONE when no
    pipeline of P stages is possible); ends = (first host, last host): only the orders from the one to the other."""
    gains = _Gains(hosts, cycle, P)
    H = len(hosts)
    used = [h for h in range(H) if hosts[h] is not None and (ends is None or h == ends[0])]
    start = np.full(P, NONE)
    start[0] = 0.0
    # states[mask][(host before, current host)]: per start position of the current block, the most layers the
    # blocks before it hold; a move only adds a host, so the masks in increasing order see every state complete
    states: dict[int, dict[tuple[int, int], np.ndarray]] = {1 << h: {(-1, h): start} for h in used}
    best = NONE
    for mask in range(1, 1 << H):
        for (before, h), held in states.pop(mask, {}).items():
            if ends is None or h == ends[1]:
                best = max(best, float((held + gains(h, before, -1)[:, P]).max()))
            for h2 in hosts[h].right:  # a path h -> h2 exists, so h is in hosts[h2].left too
                if mask >> h2 & 1 or hosts[h2] is None:
                    continue
                reach = (held[:, None] + gains(h, before, h2)[:, :P]).max(axis=0)
                if reach.max() <= NONE / 2:
                    continue
                nxt = states.setdefault(mask | 1 << h2, {})
                nxt[(h, h2)] = np.maximum(nxt[(h, h2)], reach) if (h, h2) in nxt else reach
    return best if best > NONE / 2 else NONE


def least_ordered_cycle(hosts: list[OrderHost | None], P: int, L: int, lo: float, hi: float,
                        resolution_us: float, ends: tuple[int, int] | None = None) -> tuple[float, float]:
    """(a cycle no plan is below, one at which the ordered capacity holds L) by bisection between lo (no plan is
    below it) and hi; (hi, inf) when P stages do not hold L layers even at hi. ends: of the plans from one host to
    another only (ordered_capacity's)."""
    if ordered_capacity(hosts, hi, P, ends) < L - LAYER_SLACK:
        return hi, math.inf
    while hi - lo > resolution_us:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ordered_capacity(hosts, mid, P, ends) >= L - LAYER_SLACK else (mid, hi)
    return lo, hi
