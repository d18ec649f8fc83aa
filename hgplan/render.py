"""Rich renderers: the tables and lines the CLI prints when --json is not given (documents in, text out)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # annotations only: `validate` and `profiles` need neither (start-up time)
    from hgplan.documents import ExplainReport, PlanRecord, SearchReport, StageRecord, StageResult
    from hgplan.export.common import Export


def plain(console: Console, text: str) -> None:
    """Print text as is: no markup, no highlighting (paths and flags contain brackets and numbers)."""
    console.print(text, markup=False, highlight=False)


def validate_summary(out: Console, summary: dict[str, Any]) -> None:
    """`hgplan validate`: the fleet's headline, its node groups and links, and the model's size."""
    out.print(f"[bold]{summary['name']}[/]: {summary['num_gpus']} GPUs in {summary['num_nodes']} nodes, "
              f"{len(summary['sites'])} site(s); peak {summary['peak_pflops']:g} PFLOP/s "
              f"({summary['common_precision']}), {summary['hbm_tib']:g} TiB HBM")
    table = Table("node group", "nodes", "GPU", "GPUs", "intra-node", "NICs per node", "PFLOP/s", "HBM TiB")
    for g in summary["node_groups"]:
        table.add_row(g["key"], str(g["nodes"]), g["gpu"], str(g["gpus"]), g["intra_node"], g["nics"],
                      f"{g['peak_pflops']:g}", f"{g['hbm_tib']:g}")
    out.print(table)
    if summary["links"]:
        lt = Table("link", "between", "Gbit/s", "latency ms", "transport")
        for lk in summary["links"]:
            lt.add_row(lk["scope"], " <-> ".join(lk["between"]), f"{lk['gbps']:g}", f"{lk['latency_ms']:g}",
                       lk["transport"])
        out.print(lt)
    if "model" in summary:
        m = summary["model"]
        out.print(f"model {m['name']}: {m['params_b']:g} B parameters; training state {m['state_gib']:,.0f} GiB "
                  f"(weights, gradients, Adam), the fleet's GPUs hold {m['fleet_memory_gib']:,.0f} GiB")
    for note in summary["notes"]:
        out.print(f"note: {note}")


def rows_table(out: Console, rows: list[dict[str, Any]]) -> None:
    """A list of flat records as a table (lists joined, None as '-')."""
    table = Table(*rows[0].keys()) if rows else Table()
    for r in rows:
        table.add_row(*(", ".join(v) if isinstance(v, list) else ("-" if v is None else str(v)) for v in r.values()))
    out.print(table)


def explanation(out: Console, report: ExplainReport, timeline: str | None) -> None:
    """`hgplan explain`: headline, per-stage table, findings and the optional timeline."""
    p, plan = report.prediction, report.plan
    asym = plan.asymmetric
    head = ("process meshes (per-stage TP, DP, micro-batch and recompute below)" if asym else
            f"TP {plan.tp} CP {plan.cp} PP {plan.pp} DP {plan.dp}")
    cluster = "<stdin>" if report.inputs.cluster == "-" else report.inputs.cluster
    out.print(f"[bold]{report.inputs.model_name}[/] on {cluster}: {head}, micro-batch "
              f"{plan.micro_batch_size}{' (first mesh)' if asym else ''} x {p.num_microbatches}, vpp {plan.vpp}, "
              f"recompute {plan.recompute}, ZeRO {plan.zero_stage}")
    out.print(f"iteration {p.iteration_time_s:.3f} s  |  {p.tokens_per_s:,.0f} tokens/s  |  "
              f"{p.model_tflops_per_gpu:.1f} model TFLOP/s/GPU  |  MFU {p.mfu:.1%}  |  bubble {p.bubble_fraction:.1%}")
    table = Table("stage", "node group", *(("tp/dp/mbs/recompute",) if asym else ()), "GPUs", "layers", "fwd+bwd s/mb",
                  "compute s", "p2p s", "DP sync s", "memory GiB", "capacity", "used", "headroom")
    for s, st in zip(report.stages, plan.stages):
        mark = "" if s.fits else " [red]OOM[/]"
        mesh = (f"{st.tp}/{st.dp}/{mesh_micro_batch(plan, st)}/{st.recompute}",) if asym else ()
        table.add_row(str(s.index), s.node_group, *mesh, str(s.gpus), str(s.layers), f"{s.fwd_s + s.bwd_s:.4f}",
                      f"{s.compute_s:.3f}", f"{s.p2p_s:.3f}", f"{s.dp_sync_s:.3f}", f"{s.memory_gib:.1f}{mark}",
                      f"{s.memory_capacity_gib:g}", f"{s.memory_gib / s.memory_capacity_gib:.0%}",
                      f"{s.headroom_gib:.1f}")
    out.print(table)
    for line in report.findings:
        plain(out, line)
    for b in report.basis or []:
        plain(out, f"basis: {b.term}: {b.basis} ({b.detail})")
    if timeline:
        plain(out, timeline)


def mesh_micro_batch(plan: PlanRecord, st: StageRecord) -> int:
    """A mesh stage's micro-batch: its ranks take (dp x micro-batch) / their own dp samples (plan.Plan.stage_config)."""
    return plan.dp * plan.micro_batch_size // st.dp


def stage_summary(plan: PlanRecord) -> str:
    """Consecutive stages on one node group folded: 'site/g: 10,10 | site/h: 9,9'; a mesh plan's stages with their
    own degrees and micro-batch (dp x micro-batch / their dp, as explain's table)."""
    parts: list[tuple[str, list[int]]] = []
    for st in plan.stages:
        name = st.node_group if st.tp is None else (f"{st.node_group} (tp {st.tp} dp {st.dp} mbs "
                                                    f"{mesh_micro_batch(plan, st)} {st.recompute})")
        if parts and parts[-1][0] == name:
            parts[-1][1].append(st.layers)
        else:
            parts.append((name, [st.layers]))
    return " | ".join(f"{g}: {','.join(map(str, ls))}" for g, ls in parts)


def memory_cell(stages: list[StageResult]) -> str:
    """The fullest stage's per-GPU memory: 'used/capacity GiB (share)', e.g. '61.7/80 (77%)'."""
    s = max(stages, key=lambda s: s.memory_gib / s.memory_capacity_gib)
    return f"{s.memory_gib:.1f}/{s.memory_capacity_gib:g} ({s.memory_gib / s.memory_capacity_gib:.0%})"


def micro_batch_and_recompute(pl: PlanRecord) -> tuple[str, str]:
    """A plan record's micro-batch and recompute; a mesh plan's read 'per mesh' where its meshes differ."""
    mbs, recompute = {pl.micro_batch_size}, {pl.recompute}
    if pl.asymmetric:
        mbs, recompute = {mesh_micro_batch(pl, st) for st in pl.stages}, {st.recompute for st in pl.stages}
    return tuple(str(next(iter(v))) if len(v) == 1 else "per mesh" for v in (mbs, recompute))


def schedule_cell(pl: PlanRecord) -> str:
    """'mbs,vpp,recompute' of a plan record (the search table; its stages column has each mesh's)."""
    mbs, recompute = micro_batch_and_recompute(pl)
    return f"{mbs},{pl.vpp},{recompute}"


def degrees(pl) -> str:
    """TP/CP/PP/DP of a plan record; 'per mesh' when its stages carry their own."""
    return f"per mesh/{pl.cp}/{pl.pp}/per mesh" if pl.asymmetric else f"{pl.tp}/{pl.cp}/{pl.pp}/{pl.dp}"


def search_report(out: Console, report: SearchReport) -> None:
    """`hgplan search`: the ranked plans, what the search proved, the baselines and the idle GPUs."""
    from hgplan.report import speedup_text

    s = report.search
    table = Table("#", "tokens/s", "iter s", "MFU", "GPUs", "TP/CP/PP/DP", "mbs,vpp,recompute",
                  "stages (node group: layers)", "memory GiB (fullest)", title="plans")
    for e in report.plans:
        p, pl = e.prediction, e.plan
        table.add_row(str(e.rank), f"{p.tokens_per_s:,.0f}", f"{p.iteration_time_s:.3f}", f"{p.mfu:.1%}",
                      str(e.gpus_used), degrees(pl),
                      schedule_cell(pl), stage_summary(pl),
                      memory_cell(e.stages))
    out.print(table)
    c = s.candidates
    if s.gap_proven and s.proof is not None:
        out.print(f"search: best plan {s.iteration_time_s:.3f} s per iteration (pipeline simulator); proven bound "
                  f"{s.proof.bound_s:.3f} s on the simulated time of every plan: gap {s.gap_on_reported:.2%} "
                  f"({s.proof.solved} configurations solved, {s.proof.pruned_by_bound} pruned, "
                  f"{s.proof.skipped_by_budget} left at a weaker bound, {s.proof.chains} simulator chains added; "
                  f"{s.proof.stopped_by})")
    elif s.bound_above_reported:
        out.print(f"search: best plan {s.iteration_time_s:.3f} s per iteration (pipeline simulator), below the "
                  f"search's bound {s.bound_s:.3f} s: the simulator overlaps what the search's closed form "
                  f"serialises, so that bound says nothing of the simulated time (--prove-gap proves one; on its own "
                  f"closed-form objective, best {s.best_objective_s:.3f} s, the gap {s.relative_gap:.2%} is proven)")
    else:
        out.print(f"search: best plan {s.iteration_time_s:.3f} s per iteration (pipeline simulator); gap to the "
                  f"search's bound {s.bound_s:.3f} s: {s.shown_gap:.2%} (estimated, not proven; on its own "
                  f"closed-form objective, best {s.best_objective_s:.3f} s, the gap {s.relative_gap:.2%} is proven)")
    out.print(f"search: {c.solved} solved, {c.pruned_by_bound} pruned by bound, {c.skipped_by_budget} skipped by "
              f"budget of {c.total}; {s.stopped_by}")
    for name, b in (report.baselines or {}).items():
        if b.available:
            out.print(f"baseline {name}: {b.prediction.tokens_per_s:,.0f} tokens/s; hgplan is "
                      f"{speedup_text(b.speedup)} faster ({b.description}{'; ' + b.note if b.note else ''})")
        else:
            out.print(f"baseline {name}: not available ({b.note or ''})")
    a = report.asymmetric
    if a is not None:
        kind = "an asymmetric plan" if a.best_is_asymmetric else "a stock plan (no asymmetric plan was faster)"
        out.print(f"flagscale: the best is {kind}, {a.speedup_over_stock:.3f}x the best stock plan "
                  f"({a.stock_iteration_time_s:.3f} s; {a.stock_family or 'stock plans'}); "
                  f"mesh search: {a.candidates.solved} solved, "
                  f"{a.candidates.pruned_by_bound} pruned, {a.candidates.skipped_by_budget} skipped of "
                  f"{a.candidates.total}, bound {a.bound_s:.3f} s, proven gap {a.relative_gap:.2%}; {a.stopped_by}")
    for idle in report.idle_gpus:
        out.print(f"idle: {idle.gpus} GPUs of {idle.node_group}: {idle.reason}")
    for finding in report.findings or []:
        out.print(f"finding: {finding.message}", markup=False)


def export_summary(out: Console, ex: Export, *, written: bool) -> None:
    """`hgplan export`: the arguments, node 0's command, the notes and the files."""
    if ex.argv:
        plain(out, f"# {ex.format} arguments")
        out.file.write(" ".join(shlex.quote(a) for a in ex.argv) + "\n")
    for n in ex.nodes[:1]:
        if n.argv is not None:
            plain(out, f"# node 0 ({n.host}, {n.node_group}); {len(ex.nodes)} nodes in all")
            out.file.write(" ".join(shlex.quote(a) for a in n.argv) + "\n")
    for note in ex.notes:
        plain(out, f"# note: {note}")
    if not written:
        plain(out, f"# {len(ex.files)} files (give -o DIR to write them): {', '.join(sorted(ex.files))}")


def plan_diff(out: Console, d: dict[str, Any]) -> None:
    """`hgplan diff`: one line per changed field, then the throughput change."""
    if not d["changes"]:
        plain(out, "plans are identical")
    for c in d["changes"]:
        plain(out, f"{c['field']}: {c['a']} -> {c['b']}")
    p = d["prediction"]
    plain(out, f"tokens/s: {p['a_tokens_per_s']:,.0f} -> {p['b_tokens_per_s']:,.0f} ({p['change']:+.1%})")
