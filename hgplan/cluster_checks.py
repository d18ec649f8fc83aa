"""Cross-reference checks of a cluster file that its schema cannot express (names, links, reachability).

They work on the raw parsed YAML and tolerate bad structure (the schema reports that), so every problem of a file
is found in one pass. One function per check; each adds issues located by file line and key path.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from hgplan.errors import InputIssue
from hgplan.yamlio import Path_, dotted, line_for

if TYPE_CHECKING:
    from hgplan.inputs import Catalog


def suggest(name: str, known: list[str]) -> str:
    """'did you mean ...? ' for names that start like `name` or are close to it ('' when none is)."""
    prefix = [k for k in known if k.lower().startswith(name.lower())]
    close = (prefix + [c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.4) if c not in prefix])[:3]
    return f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""


def _items(parent: Any, key: str) -> list:
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, list) else []


class ClusterChecks:
    """Collects issues and warnings of one cluster document."""

    def __init__(self, lines: dict[Path_, int], source: str, catalog: Catalog):
        self.lines, self.source, self.catalog = lines, source, catalog
        self.issues: list[InputIssue] = []
        self.warnings: list[str] = []

    def add(self, path: Path_, message: str) -> None:
        """An issue at a key path (its line found from the YAML)."""
        self.issues.append(InputIssue(source=self.source, line=line_for(self.lines, path), path=dotted(path),
                                      message=message))

    def gpu(self, path: Path_, gpu: Any) -> None:
        """A node group's GPU: a known catalog id with published figures, or an inline spec with a known arch."""
        cat = self.catalog
        if isinstance(gpu, str):
            if gpu not in cat.gpus:
                known = sorted(cat.gpus)
                self.add(path, f"unknown GPU id '{gpu}'; {suggest(gpu, known)}known ids: {', '.join(known)} "
                               "(or give an inline GPU spec; see `hgplan profiles list gpus`)")
            elif cat.gpus[gpu].bf16_tflops is None and cat.gpus[gpu].fp16_tflops is None:
                self.add(path, f"GPU '{gpu}' has no published tensor TFLOP/s in the catalog ({cat.gpus[gpu].source}); "
                               "give an inline GPU spec with bf16_tflops/fp16_tflops from a source you trust")
        elif isinstance(gpu, dict):
            arch = gpu.get("arch")
            if isinstance(arch, str) and arch not in cat.archs:
                self.add((*path, "arch"), f"unknown arch '{arch}'; {suggest(arch, sorted(cat.archs))}"
                                          f"known: {', '.join(sorted(cat.archs))}")
            if gpu.get("bf16_tflops") is None and gpu.get("fp16_tflops") is None:
                self.add(path, "inline GPU spec needs bf16_tflops or fp16_tflops")

    def node_groups(self, si: int, site: dict, sname: Any) -> dict[str, str | None]:
        """Unique group names, one host name per node, known GPUs. Returns each group's NIC transport."""
        transports: dict[str, str | None] = {}
        for gi, grp in enumerate(_items(site, "node_groups")):
            if not isinstance(grp, dict):
                continue
            path = ("sites", si, "node_groups", gi)
            gname = grp.get("name")
            if isinstance(gname, str):
                if gname in transports:
                    self.add((*path, "name"), f"duplicate node group name '{gname}' in site '{sname}'")
                nics = grp.get("nics")
                transports[gname] = nics.get("transport") if isinstance(nics, dict) else None
            hosts = grp.get("hosts")
            if isinstance(hosts, list) and type(grp.get("count")) is int and len(hosts) != grp["count"]:
                self.add((*path, "hosts"), f"lists {len(hosts)} host names but count is {grp['count']}; give one host "
                                           "name per node")
            self.gpu((*path, "gpu"), grp.get("gpu"))
        return transports

    def group_links(self, si: int, site: dict, sname: Any, transports: dict[str, str | None]) -> None:
        """Links inside a site join two different, known groups once; groups of different transports need one."""
        linked: set[frozenset[str]] = set()
        for li, lk in enumerate(_items(site, "links")):
            if not isinstance(lk, dict) or not isinstance(lk.get("between"), (list, tuple)):
                continue
            path = ("sites", si, "links", li, "between")
            pair = [x for x in lk["between"] if isinstance(x, str)]
            for k, x in enumerate(pair):
                if x not in transports:
                    self.add((*path, k), f"unknown node group '{x}' in site '{sname}'; {suggest(x, list(transports))}"
                                         f"groups here: {', '.join(transports) or '(none)'}")
            if len(pair) == 2 and pair[0] == pair[1]:
                self.add(path, f"a link must join two different node groups (got '{pair[0]}' twice)")
            if len(pair) == 2:
                if frozenset(pair) in linked:
                    self.add(path, f"duplicate link between '{pair[0]}' and '{pair[1]}'")
                linked.add(frozenset(pair))
        names = list(transports)
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                tx, ty = transports[x], transports[y]
                if tx and ty and tx != ty and frozenset((x, y)) not in linked:
                    self.add(("sites", si, "node_groups"),
                             f"node groups '{x}' ({tx}) and '{y}' ({ty}) in site '{sname}' have no link: different "
                             f"transports cannot share one fabric; add under sites[{si}].links: "
                             f"{{between: [{x}, {y}], gbps: ..., latency_ms: ..., transport: ethernet}}")

    def sites(self, data: dict) -> list[str]:
        """Unique site names, and each site's groups and links. Returns the site names."""
        names: list[str] = []
        for si, site in enumerate(_items(data, "sites")):
            if not isinstance(site, dict):
                continue
            sname = site.get("name")
            if isinstance(sname, str):
                if sname in names:
                    self.add(("sites", si, "name"), f"duplicate site name '{sname}': site names must be unique")
                names.append(sname)
            self.group_links(si, site, sname, self.node_groups(si, site, sname))
        return names

    def site_links(self, data: dict, site_names: list[str]) -> set[frozenset[str]]:
        """Links between sites join two different, known sites once. Returns the linked pairs."""
        pairs: set[frozenset[str]] = set()
        for li, lk in enumerate(_items(data, "links")):
            if not isinstance(lk, dict) or not isinstance(lk.get("between"), (list, tuple)):
                continue
            pair = [x for x in lk["between"] if isinstance(x, str)]
            for k, x in enumerate(pair):
                if x not in site_names:
                    self.add(("links", li, "between", k), f"unknown site '{x}'; {suggest(x, site_names)}"
                                                          f"sites: {', '.join(site_names) or '(none)'}")
            if len(pair) == 2 and pair[0] == pair[1]:
                self.add(("links", li, "between"), f"a link must join two different sites (got '{pair[0]}' twice)")
            elif len(pair) == 2 and all(x in site_names for x in pair):
                if frozenset(pair) in pairs:
                    self.add(("links", li, "between"), f"duplicate link between '{pair[0]}' and '{pair[1]}'")
                pairs.add(frozenset(pair))
        return pairs

    def reachability(self, site_names: list[str], pairs: set[frozenset[str]]) -> None:
        """Every site is reachable from the first (an error); unlinked pairs of sites are a warning."""
        reach, frontier = {site_names[0]}, [site_names[0]]
        while frontier:
            s = frontier.pop()
            for p in pairs:
                if s in p:
                    (other,) = p - {s}
                    if other not in reach:
                        reach.add(other)
                        frontier.append(other)
        unreached = [s for s in site_names if s not in reach]
        if unreached:
            self.add(("links",), f"sites {', '.join(unreached)} are not linked to '{site_names[0]}': add a links entry "
                                 "{between: [A, B], gbps: ..., latency_ms: ...} so every site is reachable")
            return
        for i, x in enumerate(site_names):
            for y in site_names[i + 1:]:
                if frozenset((x, y)) not in pairs:
                    self.warnings.append(f"no link between sites '{x}' and '{y}': pipeline stages on them are never "
                                         "placed next to each other")


def cluster_semantics(data: dict, lines: dict[Path_, int], source: str,
                      catalog: Catalog) -> tuple[list[InputIssue], list[str]]:
    """Every cross-reference issue of a cluster document, and its warnings."""
    checks = ClusterChecks(lines, source, catalog)
    site_names = checks.sites(data)
    pairs = checks.site_links(data, site_names)
    if len(site_names) > 1 and not checks.issues:
        checks.reachability(site_names, pairs)
    return checks.issues, checks.warnings
