"""Predict published training measurements (benchmarks/data/calibration.yaml) with the cost model.

Each row becomes a fleet, a model, training settings and one or more candidate plans. Where a paper
does not publish a knob the run certainly tuned (micro-batch size, virtual pipeline stages, the TP/PP
split of a model-parallel size), every candidate is evaluated and the fastest that fits in memory is
taken, i.e. hgplan is asked what the authors asked their cluster. Rows hgplan cannot express are
reported as skipped, with the reason.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from hgplan.costmodel.compute import layer_time
from hgplan.costmodel.comm import intra_node_busbw
from hgplan.costmodel.evaluate import NVLINK_COLLECTIVE_LATENCY_S, evaluate
from hgplan.domain import Attention, Fleet, ModelArch, NodeGroup, Precision, Runtime, TrainingSettings, Transport
from hgplan.inputs import Catalog
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    id: str
    family: str
    fleet: Fleet
    model: ModelArch
    train: TrainingSettings
    plans: tuple[Plan, ...]
    published_s: float
    metric: str
    """'iteration' (seconds per iteration) or 'layer' (fwd+bwd of one layer, seconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    id: str
    family: str
    published_s: float
    predicted_s: float
    plan: Plan | None
    gpu: str = ""
    """The GPU type of the row's fleet."""

    @property
    def error(self) -> float:
        return (self.predicted_s - self.published_s) / self.published_s


def _gpu_id(text: str) -> str:
    if text.startswith("A100-SXM4-40GB"):
        return "A100-SXM4-40GB"
    if text.startswith("A100-SXM4-80GB"):
        return "A100-SXM4-80GB"
    if text.startswith("H100"):
        return "H100-SXM5-80GB"
    raise KeyError(text)


def _fleet(catalog: Catalog, gpu: str, num_gpus: int, transport: Transport, nic_gbps: float, nics: int) -> Fleet:
    per_node = min(8, num_gpus)
    gpu_type = catalog.gpu_type(catalog.gpus[gpu])
    group = NodeGroup(site="dc", name="gpus", num_nodes=math.ceil(num_gpus / per_node), gpu=gpu_type, gpus_per_node=per_node,
                      intra_node_kind=gpu_type.intra_node_kind, intra_node_gbytes_per_s=gpu_type.intra_node_gbytes_per_s,
                      nic_transport=transport, nic_gbps=nic_gbps, nic_count=nics, gpu_hour_usd=None, order=0)
    return Fleet(name="calibration", groups=(group,), links=(), transports=catalog.transports)


def _model(row: dict, mosaic: bool) -> ModelArch:
    m = row["model"]
    return ModelArch(
        name=m["name"], num_layers=m["layers"], hidden_size=m["hidden"], ffn_hidden_size=m["ffn"],
        num_attention_heads=m["heads"], num_query_groups=m["kv_heads"], kv_channels=m["hidden"] // m["heads"],
        vocab_size=m["vocab"], make_vocab_size_divisible_by=128, max_position_embeddings=m["seq_len"],
        position_embedding_type="alibi" if mosaic else "learned_absolute", activation="gelu", normalization="LayerNorm",
        add_bias_linear=not mosaic, untie_embeddings_and_output_weights=False, embedding_layernorm=False,
        hidden_dropout=0.0 if mosaic else 0.1, attention_dropout=0.0 if mosaic else 0.1)


MODEL_DIMS = {
    "MPT-350m": {"layers": 24, "hidden": 1024, "heads": 16, "kv_heads": 16, "ffn": 4096},
}
"""Dimensions of models a calibration row names without giving them. MPT-350m: mosaicml/llm-foundry
scripts/train/yamls/pretrain/mpt-350m.yaml (d_model 1024, n_heads 16, n_layers 24, expansion_ratio 4, MPT's attention
has no grouped KV heads), the model the benchmarking table ran."""


def _divisors(n: int, limit: int) -> list[int]:
    return [k for k in range(1, min(n, limit) + 1) if n % k == 0]


def _plans(*, layers: int, tp: int, pp: int, dp: int, gbs: int, mbs_options: list[int], vpp_options: list[int],
           recompute: Recompute, sp: bool, zero: int, overlap: bool) -> tuple[Plan, ...]:
    out = []
    for mbs in mbs_options:
        if gbs % (mbs * dp):
            continue
        m = gbs // (mbs * dp)
        for v in vpp_options:
            if v > 1 and (pp == 1 or m % pp or (layers // pp) % v):
                continue
            cfg = ParallelConfig(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, vpp=v, recompute=recompute,
                                 sequence_parallel=sp, zero_stage=zero, overlap_grad_reduce=overlap)
            per = layers // pp
            stages = tuple(StageAssignment(node_group="dc/gpus", num_layers=per + (1 if i < layers % pp else 0))
                           for i in range(pp))
            out.append(Plan(config=cfg, stages=stages))
    return tuple(out)


def case_from_row(row: dict, catalog: Catalog) -> Case | str:
    """A Case, or the reason the row cannot be expressed."""
    rid = row["id"]
    hw, par, batch = row["hardware"], row.get("parallelism") or {}, row["batch"]
    precision_text = str(row.get("precision", ""))
    mosaic = rid.startswith("mosaic")
    known = MODEL_DIMS.get(row["model"].get("name", ""), {})
    row = dict(row, model={**row["model"], **{k: v for k, v in known.items() if row["model"].get(k) is None}})
    missing = [k for k in ("layers", "hidden", "heads", "ffn") if row["model"].get(k) is None]
    if missing:
        return f"the row does not give the model's {', '.join(missing)}"
    model = _model(row, mosaic)
    n = hw["num_gpus"]
    gbs, mbs = batch["global_batch_size"], batch.get("micro_batch_size")
    recompute_text = str(row.get("recompute", "")).lower()
    if mosaic:
        # every row of the table ran llm-foundry's Triton FlashAttention (FlashAttention-1 class, it takes MPT's ALiBi
        # bias): scripts/train/benchmarking/submit_benchmarks.py at 061f2c7c sets attn_impl from --attn_impl, default
        # 'triton', and sweep.sh never passes it
        fleet = _fleet(catalog, _gpu_id(hw["gpu"]), n,
                       Transport.INFINIBAND if rid.startswith("mosaic_h100") else Transport.ROCE,
                       400 if rid.startswith("mosaic_h100") else 200, 8)
        train = TrainingSettings(seq_length=model.max_position_embeddings, global_batch_size=gbs,
                                 precision=Precision.FP8 if "fp8" in precision_text else Precision.BF16,
                                 attention=Attention.FLASH1, runtime=Runtime.FSDP)
        rc = Recompute.NONE if recompute_text == "none" else Recompute.FULL
        plans = _plans(layers=model.num_layers, tp=1, pp=1, dp=n, gbs=gbs, mbs_options=[mbs], vpp_options=[1],
                       recompute=rc, sp=False, zero=3, overlap=True)
        return Case(id=rid, family="mosaic-fsdp", fleet=fleet, model=model, train=train, plans=plans,
                    published_s=row["derived"]["iteration_time_s"], metric="iteration")
    fleet = _fleet(catalog, _gpu_id(hw["gpu"]), n, Transport.INFINIBAND, 200, 8)
    derived = row.get("derived") or {}
    runtime = Runtime.DEEPSPEED if derived.get("zero_stage") == 3 else Runtime.MEGATRON
    # SC'21 and Korthikanti et al. ran Megatron-LM of 2021-22, which scattered pipeline sends over the TP ranks
    # (SC'21 section 4.1; removed with megatron-core in March 2023)
    train = TrainingSettings(seq_length=model.max_position_embeddings, global_batch_size=gbs,
                             precision=Precision.FP16, attention=Attention.UNFUSED, runtime=runtime,
                             pipeline_scatter_gather=True)
    L = model.num_layers
    if rid.startswith("korthikanti_table4"):
        rc = Recompute.FULL if "with recompute" in recompute_text else (
            Recompute.SELECTIVE if "selective" in recompute_text else Recompute.NONE)
        cfg = ParallelConfig(tp=par["tp"], pp=1, dp=1, micro_batch_size=mbs, recompute=rc, sequence_parallel=bool(par.get("sp")))
        plan = Plan(config=cfg, stages=(StageAssignment(node_group="dc/gpus", num_layers=1),))
        return Case(id=rid, family="korthikanti-layer", fleet=fleet, model=model, train=train, plans=(plan,),
                    published_s=row["measured"]["layer_combined_ms"] / 1000, metric="layer")
    if rid.startswith("korthikanti"):
        tp, pp = par["tp"], par["pp"]
        dp = n // (tp * pp)
        sel = "selective" in recompute_text
        plans = _plans(layers=L, tp=tp, pp=pp, dp=dp, gbs=gbs, mbs_options=[mbs], vpp_options=_divisors(L // pp, 8),
                       recompute=Recompute.SELECTIVE if sel else Recompute.FULL, sp=bool(par.get("sp")), zero=0,
                       overlap=False)
        return Case(id=rid, family="korthikanti", fleet=fleet, model=model, train=train, plans=plans,
                    published_s=row["measured"]["iteration_time_s"], metric="iteration")
    if derived.get("zero_stage") == 3:
        plans = _plans(layers=L, tp=1, pp=1, dp=n, gbs=gbs, mbs_options=[mbs], vpp_options=[1],
                       recompute=Recompute.FULL, sp=False, zero=3, overlap=True)
        return Case(id=rid, family="sc21-zero3", fleet=fleet, model=model, train=train, plans=plans,
                    published_s=derived["iteration_time_s"], metric="iteration")
    if "model_parallel_size" in par and par.get("tp") is None:
        mp = par["model_parallel_size"]
        splits = [(tp, mp // tp) for tp in (8, 4, 2) if mp % tp == 0 and L % (mp // tp) == 0]
    else:
        splits = [(par["tp"], par["pp"])]
    plans: tuple[Plan, ...] = ()
    for tp, pp in splits:
        dp = n // (tp * pp)
        mbs_options = [mbs] if mbs else [b for b in (1, 2, 4, 8) if gbs % (b * dp) == 0]
        plans += _plans(layers=L, tp=tp, pp=pp, dp=dp, gbs=gbs, mbs_options=mbs_options,
                        vpp_options=_divisors(L // pp, 8) if pp > 1 else [1], recompute=Recompute.FULL, sp=False,
                        zero=0, overlap=False)
    family = "sc21-ptdp" if "table2" in rid else "sc21-weak-scaling"
    return Case(id=rid, family=family, fleet=fleet, model=model, train=train, plans=plans,
                published_s=derived["iteration_time_s"], metric="iteration")


def predict(case: Case) -> Result:
    if case.metric == "layer":
        plan = case.plans[0]
        g = case.fleet.groups[0]
        lt = layer_time(case.model, g.gpu, plan.config, case.train,
                        tp_busbw_gbytes_per_s=intra_node_busbw(g, span=plan.config.tp)[0],
                        tp_latency_s=NVLINK_COLLECTIVE_LATENCY_S)
        return Result(id=case.id, family=case.family, published_s=case.published_s, predicted_s=lt.fwd_s + lt.bwd_s,
                      plan=plan, gpu=case.fleet.groups[0].gpu.id)
    best = None
    for plan in case.plans:
        pred = evaluate(plan, case.fleet, case.model, case.train)
        key = (not pred.fits, pred.iteration_time_s)
        if best is None or key < best[0]:
            best = (key, pred, plan)
    assert best is not None, case.id
    return Result(id=case.id, family=case.family, published_s=case.published_s, predicted_s=best[1].iteration_time_s,
                  gpu=case.fleet.groups[0].gpu.id,
                  plan=best[2])


def run(rows: list[dict], catalog: Catalog) -> tuple[list[Result], list[tuple[str, str]]]:
    results, skipped = [], []
    for row in rows:
        case = case_from_row(row, catalog)
        if isinstance(case, str):
            skipped.append((row["id"], case))
            continue
        results.append(predict(case))
    return results, skipped


def by_gpu(results: list[Result]) -> dict[str, dict]:
    """Rows, median and worst |error| per GPU type: the validation record `explain` cites for compute on it."""
    out: dict[str, list[float]] = {}
    for r in results:
        out.setdefault(r.gpu, []).append(abs(r.error))
    return {gpu: {"rows": len(errs), "median_abs_error": round(statistics.median(errs), 4),
                  "worst_abs_error": round(max(errs), 4)} for gpu, errs in sorted(out.items())}


def summary(results: list[Result]) -> dict:
    errs = [abs(r.error) for r in results]
    worst = max(results, key=lambda r: abs(r.error))
    return {"rows": len(results), "median_abs_error": statistics.median(errs), "worst_abs_error": abs(worst.error),
            "worst_row": worst.id, "signed_median_error": statistics.median(r.error for r in results)}


ISSUE_10_TARGETS = {"median_abs_error": 0.05, "worst_abs_error": 0.15, "signed_median_error": 0.03}
"""Issue 10's targets: median |error| <= 5%, worst <= 15%, signed median within +-3% (the benchmark reports them;
its exit status keeps issue 3's looser 10% / 25%, which tests/test_fidelity.py asserts)."""


def target_lines(summ: dict) -> list[str]:
    """One line per issue-10 target: the figure, the bound and whether it is met."""
    out = []
    for key, bound in ISSUE_10_TARGETS.items():
        value = summ[key]
        ok = abs(value) <= bound
        out.append(f"target {key:20} {value:+7.1%}  bound +-{bound:.0%}  {'met' if ok else 'MISSED'}")
    return out
