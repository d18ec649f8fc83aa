"""Command-line shell: parse flags, resolve inputs (hgplan.io), call the library, print (hgplan.render).

Only this package and hgplan.io read files, write stdout or see the environment; the library never imports it.
Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time limit;
101 internal error (a bug in hgplan); 130 interrupted (Ctrl-C, SIGINT).

One module per group of commands; importing them registers the commands on `app`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

from hgplan.cli import bench, calibrate, catalog, explain, export, report, search  # noqa: F401 - registers the commands
from hgplan.cli.base import _started, app, err

__all__ = ["app", "main"]


def interrupt_ends_the_process() -> None:
    """Ctrl-C (SIGINT) ends the process at once with exit 130, writing nothing more to stdout. Python's own handler
    runs only once the main thread is back in the interpreter, which a CP-SAT solve holds up to its time limit (and
    the solves leave SIGINT alone, planner/model.configure_solver: CP-SAT's handler ended only the solve it caught the
    signal in, and the search went on). The signal reaches the interpreter's wakeup descriptor at once, though, and a
    thread waiting on it shows the terminal's cursor again (the live progress display hides it), says so on stderr
    and ends the process. Output files are written whole or not at all (io.write_file_atomic): an interrupted command
    leaves none half-written (at most a hidden temporary file, if the signal lands during a write). Where the platform
    has no non-blocking pipe (Windows before Python 3.12), Python's own KeyboardInterrupt stays."""
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (AttributeError, OSError, ValueError):
        os.close(read_fd)
        os.close(write_fd)
        return
    signal.signal(signal.SIGINT, lambda signum, frame: None)  # the thread acts; the main thread may be in a solve
    threading.Thread(target=_end_on_interrupt, args=(read_fd,), name="hgplan-interrupt", daemon=True).start()


def _end_on_interrupt(read_fd: int) -> None:
    """Wait for SIGINT's byte on the wakeup descriptor, then end the process (interrupt_ends_the_process)."""
    while signal.SIGINT not in (got := os.read(read_fd, 64)):
        if not got:
            return
    os.write(2, (b"\x1b[?25h\n" if err.is_terminal else b"") + b"hgplan: interrupted\n")
    os._exit(130)


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
