"""The CLI's shared pieces: the typer apps, the consoles, warn(), JSON output and the exit-code mapping."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time
from typing import Annotated, Any, Callable

import typer
from rich.console import Console

from hgplan import __version__
from hgplan.errors import InputError, InputIssue, NoAnswerError, PlanningError

_started = {"at_s": time.perf_counter(), "commands": 0, "process": False}
"""When the current command started: run as the console command (main(), `process`), when this module was imported
(before any option is parsed); called in-process (tests, embedding, every later command), when its root callback
ran, so the time a caller spent before it does not eat into its time limit."""


def command_started_s() -> float:
    """The time.perf_counter() reading at which the running command started: time limits count from here."""
    return _started["at_s"]

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan LLM training on heterogeneous, geo-distributed GPU fleets.")
profiles_app = typer.Typer(no_args_is_help=True, help="List and show the shipped GPU, model and cluster catalog.")
app.add_typer(profiles_app, name="profiles")

# Piped into a file or a CI log, rich would cut tables at 80 columns; use a wide page there unless COLUMNS says
# otherwise.
PIPED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180
out = Console(soft_wrap=True, width=PIPED_WIDTH)


def _usage_error(exc: Any) -> None:
    """A usage error the option parser found (unknown option, a value of the wrong type): with --json on the command
    line, the error document on stdout too; the usual message on stderr."""
    if "--json" in sys.argv[1:] and getattr(exc, "exit_code", 2) == 2:
        param = getattr(exc, "param", None)
        issue = InputIssue(source="", line=None, path=param.opts[0] if getattr(param, "opts", None) else "",
                           message=exc.format_message())
        emit_json(error_document(2, "usage", [issue]))
    _format_usage_error["rich"](exc)


_format_usage_error: dict[str, Callable] = {}


def _adjust_rich_utils(module: Any) -> None:
    """typer renders --help and usage errors with typer.rich_utils, which costs a fifth of a second to import, so it
    is adjusted when typer first imports it rather than imported here: piped --help as wide as the tables (option
    names never cut), and usage errors through _usage_error."""
    if PIPED_WIDTH is not None:
        module.MAX_WIDTH = PIPED_WIDTH
    _format_usage_error["rich"] = module.rich_format_error
    module.rich_format_error = _usage_error


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after its first import (a meta-path finder that wraps the loader)."""

    def __init__(self, name: str, then: Callable[[Any], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        """The module's own spec, its loader wrapped to call `then` once the module has run."""
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            """Run the module, then adjust it."""
            run(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


if "typer.rich_utils" in sys.modules:
    _adjust_rich_utils(sys.modules["typer.rich_utils"])
else:
    sys.meta_path.insert(0, _OnImport("typer.rich_utils", _adjust_rich_utils))
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


def error_document(code: int, kind: str, issues: list[InputIssue]) -> dict[str, Any]:
    """The JSON error document (`hgplan schema error`) of a failure: its exit code and every problem, located."""
    from hgplan.documents import ErrorDocument

    located = [{"file": i.source or None, "line": i.line, "key": i.path or None, "message": i.message} for i in issues]
    doc = ErrorDocument(hgplan_version=__version__, error={"code": code, "kind": kind, **located[0], "issues": located})
    return doc.to_json_dict()


def _fail(code: int, kind: str, issues: list[InputIssue], prefix: str, as_json: bool) -> typer.Exit:
    for issue in issues:
        warn(issue.render(), prefix)
    if as_json:
        emit_json(error_document(code, kind, issues))
    return typer.Exit(code)


def _message(text: str) -> list[InputIssue]:
    return [InputIssue(source="", line=None, path="", message=text)]


def handles_errors(fn: Callable) -> Callable:
    """Map library errors to documented exit codes with a message on stderr, never a traceback; with --json, the
    error document on stdout as well."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        """The command, with library errors turned into messages and exit codes."""
        from hgplan.io import forget_stdin

        forget_stdin()
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            raise _fail(2, "input", exc.issues, "error", as_json) from None
        except PlanningError as exc:
            raise _fail(1, "finding", _message(str(exc)), "finding", as_json) from None
        except NoAnswerError as exc:
            raise _fail(3, "no_answer", _message(str(exc)), "no answer", as_json) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"hgplan {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """hgplan: plan, explain and export LLM training on heterogeneous GPU fleets."""
    if _started["commands"] or not _started["process"]:  # in-process callers (tests, embedding): from here
        _started["at_s"] = time.perf_counter()
    _started["commands"] += 1


JsonOpt = Annotated[bool, typer.Option("--json", help="Write JSON to stdout instead of a table.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Cluster YAML file or example fleet name.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model preset name or model YAML file.")]
