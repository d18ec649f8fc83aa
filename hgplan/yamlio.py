"""Safe YAML parsing that remembers the line of every key, so messages can say file:line."""

from __future__ import annotations

from typing import Any

import yaml

from hgplan.errors import InputError, InputIssue

Path_ = tuple[str | int, ...]


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


def parse_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """Parse YAML text with the safe loader; return (data, {key path: 1-based line}). Duplicate keys are an
    error."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError([InputIssue(source=source, line=line, path="",
                                     message=f"YAML syntax error: {problem}")]) from None
    lines: dict[Path_, int] = {}
    if node is not None:
        duplicates: list[InputIssue] = []
        _duplicate_keys(node, (), source, duplicates)
        if duplicates:
            raise InputError(duplicates)
        _walk(node, (), lines)
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
