"""search's progress on stderr: a live display on a terminal, one line every LINE_EVERY_S seconds elsewhere (CI),
nothing with --quiet or --solver-log (CP-SAT's own log is the progress then)."""

from __future__ import annotations

import math
import threading
import time

from hgplan.cli.base import err, warn

LINE_EVERY_S = 5.0
"""Not on a terminal: one progress line this often, from a timer (a long solve does not hold it back)."""
PHASES = {"seeds": "each node group alone", "candidates": "listing configurations", "search": "searching the fleet",
          "meshes": "asymmetric plans", "proof": "proving the gap", "ranking": "ranking by the simulator",
          "baselines": "baselines"}


def _numbers(p) -> str:
    """'best 11.08 s, bound 11.04 s, gap 0.4%' as far as known."""
    parts = []
    if math.isfinite(p.best_s):
        parts.append(f"best {p.best_s:.3f} s")
        if p.bound_s > 0:
            parts.append(f"bound {p.bound_s:.3f} s")
    if p.gap is not None and p.bound_s > 0:
        parts.append(f"gap {p.gap:.1%}")
    return ", ".join(parts)


def progress_line(p, *, elapsed_s: float, left_s: float) -> str:
    """One line of progress: phase, share done, best and bound so far (the search's objective), time."""
    clock = f"{elapsed_s:.0f} s elapsed, {max(0.0, left_s):.0f} s left"
    if p is None:
        return f"search: reading the inputs and building cost tables, {clock}"
    share = f"{p.done / p.total:.0%} of {p.total} {p.unit}" if p.total else p.unit
    numbers = _numbers(p)
    return f"search: {PHASES.get(p.phase, p.phase)}: {share}{', ' + numbers if numbers else ''}, {clock}"


class SearchProgress:
    """A context manager whose instance is the planner's progress function."""

    def __init__(self, *, started_s: float, time_limit_s: float, quiet: bool, solver_log: bool):
        self.started_s, self.deadline_s = started_s, started_s + time_limit_s
        self.mode = "off" if quiet or solver_log else ("live" if err.is_terminal else "lines")
        self.latest = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = self._task = None

    def __call__(self, p) -> None:
        previous, self.latest = self.latest, p
        if self._bar is None:
            return
        if previous is None or previous.phase != p.phase:  # a new phase: its own count (or none), drawn at once
            self._bar.remove_task(self._task)
            self._task = self._bar.add_task(PHASES.get(p.phase, p.phase), total=p.total or None, completed=p.done,
                                            numbers=_numbers(p))
            self._bar.refresh()
        else:
            self._bar.update(self._task, completed=p.done, numbers=_numbers(p))

    def _lines(self) -> None:
        """A line at every LINE_EVERY_S of the command's time (counted from its start, imports included)."""
        due = self.started_s + LINE_EVERY_S
        while not self._stop.wait(max(0.0, due - time.perf_counter())):
            now = time.perf_counter()
            warn(progress_line(self.latest, elapsed_s=now - self.started_s, left_s=self.deadline_s - now), "")
            due = max(due + LINE_EVERY_S, now + 0.5 * LINE_EVERY_S)

    def __enter__(self):
        if self.mode == "lines":
            self._thread = threading.Thread(target=self._lines, name="hgplan-progress", daemon=True)
            self._thread.start()
        elif self.mode == "live":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[numbers]}"), TimeElapsedColumn(), console=err,
                                 transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("reading the inputs", total=None, numbers="")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)
