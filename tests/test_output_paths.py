"""Issue 13: output paths that cannot be written, time limits that cover everything, and the JSON error document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from hgplan.cli import app
from hgplan.errors import InputError

SEARCH = ["-c", "mixed-nic", "-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "256", "--top", "1"]


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    r = CliRunner().invoke(app, ["search", *SEARCH, "--no-baselines", "-o", str(path)])
    assert r.exit_code == 0, r.stderr
    return path


def _unusable(tmp_path, kind):
    """A path an export cannot write into, made under tmp_path."""
    if kind == "missing parent":
        return tmp_path / "missing" / "out"
    if kind == "dangling link":
        (tmp_path / "link").symlink_to(tmp_path / "nowhere")
        return tmp_path / "link"
    if kind == "file":
        (tmp_path / "file").write_text("x")
        return tmp_path / "file"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a").write_text("x")
    return tmp_path / "full"


@pytest.mark.parametrize("kind, expected", [
    ("missing parent", "does not exist; create it first"),
    ("dangling link", "is a symbolic link to"),
    ("file", "exists and is not a directory"),
    ("non-empty directory", "not an empty directory"),
])
def test_export_into_an_unusable_path_is_exit_2_before_any_work(cli, plan_path, tmp_path, monkeypatch, kind,
                                                                expected):
    import hgplan.planfile

    target = _unusable(tmp_path, kind)
    monkeypatch.setattr(hgplan.planfile, "load_plan", lambda *a, **k: pytest.fail("the plan was read first"))
    r = cli("export", plan_path, "-f", "megatron", "-o", target)
    assert r.code == 2 and f"-o {target}" in r.stderr and expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_unwritable_directories_are_exit_2_before_any_work(cli, plan_path, tmp_path, monkeypatch):
    """A read-only directory (simulated: the tests may run as root, whom permissions do not stop)."""
    import hgplan.planner.api

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real_access(p, mode))
    monkeypatch.setattr(hgplan.planner.api, "plan_training", lambda *a, **k: pytest.fail("the search ran"))
    r = cli("export", plan_path, "-f", "megatron", "-o", tmp_path / "out")
    assert r.code == 2 and f"the directory {tmp_path} is not writable" in r.stderr
    r = cli("search", *SEARCH, "-o", tmp_path / "plan.json")
    assert r.code == 2 and f"the directory {tmp_path} is not writable" in r.stderr


def test_an_existing_empty_directory_keeps_its_inode_and_mode(cli, plan_path, tmp_path):
    out = tmp_path / "launch"
    out.mkdir()
    out.chmod(0o751)
    inode = out.stat().st_ino
    r = cli("export", plan_path, "-f", "torchrun", "-o", out)
    assert r.code == 0, r.stderr
    assert out.stat().st_ino == inode and out.stat().st_mode & 0o777 == 0o751
    assert (out / "rank_map.csv").exists() and not any(p.name.startswith(".hgplan") for p in out.iterdir())
    link = tmp_path / "link"  # a symbolic link to an empty directory is followed
    (tmp_path / "real").mkdir()
    link.symlink_to(tmp_path / "real")
    assert cli("export", plan_path, "-f", "torchrun", "-o", link).code == 0 and (tmp_path / "real" / "rank_map.csv").exists()


def test_a_new_directory_gets_the_mode_mkdir_would_give(cli, plan_path, tmp_path):
    mask = os.umask(0o027)
    try:
        assert cli("export", plan_path, "-f", "torchrun", "-o", tmp_path / "new").code == 0
    finally:
        os.umask(mask)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o750


def test_a_written_file_gets_the_mode_open_would_give(plan_path, tmp_path):
    """A new file: 0666 less the umask (not mkstemp's 0600); a replaced file keeps its mode."""
    from hgplan.io import write_file_atomic
    mask = os.umask(0o022)
    try:
        write_file_atomic(str(tmp_path / "new.json"), "{}")
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o640)
        write_file_atomic(str(kept), "{}")
    finally:
        os.umask(mask)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644
    assert kept.stat().st_mode & 0o777 == 0o640 and kept.read_text() == "{}"


@pytest.mark.parametrize("existing", [False, True])
def test_two_concurrent_exports_into_one_directory(tmp_path, existing):
    """Six trials of two writers racing for one directory (new, or existing and empty): one wins, the other gets
    InputError (exit 2), and the directory holds exactly the winner's files."""
    from hgplan.io import write_dir_atomic

    for trial in range(6):
        target = tmp_path / f"out{trial}"
        if existing:
            target.mkdir()
        files = [{f"f{i}.txt": f"{who}\n" for i in range(40)} for who in ("a", "b")]
        outcome: dict[int, str] = {}
        start = threading.Barrier(2)

        def write(who: int) -> None:
            start.wait()
            try:
                write_dir_atomic(str(target), files[who])
                outcome[who] = "ok"
            except InputError as exc:
                outcome[who] = str(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w, o in outcome.items() if o == "ok"]
        assert len(winners) == 1, outcome
        loser = outcome[1 - winners[0]]
        assert "not an empty directory" in loser or "another process wrote into this directory" in loser
        contents = {p.name: p.read_text() for p in target.iterdir()}
        assert contents == files[winners[0]]


def test_a_failure_to_write_after_the_search_still_prints_the_result(cli, tmp_path, monkeypatch):
    import hgplan.io

    def fail(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hgplan.io, "write_file_atomic", fail)
    r = cli("search", *SEARCH, "--no-baselines", "-o", tmp_path / "plan.json", "--json")
    assert r.code == 2 and "No space left on device" in r.stderr and "the result is on stdout" in r.stderr
    assert r.json()["plans"][0]["prediction"]["iteration_time_s"] > 0  # the result, not an error document


def _huge_fleet(path, nodes: int) -> None:
    gpus = ["H100-SXM5-80GB", "A100-SXM4-80GB"]
    sites = [{"name": f"s{s}", "node_groups": [{"name": f"g{g}", "count": nodes // 4, "gpu": gpus[g % 2],
                                                "gpus_per_node": 8, "nics": {"transport": "infiniband", "gbps": 400}}
                                               for g in range(2)]} for s in range(2)]
    path.write_text(yaml.safe_dump({"name": "huge", "sites": sites,
                                    "links": [{"between": ["s0", "s1"], "gbps": 100, "latency_ms": 10}]}))


def test_the_time_limit_covers_a_100000_node_fleet(tmp_path):
    """From start to output: parsing, listing and bounding tens of thousands of configurations, the seeds, the solves,
    the ranking and the baselines. The answer comes within the limit (with its honest gap) or is exit 3. The slack
    is the interpreter's start-up and imports, before the command starts counting."""
    fleet = tmp_path / "huge.yaml"
    _huge_fleet(fleet, 100_000)
    limit = 4.0
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hgplan.cli", "search", "-c", str(fleet), "-m", "llama3.1-70b",
                        "--seq-len", "4096", "--global-batch", "512", "--time-limit", str(limit), "--json"],
                       capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    assert r.returncode in (0, 3), r.stderr
    assert "Traceback" not in r.stderr
    assert wall < limit + 3.0, f"{wall:.1f} s for --time-limit {limit}"
    doc = json.loads(r.stdout)
    if r.returncode == 3:
        assert doc["error"]["code"] == 3 and "raise --time-limit" in doc["error"]["message"]
    else:
        assert doc["search"]["stopped_by"] in ("wall", "budget", "complete")


@pytest.mark.parametrize("args, code, kind", [
    (["search", "-c", "no-such-file.yaml", "-m", "gpt-7.5b"], 2, "input"),
    (["search", "-c", "mixed-nic", "-m", "llama3.1-405b", "--seq-len", "2048", "--global-batch", "256",
      "--max-pp", "1"], 1, "finding"),
    (["validate", "{cluster}"], 2, "input"),
    (["explain", "no-such-plan.json"], 2, "input"),
    (["export", "no-such-plan.json", "-f", "megatron"], 2, "input"),
])
def test_json_error_document_on_stdout(cli, write, args, code, kind):
    cluster = write("sites:\n  - name: a\n    node_groups:\n      - name: g\n        count: true\n"
                    "        gpu: A100-SXM4-80GB\n        gpus_per_node: 8\n        nics: {transport: roce, gbps: 200}\n",
                    "bad.yaml")
    r = cli(*[a.format(cluster=cluster) for a in args], "--json")
    assert r.code == code, r.stderr
    doc = r.json()
    jsonschema.validate(doc, cli("schema", "error").json())
    err = doc["error"]
    assert err["code"] == code and err["kind"] == kind and err["message"] and err["issues"][0]["message"]
    if args[0] == "validate":  # located: file, line and key
        assert err["file"] == str(cluster) and err["line"] == 5 and err["key"] == "sites.0.node_groups.0.count"
        assert len(err["issues"]) == 1


def test_json_error_document_for_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hgplan.cli", "search", "-c", "mixed-nic", "-m", "gpt-7.5b", "--top",
                        "many", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "usage" and err["key"] == "--top" and "valid integer" in err["message"]
