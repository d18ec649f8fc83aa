"""Input schemas for cluster, model and training files (the user-facing contract).

These pydantic models check structure and types only and reject unknown keys. Cross-references
(GPU ids, site names, divisibility rules) are checked in hgplan.inputs so that every problem in a
file is reported in one pass. `hgplan schema cluster|model|training` prints their JSON Schema.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=64,
                            description="Letters, digits, '_', '.', '-'; starts with a letter or digit.")]
Label = Annotated[str, Field(max_length=128, description="At most 128 characters.")]
"""A short free-text field (a display name, a vendor, a catalog reference): bounded, since it is printed."""
Prose = Annotated[str, Field(max_length=2000, description="At most 2,000 characters.")]
"""A description or a citation."""
PathText = Annotated[str, Field(max_length=4096, description="A path, at most 4,096 characters.")]
# Every number is strict (a boolean or a quoted string is not a number), finite, and within a plausible range
# for the quantity, so that a typo or a hostile value is exit 2 at `validate` time instead of a crash, an
# absurd plan or unbounded memory later. The ranges are generous: well beyond any hardware we know of.


def _int(lo: int, hi: int, what: str) -> object:
    return Annotated[int, Field(ge=lo, le=hi, strict=True, description=f"{what}; an integer in [{lo}, {hi}].")]


def _real(lo: float, hi: float, what: str, *, open_low: bool = False) -> object:
    low = {"gt": lo} if open_low else {"ge": lo}
    return Annotated[float, Field(**low, le=hi, strict=True, allow_inf_nan=False,
                                  description=f"{what}; a finite number in {'(' if open_low else '['}{lo:g}, {hi:g}].")]


NodeCount = _int(1, 100_000, "Nodes in a node group")
GpusPerNode = _int(1, 128, "GPUs in one node")
NicCount = _int(1, 64, "NICs per node")
SmCount = _int(1, 10_000, "Streaming multiprocessors or compute units")
Tflops = _real(0.01, 100_000.0, "Dense tensor TFLOP/s")
HbmGib = _real(0.25, 65_536.0, "Device memory in GiB")
GBytesPerS = _real(0.01, 1_000_000.0, "Bandwidth in GB/s")
GbitPerS = _real(0.001, 1_000_000.0, "Bandwidth in Gbit/s")
LatencyMs = _real(0.0, 100_000.0, "Latency in milliseconds")
Watts = _real(1.0, 100_000.0, "Power in watts")
Usd = _real(0.0, 1_000_000.0, "A price in US dollars")
WindowMib = _real(0.01, 65_536.0, "A TCP window in MiB")
ParamsB = _real(1e-6, 1_000_000.0, "Parameters in billions")
Millis = _real(1e-3, 1e9, "Milliseconds")
Layers = _int(1, 10_000, "Transformer layers")
Width = _int(1, 1 << 20, "A hidden, FFN or head dimension")
Heads = _int(1, 1 << 16, "Attention heads or query groups")
Vocab = _int(1, 1 << 27, "Vocabulary size or positions")
SeqLength = _int(1, 1 << 24, "Tokens per sequence")
GlobalBatch = _int(1, 1 << 20, "Sequences per iteration")
Fraction = _real(0.0, 1.0, "A fraction", open_low=True)
Dropout = Annotated[float, Field(ge=0, lt=1, strict=True, allow_inf_nan=False)]
RopeBase = _int(1, 1 << 40, "RoPE base (theta)")
RopeFactor = _real(1.0, 1e6, "RoPE frequency scaling factor")
Epsilon = _real(0.0, 0.1, "A norm's epsilon", open_low=True)

_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def _host_name(value: str) -> str:
    """An RFC 1123 host name or an IPv4/IPv6 address: exported scripts and file names are built from it."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not all(_HOST_LABEL.match(label) for label in value.split(".")):
        raise ValueError(f"{value!r} is not a host name (RFC 1123: letters, digits and '-' in dot-separated labels "
                         "of at most 63 characters) or an IP address; exported launch scripts use it verbatim")
    return value


HostName = Annotated[str, Field(max_length=253), AfterValidator(_host_name)]

Transport = Literal["infiniband", "roce", "ethernet"]
IntraKind = Literal["nvlink", "pcie", "xgmi", "roce"]
SocketCount = _int(1, 8, "CPU sockets per node")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntraNodeSpec(_Strict):
    """A GPU's intra-node fabric (NVLink, xGMI or PCIe) in a GPU spec."""

    kind: IntraKind = Field(description="GPU-to-GPU path inside a node.")
    gbytes_per_s: GBytesPerS = Field(description="Bidirectional per-GPU bandwidth in GB/s (decimal), as vendors quote it.")
    p2p: bool | None = Field(None, description="PCIe only: whether NCCL moves data GPU to GPU (P2P) between the GPUs "
                             "of one CPU socket: they share a PCIe switch (nvidia-smi topo -m shows PIX or PXB) and "
                             "the driver allows it. false: NCCL stages every transfer through host memory (SHM), as "
                             "on GeForce cards, GPUs on the CPU's root ports (PHB) and most VMs. Default: the GPU's.")
    sockets: SocketCount = Field(1, description="PCIe only: CPU sockets (NUMA nodes) the node's GPUs are spread over "
                                 "evenly; a collective spanning more than one crosses the inter-socket link.")
    inter_socket_gbytes_per_s: GBytesPerS = Field(10.0, description="PCIe only: per-direction bandwidth NCCL gets "
                                                  "across the CPU sockets' link (NCCL's topology model: 10 for Intel "
                                                  "UPI since Skylake, 6 for AMD Infinity Fabric, 22 Sapphire Rapids).")
    host_memory_gbytes_per_s: GBytesPerS = Field(150.0, description="PCIe only: achievable host memory bandwidth of "
                                                 "one socket; SHM transfers write and read every byte through it.")


class GpuSpec(_Strict):
    """A GPU type: a catalog entry, or an inline spec in a cluster file."""

    id: Name = Field(description="Identifier, e.g. H100-SXM5-80GB.")
    vendor: Label = Field(description="NVIDIA, AMD, Intel, ...")
    arch: Label = Field(description="Architecture key in profiles/architectures.yaml (e.g. ampere, hopper, cdna3).")
    form_factor: Label = ""
    bf16_tflops: Tflops | None = Field(None, description="Dense bf16 tensor TFLOP/s (no sparsity).")
    fp16_tflops: Tflops | None = Field(None, description="Dense fp16 tensor TFLOP/s (no sparsity).")
    fp8_tflops: Tflops | None = Field(None, description="Dense fp8 tensor TFLOP/s (informational).")
    hbm_gib: HbmGib = Field(description="Device memory in GiB.")
    hbm_gbytes_per_s: GBytesPerS = Field(description="Device memory bandwidth, GB/s (decimal).")
    intra_node: IntraNodeSpec
    tdp_w: Watts | None = None
    gemm_efficiency: Fraction | None = Field(None, description="Override of the architecture's achievable-matmul fraction.")
    hbm_efficiency: Fraction | None = Field(None, description="Override of the architecture's achievable share of "
                                            "hbm_gbytes_per_s (measured copies of this GPU type).")
    sm_count: SmCount | None = Field(None, description="Streaming multiprocessors (NVIDIA) or compute units (AMD): "
                                    "GEMM tiles run in waves over them. None: no wave quantisation.")
    source: Prose = Field("", description="Where the figures come from.")


class NicSpec(_Strict):
    """A node group's NICs: how many per node, their speed and transport."""

    transport: Transport = Field(description="infiniband, roce or ethernet (TCP sockets).")
    gbps: GbitPerS = Field(description="Line rate of one NIC in Gbit/s.")
    count: NicCount = Field(1, description="NICs per node used for training traffic.")


class NodeGroupSpec(_Strict):
    """One node group of a site in the cluster file."""

    name: Name
    count: NodeCount = Field(description="Number of nodes.")
    gpu: Label | GpuSpec = Field(description="Catalog GPU id, or an inline GPU spec.")
    gpus_per_node: GpusPerNode = Field(description="GPUs in each node.")
    intra_node: IntraNodeSpec | None = Field(None, description="Override of the GPU's default intra-node link.")
    nics: NicSpec
    gpu_hour_usd: Usd | None = Field(None, description="Price per GPU-hour (for cost objectives).")
    hosts: list[HostName] | None = Field(None, description="Host names of the nodes, in order (one per node); used by "
                                    "`hgplan export`. Default: SITE-GROUP-NN placeholders.")


class LinkSpec(_Strict):
    """A link between two sites or two node groups of a site."""

    between: tuple[Name, Name] = Field(description="Two site names (top level) or two node-group names (inside a site).")
    gbps: GbitPerS = Field(description="Bandwidth of the link in Gbit/s, shared by all traffic crossing it.")
    latency_ms: LatencyMs = Field(description="One-way latency in milliseconds.")
    transport: Transport = Field("ethernet", description="Transport on this link.")
    egress_usd_per_gb: Usd | None = Field(None, description="Price per GB sent across the link.")
    tcp_window_mib: WindowMib | None = Field(None, description=(
        "The TCP window one socket reaches over this link, MiB, where your hosts' buffers are tuned for it (Linux: "
        "net.ipv4.tcp_rmem and tcp_wmem maxima); default the transport's (3 MiB: Linux's default 6 MiB receive "
        "buffer, half of it window). A socket carries at most a window per round trip."))


class SiteSpec(_Strict):
    """One site of the cluster file: its node groups and the links between them."""

    name: Name
    node_groups: list[NodeGroupSpec] = Field(min_length=1, description="At least one node group.")
    links: list[LinkSpec] = Field(default_factory=list, description="Links between node groups of this site.")


class ClusterSpec(_Strict):
    """A fleet: sites with node groups, and the links between them."""

    name: Label | None = None
    description: Prose | None = None
    sites: list[SiteSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(default_factory=list, description="Links between sites.")


class ModelSpec(_Strict):
    """A dense decoder-only transformer, with Megatron-LM argument names in snake_case."""

    name: Label | None = None
    source: Prose | None = Field(None, description="Citation for the architecture numbers.")
    published_params_b: ParamsB | None = Field(None, description="Published total parameters, in billions.")
    published_params_decimals: Annotated[int, Field(ge=0, le=12, strict=True)] | None = Field(
        None, description="Decimals the published figure was rounded to.")
    num_layers: Layers
    hidden_size: Width
    ffn_hidden_size: Width | None = Field(None, description="Default 4*hidden, or Megatron's swiglu rule.")
    num_attention_heads: Heads
    group_query_attention: bool | None = None
    num_query_groups: Heads | None = Field(None, description="KV groups (GQA); default num_attention_heads.")
    kv_channels: Width | None = Field(None, description="Head dimension; default hidden_size / num_attention_heads.")
    vocab_size: Vocab
    make_vocab_size_divisible_by: Width = 128
    max_position_embeddings: Vocab
    position_embedding_type: Literal["learned_absolute", "rope", "alibi", "none"] = "learned_absolute"
    swiglu: bool | None = None
    activation: Literal["gelu", "swiglu", "relu", "squared_relu"] | None = None
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    add_bias_linear: bool = True
    add_qkv_bias: bool = Field(False, description="A bias on the QKV projection only (Qwen2, Qwen2.5; Megatron-LM's "
                               "--add-qkv-bias); add_bias_linear implies it.")
    qk_layernorm: bool = Field(False, description="Normalise queries and keys per head with `normalization` (Qwen3; "
                               "Megatron-LM's --qk-layernorm).")
    rotary_base: RopeBase = Field(10000, description="RoPE's base (theta) with position_embedding_type rope "
                                  "(Megatron-LM's --rotary-base; Llama 3.x 500000, Qwen2.5 1000000).")
    use_rope_scaling: bool = Field(False, description="Llama 3.x's RoPE frequency scaling (Megatron-LM's "
                                   "--use-rope-scaling), with position_embedding_type rope.")
    rope_scaling_factor: RopeFactor = Field(8.0, description="Its factor (Megatron-LM's --rope-scaling-factor).")
    norm_epsilon: Epsilon = Field(1e-5, description="The norms' epsilon (Megatron-LM's --norm-epsilon).")
    untie_embeddings_and_output_weights: bool = False
    embedding_layernorm: bool = False
    hidden_dropout: Dropout = 0.1
    attention_dropout: Dropout = 0.1


class TrainingSpec(_Strict):
    """Training settings that are not plan decisions."""

    seq_length: SeqLength = Field(description="Tokens per sequence.")
    global_batch_size: GlobalBatch = Field(description="Sequences per iteration.")
    precision: Literal["bf16", "fp16", "fp8"] = Field("bf16", description="bf16; fp16 (Volta, Turing); fp8: "
                                                      "Transformer Engine fp8 linear layers, bf16 elsewhere.")
    optimizer: Literal["adam"] = Field("adam", description="Adam with fp32 master weights.")
    attention: Literal["auto", "fused", "flash2", "flash", "flash1", "unfused"] = Field(
        "auto", description="auto: what the runtime and the GPU use (fused with Transformer Engine where the GPU has "
        "FlashAttention-class kernels, unfused on Volta/Turing or the local spec, flash2 for FSDP and for search "
        "--target deepspeed); fused: cuDNN / "
        "Transformer Engine fused attention; flash2 (or flash): FlashAttention-2; flash1: FlashAttention-1-class "
        "kernels (flash-attn 1.x, the Triton port llm-foundry's MPT runs); unfused: Megatron's path that "
        "materialises the scores.")
    runtime: Literal["megatron", "deepspeed", "fsdp"] = Field(
        "megatron", description="Framework whose behaviour the cost model follows (ZeRO-3 gathers one buffer per layer "
        "in Megatron and FSDP; deepspeed is DeepSpeed's ZeRO-3 of 2021, one gather per module at its measured "
        "24.3 GB/s per GPU).")
    fp8_recipe: Literal["delayed", "tensorwise", "mxfp8"] = Field(
        "delayed", description="Transformer Engine's fp8 scaling, with precision fp8 (Megatron-LM's --fp8-recipe): "
        "delayed (amax history, Megatron's default), tensorwise (current scaling: each tensor's own amax, one more "
        "read per cast), mxfp8 (one scale per 32 elements; Blackwell only). blockwise is not modelled.")
    transformer_impl: Literal["transformer_engine", "local"] = Field(
        "transformer_engine", description="How Megatron builds its layers: transformer_engine (fused kernels, "
        "gradient-accumulation fusion) or local (megatron-core's PyTorch fallbacks).")
    pipeline_scatter_gather: bool = Field(
        False, description="true for Megatron-LM before megatron-core (March 2023), whose "
        "--scatter-gather-tensors-in-pipeline (on by default) sent 1/TP of the activations per TP rank across a "
        "stage boundary and all-gathered them on the receiving node; megatron-core sends the whole tensor from every "
        "TP rank unless sequence parallelism splits it.")
    # Megatron-LM's spellings (hgplan/megatron_args.py maps them before validation; listed here for the schema)
    bf16: bool | None = Field(None, strict=True,
                              description="Megatron-LM's --bf16: precision bf16 (or fp8 with fp8_format).")
    fp16: bool | None = Field(None, strict=True, description="Megatron-LM's --fp16: precision fp16.")
    fp8_format: Literal["e4m3", "hybrid"] | None = Field(
        None, description="Megatron-LM's --fp8-format (dest fp8): precision fp8; needs bf16: true beside it.")
    fp8: Literal["e4m3", "hybrid"] | None = Field(None, description="Megatron-LM's dest of --fp8-format.")
    attention_backend: Literal["flash", "fused", "unfused", "local", "auto"] | None = Field(
        None, description="Megatron-LM's --attention-backend: flash -> flash2, local -> unfused (Megatron's own "
        "DotProductAttention), the others by name.")
    use_flash_attn: bool | None = Field(None, strict=True,
                                        description="Megatron-LM's older --use-flash-attn: attention flash2.")


MOE_KEYS = frozenset({"num_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                      "expert_model_parallel_size", "moe_layer_freq", "moe_router_load_balancing_type"})


class CalibrationRunSpec(_Strict):
    """One run of `hgplan calibrate`: what ran and how long it took."""

    name: Name
    cluster: PathText = Field(description="Cluster YAML (relative to the runs file) or example fleet name.")
    model: PathText = Field(description="Model preset or model YAML (relative to the runs file).")
    training: dict = Field(description="Training settings, as in a training file.")
    plan: dict = Field(description="The plan that ran: tp, pp, dp, micro_batch_size, stages [{node_group, layers}] "
                                   "and optionally cp, vpp, recompute, sequence_parallel, zero_stage.")
    log: PathText | None = Field(None, description="Megatron-LM training log (relative to the runs file).")
    iteration_time_ms: Millis | None = Field(None, description="Measured time per iteration, instead of a log.")


class CalibrationRunsSpec(_Strict):
    """The runs file of `hgplan calibrate`."""

    runs: list[CalibrationRunSpec] = Field(min_length=1)
