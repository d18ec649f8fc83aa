"""Safe YAML parsing that remembers the line of every key, so messages can say file:line; input texts' digests."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import yaml

from hgplan.errors import InputError, InputIssue

Path_ = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """The safe loader, reading exponent floats without a dot (1e3, 5e-9) as numbers as YAML 1.2 does; YAML 1.1
    (PyYAML's default) reads them as strings, which strict number fields would then reject as quoted."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))

MAX_NODES = 100_000
"""Most YAML nodes a document may expand to, aliases counted at every use (a 'billion laughs' document of nine
aliases over nine levels expands to 387 million; the largest shipped cluster file has under 500)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences a document may have (the cluster schema needs 6)."""


def _check_size(root: yaml.Node, source: str) -> None:
    """InputError when the document, aliases expanded, has more than MAX_NODES nodes or nests deeper than
    MAX_DEPTH. Counted over the composed graph with memoisation, so a bomb is refused without being expanded."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not children_done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
            continue
        count = 1 + sum(sizes[id(k)][0] for k in kids)
        depth = 1 + max((sizes[id(k)][1] for k in kids), default=0)
        if depth > MAX_DEPTH:
            raise InputError([InputIssue(source=source, line=node.start_mark.line + 1, path="",
                                         message=f"input nests deeper than {MAX_DEPTH} levels; no hgplan document "
                                                 "needs more than 8")])
        if count > MAX_NODES:
            raise InputError([InputIssue(source=source, line=None, path="",
                                         message=f"aliases expand to more than {MAX_NODES:,} nodes (the limit on any "
                                                 "input document); write the repeated parts out or use fewer aliases")])
        sizes[id(node)] = (count, depth)


def _walk(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = (*path, str(key_node.value))
                lines[child] = key_node.start_mark.line + 1
                _walk(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines)


def _duplicate_keys(node: yaml.Node, path: Path_, source: str, out: list[InputIssue]) -> None:
    """Keys given twice in one mapping (YAML keeps the last silently; a hand-edited file means one of them)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key, line = str(key_node.value), key_node.start_mark.line + 1
                if key in seen:
                    out.append(InputIssue(source=source, line=line, path=dotted((*path, key)),
                                          message=f"duplicate key '{key}' (lines {seen[key]} and {line}); YAML would "
                                                  "keep the last silently: keep one"))
                seen.setdefault(key, line)
                _duplicate_keys(value_node, (*path, key), source, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicate_keys(item, (*path, i), source, out)


def text_sha256(text: str) -> str:
    """The digest recorded for an input text (hex sha256 of its UTF-8 bytes)."""
    return hashlib.sha256(text.encode()).hexdigest()


def parse_shipped_yaml(text: str) -> Any:
    """A YAML file shipped with hgplan (the catalog), parsed with libyaml's safe loader where PyYAML has it: read on
    every command, it costs a tenth of parse_yaml's time. Its files are checked by parse_yaml in the tests
    (tests/test_cli_basics.py), so the line numbers and duplicate-key checks that user input needs are not needed."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def parse_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML text with the safe loader; return (data, {key path: 1-based line}). Duplicate keys are an
    error. The text is parsed once: its node graph is checked (size, duplicate keys, lines) before the data are
    constructed from it (construction flattens merge keys in place, so it comes last)."""
    loader = None
    try:
        loader = _Loader(text)  # its reader already refuses characters YAML does not allow
        node = loader.get_single_node()
        lines: dict[Path_, int] = {}
        if node is not None:
            _check_size(node, source)
            duplicates: list[InputIssue] = []
            _duplicate_keys(node, (), source, duplicates)
            if duplicates:
                raise InputError(duplicates)
            _walk(node, (), lines)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise InputError([InputIssue(source=source, line=None, path="",
                                     message=f"input nests too deeply to parse (the limit is {MAX_DEPTH} levels)")]) \
            from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError([InputIssue(source=source, line=line, path="",
                                     message=f"YAML syntax error: {problem}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def line_for(lines: dict[Path_, int], path: Path_) -> int | None:
    """Line of the deepest known prefix of path (the key itself, else its parent)."""
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def dotted(path: Path_) -> str:
    """A key path as 'a.0.b'."""
    return ".".join(str(p) for p in path)
