"""The outer search space: every (TP, CP, DP, micro-batch, recompute, PP, VPP) of the plan family, with its bound.

Legend: L layers, p pipeline stages, v virtual stages per rank, m micro-batches per iteration (docs/planner.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Iterator

from hgplan.costmodel.memory import FRAMEWORK_OVERHEAD_GIB, GIB, state_bytes_per_param
from hgplan.domain import ModelArch, NodeGroup, Target, TrainingSettings
from hgplan.plan import ParallelConfig, Recompute
from hgplan.planner.bounds import BoundContext, candidate_bound_s, make_context
from hgplan.planner.costs import US, CostSource
from hgplan.planner.options import DEFAULT_MAX_VPP, MAX_MICRO_BATCH, SearchOptions
from hgplan.planner.progress import Progress, ProgressFn, Throttle
from hgplan.planner.tables import eligible

RECOMPUTE_ORDER = tuple(Recompute)
"""Recompute choices in the order candidate keys rank them (less recomputation first)."""
CP_MIN_SEQ_LENGTH = 8192
"""Context parallelism is tried only from this sequence length on (NeMo's Llama 3 70B pretraining recipe runs CP 2 at
8,192 tokens: nemo/collections/llm/recipes/llama3_70b.py; 16,384 until 2026-11-29): below it the ring's transfers
cost more than the attention they split."""
CP_MIN_TOKENS = 2048
"""Each CP rank keeps at least this many tokens of a sequence (cp 8 at 16k tokens, 16 at 32k, 64 at 128k): fewer, and
every step of the ring sends more than its attention block computes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One outer choice of degrees with its lower bound and the context its refinements need."""

    cfg: ParallelConfig
    lower_bound_us: float
    key: tuple
    """(bound in whole us, tp, cp, dp, mbs, recompute, pp, vpp): the deterministic order of the search."""
    ctx: BoundContext


def cand_key(cfg: ParallelConfig) -> tuple:
    """The configuration part of a candidate's key (ties between plans break on it)."""
    return (cfg.tp, cfg.cp, cfg.dp, cfg.micro_batch_size, RECOMPUTE_ORDER.index(cfg.recompute), cfg.pp, cfg.vpp)


def micro_batch_sizes(per_replica: int) -> tuple[int, ...]:
    """Every micro-batch size up to MAX_MICRO_BATCH that divides a replica's share of the global batch, as Megatron-LM
    takes any divisor. Until 2026-11-29 only powers of two: with global batch 1,536 (3 x 512) on 64 H100s, gpt-7.5b,
    the search returned micro-batch 2 at 4.173 s, where 3 fits and runs 4.090 s. A power-of-two batch per replica has
    only powers of two for divisors, so such searches list what they listed."""
    return tuple(d for d in range(1, min(per_replica, MAX_MICRO_BATCH) + 1) if per_replica % d == 0)


def _tp_options(model: ModelArch, groups: list[NodeGroup], opts: SearchOptions) -> list[int]:
    max_gpn = max(g.gpus_per_node for g in groups)
    cands = opts.tp_options or tuple(2 ** i for i in range(0, 7))
    return [t for t in cands if t <= max_gpn and model.tp_divides(t) and any(g.gpus_per_node % t == 0 for g in groups)]


def _cp_options(train: TrainingSettings, tp: int, groups: list[NodeGroup], target: Target) -> list[int]:
    """1; from CP_MIN_SEQ_LENGTH tokens on also the powers of two that keep CP_MIN_TOKENS per rank, divide the
    sequence into 2 cp chunks (Megatron's load-balanced causal split) and fit some group with tp: the ring runs
    across nodes where tp x cp exceeds one (priced on the NICs, costmodel/evaluate.py layer_cost), as Llama 3's 128k
    training ran CP 16 beside TP 8 (Dubey et al. 2024, Table 4)."""
    out = [1]
    # Megatron-LM only: FlagScale's heterogeneous mode refuses CP, Megatron-DeepSpeed has Ulysses instead (until
    # 2026-11-29 --target deepspeed listed CP plans that its export then refused)
    if train.seq_length >= CP_MIN_SEQ_LENGTH and target == Target.MEGATRON:
        most = max(g.num_gpus for g in groups) // tp
        c = 2
        while c <= most and train.seq_length // c >= CP_MIN_TOKENS:
            if train.seq_length % (2 * c) == 0:
                out.append(c)
            c *= 2
    return out


def _stage_sizes(tp: int, cp: int, groups: list[NodeGroup], largest: int) -> list[int]:
    """Stage sizes G = tp*cp*dp, at most `largest`, that tile the nodes of at least one group."""
    base = tp * cp
    sizes = set()
    for g in groups:
        for n in range(1, g.gpus_per_node + 1):
            if g.gpus_per_node % n == 0 and n % base == 0:
                sizes.add(n)
        for mult in range(1, min(g.num_nodes, largest // g.gpus_per_node) + 1):
            size = mult * g.gpus_per_node
            if size % base == 0:
                sizes.add(size)
    return sorted(s for s in sizes if s <= largest)


def base_configs(model: ModelArch, train: TrainingSettings, opts: SearchOptions,
                 groups: list[NodeGroup]) -> Iterator[ParallelConfig]:
    """Every (TP, CP, stage size, micro-batch, recompute) of the plan family, as a one-stage config to extend.

    Sequence parallelism whenever TP > 1 and the distributed optimizer (ZeRO-1) always (docs/planner.md).
    """
    for tp in _tp_options(model, groups, opts):
        for cp in _cp_options(train, tp, groups, opts.target):
            if tp > 1 and (train.seq_length // cp) % tp:
                continue  # sequence parallelism splits each CP rank's tokens over tp (validate.py, sp_seq)
            # dp divides the global batch: larger stages than tp x cp x batch cannot be data-parallel replicas
            for size in _stage_sizes(tp, cp, groups, tp * cp * train.global_batch_size):
                dp = size // (tp * cp)
                if train.global_batch_size % dp:
                    continue
                for mbs in opts.mbs_options or micro_batch_sizes(train.global_batch_size // dp):
                    if train.global_batch_size % (mbs * dp) == 0:
                        for rc in opts.recompute_options:
                            yield ParallelConfig(tp=tp, pp=1, dp=dp, cp=cp, micro_batch_size=mbs, recompute=rc,
                                                 sequence_parallel=tp > 1, zero_stage=1)


def _slot_capacities(base: ParallelConfig, hosts: list[NodeGroup], most: int) -> list[float]:
    """Usable bytes of the `most` largest stage slots, largest first; with the model state of one layer (weights,
    gradients and optimizer state sharded over the stage's DP) they bound how many stages the state needs. Only the
    largest `most` are listed: a pipeline never has more stages than layers, and a fleet may hold millions of
    slots."""
    size = base.gpus_per_stage
    caps: list[float] = []
    for cap, slots in sorted((((g.gpu.hbm_gib - FRAMEWORK_OVERHEAD_GIB) * GIB, g.num_gpus // size) for g in hosts),
                             key=lambda cs: -cs[0]):
        caps += [cap] * min(slots, most - len(caps))
        if len(caps) >= most:
            break
    return caps


def searched_vpps(opts: SearchOptions) -> tuple[int, ...]:
    """The interleaving depths the search lists (those dividing the layers among them)."""
    return opts.vpp_options or (tuple(range(1, DEFAULT_MAX_VPP + 1)) if opts.target == Target.MEGATRON else (1,))


def enumerate_candidates(costs: CostSource, opts: SearchOptions, groups: list[NodeGroup],
                         stop_at_s: float = math.inf, *,
                         progress: ProgressFn | None = None) -> tuple[list[Candidate], bool]:
    """Every outer candidate of the plan family with its lower bound, sorted by key (bound first), and whether the
    list is complete: listing stops once time.perf_counter() passes stop_at_s (a fleet of millions of GPUs has tens
    of thousands of candidates, each bounded here)."""
    model, train = costs.model, costs.train
    L = model.num_layers
    vpps = searched_vpps(opts)
    max_pp = min(L, opts.max_pp or L)
    out: list[Candidate] = []
    listed_all = True
    bases = list(base_configs(model, train, opts, groups))
    report = Throttle(progress)
    for n, base in enumerate(bases):
        report(lambda: Progress("candidates", n, len(bases), "base configurations bounded"))
        if time.perf_counter() > stop_at_s:
            listed_all = False
            break
        hosts = [g for g in groups if eligible(g, base, train)]
        if not hosts:
            continue
        m = base.num_microbatches(train.global_batch_size)
        w, gr, o = state_bytes_per_param(train.precision, 1, base.dp * base.cp)
        layer_state = model.layer_params() / base.tp * (w + gr + o)
        caps = _slot_capacities(base, hosts, max_pp)
        contexts: dict[int, BoundContext] = {}
        for pp in range(1, min(max_pp, len(caps)) + 1):
            if sum(caps[:pp]) < layer_state * L:
                continue
            for v in vpps:
                if v > 1 and (pp == 1 or m % pp or L < pp * v or L % v):
                    continue
                cfg = replace(base, pp=pp, vpp=v)
                if v not in contexts:  # a context per interleaving: only their tails differ
                    contexts[v] = make_context(costs, replace(base, vpp=v), hosts,
                                               like=next(iter(contexts.values()), None))
                ctx = contexts[v]
                lb = candidate_bound_s(ctx, L=L, p=pp, v=v, m=m)
                if not math.isfinite(lb):
                    continue  # no group holds pp stages and no link joins two groups that could
                out.append(Candidate(cfg=cfg, lower_bound_us=lb * US, ctx=ctx,
                                     key=(round(lb * US), *cand_key(cfg))))
    report(lambda: Progress("candidates", len(bases) if listed_all else n, len(bases), "base configurations bounded"),
           force=True)
    out.sort(key=lambda c: c.key)
    return out, listed_all
