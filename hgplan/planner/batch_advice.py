"""Advice on the global batch when it, not the fleet, leaves GPUs idle (pure).

Every stock plan's dp x micro-batch divides the global batch, and every stage's tp x cp x dp GPUs tile the nodes of
its group (a multiple or a divisor of the GPUs per node). So the factor of two of dp is at most the global batch's:
with 500 = 4 x 125 on 8-GPU nodes, a stage spans more than one node only with tp x cp >= 2, and with a prime such as
509 only with tp x cp = 8 and dp = 1. On two-site (128 H100 + 256 A100, llama3.1-8b, sequence 4096) the best plan
reaches 1.05 M tokens/s at 500 and 0.50 M at 509 against 1.40 M at 512, while most of the fleet sits idle: worth a
line, since the user may be free to pick the batch.
"""

from __future__ import annotations

from hgplan.documents import IdleGpus, SearchFinding
from hgplan.domain import Fleet, TrainingSettings

SUGGEST_MULTIPLE = 64
"""The suggested global batch is the nearest multiple of this many (or of the largest node, if larger) sequences: dp
then tiles any node of up to 64 GPUs on its own, with micro-batch 1 or beyond."""


def power_of_two(n: int) -> int:
    """The largest power of two that divides n (n >= 1)."""
    return n & -n


def batch_finding(fleet: Fleet, train: TrainingSettings, idle: list[IdleGpus]) -> SearchFinding | None:
    """A finding when GPUs are idle and the global batch's factor of two is below the GPUs per node (a power of two) of
    a group with idle GPUs: what the batch forbids and the nearest global batch that does not (None otherwise)."""
    pairs = [(i, fleet.group(i.node_group)) for i in idle]
    pairs = [(i, g) for i, g in pairs if g.gpu.trains(train)]
    groups = [g for _, g in pairs]
    gbs = train.global_batch_size
    two = power_of_two(gbs)
    node = max((g.gpus_per_node for g in groups), default=0)
    if two >= node or power_of_two(node) != node:
        return None
    step = max(SUGGEST_MULTIPLE, node)
    lower, upper = gbs // step * step, (gbs // step + 1) * step
    near = upper if lower == 0 or upper - gbs <= gbs - lower else lower
    gpus = sum(i.gpus for i, _ in pairs)
    odd = gbs // two
    shape = f"{two} x {odd}" if two > 1 and odd > 1 else "odd" if two == 1 and odd > 1 else str(gbs)
    message = (f"the global batch may be why {gpus} GPUs are idle: {gbs} is {shape}, every stage's dp x micro-batch "
               f"divides it and its tp x cp x dp GPUs tile whole nodes, so a stage spans more than one {node}-GPU node "
               f"only with tp x cp >= {node // two}; a global batch that is a multiple of {step}, such as {near}, "
               f"lifts that limit (compare: search again with --global-batch {near})")
    return SearchFinding(kind="global_batch", message=message, node_groups=sorted(g.key for g in groups))
