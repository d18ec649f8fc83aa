"""Docs stay in step with the CLI: every command has help and appears in the README; README and CI agree."""

from __future__ import annotations

from pathlib import Path

import typer

from hgplan.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _commands():
    click_app = typer.main.get_command(app)
    for name, cmd in click_app.commands.items():
        if hasattr(cmd, "commands"):
            for sub, subcmd in cmd.commands.items():
                yield f"{name} {sub}", subcmd
        else:
            yield name, cmd


def test_every_command_has_help_and_is_documented():
    readme = (ROOT / "README.md").read_text()
    for name, cmd in _commands():
        assert (cmd.help or "").strip(), f"hgplan {name} has no help text"
        top = name.split()[0]
        assert f"hgplan {top}" in readme, f"hgplan {name} is not in README.md"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in readme.splitlines()
                   if "pytest" in line and "pip install" in line and line.startswith(("pip", "bash")))
    assert command.strip() in ci


def test_docs_exist_for_every_link_in_readme():
    readme = (ROOT / "README.md").read_text()
    for part in readme.split("](")[1:]:
        target = part.split(")")[0]
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
