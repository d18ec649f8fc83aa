"""Integer cost tables of the asymmetric (FlagScale process-mesh) family, for one outer candidate (B, P).

A mesh plan is a pipeline of P stages in which every node group ("host" h) that takes part runs one process mesh
with its own option o = (tp, dp, recompute); all meshes see B = dp x micro-batch samples per micro-batch step, so
every option of h trains micro-batches of B / dp samples and the iteration has m = global batch / B micro-batches.
Every value comes from planner/costs.py, so the stock family's tables and these agree term for term.

Legend: H hosts (h), O_h options of host h (o), P stages (s), L layers, m micro-batches. Times are integer
microseconds, memory integer MiB (demand rounded up, capacity down), as in planner/tables.py.

A boundary between stages on two hosts costs max(snd[h][h2][o], rcv[h][h2][o2]): its busy time is a monotone
function of the larger of the two ranks' activation slices (costmodel/reshard.py), so it separates into one term
per end, which is what keeps the CP-SAT model linear in the options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hgplan.costmodel.evaluate import tied_embedding_sync_s
from hgplan.costmodel.pipeline import loops_cycle
from hgplan.domain import NodeGroup
from hgplan.plan import ParallelConfig, Recompute
from hgplan.planner.costs import (TAIL_CLASSES, CostSource, capacity_mib, layers_that_fit, tail_class,
                                  to_us)
from hgplan.planner.options import MAX_MICRO_BATCH, SearchOptions


def _fit(a: np.ndarray, b: np.ndarray, room: np.ndarray | int, num_layers: int) -> np.ndarray:
    """costs.layers_that_fit over arrays: most layers of cost a + b x layers within room (every layer where b is 0
    and a fits, -1 where not even none fit)."""
    left = room - a
    return np.where(b > 0, left // np.maximum(b, 1), np.where(left >= 0, num_layers, -1))


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshTables:
    """Integer tables of one (B, P) candidate over its hosts and their options."""

    samples_per_step: int
    """B = dp x micro-batch of every mesh."""
    pp: int
    microbatches: int
    num_layers: int
    tied: bool
    """Whether the first and last stage share the embedding (then they need one tp)."""
    hosts: tuple[str, ...]
    sites: tuple[str, ...]
    """The site of each host: a boundary between hosts of two sites crosses the WAN (planner/mesh_sites.py)."""
    options: tuple[tuple[ParallelConfig, ...], ...]
    """options[h][o]: the degrees of host h's mesh under option o (pp = P)."""
    slots: tuple[tuple[int, ...], ...]
    layer_us: tuple[tuple[int, ...], ...]
    first_us: tuple[tuple[int, ...], ...]
    last_us: tuple[tuple[int, ...], ...]
    cap_mib: tuple[int, ...]
    mem_a_mib: tuple[tuple[tuple[int, ...], ...], ...]
    """mem_a_mib[s][h][o] + mem_b_mib[s][h][o] x layers: memory of stage s on host h under option o."""
    mem_b_mib: tuple[tuple[tuple[int, ...], ...], ...]
    intra_send_us: tuple[tuple[int, ...], ...]
    """Boundary between two stages of one mesh: sender busy time, per host and option."""
    intra_lat_us: tuple[tuple[int, ...], ...]
    snd_us: tuple[tuple[tuple[int, ...] | None, ...], ...]
    """snd_us[h][h2][o]: a boundary h -> h2 costs at least this for option o of the sender (None: unreachable)."""
    rcv_us: tuple[tuple[tuple[int, ...] | None, ...], ...]
    """rcv_us[h][h2][o2]: ... and at least this for option o2 of the receiver."""
    lat_us: tuple[tuple[int, ...], ...]
    tail_a_us: tuple[tuple[tuple[int, ...], ...], ...]
    """tail_a_us[c][h][o] + tail_b_us[c][h][o] x layers, c = tail_class(s, P)."""
    tail_b_us: tuple[tuple[tuple[int, ...], ...], ...]
    tied_us: tuple[tuple[tuple[int, ...], ...], ...]
    """tied_us[h][o][h2]: tied-embedding sync of a first stage on h (option o) with a last stage on h2."""
    tail_range_us: tuple[float, float] = (0.0, math.inf)
    """Bounds only (planner/mesh_tail.py): the tables of the candidate's plans whose tail lies in this range. Its
    upper end caps every stage's layers (memory_matrix, memory_layers) at what keeps the stage's own tail within it
    (the ends' with the least tied-embedding sync); objective() refuses a plan whose tail falls outside."""

    def restricted(self, keep: list[int]) -> MeshTables:
        """These tables over the hosts `keep` only (in that order): the candidate with the other hosts left idle."""
        def per(row: tuple) -> tuple:
            return tuple(row[h] for h in keep)

        return replace(
            self, hosts=per(self.hosts), sites=per(self.sites), options=per(self.options), slots=per(self.slots),
            layer_us=per(self.layer_us), first_us=per(self.first_us), last_us=per(self.last_us),
            cap_mib=per(self.cap_mib), mem_a_mib=tuple(map(per, self.mem_a_mib)),
            mem_b_mib=tuple(map(per, self.mem_b_mib)), intra_send_us=per(self.intra_send_us),
            intra_lat_us=per(self.intra_lat_us), snd_us=tuple(per(self.snd_us[h]) for h in keep),
            rcv_us=tuple(per(self.rcv_us[h]) for h in keep), lat_us=tuple(per(self.lat_us[h]) for h in keep),
            tail_a_us=tuple(map(per, self.tail_a_us)), tail_b_us=tuple(map(per, self.tail_b_us)),
            tied_us=tuple(tuple(per(r) for r in self.tied_us[h]) for h in keep))

    @property
    def loops(self) -> bool:
        """Whether the cycle holds 1F1B's loops through the boundaries (costmodel/pipeline.py, segment_loops): where
        the hosts span two or more sites. A loop of n stages is at most their stage terms' mean plus 2 (n - 1) / n
        times the largest latency inside it, so within one site (latencies of 5-50 us on the example fleets) it adds
        at most twice that to the cycle, and its P (P - 1) / 2 constraints cost CP-SAT 30% more deterministic time
        (v100-a100-t4's solves: 10.2 -> 13.3 s); across a WAN (20 ms on the synthetic fleets) it decides the plan."""
        return len(set(self.sites)) > 1

    def send_values(self) -> list[int]:
        """Every boundary entry: own-mesh sends and both ends' terms of boundaries between hosts."""
        return [v for r in self.intra_send_us for v in r] + [v for rows in (self.snd_us, self.rcv_us) for row in rows
                                                             for cell in row if cell for v in cell]

    def send(self, h: int, o: int, h2: int, o2: int) -> int | None:
        """Sender busy time of one boundary between stage on (h, o) and stage on (h2, o2); None when unreachable."""
        if h == h2:
            return self.intra_send_us[h][o] if o == o2 else None
        if self.snd_us[h][h2] is None:
            return None
        return max(self.snd_us[h][h2][o], self.rcv_us[h][h2][o2])

    def latency(self, h: int, o: int, h2: int) -> int:
        """Latency of a boundary from host h (option o) to host h2."""
        return self.intra_lat_us[h][o] if h == h2 else self.lat_us[h][h2]

    def memory_layers(self, s: int, h: int, o: int) -> int:
        """Most layers stage s holds on host h under option o (negative when none fit): its memory, and the upper end
        of tail_range_us (then through memory_matrix, the one place that caps by it)."""
        if math.isfinite(self.tail_range_us[1]):
            return int(self.memory_matrix(h)[s, o])
        return layers_that_fit(self.mem_a_mib[s][h][o], self.mem_b_mib[s][h][o], self.cap_mib[h], self.num_layers)

    def memory_matrix(self, h: int) -> np.ndarray:
        """memory_layers(s, h, o) of every stage s and option o of host h at once, as an int array [s, o]; with a
        finite upper end of tail_range_us, each stage's layers also keep its own tail within it (the pipeline's ends
        less the least tied-embedding sync)."""
        a = np.array([self.mem_a_mib[s][h] for s in range(self.pp)], dtype=np.int64)
        b = np.array([self.mem_b_mib[s][h] for s in range(self.pp)], dtype=np.int64)
        fits = _fit(a, b, self.cap_mib[h], self.num_layers)
        if math.isfinite(self.tail_range_us[1]):
            classes = [tail_class(s, self.pp) for s in range(self.pp)]
            a = np.array([self.tail_a_us[c][h] for c in classes], dtype=np.int64)
            b = np.array([self.tail_b_us[c][h] for c in classes], dtype=np.int64)
            room = np.full((self.pp, 1), math.floor(self.tail_range_us[1]), dtype=np.int64)
            room[[0, -1] if self.pp > 1 else []] -= self.least_tied_us()
            fits = np.minimum(fits, _fit(a, b, room, self.num_layers))
        return fits

    def least_tied_us(self) -> int:
        """The least tied-embedding sync of any first and last stage (0 without one)."""
        return min((min(r) for rows in self.tied_us for r in rows), default=0) if self.pp > 1 else 0

    def objective(self, assign: list[int], choice: dict[int, int], layers: list[int]) -> int | None:
        """Closed-form iteration time (us) of a placement (host of each stage, option of each used host, layers of
        each stage), or None when it breaks a rule. Mirrors mesh_model.py."""
        P, m = self.pp, self.microbatches
        if len(assign) != P or len(layers) != P or sum(layers) != self.num_layers or min(layers) < 1:
            return None
        if set(choice) != set(assign):
            return None
        blocks = [h for i, h in enumerate(assign) if i == 0 or assign[i - 1] != h]
        if len(blocks) != len(set(blocks)) or any(assign.count(h) > self.slots[h][choice[h]] for h in choice):
            return None
        if any(n > self.memory_layers(s, h, choice[h]) for s, (h, n) in enumerate(zip(assign, layers))):
            return None
        ends = [self.options[h][choice[h]] for h in (assign[0], assign[-1])]
        if self.tied and ends[0].tp != ends[1].tp:
            return None
        work = [n * self.layer_us[h][choice[h]] for h, n in zip(assign, layers)]
        work[0] += self.first_us[assign[0]][choice[assign[0]]]
        work[-1] += self.last_us[assign[-1]][choice[assign[-1]]]
        sends = []
        for s in range(P - 1):
            h, h2 = assign[s], assign[s + 1]
            x = self.send(h, choice[h], h2, choice[h2])
            if x is None:
                return None
            sends.append((x, self.latency(h, choice[h], h2)))
        cycle = max(work[s] + sum(x for b, (x, _) in enumerate(sends) if s in (b, b + 1)) for s in range(P))
        if self.loops:  # whole microseconds, as the stock family's tables (planner/tables.py) take them
            send, lat = [x for x, _ in sends] + [0], [y for _, y in sends] + [0]
            cycle = loops_cycle(cycle, work, send, lat, microbatches=m)
        fill = sum(work) + sum(2 * x + 2 * lat for x, lat in sends)
        tied = self.tied_us[assign[0]][choice[assign[0]]][assign[-1]] if P > 1 else 0
        tail = 0
        for s, (h, n) in enumerate(zip(assign, layers)):
            c = tail_class(s, P)
            tail = max(tail, self.tail_a_us[c][h][choice[h]] + self.tail_b_us[c][h][choice[h]] * n
                       + (tied if s in (0, P - 1) else 0))
        if not self.tail_range_us[0] <= tail <= self.tail_range_us[1]:
            return None
        return (m - 1) * cycle + fill + tail


def _tp_options(costs: CostSource, g: NodeGroup, opts: SearchOptions) -> list[int]:
    model, seq = costs.model, costs.train.seq_length
    return [t for t in (opts.tp_options or (1, 2, 4, 8, 16, 32, 64)) if g.gpus_per_node % t == 0
            and model.tp_divides(t) and seq % t == 0]


MESH_RECOMPUTE = (Recompute.NONE, Recompute.FULL)
"""A mesh's recomputation: FlagScale sets it per stage only as full or none (its per-stage micro-batch rows are 0/1
flags; selective is one setting for the whole model), so a plan that mixes selective with other meshes cannot run
(export rule R13, validate's mesh_recompute). Until 2026-11-29 selective was offered here too, and on a fleet of
H100 and L40S nodes (docs/export.md, the FlagScale section) the search returned such a plan, which export then
refused. Selective on every mesh is left out too (it would need all meshes to choose alike); the stock family
keeps it. Searched with selective as the only choice (2026-11-29), no fleet of benchmarks/mesh_search.py --quick
had an all-selective plan faster than the none-or-full best (docs/planner.md, "What the family cannot express")."""


def host_options(costs: CostSource, g: NodeGroup, B: int, P: int, opts: SearchOptions) -> list[ParallelConfig]:
    """Every mesh option of host g: tp inside a node, dp dividing B with micro-batches of at most MAX_MICRO_BATCH,
    tp x dp tiling the nodes and fitting the group, each recomputation choice of MESH_RECOMPUTE the search allows."""
    if not g.gpu.trains(costs.train):
        return []
    kinds = [rc for rc in opts.recompute_options if rc in MESH_RECOMPUTE]
    out = []
    for tp in _tp_options(costs, g, opts):
        for dp in (d for d in range(1, B + 1) if B % d == 0 and B // d <= MAX_MICRO_BATCH):
            size = tp * dp
            if size > g.num_gpus or (size % g.gpus_per_node and g.gpus_per_node % size):
                continue
            for rc in kinds:
                out.append(ParallelConfig(tp=tp, pp=P, dp=dp, micro_batch_size=B // dp, recompute=rc,
                                          sequence_parallel=tp > 1, zero_stage=1))
    return out


@dataclass(slots=True)
class _HostRows:
    """One host's options and their per-option rows, before they are frozen into MeshTables."""

    group: NodeGroup
    options: list[ParallelConfig]
    rows: dict


def _host_rows(costs: CostSource, g: NodeGroup, options: list[ParallelConfig]) -> _HostRows:
    per = [costs.group(g, c) for c in options]
    links = [costs.link(g, g, c) for c in options]
    mem = np.array([costs.memory(c, g) for c in options], dtype=np.int64)  # [o, stage, a or b]
    tails = [costs.tail(g, c).by_class for c in options]
    rows = {"slots": [g.num_gpus // c.gpus_per_stage for c in options], "layer": [x.layer_us for x in per],
            "first": [x.first_us for x in per], "last": [x.last_us for x in per],
            "isend": [lk.send_us for lk in links], "ilat": [lk.lat_us for lk in links],  # a group reaches itself
            "mem": mem, "tail": tails}
    return _HostRows(group=g, options=options, rows=rows)


def _costs_matrix(hr: _HostRows, cross: list[list[int] | None], P: int) -> np.ndarray:
    """One row per option of every table entry the option sets, oriented so that smaller is better (slots negated;
    an unreachable path's None as inf)."""
    r = hr.rows
    cols = [[-x for x in r["slots"]]] + [r[key] for key in ("layer", "first", "last", "isend", "ilat")]
    cols += [[t[c][i] for t in r["tail"]] for c in range(len(TAIL_CLASSES)) for i in (0, 1)]
    cols += [[math.inf if x is None else x for x in row] for row in cross if row is not None]
    mem = r["mem"].reshape(len(hr.options), 2 * P).astype(float)  # [o, (stage, a or b)]
    return np.concatenate([np.array(cols, dtype=float).T, mem], axis=1)


def _prune(hr: _HostRows, cross: list[list[int] | None], tied: bool, P: int) -> list[int]:
    """Indices of the options no other option dominates, ties keeping the first. o2 dominates o when it is at least
    as good in every table entry (and, with tied embeddings, has the same tp): replacing o by o2 in any plan keeps
    the plan valid and its objective no larger, so o can go."""
    v = _costs_matrix(hr, cross, P)
    covers = (v[None, :, :] <= v[:, None, :]).all(axis=2)  # covers[o, o2]: o2 at least as good as o everywhere
    if tied:
        tp = np.array([c.tp for c in hr.options])
        covers &= tp[:, None] == tp[None, :]
    n = len(hr.options)
    earlier = np.arange(n)[None, :] < np.arange(n)[:, None]  # [o, o2]: o2 before o
    np.fill_diagonal(covers, False)
    gone = (covers & (~covers.T | earlier)).any(axis=1)
    return [o for o in range(n) if not gone[o]]


def build_mesh_tables(costs: CostSource, B: int, P: int, groups: list[NodeGroup],
                      opts: SearchOptions) -> MeshTables | None:
    """Tables of candidate (B, P) over the groups with at least one option; dominated options are left out."""
    hosts = []
    for g in groups:
        options = host_options(costs, g, B, P, opts)
        if options:
            hosts.append(_host_rows(costs, g, options))
    if not hosts:
        return None
    H = len(hosts)
    tied = not costs.model.untie_embeddings_and_output_weights
    cross = [[[costs.mesh_link_us(a.group, b.group, c) for c in a.options] if h != h2 else None
              for h2, b in enumerate(hosts)] for h, a in enumerate(hosts)]
    # as a receiver, an option of h2 costs what it would as a sender on the same path (one slice size decides)
    recv = [[[costs.mesh_link_us(a.group, b.group, c) for c in b.options] if h != h2 else None
             for h2, b in enumerate(hosts)] for h, a in enumerate(hosts)]
    for h, hr in enumerate(hosts):
        rows = [r for h2 in range(H) for r in (cross[h][h2], recv[h2][h])]
        keep = _prune(hr, rows, tied, P)
        hosts[h] = _HostRows(group=hr.group, options=[hr.options[o] for o in keep],
                             rows={k: v[keep] if k == "mem" else [v[o] for o in keep] for k, v in hr.rows.items()})
        for h2 in range(H):
            cross[h][h2] = None if cross[h][h2] is None else [cross[h][h2][o] for o in keep]
            recv[h2][h] = None if recv[h2][h] is None else [recv[h2][h][o] for o in keep]
    return _freeze(costs, B, P, hosts, cross, recv, tied)


def _freeze(costs: CostSource, B: int, P: int, hosts: list[_HostRows], cross, recv, tied: bool) -> MeshTables:
    H = len(hosts)
    fleet, model, train = costs.fleet, costs.model, costs.train

    def unreachable(h: int, h2: int) -> bool:
        """No path, or a path whose cost is infinite."""
        return h != h2 and (cross[h][h2] is None or None in cross[h][h2])

    lat = [[0 if h == h2 or unreachable(h, h2) else to_us(fleet.path(a.group, b.group).latency_s)
            for h2, b in enumerate(hosts)] for h, a in enumerate(hosts)]
    tied_rows = [[[to_us(tied_embedding_sync_s(fleet, a.group, b.group, model, c, train)) if P > 1 else 0
                   for b in hosts] for c in a.options] for a in hosts]

    def col(key: str) -> tuple[tuple[int, ...], ...]:
        """One row per host of a per-option entry."""
        return tuple(tuple(hr.rows[key]) for hr in hosts)

    # per host [a or b][stage][option] of the memory rows, as plain ints
    mem = [hr.rows["mem"].transpose(2, 1, 0).tolist() for hr in hosts]

    return MeshTables(
        samples_per_step=B, pp=P, microbatches=train.global_batch_size // B, num_layers=model.num_layers, tied=tied,
        hosts=tuple(hr.group.key for hr in hosts), sites=tuple(hr.group.site for hr in hosts),
        options=tuple(tuple(hr.options) for hr in hosts),
        slots=col("slots"), layer_us=col("layer"), first_us=col("first"), last_us=col("last"),
        cap_mib=tuple(capacity_mib(hr.group) for hr in hosts),
        mem_a_mib=tuple(tuple(tuple(m[0][s]) for m in mem) for s in range(P)),
        mem_b_mib=tuple(tuple(tuple(m[1][s]) for m in mem) for s in range(P)),
        intra_send_us=col("isend"), intra_lat_us=col("ilat"),
        snd_us=tuple(tuple(None if unreachable(h, h2) or h == h2 else tuple(cross[h][h2]) for h2 in range(H))
                     for h in range(H)),
        rcv_us=tuple(tuple(None if unreachable(h, h2) or h == h2 else tuple(recv[h][h2]) for h2 in range(H))
                     for h in range(H)),
        lat_us=tuple(tuple(r) for r in lat),
        tail_a_us=tuple(tuple(tuple(t[c][0] for t in hr.rows["tail"]) for hr in hosts)
                        for c in range(len(TAIL_CLASSES))),
        tail_b_us=tuple(tuple(tuple(t[c][1] for t in hr.rows["tail"]) for hr in hosts)
                        for c in range(len(TAIL_CLASSES))),
        tied_us=tuple(tuple(tuple(r) for r in rows) for rows in tied_rows))
