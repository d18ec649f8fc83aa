"""The groups alone searched in a forked child beside the fleet's candidate listing (planner/forked.py,
planner/seeded.py): the child's value is the function's, and every way the child can fail ends in the parent
computing it itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hgplan.domain import TrainingSettings
from hgplan.inputs import load_cluster, load_model
from hgplan.io import catalog
from hgplan.planner import forked, seeded
from hgplan.planner.forked import Beside
from hgplan.planner.options import SearchOptions

needs_fork = pytest.mark.skipif(not forked.FORK, reason="no fork on this platform: the parent computes")


def _where() -> int:
    return os.getpid()


@needs_fork
def test_the_child_computes_the_value():
    with Beside(_where) as job:
        assert job.forked
        assert job.result() != os.getpid()  # computed in the child, sent back through the pipe
    assert not job.forked


def test_without_fork_the_parent_computes_when_asked():
    calls = []
    job = Beside(lambda: calls.append(os.getpid()) or len(calls), fork=False)
    assert not job.forked and calls == []
    assert job.result() == 1 and calls == [os.getpid()]


@needs_fork
def test_a_child_that_fails_leaves_the_work_to_the_parent():
    parent = os.getpid()

    def only_here() -> int:
        if os.getpid() != parent:
            raise RuntimeError("not in the child")
        return 7

    with Beside(only_here) as job:
        assert job.result() == 7


@needs_fork
def test_the_parent_raises_what_the_function_raises():
    def broken() -> int:
        raise ValueError("bad input")

    with Beside(broken) as job, pytest.raises(ValueError, match="bad input"):
        job.result()


@needs_fork
def test_a_child_that_ends_without_its_value_leaves_the_work_to_the_parent():
    parent = os.getpid()

    def dies_in_the_child() -> str:
        if os.getpid() != parent:
            os._exit(3)  # no value written: the parent reads end of file
        return "parent"

    with Beside(dies_in_the_child) as job:
        assert job.result() == "parent"


@needs_fork
def test_a_child_past_its_time_is_killed_and_the_parent_computes():
    parent = os.getpid()

    def slow_in_the_child() -> str:
        if os.getpid() != parent:
            time.sleep(30)
        return "parent"

    began = time.monotonic()
    job = Beside(slow_in_the_child)
    pid = job._pid
    assert job.result(wait_s=0.2) == "parent"
    assert time.monotonic() - began < 10
    with pytest.raises(ChildProcessError):  # killed and reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)


def _two_site():
    cat = catalog()
    fleet, _ = load_cluster(cat.cluster_texts["two-site"], "two-site", cat)
    model = load_model(cat.model_texts["llama3.1-8b"], "llama3.1-8b")
    return fleet, model, TrainingSettings(seq_length=4096, global_batch_size=512)


def _plans(found: list) -> list[tuple]:
    return [(f.cfg, f.solution.assign, f.solution.layers, f.time_us) for f in found]


@needs_fork
def test_seeded_search_forked_or_not_returns_the_same(monkeypatch):
    fleet, model, train = _two_site()
    opts = SearchOptions(budget_s=60)
    made = []
    monkeypatch.setattr(seeded, "Beside", lambda fn, fork: made.append(fork) or Beside(fn, fork=fork))
    runs = [seeded.seeded_search(fleet, model, train, opts, fork=fork) for fork in (True, False)]
    assert made == [True, False]
    (a, seeds_a), (b, seeds_b) = runs
    assert _plans(seeds_a) == _plans(seeds_b) and seeds_a
    assert _plans(a.found) == _plans(b.found)
    assert (a.bound_us, a.candidates_total, a.candidates_solved, a.statuses, a.deterministic_time, a.solver_limits) == \
        (b.bound_us, b.candidates_total, b.candidates_solved, b.statuses, b.deterministic_time, b.solver_limits)


def test_the_solver_log_keeps_the_groups_alone_in_this_process(monkeypatch):
    fleet, model, train = _two_site()
    made = []
    monkeypatch.setattr(seeded, "Beside", lambda fn, fork: made.append(fork) or Beside(fn, fork=fork))
    seeded.seeded_search(fleet, model, train, SearchOptions(budget_s=60, solver_log=True), log=lambda line: None)
    assert made == [False]


@needs_fork
def test_the_child_writes_nothing(capfd):
    """The child's prints and warnings go nowhere: its own streams are fresh (a thread of the parent, the progress
    display, may hold a lock of the parent's streams at the fork, which the child would wait for forever)."""
    import sys
    import warnings

    def noisy() -> int:
        print("from the child")
        print("to stderr", file=sys.stderr)
        warnings.warn("a warning in the child")
        return os.getpid()

    with Beside(noisy) as job:
        assert job.result(wait_s=10) != os.getpid()
    out, err = capfd.readouterr()
    assert "from the child" not in out and "to stderr" not in err and "a warning" not in err


@needs_fork
def test_the_child_ends_with_a_parent_killed_by_a_signal():
    """A parent killed outright (SIGKILL: no handler, no cleanup) leaves no child at work: prctl's PDEATHSIG ends it."""
    script = ("import os, time\n"
              "from hgplan.planner.forked import Beside\n"
              "parent = os.getpid()\n"
              "job = Beside(lambda: time.sleep(60) if os.getpid() != parent else 0)\n"
              "print(job._pid, flush=True)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _running(child)
    parent.kill()
    parent.wait()
    until = time.monotonic() + 10
    while _running(child) and time.monotonic() < until:
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie that nobody reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
