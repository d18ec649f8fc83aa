"""JSON documents for predictions and plans (pure: dicts in, dicts out)."""

from __future__ import annotations

from typing import Any

from hgplan import __version__
from hgplan.costmodel.evaluate import Prediction
from hgplan.domain import ModelArch, TrainingSettings
from hgplan.plan import Plan

SCHEMA_VERSION = "1"


def _r(x: float, nd: int = 6) -> float:
    return float(f"{x:.{nd}g}")


def training_dict(train: TrainingSettings) -> dict[str, Any]:
    return {"seq_length": train.seq_length, "global_batch_size": train.global_batch_size,
            "precision": train.precision.value, "optimizer": train.optimizer, "attention": train.attention,
            "runtime": train.runtime}


def prediction_dict(pred: Prediction, *, simulated: Prediction | None = None) -> dict[str, Any]:
    out = {
        "iteration_time_s": _r(pred.iteration_time_s), "tokens_per_s": _r(pred.tokens_per_s),
        "model_tflops_per_gpu": _r(pred.model_tflops_per_gpu), "hardware_tflops_per_gpu": _r(pred.hardware_tflops_per_gpu),
        "mfu": _r(pred.mfu, 4), "hfu": _r(pred.hfu, 4), "bubble_fraction": _r(pred.bubble_fraction, 4),
        "pipeline_s": _r(pred.pipeline_s), "num_microbatches": pred.num_microbatches,
        "bottleneck_stage": pred.bottleneck_stage, "fits": pred.fits,
        "overflow_stages": [s.index for s in pred.stages if not s.fits], "method": pred.method,
    }
    if simulated is not None:
        out["simulator_iteration_time_s"] = _r(simulated.iteration_time_s)
    return out


def stages_list(pred: Prediction) -> list[dict[str, Any]]:
    return [{
        "index": s.index, "node_group": s.node_group, "site": s.site, "gpu": s.gpu, "gpus": s.gpus, "layers": s.layers,
        "fwd_s": _r(s.fwd_s), "bwd_s": _r(s.bwd_s), "compute_s": _r(s.compute_s), "p2p_s": _r(s.p2p_s),
        "dp_sync_s": _r(s.dp_sync_s), "optimizer_s": _r(s.optimizer_s), "memory_gib": _r(s.memory_gib, 4),
        "memory_capacity_gib": s.memory_capacity_gib, "headroom_gib": _r(s.headroom_gib, 4), "fits": s.fits,
        "memory": {"weights_gib": _r(s.memory.weights_gib, 4), "gradients_gib": _r(s.memory.gradients_gib, 4),
                   "optimizer_gib": _r(s.memory.optimizer_gib, 4), "activations_gib": _r(s.memory.activations_gib, 4),
                   "overhead_gib": _r(s.memory.overhead_gib, 4),
                   "inflight_microbatches": _r(s.memory.inflight_microbatches, 4)},
    } for s in pred.stages]


def explain_doc(plan: Plan, pred: Prediction, *, model: ModelArch, train: TrainingSettings, cluster: str,
                model_ref: str, simulated: Prediction | None = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "hgplan_version": __version__,
        "inputs": {"cluster": cluster, "model": model_ref, "model_name": model.name, "training": training_dict(train)},
        "plan": plan.to_dict(),
        "prediction": prediction_dict(pred, simulated=simulated),
        "stages": stages_list(pred),
        "boundaries": [{k: (_r(v) if isinstance(v, float) else v) for k, v in b.items()} for b in pred.boundaries],
    }
