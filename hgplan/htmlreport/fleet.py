"""The fleet as a picture (pure): sites, node groups and links, with the plan's stages drawn on the GPUs they use,
the idle GPUs with their reason, and the links the pipeline and the tied-embedding sync cross."""

from __future__ import annotations

from dataclasses import dataclass

from hgplan.documents import IdleGpus
from hgplan.domain import Fleet, Link, NodeGroup
from hgplan.htmlreport.svg import ACCENT, IDLE, INK, MUTED, attrs, rect, stage_colour, svg, text
from hgplan.plan import Plan

GROUP_W, GROUP_H, GROUP_GAP = 300.0, 108.0, 12.0
PAD, TITLE_H, GUTTER, LINE_H = 14.0, 34.0, 28.0, 16.0
SITE_GAP = 170.0
BAR_W = GROUP_W - 20
LEVEL_H = 30.0


def link_id(lk: Link) -> str:
    """A link's name in the report's DOM (data-link) and legends: 'a<->b'."""
    return f"{lk.a}<->{lk.b}"


def crossings(plan: Plan, fleet: Fleet, *, tied_embeddings: bool) -> dict[str, list[str]]:
    """Per link (link_id), what of the plan crosses it: pipeline boundaries and the tied-embedding sync between the
    first and the last stage. Data-parallel groups never cross a link: a stage sits in one node group."""
    out: dict[str, list[str]] = {}

    def cross(a: str, b: str, what: str) -> None:
        path = fleet.path(fleet.group(a), fleet.group(b))
        if path is not None and path.link is not None:
            out.setdefault(link_id(path.link), []).append(what)

    stages = plan.stages
    for i in range(len(stages) - 1):
        cross(stages[i].node_group, stages[i + 1].node_group, f"pipeline S{i}\u2192S{i + 1}")
    if plan.config.vpp > 1 and len(stages) > 1:
        cross(stages[-1].node_group, stages[0].node_group, f"interleaving wrap S{len(stages) - 1}\u2192S0")
    if tied_embeddings and len(stages) > 1:
        cross(stages[0].node_group, stages[-1].node_group, f"tied-embedding sync S0\u2194S{len(stages) - 1}")
    return out


@dataclass(frozen=True, slots=True)
class _Site:
    name: str
    x: float
    groups: tuple[NodeGroup, ...]
    links: tuple[Link, ...]

    @property
    def gutter(self) -> float:
        return GUTTER if self.links else 0.0

    @property
    def width(self) -> float:
        return GROUP_W + 2 * PAD + self.gutter

    def height(self) -> float:
        return TITLE_H + len(self.groups) * (GROUP_H + GROUP_GAP) + len(self.links) * LINE_H + PAD

    def group_y(self, i: int) -> float:
        return TITLE_H + i * (GROUP_H + GROUP_GAP)


def _group_box(g: NodeGroup, x: float, y: float, plan: Plan, idle: IdleGpus | None) -> list[str]:
    """One node group: what it is, and a bar of its GPUs split by the stages on it (and the idle rest)."""
    out = [f"<g {attrs(data_group=g.key)}>", rect(x, y, GROUP_W, GROUP_H, "#fff", stroke="#999", rx=6),
           text(x + 10, y + 20, f"{g.name} \u00b7 {g.gpu.id}", weight="bold"),
           text(x + 10, y + 38, f"{g.num_nodes} nodes \u00d7 {g.gpus_per_node} GPUs = {g.num_gpus} GPUs, "
                                f"{g.gpu.hbm_gib:g} GiB each", size=11, fill=MUTED),
           text(x + 10, y + 54, f"{g.nic_transport.value}, {g.nic_count} \u00d7 {g.nic_gbps:g} Gbit/s per node; "
                                f"{g.intra_node_kind} inside", size=11, fill=MUTED)]
    bx, by, used = x + 10, y + 64, 0
    for i, st in enumerate(plan.stages):
        if st.node_group != g.key:
            continue
        gpus, cfg = plan.stage_gpus(i), plan.stage_config(i)
        w = BAR_W * gpus / g.num_gpus
        out.append(f"<g {attrs(data_stage=i)}>" + rect(
            bx, by, w, 18, stage_colour(i), stroke="#fff",
            title=f"stage {i}: {gpus} GPUs (tp {cfg.tp} x cp {cfg.cp} x dp {cfg.dp}), {st.num_layers} layers"))
        if w >= 24:
            out.append(text(bx + w / 2, by + 13, f"S{i}", size=11, anchor="middle", fill="#fff", weight="bold"))
        out.append("</g>")
        bx, used = bx + w, used + gpus
    rest = g.num_gpus - used
    if rest > 0:
        why = idle.reason if idle is not None else "not used by this plan"
        out.append(f"<g {attrs(data_idle=g.key)}>" + rect(bx, by, x + 10 + BAR_W - bx, 18, IDLE, stroke="#fff",
                                                           title=f"{rest} idle GPUs: {why}") + "</g>")
    caption = f"{used} GPUs used" + (f", {rest} idle" if rest else "")
    out.append(text(x + 10, y + 98, caption, size=11, fill=ACCENT if rest else MUTED))
    out.append("</g>")
    return out


def _site_box(site: _Site, top: float, height: float, plan: Plan, idle: dict[str, IdleGpus],
              crossed: dict[str, list[str]]) -> list[str]:
    x = site.x
    out = [f"<g {attrs(data_site=site.name)}>", rect(x, top, site.width, height, "#f6f8fb", stroke="#8aa", rx=10),
           text(x + PAD, top + 22, f"site {site.name}", size=14, weight="bold"), "</g>"]
    gx = x + PAD + site.gutter
    for i, g in enumerate(site.groups):
        out += _group_box(g, gx, top + site.group_y(i), plan, idle.get(g.key))
    names = [g.name for g in site.groups]
    for k, lk in enumerate(site.links):  # a link between two islands of the site: a bracket in the gutter
        ya, yb = (top + site.group_y(names.index(n)) + GROUP_H / 2 for n in (lk.a, lk.b))
        cx, hot = x + PAD + site.gutter / 2, link_id(lk) in crossed
        colour, width = (ACCENT, 3) if hot else (MUTED, 1.5)
        out.append(f"<g {attrs(data_link=link_id(lk))}>")
        bracket = attrs(d=f"M{gx} {ya} H{cx} V{yb} H{gx}", fill="none", stroke=colour, stroke_width=width)
        out.append(f"<path {bracket}/>")
        label = f"{lk.a} \u2194 {lk.b}: {lk.gbps:g} Gbit/s, {lk.latency_ms:g} ms, {lk.transport.value}"
        if hot:
            label += " \u2014 " + ", ".join(crossed[link_id(lk)])
        ly = top + site.height() - PAD - (len(site.links) - 1 - k) * LINE_H - 4
        out.append(text(x + PAD, ly, label, size=11, fill=ACCENT if hot else MUTED))
        out.append("</g>")
    return out


def _levels(pairs: list[tuple[int, int]]) -> list[int]:
    """A row below the sites for each link between sites that are not neighbours, so that none overlap."""
    taken: list[list[tuple[int, int]]] = []
    out = []
    for a, b in pairs:
        level = next((k for k, row in enumerate(taken) if all(b <= c or d <= a for c, d in row)), len(taken))
        if level == len(taken):
            taken.append([])
        taken[level].append((a, b))
        out.append(level)
    return out


def _site_link(lk: Link, sa: _Site, sb: _Site, top: float, bottom: float, level: int | None,
               crossed: dict[str, list[str]]) -> list[str]:
    """A link between two sites: straight between neighbours, below the sites otherwise."""
    hot = link_id(lk) in crossed
    colour, width = (ACCENT, 4) if hot else (MUTED, 2)
    left, right = (sa, sb) if sa.x < sb.x else (sb, sa)
    label = f"{lk.gbps:g} Gbit/s \u00b7 {lk.latency_ms:g} ms"
    if level is None:
        y = top + 70
        x1, x2 = left.x + left.width, right.x
        d = f"M{x1} {y} H{x2}"
        lx, ly = (x1 + x2) / 2, y - 10
    else:
        y = bottom + 26 + level * LEVEL_H
        x1, x2 = left.x + left.width / 2, right.x + right.width / 2
        d = f"M{x1} {bottom} V{y} H{x2} V{bottom}"
        lx, ly = (x1 + x2) / 2, y - 6
    out = [f"<g {attrs(data_link=link_id(lk))}>",
           f"<path {attrs(d=d, fill='none', stroke=colour, stroke_width=width)}><title>"
           f"{lk.a} \u2194 {lk.b}: {label}, {lk.transport.value}</title></path>",
           text(lx, ly, label, size=11, anchor="middle", fill=INK)]
    for k, what in enumerate(crossed.get(link_id(lk), [])):
        out.append(text(lx, (y + 16 if level is None else y + 14) + k * 14, what, size=11, anchor="middle",
                        fill=ACCENT))
    out.append("</g>")
    return out


def fleet_svg(fleet: Fleet, plan: Plan, idle: list[IdleGpus], crossed: dict[str, list[str]]) -> str:
    """The fleet with the plan drawn on it."""
    sites, x = [], 10.0
    for name in fleet.sites:
        groups = tuple(g for g in fleet.groups if g.site == name)
        names = {g.name for g in groups}
        links = tuple(lk for lk in fleet.links if lk.scope == "group" and {lk.a, lk.b} <= names)
        site = _Site(name, x, groups, links)
        sites.append(site)
        x += site.width + SITE_GAP
    top, height = 10.0, max(s.height() for s in sites)
    bottom = top + height
    index = {s.name: i for i, s in enumerate(sites)}
    between = [lk for lk in fleet.links if lk.scope == "site"]
    far = [lk for lk in between if abs(index[lk.a] - index[lk.b]) > 1]
    levels = dict(zip(map(link_id, far), _levels([tuple(sorted((index[lk.a], index[lk.b]))) for lk in far])))
    body = []
    for s in sites:
        body += _site_box(s, top, height, plan, {i.node_group: i for i in idle}, crossed)
    for lk in between:
        body += _site_link(lk, sites[index[lk.a]], sites[index[lk.b]], top, bottom, levels.get(link_id(lk)), crossed)
    rows = max(levels.values()) + 1 if levels else 0
    extra = max((len(crossed.get(link_id(lk), [])) for lk in far), default=0) * 14
    total_h = bottom + (26 + rows * LEVEL_H + extra if rows else 0) + 10
    return svg(x - SITE_GAP + 10, total_h, body, label=f"fleet {fleet.name} with the plan's stages", class_="fleet")
