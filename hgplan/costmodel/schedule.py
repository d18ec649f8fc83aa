"""Megatron's 1F1B order per stage, and the paths through it that bound an interleaved pipeline from below.

Each path is a chain of ops the simulator (costmodel/pipeline.py) runs one after another: a stage's ops in its
order, and an op's output reaching the next stage's same op. Its length, for any stage times, is at most the
simulated iteration, so the closed form charges the longest of them when interleaved. Values are v x a length and
may be numbers or CP-SAT linear expressions (planner/model.py builds its interleaved terms from these very
functions). Inputs as costmodel/pipeline.py's: fwd[s], bwd[s] per stage (one micro-batch, all its chunks); per
boundary k (stage k -> k + 1, index p - 1 the wrap-around) xf[k], xb[k] the sender's busy time, lat[k] latency.
"""

from __future__ import annotations

import functools
from collections.abc import Callable


def warmup_forwards(stage: int, p: int, m: int, v: int) -> int:
    """How many forwards a stage runs before its first backward in Megatron's (interleaved) 1F1B order."""
    if v == 1:
        return min(p - stage - 1, m)
    return min((p - stage - 1) * 2 + (v - 1) * p, m * v)


def schedule_order(stage: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron's (interleaved) 1F1B order for one stage: (kind, micro-batch, chunk)."""
    warm = warmup_forwards(stage, p, m, v)
    if v == 1:
        seq = [("F", i, 0) for i in range(warm)]
        for j in range(m - warm):
            seq.append(("F", warm + j, 0))
            seq.append(("B", j, 0))
        seq += [("B", i, 0) for i in range(m - warm, m)]
        return seq
    total = m * v

    def fwd_id(k: int) -> tuple[int, int]:
        """(micro-batch, chunk) of the k-th forward in interleaved order."""
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, chunk

    def bwd_id(k: int) -> tuple[int, int]:
        """(micro-batch, chunk) of the k-th backward (chunks in reverse)."""
        mb, chunk = fwd_id(k)
        return mb, v - 1 - chunk

    seq = [("F", *fwd_id(k)) for k in range(warm)]
    for j in range(total - warm):
        seq.append(("F", *fwd_id(warm + j)))
        seq.append(("B", *bwd_id(j)))
    seq += [("B", *bwd_id(k)) for k in range(total - warm, total)]
    return seq


@functools.lru_cache(maxsize=256)
def _phase_counts(p: int, m: int, v: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """Per stage, in Megatron's interleaved order (schedule_order): (forwards that send, backwards up to its last
    forward, those of them that send, backwards after it, those of them that send)."""
    out = []
    for s in range(p):
        seq = schedule_order(s, p, m, v)
        last = max(i for i, op in enumerate(seq) if op[0] == "F")
        f_send = sum(1 for kind, _, c in seq if kind == "F" and (s < p - 1 or c < v - 1))
        pre = [c for kind, _, c in seq[:last] if kind == "B"]
        post = [c for kind, _, c in seq[last + 1:] if kind == "B"]
        out.append((f_send, len(pre), sum(1 for c in pre if s > 0 or c > 0),
                    len(post), sum(1 for c in post if s > 0 or c > 0)))
    return tuple(out)


def _head_and_chain(fwd: list, bwd: list, xf: list, xb: list, lat: list, v: int) -> tuple[list, list]:
    """Per stage s, v x the way of micro-batch 0's first chunk down to s (head) and v x the way of a backward from s
    back up to stage 0 (chain), the stages before s only: what every path below starts and ends with."""
    heads, chains, head, chain = [], [], 0, 0
    for s in range(len(fwd)):
        heads.append(head)
        chains.append(chain)
        head = head + fwd[s] + v * (xf[s] + lat[s])
        chain = chain + bwd[s] + v * lat[s] + (v * xb[s - 1] if s > 0 else 0)
    return heads, chains


def phase_paths(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int,
                vpp: int) -> tuple[list, list]:
    """Interleaved 1F1B's two-stage paths, times v, as (start, end) per stage: for stages s <= t the simulator's
    pipeline takes at least (start[s] + end[t]) / v. Values may be numbers or CP-SAT linear expressions.

    With interleaving a stage runs (v - 1) p + 2 (p - s - 1) forwards before its first backward and as many
    backwards after its last forward (of (m v) each), so a stage that sends forward over a slow link and one after it
    that sends backward over it cannot hide each other's sends in a shared cycle, as the closed form assumes. The
    path: micro-batch 0's first chunk comes down to s (head); s runs every op up to its last forward, each with its
    send; that forward (the last micro-batch's last chunk) goes down to t, which runs it and every op after it; t's
    last backward (chunk 0) climbs back to stage 0 (chain). Each step waits on the one before in the simulator, so
    the sum is a path of its event graph: start[s] holds what depends on s (all but s's last forward and its send),
    end[t] the rest. With s = t it is the stage's whole busy time between head and chain."""
    p, m, v = len(fwd), microbatches, vpp
    counts = _phase_counts(p, m, v)
    heads, chains = _head_and_chain(fwd, bwd, xf, xb, lat, v)
    starts, ends = [], []
    for s in range(p):
        f_send, b_pre, bs_pre, b_post, bs_post = counts[s]
        up = xb[s - 1] if s > 0 else xb[p - 1]  # a backward's send (stage 0: the wrap, chunks > 0 only)
        last_send = xf[s] if s < p - 1 else 0
        starts.append((m * v - 1) * fwd[s] + v * (f_send - (1 if s < p - 1 else 0)) * xf[s]
                      + b_pre * bwd[s] + v * bs_pre * up)
        ends.append(heads[s] + fwd[s] + v * last_send + b_post * bwd[s] + v * bs_post * up + chains[s])
    return starts, ends


def longest_phase_path(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int, vpp: int,
                       maximum: Callable = max):
    """v x the longest of phase_paths' two-stage paths: the starts' running maximum plus each end. `maximum`: the
    elementwise maximum of the values (numpy.maximum for arrays of them)."""
    starts, ends = phase_paths(fwd, bwd, xf, xb, lat, microbatches=microbatches, vpp=vpp)
    best = running = None
    for start, end in zip(starts, ends):
        running = start if running is None else maximum(running, start)
        best = running + end if best is None else maximum(best, running + end)
    return best


@functools.lru_cache(maxsize=256)
def _steady_counts(p: int, m: int, v: int) -> tuple[tuple[int, int, int, int], ...]:
    """Per stage t, in Megatron's order (schedule_order): (its warm-up forwards w, the forwards and the backwards of
    its steady state that send, stage 0's backwards that send among those the path through t runs there when stage 0
    is its cool-down stage). w = m v where t has no steady state."""
    total = m * v
    chunks = [c for kind, _, c in schedule_order(0, p, m, v) if kind == "B"]  # a backward's chunk by its ordinal
    out = []
    for t in range(p):
        w = warmup_forwards(t, p, m, v)
        steady = schedule_order(t, p, m, v)[w:]
        f_send = sum(1 for kind, _, c in steady if kind == "F" and (t < p - 1 or c < v - 1))
        b_send = sum(1 for kind, _, c in steady[:2 * (total - w)] if kind == "B" and (t > 0 or c > 0))
        j = total - w - 1  # the ordinal of t's last steady backward
        first = chunks[j:total - 1] if t > 0 else chunks[j + 1:]
        out.append((w, f_send, b_send, sum(1 for c in first if c > 0)))
    return tuple(out)


def steady_paths(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int,
                 vpp: int) -> tuple[list, list[int], list, list, list]:
    """Interleaved 1F1B's three-stage paths through a stage's steady state, times v, as (base, w, ahead, behind,
    first): for stages s1, s3 <= t with t in a steady state (w[t] < m v, base[t] not None) the simulator's pipeline
    takes at least (base[t] + w[t] ahead[s1] + w[t] behind[s3]) / v, with first[t] in place of w[t] behind[s3] when
    s3 = 0 (stage 0's backwards of chunk 0 send nothing).

    The path: micro-batch 0's first chunk comes down to s1 (head); s1 runs its first w[t] + 1 forwards, each with its
    send (t's warm-up is w[t] forwards, s1's is at least that long, so all are forwards); the last of them goes down to
    t, which runs it and its whole steady state (one forward, one backward, m v - w[t] times); t's last steady
    backward climbs to s3, which runs it and every backward after it (w[t] + 1, all in s3's cool-down); s3's last
    backward (chunk 0) climbs back to stage 0 (chain). The forward that leaves s1 is the same micro-batch and chunk
    on every stage, as is the backward that leaves t, so each step waits on the one before it in the simulator. On
    the 16-group benchmark fleet's best interleaved plan it is the simulator's critical path (s1 sends over the WAN
    in its warm-up, s3 in its cool-down, t is the slowest stage): 4.615 s, where the closed form's other terms gave
    4.299 s. s1 = s3 = t is the stage's whole busy time between head and chain, as phase_paths' s = t."""
    p, m, v = len(fwd), microbatches, vpp
    counts = _steady_counts(p, m, v)
    up = [xb[s - 1] if s > 0 else xb[p - 1] for s in range(p)]  # a backward's send (stage 0: the wrap)
    ahead = [fwd[s] + v * xf[s] for s in range(p)]
    behind = [bwd[s] + v * up[s] for s in range(p)]
    heads, chains = _head_and_chain(fwd, bwd, xf, xb, lat, v)
    base, first = [], []
    for t in range(p):
        w, f_send, b_send, first_send = counts[t]
        if w < m * v:
            base.append(heads[t] + chains[t] + (m * v - w) * (fwd[t] + bwd[t])
                        + v * (f_send * xf[t] + b_send * up[t]))
            first.append(w * bwd[0] + v * first_send * xb[p - 1])
        else:
            base.append(None)
            first.append(None)
    return base, [c[0] for c in counts], ahead, behind, first


def longest_steady_path(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int, vpp: int,
                        maximum: Callable = max):
    """v x the longest of steady_paths' three-stage paths (0 where no stage has a steady state), over running maxima
    of ahead and behind. `maximum`: as longest_phase_path's."""
    base, w, ahead, behind, first = steady_paths(fwd, bwd, xf, xb, lat, microbatches=microbatches, vpp=vpp)
    best, top_ahead, top_behind = 0, None, None
    for t in range(len(fwd)):
        top_ahead = ahead[t] if top_ahead is None else maximum(top_ahead, ahead[t])
        if t > 0:
            top_behind = behind[t] if top_behind is None else maximum(top_behind, behind[t])
        if base[t] is not None:
            tail = first[t] if top_behind is None else maximum(first[t], w[t] * top_behind)
            best = maximum(best, base[t] + w[t] * top_ahead + tail)
    return best


def longest_interleaved_path(fwd: list, bwd: list, xf: list, xb: list, lat: list, *, microbatches: int, vpp: int,
                             maximum: Callable = max):
    """v x the longest two- or three-stage path of an interleaved pipeline (phase_paths, steady_paths); `maximum`: as
    longest_phase_path's."""
    kw = dict(microbatches=microbatches, vpp=vpp, maximum=maximum)
    return maximum(longest_phase_path(fwd, bwd, xf, xb, lat, **kw), longest_steady_path(fwd, bwd, xf, xb, lat, **kw))
