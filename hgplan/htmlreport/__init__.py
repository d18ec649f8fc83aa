"""`hgplan report`: a plan file as one self-contained HTML page (pure; the CLI writes it).

No network, no script: inline CSS and SVG only, so the file reads offline and attaches to a CI run. Every number
comes from the same evaluation `explain` prints (the pipeline simulator's iteration), and the launch section from
the same exporter `export` runs."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from hgplan.documents import IdleGpus, SearchStats
from hgplan.domain import ExportFormat
from hgplan.errors import PlanningError
from hgplan.explainer import explain
from hgplan.export.common import Export
from hgplan.htmlreport.charts import gantt_svg, memory_svg, throughput_svg
from hgplan.htmlreport.fleet import crossings, fleet_svg
from hgplan.htmlreport.page import (STYLE, basis_table, boundary_table, kpis, launch_section, stage_table, table,
                                    what_if_table)
from hgplan.planfile import LoadedPlan
from hgplan.render import micro_batch_and_recompute
from hgplan.report import speedup_text


@dataclass(frozen=True, slots=True)
class HtmlReport:
    """The page, and whether the plan fits its GPUs' memory (recomputed, not read from the file)."""

    html: str
    fits: bool


def default_format(lp: LoadedPlan) -> ExportFormat:
    """The launch target a report shows unless told: FlagScale for a plan whose stages have their own degrees (the
    only target that runs it), else the target the plan was searched for."""
    return ExportFormat.FLAGSCALE if lp.plan.asymmetric else ExportFormat(lp.file.inputs.target)


def _export(lp: LoadedPlan, fmt: ExportFormat, fits: bool) -> tuple[Export | None, str | None]:
    from hgplan.export import export_plan

    if not fits:
        return None, "the plan does not fit its GPUs' memory (see the memory chart), so `hgplan export` refuses it"
    try:
        return export_plan(fmt, lp.plan, lp.fleet, lp.model, lp.train), None
    except PlanningError as exc:
        return None, f"{fmt.value} cannot run this plan: {exc}"


def _gap_text(stats: SearchStats | None) -> tuple[str, str]:
    if stats is None:
        return "-", "gap: not from a search"
    if stats.bound_above_reported:
        return "-", "gap: the search's bound is above the simulated time and says nothing of it"
    kind = "proven" if stats.gap_proven else "estimated"
    return f"{stats.shown_gap:.1%}", f"gap to the bound ({kind})"


def _idle_list(idle: list[IdleGpus], lp: LoadedPlan) -> str:
    """The idle GPUs with their reasons, and the search's note when the global batch may be why."""
    from hgplan.planner.batch_advice import batch_finding

    if not idle:
        return '<p class="note">Every GPU of the fleet is used.</p>'
    batch = batch_finding(lp.fleet, lp.train, idle)
    return ("<ul>" + "".join(f'<li data-idle-reason="{escape(i.node_group)}">{i.gpus} GPUs of {escape(i.node_group)} '
                             f"idle: {escape(i.reason)}</li>" for i in idle) + "</ul>"
            + (f'<p class="note" data-finding="global_batch">{escape(batch.message)}</p>' if batch else ""))


def _baselines_table(lp: LoadedPlan) -> str:
    rows = []
    for name, b in lp.file.baselines.items():
        if b.available and b.prediction is not None:
            rows.append([escape(name), f"{b.prediction.tokens_per_s:,.0f}", speedup_text(b.speedup),
                         escape(b.description)])
        else:
            rows.append([escape(name), "-", "-", escape(f"not available: {b.note or b.description}")])
    if not rows:
        return '<p class="note">The plan file has no baselines (searched with --no-baselines).</p>'
    return table(["baseline", "tokens/s", "this plan is", "what it is"], rows, numeric={1, 2}, data_table="baselines")


def _head(lp: LoadedPlan, r, source: str) -> list[str]:
    """Title, settings, headline numbers and findings."""
    pred, c, t, plan = r.prediction, r.plan, r.inputs.training, lp.plan
    gap_value, gap_caption = _gap_text(lp.file.search)
    title = f"{lp.model.name} on {lp.fleet.name}"
    degrees = (f"per-stage tp and dp (hover a stage), cp {c.cp}, pp {c.pp}" if plan.asymmetric else
               f"tp {c.tp}, cp {c.cp}, pp {c.pp}, dp {c.dp}")
    mbs, recompute = micro_batch_and_recompute(c)
    out = [f"<h1>hgplan plan report: {escape(title)}</h1><p class=\"sub\">seq {t.seq_length}, global batch "
           f"{t.global_batch_size}, {escape(t.precision)}; {degrees}, micro-batch "
           f"{mbs}, vpp {c.vpp}, recompute {escape(recompute)}, ZeRO {c.zero_stage}"
           f"{', sequence parallel' if c.sequence_parallel else ''}; plan file {escape(source)}</p>",
           kpis([(f"{pred.tokens_per_s:,.0f}", "tokens/s"), (f"{pred.iteration_time_s:.3f} s", "per iteration"),
                 (f"{pred.mfu:.1%}", "MFU"), (f"{pred.bubble_fraction:.1%}", "bubble (bottleneck stage)"),
                 (f"{plan.world_size} of {lp.fleet.num_gpus}", "GPUs used"),
                 (str(pred.num_microbatches), "micro-batches"), (gap_value, gap_caption),
                 (f"{r.upper_bound.share_reached:.0%}", "of the fleet's upper bound")])]
    if not pred.fits:
        out.append(f'<p class="bad">Stage(s) {", ".join(map(str, pred.overflow_stages))} exceed GPU memory: the plan '
                   "does not fit, so its throughput and MFU are not achievable.</p>")
    out.append("<h2>Findings</h2><ul class=\"findings\">" + "".join(f"<li>{escape(f)}</li>" for f in r.findings)
               + "</ul>")
    return out


def _placement(lp: LoadedPlan, r) -> list[str]:
    """The fleet picture, the pipeline's boundaries and the idle GPUs."""
    from hgplan.planner.idle import idle_gpus

    idle = idle_gpus(lp.fleet.for_target(lp.file.inputs.target), lp.plan, lp.train)
    crossed = crossings(lp.plan, lp.fleet, tied_embeddings=not lp.model.untie_embeddings_and_output_weights)
    return ["<h2>Fleet and placement</h2>", fleet_svg(lp.fleet, lp.plan, idle, crossed),
            '<p class="note">Coloured cells are the GPUs each stage uses (S0 is the first stage); red links are '
            "crossed by the pipeline or by the tied-embedding sync. Data-parallel groups stay inside their stage's "
            "node group.</p>", boundary_table(r.boundaries) if r.boundaries else "", _idle_list(idle, lp)]


def _iteration(ex, r) -> list[str]:
    """One iteration as a Gantt chart, the stage table and memory per stage."""
    pred, vpp = r.prediction, r.plan.vpp
    return ["<h2>One iteration</h2>",
            gantt_svg(ex.ops, r.stages, iteration_s=pred.iteration_time_s, bottleneck=pred.bottleneck_stage),
            f'<p class="note">The pipeline simulator\'s schedule ({"interleaved " if vpp > 1 else ""}1F1B, '
            f"{pred.num_microbatches} micro-batches); after each stage's last backward its exposed data-parallel sync "
            "and optimizer step. Grey is idle time: the bubble.</p>", stage_table(r.stages),
            "<h2>Memory per GPU</h2>", memory_svg(r.stages)]


def build_report(lp: LoadedPlan, *, source: str, fmt: ExportFormat | None = None,
                 validation: dict | None = None) -> HtmlReport:
    """The HTML page of a checked plan file: fleet picture, one iteration, memory, throughput, what-ifs, basis and
    launch commands. Deterministic: the same plan file gives the same bytes."""
    ex = explain(lp.plan, lp.fleet, lp.model, lp.train, cluster_ref=lp.file.inputs.cluster.ref,
                 model_ref=lp.file.inputs.model.ref, timeline=True, baselines=lp.file.baselines,
                 validation=validation, target=lp.file.inputs.target)
    r, pred = ex.report, ex.report.prediction
    fmt = fmt or default_format(lp)
    export, refusal = _export(lp, fmt, pred.fits)
    inputs = lp.file.inputs
    sections = _head(lp, r, source) + _placement(lp, r) + _iteration(ex, r) + [
        "<h2>Throughput against the baselines</h2>",
        throughput_svg(pred.tokens_per_s, lp.file.baselines, r.upper_bound.tokens_per_s),
        f'<p class="note">Upper bound: {escape(r.upper_bound.definition)}.</p>', _baselines_table(lp),
        "<h2>What if</h2>", what_if_table(r.what_if),
        "<h2>What the numbers rest on</h2>", basis_table(r.basis or []),
        f"<h2>Launch ({escape(fmt.value)})</h2>", launch_section(export, refusal),
        f'<p class="note">hgplan {escape(r.hgplan_version)}; cluster {escape(inputs.cluster.ref)} (sha256 '
        f"{escape(inputs.cluster.sha256[:12])}), model {escape(inputs.model.ref)}.</p>"]
    title = escape(f"{lp.model.name} on {lp.fleet.name}")
    html = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>hgplan: {title}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(x for x in sections if x) + "\n</body></html>\n")
    return HtmlReport(html=html, fits=pred.fits)
