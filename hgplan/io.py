"""The only module (with the CLI) that touches the file system: profiles, user files, atomic writes."""

from __future__ import annotations

import difflib
import functools
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hgplan.domain import Fleet, ModelArch
from hgplan.errors import InputError, InputIssue
from hgplan.inputs import Catalog, build_catalog, load_cluster, load_model
from hgplan.yamlio import text_sha256


def profiles_dir() -> Path:
    """profiles/ ships inside the wheel as hgplan/profiles; in a source checkout it sits beside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "profiles", here.parent / "profiles"):
        if (candidate / "gpus.yaml").is_file():
            return candidate
    raise RuntimeError("hgplan's profiles/ directory is missing from this installation")


@functools.cache
def catalog() -> Catalog:
    """The shipped GPUs, architectures, NICs, model presets and example fleets (read once)."""
    root = profiles_dir()
    return build_catalog(
        gpus_text=(root / "gpus.yaml").read_text(),
        archs_text=(root / "architectures.yaml").read_text(),
        nics_text=(root / "nics.yaml").read_text(),
        model_texts={p.stem: p.read_text() for p in (root / "models").glob("*.yaml")},
        cluster_texts={p.stem: p.read_text() for p in (root / "clusters").glob("*.yaml")},
        validation_text=(root / "validation.yaml").read_text() if (root / "validation.yaml").is_file() else "",
    )


def _issue(source: str, message: str) -> InputError:
    return InputError([InputIssue(source=source, line=None, path="", message=message)])


MAX_INPUT_BYTES = 16 * 2 ** 20
"""Largest input file read (16 MiB; the largest shipped plan file is under 100 KiB). Reading stops there, so
/dev/zero or a runaway file is exit 2 at once instead of exhausting memory (docs/inputs.md, "Limits")."""


STDIO = "-"
"""The path that names standard input (for an input) or standard output (for `-o`)."""
_stdin: dict[str, str] = {}
"""What standard input was read as, and its text: it can be read once, so only one input can be `-`."""


def forget_stdin() -> None:
    """Start a new command: standard input has not been read (commands run in one process in tests)."""
    _stdin.clear()


def _stdin_bytes(what: str) -> bytes | str:
    """Standard input's bytes (up to the limit), or its text when a command reads it again as the same input."""
    if _stdin:
        (first, text), = _stdin.items()
        if first != what:
            raise _issue("<stdin>", f"standard input (-) was already read as the {first}; only one input can be -: "
                                    f"give the {what} as a file")
        return text
    return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)


def _file_bytes(path_str: str, what: str, fmt: str) -> bytes:
    """A user file's bytes (up to the limit), or InputError saying why it cannot be read."""
    path = Path(path_str)
    if path.is_dir():
        raise _issue(path_str, f"is a directory; expected a {what} {fmt} file")
    if not path.exists():
        raise _issue(path_str, f"no such {what} file")
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise _issue(path_str, f"cannot read {what} file: {exc}") from None


def read_text(path_str: str, what: str, fmt: str = "YAML") -> str:
    """A user file's text (standard input for `-`), or InputError saying why it cannot be read."""
    stdin = path_str == STDIO
    data = _stdin_bytes(what) if stdin else _file_bytes(path_str, what, fmt)
    if isinstance(data, str):
        return data
    source = "<stdin>" if stdin else path_str
    if len(data) > MAX_INPUT_BYTES:
        raise _issue(source, f"the {what} file is larger than {MAX_INPUT_BYTES // 2 ** 20} MiB (the limit on any "
                             "input); is this the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _issue(source, f"cannot read {what} file: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if stdin:
        _stdin[what] = text
    return text


def read_json(path_str: str, what: str) -> Any:
    """A user JSON file, parsed; InputError with the line on bad JSON."""
    text = read_text(path_str, what, "JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError([InputIssue(source=path_str, line=exc.lineno, path="",
                                     message=f"not valid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise _issue(path_str, "the JSON nests too deeply to parse; no hgplan plan file nests more than 8 levels") \
            from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedInput:
    """An input file resolved once: how the user named it, its text and its digest."""

    ref: str
    """'example:NAME', 'preset:NAME' or the path as given."""
    source: str
    """What messages call it: '<example:NAME>', '<preset:NAME>' or the path."""
    text: str
    sha256: str

    @classmethod
    def of(cls, ref: str, source: str, text: str) -> ResolvedInput:
        """The input with its digest computed from its text."""
        return cls(ref=ref, source=source, text=text, sha256=text_sha256(text))


def _looks_like_path(ref: str) -> bool:
    """The one rule for 'name or path': a path has a slash, a YAML suffix, or exists."""
    return ref == STDIO or "/" in ref or ref.endswith((".yaml", ".yml")) or Path(ref).exists()


def _resolve(ref: str, *, what: str, flag: str, shipped: dict[str, str], prefix: str) -> ResolvedInput:
    if not _looks_like_path(ref):
        if ref in shipped:
            text = shipped[ref]
            return ResolvedInput.of(f"{prefix}:{ref}", f"<{prefix}:{ref}>", text)
        close = difflib.get_close_matches(ref, list(shipped), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        kind = "an example fleet" if prefix == "example" else "a preset"
        raise InputError([InputIssue(source=flag, line=None, path="",
                                     message=f"'{ref}' is neither a file nor {kind}; {hint}"
                                             f"{'examples' if prefix == 'example' else 'presets'}: {', '.join(shipped)}")])
    return ResolvedInput.of(ref, "<stdin>" if ref == STDIO else ref, read_text(ref, what))


def resolve_cluster(ref: str, cat: Catalog | None = None) -> tuple[Fleet, list[str], ResolvedInput]:
    """A path to a cluster YAML, or the name of a shipped example fleet: (fleet, warnings, where it came from).
    `cat` is the catalog to build it with (default: the shipped one; a calibrated one with --profile)."""
    cat = cat or catalog()
    src = _resolve(ref, what="cluster", flag="--cluster", shipped=cat.cluster_texts, prefix="example")
    fleet, warnings = load_cluster(src.text, src.source, cat)
    return fleet, warnings, src


def resolve_model(ref: str) -> tuple[ModelArch, ResolvedInput]:
    """A preset name or a path to a model YAML: (model, where it came from)."""
    src = _resolve(ref, what="model", flag="--model", shipped=catalog().model_texts, prefix="preset")
    return load_model(src.text, src.source), src


def check_writable_file(path_str: str) -> Path:
    """The path of a file about to be written, or InputError (exit 2) when it cannot be: checked before any work.
    `-` is standard output."""
    target = Path(path_str)
    if path_str == STDIO:
        return target
    if target.is_dir():
        raise _issue(f"-o {path_str}", f"is a directory; give a file name such as {path_str}/plan.json")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise _issue(f"-o {path_str}", f"the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise _issue(f"-o {path_str}", f"the directory {parent} is not writable")
    return target


def write_file_atomic(path_str: str, text: str) -> None:
    """Write a file so that readers see the old file or the whole new one, never a part (`-`: standard output)."""
    target = check_writable_file(path_str)
    if path_str == STDIO:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent or "."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            # mkstemp makes the file 0600; give it the mode open() would: an existing file's, else 0666 less the umask
            os.fchmod(fh.fileno(), _existing_mode(target) or (_default_dir_mode() & 0o666))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(path_str: str) -> Path:
    """The directory an export is about to write (a symbolic link to a directory is followed), or InputError (exit 2)
    when it cannot be: checked before any work and again when writing."""
    if path_str == STDIO:
        raise _issue("-o -", "this command writes a directory of files, which standard output cannot hold; give a "
                             "directory")
    where = f"-o {path_str}"
    given = Path(path_str)
    if given.is_symlink() and not given.exists():
        raise _issue(where, f"is a symbolic link to {os.readlink(given)}, which does not exist; remove the link or "
                            "give a new directory")
    target = given.resolve() if given.is_symlink() else given
    if target.exists():
        if not target.is_dir():
            raise _issue(where, "exists and is not a directory; choose a new directory (nothing was written)")
        if any(target.iterdir()):
            raise _issue(where, "exists and is not an empty directory; choose a new directory (nothing was written)")
        into = target
    else:
        into = target.parent if str(target.parent) else Path(".")
        if not into.is_dir():
            raise _issue(where, f"the directory {into} does not exist; create it first (nothing was written)")
    if not os.access(into, os.W_OK | os.X_OK):
        raise _issue(where, f"the directory {into} is not writable; choose another place (nothing was written)")
    return target


EXPORT_LOCK = ".hgplan-export.lock"
"""Made (mkdir: atomic) inside an existing empty directory by the export writing into it, so a second one fails."""


def _stage_files(folder: Path, files: dict[str, str], executable_suffix: str) -> None:
    for name, content in sorted(files.items()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # names may hold sub-directories (conf/train/)
        (folder / name).write_text(content)
        if name.endswith(executable_suffix):
            (folder / name).chmod(0o755)


def _existing_mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return None


def _default_dir_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def write_dir_atomic(path_str: str, files: dict[str, str], *, executable_suffix: str = ".sh") -> None:
    """Write files into a new (or empty) directory all at once: a reader sees none of them or all of them.

    A new directory is staged beside the target and renamed into place (mode as mkdir would give it); an existing
    empty one keeps its inode and mode: the files are staged in a lock directory inside it and moved out of it.
    InputError (nothing written) when the target is not empty, or another export claimed it meanwhile."""
    target = check_output_dir(path_str)
    busy = _issue(f"-o {path_str}", "another process wrote into this directory while hgplan was writing it; nothing "
                                    "of this export was written")
    if target.exists():
        lock = target / EXPORT_LOCK
        try:
            lock.mkdir()
        except FileExistsError:
            raise busy from None
        moved: list[Path] = []
        try:
            _stage_files(lock, files, executable_suffix)
            if sorted(p.name for p in target.iterdir()) != [EXPORT_LOCK]:
                raise busy
            for entry in sorted(lock.iterdir()):
                entry.rename(target / entry.name)
                moved.append(target / entry.name)
        except BaseException:
            for entry in moved:
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink(missing_ok=True)
            raise
        finally:
            shutil.rmtree(lock, ignore_errors=True)
        return
    tmp = Path(tempfile.mkdtemp(prefix=".hgplan-export-", dir=str(target.parent.resolve())))
    try:
        _stage_files(tmp, files, executable_suffix)
        tmp.chmod(_default_dir_mode())
        try:
            tmp.rename(target)
        except OSError:  # another export (or anyone) made the directory meanwhile and filled it
            raise busy from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_profile(path_str: str | None) -> tuple[Catalog, ResolvedInput | None]:
    """The catalog with a calibration profile applied (`--profile FILE`), or the shipped one without."""
    if path_str is None:
        return catalog(), None
    from hgplan.calibrate import apply_profile
    from hgplan.planfile import parse_profile

    src = ResolvedInput.of(path_str, path_str, read_text(path_str, "profile"))
    return apply_profile(catalog(), parse_profile(src.text, path_str)), src
