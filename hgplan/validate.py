"""The solver-independent plan validator: the executable specification of a runnable plan.

Every plan the planner returns, every plan file read back and every hand-given configuration passes
through check_plan. Each rule returns a Violation with the values, the rule and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.plan import Plan


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
    if heads % c.tp or groups % c.tp:
        ok = [t for t in _divisors(groups) if heads % t == 0]
        bad("tp_divides_heads", f"tp = {c.tp} must divide num_attention_heads ({heads}) and num_query_groups ({groups}); "
                                f"choose tp in {ok}")
    if c.sequence_parallel and c.tp == 1:
        bad("sp_needs_tp", "sequence parallelism needs tp > 1 (Megatron turns it off at tp = 1); drop --sequence-parallel")
    if c.cp > 1 and train.seq_length % (2 * c.cp):
        bad("cp_seq", f"with cp = {c.cp} the sequence length ({train.seq_length}) must be divisible by 2 x cp = {2 * c.cp}")
    if c.sequence_parallel and (train.seq_length // c.cp) % c.tp:
        bad("sp_seq", f"with sequence parallelism, seq_length / cp ({train.seq_length // c.cp}) must be divisible by "
                      f"tp ({c.tp})")
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
    if c.zero_stage >= 2 and c.pp > 1:
        bad("zero_pp", f"ZeRO stage {c.zero_stage} cannot be combined with pipeline parallelism (DeepSpeed asserts it; "
                       "Megatron's distributed optimizer is stage 1); use zero_stage <= 1 or pp = 1")
    return out


def _placement_rules(plan: Plan, fleet: Fleet, train: TrainingSettings) -> list[Violation]:
    """Stages on known node groups with room for them, TP inside a node, stages tiling nodes, precision, links."""
    out: list[Violation] = []

    def bad(rule: str, message: str) -> None:
        """Record a broken rule."""
        out.append(Violation(rule=rule, message=message))

    c = plan.config
    used: dict[str, int] = {}
    keys = {g.key for g in fleet.groups}
    for i, st in enumerate(plan.stages):
        if st.node_group not in keys:
            bad("node_group", f"stage {i}: unknown node group '{st.node_group}'; choose one of {', '.join(sorted(keys))}")
            continue
        used[st.node_group] = used.get(st.node_group, 0) + c.gpus_per_stage
    for key, need in used.items():
        g = fleet.group(key)
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
        if not g.gpu.supports(train.precision):
            bad("precision", f"{g.gpu.id} in {key} does not support {train.precision.value}; train in fp16 "
                             "(--precision fp16) or leave this node group out")
        elif g.gpu.peak_tflops(train.precision) is None:
            bad("precision", f"{g.gpu.id} has no {train.precision.value} throughput figure")
    for i in range(len(plan.stages) - 1):
        a, b = plan.stages[i].node_group, plan.stages[i + 1].node_group
        if a in keys and b in keys and fleet.path(fleet.group(a), fleet.group(b)) is None:
            bad("adjacent", f"stages {i} and {i + 1} sit on {a} and {b}, which have no direct link; reorder the stages "
                            "or add a link between them to the cluster file")
    if c.vpp > 1 and len(plan.stages) > 1:
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
            out.append(Violation(rule="memory", message=(
                f"stage {s.index} on {s.node_group} needs {s.memory_gib:.1f} GiB per GPU of {s.memory_capacity_gib:g} "
                f"GiB ({s.gpu}; weights {s.memory.weights_gib:.1f}, gradients {s.memory.gradients_gib:.1f}, "
                f"optimizer {s.memory.optimizer_gib:.1f}, activations {s.memory.activations_gib:.1f}, overhead "
                f"{s.memory.overhead_gib:.1f})")))
    return out
