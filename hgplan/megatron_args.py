"""Megatron-LM's spellings of the training settings (pure): an argument file (`--seq-length 4096 --bf16 ...`, what
`pretrain_gpt.py` is given and `hgplan export` writes as megatron_args.txt) or Megatron's argument names as keys of a
training YAML (`bf16: true`, `fp8_format: hybrid`, `attention_backend: flash`), mapped to hgplan's where the mapping
is exact (megatron/training/arguments.py, megatron/core/transformer/transformer_config.py at NVIDIA/Megatron-LM
d98e8a64).

What an argument file holds besides the training settings is listed, not guessed at: the parallelism (the search
chooses it; `explain` takes it as flags) and the model (`--model`) are not read from it.
"""

from __future__ import annotations

import shlex
from typing import Any

from hgplan.domain import Fp8Recipe
from hgplan.errors import InputError, InputIssue

TRAINING_FLAGS = {"--seq-length": "seq_length", "--global-batch-size": "global_batch_size",
                  "--transformer-impl": "transformer_impl", "--optimizer": "optimizer",
                  "--fp8-format": "fp8_format", "--fp8-recipe": "fp8_recipe",
                  "--attention-backend": "attention_backend"}
"""Megatron flags that take a value and are training settings, with their argparse dest."""
SWITCHES = {"--bf16": "bf16", "--fp16": "fp16", "--use-flash-attn": "use_flash_attn"}
"""Megatron switches (store_true) that are training settings."""
ATTENTION_BACKENDS = {"flash": "flash2", "fused": "fused", "unfused": "unfused", "local": "unfused", "auto": "auto"}
"""Megatron's AttnBackend (megatron/core/transformer/enums.py) -> hgplan's attention; local is Megatron's own
unfused DotProductAttention."""
MEGATRON_KEYS = ("bf16", "fp16", "fp8_format", "fp8", "attention_backend", "use_flash_attn")
"""Training-YAML keys in Megatron's spelling (argparse dests; `fp8` is --fp8-format's dest)."""


def is_argument_file(text: str) -> bool:
    """Whether a training file is a Megatron argument file: its first word (comments skipped) is a --flag (YAML's
    document marker `---` is not)."""
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            return word.startswith("--") and not word.startswith("---")
    return False


def _issue(source: str, message: str, key: str = "") -> InputError:
    return InputError([InputIssue(source=source, line=None, path=key, message=message)])


def parse_argument_file(text: str, source: str) -> tuple[dict[str, Any], list[str]]:
    """An argument file's training settings in Megatron's argparse dests, and the flags it holds that are not read
    (parallelism, model, everything else). Shell line continuations and # comments are allowed."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise _issue(source, f"not a valid argument file ({exc}); write it as `--flag value` words as a shell "
                             "would") from None
    values: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, inline = word.partition("=")
        if flag in TRAINING_FLAGS:
            if eq:
                value = inline
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                value, i = words[i + 1], i + 1
            else:
                raise _issue(source, f"{flag} needs a value, as in Megatron-LM", TRAINING_FLAGS[flag])
            values[TRAINING_FLAGS[flag]] = value
        elif word in SWITCHES:
            values[SWITCHES[word]] = True
        elif word.startswith("--"):
            ignored.append(flag)
        i += 1
    for key in ("seq_length", "global_batch_size"):
        if key in values:
            try:
                values[key] = int(values[key])
            except ValueError:
                raise _issue(source, f"--{key.replace('_', '-')} must be an integer (got {values[key]!r})",
                             key) from None
    return values, ignored


def from_megatron_keys(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A training mapping with Megatron's keys turned into hgplan's (precision, attention); InputError when they
    contradict each other or hgplan's own keys, or name what hgplan does not model."""
    out = {k: v for k, v in data.items() if k not in MEGATRON_KEYS}
    fp8 = data.get("fp8_format", data.get("fp8"))
    halves = [name for name in ("bf16", "fp16") if data.get(name) is True]
    if fp8 is not None or halves:
        if len(halves) > 1:
            raise _issue(source, "bf16 and fp16 are both set; Megatron-LM takes one of them", "bf16")
        if fp8 is not None and fp8 not in ("e4m3", "hybrid"):
            raise _issue(source, f"fp8_format must be e4m3 or hybrid as in Megatron-LM (got {fp8!r})", "fp8_format")
        if fp8 is not None and halves != ["bf16"]:
            raise _issue(source, "fp8 is modelled with bf16 outside the fp8 linear layers: give bf16 with fp8_format "
                                 "(Megatron-LM needs one of --bf16/--fp16 beside --fp8-format)", "fp8_format")
        precision = "fp8" if fp8 is not None else halves[0]
        if "precision" in data and data["precision"] != precision:
            raise _issue(source, f"precision: {data['precision']} contradicts Megatron's {halves[0] if halves else ''}"
                                 f"{' + fp8' if fp8 else ''}; keep one of them", "precision")
        out["precision"] = precision
    backend = data.get("attention_backend")
    if data.get("use_flash_attn") is True and backend in (None, "flash"):
        backend = "flash"
    if backend is not None:
        if backend not in ATTENTION_BACKENDS:
            raise _issue(source, f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)} as in "
                                 f"Megatron-LM (got {backend!r})", "attention_backend")
        mapped = ATTENTION_BACKENDS[backend]
        if "attention" in data and data["attention"] != mapped:
            raise _issue(source, f"attention: {data['attention']} contradicts attention_backend: {backend}; keep one",
                         "attention")
        out["attention"] = mapped
    if data.get("use_flash_attn") is True and backend != "flash":
        raise _issue(source, f"use_flash_attn contradicts attention_backend: {backend}; keep one", "use_flash_attn")
    return out


RECIPE_PRECISIONS = {"bf16_mixed": {"bf16": True}, "fp16_mixed": {"fp16": True},
                     "bf16_with_fp8_delayed_scaling_mixed": {"bf16": True, "fp8": "hybrid"}}
"""Megatron-Bridge's mixed-precision recipes (megatron/bridge/training/mixed_precision.py) hgplan models exactly; the
others keep some layers in bf16 (fp8 current scaling) or use block-scaled formats (mxfp8, nvfp4, sub-channel)."""
FP8_RECIPES = tuple(r.value for r in Fp8Recipe)
"""Megatron's --fp8-recipe values hgplan models (blockwise and custom are not)."""
PLAN_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
             "virtual_pipeline_model_parallel_size", "sequence_parallel", "micro_batch_size", "recompute_granularity",
             "use_distributed_optimizer", "expert_model_parallel_size")


def is_recipe(data: Any) -> bool:
    """Whether a training YAML is a Megatron-Bridge / NeMo 2 recipe excerpt (a ConfigContainer with `model:` and
    `train:` sections) rather than hgplan's flat mapping."""
    return isinstance(data, dict) and any(isinstance(data.get(k), dict) for k in ("model", "train"))


def _recipe_precision(mixed: Any, source: str) -> dict[str, Any]:
    if mixed is None:
        return {}
    if isinstance(mixed, str):
        name = mixed.replace("-", "_")
        if name not in RECIPE_PRECISIONS:
            raise _issue(source, f"mixed_precision {mixed!r} is not modelled exactly (hgplan models "
                                 f"{', '.join(RECIPE_PRECISIONS)}); give one of them, or precision: in hgplan's "
                                 "keys", "mixed_precision")
        return dict(RECIPE_PRECISIONS[name])
    if isinstance(mixed, dict):
        recipe = mixed.get("fp8_recipe", "delayed")
        if mixed.get("fp8") and (recipe not in FP8_RECIPES or mixed.get("first_last_layers_bf16")):
            raise _issue(source, f"mixed_precision with fp8_recipe {recipe!r}"
                                 f"{' and first_last_layers_bf16' if mixed.get('first_last_layers_bf16') else ''} is "
                                 f"not modelled exactly (hgplan runs every linear layer in fp8 with the recipes "
                                 f"{', '.join(FP8_RECIPES)})", "mixed_precision")
        keys = ("bf16", "fp16", "fp8") + (("fp8_recipe",) if mixed.get("fp8") else ())
        return {k: mixed[k] for k in keys if k in mixed}
    raise _issue(source, "mixed_precision must be a recipe name (bf16_mixed) or a mapping", "mixed_precision")


def from_recipe(data: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """A recipe excerpt's training settings in Megatron's keys (model.seq_length or dataset.sequence_length,
    train.global_batch_size, mixed_precision or model.bf16/fp16/fp8, model.attention_backend), and the plan's keys it
    holds that are not read (the parallelism: the search chooses it)."""
    model, train, dataset = (data.get(k) if isinstance(data.get(k), dict) else {} for k in ("model", "train",
                                                                                             "dataset"))
    out: dict[str, Any] = {k: model[k] for k in ("seq_length", "bf16", "fp16", "fp8", "attention_backend")
                           if k in model}
    length = dataset.get("sequence_length", dataset.get("seq_length"))
    if length is not None:
        if "seq_length" in out and out["seq_length"] != length:
            raise _issue(source, f"model.seq_length {out['seq_length']} and dataset.sequence_length {length} differ; "
                                 "Megatron-Bridge requires them equal", "seq_length")
        out["seq_length"] = length
    if "global_batch_size" in train:
        out["global_batch_size"] = train["global_batch_size"]
    for key, value in _recipe_precision(data.get("mixed_precision"), source).items():
        if key in out and out[key] != value:
            raise _issue(source, f"model.{key} contradicts mixed_precision; keep one", key)
        out[key] = value
    ignored = [f"{part}.{k}" for part, section in (("model", model), ("train", train)) for k in section
               if k in PLAN_KEYS]
    return out, ignored
