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
ROLE_PAIRS = np.array([(s, r, ROLES.index(k)) for s in range(4) for r in range(4)
                       if (k := merged(ROLES[s], ROLES[r])) is not None]).T
"""(state, role, state after) of every role that can follow a state, as three index arrays (roles_step's `pairs`)."""
ANY_ROLE = np.zeros((3, 1), dtype=int)
"""roles_step's `pairs` of a knapsack without roles: one state, one role."""


def roles_step(held: np.ndarray, gains: np.ndarray, P: int, pairs: np.ndarray = ROLE_PAIRS,
               optional: bool = True) -> np.ndarray:
    """step with states and roles as arrays: held[state, ..., t] the most t stages hold in each state, gains[role, ...,
    j] what the host (or site) holds with j stages in each role, NONE where it cannot (gains[..., 0] must be NONE: a
    used host takes at least one stage); pairs: (state, role, state after) of the roles that can follow each state
    (ROLE_PAIRS over ROLES, or ANY_ROLE); returns the states after it (if optional, it may stay unused)."""
    state, role, after = pairs
    ext = np.concatenate([held, np.full(held.shape[:-1] + (1,), NONE)], axis=-1)[..., knapsack_before(P)]
    cand = (ext[state] + gains[role][..., None, :]).max(axis=-1)  # [pair, ..., total]
    out = held.copy() if optional else np.full_like(held, NONE)
    np.maximum.at(out, after, cand)
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
    held = np.stack([states[s] for s in live])
    # [s, ..., total, j], the sentinel column NONE
    held = np.concatenate([held, np.full(held.shape[:-1] + (1,), NONE)], axis=-1)[..., knapsack_before(P)]
    used = np.stack([gains[r] for r in roles])
    used[..., 0] = NONE  # a used host takes at least one stage
    pairs = [(i, k, key) for i, s in enumerate(live) for k, r in enumerate(roles) if (key := to(s, r)) is not None]
    if not pairs:
        return out
    si, ri, keys = zip(*pairs)
    cand = (held[list(si)] + used[list(ri)][..., None, :]).max(axis=-1)  # [pair, ..., total]: the pairs that can follow
    cand = np.where(cand > NONE / 2, cand, NONE)
    for key, value in zip(keys, cand):
        out[key] = np.maximum(out[key], value)
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
