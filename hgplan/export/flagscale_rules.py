"""FlagScale's rules (R1-R15 of shared/reference/flagscale-hetero.md, at FlagScale commit da4935ec60) checked on
the configuration an export is about to write, and the read-back of an exported configuration into meshes, layer
split and rank blocks (what FlagScale's own parsing derives from the same files)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

HOSTFILE_LINE = re.compile(r"^(?P<host>\S+)\s+slots=(?P<slots>\d+)(?:\s+type=(?P<type>\S+))?\s*$")
"""One hostfile line as flagscale/runner/utils.py parse_hostfile reads it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadBack:
    """What FlagScale derives from an exported configuration."""

    meshes: list[tuple[int, int, int, int, int]]
    """[tp, cp, ep, dp, pp] per mesh."""
    layer_split: list[int]
    device_types: list[str]
    rank_blocks: list[tuple[str, int, int]]
    """(device type, first rank, last rank) per mesh, from the hostfile's node order and slots."""


def parse_hostfile(lines: list[str]) -> list[tuple[str, int, str | None]]:
    """(host, slots, type) per non-empty line; ValueError naming the line that does not parse."""
    out = []
    for ln in lines:
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        mt = HOSTFILE_LINE.match(ln.strip())
        if mt is None:
            raise ValueError(f"hostfile line {ln!r} is not 'host slots=N type=T'")
        out.append((mt["host"], int(mt["slots"]), mt["type"]))
    return out


def read_back(train_cfg: dict, hostfile_lines: list[str]) -> ReadBack:
    """Meshes, split, types and each mesh's rank block, as FlagScale's RankMapper assigns them: ranks sorted by the
    first occurrence of their node's type in hetero_device_types, then by physical rank (hostfile order)."""
    h = train_cfg["system"]["hetero"]
    flat = list(h["hetero_process_meshes"])
    meshes = [tuple(flat[i:i + 5]) for i in range(0, len(flat), 5)]
    types = list(h["hetero_device_types"])
    physical = []
    for _, slots, t in parse_hostfile(hostfile_lines):
        physical += [t] * slots
    order = sorted(range(len(physical)), key=lambda r: (types.index(physical[r]), r))
    blocks, offset = [], 0
    for (tp, cp, _, dp, pp), t in zip(meshes, types):
        size = tp * cp * dp * pp
        ranks = order[offset:offset + size]
        if any(physical[r] != t for r in ranks):
            raise ValueError(f"mesh of type {t} would get ranks of another type")
        blocks.append((t, ranks[0], ranks[-1]))
        offset += size
    return ReadBack(meshes=meshes, layer_split=list(h["hetero_pipeline_layer_split"]), device_types=types,
                    rank_blocks=blocks)


def _recompute_rows(rows, name: str, m: int, pp: int) -> list[tuple[str, str]]:
    """R13: rows [n_stages, count, value, ...]: counts sum to m, n_stages sum to pp, 0/1 flags."""
    out = []
    stages = 0
    for row in rows:
        row = ast.literal_eval(str(row)) if not isinstance(row, list) else row
        stages += row[0]
        counts, values = row[1::2], row[2::2]
        if sum(counts) != m:
            out.append(("R13", f"{name} row {row}: micro-batch counts sum to {sum(counts)}, not {m}"))
        if "num_layers" not in name and any(v not in (0, 1) for v in values):
            out.append(("R13", f"{name} row {row}: values must be 0 or 1"))
    if stages != pp:
        out.append(("R13", f"{name}: rows cover {stages} stages, the pipeline has {pp}"))
    return out


def _mesh_rules(meshes: list[list[int]], h: dict, system: dict, model: dict) -> list[tuple[str, str]]:
    """R2-R5, R7 and R11's cp part: what the meshes' degrees must satisfy."""
    out: list[tuple[str, str]] = []
    step = meshes[0][3] * model["micro_batch_size"]
    if any(step % mesh[3] for mesh in meshes):
        out.append(("R2", f"dp_0 x micro_batch_size = {step} is not divisible by every mesh's dp "
                          f"{[mesh[3] for mesh in meshes]}"))
    if len({mesh[1] for mesh in meshes}) > 1:
        out.append(("R3", "the meshes' cp differ"))
    eps = {mesh[2] for mesh in meshes}
    if 1 in eps and len(eps) > 1:
        out.append(("R4", "ep is 1 in some meshes and not in others"))
    if system["pipeline_model_parallel_size"] != sum(mesh[4] for mesh in meshes):
        out.append(("R5", f"pipeline_model_parallel_size {system['pipeline_model_parallel_size']} is not the sum of "
                          f"the meshes' pp ({sum(mesh[4] for mesh in meshes)})"))
    if not model.get("untie_embeddings_and_output_weights"):
        a, b = meshes[0], meshes[-1]
        if a[0] != b[0]:
            out.append(("R7", f"tied embeddings: first mesh tp {a[0]} differs from last mesh tp {b[0]}"))
        if a[3] != b[3] and system.get("use_distributed_optimizer") and (
                max(a[3], b[3]) % min(a[3], b[3]) or not h.get("use_partial_reduce_for_shared_embedding")):
            out.append(("R7", "tied embeddings with different first/last dp need one dp to divide the other and "
                              "use_partial_reduce_for_shared_embedding"))
    if any(mesh[1] != 1 for mesh in meshes):
        out.append(("R11", "context parallelism is not supported in heterogeneous mode (cp must be 1)"))
    return out


def flagscale_violations(cfg: dict, exp: dict, hostfile_lines: list[str], *, world_size: int,
                         num_layers: int) -> list[tuple[str, str]]:
    """(rule, message) for every rule of the reference sheet the configuration breaks (empty when it runs)."""
    system, model = cfg["system"], cfg["model"]
    h = system.get("hetero", {})
    flat = h.get("hetero_process_meshes") or []
    if not flat or len(flat) % 5:
        return [("R1", f"hetero_process_meshes has {len(flat)} entries, not a positive multiple of 5")]
    meshes = [flat[i:i + 5] for i in range(0, len(flat), 5)]
    out = _mesh_rules(meshes, h, system, model)
    if h.get("standalone_embedding_stage"):
        out.append(("R6", "standalone_embedding_stage must be False"))
    if "virtual_pipeline_model_parallel_size" in system or "num_layers_per_virtual_pipeline_stage" in system:
        out.append(("R8", "virtual pipeline stages are not supported in heterogeneous mode"))
    split = h.get("hetero_pipeline_layer_split", [])
    if sum(split) != num_layers or len(split) != system["pipeline_model_parallel_size"]:
        out.append(("R9", f"hetero_pipeline_layer_split {split} must have one entry per stage and sum to {num_layers}"))
    types = h.get("hetero_device_types", [])
    if len(types) != len(meshes) or h.get("hetero_current_device_type") not in types:
        out.append(("R10", "one device type per mesh, and hetero_current_device_type one of them"))
    runs = [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]
    if len(runs) != len(set(runs)):
        out.append(("types_adjacent", f"meshes of one device type must be adjacent (got {types})"))
    if system.get("num_distributed_optimizer_instances", 1) != 1:
        out.append(("R11", "num_distributed_optimizer_instances must be 1"))
    if world_size != sum(mesh[0] * mesh[1] * mesh[3] * mesh[4] for mesh in meshes):
        out.append(("R12", f"world size {world_size} is not the sum of the meshes' tp*cp*dp*pp"))
    m = cfg["model"]["global_batch_size"] // (cfg["model"]["micro_batch_size"] * meshes[0][3])
    for name, rows in system.get("recompute", {}).items():
        if name.endswith("_per_stage_micro_batch"):
            out += _recompute_rows(rows, name, m, system["pipeline_model_parallel_size"])
    out += _hostfile_rules(hostfile_lines, world_size)
    if exp["experiment"]["runner"].get("rdzv_backend") != "static":
        out.append(("R15", "heterogeneous runs need experiment.runner.rdzv_backend: static"))
    return out


def _hostfile_rules(lines: list[str], world_size: int) -> list[tuple[str, str]]:
    """R14: every line 'host slots=N type=T', no host twice, all typed or none; slots add up to the world."""
    try:
        hosts = parse_hostfile(lines)
    except ValueError as exc:
        return [("R14", str(exc))]
    out = []
    names = [h for h, _, _ in hosts]
    if len(names) != len(set(names)):
        out.append(("R14", "a host appears twice in the hostfile"))
    typed = {t is not None for _, _, t in hosts}
    if len(typed) > 1 or typed == {False}:
        out.append(("R14", "every hostfile line needs type= in a heterogeneous run"))
    if sum(s for _, s, _ in hosts) != world_size:
        out.append(("R14", f"hostfile slots sum to {sum(s for _, s, _ in hosts)}, the plan has {world_size} ranks"))
    return out
