"""The report's page (pure): style, tables and the launch section as HTML text."""

from __future__ import annotations

import shlex
from html import escape

from hgplan.documents import BasisEntry, BoundaryRecord, StageResult, WhatIf
from hgplan.export.common import Export

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;color:#222;line-height:1.4}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin-top:0}
.kpis{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.kpi{border:1px solid #ddd;border-radius:8px;padding:8px 14px;min-width:120px}
.kpi b{display:block;font-size:20px}.kpi span{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f4f6f8}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#d62728;font-weight:bold}.note{color:#666;font-size:13px}
.basis{border-radius:4px;padding:1px 6px;font-size:12px;color:#fff}
.basis.calibrated{background:#2a7a2a}.basis.validated{background:#4e79a7}.basis.physics{background:#b07a00}
pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:10px;overflow-x:auto;font-size:12px;
white-space:pre-wrap;word-break:break-all}
details{margin:4px 0}summary{cursor:pointer;font-family:monospace;font-size:13px}
ul.findings li{margin:3px 0}
@media print{details{display:block}}
"""


def table(headers: list[str], rows: list[list[str]], *, numeric: set[int] = frozenset(), **attrs: str) -> str:
    """An HTML table of already-escaped cells (columns in `numeric` right-aligned)."""
    extra = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in attrs.items())
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table{extra}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def kpis(items: list[tuple[str, str]]) -> str:
    """Headline numbers as boxes: (value, caption)."""
    return '<div class="kpis">' + "".join(f'<div class="kpi"><b>{escape(v)}</b><span>{escape(c)}</span></div>'
                                           for v, c in items) + "</div>"


def stage_table(stages: list[StageResult]) -> str:
    """Per stage: where it runs, its layers, times and memory."""
    rows = []
    for s in stages:
        share = s.memory_gib / s.memory_capacity_gib
        mem = f"{s.memory_gib:.1f} / {s.memory_capacity_gib:g} GiB ({share:.0%})"
        rows.append([f"S{s.index}", escape(s.node_group), escape(s.gpu), str(s.gpus), str(s.layers),
                     f"{s.fwd_s * 1e3:.2f}", f"{s.bwd_s * 1e3:.2f}", f"{s.compute_s:.3f}", f"{s.p2p_s:.3f}",
                     f"{s.dp_sync_s:.3f}", f"{s.optimizer_s:.3f}",
                     mem if s.fits else f'<span class="bad">{mem}: does not fit</span>'])
    return table(["stage", "node group", "GPU", "GPUs", "layers", "fwd ms/mb", "bwd ms/mb", "compute s", "sends s",
                  "exposed DP sync s", "optimizer s", "memory per GPU"], rows, numeric=set(range(3, 12)),
                 data_table="stages")


def boundary_table(boundaries: list[BoundaryRecord]) -> str:
    """Per stage boundary: the path it takes and what one message costs."""
    rows = [[f"S{b.from_stage}\u2192S{b.to_stage}", escape(b.path), escape(b.transport or "-"),
             f"{b.message_mib:.1f}", f"{b.send_s * 1e3:.3f}", f"{b.latency_s * 1e3:.3f}"] for b in boundaries]
    return table(["boundary", "path", "transport", "message MiB", "send ms", "latency ms"], rows,
                 numeric={3, 4, 5}, data_table="boundaries")


def what_if_table(ifs: list[WhatIf]) -> str:
    """The binding resources and what improving each gives."""
    if not ifs:
        return ('<p class="note">No resource costs more than half a percent of the step that a what-if could '
                "relieve.</p>")
    rows = [[escape(w.resource), f"{w.share_of_step:.1%}", escape(w.what_if), f"{w.speedup:+.1%}"] for w in ifs]
    return table(["resource", "share of the step", "what if", "speed-up"], rows, numeric={1, 3}, data_table="what-if")


def basis_table(entries: list[BasisEntry]) -> str:
    """What each term of the prediction rests on."""
    rows = [[escape(e.term), f'<span class="basis {e.basis}">{e.basis}</span>', escape(e.detail)] for e in entries]
    return table(["term", "basis", "detail"], rows, data_table="basis")


def _command(env: dict[str, str] | None, argv: list[str]) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    return (prefix + " \\\n  " if prefix else "") + " ".join(shlex.quote(a) for a in argv)


def launch_section(ex: Export | None, refusal: str | None) -> str:
    """The export target's arguments, each node's command and every file it writes."""
    if ex is None:
        return f'<p class="bad" data-launch="refused">{escape(refusal or "")}</p>'
    parts = [f'<div data-launch="{escape(ex.format)}">']
    if ex.argv:
        args = " ".join(shlex.quote(a) for a in ex.argv)
        parts.append(f"<p>{escape(ex.format)} arguments:</p><pre>{escape(args)}</pre>")
    rows = [[escape(n.host), str(n.node_rank), escape(n.node_group), str(n.nproc), str(n.first_rank)] for n in ex.nodes]
    if rows:
        parts.append(table(["host", "node rank", "node group", "GPUs", "first rank"], rows, numeric={1, 3, 4},
                           data_table="nodes"))
    for n in ex.nodes:
        if n.argv is not None:
            parts.append(f"<details{' open' if n.node_rank == 0 else ''}><summary>node {n.node_rank} "
                         f"({escape(n.host)}) command</summary><pre>{escape(_command(n.env, n.argv))}</pre></details>")
    parts += [f'<p class="note">note: {escape(x)}</p>' for x in ex.notes]
    parts += [f'<p class="bad">warning: {escape(x)}</p>' for x in ex.warnings]
    parts.append(f"<p>{len(ex.files)} files (<code>hgplan export PLAN -f {escape(ex.format)} -o DIR</code> writes "
                 "them):</p>")
    parts += [f"<details><summary>{escape(name)}</summary><pre>{escape(body)}</pre></details>"
              for name, body in sorted(ex.files.items())]
    parts.append("</div>")
    return "".join(parts)
