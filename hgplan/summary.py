"""Summaries of fleets and catalog entries for `hgplan validate` and `hgplan profiles list` (pure)."""

from __future__ import annotations

from typing import Any

from hgplan.domain import Fleet, GpuType, ModelArch, NodeGroup, Precision
from hgplan.planner.classes import node_signature


def fleet_summary(fleet: Fleet, warnings: list[str], model: ModelArch | None = None) -> dict[str, Any]:
    """GPUs, nodes, peak compute and memory per node group, the links, and the model's size if one is given."""
    by_type: dict[str, int] = {}
    for g in fleet.groups:
        by_type[g.gpu.id] = by_type.get(g.gpu.id, 0) + g.num_gpus
    precision = Precision.BF16 if all(g.gpu.supports(Precision.BF16) for g in fleet.groups) else Precision.FP16
    peak = sum(g.num_gpus * (g.gpu.peak_tflops(precision) or 0.0) for g in fleet.groups)
    out: dict[str, Any] = {
        "name": fleet.name,
        "sites": list(fleet.sites),
        "num_gpus": fleet.num_gpus,
        "num_nodes": sum(g.num_nodes for g in fleet.groups),
        "gpus_by_type": dict(sorted(by_type.items())),
        "common_precision": precision.value,
        "peak_pflops": round(peak / 1000, 3),
        "hbm_tib": round(sum(g.num_gpus * g.gpu.hbm_gib for g in fleet.groups) / 1024, 3),
        "node_groups": [
            {"key": g.key, "nodes": g.num_nodes, "gpu": g.gpu.id, "gpus_per_node": g.gpus_per_node, "gpus": g.num_gpus,
             "intra_node": f"{g.intra_node_kind} {g.intra_node_gbytes_per_s:g} GB/s",
             "nics": f"{g.nic_count} x {g.nic_gbps:g} Gbit/s {g.nic_transport.value}",
             "peak_pflops": round(g.num_gpus * (g.gpu.peak_tflops(precision) or 0.0) / 1000, 3),
             "hbm_tib": round(g.num_gpus * g.gpu.hbm_gib / 1024, 3)}
            for g in fleet.groups],
        "links": [{"scope": lk.scope, "between": [lk.a, lk.b], "gbps": lk.gbps, "latency_ms": lk.latency_ms,
                   "transport": lk.transport.value} for lk in fleet.links],
        "warnings": warnings,
        "notes": [_one_fabric_note(groups) for groups in one_fabric_groups(fleet)],
    }
    if model is not None:
        out["model"] = {"name": model.name, "params_b": round(model.num_params() / 1e9, 3)}
        out["model"] |= _state_fit(fleet, model, precision, out["notes"])
    return out


def _state_fit(fleet: Fleet, model: ModelArch, precision: Precision, notes: list[str]) -> dict[str, float]:
    """The model's training state (weights, gradients, optimizer: every plan holds it somewhere, sharded or not)
    against the memory of every GPU of the fleet after the framework's overhead; a note when it cannot fit."""
    from hgplan.costmodel.memory import training_state_gib, usable_memory_gib

    state, memory = training_state_gib(model, precision), usable_memory_gib(fleet.groups)
    if state > memory:
        notes.append(f"{model.name}'s training state ({precision.value} weights, gradients and Adam state: "
                     f"{state:,.0f} GiB before activations) exceeds what the fleet's GPUs hold ({memory:,.0f} GiB "
                     "after the framework's overhead): no plan fits, and search will exit 1; add GPUs or plan a "
                     "smaller model")
    return {"state_gib": round(state, 1), "fleet_memory_gib": round(memory, 1)}


def one_fabric_groups(fleet: Fleet) -> list[list[NodeGroup]]:
    """Node groups (two or more per list) of one site with the same nodes (planner/classes.node_signature: GPU,
    intra-node link, NICs, price) and no link of their own between them: one fabric, so nothing but the file tells
    them apart. A pipeline stage (or a FlagScale mesh) never spans node groups, so such groups bound the stages' size
    where one group would not."""
    linked = {frozenset((lk.a, lk.b)) for lk in fleet.links if lk.scope == "group"}
    out: list[list[NodeGroup]] = []
    for g in fleet.groups:
        home = next((c for c in out if node_signature(c[0]) == node_signature(g)
                     and all(frozenset((h.name, g.name)) not in linked for h in c)), None)
        if home is None:
            out.append([g])
        else:
            home.append(g)
    return [c for c in out if len(c) > 1]


def _one_fabric_note(groups: list[NodeGroup]) -> str:
    return (f"node groups {', '.join(g.key for g in groups)} have the same nodes on one fabric; a pipeline stage (its "
            f"tp x cp x dp GPUs) and, with --target flagscale, a process mesh never span node groups, so their stages "
            f"are at most one group's size: describe them as one node group (count: {sum(g.num_nodes for g in groups)})"
            f" to let stages span them (with --target flagscale that group then runs one mesh, where each of them may "
            f"run its own)")


def gpu_row(g: Any, gpu: GpuType) -> dict[str, Any]:
    """One catalog GPU (its spec and its GpuType) as `profiles list gpus` shows it: figures, the precisions it
    trains in, the attention kernels it has and its intra-node path."""
    p2p = ", no P2P" if g.intra_node.kind == "pcie" and g.intra_node.p2p is False else ""
    return {"id": g.id, "vendor": g.vendor, "arch": g.arch, "bf16_tflops": g.bf16_tflops, "fp16_tflops": g.fp16_tflops,
            "fp8_tflops": gpu.peak_tflops(Precision.FP8), "hbm_gib": g.hbm_gib, "hbm_gbytes_per_s": g.hbm_gbytes_per_s,
            "precisions": " ".join([p.value for p in Precision if gpu.supports(p)] + ["mxfp8"] * gpu.eff.mxfp8),
            "attention": "fused flash2 flash1 unfused" if gpu.eff.flash_attention else "unfused",
            "intra_node": f"{g.intra_node.kind} {g.intra_node.gbytes_per_s:g} GB/s{p2p}"}


def model_row(name: str, m: ModelArch) -> dict[str, Any]:
    """One model preset as `profiles list models` shows it (parameters in billions)."""
    return {"name": name, "params_b": round(m.num_params() / 1e9, 3), "num_layers": m.num_layers,
            "hidden_size": m.hidden_size, "heads": m.num_attention_heads, "query_groups": m.num_query_groups,
            "vocab_size": m.vocab_size, "source": m.source}


def cluster_row(name: str, fleet: Fleet) -> dict[str, Any]:
    """One example fleet as `profiles list clusters` shows it."""
    return {"name": name, "gpus": fleet.num_gpus, "sites": len(fleet.sites),
            "gpu_types": sorted({g.gpu.id for g in fleet.groups})}
