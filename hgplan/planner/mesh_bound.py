"""Lower bound of one (B, P) candidate of the asymmetric family from its MeshTables, before any CP-SAT solve (used by
planner/mesh_search.py to order, prune and certify candidates).

Objective (MeshTables.objective) = (m - 1) cycle + fill + tail, each bounded from below:

- cycle: every stage's busy time (its layers x tau_o, the embedding on the first stage, the LM head on the last,
  and the boundaries it touches) is at most the cycle, so at cycle c a stage of option o holds at most
  floor((c - penalty) / tau_o) whole layers (and at most what its memory fits, and at least one). Each used host
  runs one option on one contiguous block of j <= slots_o stages; inside the block the boundaries are the mesh's
  own sends, at its ends the boundaries to other hosts (at least the least cross send of the option) unless the
  block holds the pipeline's first or last stage. A knapsack over hosts (stages taken, first and last stage
  placed) gives the most layers P stages hold at c; the least c at which they hold L is found by bisection.
- fill: the work of the L layers, the cheapest embedding and head, and every boundary's least send and latency,
  forward and backward. The work depends on the cycle: at cycle c host h holds at most cap_h(c) layers (its best
  block under any option and role) at no less than the per-layer time of its fastest option that holds one, so
  W(c) = the L layers placed fastest host first within those caps; W does not increase with c. A plan whose cycle
  is c pays (m - 1) c + W(c), so the bound is min over c >= C* of that (on a grid, as in planner/block_bound.py):
  near C* the fastest hosts cannot take every layer and the slower ones' work counts.
- tail: the first stage's least tail (the tied-embedding sync included) and the fullest stage's (at least
  ceil(L / P) layers).
"""

from __future__ import annotations

import math

import numpy as np

from hgplan.planner.mesh_tables import MeshTables

LAYER_SLACK = 1e-6
"""Layers the bound's float arithmetic may lose; counting them as held keeps the bound a lower bound."""
BOUND_RESOLUTION_US = 1.0
"""The bisection stops when the bound is known to within this (the tables' resolution)."""
NONE = -1e18
"""Stands for "cannot" in the knapsack (numpy max-plus arithmetic)."""
WORK_GRID = 16
"""Intervals over which the bound minimises (m - 1) c + W(c); each costs at most 1/WORK_GRID of W's range."""


def _least(vals: list[float]) -> float:
    return min(vals, default=math.inf)


def _host_arrays(t: MeshTables, h: int) -> dict[str, np.ndarray] | None:
    """Per option of host h: slots, tau, memory limit, least own-mesh send, least send to or from another host,
    embedding and head work. None when no option holds a layer."""
    P, L, H = t.pp, t.num_layers, len(t.hosts)
    rows = []
    for o in range(len(t.options[h])):
        most = min(L, max(t.memory_layers(s, h, o) for s in range(P)))
        if most < 1:
            continue
        cross = _least([t.snd_us[h][h2][o] for h2 in range(H) if h2 != h and t.snd_us[h][h2] is not None]
                       + [t.rcv_us[h2][h][o] for h2 in range(H) if h2 != h and t.rcv_us[h2][h] is not None])
        intra = t.intra_send_us[h][o] if t.slots[h][o] >= 2 else math.inf
        rows.append((t.slots[h][o], t.layer_us[h][o], most, intra, cross, t.first_us[h][o], t.last_us[h][o]))
    if not rows:
        return None
    cols = np.array(rows, dtype=float).T
    return dict(zip(("slots", "tau", "most", "intra", "cross", "first", "last"), cols))


def _held(a: dict[str, np.ndarray], cycle: float, penalty: np.ndarray) -> np.ndarray:
    """Whole layers one stage of each option holds at this cycle with this much else to do (NONE below one)."""
    with np.errstate(invalid="ignore"):
        k = np.minimum(np.floor((cycle - penalty) / a["tau"] + LAYER_SLACK), a["most"])
    return np.where(k >= 1, k, NONE)


def _gains(a: dict[str, np.ndarray], cycle: float, P: int) -> dict[tuple[int, int], np.ndarray]:
    """gain[(f, l)][j]: most layers j stages of this host hold (NONE where it cannot), f / l: whether its block
    holds the pipeline's first / last stage."""
    return {key: g.max(axis=1) for key, g in _option_gains(a, cycle, P).items()}


def _option_gains(a: dict[str, np.ndarray], cycle: float, P: int) -> dict[tuple[int, int], np.ndarray]:
    """As _gains, per option: gain[(f, l)][j, o]."""
    j = np.arange(P + 1)[:, None]
    out = {}
    for f in (0, 1):
        for last in (0, 1):
            if P == 1:
                if f and last:
                    one = _held(a, cycle, a["first"] + a["last"])
                    g = np.full((2, one.size), NONE)
                    g[1] = one
                    out[(1, 1)] = g
                continue
            if f and last:
                continue  # a host holding both ends of a multi-stage pipeline holds all of it: the cases below
            start = a["first"] if f else a["cross"]
            end = a["last"] if last else a["cross"]
            single = _held(a, cycle, start + end)
            head = _held(a, cycle, start + a["intra"])
            tail = _held(a, cycle, end + a["intra"])
            mid = _held(a, cycle, 2 * a["intra"])
            many = head + tail + (j - 2) * np.where(j >= 3, mid, 0.0)
            cap = np.where(j == 1, single, many)
            ok = (j >= 1) & (j <= a["slots"]) & (cap > 0) & ((j < 3) | (mid > 0))
            out[(f, last)] = np.where(ok, cap, NONE)
    if P > 1:  # one host holds the whole pipeline: first and last stage on it, no boundary to another host
        head = _held(a, cycle, a["first"] + a["intra"])
        tail = _held(a, cycle, a["last"] + a["intra"])
        mid = _held(a, cycle, 2 * a["intra"])
        cap = head + tail + (P - 2) * (mid if P >= 3 else 0.0)
        ok = (P <= a["slots"]) & (head > 0) & (tail > 0) & ((P < 3) | (mid > 0))
        g = np.full((P + 1, cap.size), NONE)
        g[P] = np.where(ok, cap, NONE)
        out[(1, 1)] = g
    return out


def _capacity(hosts: list[dict[str, np.ndarray]], cycle: float, P: int) -> float:
    """Most whole layers P stages hold at this cycle: a max-plus knapsack over hosts of (stages taken, first stage
    placed, last stage placed)."""
    t_idx = np.arange(P + 1)
    diff = t_idx[:, None] - t_idx[None, :]  # [total, j] -> total - j
    valid = diff >= 0
    best = {(f, ll): np.full(P + 1, NONE) for f in (0, 1) for ll in (0, 1)}
    best[(0, 0)][0] = 0.0
    for a in hosts:
        nxt = {k: v.copy() for k, v in best.items()}
        for (fh, lh), g in _gains(a, cycle, P).items():
            g = g.copy()
            g[0] = NONE  # a used host takes at least one stage
            for (f, ll), b in best.items():
                if (f and fh) or (ll and lh):
                    continue
                cand = np.where(valid, b[np.clip(diff, 0, P)] + g[None, :], NONE).max(axis=1)
                key = (f | fh, ll | lh)
                nxt[key] = np.maximum(nxt[key], np.where(cand > NONE / 2, cand, NONE))
        best = nxt
    return float(best[(1, 1)][P])


def _work_at(hosts: list[dict[str, np.ndarray]], cycle: float, P: int, L: int) -> float:
    """W(cycle): least work (us) of the L layers on stages no longer than the cycle. Host h holds at most its best
    block's layers under any option and role, each at no less than the per-layer time of its fastest option that
    holds a layer at this cycle; the layers go fastest host first (inf when the caps cannot take them)."""
    rows = []
    for a in hosts:
        per_option = np.max([g.max(axis=0) for g in _option_gains(a, cycle, P).values()], axis=0)
        holds = per_option >= 1
        if holds.any():
            rows.append((float(a["tau"][holds].min()), float(per_option.max())))
    work, left = 0.0, float(L)
    for tau, cap in sorted(rows):
        take = min(cap + LAYER_SLACK, left)
        work, left = work + take * tau, left - take
        if left <= 0:
            return work
    return math.inf


def _least_work_us(hosts: list[dict[str, np.ndarray]], P: int, L: int, m: int, lo: float, hi: float,
                   top: float) -> float:
    """Least (m - 1) c + W(c) over the cycles c a plan can have: above lo (too short) and at most top. W does not
    increase, so on [c_i, c_i+1) the value is at least (m - 1) c_i + W(c_i+1) (and W(hi) below hi, the least
    cycle known to hold the layers); past lo + span, span = (W(hi) - W(top)) / (m - 1), nothing beats the value
    at lo."""
    if m == 1:
        return _work_at(hosts, top, P, L)
    w_hi, w_top = _work_at(hosts, hi, P, L), _work_at(hosts, top, P, L)
    if not math.isfinite(w_hi):
        return (m - 1) * lo + w_top
    grid = lo + max(0.0, w_hi - w_top) / (m - 1) * np.arange(WORK_GRID + 1) / WORK_GRID
    works = [_work_at(hosts, max(float(c), hi), P, L) for c in grid[1:]]
    return min([(m - 1) * lo + w_hi] + [(m - 1) * float(c) + w for c, w in zip(grid[:-1], works)])


def _sends_fill_us(t: MeshTables) -> float:
    """Least boundary time in the fill: each of the P - 1 boundaries at least the cheapest send and latency, both
    ways."""
    if t.pp == 1:
        return 0.0
    sends = t.send_values()
    lats = [v for r in t.intra_lat_us for v in r] + [t.lat_us[h][h2] for h in range(len(t.hosts))
                                                       for h2 in range(len(t.hosts)) if t.snd_us[h][h2] is not None]
    return 2 * (t.pp - 1) * (min(sends) + min(lats))


def _tail_us(t: MeshTables) -> float:
    """Least tail: the first stage's (its class, one layer at least, the tied sync) and the fullest stage's (at
    least ceil(L / P) layers, any class)."""
    P, H = t.pp, len(t.hosts)
    first = 3 if P == 1 else 0
    classes = {3} if P == 1 else {0, 2} if P == 2 else {0, 1, 2}
    pairs = [(h, o) for h in range(H) for o in range(len(t.options[h]))]
    tied = min((min(r) for rows in t.tied_us for r in rows), default=0) if P > 1 else 0
    first_us = min(t.tail_a_us[first][h][o] + t.tail_b_us[first][h][o] for h, o in pairs) + tied
    fullest = (min(t.tail_a_us[c][h][o] for c in classes for h, o in pairs)
               + min(t.tail_b_us[c][h][o] for c in classes for h, o in pairs) * math.ceil(t.num_layers / P))
    return max(first_us, fullest)


def tables_bound_us(t: MeshTables, fill_us: float, *, cycle_lo_us: float = 0.0, enough_us: float = math.inf) -> float:
    """Lower bound (us) of every plan of the candidate (inf when no cycle lets P stages hold the layers). fill_us:
    the work of L layers, the embedding and the head at the fastest options (mesh_search computes it per B);
    cycle_lo_us: a cycle known to be too short (a cheaper bound's); enough_us: a bound at which the caller stops
    caring (its incumbent), so the bisection stops there too."""
    P, L, m = t.pp, t.num_layers, t.microbatches
    hosts = [a for h in range(len(t.hosts)) if (a := _host_arrays(t, h)) is not None]
    if not hosts:
        return math.inf
    sends = [float(v) for a in hosts for key in ("intra", "cross") for v in a[key] if math.isfinite(v)]
    # at this cycle every stage holds all that its memory fits, so if it holds fewer than L layers nothing does
    top = max(float((a["tau"] * L + a["first"] + a["last"]).max()) for a in hosts) + 2 * max(sends, default=0.0)
    if _capacity(hosts, top, P) < L:
        return math.inf
    boundaries_and_tail = _sends_fill_us(t) + _tail_us(t)
    rest = fill_us + boundaries_and_tail
    lo, hi = min(cycle_lo_us, top), top
    if m > 1 and math.isfinite(enough_us):
        cut = (enough_us - rest) / (m - 1)
        if lo < cut < hi:
            if _capacity(hosts, cut, P) < L:
                return (m - 1) * cut + rest  # the cycle exceeds cut: the bound reaches enough_us
            hi = cut
    while (m - 1) * (hi - lo) > BOUND_RESOLUTION_US:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _capacity(hosts, mid, P) >= L else (mid, hi)
    edges = min(float(a["first"].min()) for a in hosts) + min(float(a["last"].min()) for a in hosts)
    return max((m - 1) * lo + rest, _least_work_us(hosts, P, L, m, lo, hi, top) + edges + boundaries_and_tail)
