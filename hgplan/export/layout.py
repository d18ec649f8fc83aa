"""Rank and host layout shared by the exporters.

Megatron's default order tp-cp-ep-dp-pp puts pipeline stage p on global ranks [p G, (p + 1) G) with
G = tp x cp x dp (export-targets.md 1.5). Ranks fill nodes in node-rank order, so ordering the hosts by
stage places every stage on its planned node group. Within a stage, TP groups are runs of tp consecutive
ranks, which stay inside a node because tp divides the GPUs per node.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.costmodel.reshard import cross_vendor_message
from hgplan.domain import Fleet, NodeGroup
from hgplan.errors import PlanningError
from hgplan.plan import Plan


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSlot:
    """One node of the launch: its host, node rank, GPUs used and first global rank."""

    node_rank: int
    host: str
    group: str
    local_gpus: int
    """Processes started on this node (torchrun --nproc-per-node)."""
    first_rank: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RankInfo:
    """One global rank: where it runs and its stage and TP/CP/DP coordinates."""

    rank: int
    host: str
    node_rank: int
    local_rank: int
    stage: int
    tp: int
    cp: int
    dp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Nodes in node-rank order and every rank, as Megatron orders them (tp-cp-dp-pp)."""

    nodes: tuple[NodeSlot, ...]
    ranks: tuple[RankInfo, ...]

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)


def build_layout(plan: Plan, fleet: Fleet) -> Layout:
    """Nodes and ranks of the plan: each stage owns the next tp x cp x dp ranks (its own degrees in an asymmetric
    plan), on its node group's hosts."""
    cursor: dict[str, int] = {}  # next free GPU (flat index) per group
    node_of_rank: list[tuple[NodeGroup, int, int]] = []  # (group, node index, local gpu)
    stage_of_rank: list[int] = []
    first_of: list[int] = []
    for s, st in enumerate(plan.stages):
        first_of.append(len(stage_of_rank))
        g = fleet.group(st.node_group)
        start = cursor.get(g.key, 0)
        size = plan.stage_gpus(s)
        stage_of_rank += [s] * size
        for i in range(size):
            flat = start + i
            node_of_rank.append((g, flat // g.gpus_per_node, flat % g.gpus_per_node))
        cursor[g.key] = start + size
    nodes: list[NodeSlot] = []
    ranks: list[RankInfo] = []
    seen: dict[tuple[str, int], int] = {}
    counts: dict[tuple[str, int], int] = {}
    for g, n, _ in node_of_rank:
        counts[(g.key, n)] = counts.get((g.key, n), 0) + 1
    for rank, (g, n, local) in enumerate(node_of_rank):
        key = (g.key, n)
        if key not in seen:
            seen[key] = len(nodes)
            nodes.append(NodeSlot(node_rank=len(nodes), host=g.host(n), group=g.key, local_gpus=counts[key], first_rank=rank))
        node = nodes[seen[key]]
        if rank - node.first_rank >= node.local_gpus:
            raise PlanningError(f"node {node.host} would hold non-consecutive ranks: stages on {g.key} are not contiguous "
                                "in the pipeline; reorder --stage-groups so each node group's stages are adjacent")
        stage = stage_of_rank[rank]
        cfg = plan.stage_config(stage)
        t, c, local = cfg.tp, cfg.cp, rank - first_of[stage]
        ranks.append(RankInfo(rank=rank, host=node.host, node_rank=node.node_rank, local_rank=rank - node.first_rank,
                              stage=stage, tp=local % t, cp=(local // t) % c, dp=(local // (t * c)) % cfg.dp))
    return Layout(nodes=tuple(nodes), ranks=tuple(ranks))


def vendor_warnings(plan: Plan, fleet: Fleet) -> list[str]:
    """A pipeline over GPUs of different vendors needs a collective library both speak; stock builds have none."""
    message = cross_vendor_message([fleet.group(s.node_group) for s in plan.stages], flagscale=False)
    return [message] if message else []
