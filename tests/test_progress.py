"""Issue 14: search progress that means something. Not on a terminal (CI): a line on stderr every 5 s with the phase,
the share done, best, bound, gap and time left, nothing on stdout; on a terminal: a live display of the phases whose
counts reach their totals; --quiet silences both."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

from rich.console import Console

from hgplan.cli import progress as cli_progress
from hgplan.documents import ClusterInput
from hgplan.inputs import make_training
from hgplan.io import resolve_cluster, resolve_model
from hgplan.planner.api import plan_training
from hgplan.planner.options import SearchOptions
from hgplan.planner.progress import Progress

SMALL = ["search", "-c", "mixed-nic", "-m", "gpt-1.7b", "--seq-len", "1024", "--global-batch", "64", "--top", "1",
         "--no-baselines"]
LINE = re.compile(r"^search: .*, (\d+) s elapsed, (\d+) s left$")


def test_the_line_names_phase_share_best_bound_gap_and_time():
    line = cli_progress.progress_line(Progress("search", 41, 100, "configurations settled", 11.08, 11.04),
                                      elapsed_s=8.2, left_s=12.4)
    assert line == ("search: searching the fleet: 41% of 100 configurations settled, best 11.080 s, bound 11.040 s, "
                    "gap 0.4%, 8 s elapsed, 12 s left")
    assert cli_progress.progress_line(None, elapsed_s=5, left_s=-1).endswith("5 s elapsed, 0 s left")


def test_phases_come_in_order_and_their_counts_reach_their_totals():
    fleet, _, _ = resolve_cluster("two-site")
    model, _ = resolve_model("llama3.1-8b")
    train = make_training({"seq_length": 2048, "global_batch_size": 128}, model)
    seen: list[Progress] = []
    report, _ = plan_training(fleet, model, train, SearchOptions(budget_s=30, max_pp=4),
                              cluster=ClusterInput(ref="two-site", sha256="0" * 64), model_ref="llama3.1-8b",
                              progress=seen.append)
    phases = list(dict.fromkeys(p.phase for p in seen))
    assert phases == ["seeds", "candidates", "search", "ranking", "baselines"]
    for phase in ("seeds", "candidates", "search"):
        last = [p for p in seen if p.phase == phase][-1]
        assert last.done == last.total > 0, last
    assert report.search.stopped_by == "complete"
    search = [p for p in seen if p.phase == "search"]
    assert all(p.bound_s <= p.best_s + 1e-9 for p in search)
    assert abs(search[-1].best_s - report.search.best_objective_s) < 1e-3


def test_in_ci_a_line_at_least_every_five_seconds_on_the_large_fleet():
    """The large example, not on a terminal (pipes): progress lines on stderr at most 5 s apart (+1.5 s for the
    rounding of the printed seconds and a loaded machine; the last gap, measured here from the interpreter's start,
    also holds the imports), none on stdout. llama3.1-405b: the search with the 70B model got down to 5 s."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hgplan.cli", "search", "-c", "large", "-m", "llama3.1-405b",
                        "--seq-len", "4096", "--global-batch", "1024", "--time-limit", "30", "--no-baselines"],
                       capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-2000:]
    elapsed = [int(m.group(1)) for m in map(LINE.match, r.stderr.splitlines()) if m]
    assert wall > 6 and elapsed, (wall, r.stderr[-2000:])
    gaps = [b - a for a, b in zip([0] + elapsed, elapsed)]
    assert max(gaps) <= cli_progress.LINE_EVERY_S + 1.5 and wall - elapsed[-1] <= cli_progress.LINE_EVERY_S + 3, \
        (gaps, wall)
    assert not any(LINE.match(x) for x in r.stdout.splitlines())


def test_quiet_silences_the_lines(cli, monkeypatch):
    monkeypatch.setattr(cli_progress, "LINE_EVERY_S", 0.05)
    loud = cli(*SMALL)
    assert loud.code == 0 and any(LINE.match(x) for x in loud.stderr.splitlines())
    quiet = cli(*SMALL, "--quiet")
    assert quiet.code == 0 and not any(LINE.match(x) for x in quiet.stderr.splitlines())
    assert quiet.stdout == loud.stdout


def test_on_a_terminal_a_live_display_of_the_phases(cli, monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(cli_progress, "err", Console(file=screen, force_terminal=True, width=160))
    r = cli(*SMALL)
    assert r.code == 0 and not any(LINE.match(x) for x in r.stderr.splitlines())
    shown = screen.getvalue()
    assert "searching the fleet" in shown and "configurations settled" not in r.stdout
