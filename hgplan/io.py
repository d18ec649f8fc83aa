"""The only module (with cli.py) that touches the file system: profiles and user files."""

from __future__ import annotations

import functools
from pathlib import Path

from hgplan.domain import Fleet, ModelArch
from hgplan.errors import InputError, InputIssue
from hgplan.inputs import Catalog, build_catalog, load_cluster, load_model


def profiles_dir() -> Path:
    """profiles/ ships inside the wheel as hgplan/profiles; in a source checkout it sits beside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "profiles", here.parent / "profiles"):
        if (candidate / "gpus.yaml").is_file():
            return candidate
    raise RuntimeError("hgplan's profiles/ directory is missing from this installation")


@functools.cache
def catalog() -> Catalog:
    root = profiles_dir()
    return build_catalog(
        gpus_text=(root / "gpus.yaml").read_text(),
        archs_text=(root / "architectures.yaml").read_text(),
        nics_text=(root / "nics.yaml").read_text(),
        model_texts={p.stem: p.read_text() for p in (root / "models").glob("*.yaml")},
        cluster_texts={p.stem: p.read_text() for p in (root / "clusters").glob("*.yaml")},
    )


def read_text(path_str: str, what: str) -> str:
    path = Path(path_str)
    if path.is_dir():
        raise InputError([InputIssue(source=path_str, line=None, path="",
                                     message=f"is a directory; expected a {what} YAML file")])
    if not path.exists():
        raise InputError([InputIssue(source=path_str, line=None, path="", message=f"no such {what} file")])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([InputIssue(source=path_str, line=None, path="", message=f"cannot read {what} file: {exc}")]) from None


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml")) or Path(ref).exists()


def resolve_cluster(ref: str) -> tuple[Fleet, list[str], str]:
    """A path to a cluster YAML, or the name of a shipped example fleet. Returns (fleet, warnings, source)."""
    cat = catalog()
    if not _looks_like_path(ref) and ref in cat.cluster_texts:
        fleet, warnings = load_cluster(cat.cluster_texts[ref], f"<example:{ref}>", cat)
        return fleet, warnings, f"example:{ref}"
    if not _looks_like_path(ref):
        raise InputError([InputIssue(source="--cluster", line=None, path="",
                                     message=f"'{ref}' is neither a file nor an example fleet; examples: "
                                             f"{', '.join(cat.cluster_texts)}")])
    fleet, warnings = load_cluster(read_text(ref, "cluster"), ref, cat)
    return fleet, warnings, ref


def resolve_model(ref: str) -> tuple[ModelArch, str]:
    """A preset name or a path to a model YAML."""
    cat = catalog()
    if not _looks_like_path(ref):
        if ref in cat.model_texts:
            return load_model(cat.model_texts[ref], f"<preset:{ref}>"), f"preset:{ref}"
        import difflib
        close = difflib.get_close_matches(ref, list(cat.model_texts), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError([InputIssue(source="--model", line=None, path="",
                                     message=f"'{ref}' is neither a file nor a preset; {hint}presets: "
                                             f"{', '.join(cat.model_texts)}")])
    return load_model(read_text(ref, "model"), ref), ref
