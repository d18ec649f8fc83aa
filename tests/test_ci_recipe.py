"""docs/ci.md end to end: build the wheel it installs, install it into a private folder, and run every `run:` step
of its pipeline (and the commands that make the lock) with that installation, on a shipped fleet."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "ci.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.S)


def _pipeline_steps() -> list[str]:
    doc = yaml.safe_load(_blocks("yaml")[0])
    return [" ".join(step["run"].split()) for step in doc["jobs"]["plan"]["steps"] if "run" in step]


def test_the_recipe_installs_what_exists_not_the_package_index():
    install = _pipeline_steps()[0]
    assert install == "pip install vendor/hgplan-*.whl"
    assert "hgplan==" not in DOC


def test_the_documented_ci_pipeline_runs_end_to_end(tmp_path):
    work = tmp_path / "repo"
    (work / "vendor").mkdir(parents=True)
    # the one-off step the doc describes: build the wheel from the hgplan repository
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(work / "vendor"), str(ROOT)], check=True, capture_output=True, timeout=300)
    wheels = list((work / "vendor").glob("hgplan-*.whl"))
    assert len(wheels) == 1
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheels[0])],
                   check=True, capture_output=True, timeout=300)
    # the training repository's files: a shipped fleet and preset, small enough to plan in seconds
    shutil.copy(ROOT / "profiles" / "clusters" / "mixed-nic.yaml", work / "cluster.yaml")
    shutil.copy(ROOT / "profiles" / "models" / "gpt-1.7b.yaml", work / "model.yaml")
    (work / "train.yaml").write_text("seq_length: 2048\nglobal_batch_size: 256\n")
    env = dict(os.environ, PYTHONPATH=str(site), PATH=f"{site / 'bin'}{os.pathsep}{os.environ['PATH']}")

    def run(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300)

    version = run("python -c 'import hgplan; print(hgplan.__file__)'")
    assert str(site) in version.stdout  # the wheel runs, not this checkout
    lock = [line for line in _blocks("bash")[0].splitlines() if line.startswith("hgplan search")]
    assert lock and run(lock[0]).returncode == 0
    for step in _pipeline_steps()[1:]:
        r = run(step)
        assert r.returncode == 0, (step, r.stderr[-2000:])
    assert (work / "plan.new.json").is_file() and (work / "search.json").stat().st_size > 0
    assert any((work / "launch").iterdir())
