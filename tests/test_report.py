"""Issue 14: `hgplan report` writes one self-contained HTML page per plan file; headless Chromium (Debian's package,
installed by .ci/chromium) renders the report of a plan on every example fleet, the DOM holds every stage, link,
node group and baseline, and the screenshot is not blank."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hgplan.cli import app
from hgplan.htmlreport.fleet import link_id
from hgplan.io import catalog, resolve_cluster

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: `bash .ci/chromium` installs "
                                                            "Debian's package (as root, with apt-get)")
FLEETS = sorted(catalog().cluster_texts)
SEARCH = ["-m", "llama3.1-8b", "--seq-len", "2048", "--global-batch", "128", "--top", "1", "--time-limit", "30"]


class Dom(HTMLParser):
    """The data-* attributes of a page, each with the chart (class of the enclosing svg) it sits in."""

    def __init__(self, text: str):
        super().__init__()
        self.svg: list[str] = []
        self.found: dict[tuple[str | None, str], set[str]] = {}
        self.tags: set[str] = set()
        self.external: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "svg":
            self.svg.append(a.get("class", ""))
        for k, v in a.items():
            if k.startswith("data-"):
                self.found.setdefault((self.svg[-1] if self.svg else None, k), set()).add(v)
            if k in ("src", "href") and v and "://" in v:
                self.external.append(v)

    def handle_endtag(self, tag):
        if tag == "svg" and self.svg:
            self.svg.pop()

    def values(self, chart: str | None, attr: str) -> set[str]:
        return self.found.get((chart, attr), set())


def check_dom(html: str, plan_doc: dict, fleet) -> None:
    """Every stage in the fleet picture, the Gantt chart and the memory chart; every link, group and site of the
    fleet; every available baseline; the launch section; nothing loaded from the network and no script."""
    dom = Dom(html)
    stages = {str(i) for i in range(len(plan_doc["plan"]["stages"]))}
    for chart in ("fleet", "gantt", "memory"):
        assert dom.values(chart, "data-stage") == stages, (chart, dom.values(chart, "data-stage"))
    assert dom.values("fleet", "data-link") == {link_id(lk) for lk in fleet.links}
    assert dom.values("fleet", "data-group") == {g.key for g in fleet.groups}
    assert dom.values("fleet", "data-site") == set(fleet.sites)
    available = {n for n, b in plan_doc.get("baselines", {}).items() if b["available"]}
    assert dom.values("throughput", "data-baseline") == available
    assert dom.values(None, "data-launch")
    assert "script" not in dom.tags and "link" not in dom.tags and not dom.external


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """A plan file per example fleet (searched once for the module)."""
    folder = tmp_path_factory.mktemp("report")
    runner, out = CliRunner(), {}
    for name in FLEETS:
        path = folder / f"{name}.json"
        r = runner.invoke(app, ["search", "-c", name, *SEARCH, "-o", str(path)])
        assert r.exit_code == 0, (name, r.exit_code, r.output[-2000:])
        out[name] = path
    return out


def test_report_of_every_example_holds_every_stage_link_and_baseline(plans, tmp_path, cli):
    for name, path in plans.items():
        html_path = tmp_path / f"{name}.html"
        r = cli("report", path, "-o", html_path)
        assert r.code == 0, r.stderr
        html = html_path.read_text()
        check_dom(html, json.loads(path.read_text()), resolve_cluster(name)[0])
        assert cli("report", path, "-o", "-").stdout == html  # the same bytes again, and '-' is stdout


def test_search_report_is_the_report_of_its_plan_file(cli, tmp_path):
    args = ["search", "-c", "mixed-nic", "-m", "gpt-1.7b", "--seq-len", "1024", "--global-batch", "64", "--top", "1"]
    r = cli(*args, "-o", tmp_path / "plan.json", "--report", tmp_path / "a.html")
    assert r.code == 0, r.stderr
    assert cli("report", tmp_path / "plan.json", "-o", tmp_path / "b.html").code == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert cli(*args, "--report", tmp_path / "missing" / "r.html").code == 2  # checked before the search


def test_report_of_a_plan_that_does_not_fit_is_written_and_exits_1(cli, tmp_path, overfull_plan):
    """A hand-edited plan whose first stage takes the layers of the others: the report is written in full, marks
    the overflow, refuses the launch section, and the command exits 1."""
    edited = overfull_plan
    r = cli("report", edited, "-o", tmp_path / "r.html")
    assert r.code == 1 and "not achievable" in r.stderr, r.stderr
    html = (tmp_path / "r.html").read_text()
    assert "exceed GPU memory" in html and "does not fit" in html and 'data-launch="refused"' in html


def test_report_refuses_bad_paths_before_work(plans, cli, tmp_path):
    assert cli("report", plans["two-site"], "-o", tmp_path / "nowhere" / "r.html").code == 2
    assert cli("report", tmp_path / "absent.json", "-o", tmp_path / "r.html").code == 2
    assert not (tmp_path / "r.html").exists()


def _render(html_path: Path, tmp_path: Path) -> tuple[str, Path]:
    """Chromium's DOM of the page (after parsing, as a browser builds it) and a screenshot."""
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1320,1800"]
    dom = subprocess.run(base + ["--dump-dom", html_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / f"{html_path.stem}.png"
    r = subprocess.run(base + [f"--screenshot={shot}", html_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    return dom.stdout, shot


@needs_browser
def test_chromium_renders_the_report_of_every_example(plans, cli, tmp_path):
    from PIL import Image

    for name, path in plans.items():
        html_path = tmp_path / f"{name}.html"
        assert cli("report", path, "-o", html_path).code == 0
        dom, shot = _render(html_path, tmp_path)
        check_dom(dom, json.loads(path.read_text()), resolve_cluster(name)[0])
        image = Image.open(shot).convert("RGB")
        small = image.resize((image.width // 4, image.height // 4))
        raw = small.tobytes()
        pixels = [raw[i:i + 3] for i in range(0, len(raw), 3)]
        inked = sum(1 for p in pixels if min(p) < 200) / len(pixels)
        assert image.size == (1320, 1800) and len(set(pixels)) > 50 and inked > 0.03, (name, len(set(pixels)), inked)


def test_a_plan_file_naming_no_known_target_is_exit_2(plans, cli, tmp_path):
    """benchmarks/fuzz.py case 6511 (seed 20261123): inputs.target emptied; every command that reads the plan file
    refuses it (exit 2) instead of the report raising on the unknown launch target."""
    doc = json.loads(plans["two-site"].read_text())
    doc["inputs"]["target"] = ""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for command in (("report", bad, "-o", tmp_path / "r.html"), ("explain", bad), ("export", bad, "-f", "megatron")):
        r = cli(*command)
        assert r.code == 2 and "inputs.target" in r.stderr, (command, r.stderr)
