"""The CLI's contract: every documented exit code, reproducible output across processes, the JSON documents'
published schemas, and the solver record, --solver-params and --export-model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

SEARCH = ["search", "-c", "mixed-nic", "-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "256"]


def test_exit_3_when_the_time_limit_ends_before_any_plan(cli):
    r = cli(*SEARCH, "--time-limit", "0.0001")
    assert r.code == 3
    assert "time limit ended before any plan was found" in r.stderr and "raise --time-limit" in r.stderr


def test_exit_101_on_an_internal_error(monkeypatch, capsys):
    """An exception the library does not expect is a bug: exit 101, a traceback and a request to report it."""
    import hgplan.io
    from hgplan.cli import main

    def broken():
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(hgplan.io, "catalog", broken)
    monkeypatch.setattr(sys, "argv", ["hgplan", "validate", "two-site"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 101
    err = capsys.readouterr().err
    assert "internal error in hgplan" in err and "simulated bug" in err


DRIVER = """
import sys
from typer.testing import CliRunner
from hgplan.cli import app
for args in (a.split("\\x1f") for a in sys.argv[1:]):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.stderr
    sys.stdout.write(r.stdout + "\\x1e")
"""


def _run(commands: list[list[str]], seed: str, cwd) -> list[str]:
    """Run the commands in one fresh Python process with this hash seed; their stdouts."""
    env = dict(os.environ, PYTHONHASHSEED=seed, COLUMNS="200")
    r = subprocess.run([sys.executable, "-c", DRIVER, *("\x1f".join(map(str, c)) for c in commands)],
                       capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\x1e")[:-1]


def test_outputs_do_not_depend_on_the_hash_seed(plan_file, tmp_path):
    """Two processes with different PYTHONHASHSEED write the same exports and the same search JSON (set and dict
    order would show here, not in two calls of one process)."""
    commands = [["export", plan_file, "--format", fmt, "--json"] for fmt in ("megatron", "torchrun")]
    # DeepSpeed's export takes a plan of its own target (mixed-nic's best crosses from InfiniBand to RoCE)
    commands += [[*SEARCH, "--target", "deepspeed", "--no-baselines", "-o", "ds.json"],
                 ["export", "ds.json", "--format", "deepspeed", "--json"]]
    commands.append([*SEARCH, "--json", "--no-baselines"])
    a, b = (_run(commands, seed, tmp_path) for seed in ("1", "2"))
    assert a[:4] == b[:4]
    docs = [json.loads(x[4]) for x in (a, b)]
    for d in docs:
        d["search"].pop("wall_time_s")
    assert docs[0] == docs[1]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    from typer.testing import CliRunner

    from hgplan.cli import app
    path = tmp_path_factory.mktemp("contract") / "plan.json"
    r = CliRunner().invoke(app, [*SEARCH, "-o", str(path), "--json"])
    assert r.exit_code == 0, r.stderr
    (path.parent / "search.json").write_text(r.stdout)
    return path


@pytest.mark.parametrize("kind", ["search", "explain", "export", "plan"])
def test_documents_match_their_published_schemas(cli, plan_file, kind):
    schema = cli("schema", kind).json()
    jsonschema.Draft202012Validator.check_schema(schema)
    if kind == "search":
        doc = json.loads((plan_file.parent / "search.json").read_text())
    elif kind == "explain":
        doc = cli("explain", plan_file, "--json").json()
    elif kind == "export":
        doc = cli("export", plan_file, "--format", "megatron", "--json").json()
    else:
        doc = json.loads(plan_file.read_text())
    jsonschema.validate(doc, schema)
    broken = dict(doc, unexpected_key=1)  # documents are closed: a typo in a hand-edited file is caught
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_solver_record_lists_the_limits_the_solves_used(plan_file):
    """The record shows the largest limits any solve ran under, not a default no solve used."""
    from hgplan.planner.options import SearchOptions
    from hgplan.planner.limits import SAFETY_WALL_FACTOR, SAFETY_WALL_MIN_S

    doc = json.loads((plan_file.parent / "search.json").read_text())
    solver, opts = doc["solver"], SearchOptions()
    assert doc["search"]["candidates"]["solved"] >= 1
    assert solver["max_deterministic_time"] >= opts.per_solve_s * 0.999  # at least one full first attempt
    first_attempt_wall = max(SAFETY_WALL_MIN_S, SAFETY_WALL_FACTOR * opts.per_solve_s)
    assert solver["max_time_in_seconds"] >= first_attempt_wall and solver["max_time_in_seconds"] != 30.0
    assert solver["num_workers"] == 1 and solver["solver_params"] == "" and solver["solve_threads"] == 2
    assert solver["lower_bound_params"] == "add_mir_cuts: false add_cg_cuts: false"
    assert "mesh_params" not in solver  # --target flagscale only (tests/test_flagscale.py)
    assert solver["max_pp"] is None and solver["max_vpp"] == 2  # the family searched: the defaults


def test_search_records_the_family_limits(cli):
    """--max-pp and --max-vpp change what is searched, so the JSON records them beside --max-gap."""
    r = cli(*SEARCH, "--json", "--no-baselines", "--max-pp", "3", "--max-vpp", "4")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert (doc["solver"]["max_pp"], doc["solver"]["max_vpp"]) == (3, 4)
    assert doc["plans"][0]["plan"]["pp"] <= 3 and doc["plans"][0]["plan"]["vpp"] <= 4


def test_solver_params_and_export_model(cli, tmp_path):
    model_file = tmp_path / "last_model.pbtxt"
    r = cli(*SEARCH, "--json", "--no-baselines", "--solver-params", "linearization_level: 2",
            "--export-model", model_file)
    assert r.code == 0, r.stderr
    assert r.json()["solver"]["solver_params"] == "linearization_level: 2"
    text = model_file.read_text()
    assert "variables {" in text and "objective {" in text  # a text CpModelProto
    bad = cli(*SEARCH, "--solver-params", "no_such_field: 3")
    assert bad.code == 2 and "not valid text-format SatParameters" in bad.stderr
    assert 'has no field named "no_such_field"' in bad.stderr  # the parser's reason, with its position
