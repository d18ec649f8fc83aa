from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hgplan.cli import app

ROOT = Path(__file__).resolve().parent.parent
# Test-only helpers live outside the package: tests/ (exhaustive.py) and benchmarks/ (fidelity_cases.py, shared with
# benchmarks/fidelity.py).
for folder in (ROOT / "tests", ROOT / "benchmarks"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


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
