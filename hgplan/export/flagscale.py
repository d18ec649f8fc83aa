"""FlagScale export: the experiment and train YAML of FlagScale's heterogeneous mode, the hostfile with node types,
the per-type environment and the launch command.

Keys, rules and rank order: shared/reference/flagscale-hetero.md, read from FlagScale at commit
da4935ec60193e735bc70b81e259ed04eefd0132 (FLAGSCALE_COMMIT); docs/export.md explains every value. Every rule
R1-R15 of that sheet is checked on the files about to be written (flagscale_violations); a plan that breaks one is
refused (exit 1) naming the rule.
"""

from __future__ import annotations

import re

import yaml

from hgplan.costmodel.reshard import host_copies, mesh_host_path
from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.errors import PlanningError
from hgplan.export.common import Export, nccl_env, node_record, parallel_args
from hgplan.export.flagscale_rules import flagscale_violations
from hgplan.export.layout import Layout, build_layout
from hgplan.export.megatron import kernel_args, model_args, unsupported_features
from hgplan.plan import Plan, Recompute

FLAGSCALE_COMMIT = "da4935ec60193e735bc70b81e259ed04eefd0132"
"""The FlagScale commit the rules and key names were read at."""
TRAIN_NAME = "hgplan"
"""conf/train/<TRAIN_NAME>.yaml."""


def argv_to_keys(argv: list[str]) -> dict:
    """Megatron flags as FlagScale YAML keys (what its runner flattens back): '--a-b v' -> a_b: v, a bare flag ->
    True, several values -> a list."""
    out: dict = {}
    i = 0
    while i < len(argv):
        key = argv[i][2:].replace("-", "_")
        vals = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            vals.append(_scalar(argv[i]))
            i += 1
        out[key] = True if not vals else vals[0] if len(vals) == 1 else vals
    return out


def _scalar(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def device_labels(plan: Plan, fleet: Fleet) -> list[str]:
    """One device-type label per mesh: the GPU model, or the GPU model and node group ('site_group') where two meshes
    of one model are not adjacent (FlagScale orders ranks by each label's first occurrence, so a label's meshes must
    be adjacent) or their node groups need different NCCL settings (the environment goes per label)."""
    meshes = plan.meshes()
    groups = [fleet.group(plan.stages[first].node_group) for first, _ in meshes]
    gpus = [g.gpu.id for g in groups]
    labels = []
    for i, g in enumerate(groups):
        runs = [j for j, gpu in enumerate(gpus) if gpu == gpus[i]]
        adjacent = runs == list(range(runs[0], runs[0] + len(runs)))
        alike = all(nccl_env(groups[j]) == nccl_env(g) for j in runs)
        name = gpus[i] if adjacent and alike else f"{gpus[i]}_{g.key}"
        labels.append(re.sub(r"[^A-Za-z0-9_.-]", "_", name))
    return labels


def _recompute_keys(plan: Plan, m: int) -> dict:
    """Recomputation: one global setting when every stage agrees, else FlagScale's per-stage rows (full or none per
    stage; rows [1, m, value]: one stage, all m micro-batches)."""
    kinds = [plan.stage_config(i).recompute for i in range(len(plan.stages))]
    if len(set(kinds)) == 1:
        if kinds[0] is Recompute.NONE:
            return {}
        if kinds[0] is Recompute.SELECTIVE:
            return {"recompute_granularity": "selective"}
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if Recompute.SELECTIVE in kinds:
        raise PlanningError("rule R13: FlagScale's per-stage recomputation is full or none per stage; this plan mixes "
                            "selective recomputation with others; search again with --target flagscale")
    full = [int(k is Recompute.FULL) for k in kinds]
    return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
            "recompute_granularity_per_stage_micro_batch": [[1, m, f] for f in full],
            "recompute_method_per_stage_micro_batch": [[1, m, 0] for _ in full],
            "recompute_num_layers_per_stage_micro_batch": [[1, m, f] for f in full]}


PRECISION_KEYS = ("fp16", "bf16", "fp8_format", "fp8_recipe")
"""The precision flags of export.common.parallel_args, as FlagScale keys."""


def train_config(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, labels: list[str]) -> dict:
    """conf/train/hgplan.yaml as a dict: system (parallelism, hetero, recompute, precision), model, data; labels:
    the device type of each mesh (device_labels)."""
    c, meshes = plan.config, plan.meshes()
    m = c.num_microbatches(train.global_batch_size)
    flat = []
    for first, count in meshes:
        sc = plan.stage_config(first)
        flat += [sc.tp, sc.cp, 1, sc.dp, count]
    hetero = {"enable_hetero": True, "hetero_process_meshes": flat,
              "hetero_pipeline_layer_split": [s.num_layers for s in plan.stages], "hetero_device_types": labels,
              "hetero_current_device_type": labels[0], "standalone_embedding_stage": False}
    if mesh_host_path(plan, fleet):
        hetero["hetero_use_cpu_communication"] = True
    first, last = plan.stage_config(0), plan.stage_config(len(plan.stages) - 1)
    if not model.untie_embeddings_and_output_weights and first.dp != last.dp:
        hetero["use_partial_reduce_for_shared_embedding"] = True
    tps = [plan.stage_config(i).tp for i in range(len(plan.stages))]
    system = {"tensor_model_parallel_size": max(tps), "pipeline_model_parallel_size": c.pp,
              "sequence_parallel": max(tps) > 1, "use_distributed_optimizer": c.zero_stage >= 1,
              "hetero": hetero, "recompute": _recompute_keys(plan, m),
              "precision": {k: v for k, v in argv_to_keys(parallel_args(plan, train)).items() if k in PRECISION_KEYS}}
    if not system["recompute"]:
        del system["recompute"]
    mkeys = argv_to_keys(model_args(model, train) + kernel_args(train)[0])  # FlagScale's examples keep these in model:
    mkeys.update(micro_batch_size=c.micro_batch_size, global_batch_size=train.global_batch_size)
    return {"system": system, "model": mkeys, "data": {"data_path": "<your data path>", "split": "1"}}


def _hostfile(plan: Plan, layout: Layout, labels: list[str]) -> tuple[list[str], list[str]]:
    """Hostfile lines in mesh order ('host slots=N type=T') and the type of every node."""
    label_of_stage = {}
    for (first, count), lab in zip(plan.meshes(), labels):
        for s in range(first, first + count):
            label_of_stage[s] = lab
    types = [label_of_stage[layout.ranks[n.first_rank].stage] for n in layout.nodes]
    return [f"{n.host} slots={n.local_gpus} type={t}" for n, t in zip(layout.nodes, types)], types


def experiment_config(fleet: Fleet, layout: Layout, types: list[str], script: str, *, gloo: bool = False) -> dict:
    """The experiment file: runner with the hostfile and static rendezvous, environment per device type (with gloo,
    the interface gloo's sends between meshes take)."""
    per_type: dict[str, dict] = {}
    for node, t in zip(layout.nodes, types):
        per_type.setdefault(t, nccl_env(fleet.group(node.group)) | ({"GLOO_SOCKET_IFNAME": "eth0"} if gloo else {}))
    return {"defaults": [{"train": TRAIN_NAME}, "_self_"],
            "experiment": {"exp_name": "hgplan", "exp_dir": "./outputs_hgplan",
                           "task": {"type": "train", "backend": "megatron",
                                    "entrypoint": script},
                           "runner": {"backend": "torchrun", "nnodes": len(layout.nodes), "hostfile": "hostfile",
                                      "rdzv_backend": "static"},
                           "envs": {"CUDA_DEVICE_MAX_CONNECTIONS": 1, "device_type_specific": per_type}},
            "action": "run", "hydra": {"run": {"dir": "${experiment.exp_dir}/hydra"}}}


def export_flagscale(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
                     script: str = "./flagscale/train/train_gpt.py") -> Export:
    """FlagScale's heterogeneous mode: conf/<experiment>.yaml, conf/train/hgplan.yaml, hostfile, launch.sh."""
    bad = unsupported_features(model)
    if bad:
        raise PlanningError(f"FlagScale (Megatron-LM) cannot express {'; '.join(bad)}; export refused")
    layout, labels = build_layout(plan, fleet), device_labels(plan, fleet)
    cfg = train_config(plan, fleet, model, train, labels)
    lines, types = _hostfile(plan, layout, labels)
    gloo = "hetero_use_cpu_communication" in cfg["system"]["hetero"]
    exp = experiment_config(fleet, layout, types, script, gloo=gloo)
    problems = flagscale_violations(cfg, exp, lines, world_size=plan.world_size, num_layers=model.num_layers)
    if problems:
        raise PlanningError(f"rule {problems[0][0]}: {problems[0][1]}; export refused")
    ex = Export(format="flagscale")
    ex.files[f"conf/train/{TRAIN_NAME}.yaml"] = yaml.safe_dump(cfg, sort_keys=False)
    ex.files["conf/train_hgplan.yaml"] = yaml.safe_dump(exp, sort_keys=False)
    ex.files["hostfile"] = "\n".join(lines) + "\n"
    cmd = ["python", "run.py", "--config-path", "./conf", "--config-name", "train_hgplan", "action=run"]
    ex.files["launch.sh"] = ("#!/usr/bin/env bash\n# run from the FlagScale checkout (commit " + FLAGSCALE_COMMIT[:12]
                             + " or later), with conf/ copied into it\nset -euo pipefail\n" + " ".join(cmd) + "\n")
    ex.argv = cmd
    ex.nodes = [node_record(n) for n in layout.nodes]
    ex.notes.append(f"meshes [tp, cp, ep, dp, pp]: {cfg['system']['hetero']['hetero_process_meshes']}; launch "
                    "from the first host; FlagScale sets each node's hetero_current_device_type from its hostfile type")
    if gloo:
        ex.notes.append("a boundary between meshes joins two vendors or two network transports, which one NCCL "
                        "communicator cannot: every send between meshes goes through host memory over gloo "
                        "(hetero_use_cpu_communication; GLOO_SOCKET_IFNAME names the interface, a typical value to "
                        "check); FlagCX (distributed_backend: flagcx) is the alternative between vendors")
        if not plan.asymmetric and not all(host_copies(plan, fleet)[0][first - 1] for first, _ in plan.meshes()[1:]):
            ex.warnings.append("this stock plan was priced as Megatron-LM runs it (NCCL on sockets across a "
                               "transport boundary); FlagScale also copies each send between meshes through host "
                               "memory, at both ends, and sends it over gloo's one TCP connection per pair of ranks, "
                               "which the prediction leaves out")
    return ex
