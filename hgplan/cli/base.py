"""The CLI's shared pieces: the typer apps, the consoles, warn(), JSON output and the exit-code mapping."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Annotated, Any, Callable

import typer
from rich.console import Console

from hgplan import __version__
from hgplan.errors import InputError, NoAnswerError, PlanningError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan LLM training on heterogeneous, geo-distributed GPU fleets.")
profiles_app = typer.Typer(no_args_is_help=True, help="List and show the shipped GPU, model and cluster catalog.")
app.add_typer(profiles_app, name="profiles")

# Piped into a file or a CI log, rich would cut tables at 80 columns; use a wide page there unless COLUMNS says
# otherwise.
PIPED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180
out = Console(soft_wrap=True, width=PIPED_WIDTH)
if PIPED_WIDTH is not None:  # the same for --help, which typer renders with rich: option names are never cut
    import typer.rich_utils

    typer.rich_utils.MAX_WIDTH = PIPED_WIDTH
err = Console(stderr=True, soft_wrap=True)


def warn(message: str, prefix: str = "warning") -> None:
    """One line on stderr, printed as is."""
    err.print(f"{prefix}: {message}" if prefix else message, markup=False, highlight=False)


def emit_json(obj: Any) -> None:
    """A JSON document on stdout (documents are dumped with their own key order)."""
    if hasattr(obj, "to_json_dict"):
        obj = obj.to_json_dict()
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def file_to_stdout(*outputs: str | None, as_json: bool) -> bool:
    """Whether one of the files a command writes goes to standard output (`-`; the table then goes to stderr);
    exit 2 when two of them, or one and --json, would share it."""
    dashes = sum(o == "-" for o in outputs)
    if dashes > 1:
        raise InputError("two outputs are '-' (standard output); give all but one of them a file name")
    if dashes and as_json:
        raise InputError("-o - and --json both write to standard output; give -o a file name, or drop --json")
    return dashes == 1


def wrote(output: str, what: str) -> None:
    """The stderr note after a file was written."""
    warn(f"wrote the {what} to standard output" if output == "-" else f"wrote {output}", "")


def handles_errors(fn: Callable) -> Callable:
    """Map library errors to documented exit codes with a message on stderr, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        """The command, with library errors turned into messages and exit codes."""
        from hgplan.io import forget_stdin

        forget_stdin()
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            for issue in exc.issues:
                warn(issue.render(), "error")
            raise typer.Exit(2) from None
        except PlanningError as exc:
            warn(str(exc), "finding")
            raise typer.Exit(1) from None
        except NoAnswerError as exc:
            warn(str(exc), "no answer")
            raise typer.Exit(3) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"hgplan {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """hgplan: plan, explain and export LLM training on heterogeneous GPU fleets."""


JsonOpt = Annotated[bool, typer.Option("--json", help="Write JSON to stdout instead of a table.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model preset name or model YAML file.")]
