"""Integer cost tables for one outer candidate: everything the CP-SAT model and the exhaustive search need.

Times are integer microseconds, memory integer MiB: demand rounded up, capacity rounded down, so a plan
the tables accept also fits the cost model's memory check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hgplan.costmodel.evaluate import (dp_tail, edge_costs, layer_cost, p2p_message_bytes, p2p_seconds,
                                       tied_embedding_sync_s)
from hgplan.costmodel.memory import GIB, stage_memory
from hgplan.domain import Fleet, ModelArch, NodeGroup, TrainingSettings
from hgplan.plan import ParallelConfig

US = 1_000_000
MIB = 1024 ** 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTables:
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
        return self.cfg.pp

    @property
    def vpp(self) -> int:
        return self.cfg.vpp

    def boundaries(self) -> list[tuple[int, int]]:
        p = self.pp
        out = [(s, s + 1) for s in range(p - 1)]
        if self.vpp > 1 and p > 1:
            out.append((p - 1, 0))
        return out

    def memory_layers(self, s: int, k: int) -> int:
        """Most layers stage s can hold on group k within its memory (negative when not even none fit)."""
        room = self.cap_mib[k] - self.mem_a_mib[s][k]
        return room // self.mem_b_mib[s][k] if self.mem_b_mib[s][k] > 0 else (self.num_layers if room >= 0 else -1)

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
        tail = 0
        for s, (k, n) in enumerate(zip(assign, layers)):
            c = tail_class(s, p)
            t = self.tail_a_us[c][k] + self.tail_b_us[c][k] * n
            if s in (0, p - 1):
                t += self.tied_us[assign[0]][assign[-1]]
            tail = max(tail, t)
        return (v * m - 1) * cycle + fill + v * tail


def eligible(group: NodeGroup, cfg: ParallelConfig, train: TrainingSettings) -> bool:
    g = cfg.gpus_per_stage
    if not group.gpu.supports(train.precision):
        return False
    if cfg.tp > group.gpus_per_node or group.gpus_per_node % cfg.tp:
        return False
    if g % group.gpus_per_node and group.gpus_per_node % g:
        return False
    return group.num_gpus >= g


TAIL_CLASSES = ("first", "middle", "last", "only")


def tail_class(stage: int, pp: int) -> int:
    """Index into TAIL_CLASSES of pipeline stage `stage` of `pp`."""
    if pp == 1:
        return 3
    return 0 if stage == 0 else 2 if stage == pp - 1 else 1


def tail_coeffs(fleet: Fleet, g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings, *,
                fwd_per_layer_s: float, bwd_per_layer_s: float, edge_params: float = 0.0, edge_fwd_s: float = 0.0,
                edge_bwd_s: float = 0.0) -> tuple[float, float]:
    """DP sync + optimizer after the flush of a stage on g, linear in its layers: (intercept, slope) seconds.

    Evaluated at 1 and 2 layers (plus the embedding or LM head of an edge stage: its parameters and work);
    the exposed part of an overlapped reduction grows linearly once it exceeds the backward window, and the
    optimizer step is linear in parameters.
    """
    per = model.layer_params() / cfg.tp
    t1, t2 = (sum(dp_tail(fleet, g, cfg, train, params=n * per + edge_params, layers=n,
                          fwd_s=n * fwd_per_layer_s + edge_fwd_s, bwd_s=n * bwd_per_layer_s + edge_bwd_s))
              for n in (1, 2))
    slope = max(0.0, t2 - t1)
    return max(0.0, t1 - slope), slope


def edge_tail_inputs(g: NodeGroup, model: ModelArch, cfg: ParallelConfig, train: TrainingSettings,
                     num_microbatches: int) -> list[dict]:
    """Keyword arguments of tail_coeffs for each of TAIL_CLASSES: the edge stages' extra parameters and work."""
    ef, eb, hf, hb = edge_costs(g, model, cfg, train)
    per = model.layer_params() / cfg.tp
    out = []
    for cls, (fwd, bwd) in enumerate([(ef, eb), (0.0, 0.0), (hf, hb), (ef + hf, eb + hb)]):
        stage = {0: 0, 1: None, 2: cfg.pp - 1, 3: 0}[cls]
        if stage is None or (cls == 3) != (cfg.pp == 1):
            out.append({})
            continue
        mem = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length,
                           num_microbatches=num_microbatches, stage=stage, layers=1, flash=train.attention == "flash")
        out.append({"edge_params": mem.params - per, "edge_fwd_s": fwd, "edge_bwd_s": bwd})
    return out


def build_tables(fleet: Fleet, model: ModelArch, train: TrainingSettings, cfg: ParallelConfig,
                 groups: list[NodeGroup]) -> CostTables | None:
    """Tables for one outer candidate over the eligible groups, or None when no group can host a stage."""
    groups = [g for g in groups if eligible(g, cfg, train)]
    if not groups:
        return None
    p, m = cfg.pp, cfg.num_microbatches(train.global_batch_size)
    layer_us, first_us, last_us = [], [], []
    tail_a: list[list[int]] = [[] for _ in TAIL_CLASSES]
    tail_b: list[list[int]] = [[] for _ in TAIL_CLASSES]
    for g in groups:
        _, f_l, b_l = layer_cost(fleet, g, model, cfg, train)
        layer_us.append(max(1, round((f_l + b_l) * US)))
        ef, eb, hf, hb = edge_costs(g, model, cfg, train)
        first_us.append(round((ef + eb) * US))
        last_us.append(round((hf + hb) * US))
        for cls, edge in enumerate(edge_tail_inputs(g, model, cfg, train, m)):
            intercept, slope = tail_coeffs(fleet, g, model, cfg, train, fwd_per_layer_s=f_l, bwd_per_layer_s=b_l,
                                           **edge)
            tail_a[cls].append(round(intercept * US))
            tail_b[cls].append(round(slope * US))
    msg = p2p_message_bytes(model, cfg, train)
    send: list[list[int | None]] = []
    lat: list[list[int]] = []
    tied: list[list[int]] = []
    for a in groups:
        srow, lrow, trow = [], [], []
        for b in groups:
            busy, latency, path = p2p_seconds(fleet, a, b, cfg, msg_bytes=msg, crossings=1)
            srow.append(None if path is None else round(busy * US))
            lrow.append(0 if path is None else round(latency * US))
            trow.append(0 if path is None else round(tied_embedding_sync_s(fleet, a, b, model, cfg, train) * US))
        send.append(srow)
        lat.append(lrow)
        tied.append(trow)
    mem_a, mem_b = [], []
    flash = train.attention == "flash"
    for s in range(p):
        arow, brow = [], []
        for g in groups:
            one = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length, num_microbatches=m,
                               stage=s, layers=cfg.vpp, flash=flash).total_gib * GIB / MIB
            two = stage_memory(model, cfg, precision=train.precision, seq_length=train.seq_length, num_microbatches=m,
                               stage=s, layers=2 * cfg.vpp, flash=flash).total_gib * GIB / MIB
            slope = (two - one) / cfg.vpp
            brow.append(math.ceil(slope))
            arow.append(math.ceil(one - slope * cfg.vpp) + 1)
        mem_a.append(tuple(arow))
        mem_b.append(tuple(brow))
    cap = tuple(math.floor(g.gpu.hbm_gib * GIB / MIB) for g in groups)
    return CostTables(cfg=cfg, num_layers=model.num_layers, microbatches=m, groups=tuple(g.key for g in groups),
                      slots=tuple(g.num_gpus // cfg.gpus_per_stage for g in groups), layer_us=tuple(layer_us),
                      first_us=tuple(first_us), last_us=tuple(last_us), send_us=tuple(tuple(r) for r in send),
                      lat_us=tuple(tuple(r) for r in lat), mem_a_mib=tuple(mem_a), mem_b_mib=tuple(mem_b), cap_mib=cap,
                      tail_a_us=tuple(map(tuple, tail_a)), tail_b_us=tuple(map(tuple, tail_b)),
                      tied_us=tuple(tuple(r) for r in tied))
