from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from hgplan.cli import app

ROOT = Path(__file__).resolve().parent.parent
# Test-only helpers live outside the package: tests/ (exhaustive.py) and benchmarks/ (fidelity_cases.py, shared with
# benchmarks/fidelity.py).
for folder in (ROOT / "tests", ROOT / "benchmarks"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

# typer's CliRunner rebuilds the click command from the app on every invoke (about half of what a refused input's
# command costs in-process); the console script builds it once per process. The tests build it once per app.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.cache(typer.main.get_command)


@pytest.fixture(scope="session")
def overfull_plan(tmp_path_factory):
    """A plan file hand-edited so that it does not fit: two-site's best Llama-3.1-70B plan with half the spare layers
    of the first stage's node group moved onto the first stage (~105 of 80 GiB per GPU)."""
    folder = tmp_path_factory.mktemp("overfull")
    r = CliRunner().invoke(app, ["search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096",
                                 "--global-batch", "512", "--top", "1", "--no-baselines",
                                 "-o", str(folder / "plan.json")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads((folder / "plan.json").read_text())
    stages = doc["plan"]["stages"]
    moved = sum(s["layers"] - 1 for s in stages[1:] if s["node_group"] == stages[0]["node_group"]) // 2
    stages[0]["layers"] += moved
    for s in stages[1:]:
        while moved and s["layers"] > 1:
            s["layers"] -= 1
            moved -= 1
    (folder / "edited.json").write_text(json.dumps(doc))
    return folder / "edited.json"


class Run:
    def __init__(self, result):
        self.result = result
        self.code = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr

    def json(self):
        return json.loads(self.stdout)


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str, stdin: str | None = None) -> Run:
        result = runner.invoke(app, [str(a) for a in args], input=stdin, catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Run(result)

    return invoke


@pytest.fixture
def write(tmp_path):
    def _write(text: str, name: str = "doc.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return _write
