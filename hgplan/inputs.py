"""Turn parsed documents into domain objects, collecting every problem in one pass.

Pure functions: texts and dicts in, domain objects or an InputError out. File reading lives in
hgplan.io; this module never touches the file system.
"""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from hgplan.domain import (ATTENTION_ALIASES, ArchEfficiency, Attention, Fleet, Fp8Recipe, GpuType, Link, ModelArch,
                           NodeGroup, PcieTopology, Precision, Runtime, TrainingSettings, TransformerImpl, Transport,
                           TransportProfile)
from hgplan.cluster_checks import cluster_semantics
from hgplan.errors import InputError, InputIssue
from hgplan.schema import MOE_KEYS, ClusterSpec, GpuSpec, IntraNodeSpec, ModelSpec, TrainingSpec
from hgplan.yamlio import Path_, dotted, line_for, parse_shipped_yaml, parse_yaml


# --------------------------------------------------------------------------- catalog

@dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """Everything shipped in profiles/: GPUs, architecture constants, transports, presets, example fleets."""

    gpus: dict[str, GpuSpec]
    archs: dict[str, ArchEfficiency]
    transports: dict[str, TransportProfile]
    model_texts: dict[str, str]
    """Preset name -> YAML text."""
    cluster_texts: dict[str, str]
    """Example fleet name -> YAML text."""
    validation: dict = field(default_factory=dict)
    """profiles/validation.yaml: the cost model's residuals against published runs, per GPU type (explain cites
    them)."""
    gpu_overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    """GPU id -> ArchEfficiency fields measured on the user's hardware (a calibration profile, `--profile`)."""

    def gpu_type(self, spec: GpuSpec) -> GpuType:
        """The GpuType of a catalog or inline GPU spec with its architecture's constants (and any calibrated
        overrides of that GPU)."""
        base = self.archs[spec.arch]
        own = {k: v for k, v in (("gemm_efficiency", spec.gemm_efficiency), ("hbm_efficiency", spec.hbm_efficiency))
               if v is not None}
        eff = replace(base, **own)
        calibrated: tuple[str, ...] = ()
        if spec.id in self.gpu_overrides:
            eff = replace(eff, **self.gpu_overrides[spec.id])
            calibrated = tuple(sorted(self.gpu_overrides[spec.id]))
        return GpuType(id=spec.id, vendor=spec.vendor, arch=spec.arch, form_factor=spec.form_factor,
                       bf16_tflops=spec.bf16_tflops, fp16_tflops=spec.fp16_tflops, fp8_tflops=spec.fp8_tflops,
                       hbm_gib=spec.hbm_gib, hbm_gbytes_per_s=spec.hbm_gbytes_per_s,
                       intra_node_kind=spec.intra_node.kind, intra_node_gbytes_per_s=spec.intra_node.gbytes_per_s,
                       tdp_w=spec.tdp_w, source=spec.source, eff=eff, sm_count=spec.sm_count, calibrated=calibrated)


def build_catalog(*, gpus_text: str, archs_text: str, nics_text: str,
                  model_texts: dict[str, str], cluster_texts: dict[str, str], validation_text: str = "") -> Catalog:
    """Build the catalog from the texts of the profile files. Shipped data must be valid."""
    gpus_doc, archs_doc, nics_doc = (parse_shipped_yaml(t) for t in (gpus_text, archs_text, nics_text))
    archs = {k: ArchEfficiency(**v) for k, v in archs_doc["architectures"].items()}
    gpus = {}
    for entry in gpus_doc["gpus"]:
        spec = GpuSpec.model_validate(entry)
        if spec.arch not in archs:
            raise InputError(f"profiles/gpus.yaml: GPU {spec.id} names unknown arch {spec.arch!r}")
        gpus[spec.id] = spec
    transports = {k: TransportProfile(name=k, **v) for k, v in nics_doc["transports"].items()}
    validation = (parse_shipped_yaml(validation_text) or {}) if validation_text else {}
    return Catalog(gpus=gpus, archs=archs, transports=transports, validation=validation,
                   model_texts=dict(sorted(model_texts.items())), cluster_texts=dict(sorted(cluster_texts.items())))


# --------------------------------------------------------------------------- pydantic errors

def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_model_classes(arg))
    return out


def _fields_at(root: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the model that sits at loc inside root (for 'did you mean')."""
    cur: type[BaseModel] | None = root
    for part in loc:
        if cur is None:
            return []
        if isinstance(part, int):
            continue
        if part == "GpuSpec":
            cur = GpuSpec
            continue
        field = cur.model_fields.get(part)
        if field is None:
            return []
        found = _model_classes(field.annotation)
        cur = found[0] if found else None
    return list(cur.model_fields) if cur is not None else []


KEY_SYNONYMS = {"nodes": "count", "num_nodes": "count", "node_count": "count", "gpu_type": "gpu", "gpu_model": "gpu",
                "num_hidden_layers": "num_layers", "n_layers": "num_layers", "n_layer": "num_layers",
                "num_heads": "num_attention_heads", "n_heads": "num_attention_heads", "n_head": "num_attention_heads",
                "num_key_value_heads": "num_query_groups", "n_kv_heads": "num_query_groups",
                "intermediate_size": "ffn_hidden_size", "head_dim": "kv_channels", "n_embd": "hidden_size",
                "n_positions": "max_position_embeddings"}
"""Names other tools give a key (Hugging Face and GPT-2 configs, other planners' cluster files), for 'did you mean'
where spelling alone does not find ours."""


def suggested_key(key: str, allowed: list[str]) -> str | None:
    """The allowed key an unknown one most likely means: its synonym (KEY_SYNONYMS; 'num_key_value_heads' is
    spelt nearest to 'num_attention_heads' but means 'num_query_groups'), else the closest spelling."""
    if KEY_SYNONYMS.get(key) in allowed:
        return KEY_SYNONYMS[key]
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return close[0] if close else None


_UNION_TAGS = {"str", "constrained-str", "GpuSpec"}
"""pydantic's names for the branches of the `gpu` union (an id, bounded in length, or an inline spec)."""


def _value_at(data: Any, loc: tuple) -> Any:
    cur = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def _one_per_mistake(errors: list[dict], root: type[BaseModel]) -> list[dict]:
    """The errors without a required key's 'missing' when an unknown key beside it is its misspelling (its closest
    allowed name): one error ('did you mean') for the one mistake, not two."""
    misspelt = set()
    for err in errors:
        if err["type"] == "extra_forbidden":
            raw_loc = tuple(err["loc"])
            close = suggested_key(str(raw_loc[-1]), _fields_at(root, raw_loc[:-1]))
            if close:
                misspelt.add(raw_loc[:-1] + (close,))
    return [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in misspelt)]


def pydantic_issues(exc: ValidationError, *, data: Any, lines: dict[Path_, int], source: str,
                    root: type[BaseModel]) -> list[InputIssue]:
    """A pydantic validation error as located input issues (file line, key path, message)."""
    issues: list[InputIssue] = []
    seen: set[tuple[str, str]] = set()
    for err in _one_per_mistake(exc.errors(include_url=False), root):
        raw_loc = tuple(err["loc"])
        tag_positions = [i for i, p in enumerate(raw_loc) if p in _UNION_TAGS]
        if tag_positions:
            i = tag_positions[0]
            value = _value_at(data, raw_loc[:i])
            tag = raw_loc[i]
            if isinstance(value, dict) and tag in ("str", "constrained-str"):
                continue
            if isinstance(value, str) and tag == "GpuSpec":
                continue
            if not isinstance(value, (str, dict)):
                if tag == "GpuSpec":
                    continue
                err = {**err, "type": "gpu_type", "msg": "expected a catalog GPU id or an inline GPU spec mapping"}
        loc = tuple(p for p in raw_loc if p not in _UNION_TAGS)
        etype, ctx, got = err["type"], err.get("ctx", {}), err.get("input")
        if etype == "extra_forbidden":
            key = str(loc[-1])
            allowed = _fields_at(root, raw_loc[:-1])
            close = suggested_key(key, allowed)
            msg = f"unknown key {shown(key)}"
            msg += f"; did you mean '{close}'?" if close else ""
            msg += f" (allowed keys: {', '.join(allowed)})" if allowed else ""
        elif etype == "missing":
            msg = f"missing required key '{loc[-1]}'"
            loc = loc[:-1] + (loc[-1],)
        elif etype in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[etype]
            bound = next(iter(ctx.values()))
            bound_txt = f"{bound:g}" if isinstance(bound, (int, float)) else str(bound)
            msg = f"must be {op} {bound_txt} (got {shown(got)})"
        elif etype == "too_short":
            msg = f"needs at least {ctx.get('min_length')} item(s) (got {ctx.get('actual_length')})"
            if loc and loc[-1] == "node_groups":
                msg = "site has no nodes: add at least one entry under node_groups"
            elif loc == ("sites",):
                msg = "the fleet has no sites: add at least one site with node_groups"
        elif etype == "literal_error":
            msg = f"must be one of {ctx.get('expected')} (got {shown(got)})"
        elif etype == "string_pattern_mismatch":
            msg = f"invalid name {shown(got)}: use letters, digits, '_', '.', '-' and start with a letter or digit"
        elif etype in ("model_type", "dict_type"):
            msg = f"expected a mapping of keys (got {type(got).__name__} {shown(got)})"
        elif etype == "list_type":
            msg = f"expected a list (got {type(got).__name__} {shown(got)})"
        else:
            msg = _value_message(etype, ctx, got, err["msg"])
        key = (dotted(loc), msg)
        if key in seen:
            continue
        seen.add(key)
        issues.append(InputIssue(source=source, line=line_for(lines, loc), path=dotted(loc), message=msg))
    return issues


def shown(value: Any, limit: int = 80) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters (a hostile file may hold a
    megabyte-long key or string)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text):,} characters)"


def _value_message(etype: str, ctx: dict, got: Any, default: str) -> str:
    """The message for a value of the wrong type, a non-finite number or a failed value check."""
    if etype == "value_error":
        return str(ctx.get("error", default))  # our own validators' messages already name the value and the fix
    if etype in ("int_type", "float_type", "int_from_float"):
        kind = "an integer" if etype != "float_type" else "a number"
        return (f"must be {kind} (got {type(got).__name__} {shown(got)}; booleans and quoted strings are not numbers: "
                "write it unquoted)")
    if etype == "finite_number":
        return f"must be a finite number (got {shown(got)})"
    return f"{default} (got {shown(got)})"


def _require_mapping(data: Any, source: str, what: str, hint: str) -> None:
    if data is None:
        raise InputError([InputIssue(source=source, line=1, path="", message=f"the file is empty; expected a {what} ({hint})")])
    if not isinstance(data, dict):
        raise InputError([InputIssue(source=source, line=1, path="",
                                     message=f"expected a {what} mapping at the top level (got {type(data).__name__})")])


# --------------------------------------------------------------------------- cluster

def load_cluster(text: str, source: str, catalog: Catalog) -> tuple[Fleet, list[str]]:
    """Parse and check a cluster file. Returns the fleet and warnings; raises InputError with every issue."""
    data, lines = parse_yaml(text, source)
    _require_mapping(data, source, "cluster", "top-level key 'sites' with node_groups")
    issues: list[InputIssue] = []
    spec: ClusterSpec | None = None
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        issues.extend(pydantic_issues(exc, data=data, lines=lines, source=source, root=ClusterSpec))
    sem, warnings = cluster_semantics(data, lines, source, catalog)
    issues.extend(sem)
    if issues or spec is None:
        raise InputError(sorted(issues, key=lambda i: (i.line or 0, i.path)))
    return build_fleet(spec, catalog, name=spec.name or source), warnings


def _pcie_topology(intra: IntraNodeSpec, gpu: GpuSpec) -> PcieTopology:
    """A node group's PCIe topology: its own intra_node settings, P2P defaulting to the GPU's."""
    p2p = intra.p2p if intra.p2p is not None else gpu.intra_node.p2p
    return PcieTopology(p2p=True if p2p is None else p2p, sockets=intra.sockets,
                        inter_socket_gbytes_per_s=intra.inter_socket_gbytes_per_s,
                        host_memory_gbytes_per_s=intra.host_memory_gbytes_per_s)


def build_fleet(spec: ClusterSpec, catalog: Catalog, *, name: str) -> Fleet:
    """The Fleet of a validated cluster spec."""
    groups: list[NodeGroup] = []
    for site in spec.sites:
        for g in site.node_groups:
            gspec = catalog.gpus[g.gpu] if isinstance(g.gpu, str) else g.gpu
            gpu = catalog.gpu_type(gspec)
            intra = g.intra_node or gspec.intra_node
            groups.append(NodeGroup(site=site.name, name=g.name, num_nodes=g.count, gpu=gpu, gpus_per_node=g.gpus_per_node,
                                    intra_node_kind=intra.kind, intra_node_gbytes_per_s=intra.gbytes_per_s,
                                    nic_transport=Transport(g.nics.transport), nic_gbps=g.nics.gbps,
                                    nic_count=g.nics.count, gpu_hour_usd=g.gpu_hour_usd, order=len(groups),
                                    hosts=tuple(g.hosts or ()), pcie=_pcie_topology(intra, gspec)))
    links: list[Link] = []
    for site in spec.sites:
        for lk in site.links:
            links.append(Link(scope="group", a=lk.between[0], b=lk.between[1], gbps=lk.gbps, latency_ms=lk.latency_ms,
                              transport=Transport(lk.transport), egress_usd_per_gb=lk.egress_usd_per_gb,
                              tcp_window_mib=lk.tcp_window_mib))
    for lk in spec.links:
        links.append(Link(scope="site", a=lk.between[0], b=lk.between[1], gbps=lk.gbps, latency_ms=lk.latency_ms,
                          transport=Transport(lk.transport), egress_usd_per_gb=lk.egress_usd_per_gb,
                          tcp_window_mib=lk.tcp_window_mib))
    return Fleet(name=name, groups=tuple(groups), links=tuple(links), transports=catalog.transports)


# --------------------------------------------------------------------------- model

def default_ffn(hidden: int, gated: bool) -> int:
    """Megatron-LM's default: 4h, or int((4h * 2/3) / 64) * 64 with swiglu (arguments.py)."""
    return int((4 * hidden * 2 / 3) / 64) * 64 if gated else 4 * hidden


def load_model(text: str, source: str) -> ModelArch:
    """Parse and check a model file; InputError with every issue."""
    data, lines = parse_yaml(text, source)
    _require_mapping(data, source, "model", "keys such as num_layers, hidden_size, num_attention_heads")
    issues: list[InputIssue] = []

    def add(path: Path_, message: str) -> None:
        """An issue at a key path."""
        issues.append(InputIssue(source=source, line=line_for(lines, path), path=dotted(path), message=message))

    for key in sorted(set(data) & MOE_KEYS):
        add((key,), f"mixture-of-experts models are not supported yet ('{key}'); hgplan plans dense models only")
    clean = {k: v for k, v in data.items() if k not in MOE_KEYS}
    spec: ModelSpec | None = None
    try:
        spec = ModelSpec.model_validate(clean)
    except ValidationError as exc:
        issues.extend(pydantic_issues(exc, data=clean, lines=lines, source=source, root=ModelSpec))

    def pos_int(key: str) -> int | None:
        """The value of a key that must be a positive integer (None, with an issue, when it is not)."""
        v = clean.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    heads, groups, hidden, kvc = (pos_int("num_attention_heads"), pos_int("num_query_groups"),
                                  pos_int("hidden_size"), pos_int("kv_channels"))
    if heads and groups and heads % groups:
        add(("num_query_groups",), f"num_attention_heads ({heads}) must be divisible by num_query_groups ({groups}); "
                                   f"choose num_query_groups among {[d for d in range(1, heads + 1) if heads % d == 0]}")
    if heads and hidden and kvc is None and hidden % heads:
        add(("hidden_size",), f"hidden_size ({hidden}) must be divisible by num_attention_heads ({heads}) "
                              "unless kv_channels is given")
    act, swiglu = clean.get("activation"), clean.get("swiglu")
    if swiglu is True and act not in (None, "swiglu"):
        add(("swiglu",), f"swiglu: true contradicts activation: {act}; keep one of them")
    if swiglu is False and act == "swiglu":
        add(("swiglu",), "swiglu: false contradicts activation: swiglu; keep one of them")
    if clean.get("group_query_attention") is False and groups and heads and groups != heads:
        add(("group_query_attention",), "group_query_attention: false but num_query_groups differs from the heads")
    rope_keys = [k for k in ("rotary_base", "use_rope_scaling", "rope_scaling_factor") if clean.get(k) not in (None,
                                                                                                        False)]
    if rope_keys and clean.get("position_embedding_type", "learned_absolute") != "rope":
        add((rope_keys[0],), f"{', '.join(rope_keys)} set{'s' if len(rope_keys) == 1 else ''} RoPE, but "
                             f"position_embedding_type is {clean.get('position_embedding_type', 'learned_absolute')}; "
                             "set position_embedding_type: rope, or drop them")
    if "rope_scaling_factor" in clean and clean.get("use_rope_scaling") is not True:
        add(("rope_scaling_factor",), "rope_scaling_factor takes effect only with use_rope_scaling: true; set it, "
                                      "or drop rope_scaling_factor")
    if issues or spec is None:
        raise InputError(sorted(issues, key=lambda i: (i.line or 0, i.path)))
    activation = spec.activation or ("swiglu" if spec.swiglu else "gelu")
    n_groups = spec.num_query_groups or spec.num_attention_heads
    kv_channels = spec.kv_channels or spec.hidden_size // spec.num_attention_heads
    return ModelArch(
        name=spec.name or source, num_layers=spec.num_layers, hidden_size=spec.hidden_size,
        ffn_hidden_size=spec.ffn_hidden_size or default_ffn(spec.hidden_size, activation == "swiglu"),
        num_attention_heads=spec.num_attention_heads, num_query_groups=n_groups, kv_channels=kv_channels,
        vocab_size=spec.vocab_size, make_vocab_size_divisible_by=spec.make_vocab_size_divisible_by,
        max_position_embeddings=spec.max_position_embeddings, position_embedding_type=spec.position_embedding_type,
        activation=activation, normalization=spec.normalization, add_bias_linear=spec.add_bias_linear,
        add_qkv_bias=spec.add_qkv_bias or spec.add_bias_linear, qk_layernorm=spec.qk_layernorm,
        rotary_base=spec.rotary_base, use_rope_scaling=spec.use_rope_scaling,
        rope_scaling_factor=spec.rope_scaling_factor, norm_epsilon=spec.norm_epsilon,
        untie_embeddings_and_output_weights=spec.untie_embeddings_and_output_weights,
        embedding_layernorm=spec.embedding_layernorm, hidden_dropout=spec.hidden_dropout,
        attention_dropout=spec.attention_dropout, source=spec.source or "",
        published_params_b=spec.published_params_b, published_params_decimals=spec.published_params_decimals)


# --------------------------------------------------------------------------- training

def load_training(text: str, source: str) -> tuple[dict[str, Any], list[str]]:
    """Parse a training file into the keyword form accepted by make_training (CLI flags override it), and the flags
    of a Megatron argument file it does not read. The file is a YAML mapping (hgplan's keys or Megatron's argument
    names) or a Megatron-LM argument file (megatron_args.py)."""
    from hgplan.megatron_args import from_megatron_keys, from_recipe, is_argument_file, is_recipe, parse_argument_file

    ignored: list[str] = []
    if is_argument_file(text):
        data, ignored = parse_argument_file(text, source)
        if not data.get("bf16") and not data.get("fp16"):
            raise InputError([InputIssue(source=source, line=None, path="bf16", message=(
                "the argument file trains in fp32 (neither --bf16 nor --fp16), which hgplan does not model; add "
                "--bf16 or --fp16"))])
        lines: dict = {}
    else:
        data, lines = parse_yaml(text, source)
        _require_mapping(data, source, "training", "keys seq_length, global_batch_size, precision")
        if is_recipe(data):
            (data, ignored), lines = from_recipe(data, source), {}
    try:
        TrainingSpec.model_validate(data)
    except ValidationError as exc:
        real = [e for e in exc.errors(include_url=False) if e["type"] != "missing"]
        if real:
            only = ValidationError.from_exception_data(exc.title, real)  # type: ignore[arg-type]
            raise InputError(pydantic_issues(only, data=data, lines=lines, source=source, root=TrainingSpec)) from None
    return from_megatron_keys(dict(data), source), ignored


def make_training(values: dict[str, Any], model: ModelArch, source: str = "<cli>") -> TrainingSettings:
    """Validate training settings (from flags and/or a file) against the model."""
    try:
        spec = TrainingSpec.model_validate(values)
    except ValidationError as exc:
        issues = []
        for e in exc.errors(include_url=False):
            key = str(e["loc"][-1]) if e["loc"] else ""
            flag = {"seq_length": "--seq-len", "global_batch_size": "--global-batch", "precision": "--precision"}.get(key, key)
            if e["type"] == "missing":
                issues.append(InputIssue(source=source, line=None, path=key,
                                         message=f"missing: give {flag} on the command line or '{key}' in --training"))
            else:
                issues.append(InputIssue(source=source, line=None, path=flag,
                                         message=f"{e['msg']} (got {shown(e.get('input'))})"))
        raise InputError(issues) from None
    if spec.seq_length > model.max_position_embeddings:
        raise InputError([InputIssue(source=source, line=None, path="seq_length",
                                     message=f"seq_length ({spec.seq_length}) exceeds the model's max_position_embeddings "
                                             f"({model.max_position_embeddings}); Megatron asserts seq_length <= "
                                             "max_position_embeddings: shorten the sequence or raise the limit")])
    if spec.fp8_recipe != "delayed" and spec.precision != "fp8":
        raise InputError([InputIssue(source=source, line=None, path="fp8_recipe",
                                     message=f"fp8_recipe {spec.fp8_recipe} scales fp8 tensors, but precision is "
                                             f"{spec.precision}: give precision fp8 (--precision fp8), or drop "
                                             "fp8_recipe")])
    return TrainingSettings(seq_length=spec.seq_length, global_batch_size=spec.global_batch_size,
                            precision=Precision(spec.precision), optimizer=spec.optimizer,
                            attention=Attention(ATTENTION_ALIASES.get(spec.attention, spec.attention)),
                            runtime=Runtime(spec.runtime), transformer_impl=TransformerImpl(spec.transformer_impl),
                            pipeline_scatter_gather=spec.pipeline_scatter_gather,
                            fp8_recipe=Fp8Recipe(spec.fp8_recipe))
