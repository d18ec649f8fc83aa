"""Interleaving's three-stage steady paths in the block model (planner/block_model.py), relaxed to what blocks know.

costmodel/schedule.steady_paths: for a stage t in its steady state (w_t = (v - 1) p + 2 (p - 1 - t) warm-up
forwards, fewer than m v) and stages s1, s3 <= t, v x the pipeline's time is at least

    head_t + chain_t + (m v - w_t) (F_t + B_t) + v (f_t xf_t + b_t up_t) + w_t (ahead_s1 + behind_s3)

with ahead = F + v xf (a stage's forward work and forward send per micro-batch), behind = B + v up (its backward work
and the backward send to the stage before it; stage 0 as s3 counts its backward work only), head_t + chain_t the
work of the stages before t plus their boundaries' sends and latencies (v (xf + 2 lat) for each boundary before t, v
xb for each before t - 1), and f_t = b_t = m v - w_t the steady ops that send on a stage that is neither the first
nor the last (the last sends no forward of its last chunk).

The block model knows no stage's position inside the pipeline, only which block comes before which. Relaxation, for
t the last stage of a block: w_t >= W = (v - 1) p, and with A >= ahead_t and B >= behind_t the path's value only
grows with w_t (its derivative is ahead_s1 + behind_s3 - F_t - B_t - v (xf_t + up_t) >= 0 once s1 and s3 are the
stages of largest ahead and behind up to t, t included), so

    pipe >= pre_t + (m v - W) demand_t + W (A_t + B_t)

where A_t and B_t are at least the ahead and behind of every stage of every block before t's and of t's own block
(all at or before t), pre_t at most head_t + chain_t (each earlier block's work, its inner boundaries at v (2 send + 2
lat), its outgoing crossing at v (send + 2 lat); t's own block's stages before t at v (send + 2 lat) each), and
demand_t t's cycle demand (block_model's dl: F + B + v (xf + up)), without its forward send when t is the last stage.
A stage of the block taken as an expression that is at most some real stage's ahead or behind (the first stage
without the LM head's work, the last without the embedding's) keeps every maximum at most the real one. t = 0 (a lone
first block) is left out, and so is every t whose position may have no steady state (then w_t = m v: only blocks
that end at or after the first stage with a steady state).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from hgplan.costmodel.schedule import warmup_forwards
from hgplan.planner.tables import CostTables


def first_steady_stage(t: CostTables) -> int | None:
    """The first stage index with a steady state (w < m v), None when none has one (then no path to add)."""
    p, m, v = t.pp, t.microbatches, t.vpp
    return next((s for s in range(p) if warmup_forwards(s, p, m, v) < m * v), None)


def add_steady_paths(md: cp_model.CpModel, t: CostTables, xv, pipe, demand_last: list, sends: list[tuple],
                     horizon: int) -> cp_model.IntVar | None:
    """A variable at least `pipe` (the cycle-and-fill expression) and the relaxed steady path through the last stage
    of every block (module docstring); None when no stage can be in a steady state (nothing added). `xv`:
    block_model's variables; `demand_last`: each block's last-stage cycle demand (block_model._add_cycle, at most
    `horizon`, the cycle's domain); `sends`: block_model._sends."""
    s_min = first_steady_stage(t)
    if t.vpp == 1 or s_min is None:
        return None
    s_first = max(1, s_min)
    K, p, v, m = len(t.groups), t.pp, t.vpp, t.microbatches
    W = (v - 1) * p
    top = _stage_tops(t)
    # at least the cycle-and-fill term (its cycle at most horizon, its fill at most a prefix) and every path below
    pre_top = _prefix_top(t)
    longest = md.new_int_var(0, 2 * pre_top + m * v * (2 * max(top) + horizon), "pipe")
    ahead = [md.new_int_var(0, top[k], f"ahead{k}") for k in range(K)]
    behind = [md.new_int_var(0, top[k], f"behind{k}") for k in range(K)]
    for k in range(K):
        _block_extremes(md, t, xv, k, sends[k], ahead[k], behind[k])
    pre, pre_a, pre_b = _prefixes(md, t, xv, ahead, behind, max(top), pre_top)
    for k in range(K):
        top_a = md.new_int_var(0, max(top), f"topa{k}")
        top_b = md.new_int_var(0, max(top), f"topb{k}")
        for top_x, pre_x, own in ((top_a, pre_a, ahead), (top_b, pre_b, behind)):
            md.add(top_x >= pre_x[k])
            md.add(top_x >= own[k])
        inner = md.new_int_var(0, pre_top, f"inner{k}")
        own, own_lat = t.send_us[k][k] or 0, t.lat_us[k][k]
        md.add(inner >= v * t.layer_us[k] * (xv.a[k] + xv.i[k]) + t.first_us[k] * xv.start[k]
               + v * (own + 2 * own_lat) * (xv.n[k] - 1)).only_enforce_if(~xv.lone[k])
        # t = the block's last stage is past stage 0 and in a steady state (its position at least s_first)
        last_idx = xv.idx[k] + xv.n[k] - 1
        ok = md.new_bool_var(f"steady{k}")
        md.add(last_idx >= s_first).only_enforce_if(ok)
        md.add(last_idx < s_first).only_enforce_if(~ok)
        full, without_fwd = demand_last[k], demand_last[k] - sends[k][2]
        md.add(longest >= pre[k] + inner + W * (top_a + top_b) + (m * v - W) * full).only_enforce_if([ok, ~xv.end[k]])
        md.add(longest >= pre[k] + inner + W * (top_a + top_b) + (m * v - W) * without_fwd).only_enforce_if(ok)
        previous = None  # j stages or more after t: w_t >= W + 2 j (and t is not the last stage)
        for j in range(1, p - s_first):
            wj = W + 2 * j
            if wj >= m * v:
                break
            after = md.new_bool_var(f"after{k}_{j}")
            md.add(last_idx <= p - 1 - j).only_enforce_if(after)
            md.add(last_idx > p - 1 - j).only_enforce_if(~after)
            if previous is not None:
                md.add_implication(after, previous)
            previous = after
            md.add(longest >= pre[k] + inner + wj * (top_a + top_b) + (m * v - wj) * full).only_enforce_if([ok, after])
    md.add(longest >= pipe)
    return longest


def _prefixes(md: cp_model.CpModel, t: CostTables, xv, ahead: list, behind: list, top: int, pre_top: int) -> tuple:
    """Per block, what the stages before its first one carry, along the order's arcs: head + chain's part (work,
    sends, latencies; at most pre_top), the largest ahead and the largest behind (at most top)."""
    K, v = len(t.groups), t.vpp
    pre = [md.new_int_var(0, pre_top, f"pre{k}") for k in range(K)]
    pre_a = [md.new_int_var(0, top, f"prea{k}") for k in range(K)]
    pre_b = [md.new_int_var(0, top, f"preb{k}") for k in range(K)]
    for (k, k2), var in xv.z.items():
        md.add(pre[k2] >= pre[k] + _block_pre(t, xv, k) + v * (t.send_us[k][k2] + 2 * t.lat_us[k][k2])
               ).only_enforce_if(var)
        for into, own in ((pre_a, ahead), (pre_b, behind)):
            md.add(into[k2] >= into[k]).only_enforce_if(var)
            md.add(into[k2] >= own[k]).only_enforce_if(var)
    return pre, pre_a, pre_b


def _stage_tops(t: CostTables) -> list[int]:
    """Per group, at least any of its stages' ahead or behind: every layer, both edges and one send."""
    v = t.vpp
    return [v * t.layer_us[k] * (t.num_layers // v) + t.first_us[k] + t.last_us[k] + v * t.most_send_us
            for k in range(len(t.groups))]


def _prefix_top(t: CostTables) -> int:
    """At least what the stages before any stage carry: every block's work, inner boundaries and crossing."""
    v, p = t.vpp, t.pp
    lat_top = max(map(max, t.lat_us))
    return sum(v * t.layer_us[k] * (t.num_layers // v) + t.first_us[k] + t.last_us[k]
               + 2 * v * (t.most_send_us + lat_top) * min(t.slots[k], p) for k in range(len(t.groups)))


def _block_extremes(md: cp_model.CpModel, t: CostTables, xv, k: int, send: tuple, ahead, behind) -> None:
    """ahead >= every stage of block k's F + v xf, behind >= its B + v up (the first block's first stage: B only),
    each stage taken at most as large as it is (the embedding on the first stage, the LM head on the last only)."""
    v = t.vpp
    inward, _, outward = send
    fl, bl = v * t.fwd_layer_us[k], v * (t.layer_us[k] - t.fwd_layer_us[k])
    ff, bf = t.first_fwd_us[k], t.first_us[k] - t.first_fwd_us[k]
    lf, lb = t.last_fwd_us[k], t.last_us[k] - t.last_fwd_us[k]
    own = v * (t.send_us[k][k] or 0)
    md.add(behind >= bl * xv.a[k] + bf * xv.start[k] + inward)  # the first stage
    md.add(ahead >= fl * xv.a[k] + ff * xv.start[k] + own).only_enforce_if(~xv.lone[k])
    md.add(ahead >= fl * xv.a[k] + ff * xv.start[k] + outward).only_enforce_if(xv.lone[k])
    md.add(ahead >= fl * xv.b[k] + lf * xv.end[k] + outward).only_enforce_if(~xv.lone[k])  # the last stage
    md.add(behind >= bl * xv.b[k] + lb * xv.end[k] + own).only_enforce_if(~xv.lone[k])
    md.add(ahead >= fl * xv.q[k] + own).only_enforce_if(xv.three[k])  # the interior's largest
    md.add(behind >= bl * xv.q[k] + own).only_enforce_if(xv.three[k])


def _block_pre(t: CostTables, xv, k: int):
    """What block k adds to head + chain of a stage after it, its outgoing crossing aside: its work and its inner
    boundaries (two sends, two latencies each)."""
    v = t.vpp
    own, own_lat = t.send_us[k][k] or 0, t.lat_us[k][k]
    return (v * t.layer_us[k] * (xv.a[k] + xv.b[k] + xv.i[k]) + t.first_us[k] * xv.start[k]
            + t.last_us[k] * xv.end[k] + 2 * v * (own + own_lat) * (xv.n[k] - 1))
