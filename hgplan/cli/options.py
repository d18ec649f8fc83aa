"""Option stacks several commands share (sqlite-utils' output_options pattern) and small flag parsers."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable

import typer

from hgplan.cli.base import warn
from hgplan.errors import InputError

@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingFlags:
    """The training-setting flags `search` and `explain` share (None: not given)."""

    seq_len: int | None = None
    global_batch: int | None = None
    precision: str | None = None
    training: str | None = None
    attention: str | None = None
    runtime: str | None = None
    transformer_impl: str | None = None
    fp8_recipe: str | None = None

    def given(self) -> list[str]:
        """The flags the user gave, as spelled on the command line."""
        names = {"seq_len": "--seq-len", "global_batch": "--global-batch", "training": "--training"}
        return [flag for name, flag in names.items() if getattr(self, name) is not None]

    def settings(self, model, fleet=None):
        """TrainingSettings from the training file (if any) overridden by the flags; InputError when invalid.

        When no precision is given and some GPU of the fleet has no bf16 (Volta, Turing), fp16 is chosen so those
        GPUs can train, and the choice is announced on stderr."""
        from hgplan.inputs import load_training, make_training
        from hgplan.io import read_text

        values: dict[str, Any] = {}
        if self.training:
            read, ignored = load_training(read_text(self.training, "training"), self.training)
            values.update(read)
            if ignored:
                warn(f"{self.training}: only the training settings are read from a Megatron file; not read (the "
                     f"parallelism and its options are the plan's: search chooses them, explain takes them as flags; "
                     f"--model gives the model): {' '.join(ignored)}")
        for key, val in (("seq_length", self.seq_len), ("global_batch_size", self.global_batch),
                         ("precision", self.precision), ("attention", self.attention), ("runtime", self.runtime),
                         ("transformer_impl", self.transformer_impl), ("fp8_recipe", self.fp8_recipe)):
            if val is not None:
                values[key] = val
        if "precision" not in values and fleet is not None:
            from hgplan.domain import Precision

            no_bf16 = sorted({g.gpu.id for g in fleet.groups if not g.gpu.supports(Precision.BF16)})
            if no_bf16:
                values["precision"] = "fp16"
                # leaving them out is advice only where some GPU would remain
                rest = any(g.gpu.supports(Precision.BF16) for g in fleet.groups)
                warn(f"{', '.join(no_bf16)} {'has' if len(no_bf16) == 1 else 'have'} no bf16: training in fp16 so "
                     + ("every GPU can take part (give --precision bf16 to leave them out instead)" if rest else
                        "the fleet can train at all (no GPU of it has bf16)"))
        return make_training(values, model)


_TRAINING_OPTIONS: dict[str, Any] = {
    "seq_len": Annotated[int | None, typer.Option("--seq-len", "--seq-length",
                                                  help="Sequence length (tokens); --seq-length as in Megatron-LM.")],
    "global_batch": Annotated[int | None, typer.Option("--global-batch", "--global-batch-size",
                                                       help="Global batch size (sequences per iteration); "
                                                            "--global-batch-size as in Megatron-LM.")],
    "precision": Annotated[str | None, typer.Option("--precision", help="bf16 (default), fp16, or fp8 (Transformer "
                                                    "Engine's fp8 linear layers, bf16 elsewhere).")],
    "fp8_recipe": Annotated[str | None, typer.Option("--fp8-recipe", help="With --precision fp8: delayed (default), "
                                                     "tensorwise (current scaling) or mxfp8 (Blackwell).")],
    "training": Annotated[str | None, typer.Option("--training", help="Training settings YAML (flags override it).")],
    "attention": Annotated[str | None, typer.Option("--attention", help="auto (default: what the runtime and GPU "
                                                    "use), fused, flash2 (alias flash), flash1 (flash-attn "
                                                    "1.x, Triton FlashAttention) or unfused.")],
    "transformer_impl": Annotated[str | None, typer.Option("--transformer-impl", help="transformer_engine (default) "
                                                           "or local (megatron-core's PyTorch fallbacks).")],
    "runtime": Annotated[str | None, typer.Option("--runtime", help="megatron (default), deepspeed or fsdp.")],
}


def training_options(*, runtime: bool) -> Callable[[Callable], Callable]:
    """Add the training-setting flags to a command and hand them over as one `flags: TrainingFlags` argument
    (sqlite-utils' output_options pattern): one definition, one help text, for every command that takes them."""
    names = [n for n in _TRAINING_OPTIONS if runtime or n != "runtime"]

    def decorate(fn: Callable) -> Callable:
        """The command with the flags added to its signature."""
        sig = inspect.signature(fn, eval_str=True)
        kept = [p for p in sig.parameters.values() if p.name != "flags"]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_TRAINING_OPTIONS[n])
                 for n in names]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            """Pack the added flags into TrainingFlags and call the command."""
            flags = TrainingFlags(**{n: kwargs.pop(n) for n in names})
            return fn(*args, flags=flags, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=kept + added)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {**{p.name: p.annotation for p in kept}, **{n: _TRAINING_OPTIONS[n] for n in names},
                                   "return": sig.return_annotation}
        return wrapper

    return decorate


def parse_percent(text: str, flag: str) -> float:
    """A fraction ('0.005') or a percentage ('0.5%') in [0, 1), or InputError naming the flag."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"{flag}: expected a fraction or a percentage such as 0.5% (got {text!r})") from None
    if not 0 <= value < 1:
        raise InputError(f"{flag}: must be between 0 and 100% (got {text!r})")
    return value
