"""Small SVG building blocks for the HTML report (pure): escaped text, rectangles, colours and a time axis."""

from __future__ import annotations

import math
from html import escape

STAGE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#86bcb6", "#d37295", "#8cd17d")
"""One colour per pipeline stage (cycled past twelve), the same in every picture of a report."""
OP_COLOURS = {"F": "#4e79a7", "B": "#59a14f", "send": "#f28e2b", "dp_sync": "#e15759", "optimizer": "#b07aa1"}
MEMORY_COLOURS = {"weights": "#4e79a7", "gradients": "#76b7b2", "optimizer": "#b07aa1", "activations": "#f28e2b",
                  "reserve": "#bab0ac"}
IDLE = "#e9e9e9"
INK = "#222"
MUTED = "#666"
ACCENT = "#d62728"


def stage_colour(stage: int) -> str:
    """The colour of pipeline stage `stage`."""
    return STAGE_COLOURS[stage % len(STAGE_COLOURS)]


def num(x: float) -> str:
    """A coordinate with two decimals at most (short, stable text)."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def attrs(**kw) -> str:
    """Keyword arguments as SVG/HTML attributes (trailing _ dropped, _ -> -; None skipped), escaped."""
    parts = []
    for k, v in kw.items():
        if v is None:
            continue
        name = k.rstrip("_").replace("_", "-")
        parts.append(f'{name}="{escape(num(v) if isinstance(v, float) else str(v))}"')
    return " ".join(parts)


def rect(x: float, y: float, w: float, h: float, fill: str, *, title: str | None = None, **kw) -> str:
    """A rectangle, with a hover title when given."""
    tip = f"<title>{escape(title)}</title>" if title else ""
    body = attrs(x=float(x), y=float(y), width=float(max(w, 0.0)), height=float(h), fill=fill, **kw)
    return f"<rect {body}>{tip}</rect>" if tip else f"<rect {body}/>"


def text(x: float, y: float, content: str, *, size: int = 12, anchor: str = "start", weight: str | None = None,
         fill: str = INK, **kw) -> str:
    """A line of text."""
    head = attrs(x=float(x), y=float(y), font_size=size, text_anchor=anchor, font_weight=weight, fill=fill, **kw)
    return f"<text {head}>{escape(content)}</text>"


def svg(width: float, height: float, body: list[str], *, label: str, **kw) -> str:
    """An SVG element that scales to the page's width and keeps its aspect ratio."""
    head = attrs(xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {num(width)} {num(height)}", role="img",
                 aria_label=label, font_family="system-ui, sans-serif", **kw)
    return f"<svg {head} style=\"max-width:{num(width)}px;width:100%;height:auto\">{''.join(body)}</svg>"


def nice_step(span: float, ticks: int = 8) -> float:
    """A round tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def axis(x0: float, y: float, width: float, span: float, unit: str) -> list[str]:
    """A horizontal axis from 0 to `span` drawn `width` wide at height y, with round ticks."""
    step = nice_step(span)
    out = [f"<line {attrs(x1=float(x0), y1=float(y), x2=float(x0 + width), y2=float(y), stroke=MUTED)}/>"]
    k = 0
    while k * step <= span * (1 + 1e-9):
        x = x0 + width * k * step / span
        out.append(f"<line {attrs(x1=float(x), y1=float(y), x2=float(x), y2=float(y + 4), stroke=MUTED)}/>")
        out.append(text(x, y + 16, f"{k * step:g}{unit}", size=10, anchor="middle", fill=MUTED))
        k += 1
    return out


def merge_intervals(intervals: list[tuple[float, float]], min_gap: float) -> list[tuple[float, float]]:
    """Intervals sorted and joined where the gap between them is below `min_gap` (what a pixel cannot show)."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a - out[-1][1] < min_gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]
