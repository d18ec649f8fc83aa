"""Command-line shell: parse flags, resolve inputs (hgplan.io), call the library, print (hgplan.render).

Only this package and hgplan.io read files, write stdout or see the environment; the library never imports it.
Exit codes: 0 ok; 1 a planning finding; 2 bad usage or bad input; 3 no answer within the time limit;
101 internal error (a bug in hgplan).

One module per group of commands; importing them registers the commands on `app`.
"""

from __future__ import annotations

import sys
import traceback

from hgplan.cli import bench, calibrate, catalog, explain, export, report, search  # noqa: F401 - registers the commands
from hgplan.cli.base import _started, app, err

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point; turns unexpected exceptions into exit 101 with a bug-report hint."""
    _started["process"] = True  # the command's time limit counts from when its modules began to load
    try:
        app()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001 - last-resort guard; user errors never get here
        err.print("internal error in hgplan (please report it with the input files):", markup=False)
        err.print(traceback.format_exc(), markup=False, highlight=False)
        sys.exit(101)
