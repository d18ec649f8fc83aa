"""Typed records of predictions and plans (pure): domain objects in, documents.py models out."""

from __future__ import annotations

from hgplan.costmodel.evaluate import Prediction
from hgplan.documents import MemoryRecord, PlanRecord, PredictionRecord, StageRecord, StageResult, TrainingRecord
from hgplan.domain import Precision, TrainingSettings
from hgplan.plan import Plan

SIGNIFICANT_DIGITS = 6
"""Digits kept of every float in a document: more than any prediction's accuracy, few enough for stable diffs."""


def rounded(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """x to `digits` significant digits (as a float)."""
    return float(f"{x:.{digits}g}")


def speedup_text(x: float) -> str:
    """'1.36x'; below 1.1x with three decimals, so that a 0.5% win does not read '1.00x faster'."""
    return f"{x:.3f}x" if x < 1.1 else f"{x:.2f}x"


def training_record(train: TrainingSettings) -> TrainingRecord:
    """The training settings as recorded in every document."""
    return TrainingRecord(seq_length=train.seq_length, global_batch_size=train.global_batch_size,
                          precision=train.precision.value, optimizer=train.optimizer,
                          attention=train.attention.value, runtime=train.runtime.value,
                          transformer_impl=train.transformer_impl.value,
                          **({"fp8_recipe": train.fp8_recipe.value} if train.precision is Precision.FP8 else {}))


def plan_record(plan: Plan) -> PlanRecord:
    """A plan's degrees and stages as a document part."""
    c = plan.config
    return PlanRecord(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, micro_batch_size=c.micro_batch_size, vpp=c.vpp,
                      recompute=c.recompute.value, sequence_parallel=c.sequence_parallel, zero_stage=c.zero_stage,
                      distributed_optimizer=c.distributed_optimizer, overlap_grad_reduce=c.overlap_grad_reduce,
                      stages=[_stage_record(plan, i) for i in range(len(plan.stages))])


def _stage_record(plan: Plan, i: int) -> StageRecord:
    """One stage; an asymmetric plan writes every stage's tp, dp and recomputation."""
    st = plan.stages[i]
    if not plan.asymmetric:
        return StageRecord(node_group=st.node_group, layers=st.num_layers)
    cfg = plan.stage_config(i)
    return StageRecord(node_group=st.node_group, layers=st.num_layers, tp=cfg.tp, dp=cfg.dp,
                       recompute=cfg.recompute.value)


def prediction_record(pred: Prediction) -> PredictionRecord:
    """The headline numbers of a prediction."""
    r = rounded
    return PredictionRecord(
        iteration_time_s=r(pred.iteration_time_s), tokens_per_s=r(pred.tokens_per_s),
        model_tflops_per_gpu=r(pred.model_tflops_per_gpu), hardware_tflops_per_gpu=r(pred.hardware_tflops_per_gpu),
        mfu=r(pred.mfu, 4), hfu=r(pred.hfu, 4), bubble_fraction=r(pred.bubble_fraction, 4),
        pipeline_s=r(pred.pipeline_s), num_microbatches=pred.num_microbatches,
        bottleneck_stage=pred.bottleneck_stage, fits=pred.fits,
        overflow_stages=[s.index for s in pred.stages if not s.fits], method=pred.method)


def stage_results(pred: Prediction) -> list[StageResult]:
    """Per-stage time and memory of a prediction."""
    r = rounded
    return [StageResult(
        index=s.index, node_group=s.node_group, site=s.site, gpu=s.gpu, gpus=s.gpus, layers=s.layers,
        fwd_s=r(s.fwd_s), bwd_s=r(s.bwd_s), compute_s=r(s.compute_s), p2p_s=r(s.p2p_s), dp_sync_s=r(s.dp_sync_s),
        optimizer_s=r(s.optimizer_s), memory_gib=r(s.memory_gib, 4), memory_capacity_gib=s.memory_capacity_gib,
        headroom_gib=r(s.headroom_gib, 4), fits=s.fits,
        memory=MemoryRecord(weights_gib=r(s.memory.weights_gib, 4), gradients_gib=r(s.memory.gradients_gib, 4),
                            optimizer_gib=r(s.memory.optimizer_gib, 4), activations_gib=r(s.memory.activations_gib, 4),
                            overhead_gib=r(s.memory.overhead_gib, 4),
                            inflight_microbatches=r(s.memory.inflight_microbatches, 4)),
    ) for s in pred.stages]
