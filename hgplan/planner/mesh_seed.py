"""A plan for a mesh candidate without CP-SAT: the host order, options and block sizes that hold the layers at the
least cycle, then the best layers for them, then a local search. planner/mesh_search.py takes it before the first
solve of every candidate of SEED_HOSTS or more hosts: as the incumbent when it beats it, and into the plans the
final ranking simulates either way.

Why: on candidates of four or more hosts CP-SAT's one-worker search finds no plan below the incumbent in the time a
candidate gets (the 1024-GPU three-site fleet of benchmarks/mesh_search.py: B = 16, P = 14 ran 20 deterministic
seconds to plans at 1.12-1.13 of the stock incumbent; two workers for 60 s found one at 0.98 of it), and the
closed form the search minimises is not the simulator that ranks the plans: a plan above the incumbent in the tables
can simulate below the best plan (1F1B's loops through a slow link, MeshTables.loops, are a closed-form bound the
simulator often beats), so more plans near the optimum give the ranking more to choose from. Three steps, each
deterministic:

1. **Ordered capacity at a cycle, with its argmax.** For a fixed order of hosts (every order of every subset, up to
   SEED_HOSTS_MAX hosts) a dynamic program over blocks and start positions finds the options and block sizes that
   hold the most whole layers at cycle c: a stage of option o at position s holds min(memory, floor((c - its sends,
   embedding and head) / tau_o)) layers, at least one; a boundary to a neighbour host costs max(own term, the least
   of the neighbour's), as in planner/mesh_order.py (whose order-free masks share no argmax). It runs on a grid of
   cycles, all at once, first coarse then fine around the least cycle at which some order holds L; with tied
   embeddings once per tp of the first and last mesh. A block's inner stages are summed as the difference of two
   running sums of the stages' layers, with a running count of the stages that hold none (a block over one of them
   holds nothing): until 2026-11-29 the sums ran over NONE itself, which rounds the counts away, so every block of an
   option that fits no layer at position 0 (the stage that keeps the most micro-batches) lost its inner stages.
2. **Best layers of a structure** (order, options, block sizes): every stage's cap at cycle c is
   min(memory, floor((c - fixed) / tau)); over every c at which a cap changes, one layer per stage and the rest to
   the fastest stages first (least fill); the exact objective (MeshTables.objective's terms, the tail and the 1F1B
   loops too) of the LOOPED best of those splits; the least wins. The polished structures' splits are computed once
   more with each crossing's loop of two micro-batches in the fill (_paired: the stages next to a 20 ms link leave
   40 ms of slack between them, where it costs least), over the cycles at which that lets a stage hold one layer
   more: on the three-site benchmark fleet the seed of B = 16, P = 16 went from 1.050 to 1.008 of the incumbent
   (the exact best split of its structure, by a CP-SAT model of the split alone).
3. **Local search** from the best few structures: move a stage between blocks, change a host's option (its block
   clipped to the option's slots, the rest to the nearest blocks with room), swap two hosts, drop a host, add one;
   first improvement, up to POLISH_EVALUATIONS structures each.

The plan returned is checked with MeshTables.objective (the closed form the CP-SAT model mirrors); it proves nothing
(the candidate's bound still comes from the tables' bound and CP-SAT).
"""

from __future__ import annotations

import itertools

import numpy as np

from hgplan.planner.costs import tail_class
from hgplan.planner.mesh_order import NONE, whole_layers
from hgplan.planner.mesh_tables import MeshTables

SEED_HOSTS = 2
"""Candidates over this many hosts or more get a seed plan before their first CP-SAT solve (a single host's plans are
the stock family's)."""
SEED_HOSTS_MAX = 4
"""The dynamic program runs once per order of every subset of hosts: 64 orders of four hosts, 325 of five (13,699 of
seven); candidates over more hosts get no seed. With five (the 1000-GPU four-site fleet of benchmarks/mesh_search.py,
2026-11-27) a seed took 1.0-5.8 s, nine of them 25 of the search's 60 s, and none was below the incumbent."""
GRID = 16
"""Cycles per grid (the coarse one over every possible cycle, the fine one around the least)."""
STRUCTURES_PER_ORDER = 4
"""Structures an order gives, at the fine grid's least cycles at which it holds the L layers."""
POLISHED = 3
"""Structures the local search starts from (the best by their exact objective)."""
POLISH_EVALUATIONS = 3000
"""Structures one local search evaluates at most."""
LOOPED = 12
"""Splits (the least by the objective without 1F1B's loops) whose loops best_layers computes, the least of them
winning."""


def _layers(cycles: np.ndarray, penalty: np.ndarray, tau: np.ndarray, most: np.ndarray) -> np.ndarray:
    """Whole layers [cycle, position, option] a stage holds with `penalty` [position, option] else to do in the cycle,
    at most `most` (its memory); NONE below one (mesh_order.whole_layers at every cycle at once)."""
    return whole_layers(cycles[:, None, None], penalty[None], tau[None, None, :], most[None])


class _Candidate:
    """The candidate's tables as arrays, and the evaluation of structures (order, options, block sizes)."""

    def __init__(self, t: MeshTables):
        self.t = t
        H = len(t.hosts)
        self.mem = [np.minimum(t.memory_matrix(h), t.num_layers) for h in range(H)]
        self.classes = [tail_class(s, t.pp) for s in range(t.pp)]
        self.start = [self._start_option(h) for h in range(H)]
        self.evaluated: dict[tuple, tuple[float, tuple[int, ...]] | None] = {}
        """best_layers per structure: the local searches from several starts meet the same structures (on
        v100-a100-t4 a quarter of the calls)."""

    def _start_option(self, h: int) -> int:
        """The option a host added by the local search starts with: the most stages per us of a layer among those
        whose middle stage fits L / P layers (else one)."""
        t, P, mid = self.t, self.t.pp, self.t.pp // 2
        room = self.mem[h][mid]
        options = range(len(t.options[h]))
        fits = ([o for o in options if room[o] >= max(1, t.num_layers // P)] or [o for o in options if room[o] >= 1]
                or [0])
        return max(fits, key=lambda o: (min(t.slots[h][o], P) / t.layer_us[h][o], -o))

    def boundary_terms(self, order, opts, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Per stage its embedding and head (us); per boundary its send and latency; per stage all of those it has
        in the cycle (None: a boundary is unreachable)."""
        t, P = self.t, self.t.pp
        ends, send, lat = np.zeros(P), np.zeros(max(0, P - 1)), np.zeros(max(0, P - 1))
        ends[0] += t.first_us[order[0]][opts[0]]
        ends[-1] += t.last_us[order[-1]][opts[-1]]
        s = 0
        for i, (h, o, p) in enumerate(zip(order, opts, sizes)):
            send[s:s + p - 1], lat[s:s + p - 1] = t.intra_send_us[h][o], t.intra_lat_us[h][o]
            s += p
            if i + 1 < len(order):
                x = t.send(h, o, order[i + 1], opts[i + 1])
                if x is None:
                    return None
                send[s - 1], lat[s - 1] = x, t.latency(h, o, order[i + 1])
        k = ends.copy()
        k[:-1] += send
        k[1:] += send
        return ends, send, lat, k

    def best_layers(self, order, opts, sizes, paired: bool = False) -> tuple[float, tuple[int, ...]] | None:
        """The least objective (us) of the structure over its layer splits as the module docstring's step 2 finds
        it, and that split (None: no plan)."""
        key = (tuple(order), tuple(opts), tuple(sizes), paired)
        if key not in self.evaluated:
            self.evaluated[key] = self._best_layers(order, opts, sizes, paired)
        return self.evaluated[key]

    def _best_layers(self, order, opts, sizes, paired: bool) -> tuple[float, tuple[int, ...]] | None:
        """best_layers, computed."""
        t, P, L, m = self.t, self.t.pp, self.t.num_layers, self.t.microbatches
        if P > L or any(p < 1 or p > t.slots[h][o] for h, o, p in zip(order, opts, sizes)):
            return None
        if t.tied and P > 1 and t.options[order[0]][opts[0]].tp != t.options[order[-1]][opts[-1]].tp:
            return None
        terms = self.boundary_terms(order, opts, sizes)
        if terms is None:
            return None
        ends, send, lat, k = terms
        const = float(ends.sum() + 2 * (send.sum() + lat.sum()))
        hs, os_ = np.repeat(order, sizes), np.repeat(opts, sizes)
        tau = np.array([float(t.layer_us[h][o]) for h, o in zip(hs, os_)])
        most = np.array([self.mem[h][s, o] for s, (h, o) in enumerate(zip(hs, os_))])
        if most.min() < 1 or most.sum() < L:
            return None
        tied = t.tied_us[order[0]][opts[0]][order[-1]] if P > 1 else 0
        ta = np.array([t.tail_a_us[c][h][o] for c, h, o in zip(self.classes, hs, os_)], dtype=float)
        tb = np.array([t.tail_b_us[c][h][o] for c, h, o in zip(self.classes, hs, os_)], dtype=float)
        ta[[0, -1]] += tied
        js = np.arange(1, L + 1)
        cycles = np.unique((k[:, None] + tau[:, None] * js)[js[None, :] <= most[:, None]])
        paired = paired and t.loops and m >= 3 and P > 1
        if paired:  # and where a crossing's loop lets one of its two stages hold one layer more
            across = [t.sites[a] != t.sites[b] for a, b in zip(hs, hs[1:])]
            cycles = np.unique(np.concatenate([cycles] + [
                (k[b] + k[b + 1] + 2 * lat[b] + tau[x] + tau[y] * js[js <= most[y]]) / 2
                for b in np.flatnonzero(across) for x, y in ((b, b + 1), (b + 1, b))]))
        caps = np.minimum(most[None, :], np.floor((cycles[:, None] - k) / tau + 1e-9))
        ok = (caps.min(axis=1) >= 1) & (caps.sum(axis=1) >= L)
        if not ok.any():
            return None
        caps = caps[ok].astype(np.int64)
        n = _paired(caps, cycles[ok], tau, k, lat, L, across) if paired else _fastest_first(caps, tau, L)
        rest = (tau * n).sum(axis=1) + const + (ta + tb * n).max(axis=1)
        few = np.argsort((m - 1) * (k + tau * n).max(axis=1) + rest, kind="stable")[:LOOPED]
        cycle = (k + tau * n[few]).max(axis=1)
        if t.loops:
            cycle = np.maximum(cycle, _loops(tau * n[few] + ends, send, lat, m))
        i = int(np.argmin((m - 1) * cycle + rest[few]))
        return float((m - 1) * cycle[i] + rest[few][i]), tuple(int(v) for v in n[few][i])


def _paired(caps: np.ndarray, cycles: np.ndarray, tau: np.ndarray, k: np.ndarray, lat: np.ndarray, L: int,
            across: list[bool]) -> np.ndarray:
    """Per row (a cycle and its caps), layers filled fastest stage first within the caps and within each boundary's
    loop of two micro-batches (costmodel/pipeline.py, segment_loops, n = 2: the two stages' cycle terms and twice the
    latency within twice the cycle) where the boundary crosses between sites (`across`), so the stages next to a
    slow link leave it slack, taken where it costs least; a row whose caps cannot then take the L layers gets the
    fill without the loops. Longer loops, and those within a site (a few microseconds), are left to the exact
    objective."""
    P = caps.shape[1]
    n, left = np.ones_like(caps), np.full(len(caps), L - P)
    for s in np.argsort(tau, kind="stable"):
        room = caps[:, s] - 1
        for b, other in ((s - 1, s - 1), (s, s + 1)):
            if 0 <= b < P - 1 and across[b]:
                joint = (2 * cycles - 2 * lat[b] - k[s] - k[other] - tau[other] * n[:, other]) / tau[s]
                room = np.minimum(room, np.floor(joint + 1e-9).astype(np.int64) - 1)
        take = np.clip(np.minimum(room, left), 0, None)
        n[:, s] += take
        left -= take
    return np.where((left == 0)[:, None], n, _fastest_first(caps, tau, L))


def _fastest_first(caps: np.ndarray, tau: np.ndarray, L: int) -> np.ndarray:
    """Per row of caps, one layer per stage and the rest to the fastest stages first, within their caps."""
    fastest = np.argsort(tau, kind="stable")
    room = caps[:, fastest] - 1
    n = np.empty_like(caps)
    n[:, fastest] = 1 + np.clip((L - caps.shape[1]) - (np.cumsum(room, axis=1) - room), 0, room)
    return n


def _loops(work: np.ndarray, send: np.ndarray, lat: np.ndarray, m: int) -> np.ndarray:
    """Per row of stage work [row, stage], the cycle 1F1B's loops through the boundaries need (costmodel/pipeline.py,
    segment_loops, whole microseconds as MeshTables.objective): a loop from stage s to stage t over n = t - s + 1 < m
    micro-batches holds the sends into s and out of t, the work of s..t and 2 sends + 2 latencies of each boundary
    between them."""
    P = work.shape[1]
    if P < 2 or m < 3:
        return np.zeros(len(work))
    cross = np.append(2 * (send + lat), 0.0)
    prefix = np.concatenate([np.zeros((len(work), 1)), np.cumsum(work + cross, axis=1)], axis=1)
    s, t = np.arange(P)[:, None], np.arange(P)[None, :]
    into, out = np.append(0.0, send), np.append(send, 0.0)
    loop = prefix[:, 1:][:, None, :] - prefix[:, :-1][:, :, None] - cross[None, None, :] + into[:, None] + out[None, :]
    n = t - s + 1
    return np.where((t > s) & (n < m), np.ceil(loop / np.maximum(n, 1) - 1e-9), 0.0).max(axis=(1, 2))


def _end_term(t: MeshTables, a: int, b: int, receiver: bool) -> np.ndarray | None:
    """What a block pays for the boundary a -> b, per option of its host (b when `receiver`, else a): the larger of
    its own term and the least of the other end's (None: unreachable)."""
    if t.snd_us[a][b] is None:
        return None
    own, other = (t.rcv_us[a][b], t.snd_us[a][b]) if receiver else (t.snd_us[a][b], t.rcv_us[a][b])
    return np.maximum(np.array(own, dtype=float), min(other))


def _block_step(c: _Candidate, f: np.ndarray, cycles: np.ndarray, hosts: tuple, i: int, k: int, tp: int | None):
    """Block i of k on hosts[1] (hosts = (host before or None, host, host after or None)) after blocks holding f
    [cycle, end position]: the most layers held [cycle, end of this block] and its argmax (start x options + option);
    (None, None) where a boundary is unreachable. tp: the first and the last block's tp (tied embeddings)."""
    t, P, G = c.t, c.t.pp, len(cycles)
    before, h, after = hosts
    O = len(t.options[h])
    tau = np.array(t.layer_us[h], dtype=float)
    most = np.where(c.mem[h] >= 1, c.mem[h], NONE).astype(float)
    if tp is not None and i in (0, k - 1):
        most[:, [o.tp != tp for o in t.options[h]]] = NONE
    ends = np.zeros((P, O))
    ends[0] += t.first_us[h]
    ends[P - 1] += t.last_us[h]
    cin = np.zeros(O) if before is None else _end_term(t, before, h, receiver=True)
    cout = np.zeros(O) if after is None else _end_term(t, h, after, receiver=False)
    if cin is None or cout is None:
        return None, None
    pos = np.arange(P)[:, None]
    left, right = np.where(pos > 0, cin, 0.0), np.where(pos < P - 1, cout, 0.0)
    intra = np.array(t.intra_send_us[h], dtype=float)
    inner = _layers(cycles, ends + 2 * intra, tau, most)
    first, last = _layers(cycles, ends + left + intra, tau, most), _layers(cycles, ends + intra + right, tau, most)
    single = _layers(cycles, ends + left + right, tau, most)
    # the layers of the stages before each position and how many of them hold none: a sum over NONE would round the
    # counts away (NONE + 40 == NONE in floating point), and a block's inner stages are read as differences of two
    cum = np.concatenate([np.zeros((G, 1, O)), np.cumsum(np.where(inner > NONE / 2, inner, 0.0), axis=1)], axis=1)
    bad = np.concatenate([np.zeros((G, 1, O), dtype=np.int64), np.cumsum(inner <= NONE / 2, axis=1)], axis=1)
    A = np.arange(i, P - (k - 1 - i)) if i > 0 else np.arange(1)
    E = np.arange(i + 1, P - (k - 1 - i) + 1) if i < k - 1 else np.array([P])
    # [cycle, end, start, option], ends before starts so that the argmax below reads a view, not a copy
    p = E[:, None] - A[None, :]
    a_at, e_at = A[None, :], E[:, None] - 1  # a block's first and last position (A <= P - 1, E >= 1)

    def at(x: np.ndarray, index: np.ndarray) -> np.ndarray:  # x[:, index], C-ordered (x[:, index] is not: 20% slower)
        return np.take(x, index, axis=1)

    # a block of p >= 2 stages: its first, its p - 2 inner ones (none where p = 2: the difference is 0) and its last
    held = at(first, a_at) + (at(cum, e_at) - at(cum, a_at + 1)) + at(last, e_at)
    held[at(bad, e_at) > at(bad, a_at + 1)] = NONE  # an inner stage that holds no layer
    one = np.nonzero(p == 1)
    held[:, one[0], one[1]] = single[:, a_at[0, one[1]]]
    # with the blocks before: above NONE / 2 exactly where both hold layers (counts are far below |NONE| / 2)
    held += f[:, A][:, None, :, None]
    ok = (p >= 1)[:, :, None] & (p[:, :, None] <= np.array(t.slots[h]))
    total = np.where(ok & (held > NONE / 2), held, NONE).reshape(G, len(E), len(A) * O)
    arg = total.argmax(axis=2)
    best = np.take_along_axis(total, arg[..., None], axis=2)[..., 0]
    out, back = np.full((G, P + 1), NONE), np.zeros((G, P + 1), dtype=np.int64)
    out[:, E] = np.where(best > NONE / 2, best, NONE)
    start, opt = np.divmod(arg, O)
    back[:, E] = A[start] * O + opt
    return out, back


def _order_capacity(c: _Candidate, order: tuple, cycles: np.ndarray, memo: dict, tp: int | None):
    """Most layers the hosts in `order` hold at each cycle, and the argmax of each block ((None, None): an order
    with an unreachable boundary); tp as _block_step's. Blocks with the same hosts before them and the same next
    host are shared: the callers take the orders shortest first, so a shared block was computed for the fewest
    blocks after it, with the widest ranges of start and end (a superset of what a longer order reads)."""
    P, k = c.t.pp, len(order)
    f = np.full((len(cycles), P + 1), NONE)
    f[:, 0] = 0.0
    backs = []
    for i, h in enumerate(order):
        after = order[i + 1] if i < k - 1 else None
        key = (order[:i + 1], after, tp)
        if key not in memo:
            memo[key] = _block_step(c, f, cycles, (order[i - 1] if i else None, h, after), i, k, tp)
        f, back = memo[key]
        if f is None:
            return None, None
        backs.append(back)
    return f[:, P], backs


def _structure(c: _Candidate, order: tuple, backs: list, g: int) -> tuple:
    """The (order, options, block sizes) behind the capacity of `order` at the g-th cycle."""
    e, opts, sizes = c.t.pp, [], []
    for i in range(len(order) - 1, -1, -1):
        start, o = divmod(int(backs[i][g, e]), len(c.t.options[order[i]]))
        opts.append(o)
        sizes.append(e - start)
        e = start
    return order, tuple(reversed(opts)), tuple(reversed(sizes))


def _clipped(t: MeshTables, order: tuple, opts: tuple, sizes: tuple, i: int) -> tuple | None:
    """sizes with block i within its option's slots, what it loses given to the nearest blocks with room."""
    s, room = list(sizes), [t.slots[h][o] for h, o in zip(order, opts)]
    extra = max(0, s[i] - room[i])
    s[i] -= extra
    for j in sorted((j for j in range(len(s)) if j != i), key=lambda j: (abs(j - i), j)):
        give = max(0, min(extra, room[j] - s[j]))
        s[j] += give
        extra -= give
    return None if extra else tuple(s)


def _moves(c: _Candidate, order: tuple, opts: tuple, sizes: tuple):
    """The local search's neighbours of a structure (module docstring, step 3), in a fixed order."""
    t, k = c.t, len(order)
    for i, j in itertools.permutations(range(k), 2):
        if sizes[i] > 1:
            s = list(sizes)
            s[i], s[j] = s[i] - 1, s[j] + 1
            yield order, opts, tuple(s)
    for i, h in enumerate(order):
        for o in range(len(t.options[h])):
            changed = opts[:i] + (o,) + opts[i + 1:]
            if o != opts[i] and (s := _clipped(t, order, changed, sizes, i)) is not None:
                yield order, changed, s
    for i, j in itertools.combinations(range(k), 2):
        swap = [list(order), list(opts), list(sizes)]
        for row in swap:
            row[i], row[j] = row[j], row[i]
        yield tuple(swap[0]), tuple(swap[1]), tuple(swap[2])
    for i in range(k if k > 1 else 0):
        s = list(sizes)
        s[i - 1 if i else 1] += s[i]
        keep = [j for j in range(k) if j != i]
        yield tuple(order[j] for j in keep), tuple(opts[j] for j in keep), tuple(s[j] for j in keep)
    fullest = max(range(k), key=lambda j: (sizes[j], -j))
    for h in (h for h in range(len(t.hosts)) if h not in order and sizes[fullest] > 1):
        s = list(sizes)
        s[fullest] -= 1
        for at in range(k + 1):
            yield (order[:at] + (h,) + order[at:], opts[:at] + (c.start[h],) + opts[at:],
                   tuple(s[:at]) + (1,) + tuple(s[at:]))


def _polish(c: _Candidate, start: tuple, value: float) -> tuple[float, tuple]:
    """First-improvement local search from a structure of objective `value`, up to POLISH_EVALUATIONS structures."""
    best, spent, better = (value, start), 0, True
    while better and spent < POLISH_EVALUATIONS:
        better = False
        for move in _moves(c, *best[1]):
            spent += 1
            found = c.best_layers(*move)
            if found is not None and found[0] < best[0] - 0.5:
                best, better = (found[0], move), True
                break
            if spent >= POLISH_EVALUATIONS:
                break
    return best


def _cycle_grid(c: _Candidate, orders: list[tuple], tp: int | None) -> np.ndarray | None:
    """The fine grid of cycles: between the coarse grid's least cycle at which some order holds L and the one below
    it, and 2%, 5% and 10% above (None: no order holds L at any cycle)."""
    t, L, P = c.t, c.t.num_layers, c.t.pp
    taus = [v for r in t.layer_us for v in r]
    top = max(max(a * L + b + d for a, b, d in zip(*rows)) for rows in zip(t.layer_us, t.first_us, t.last_us))
    coarse = np.geomspace(L * min(taus) / P, 1.01 * top + 2 * max(t.send_values(), default=0), GRID)
    memo: dict = {}
    held = [_order_capacity(c, order, coarse, memo, tp)[0] for order in orders]
    least = min((int(np.argmax(h >= L)) for h in held if h is not None and (h >= L).any()), default=None)
    if least is None:
        return None
    fine = np.geomspace(coarse[max(0, least - 1)], coarse[least], GRID)
    return np.concatenate([fine, coarse[least] * np.array([1.02, 1.05, 1.10])])


def seed_plan(t: MeshTables) -> tuple[int, tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]] | None:
    """A plan of the candidate (module docstring): (objective us as MeshTables.objective, host of every stage,
    (host, option) of every used host in host order, layers of every stage), or None (no plan found, or more than
    SEED_HOSTS_MAX hosts)."""
    H, L = len(t.hosts), t.num_layers
    if H > SEED_HOSTS_MAX or t.pp > L:
        return None
    c = _Candidate(t)
    orders = [order for k in range(1, min(H, t.pp) + 1) for order in itertools.permutations(range(H), k)]
    values: dict[tuple, float] = {}
    # with tied embeddings the first and the last mesh share one tp: one pass per tp
    for tp in sorted({o.tp for row in t.options for o in row}) if t.tied and t.pp > 1 else [None]:
        cycles, memo = _cycle_grid(c, orders, tp), {}
        for order in ([] if cycles is None else orders):
            held, backs = _order_capacity(c, order, cycles, memo, tp)
            for g in ([] if held is None else np.nonzero(held >= L)[0][:STRUCTURES_PER_ORDER]):
                structure = _structure(c, order, backs, int(g))
                if structure not in values and (found := c.best_layers(*structure)) is not None:
                    values[structure] = found[0]
    polished = [_polish(c, s, v) for s, v in sorted(values.items(), key=lambda sv: sv[1])[:POLISHED]]
    # the polished structures' splits again, also with the loops through each crossing in the fill (_paired)
    best = min(((found, structure) for _, structure in polished for paired in (False, True)
                if (found := c.best_layers(*structure, paired=paired)) is not None), default=None)
    if best is None:
        return None
    (_, layers), (order, opts, sizes) = best
    assign = tuple(h for h, p in zip(order, sizes) for _ in range(p))
    objective = t.objective(list(assign), dict(zip(order, opts)), list(layers))
    assert objective is not None, "a structure the seed evaluated breaks a rule of the tables"
    return objective, assign, tuple(sorted(zip(order, opts))), layers
