"""What each term of a prediction rests on: measured on the user's fleet, validated against published runs, or
physics (datasheets and assumed efficiencies) only. `explain` prints it per GPU type and per link (pure)."""

from __future__ import annotations

from hgplan.costmodel.comm import members_per_node
from hgplan.costmodel.compute import attention_kernel
from hgplan.documents import BasisEntry
from hgplan.domain import Fleet, PathKind, Precision, TrainingSettings, Transport
from hgplan.plan import Plan

CALIBRATED = "calibrated"
"""Fitted by `hgplan calibrate` to runs on the user's fleet (--profile)."""
VALIDATED = "validated"
"""Checked against published or shared measurements (benchmarks/fidelity.py, benchmarks/h100_measured.py), or steps
measured on a lent GPU of the type (profiles/validation.yaml, megatron_core_steps)."""
PHYSICS = "physics"
"""Datasheet figures and assumed efficiencies only: no measurement of this GPU, link or kernel backs it."""
VALIDATED_ATTENTION = {("hopper", "fused"), ("hopper", "flash2"), ("hopper", "unfused"), ("ampere", "unfused"),
                       ("ampere", "flash1"), ("hopper", "flash1")}
"""(architecture, attention kernel) pairs measured: the H100 sheet (fused, flash2, unfused) and the calibration
set's runs (llm-foundry's Triton FlashAttention on A100 and H100, Megatron's unfused path on A100). No published
run in the set used FlashAttention-2 or cuDNN attention on an A100."""
RDMA_VALIDATED = {Transport.INFINIBAND, Transport.ROCE}
"""Multi-node calibration runs (up to 3072 A100 GPUs over InfiniBand, llm-foundry on RoCE) exercise these."""


def _residual(validation: dict, gpu_id: str) -> str:
    """The residuals that back this GPU type's compute: published runs (the calibration set) and single-GPU
    megatron-core steps measured on a lent card ("" where neither exists)."""
    out = ""
    rec = validation.get("calibration_set", {}).get(gpu_id)
    if rec:
        out += (f"; {rec['rows']} published runs on this GPU: median error {rec['median_abs_error']:.1%}, worst "
                f"{rec['worst_abs_error']:.1%}")
    steps = validation.get("megatron_core_steps", {}).get(gpu_id)
    if steps:
        out += (f"; {steps['steps']} megatron-core steps measured on one such GPU: median error "
                f"{steps['median_abs_error']:.1%}, worst {steps['worst_abs_error']:.1%}")
    return out


def _gpu_entries(g, train: TrainingSettings, validation: dict, tp: int) -> list[BasisEntry]:
    """Compute, attention and tensor-parallel terms of one GPU type."""
    residual = _residual(validation, g.id)
    name = "fp8_gemm_efficiency" if train.precision is Precision.FP8 else "gemm_efficiency"
    gemm = CALIBRATED if name in g.calibrated else VALIDATED if residual else PHYSICS
    fp8 = ""
    if train.precision is Precision.FP8:
        fp8 = (f"; fp8 GEMMs at {g.arch}'s measured fp8 share" if g.eff.fp8_gemm_efficiency is not None else
               f"; fp8 GEMMs assumed at bf16's share of the fp8 peak (not measured on {g.arch})")
    out = [BasisEntry(term=f"compute on {g.id}", basis=gemm,
                      detail=(f"your profile's {name}" if gemm == CALIBRATED else
                              f"datasheet peak x {g.arch} efficiency{residual}{fp8}" if residual else
                              f"datasheet peak x {g.arch} efficiency{fp8}; no published run on this GPU"))]
    kernel = attention_kernel(train, g)
    calibrated_attention = {"attention_efficiency", "fused_attention_efficiency",
                            "flash1_attention_efficiency"} & set(g.calibrated)
    att = CALIBRATED if calibrated_attention else (VALIDATED if (g.arch, kernel.value) in VALIDATED_ATTENTION
                                                   else PHYSICS)
    out.append(BasisEntry(term=f"attention on {g.id} ({kernel.value})", basis=att,
                          detail="h100-measured or calibration-set kernels" if att == VALIDATED else
                          "your profile" if att == CALIBRATED else "assumed kernel efficiency"))
    if tp > 1:
        nvlink = g.intra_node_kind in ("nvlink", "nvswitch")
        tpb = CALIBRATED if "collective_efficiency" in g.calibrated else (
            VALIDATED if nvlink and g.arch in ("ampere", "hopper") else PHYSICS)
        out.append(BasisEntry(term=f"tensor-parallel all-reduce on {g.id} ({g.intra_node_kind})", basis=tpb,
                              detail="nccl-tests bus bandwidth on NVLink nodes" if tpb == VALIDATED else
                              "your profile" if tpb == CALIBRATED else
                              "link bandwidth x assumed efficiency (no PCIe measurement)"))
    return out


def basis(plan: Plan, fleet: Fleet, train: TrainingSettings, validation: dict) -> list[BasisEntry]:
    """One entry per GPU type of the plan (compute, attention, TP) and per kind of link its traffic crosses."""
    out: list[BasisEntry] = []
    seen = []
    for st in plan.stages:
        g = fleet.group(st.node_group).gpu
        if g.id not in seen:
            seen.append(g.id)
            out += _gpu_entries(g, train, validation, plan.config.tp)
    links: dict[str, tuple[Transport, bool]] = {}  # term -> (transport, whether a published run exercised it)
    for a, b in zip(plan.stages, plan.stages[1:]):
        path = fleet.path(fleet.group(a.node_group), fleet.group(b.node_group))
        if path is not None and path.kind is not PathKind.SAME_GROUP:
            links[f"pipeline over {path.kind.value} ({path.transport.value})"] = (
                path.transport, path.kind is not PathKind.SITE_LINK)
    for i, st in enumerate(plan.stages):
        t = fleet.group(st.node_group).nic_transport
        if plan.stage_gpus(i) > fleet.group(st.node_group).gpus_per_node:
            links[f"data-parallel traffic over {t.value} NICs"] = (t, True)
    c = plan.config
    rings = dict.fromkeys(fleet.group(st.node_group).nic_transport for st in plan.stages  # CP rings across nodes
                          if c.cp > members_per_node(fleet.group(st.node_group), c.tp))
    for transport in rings:
        cal = fleet.transports[transport].calibrated
        out.append(BasisEntry(term=f"context-parallel ring over {transport.value} NICs", basis=CALIBRATED if cal
                              else PHYSICS, detail="your profile's transport efficiency" if cal else
                              "each hop on the NICs local to its GPU x assumed efficiency; no published run with a "
                              "CP ring across nodes"))
    for term, (transport, inside_a_site) in links.items():
        b = CALIBRATED if fleet.transports[transport].calibrated else (
            VALIDATED if transport in RDMA_VALIDATED and inside_a_site else PHYSICS)
        out.append(BasisEntry(term=term, basis=b, detail={
            CALIBRATED: "your profile's transport efficiency",
            VALIDATED: "multi-node published runs on RDMA fabrics",
            PHYSICS: "line rate x assumed efficiency and latency; no published heterogeneous or WAN run"}[b]))
    return out
