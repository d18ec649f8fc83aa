"""Issue 14: docs that run. Every command in a code block of README.md and docs/*.md that starts with `hgplan` runs
here, in the doc's order, in a folder holding the files the doc names (shipped examples, or files made as the
doc says), and exits as the doc says (0, or 2 where the doc shows `error:` lines). The output a console block shows
under a command must appear in what the command prints: text exactly, `...` for elided text, numbers within
TOLERANCE (the docs state it). A block that elides nothing must match line for line (no extra error, no missing one).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOLERANCE = 0.02
"""Numbers in a doc's example output may differ from the tool's by this share (README, "Docs that run")."""
NUM = r"[-+]?\d[\d,]*(?:\.\d+)?"
NEEDS_GPU = ("hgplan bench",)
"""Commands that need a GPU: without one they must say so (exit 2), and the files they would write are made by the
test as the doc describes them (synthesised bench reports)."""

MY_CLUSTER = """\
name: my-cluster
sites:
  - name: lab
    node_groups:
      - name: h100
        gpu: H100
        gpus_per_nod: 8
        count: 4
        nics: {transport: infiniband, gbps: 400, count: 8}
"""


@dataclass
class DocCommand:
    doc: str
    line: int
    command: str
    expected: list[str] = field(default_factory=list)


def doc_commands(path: Path) -> list[DocCommand]:
    """The `hgplan` commands of a doc's code blocks (with continuation lines joined) and, in console blocks, the
    output shown under each."""
    out: list[DocCommand] = []
    lines = path.read_text().splitlines()
    in_block, console, current = False, False, None
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("```"):
            in_block, console, current = not in_block, text.strip() == "```console", None
            i += 1
            continue
        if not in_block:
            i += 1
            continue
        start = i
        prompt = console and text.startswith("$ ")
        if prompt or (not console and text.startswith("hgplan ")):
            command = text[2:] if prompt else text
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            current = DocCommand(path.name, start + 1, command) if command.startswith("hgplan ") else None
            if current is not None:
                out.append(current)
        elif console and current is not None and text.strip():
            current.expected.append(text.strip())
        i += 1
    return out


def _squeeze(line: str) -> str:
    """A line with runs of blanks as one (tables align columns with several)."""
    return " ".join(line.split())


def _matcher(expected: str) -> tuple[re.Pattern, list[float]]:
    """A regex for one expected line (numbers captured, `...` as anything) and the numbers it shows."""
    regex, numbers = "", []
    expected = _squeeze(expected)
    for k, part in enumerate(re.split(rf"(\.\.\.|{NUM})", expected)):
        if k % 2 == 0:
            regex += re.escape(part)
        elif part == "...":
            regex += ".*?"
        else:
            regex += f"({NUM})"
            numbers.append(float(part.replace(",", "")))
    return re.compile(regex), numbers


def _close(got: list[str], want: list[float]) -> bool:
    return all(abs(float(g.replace(",", "")) - w) <= TOLERANCE * abs(w) for g, w in zip(got, want))


def mismatches(expected: list[str], printed: str) -> list[str]:
    """The expected lines that no printed line matches (in order); with nothing elided, also the count."""
    actual = [_squeeze(x) for x in printed.splitlines() if x.strip()]
    shown = [e for e in expected if e != "..."]
    missing, at = [], 0
    for e in shown:
        pattern, numbers = _matcher(e)
        hit = next((k for k in range(at, len(actual)) if (m := pattern.fullmatch(actual[k]))
                    and _close(list(m.groups()), numbers)), None)
        if hit is None:
            missing.append(e)
        else:
            at = hit + 1
    if not missing and shown and len(shown) == len(expected) and len(actual) != len(shown):
        missing.append(f"{len(shown)} lines shown, {len(actual)} printed")
    return missing


def _prepare(folder: Path) -> None:
    """The files the docs name, as each doc describes them."""
    from test_bench import synthesise_report
    from test_calibrate import TRUTH, _synthesise

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my-cluster.yaml").write_text(MY_CLUSTER)
    shutil.copy(ROOT / "profiles" / "clusters" / "two-site.yaml", folder / "cluster.yaml")
    shutil.copy(ROOT / "profiles" / "models" / "gpt-1.7b.yaml", folder / "model.yaml")
    (folder / "train.yaml").write_text("seq_length: 2048\nglobal_batch_size: 256\n")
    _synthesise(folder)  # runs.yaml and its logs: two-site, llama3.1-8b
    for name, (gid, truth) in zip(("h100.json", "a100.json"), TRUTH.gpus.items()):
        report = synthesise_report(gid, truth.model_dump(exclude_none=True))
        (folder / name).write_text(json.dumps(report.to_json_dict()))


def _run(command: str, folder: Path) -> subprocess.CompletedProcess:
    shell = f"{shlex.quote(sys.executable)} -m hgplan.cli {command[len('hgplan '):]}"
    return subprocess.run(shell, shell=True, executable="/bin/bash", cwd=folder, capture_output=True, text=True,
                          timeout=300)


ALL = [c for d in DOCS for c in doc_commands(d)]


def test_the_docs_have_commands_to_run():
    assert {c.doc for c in ALL} >= {"getting-started.md", "calibrate.md", "ci.md", "planner.md"}
    assert len(ALL) >= 12


@pytest.mark.parametrize("doc", sorted({c.doc for c in ALL}))
def test_every_documented_command_runs_as_documented(doc, tmp_path):
    folder = tmp_path / "work"
    _prepare(folder)
    for c in [c for c in ALL if c.doc == doc]:
        r = _run(c.command, folder)
        where = f"{c.doc}:{c.line}: {c.command}"
        if c.command.startswith(NEEDS_GPU) and r.returncode == 2 and "no CUDA or ROCm device" in r.stderr:
            continue  # no GPU here: the doc's next steps use the synthesised reports _prepare wrote
        wanted = 2 if any(e.startswith("error:") for e in c.expected) else 0
        assert r.returncode == wanted, (where, r.returncode, r.stderr[-3000:])
        missing = mismatches(c.expected, r.stdout + "\n" + r.stderr)
        assert not missing, (where, missing, (r.stdout + r.stderr)[-3000:])


def test_the_matcher_checks_text_numbers_and_elisions():
    printed = "iteration 36.724 s | 57,106 tokens/s\nbottleneck: stage 2 on shanghai/a100 (16 layers) at 243.4 ms\n"
    assert mismatches(["iteration 36.9 s | 57,000 tokens/s", "...", "bottleneck: stage 2 on ... at 243.4 ms"],
                      printed) == []
    assert mismatches(["iteration 40.0 s | 57,106 tokens/s", "..."], printed)  # 9% off
    assert mismatches(["iteration 36.724 s | 57,106 tokens/s"], printed)  # a line the doc does not show
    assert mismatches(["bottleneck: stage 3 on ... at 243.4 ms", "..."], printed)
