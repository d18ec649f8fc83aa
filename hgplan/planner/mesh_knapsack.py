"""The max-plus knapsacks over stage counts that planner/mesh_bound.py's and planner/mesh_first.py's bounds run over
hosts (or sites): a state per (first stage placed, last stage placed, ...), an array per state of the most layers t
stages hold. Arrays may carry leading batch axes (one knapsack per price of planner/mesh_wan.py's loop dual, run at
once); the stage count is always the last axis."""

from __future__ import annotations

import functools

import numpy as np

from hgplan.planner.mesh_order import NONE


def shared(hosts: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The hosts, each equal to an earlier one (interchangeable node groups) replaced by that one, so that the
    per-host work of one cycle is done once per class (identified by object: id())."""
    out: list[dict[str, np.ndarray]] = []
    for a in hosts:
        out.append(next((b for b in out if b.keys() == a.keys() and all(np.array_equal(a[k], b[k]) for k in a)), a))
    return out


def per_class(items: list, fn, key=id) -> list:
    """fn(x) per item, computed once per key(x): the hosts of one class are one object (shared), and so are what is
    computed from them."""
    done: dict = {}
    for x in items:
        if key(x) not in done:
            done[key(x)] = fn(x)
    return [done[key(x)] for x in items]


@functools.lru_cache(maxsize=64)
def knapsack_before(P: int) -> np.ndarray:
    """[total, j] -> total - j, the knapsacks' index of what the hosts before hold; P + 1 (a sentinel entry appended
    to the array indexed, "cannot") where j > total."""
    total = np.arange(P + 1)
    diff = total[:, None] - total[None, :]
    out = np.where(diff >= 0, diff, P + 1)
    out.setflags(write=False)
    return out


def merged(state: tuple[int, int], role: tuple[int, int]) -> tuple[int, int] | None:
    """(first stage placed, last stage placed) after a host (or site) in `role` (its own two flags); None when both
    would place the same one."""
    (f, ll), (fh, lh) = state, role
    return None if (f and fh) or (ll and lh) else (f | fh, ll | lh)


ROLES = ((0, 0), (1, 0), (0, 1), (1, 1))
"""The (first stage placed, last stage placed) states of roles_step's knapsacks, and a block's roles, in this order."""
Roles = dict[tuple[int, int], np.ndarray]
"""Per role (f, l) of a host's block, whether it holds the pipeline's first / last stage: the most layers its blocks
of j stages hold, [j, option]."""
ROLE_PAIRS = np.array(sorted(((s, r, ROLES.index(k)) for s in range(4) for r in range(4)
                              if (k := merged(ROLES[s], ROLES[r])) is not None), key=lambda p: p[2])).T
"""(state, role, state after) of every role that can follow a state, as three index arrays (roles_step's `pairs`),
in the order of the state after."""
ANY_ROLE = np.zeros((3, 1), dtype=int)
"""roles_step's `pairs` of a knapsack without roles: one state, one role."""


@functools.lru_cache(maxsize=2)
def facing_pairs(with_roles: bool) -> np.ndarray:
    """roles_step's `pairs` of a knapsack with a flag more, whether some block faces another site yet (planner/
    mesh_dual.py's knapsack over a site's hosts), over ROLE_PAIRS (with_roles) or ANY_ROLE: held stacks the states
    without the flag and with it (2 x states), gains the roles of a block that does not face another site, of one
    that does, and the larger of the two (3 x roles). A state without the flag takes a block that does not face one
    (and keeps it unset) or one that does (and sets it); a state with it takes either, whichever gains more."""
    pairs, n = (ROLE_PAIRS, len(ROLES)) if with_roles else (ANY_ROLE, 1)
    state, role, after = pairs
    out = np.concatenate([pairs, [state, role + n, after + n], [state + n, role + 2 * n, after + n]], axis=1)
    out = out[:, np.argsort(out[2], kind="stable")]
    out.setflags(write=False)
    return out


_ROUTES: dict[tuple[int, bytes], tuple] = {}
"""_route's cache: (id of the pairs, live states) -> (the pairs, the route); the pairs are module constants."""


def _route(pairs: np.ndarray, live_states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(state, role) of the pairs from the live states, where each state after's run of them starts, and that state
    (pairs in the order of the state after), computed once per pairs and live states."""
    key = (id(pairs), live_states.tobytes())
    hit = _ROUTES.get(key)
    if hit is not None and hit[0] is pairs:
        return hit[1]
    state, role, after = pairs[:, live_states[pairs[0]]]
    starts = np.flatnonzero(np.concatenate([[True], after[1:] != after[:-1]])) if after.size else after
    if len(_ROUTES) > 4096:
        _ROUTES.clear()
    _ROUTES[key] = (pairs, (state, role, starts, after[starts]))
    return _ROUTES[key][1]


def _span(reached: np.ndarray, gains: np.ndarray, P: int) -> tuple[int, int, int] | None:
    """(least total, largest total, most stages) a step adds up: the totals that some reached count (a mask over the
    held states, stage count last) plus some count a block takes (gains) reach, up to P; None where none does."""
    taken = np.flatnonzero((gains > NONE / 2).reshape(-1, gains.shape[-1]).any(axis=0))
    counts = np.flatnonzero(reached.reshape(-1, reached.shape[-1]).any(axis=0))
    if not taken.size or not counts.size or counts[0] + taken[0] > P:
        return None
    return int(counts[0] + taken[0]), min(P, int(counts[-1] + taken[-1])), int(taken[-1])


def roles_step(held: np.ndarray, gains: np.ndarray, P: int, pairs: np.ndarray = ROLE_PAIRS,
               optional: bool = True) -> np.ndarray:
    """step with states and roles as arrays: held[state, ..., t] the most t stages hold in each state, gains[role, ...,
    j] what the host (or site) holds with j stages in each role, NONE where it cannot (gains[..., 0] must be NONE: a
    used host takes at least one stage); pairs: (state, role, state after) of the roles that can follow each state,
    in the order of the state after (ROLE_PAIRS over ROLES, ANY_ROLE, facing_pairs or another module constant);
    returns the states after it (if optional, it may stay unused). Only the states some stage count reaches, the
    stage counts some host's block takes and the totals those two reach are added up (the rest stays NONE): the same
    arrays at a fraction of the work (a block takes few of the P stages)."""
    out = held.copy() if optional else np.full_like(held, NONE)
    live = held > NONE / 2
    state, role, starts, into = _route(pairs, live.reshape(held.shape[0], -1).any(axis=1))
    if state.size and (span := _span(live, gains, P)) is not None:
        first, last, most = span
        ext = np.concatenate([held, np.full(held.shape[:-1] + (1,), NONE)], axis=-1)
        ext = ext[..., knapsack_before(P)[first:last + 1, :most + 1]]
        cand = (ext[state] + gains[role][..., None, :most + 1]).max(axis=-1)  # [pair, ..., total from first]
        most_by_state = np.maximum.reduceat(cand, starts, axis=0)  # per state after, the most of its pairs
        out[into, ..., first:last + 1] = np.maximum(out[into, ..., first:last + 1], most_by_state)
    return np.where(out > NONE / 2, out, NONE)


def step(states: dict[tuple, np.ndarray], gains: dict[tuple, np.ndarray], P: int, to,
         optional: bool = True) -> dict[tuple, np.ndarray]:
    """One host (or site) more in a max-plus knapsack over stage counts: states[s][..., t] the most layers t stages
    hold in state s, gains[r][..., j] what the host holds with j >= 1 stages in role r (or, if optional, it stays
    unused), both with the same leading axes; to(s, r) the state after, None where role r cannot follow state s."""
    out = {k: v.copy() if optional else np.full_like(v, NONE) for k, v in states.items()}
    live = [s for s, b in states.items() if b.max() > NONE / 2]
    if not live or not gains:
        return out
    roles = list(gains)
    used = np.stack([gains[r] for r in roles])
    used[..., 0] = NONE  # a used host takes at least one stage
    held = np.stack([states[s] for s in live])
    pairs = [(i, k, key) for i, s in enumerate(live) for k, r in enumerate(roles) if (key := to(s, r)) is not None]
    if not pairs or (span := _span(held > NONE / 2, used, P)) is None:  # as roles_step: only the totals the host reaches
        return out
    first, last, most = span
    # [s, ..., total from first, j], the sentinel column NONE
    held = np.concatenate([held, np.full(held.shape[:-1] + (1,), NONE)], axis=-1)
    held = held[..., knapsack_before(P)[first:last + 1, :most + 1]]
    si, ri, keys = zip(*pairs)
    # [pair, ..., total from first]: the pairs that can follow
    cand = (held[list(si)] + used[list(ri)][..., None, :most + 1]).max(axis=-1)
    cand = np.where(cand > NONE / 2, cand, NONE)
    for key, value in zip(keys, cand):
        out[key][..., first:last + 1] = np.maximum(out[key][..., first:last + 1], value)
    return out


def block_layers(j: np.ndarray, single, head, tail, middle, slots) -> np.ndarray:
    """Most layers a host's block of j stages holds under each option (j broadcast against the options' arrays): one
    stage holds `single`, more stages their head and tail stage's and j - 2 middle stages'; NONE where it cannot
    (more stages than the option's slots, or a stage that holds none). Shared by the bounds' gains (planner/
    mesh_bound.py, planner/mesh_wan.py), whose values may be below one (the loop dual's) but are NONE for "cannot"."""
    cap = np.where(j == 1, single, head + tail + (j - 2) * np.where(j >= 3, middle, 0.0))
    ok = (j >= 1) & (j <= slots) & (cap > NONE / 2) & ((j < 3) | (middle > 0))
    return np.where(ok, cap, NONE)


def block_roles(a: dict[str, np.ndarray], held, j: np.ndarray, whole: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """gain[(f, l)]: block_layers of a host's block of j stages under each option, f / l: whether it holds the
    pipeline's first / last stage; a single stage pays both its ends (the embedding, the LM head or a send to another
    host), a block's head and tail one end and one own-mesh send, its middle stages two own-mesh sends. The (1, 1)
    role, a block with the first and the last stage, is the whole pipeline: at the stage counts `whole` only. a: the
    host's per-option first, last, cross, intra and slots; held(penalties): the whole layers a stage holds with each of
    a stack of penalties (planner/mesh_bound.py at one cycle, planner/mesh_first.py at a grid of them)."""
    first, last, cross, intra = a["first"], a["last"], a["cross"], a["intra"]
    fc, cl, cc, fi, ci, li, ii, fl = held(np.stack([first + cross, cross + last, 2 * cross, first + intra,
                                                    cross + intra, last + intra, 2 * intra, first + last]))
    # the three roles' blocks at once (a leading axis over them, j's shape and theirs broadcast behind it), then the
    # whole pipeline's
    lead = (3,) + (1,) * max(0, j.ndim - cc.ndim) + cc.shape
    held_by_role = block_layers(j[None], *(np.stack(parts).reshape(lead) for parts in ((cc, fc, cl), (ci, fi, ci),
                                                                                       (ci, ci, li))), ii, a["slots"])
    held_by_role.setflags(write=False)  # shared by a class's hosts (per_class)
    out = dict(zip(((0, 0), (1, 0), (0, 1)), held_by_role))
    out[(1, 1)] = block_layers(whole, fl, fi, li, ii, a["slots"])
    return out
