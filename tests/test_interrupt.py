"""Ctrl-C ends a command at once, also while a CP-SAT solve runs (cli.interrupt_ends_the_process,
planner/model.configure_solver): CP-SAT's own SIGINT handler used to end only the solve it caught the signal in, and
the search went on to its time limit."""

from __future__ import annotations

import subprocess
import sys
import time

# a 15 x 15 job shop: one CP-SAT worker does not prove it within the 20 s the child gives it
CHILD = """
import os, random, signal, sys, threading
from ortools.sat.python import cp_model
from hgplan.cli import interrupt_ends_the_process
from hgplan.planner.model import SolverParams, configure_solver

rng = random.Random(7)
md, n = cp_model.CpModel(), 15
horizon = n * n * 99
ends, machines = [], {k: [] for k in range(n)}
for _ in range(n):
    prev = None
    for k in rng.sample(range(n), n):
        d = rng.randint(1, 99)
        s, e = md.new_int_var(0, horizon, ""), md.new_int_var(0, horizon, "")
        machines[k].append(md.new_interval_var(s, d, e, ""))
        if prev is not None:
            md.add(s >= prev)
        prev = e
    ends.append(prev)
for ivs in machines.values():
    md.add_no_overlap(ivs)
span = md.new_int_var(0, horizon, "")
md.add_max_equality(span, ends)
md.minimize(span)
solver = cp_model.CpSolver()
configure_solver(solver, SolverParams(max_deterministic_time=1e6, max_time_in_seconds=20.0), None)
interrupt_ends_the_process()
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
solver.solve(md)
print("the solve returned", flush=True)
"""


def test_ctrl_c_ends_the_process_during_a_solve():
    began = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert child.returncode == 130, (child.returncode, child.stdout, child.stderr)
    assert "the solve returned" not in child.stdout and "hgplan: interrupted" in child.stderr
    assert time.perf_counter() - began < 12, "it waited for the solve's time limit"


def test_the_console_entry_point_watches_for_ctrl_c():
    probe = ("import signal, hgplan.cli as c\n"
             "c.app = lambda: print(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,"
             " signal.set_wakeup_fd(-1) >= 0)\n"
             "c.main()\n")
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and child.stdout.split() == ["True", "True"], (child.stdout, child.stderr)


def test_without_non_blocking_pipes_python_keeps_ctrl_c(monkeypatch):
    """Windows before Python 3.12 has no non-blocking pipes: the entry point leaves SIGINT to Python."""
    import signal

    from hgplan import cli

    def refuse(fd, blocking):
        raise OSError("not on this platform")

    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(cli.os, "set_blocking", refuse)
    cli.interrupt_ends_the_process()
    assert signal.getsignal(signal.SIGINT) is before
