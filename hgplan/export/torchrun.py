"""Generic torchrun export: one command per node (static rendezvous) and the full rank map."""

from __future__ import annotations

import csv
import io

from hgplan.domain import Fleet, ModelArch, TrainingSettings
from hgplan.export.common import Export, nccl_env, node_record, node_script, torchrun_command
from hgplan.export.layout import build_layout, vendor_warnings
from hgplan.plan import Plan


def export_torchrun(plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings, *,
                    script: str = "train.py") -> Export:
    """A torchrun command and script per node for the user's own training script, and the rank map."""
    layout = build_layout(plan, fleet)
    ex = Export(format="torchrun", warnings=vendor_warnings(plan, fleet))
    master = layout.nodes[0].host
    for n in layout.nodes:
        cmd = torchrun_command(n, nnodes=len(layout.nodes), master=master, script=script)
        env = nccl_env(fleet.group(n.group))
        ex.nodes.append(node_record(n, env, cmd))
        ex.files[f"launch_node{n.node_rank:03d}_{n.host}.sh"] = node_script(env, cmd)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["rank", "host", "node_rank", "local_rank", "stage", "node_group", "layers", "tp_rank", "cp_rank", "dp_rank"])
    for r in layout.ranks:
        st = plan.stages[r.stage]
        w.writerow([r.rank, r.host, r.node_rank, r.local_rank, r.stage, st.node_group, st.num_layers, r.tp, r.cp, r.dp])
    ex.files["rank_map.csv"] = buf.getvalue()
    ex.argv = []
    ex.notes.append("ranks follow Megatron's tp-cp-dp-pp order: stage p owns ranks [p*G, (p+1)*G) with G = tp*cp*dp")
    return ex
