"""The GPUs a plan leaves idle, and why."""

from __future__ import annotations

from hgplan.documents import IdleGpus
from hgplan.domain import Fleet, TrainingSettings
from hgplan.plan import Plan
from hgplan.planner.tables import eligible

NO_SOCKETS = ("it has no per-communicator NCCL settings (--target megatron crosses such a boundary with NCCL on "
              "sockets)")
"""Why Megatron-DeepSpeed cannot pipeline node groups one NCCL transport does not join (idle GPUs, nothing fits)."""


def idle_gpus(fleet: Fleet, plan: Plan, train: TrainingSettings, max_pp: int | None = None) -> list[IdleGpus]:
    """The GPUs the plan leaves idle, per node group, with the reason (max_pp: the search's --max-pp)."""
    out = []
    for g in fleet.groups:
        on = [i for i, s in enumerate(plan.stages) if s.node_group == g.key]
        idle = g.num_gpus - sum(plan.stage_gpus(i) for i in on)
        if idle <= 0:
            continue
        cfg = plan.stage_config(on[0]) if on else plan.config
        size = cfg.gpus_per_stage
        if not g.gpu.trains(train):
            why = f"{g.gpu.id} does not support {train.precision_name}"
        elif not eligible(g, cfg, train):
            why = f"a stage of tp*cp*dp = {size} GPUs " + (
                f"is larger than this group's {g.num_gpus}" if size > g.num_gpus
                else f"with tp = {cfg.tp} does not fit the {g.gpus_per_node}-GPU nodes of this group")
        elif idle < size:
            why = f"fewer GPUs than one stage needs ({size}) remain"
        elif not on and all(fleet.path(g, fleet.group(k)) is None for k in set(plan.groups)):
            why = "no path joins this group to the plan's node groups" + fleet.cut_reason + (
                "" if fleet.mixed_transports else ": " + NO_SOCKETS)
        elif max_pp is not None and plan.config.pp >= max_pp:
            why = f"room for {idle // size} more stage(s) of {size} GPUs, but --max-pp {max_pp} allows no more stages"
        else:
            why = (f"room for {idle // size} more stage(s) of {size} GPUs, left empty: more stages would add pipeline "
                   "fill, transfers or memory pressure that outweigh their compute (the solver weighed them)")
        out.append(IdleGpus(node_group=g.key, gpus=idle, reason=why))
    return out
