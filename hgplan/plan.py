"""Plan objects: the degrees, per-stage placement and layers that the cost model evaluates."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Recompute(StrEnum):
    """Activation recomputation (Megatron's --recompute-granularity)."""

    NONE = "none"
    """Store every activation."""
    SELECTIVE = "selective"
    """Recompute the attention core in backward (Korthikanti et al.); Megatron --recompute-granularity selective."""
    FULL = "full"
    """Store only each layer's input and recompute the whole layer in backward."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """One TP, CP, PP and DP for all stages: the plan family stock Megatron-LM and DeepSpeed run."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    micro_batch_size: int = 1
    vpp: int = 1
    """Virtual pipeline chunks per stage (interleaved 1F1B when > 1)."""
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    zero_stage: int = 0
    """0: replicated optimizer; 1: sharded optimizer state (Megatron distributed optimizer); 2: + gradients; 3: + parameters."""
    overlap_grad_reduce: bool = True
    """Overlap the data-parallel gradient reduction with the last micro-batch's backward (and the parameter gather
    with the next forward)."""
    allow_cross_node_tp: bool = False

    @property
    def gpus_per_stage(self) -> int:
        """tp x cp x dp."""
        return self.tp * self.cp * self.dp

    @property
    def world_size(self) -> int:
        """GPUs of the whole plan."""
        return self.gpus_per_stage * self.pp

    @property
    def distributed_optimizer(self) -> bool:
        """Whether optimizer state is sharded (ZeRO >= 1)."""
        return self.zero_stage >= 1

    def num_microbatches(self, global_batch_size: int) -> int:
        """Micro-batches per iteration per data-parallel replica."""
        return global_batch_size // (self.micro_batch_size * self.dp)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageAssignment:
    """One pipeline stage: the node group hosting all its GPUs and its layers."""

    node_group: str
    """Key 'site/group' of the node group that hosts every GPU of this stage."""
    num_layers: int
    tp: int | None = None
    """This stage's own tensor-parallel degree (None: the plan's). Only asymmetric plans (FlagScale's process
    meshes) set tp, dp or recompute per stage."""
    dp: int | None = None
    """This stage's own data-parallel degree (None: the plan's)."""
    recompute: Recompute | None = None
    """This stage's own recomputation (None: the plan's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Degrees and stages: what the cost model evaluates and the exporters launch."""

    config: ParallelConfig
    stages: tuple[StageAssignment, ...]

    @property
    def layers(self) -> tuple[int, ...]:
        """Layers of each stage."""
        return tuple(s.num_layers for s in self.stages)

    @property
    def groups(self) -> tuple[str, ...]:
        """Node group of each stage."""
        return tuple(s.node_group for s in self.stages)

    def stage_config(self, i: int) -> ParallelConfig:
        """The degrees stage i runs with. In an asymmetric plan a stage with dp_i data-parallel ranks trains
        micro-batches of (dp x micro_batch_size) / dp_i samples, so every stage sees the same samples per micro-batch
        step and the same number of micro-batches (FlagScale, flagscale/train/arguments.py); sequence parallelism
        is on wherever tp > 1."""
        st, c = self.stages[i], self.config
        if st.tp is None and st.dp is None and st.recompute is None:
            return c
        tp, dp = st.tp or c.tp, st.dp or c.dp
        return replace(c, tp=tp, dp=dp, micro_batch_size=c.micro_batch_size * c.dp // dp,
                       recompute=st.recompute or c.recompute, sequence_parallel=tp > 1)

    @property
    def asymmetric(self) -> bool:
        """Whether any stage has degrees or recomputation of its own (a FlagScale mesh plan)."""
        c = self.config
        return any((s.tp or c.tp, s.dp or c.dp, s.recompute or c.recompute) != (c.tp, c.dp, c.recompute)
                   for s in self.stages)

    def stage_gpus(self, i: int) -> int:
        """GPUs of stage i: its tp x cp x dp."""
        return self.stage_config(i).gpus_per_stage

    @property
    def world_size(self) -> int:
        """GPUs of the whole plan (every stage's)."""
        return sum(self.stage_gpus(i) for i in range(len(self.stages)))

    def meshes(self) -> list[tuple[int, int]]:
        """FlagScale's process meshes: (first stage, number of stages) of each maximal run of consecutive stages
        on one node group with one tp and dp."""
        out: list[tuple[int, int]] = []
        key = None
        for i, st in enumerate(self.stages):
            cfg = self.stage_config(i)
            k = (st.node_group, cfg.tp, cfg.dp)
            if k == key:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((i, 1))
                key = k
        return out

    @staticmethod
    def from_record(r) -> "Plan":
        """The plan of a validated documents.PlanRecord."""
        cfg = ParallelConfig(tp=r.tp, pp=r.pp, dp=r.dp, cp=r.cp, micro_batch_size=r.micro_batch_size, vpp=r.vpp,
                             recompute=Recompute(r.recompute), sequence_parallel=r.sequence_parallel,
                             zero_stage=r.zero_stage, overlap_grad_reduce=r.overlap_grad_reduce)
        return Plan(config=cfg, stages=tuple(
            StageAssignment(node_group=s.node_group, num_layers=s.layers, tp=s.tp, dp=s.dp,
                            recompute=None if s.recompute is None else Recompute(s.recompute)) for s in r.stages))
