"""Frozen domain objects. Units are in the names: *_gib, *_gbps (Gbit/s), *_gbytes_per_s, *_s, *_ms."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# re-exported: the domain's vocabulary is imported from here
from hgplan.enums import (ATTENTION_ALIASES, Attention, ExportFormat, Fp8Recipe, PathKind, Precision,  # noqa: F401
                          Runtime, Target, TransformerImpl, Transport)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchEfficiency:
    """The per-architecture constants of the cost model (profiles/architectures.yaml)."""

    gemm_efficiency: float
    attention_efficiency: float
    hbm_efficiency: float
    collective_efficiency: float
    kernel_overhead_us: float
    bf16: bool
    fp8: bool
    sustained_clock_fraction: float = 1.0
    """Clock of a training step's matmul phases relative to the clock the datasheet peak assumes (power cap)."""
    fused_attention_efficiency: float | None = None
    """cuDNN / Transformer Engine fused attention, fwd+bwd, of the sustained peak (None: as attention_efficiency)."""
    flash1_attention_efficiency: float | None = None
    """FlashAttention-1-class kernels (flash-attn 1.x, the Triton port), fwd+bwd, of the sustained peak (None: as
    attention_efficiency)."""
    fp8_gemm_efficiency: float | None = None
    """fp8 linear-layer GEMMs (Transformer Engine's recipe: E4M3 forward with fast accumulation, E5M2 x E4M3 dgrad and
    wgrad with split accumulation) of the fp8 peak, on the same footing as gemm_efficiency (None: as
    gemm_efficiency)."""
    mxfp8: bool = False
    """Whether the tensor cores take OCP MX block-scaled fp8 (Blackwell); Hopper's fp8 takes one scale per tensor."""
    flash_attention: bool = True
    """Whether FlashAttention-class kernels exist for the architecture (not on Volta or Turing)."""
    gemm_waves: bool = False
    """True where gemm_efficiency is a measured per-clock figure and GEMMs are priced in whole tiles and waves over
    the SMs (Hopper); False where it is a best-shape MAMF figure paired with 0.1.0's smooth small-shape penalty (not
    yet measured per clock on these architectures)."""
    comm_sm_share: float = 0.0
    """Share of the compute units a collective's kernels hold while it overlaps compute (NCCL/RCCL channels / SMs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportProfile:
    """A NIC transport's achievable share of line rate and its latency (profiles/nics.yaml)."""

    name: str
    efficiency: float
    latency_us: float
    rdma: bool
    calibrated: bool = False
    """Whether a calibration profile (`--profile`) set the efficiency on the user's network."""
    socket_streams: int = 0
    """TCP sockets NCCL opens per connection (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD); 0 for RDMA."""
    stream_gbytes_per_s: float = 0.0
    """What one of those sockets carries at most, GB/s; and at most a window of window_mib (0: none) per round trip."""
    window_mib: float = 0.0

    def achieved_gbytes_per_s(self, line_gbps: float, *, rtt_s: float = 0.0, window_mib: float | None = None) -> float:
        """What one flow gets of `line_gbps` of line rate: the transport's share of it, within its sockets, each at most
        stream_gbytes_per_s and a window (window_mib, default the transport's) per round trip rtt_s."""
        share = line_gbps / 8.0 * self.efficiency
        if not self.socket_streams:
            return share
        stream, window = self.stream_gbytes_per_s, self.window_mib if window_mib is None else window_mib
        if rtt_s > 0 and window > 0:
            stream = min(stream, window * 2 ** 20 / rtt_s / 1e9)
        return min(share, self.socket_streams * stream)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuType:
    """One GPU model with its datasheet figures and its architecture's constants."""

    id: str
    vendor: str
    arch: str
    form_factor: str
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    hbm_gib: float
    hbm_gbytes_per_s: float
    intra_node_kind: str
    intra_node_gbytes_per_s: float
    tdp_w: float | None
    source: str
    eff: ArchEfficiency
    sm_count: int | None = None
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) a GEMM's tiles are spread over in waves."""
    calibrated: tuple[str, ...] = ()
    """Constants a calibration profile (`--profile`) set for this GPU type on the user's hardware."""

    def peak_tflops(self, precision: Precision) -> float | None:
        """Dense tensor TFLOP/s at this precision (None when the datasheet gives none)."""
        if precision is Precision.BF16:
            return self.bf16_tflops if self.eff.bf16 else None
        if precision is Precision.FP8:
            return self.fp8_tflops if self.eff.fp8 and self.eff.bf16 else None
        return self.fp16_tflops

    def supports(self, precision: Precision) -> bool:
        """Whether the GPU has tensor cores for this precision."""
        return self.peak_tflops(precision) is not None

    def trains(self, train: "TrainingSettings") -> bool:
        """Whether the GPU runs the training precision: its tensor cores, and MX block scaling for fp8 mxfp8."""
        if not self.supports(train.precision):
            return False
        return self.eff.mxfp8 or not train.mxfp8


@dataclass(frozen=True, slots=True, kw_only=True)
class PcieTopology:
    """How a PCIe node's GPUs reach each other (docs/cost-model.md, PCIe collectives)."""

    p2p: bool = True
    """NCCL moves data GPU to GPU between the GPUs of one socket (else it stages it through host memory, SHM)."""
    sockets: int = 1
    """CPU sockets the GPUs are spread over evenly."""
    inter_socket_gbytes_per_s: float = 10.0
    """Per-direction bandwidth across the sockets' link."""
    host_memory_gbytes_per_s: float = 150.0
    """Achievable host memory bandwidth of one socket."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    """Identical nodes of one site: GPU type, GPUs per node, intra-node fabric and NICs."""

    site: str
    name: str
    num_nodes: int
    gpu: GpuType
    gpus_per_node: int
    intra_node_kind: str
    intra_node_gbytes_per_s: float
    nic_transport: Transport
    nic_gbps: float
    nic_count: int
    gpu_hour_usd: float | None
    order: int
    """Position in the cluster file (file order), used by the Megatron-default baseline."""
    hosts: tuple[str, ...] = ()
    """Host names from the cluster file; empty means placeholders."""
    pcie: PcieTopology = field(default_factory=PcieTopology)
    """The PCIe topology (used when intra_node_kind is pcie)."""

    def host(self, i: int) -> str:
        """The host name of node i (from the file's hosts, else SITE-GROUP-i)."""
        return self.hosts[i] if self.hosts else f"{self.site}-{self.name}-{i:02d}"

    @property
    def key(self) -> str:
        """'site/group', the group's unique name."""
        return f"{self.site}/{self.name}"

    @property
    def num_gpus(self) -> int:
        """GPUs in the group (or the fleet)."""
        return self.num_nodes * self.gpus_per_node

    @property
    def node_nic_gbps(self) -> float:
        """NIC bandwidth of one node, Gbit/s."""
        return self.nic_gbps * self.nic_count

    @property
    def nic_gbps_per_gpu(self) -> float:
        """NIC bandwidth per GPU, Gbit/s."""
        return self.node_nic_gbps / self.gpus_per_node


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A link between two sites (scope 'site') or two node groups of one site (scope 'group')."""

    scope: str
    a: str
    b: str
    gbps: float
    latency_ms: float
    transport: Transport
    egress_usd_per_gb: float | None
    tcp_window_mib: float | None = None
    """The TCP window one socket reaches over this link (None: the transport's, TransportProfile.window_mib)."""

    def joins(self, x: str, y: str) -> bool:
        """Whether the link joins these two names (either order)."""
        return {self.a, self.b} == {x, y}


@dataclass(frozen=True, slots=True, kw_only=True)
class NetPath:
    """How traffic flows between two node groups."""

    kind: PathKind
    gbps: float
    """Bandwidth available to the whole crossing (shared by all flows on it), Gbit/s."""
    per_gpu_gbps: float
    """NIC bandwidth of one GPU at the slower end, Gbit/s."""
    latency_s: float
    transport: Transport
    profile: TransportProfile
    """The transport's achievable share of line rate and, for sockets, what one flow carries at most."""
    shared: bool
    """True when the bandwidth is one link that all concurrent flows share."""
    link: Link | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """The whole cluster: node groups, links between sites and islands, and the transports' profiles."""

    name: str
    groups: tuple[NodeGroup, ...]
    links: tuple[Link, ...]
    transports: dict[str, TransportProfile] = field(hash=False, compare=False)
    mixed_transports: bool = True
    """Whether a pipeline boundary may join groups one NCCL transport cannot (one_transport): Megatron-LM puts such
    groups on sockets (nccl_pg.yaml); Megatron-DeepSpeed cannot, so for it (for_target) no path joins them."""

    def for_target(self, target: str) -> "Fleet":
        """The fleet as a target's runtime can use it: for Megatron-DeepSpeed, no paths one NCCL transport lacks."""
        return replace(self, mixed_transports=False) if target == Target.DEEPSPEED else self

    @property
    def cut_reason(self) -> str:
        """What, besides no link, leaves two groups without a path (' over one NCCL transport ...'), for messages."""
        return "" if self.mixed_transports else " over one NCCL transport, which Megatron-DeepSpeed needs"

    @property
    def sites(self) -> tuple[str, ...]:
        """Site names in file order."""
        seen: list[str] = []
        for g in self.groups:
            if g.site not in seen:
                seen.append(g.site)
        return tuple(seen)

    @property
    def num_gpus(self) -> int:
        """GPUs in the group (or the fleet)."""
        return sum(g.num_gpus for g in self.groups)

    def group(self, key: str) -> NodeGroup:
        """The node group with this key (KeyError when none)."""
        for g in self.groups:
            if g.key == key:
                return g
        raise KeyError(key)

    def find_group(self, ref: str) -> NodeGroup | None:
        """Resolve 'site/group' or a bare group name that is unique in the fleet."""
        if "/" in ref:
            return next((g for g in self.groups if g.key == ref), None)
        hits = [g for g in self.groups if g.name == ref]
        return hits[0] if len(hits) == 1 else None

    def _link(self, scope: str, x: str, y: str) -> Link | None:
        return next((lk for lk in self.links if lk.scope == scope and lk.joins(x, y)), None)

    def one_transport(self, a: NodeGroup, b: NodeGroup, path: NetPath | None = None) -> bool:
        """Whether one network transport carries NCCL's traffic between a and b (over `path`, their _path when not
        given) end to end. NCCL runs a single transport per communicator (NVIDIA/nccl#878): it cannot join InfiniBand
        to RoCE, nor either to a path without RDMA (a link between islands or sites), which it could only cross on
        sockets; nodes that have only Ethernet NICs run sockets throughout, which it can."""
        path = self._path(a, b) if path is None else path
        if path is None or a.key == b.key:
            return True
        if a.nic_transport != b.nic_transport:
            return False
        return self.transports[path.transport].rdma or not self.transports[a.nic_transport].rdma

    def path(self, a: NodeGroup, b: NodeGroup) -> NetPath | None:
        """The network path between two groups, or None when they cannot reach each other directly (nor, without
        mixed_transports, over one NCCL transport)."""
        path = self._path(a, b)
        return path if self.mixed_transports or self.one_transport(a, b, path) else None

    def _path(self, a: NodeGroup, b: NodeGroup) -> NetPath | None:
        per_gpu = min(a.nic_gbps_per_gpu, b.nic_gbps_per_gpu)
        if a.key == b.key:
            tp = self.transports[a.nic_transport]
            return NetPath(kind=PathKind.SAME_GROUP, gbps=a.node_nic_gbps * a.num_nodes, per_gpu_gbps=per_gpu,
                           latency_s=tp.latency_us * 1e-6, transport=a.nic_transport, profile=tp, shared=False)
        if a.site == b.site:
            lk = self._link("group", a.name, b.name)
            if lk is None:
                if a.nic_transport != b.nic_transport:
                    return None
                tp = self.transports[a.nic_transport]
                return NetPath(kind=PathKind.SAME_FABRIC, gbps=min(a.node_nic_gbps * a.num_nodes, b.node_nic_gbps * b.num_nodes),
                               per_gpu_gbps=per_gpu, latency_s=tp.latency_us * 1e-6, transport=a.nic_transport,
                               profile=tp, shared=False)
            kind = PathKind.GROUP_LINK
        else:
            lk = self._link("site", a.site, b.site)
            if lk is None:
                return None
            kind = PathKind.SITE_LINK
        tp = self.transports[lk.transport]
        return NetPath(kind=kind, gbps=lk.gbps, per_gpu_gbps=per_gpu, latency_s=lk.latency_ms * 1e-3,
                       transport=lk.transport, profile=tp, shared=True, link=lk)


ACTIVATION_FFN_MATRICES = {"gelu": 2, "relu": 2, "squared_relu": 2, "swiglu": 3}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelArch:
    """A dense decoder-only transformer (Megatron-LM naming)."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    make_vocab_size_divisible_by: int
    max_position_embeddings: int
    position_embedding_type: str
    activation: str
    normalization: str
    add_bias_linear: bool
    untie_embeddings_and_output_weights: bool
    embedding_layernorm: bool
    add_qkv_bias: bool = False
    """A bias on the QKV projection (Megatron-LM's --add-qkv-bias; every linear layer's with add_bias_linear)."""
    qk_layernorm: bool = False
    """Queries and keys normalised per head (Megatron-LM's --qk-layernorm): two norms of kv_channels each."""
    rotary_base: int = 10000
    """RoPE's base (Megatron-LM's --rotary-base); like the three below, it changes no cost, only the launch."""
    use_rope_scaling: bool = False
    """Llama 3.x's RoPE frequency scaling (--use-rope-scaling)."""
    rope_scaling_factor: float = 8.0
    """Its factor (--rope-scaling-factor)."""
    norm_epsilon: float = 1e-5
    """The norms' epsilon (--norm-epsilon)."""
    hidden_dropout: float
    attention_dropout: float
    source: str = ""
    published_params_b: float | None = None
    published_params_decimals: int | None = None

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (SwiGLU: three matrices)."""
        return self.activation == "swiglu"

    @property
    def query_dim(self) -> int:
        """q = heads x head dim."""
        return self.num_attention_heads * self.kv_channels

    @property
    def kv_dim(self) -> int:
        """g x head dim (one of K or V)."""
        return self.num_query_groups * self.kv_channels

    def padded_vocab(self, tp: int) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP."""
        m = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // m) * m

    @property
    def norm_tensors(self) -> int:
        """Parameter tensors of one normalisation layer: weight (+ bias for LayerNorm)."""
        return 2 if self.normalization == "LayerNorm" else 1

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation layer."""
        return self.norm_tensors * self.hidden_size

    def tp_divides(self, tp: int) -> bool:
        """Whether Megatron-LM can split this model over tp tensor-parallel ranks: evenly over the attention heads,
        the KV groups and the MLP's inner width (RowParallelLinear divides its input, layers.py at d98e8a6)."""
        return not (self.num_attention_heads % tp or self.num_query_groups % tp or self.ffn_hidden_size % tp)

    def layer_params(self) -> int:
        """Parameters of one transformer layer."""
        h, q, kv, f = self.hidden_size, self.query_dim, self.kv_dim, self.ffn_hidden_size
        n_mat = ACTIVATION_FFN_MATRICES[self.activation]
        attn = h * (q + 2 * kv) + q * h
        mlp = n_mat * h * f
        bias = (q + 2 * kv + h + (n_mat - 1) * f + h) if self.add_bias_linear else (q + 2 * kv) * self.add_qkv_bias
        qk_norms = 2 * self.kv_channels * self.norm_tensors * self.qk_layernorm
        return attn + mlp + bias + 2 * self.norm_params + qk_norms

    def embedding_params(self, vocab: int | None = None) -> int:
        """Input embedding (+ learned positions, + embedding norm)."""
        v = self.vocab_size if vocab is None else vocab
        pos = self.max_position_embeddings * self.hidden_size if self.position_embedding_type == "learned_absolute" else 0
        return v * self.hidden_size + pos + (self.norm_params if self.embedding_layernorm else 0)

    def output_params(self, vocab: int | None = None) -> int:
        """Final norm and, when untied, the output projection."""
        v = self.vocab_size if vocab is None else vocab
        head = v * self.hidden_size if self.untie_embeddings_and_output_weights else 0
        return self.norm_params + head

    def num_params(self) -> int:
        """Total parameters with the unpadded vocabulary (comparable with published counts)."""
        return self.num_layers * self.layer_params() + self.embedding_params() + self.output_params()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSettings:
    """Sequence length, global batch, precision, optimizer, attention kernel and runtime."""

    seq_length: int
    global_batch_size: int
    precision: Precision = Precision.BF16
    optimizer: str = "adam"
    attention: Attention = Attention.AUTO
    runtime: Runtime = Runtime.MEGATRON
    """Training framework whose behaviour is modelled (docs/cost-model.md)."""
    pipeline_scatter_gather: bool = False
    """Megatron-LM before megatron-core (March 2023): each TP rank sends 1/TP of the activations across a stage
    boundary and the receivers all-gather them (`--scatter-gather-tensors-in-pipeline`, on by default)."""
    transformer_impl: TransformerImpl = TransformerImpl.TRANSFORMER_ENGINE
    fp8_recipe: Fp8Recipe = Fp8Recipe.DELAYED
    """Transformer Engine's fp8 scaling (read with precision fp8 only)."""

    @property
    def mxfp8(self) -> bool:
        """Whether the run trains in fp8 with MX block scaling (it needs MX tensor cores and keeps block scales)."""
        return self.precision is Precision.FP8 and self.fp8_recipe is Fp8Recipe.MXFP8

    def for_target(self, target: str) -> "TrainingSettings":
        """The settings a target runs: with Megatron-DeepSpeed (--target deepspeed), attention `auto` is
        FlashAttention-2, what it runs with --use-flash-attn-v2 (export/deepspeed.py writes it; without it, its
        attention stores the scores), not Transformer Engine's fused kernel, which it lacks (until 2026-11-29 such
        plans were priced fused)."""
        if target == Target.DEEPSPEED and self.attention is Attention.AUTO:
            return replace(self, attention=Attention.FLASH2)
        return self

    @property
    def precision_name(self) -> str:
        """The precision as messages name it: 'fp8 (mxfp8)' for a recipe other than delayed scaling."""
        if self.precision is Precision.FP8 and self.fp8_recipe is not Fp8Recipe.DELAYED:
            return f"fp8 ({self.fp8_recipe.value})"
        return self.precision.value
