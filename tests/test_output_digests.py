"""Behaviour-preserving refactors: search, explain and every export stay byte-identical on the example fleets.

The digests in tests/data/output_digests.json were taken before the reshape of issue 9. A change that means to
alter an output regenerates them on purpose (`python tests/test_output_digests.py --write`) and says why in its
commit. What is left out of a digest, and why:
- `search.wall_time_s`: the clock, different on every run;
- `solver`: the solver record changed on purpose in issue 9 (it now lists the limits the solves really used);
  tests/test_search_cli.py checks it separately.
Every example runs with a time limit far above its search time, so the search always ends on its proven gap
(`stopped_by: complete`), never on the clock, and the outputs do not depend on the machine's speed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hgplan.cli import app

DATA = Path(__file__).resolve().parent / "data" / "output_digests.json"

EXAMPLES = {
    "two-site": ["-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512"],
    "mixed-nic": ["-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "256"],
    "three-generations": ["-m", "llama2-13b", "--seq-len", "4096", "--global-batch", "256", "--precision", "fp16"],
    "mixed-vendor": ["-m", "llama3.1-8b", "--seq-len", "8192", "--global-batch", "256"],
    "large": ["-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "1024"],
}
FORMATS = ("megatron", "deepspeed", "torchrun")


def _invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout


def _canonical_search(stdout: str) -> str:
    doc = json.loads(stdout)
    doc["search"].pop("wall_time_s")
    doc.pop("solver")
    return json.dumps(doc, indent=2)


def example_outputs(fleet: str, workdir: Path) -> dict[str, str]:
    """name -> canonical output text (with the exit code) of search, explain and every export on one fleet."""
    plan = workdir / f"{fleet}.plan.json"
    code, stdout = _invoke("search", "-c", fleet, *EXAMPLES[fleet], "--time-limit", "120", "--json", "-o", plan)
    assert code == 0, stdout
    doc = json.loads(stdout)
    assert doc["search"]["stopped_by"] == "complete", "the digest needs a search that ends on its gap"
    out = {f"{fleet}/search": _canonical_search(stdout)}
    code, stdout = _invoke("explain", plan, "--json")
    out[f"{fleet}/explain"] = f"exit {code}\n{stdout}"
    for fmt in FORMATS:
        code, stdout = _invoke("export", plan, "--format", fmt, "--json")
        out[f"{fleet}/export-{fmt}"] = f"exit {code}\n{stdout}"
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("fleet", list(EXAMPLES))
def test_outputs_are_byte_identical(fleet, tmp_path):
    stored = json.loads(DATA.read_text())
    got = {name: _digest(text) for name, text in example_outputs(fleet, tmp_path).items()}
    expected = {name: d for name, d in stored.items() if name.startswith(f"{fleet}/")}
    assert got == expected


if __name__ == "__main__":  # regenerate on purpose: python tests/test_output_digests.py --write
    import tempfile

    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_output_digests.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: _digest(text) for fleet in EXAMPLES
                   for name, text in example_outputs(fleet, Path(tmp)).items()}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(digests)} digests to {DATA}")
