"""Integer cost tables for one outer candidate: everything the CP-SAT model and the exhaustive search need.

Times are integer microseconds, memory integer MiB: demand rounded up, capacity rounded down, so a plan
the tables accept also fits the cost model's memory check. Every value comes from planner/costs.py.

Legend: p pipeline stages (s indexes them), v virtual stages per rank, m micro-batches, L layers, K node groups
of the table (k indexes them); "assign" is the group of each stage, "layers" its layer count.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.costmodel.pipeline import loops_cycle
from hgplan.costmodel.schedule import longest_interleaved_path
from hgplan.domain import NodeGroup, TrainingSettings
from hgplan.plan import ParallelConfig
from hgplan.planner.costs import TAIL_CLASSES, CostSource, capacity_mib, layers_that_fit, tail_class


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTables:
    """Integer tables of one candidate over its node groups; `objective` is the closed form the CP-SAT model mirrors."""

    cfg: ParallelConfig
    num_layers: int
    microbatches: int
    groups: tuple[str, ...]
    """Eligible node-group keys (index k)."""
    slots: tuple[int, ...]
    """Most stages group k can host: its GPUs // (tp cp dp)."""
    layer_us: tuple[int, ...]
    """Forward + backward of one layer for one micro-batch on group k."""
    first_us: tuple[int, ...]
    last_us: tuple[int, ...]
    fwd_layer_us: tuple[int, ...]
    """The forward part of layer_us, first_us and last_us (interleaving's phase paths tell the two apart)."""
    first_fwd_us: tuple[int, ...]
    last_fwd_us: tuple[int, ...]
    send_us: tuple[tuple[int | None, ...], ...]
    """Sender busy time per micro-batch per direction between groups k -> k'; None when unreachable."""
    lat_us: tuple[tuple[int, ...], ...]
    mem_a_mib: tuple[tuple[int, ...], ...]
    """Per stage index s and group k: memory = a + b x layers (MiB)."""
    mem_b_mib: tuple[tuple[int, ...], ...]
    cap_mib: tuple[int, ...]
    tail_a_us: tuple[tuple[int, ...], ...]
    """After the flush, stage s on group k waits tail_a[c][k] + tail_b[c][k] x layers (DP sync + optimizer), c being
    tail_class(s, pp): the first and last stages also reduce the embedding's or LM head's gradients."""
    tail_b_us: tuple[tuple[int, ...], ...]
    tied_us: tuple[tuple[int, ...], ...]
    """Tied-embedding sync between first stage on k and last stage on k'."""
    require_all: bool = False
    """Every group of the table hosts at least one stage (the search solves one set of groups at a time)."""

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.cfg.pp

    @property
    def vpp(self) -> int:
        """Virtual stages per rank."""
        return self.cfg.vpp

    @property
    def max_stage_us(self) -> int:
        """The most work one stage can carry per micro-batch: every layer and both edges on the slowest groups."""
        return max(self.layer_us) * self.num_layers + max(self.first_us) + max(self.last_us)

    @property
    def most_send_us(self) -> int:
        """The dearest send of any linked pair (0 when none), as PathTables.most_send_us."""
        return max((val for row in self.send_us for val in row if val is not None), default=0)

    def boundaries(self) -> list[tuple[int, int]]:
        """(sender, receiver) of every boundary, the interleaved wrap-around included."""
        p = self.pp
        out = [(s, s + 1) for s in range(p - 1)]
        if self.vpp > 1 and p > 1:
            out.append((p - 1, 0))
        return out

    def memory_layers(self, s: int, k: int) -> int:
        """Most layers stage s can hold on group k within its memory (negative when not even none fit)."""
        return layers_that_fit(self.mem_a_mib[s][k], self.mem_b_mib[s][k], self.cap_mib[k], self.num_layers)

    def cycle_extras(self, assign: list[int]) -> list[int] | None:
        """Per stage, what its cycle holds besides its layers: v x the sends of the boundaries it touches, plus the
        embedding (first stage) or LM-head (last stage) work; None when a boundary joins unlinked groups."""
        p, v = self.pp, self.vpp
        extras = [0] * p
        for a, b in self.boundaries():
            send = self.send_us[assign[a]][assign[b]]
            if send is None:
                return None
            extras[a] += v * send
            extras[b] += v * send
        extras[0] += self.first_us[assign[0]]
        extras[-1] += self.last_us[assign[-1]]
        return extras

    def objective(self, assign: list[int], layers: list[int]) -> int | None:
        """v x predicted iteration time (us) of a placement, or None if it breaks a rule. Mirrors model.py."""
        p, v, m = self.pp, self.vpp, self.microbatches
        if len(assign) != p or len(layers) != p or sum(layers) != self.num_layers:
            return None
        if any(n < 1 or n % v for n in layers):
            return None
        for k in set(assign):
            if assign.count(k) > self.slots[k]:
                return None
        if self.require_all and set(assign) != set(range(len(self.groups))):
            return None
        blocks = [k for i, k in enumerate(assign) if i == 0 or assign[i - 1] != k]
        if len(blocks) != len(set(blocks)):
            return None  # a group's stages must be contiguous
        if any(n > self.memory_layers(s, k) for s, (k, n) in enumerate(zip(assign, layers))):
            return None
        extras = self.cycle_extras(assign)
        if extras is None:
            return None
        work = [n * self.layer_us[k] for k, n in zip(assign, layers)]
        cycle = max(w + e for w, e in zip(work, extras))
        fill = sum(work) + self.first_us[assign[0]] + self.last_us[assign[-1]] + sum(
            2 * self.send_us[assign[a]][assign[b]] + 2 * self.lat_us[assign[a]][assign[b]] for a, b in self.boundaries()
            if b == a + 1)
        stage = [w + (self.first_us[k] if s == 0 else 0) + (self.last_us[k] if s == p - 1 else 0)
                 for s, (w, k) in enumerate(zip(work, assign))]  # work with the embedding and the LM head
        if v == 1:  # 1F1B's loops through slow links (costmodel/pipeline.py, segment_loops); whole microseconds
            send = [self.send_us[assign[s]][assign[s + 1]] for s in range(p - 1)] + [0]
            lat = [self.lat_us[assign[s]][assign[s + 1]] for s in range(p - 1)] + [0]
            cycle = loops_cycle(cycle, stage, send, lat, microbatches=m)
        pipe = (v * m - 1) * cycle + fill
        if v > 1:
            pipe = max(pipe, self.phase_path(assign, layers, stage))
        tail = 0
        for s, (k, n) in enumerate(zip(assign, layers)):
            c = tail_class(s, p)
            t = self.tail_a_us[c][k] + self.tail_b_us[c][k] * n
            if s in (0, p - 1):
                t += self.tied_us[assign[0]][assign[-1]]
            tail = max(tail, t)
        return pipe + v * tail

    def phase_path(self, assign: list[int], layers: list[int], stage: list[int]) -> int:
        """v x the longest of interleaving's two- and three-stage paths (costmodel/schedule.py) of a placement
        whose boundaries are all linked; `stage`: each stage's work per micro-batch, edges included."""
        fwd = [n * self.fwd_layer_us[k] for k, n in zip(assign, layers)]
        fwd[0] += self.first_fwd_us[assign[0]]
        fwd[-1] += self.last_fwd_us[assign[-1]]
        send = [self.send_us[assign[a]][assign[b]] for a, b in self.boundaries()]
        lat = [self.lat_us[assign[a]][assign[b]] for a, b in self.boundaries()]
        return longest_interleaved_path(fwd, [w - f for w, f in zip(stage, fwd)], send, send, lat,
                                        microbatches=self.microbatches, vpp=self.vpp)


def eligible(group: NodeGroup, cfg: ParallelConfig, train: TrainingSettings) -> bool:
    """Whether a group can host a stage of cfg: precision, TP inside a node, stages tiling nodes, enough GPUs."""
    g = cfg.gpus_per_stage
    if not group.gpu.trains(train):
        return False
    if cfg.tp > group.gpus_per_node or group.gpus_per_node % cfg.tp:
        return False
    if g % group.gpus_per_node and group.gpus_per_node % g:
        return False
    return group.num_gpus >= g


def build_tables(costs: CostSource, cfg: ParallelConfig, groups: list[NodeGroup]) -> CostTables | None:
    """Tables for one outer candidate over the eligible groups, or None when no group can host a stage."""
    groups = [g for g in groups if eligible(g, cfg, costs.train)]
    if not groups:
        return None
    per_group = [costs.group(g, cfg) for g in groups]
    tails = [costs.tail(g, cfg).by_class for g in groups]
    links = [[costs.link(a, b, cfg) for b in groups] for a in groups]
    memory = [costs.memory(cfg, g) for g in groups]
    return CostTables(
        cfg=cfg, num_layers=costs.model.num_layers, microbatches=cfg.num_microbatches(costs.train.global_batch_size),
        groups=tuple(g.key for g in groups), slots=tuple(g.num_gpus // cfg.gpus_per_stage for g in groups),
        layer_us=tuple(c.layer_us for c in per_group), first_us=tuple(c.first_us for c in per_group),
        last_us=tuple(c.last_us for c in per_group), fwd_layer_us=tuple(c.fwd_layer_us for c in per_group),
        first_fwd_us=tuple(c.first_fwd_us for c in per_group), last_fwd_us=tuple(c.last_fwd_us for c in per_group),
        send_us=tuple(tuple(None if lk is None else lk.send_us for lk in row) for row in links),
        lat_us=tuple(tuple(0 if lk is None else lk.lat_us for lk in row) for row in links),
        mem_a_mib=tuple(tuple(memory[k][s][0] for k in range(len(groups))) for s in range(cfg.pp)),
        mem_b_mib=tuple(tuple(memory[k][s][1] for k in range(len(groups))) for s in range(cfg.pp)),
        cap_mib=tuple(capacity_mib(g) for g in groups),
        tail_a_us=tuple(tuple(t[c][0] for t in tails) for c in range(len(TAIL_CLASSES))),
        tail_b_us=tuple(tuple(t[c][1] for t in tails) for c in range(len(TAIL_CLASSES))),
        tied_us=tuple(tuple(0 if lk is None else lk.tied_us for lk in row) for row in links))
