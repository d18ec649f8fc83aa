"""Command-line shell: parse flags, resolve inputs (hgplan.io), call the library, print (hgplan.render).

Only this package and hgplan.io read files, write stdout or see the environment; the library never imports it.
Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time limit;
101 internal error (a bug in hgplan); 130 (the shell's figure for a process ended by SIGINT) on Ctrl-C.

One module per group of commands; importing them registers the commands on `app`.
"""

from __future__ import annotations

import signal
import sys
import traceback

from hgplan.cli import bench, calibrate, catalog, explain, export, report, search  # noqa: F401 - registers the commands
from hgplan.cli.base import _started, app, err

__all__ = ["app", "main"]


def interrupt_ends_the_process() -> None:
    """Ctrl-C (SIGINT) ends the process at once, writing nothing more (the shell reports 130): SIGINT's default
    action. Python's KeyboardInterrupt would wait until the main thread is back in the interpreter, which a CP-SAT
    solve holds up to its time limit; and the solves leave SIGINT alone (planner/model.configure_solver), since
    CP-SAT's own handler ended only the solve it caught the signal in while the search went on. Output files are
    written whole or not at all (io.write_file_atomic): an interrupted command leaves none half-written (at most a
    hidden temporary file, if the signal lands during a write)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main() -> None:
    """Console entry point; turns unexpected exceptions into exit 101 with a bug-report hint."""
    _started["process"] = True  # the command's time limit counts from when its modules began to load
    interrupt_ends_the_process()
    try:
        app()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001 - last-resort guard; user errors never get here
        err.print("internal error in hgplan (please report it with the input files):", markup=False)
        err.print(traceback.format_exc(), markup=False, highlight=False)
        sys.exit(101)
