"""Error types shared by the library. The CLI maps them to exit codes (docs/inputs.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class InputIssue:
    """One problem in a user's input, located as precisely as we can."""

    source: str
    """File name (or '<preset:NAME>'); empty for a command-line option."""
    line: int | None
    path: str
    """Dotted key path inside the document, e.g. 'sites.0.node_groups.1.count'."""
    message: str

    def render(self) -> str:
        """'file:line: key.path: message', as every error line is printed."""
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{where}: {text}" if where else text


class InputError(ValueError):
    """Bad usage or bad input (exit 2). Carries every issue found in one pass."""

    def __init__(self, issues: list[InputIssue] | str):
        if isinstance(issues, str):
            issues = [InputIssue(source="", line=None, path="", message=issues)]
        self.issues = list(issues)
        super().__init__("\n".join(i.render() for i in self.issues))


class PlanningError(Exception):
    """A planning finding (exit 1): nothing fits, a target cannot express a plan, a regression."""


class NoAnswerError(Exception):
    """The search hit its time limit without finding any plan (exit 3)."""
