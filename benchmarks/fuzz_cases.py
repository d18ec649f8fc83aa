"""Structure-aware fuzz cases for hgplan's commands (issues 13, 14), shared by tests/test_fuzz.py and
benchmarks/fuzz.py.

A case is one generated document (cluster, model, training settings or plan file) and the command line that feeds it
to hgplan. Documents are mutations of the shipped examples: a value swapped for another type, an extreme or
non-finite number, a key deleted or added, a huge scalar; and YAML features written as text: anchors and aliases
(up to an alias bomb), tags, duplicate keys, deep nesting, truncation and byte noise. Cases are a pure function of
(seed, index), so a failing case is reproduced by its index alone.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import yaml

KINDS = ("cluster", "model", "training", "plan")
SEARCH_EVERY = 20
"""One cluster document in this many goes through `search`, mutated so that it most often stays valid (a number
scaled within its plausible range), so the search itself runs on it; the others go through validate."""
SCALES = (0.5, 0.8, 1.25, 2.0)
EXTREMES = [0, -1, 1, 2 ** 31, 2 ** 63, 10 ** 30, 1e308, -1e308, 1e-300, float("nan"), float("inf"), float("-inf"),
            0.5, -0.0, True, False, None, "", "12", "x" * 100_000, [], {}, [1, 2], {"a": 1}]
TAGS = ["!!python/object/apply:os.system ['echo pwned']", "!!binary aGVsbG8=", "!custom 3", "!!set {a, b}",
        "!!timestamp 2001-12-14", "!!float 1e400", "!!int 0x7fffffffffffffff"]
EXPLAIN = ("-c", "mixed-nic", "--tp", "2", "--pp", "2", "--dp", "4", "--stage-groups", "lab/ib,lab/ib")
"""A hand-given configuration on a shipped fleet, for the model and training documents."""
TRAINING = {"seq_length": 2048, "global_batch_size": 256, "precision": "bf16", "attention": "auto",
            "runtime": "megatron", "transformer_impl": "transformer_engine"}


@dataclass(frozen=True, slots=True)
class Seeds:
    """The unmutated documents: shipped example fleets and model presets as text, one plan file as JSON text."""

    clusters: list[str]
    models: list[str]
    plan: str


@dataclass(frozen=True, slots=True)
class Case:
    """One generated document and the command lines that feed it to hgplan ({doc}: its path)."""

    index: int
    kind: str
    mutation: str
    text: str
    suffix: str
    commands: tuple[tuple[str, ...], ...]


def _paths(node, prefix=()):
    """Every (path, value) of a parsed document, containers included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate_tree(rng: random.Random, doc) -> tuple[object, str]:
    """Change one value of the parsed document: a type swap, an extreme number, a deletion or an unknown key."""
    paths = [p for p, _ in _paths(doc) if p]
    if not paths:
        return rng.choice(EXTREMES), "replace the root"
    path = rng.choice(paths)
    action = rng.choice(["extreme", "extreme", "delete", "unknown key", "wrap in list"])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if action == "delete":
        del parent[path[-1]]
    elif action == "unknown key" and isinstance(parent, dict):
        parent[f"unexpected_{rng.randrange(100)}"] = rng.choice(EXTREMES)
    elif action == "wrap in list":
        parent[path[-1]] = [parent[path[-1]]]
    else:
        action = "extreme"
        parent[path[-1]] = rng.choice(EXTREMES)
    return doc, f"{action} at {'.'.join(map(str, path))}"


def _scale_number(rng: random.Random, doc) -> tuple[object, str]:
    """Scale one number of the parsed document by a modest factor (integers stay integers, at least 1): a fleet that
    most often stays valid, so the search itself runs on it."""
    numbers = [p for p, v in _paths(doc) if p and isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        return doc, "unchanged"
    path = rng.choice(numbers)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    factor = rng.choice(SCALES)
    value = parent[path[-1]] * factor
    parent[path[-1]] = max(1, round(value)) if isinstance(parent[path[-1]], int) else value
    return doc, f"scale x{factor} at {'.'.join(map(str, path))}"


def _yaml_text(rng: random.Random, text: str) -> tuple[str, str]:
    """A text-level mutation that keeps most of the document: YAML features a parser must survive."""
    lines = text.splitlines()
    i = rng.randrange(len(lines)) if lines else 0
    choice = rng.randrange(9)
    if choice == 0:  # duplicate a "key: value" line
        keyed = [j for j, ln in enumerate(lines) if ":" in ln and not ln.strip().startswith("-")]
        if keyed:
            j = rng.choice(keyed)
            return "\n".join(lines[:j + 1] + [lines[j]] + lines[j + 1:]) + "\n", "duplicate key"
    if choice == 1:
        depth = rng.choice([50, 500, 5000])
        return "[" * depth + "]" * depth + "\n", f"nesting {depth} deep"
    if choice == 2:
        levels, width = rng.choice([(3, 3), (6, 6), (9, 9)])
        out = ['a0: &a0 ["lol","lol"]']
        for n in range(1, levels):
            out.append(f"a{n}: &a{n} [" + ",".join([f"*a{n - 1}"] * width) + "]")
        return "\n".join(out) + f"\nsites: *a{levels - 1}\n" + text, f"alias bomb {levels}x{width}"
    if choice == 3 and lines:
        head, sep, _ = lines[i].partition(":")
        if sep:
            lines[i] = f"{head}: {rng.choice(TAGS)}"
            return "\n".join(lines) + "\n", "tag"
    if choice == 4:
        return text[:rng.randrange(len(text) + 1)], "truncated"
    if choice == 5:
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        return data.decode("utf-8", errors="surrogateescape"), "byte noise"
    if choice == 6 and lines:
        head, sep, _ = lines[i].partition(":")
        if sep:
            lines[i] = f"{head}: &anchor1 {rng.choice(['1', 'x', '[1, 2]'])}"
            lines.append("extra: *anchor1")
            return "\n".join(lines) + "\n", "anchor and alias"
    if choice == 7:
        return text + "\n" + "k" * rng.choice([10, 10_000, 1_000_000]) + ": 1\n", "huge key"
    return text.replace("\n", "\r\n") + "\t\0", "control characters"


def _as_text(rng: random.Random, base: str, json_doc: bool) -> tuple[str, str]:
    """One mutation of a document given as text: a tree mutation (three times in four) or a text mutation."""
    if rng.random() < 0.75:
        doc = json.loads(base) if json_doc else yaml.safe_load(base)
        doc, what = _mutate_tree(rng, doc)
        if json_doc:
            return json.dumps(doc), what
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), what
    return _yaml_text(rng, base)


def make_case(seeds: Seeds, seed: int, index: int) -> Case:
    """The index-th case of a run (deterministic in (seed, index))."""
    rng = random.Random(seed * 1_000_003 + index)
    kind = KINDS[index % len(KINDS)]
    if kind == "cluster":
        base = rng.choice(seeds.clusters)
        cmds = [("validate", "{doc}", "--json")]
        if index % (SEARCH_EVERY * len(KINDS)) != 0:
            text, what = _as_text(rng, base, json_doc=False)
        else:
            doc, what = _scale_number(rng, yaml.safe_load(base))
            text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
            cmds.append(("search", "-c", "{doc}", "-m", "gpt-1.7b", "--seq-len", "1024", "--global-batch", "64",
                         "--time-limit", "2", "--no-baselines", "--top", "1", "--json"))
        return Case(index, kind, what, text, ".yaml", tuple(cmds))
    if kind == "model":
        text, what = _as_text(rng, rng.choice(seeds.models), json_doc=False)
        return Case(index, kind, what, text, ".yaml", (
            ("validate", "mixed-nic", "-m", "{doc}"),
            ("explain", *EXPLAIN, "-m", "{doc}", "--seq-len", "1024", "--global-batch", "64", "--json")))
    if kind == "training":
        text, what = _as_text(rng, yaml.safe_dump(TRAINING, sort_keys=False), json_doc=False)
        return Case(index, kind, what, text, ".yaml", (
            ("explain", *EXPLAIN, "-m", "gpt-1.7b", "--training", "{doc}", "--json"),))
    text, what = _as_text(rng, seeds.plan, json_doc=True)
    return Case(index, kind, what, text, ".json", (
        ("explain", "{doc}", "--json"), ("export", "{doc}", "-f", "megatron", "--json"),
        ("diff", "{doc}", "{plan}", "--json"), ("report", "{doc}", "-o", "-")))


def load_seeds(plan_text: str) -> Seeds:
    """The shipped example fleets and a few model presets (as text), and the given plan file."""
    from hgplan.io import catalog

    cat = catalog()
    models = [cat.model_texts[n] for n in ("gpt-1.7b", "gpt-7.5b", "llama3.1-8b") if n in cat.model_texts]
    return Seeds(clusters=[cat.cluster_texts[n] for n in sorted(cat.cluster_texts)], models=models, plan=plan_text)


def write_case(case: Case, folder: Path) -> Path:
    """The case's document as a file in folder (named by its index)."""
    path = folder / f"case{case.index}{case.suffix}"
    path.write_bytes(case.text.encode("utf-8", errors="surrogateescape"))
    return path


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one command of a case did."""

    index: int
    kind: str
    mutation: str
    command: str
    exit_code: int
    seconds: float
    crash: str
    """The exception's type and message when the command raised instead of exiting (a traceback for a user)."""


def run_case(runner, app, case: Case, folder: Path, plan_path: Path) -> list[Outcome]:
    """Feed one case to its commands in-process (typer's CliRunner; the same code path as the console script minus
    its last-resort guard, so any exception is a crash)."""
    import time

    doc = write_case(case, folder)
    out = []
    for cmd in case.commands:
        args = [a.format(doc=doc, plan=plan_path) for a in cmd]
        start = time.perf_counter()
        result = runner.invoke(app, args, catch_exceptions=True)
        seconds = time.perf_counter() - start
        exc = result.exception
        crash = "" if exc is None or isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"[:300]
        out.append(Outcome(case.index, case.kind, case.mutation, cmd[0], result.exit_code, seconds, crash))
    doc.unlink()
    return out
