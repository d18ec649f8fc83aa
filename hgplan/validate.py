"""The solver-independent plan validator: the executable specification of a runnable plan.

Every plan the planner returns, every plan file read back and every hand-given configuration passes
through check_plan. Each rule returns a Violation with the values, the rule and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.plan import ParallelConfig, Plan, Recompute


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """A rule a plan breaks, with a message naming the values and the fix."""

    rule: str
    message: str


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _degree_rules(plan: Plan, model: ModelArch, train: TrainingSettings) -> list[Violation]:
    """Degrees, layers, batch and interleaving: the rules that do not depend on the fleet."""
    out: list[Violation] = []

    def bad(rule: str, message: str) -> None:
        """Record a broken rule."""
        out.append(Violation(rule=rule, message=message))

    c = plan.config
    for name in ("tp", "pp", "dp", "cp", "micro_batch_size", "vpp"):
        if getattr(c, name) < 1:
            bad("positive", f"{name} must be >= 1 (got {getattr(c, name)})")
    if out:
        return out  # the rules below divide by these degrees
    if c.zero_stage not in (0, 1, 2, 3):
        bad("zero_stage", f"zero_stage must be 0, 1, 2 or 3 (got {c.zero_stage})")
    if len(plan.stages) != c.pp:
        bad("stages", f"the plan lists {len(plan.stages)} stages but pp = {c.pp}; give one node group and layer count per stage")
    layers = [s.num_layers for s in plan.stages]
    if sum(layers) != model.num_layers:
        bad("layers_sum", f"stage layers {','.join(map(str, layers))} sum to {sum(layers)}, but the model has "
                          f"{model.num_layers} layers; make them add up to {model.num_layers}")
    if any(n < 1 for n in layers):
        bad("layers_positive", f"every stage needs at least one layer (got {','.join(map(str, layers))})")
    heads, groups = model.num_attention_heads, model.num_query_groups
    ok = [t for t in _divisors(groups) if model.tp_divides(t)]  # the tp a fix may name
    for tp in sorted({plan.stage_config(i).tp for i in range(len(plan.stages))} | {c.tp}):
        if heads % tp or groups % tp:
            bad("tp_divides_heads", f"tp = {tp} must divide num_attention_heads ({heads}) and num_query_groups "
                                    f"({groups}); choose tp in {ok}")
        if model.ffn_hidden_size % tp:  # the MLP's second GEMM splits its input rows evenly over the tp ranks
            bad("tp_divides_ffn", f"tp = {tp} must divide ffn_hidden_size ({model.ffn_hidden_size}): Megatron-LM "
                                  f"splits the MLP evenly over the tensor-parallel ranks; choose tp in {ok}")
        if (c.sequence_parallel or plan.asymmetric) and tp > 1 and (train.seq_length // c.cp) % tp:
            bad("sp_seq", f"with sequence parallelism, seq_length / cp ({train.seq_length // c.cp}) must be divisible "
                          f"by tp ({tp})")
    if c.sequence_parallel and c.tp == 1 and not plan.asymmetric:
        bad("sp_needs_tp", "sequence parallelism needs tp > 1 (Megatron turns it off at tp = 1); drop --sequence-parallel")
    if c.cp > 1 and train.seq_length % (2 * c.cp):
        bad("cp_seq", f"with cp = {c.cp} the sequence length ({train.seq_length}) must be divisible by 2 x cp = {2 * c.cp}")
    per_replica = c.micro_batch_size * c.dp
    if train.global_batch_size % per_replica:
        bad("batch", f"global batch {train.global_batch_size} is not divisible by micro-batch x dp = "
                     f"{c.micro_batch_size} x {c.dp} = {per_replica}; choose a global batch that is a multiple of "
                     f"{per_replica}, or change the micro-batch size or dp")
    m = c.num_microbatches(train.global_batch_size)
    if c.vpp > 1:
        if c.pp < 2:
            bad("vpp_pp", f"interleaving (vpp = {c.vpp}) needs pp >= 2")
        elif m % c.pp:
            bad("vpp_microbatches", f"interleaving needs the number of micro-batches ({m}) to be a multiple of pp ({c.pp})")
        uneven = [n for n in layers if n % c.vpp]
        if uneven:
            bad("vpp_layers", f"with vpp = {c.vpp} every stage's layer count must be divisible by {c.vpp} "
                              f"(got {','.join(map(str, layers))})")
    if plan.asymmetric:
        out += _asymmetric_rules(plan, model)
    if c.zero_stage in (2, 3) and c.pp > 1:
        bad("zero_pp", f"ZeRO stage {c.zero_stage} cannot be combined with pipeline parallelism (DeepSpeed asserts it; "
                       "Megatron's distributed optimizer is stage 1); use zero_stage <= 1 or pp = 1")
    return out


def _asymmetric_rules(plan: Plan, model: ModelArch) -> list[Violation]:
    """What a plan with per-stage degrees needs: FlagScale's process-mesh rules that do not depend on the export
    (docs/export.md lists them with their source lines)."""
    c = plan.config
    out: list[Violation] = []
    if c.cp > 1 or c.vpp > 1:
        out.append(Violation(rule="mesh_cp_vpp", message=(
            f"an asymmetric plan runs on FlagScale's heterogeneous mode, which supports neither context parallelism "
            f"nor interleaving (got cp = {c.cp}, vpp = {c.vpp}); use cp = 1 and vpp = 1")))
    if c.zero_stage > 1:
        out.append(Violation(rule="mesh_zero", message=(
            f"an asymmetric plan uses Megatron's distributed optimizer or none (zero_stage 0 or 1, got "
            f"{c.zero_stage})")))
    cfgs = [plan.stage_config(i) for i in range(len(plan.stages))]
    step = c.dp * c.micro_batch_size
    for i, dp in enumerate(sc.dp for sc in cfgs):
        if step % dp:
            out.append(Violation(rule="mesh_dp", message=(
                f"stage {i}: dp = {dp} must divide the first stage's dp x micro-batch = {c.dp} x "
                f"{c.micro_batch_size} = {step} (each stage splits the same samples per micro-batch step over its dp; "
                f"FlagScale asserts it); choose a dp that divides {step}")))
    seen: dict[str, tuple[int, int]] = {}
    for i, (st, sc) in enumerate(zip(plan.stages, cfgs)):
        deg = (sc.tp, sc.dp)
        if seen.setdefault(st.node_group, deg) != deg:
            out.append(Violation(rule="mesh_group", message=(
                f"stage {i} on {st.node_group} has tp, dp = {deg} but an earlier stage there has "
                f"{seen[st.node_group]}; a node group hosts one process mesh: give its stages one tp and dp")))
    kinds = [sc.recompute for sc in cfgs]
    if Recompute.SELECTIVE in kinds and len(set(kinds)) > 1:
        out.append(Violation(rule="mesh_recompute", message=(
            f"stages recompute {', '.join(k.value for k in kinds)}: FlagScale sets recomputation per stage only as "
            "full or none, selective only for the whole model; give every stage selective, or each none or full")))
    first, last = cfgs[0], cfgs[-1]
    if not model.untie_embeddings_and_output_weights and first.tp != last.tp:
        out.append(Violation(rule="mesh_tied_tp", message=(
            f"with tied embeddings the first and last stage need one tp (got {first.tp} and {last.tp}; FlagScale "
            "asserts it); give them the same tp")))
    if not model.untie_embeddings_and_output_weights and max(first.dp, last.dp) % min(first.dp, last.dp):
        out.append(Violation(rule="mesh_tied_dp", message=(
            f"with tied embeddings one of the first and last stage's dp must divide the other (got {first.dp} and "
            f"{last.dp}; FlagScale's partial reduce needs it); choose dp that divide each other")))
    return out


def _placement_rules(plan: Plan, fleet: Fleet, train: TrainingSettings) -> list[Violation]:
    """Stages on known node groups with room for them, TP inside a node, stages tiling nodes, precision, links."""
    out: list[Violation] = []

    def bad(rule: str, message: str) -> None:
        """Record a broken rule."""
        out.append(Violation(rule=rule, message=message))

    used: dict[str, int] = {}
    cfg_of: dict[str, ParallelConfig] = {}
    keys = {g.key for g in fleet.groups}
    for i, st in enumerate(plan.stages):
        if st.node_group not in keys:
            bad("node_group", f"stage {i}: unknown node group '{st.node_group}'; choose one of {', '.join(sorted(keys))}")
            continue
        used[st.node_group] = used.get(st.node_group, 0) + plan.stage_gpus(i)
        cfg_of.setdefault(st.node_group, plan.stage_config(i))
    for key, need in used.items():
        g, c = fleet.group(key), cfg_of[key]
        if need > g.num_gpus:
            bad("capacity", f"node group {key} has {g.num_gpus} GPUs but its stages need {need} "
                            f"({need // c.gpus_per_stage} stage(s) x tp*cp*dp = {c.gpus_per_stage})")
        if c.tp > g.gpus_per_node and not c.allow_cross_node_tp:
            bad("tp_in_node", f"tp = {c.tp} exceeds the {g.gpus_per_node} GPUs per node of {key}: tensor parallelism "
                              "must stay inside a node (NVLink); lower tp, or force it with --allow-cross-node-tp")
        elif c.tp <= g.gpus_per_node and g.gpus_per_node % c.tp:
            bad("tp_aligned", f"tp = {c.tp} must divide the {g.gpus_per_node} GPUs per node of {key} so that no TP "
                              "group straddles two nodes")
        if c.gpus_per_stage % g.gpus_per_node and g.gpus_per_node % c.gpus_per_stage:
            bad("stage_nodes", f"a stage of tp*cp*dp = {c.gpus_per_stage} GPUs does not tile the {g.gpus_per_node}-GPU "
                               f"nodes of {key}; make it a multiple or a divisor of {g.gpus_per_node}")
        if not g.gpu.trains(train):
            bad("precision", f"{g.gpu.id} in {key} does not support {train.precision_name}; "
                             f"{precision_fix(train)} or leave this node group out")
        elif g.gpu.peak_tflops(train.precision) is None:
            bad("precision", f"{g.gpu.id} has no {train.precision.value} throughput figure")
    for i in range(len(plan.stages) - 1):
        a, b = plan.stages[i].node_group, plan.stages[i + 1].node_group
        if a in keys and b in keys and fleet.path(fleet.group(a), fleet.group(b)) is None:
            bad("adjacent", f"stages {i} and {i + 1} sit on {a} and {b}, which have no direct link; reorder the stages "
                            "or add a link between them to the cluster file")
    if plan.config.vpp > 1 and len(plan.stages) > 1:
        a, b = plan.stages[-1].node_group, plan.stages[0].node_group
        if a in keys and b in keys and fleet.path(fleet.group(a), fleet.group(b)) is None:
            bad("adjacent", f"interleaving sends from the last stage ({a}) back to the first ({b}), which have no link")
    return out


def check_plan(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings) -> list[Violation]:
    """Every rule a plan must satisfy to run on stock Megatron-LM. Memory is checked separately (check_memory)."""
    out = _degree_rules(plan, model, train)
    if any(v.rule == "positive" for v in out):
        return out
    return out + _placement_rules(plan, fleet, train)


def check_memory(pred) -> list[Violation]:
    """Memory fit of an evaluated plan (hgplan.costmodel.evaluate.Prediction)."""
    out = []
    for s in pred.stages:
        if not s.fits:
            need = f"{s.memory_gib:.1f}" if s.memory_gib >= s.memory_capacity_gib + 0.05 else f"{s.memory_gib:.3f}"
            out.append(Violation(rule="memory", message=(
                f"stage {s.index} on {s.node_group} needs {need} GiB per GPU of {s.memory_capacity_gib:g} "
                f"GiB ({s.gpu}; weights {s.memory.weights_gib:.1f}, gradients {s.memory.gradients_gib:.1f}, "
                f"optimizer {s.memory.optimizer_gib:.1f}, activations {s.memory.activations_gib:.1f}, overhead "
                f"{s.memory.overhead_gib:.1f})")))
    return out


def precision_fix(train: TrainingSettings) -> str:
    """What to train in instead, for a GPU that lacks the training precision."""
    if train.mxfp8:
        return "use fp8_recipe delayed or tensorwise (MXFP8 needs Blackwell)"
    return "train in fp16 (--precision fp16)"
