"""The report's charts (pure): one iteration as a Gantt chart per stage, memory per stage against capacity, and
throughput against the baselines and the fleet's upper bound."""

from __future__ import annotations

from hgplan.costmodel.pipeline import Op
from hgplan.documents import BaselineRecord, StageResult
from hgplan.htmlreport.svg import (ACCENT, IDLE, INK, MEMORY_COLOURS, MUTED, OP_COLOURS, attrs, axis, merge_intervals,
                                   rect, stage_colour, svg, text)

LABEL_W, PLOT_W, ROW_H, BAR_H = 190.0, 900.0, 26.0, 18.0
OP_NAMES = {"F": "forward", "B": "backward", "send": "send to the neighbour stage", "dp_sync": "exposed data-parallel "
            "sync", "optimizer": "optimizer step"}


def _legend(x: float, y: float, entries: list[tuple[str, str]]) -> list[str]:
    out = []
    for name, colour in entries:
        out += [rect(x, y - 10, 12, 12, colour), text(x + 16, y, name, size=11)]
        x += 24 + 6.5 * len(name)
    return out


def stage_intervals(ops: tuple[Op, ...], stages: list[StageResult]) -> list[dict[str, list[tuple[float, float]]]]:
    """Per stage, the intervals of each kind of work in one iteration: forwards, backwards, sends, then after its
    last backward the exposed data-parallel sync and the optimizer step (as the cost model adds them)."""
    out: list[dict[str, list[tuple[float, float]]]] = [{k: [] for k in OP_COLOURS} for _ in stages]
    finish = [0.0] * len(stages)
    for o in ops:
        out[o.stage][o.kind].append((o.start_s, o.end_s))
        if o.send_s > 0:
            out[o.stage]["send"].append((o.end_s, o.end_s + o.send_s))
        finish[o.stage] = max(finish[o.stage], o.end_s)
    for s, st in enumerate(stages):
        out[s]["dp_sync"].append((finish[s], finish[s] + st.dp_sync_s))
        out[s]["optimizer"].append((finish[s] + st.dp_sync_s, finish[s] + st.dp_sync_s + st.optimizer_s))
    return out


def gantt_svg(ops: tuple[Op, ...], stages: list[StageResult], *, iteration_s: float, bottleneck: int) -> str:
    """One iteration per stage: forward, backward, sends, the data-parallel/optimizer tail; the grey is bubble."""
    scale = PLOT_W / iteration_s
    per_stage = stage_intervals(ops, stages)
    body = _legend(LABEL_W, 14, [(OP_NAMES[k].split(" to ")[0], c) for k, c in OP_COLOURS.items()] + [("idle", IDLE)])
    top = 28.0
    for s, (st, kinds) in enumerate(zip(stages, per_stage)):
        y = top + s * ROW_H
        busy = sum(b - a for k in kinds.values() for a, b in k)
        idle = max(0.0, 1 - busy / iteration_s)
        hot = s == bottleneck
        body.append(f"<g {attrs(data_stage=s, data_idle_share=f'{idle:.4f}')}>")
        body.append(rect(6, y + 4, 10, BAR_H - 4, stage_colour(s)))
        body.append(text(20, y + 16, f"S{s} {st.gpu}", size=11, weight="bold" if hot else None,
                         fill=ACCENT if hot else INK))
        body.append(rect(LABEL_W, y + 2, PLOT_W, BAR_H, IDLE, stroke=ACCENT if hot else None,
                         stroke_width=2 if hot else None, title=f"stage {s}: idle {idle:.1%} of the iteration"))
        for kind, intervals in kinds.items():
            for a, b in merge_intervals([iv for iv in intervals if iv[1] > iv[0]], 0.5 / scale):
                body.append(rect(LABEL_W + a * scale, y + 2, max((b - a) * scale, 0.6), BAR_H, OP_COLOURS[kind],
                                 title=f"S{s} {kind}: {a:.3f}-{b:.3f} s"))
        body.append(text(LABEL_W + PLOT_W + 8, y + 16, f"idle {idle:.0%}" + (", bottleneck" if hot else ""), size=11,
                         fill=ACCENT if hot else MUTED, weight="bold" if hot else None))
        body.append("</g>")
    y_axis = top + len(stages) * ROW_H + 6
    body += axis(LABEL_W, y_axis, PLOT_W, iteration_s, " s")
    return svg(LABEL_W + PLOT_W + 150, y_axis + 26, body, label="one iteration per pipeline stage", class_="gantt")


def memory_svg(stages: list[StageResult]) -> str:
    """Per stage, per-GPU memory by kind as a stacked bar against the GPU's capacity."""
    top_gib = max(max(s.memory_capacity_gib, s.memory_gib) for s in stages)
    scale = PLOT_W / top_gib
    body = _legend(LABEL_W, 14, list(MEMORY_COLOURS.items()) + [("capacity", INK)])
    top = 28.0
    for s, st in enumerate(stages):
        y = top + s * ROW_H
        m = st.memory
        parts = [("weights", m.weights_gib), ("gradients", m.gradients_gib), ("optimizer", m.optimizer_gib),
                 ("activations", m.activations_gib), ("reserve", m.overhead_gib)]
        body.append(f"<g {attrs(data_stage=s, data_memory_gib=f'{st.memory_gib:.2f}')}>")
        body.append(rect(6, y + 4, 10, BAR_H - 4, stage_colour(s)))
        body.append(text(20, y + 16, f"S{s} {st.gpu}", size=11))
        x = LABEL_W
        for name, gib in parts:
            body.append(rect(x, y + 2, gib * scale, BAR_H, MEMORY_COLOURS[name],
                             title=f"stage {s} {name}: {gib:.2f} GiB"))
            x += gib * scale
        cap_x = LABEL_W + st.memory_capacity_gib * scale
        body.append(f"<line {attrs(x1=cap_x, y1=y, x2=cap_x, y2=y + BAR_H + 4, stroke=INK, stroke_width=2)}/>")
        share = st.memory_gib / st.memory_capacity_gib
        label = f"{st.memory_gib:.1f} / {st.memory_capacity_gib:g} GiB ({share:.0%})"
        body.append(text(LABEL_W + PLOT_W + 8, y + 16, label + ("" if st.fits else " does not fit"), size=11,
                         fill=INK if st.fits else ACCENT, weight=None if st.fits else "bold"))
        body.append("</g>")
    height = top + len(stages) * ROW_H + 8
    return svg(LABEL_W + PLOT_W + 190, height, body, label="memory per GPU of each stage", class_="memory")


def throughput_svg(tokens_per_s: float, baselines: dict[str, BaselineRecord], upper_tokens_per_s: float) -> str:
    """Tokens/s of the plan and of each available baseline, with the fleet's upper bound as a line."""
    rows = [("this plan", tokens_per_s, None)]
    rows += [(name, b.prediction.tokens_per_s, name) for name, b in baselines.items()
             if b.available and b.prediction is not None]
    top_rate = max([upper_tokens_per_s] + [r[1] for r in rows])
    scale = PLOT_W / top_rate
    body, top = [], 8.0
    for k, (name, rate, baseline) in enumerate(rows):
        y = top + k * ROW_H
        body.append(f"<g {attrs(data_baseline=baseline)}>" if baseline else "<g data-plan=\"best\">")
        body.append(text(6, y + 16, name, size=11, weight="bold" if baseline is None else None))
        body.append(rect(LABEL_W, y + 2, rate * scale, BAR_H, stage_colour(0) if baseline is None else "#9aa7b8",
                         title=f"{name}: {rate:,.0f} tokens/s"))
        body.append(text(LABEL_W + rate * scale + 6, y + 16, f"{rate:,.0f} tokens/s", size=11))
        body.append("</g>")
    ux = LABEL_W + upper_tokens_per_s * scale
    bottom = top + len(rows) * ROW_H + 4
    body.append(f"<line {attrs(x1=ux, y1=top, x2=ux, y2=bottom, stroke=ACCENT, stroke_dasharray='4 3')}/>")
    body.append(text(ux, bottom + 14, f"fleet upper bound {upper_tokens_per_s:,.0f}", size=11, anchor="end",
                     fill=ACCENT))
    return svg(LABEL_W + PLOT_W + 130, bottom + 22, body, label="throughput against the baselines",
               class_="throughput")
