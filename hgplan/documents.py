"""Typed JSON documents: what `search`, `explain` and `export` print with --json, and plan files.

Pydantic models: typed library results, plan files validated on read, and the JSON Schemas of `hgplan schema
search|explain|export|plan`. Optional parts are left unset and dumped with `exclude_unset`: a key appears exactly
when the document has it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hgplan.yamlio import text_sha256  # noqa: F401 - the digest every document records, re-exported

SCHEMA_VERSION = "1"
"""Version of every JSON document hgplan writes; a reader refuses another."""
SEARCH_KIND = "hgplan.search"
PLAN_KIND = "hgplan.plan"


class Doc(BaseModel):
    """Base of every document part: unknown keys are an error (a typo in a hand-edited plan file is caught)."""

    model_config = ConfigDict(extra="forbid")

    def model_post_init(self, context: Any, /) -> None:
        """A document's schema version and kind are always written, though they have defaults."""
        self.__pydantic_fields_set__.update(k for k in ("schema_version", "kind") if k in type(self).model_fields)

    def to_json_dict(self) -> dict[str, Any]:
        """The document as JSON-ready dicts and lists, with exactly the keys it was given."""
        return self.model_dump(mode="json", exclude_unset=True)


class TrainingRecord(Doc):
    """The training settings a plan was made for."""

    seq_length: int = Field(ge=1)
    global_batch_size: int = Field(ge=1)
    precision: str
    optimizer: str
    attention: str
    runtime: str
    transformer_impl: str = "transformer_engine"
    fp8_recipe: str = Field("delayed", description="Transformer Engine's fp8 scaling (written with precision fp8)")


class StageRecord(Doc):
    """One pipeline stage of a plan: its node group and its layers."""

    node_group: str = Field(description="site/group hosting every GPU of the stage")
    layers: int = Field(ge=1)
    tp: int | None = Field(None, ge=1, description="this stage's own tp (asymmetric plans only)")
    dp: int | None = Field(None, ge=1, description="this stage's own dp (asymmetric plans only)")
    recompute: Literal["none", "selective", "full"] | None = Field(
        None, description="this stage's own recomputation (asymmetric plans only)")


class PlanRecord(Doc):
    """A plan's degrees and stages (the input of the cost model and of every exporter)."""

    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    cp: int = Field(1, ge=1)
    micro_batch_size: int = Field(ge=1)
    vpp: int = Field(1, ge=1)
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: bool = False
    zero_stage: Literal[0, 1, 2, 3] = 0
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = True
    stages: list[StageRecord] = Field(min_length=1)

    @property
    def asymmetric(self) -> bool:
        """Whether the stages carry their own degrees (an asymmetric plan writes them on every stage)."""
        return self.stages[0].tp is not None


class PredictionRecord(Doc):
    """The cost model's prediction for one plan: iteration time from the pipeline simulator (method), the one number
    search, explain, plan files, diff and the CI gate report."""

    iteration_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    pipeline_s: float
    num_microbatches: int
    bottleneck_stage: int
    fits: bool
    overflow_stages: list[int]
    method: str


class MemoryRecord(Doc):
    """Per-GPU memory of one stage by kind (GiB), and the micro-batches whose activations it holds."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float
    inflight_microbatches: float


class StageResult(Doc):
    """Time and memory of one stage as the cost model predicts them."""

    index: int
    node_group: str
    site: str
    gpu: str
    gpus: int
    layers: int
    fwd_s: float
    bwd_s: float
    compute_s: float
    p2p_s: float
    dp_sync_s: float
    optimizer_s: float
    memory_gib: float
    memory_capacity_gib: float
    headroom_gib: float
    fits: bool
    memory: MemoryRecord


class EntrySolver(Doc):
    """What the solver's integer tables said of a plan (the ranking uses the cost model)."""

    objective_s: float
    status: str = Field(description="where the plan came from: CP-SAT's status of the stage-level solve (OPTIMAL, "
                                    "FEASIBLE), BLOCK (the block model's solution, expanded to stages), HINT (the warm "
                                    "start), PROBE (the warm start's heuristic on a candidate before the search's "
                                    "first bound), SIM_ + a status (polished by the simulator), SEED (a mesh "
                                    "candidate's seed plan, --target flagscale); docs/planner.md")


class PlanEntry(Doc):
    """One ranked plan of a search."""

    rank: int
    plan: PlanRecord
    prediction: PredictionRecord
    stages: list[StageResult]
    gpus_used: int
    worst_headroom_gib: float
    origin: str = "search"
    """'search'; 'proof': found by --prove-gap (its solver objective is then the lower-bound model's); or
    'baseline:NAME': a baseline that beat the solver's plans under the reported model."""
    solver: EntrySolver | None = None


class IdleGpus(Doc):
    """GPUs of one node group the best plan leaves idle, and why."""

    node_group: str
    gpus: int
    reason: str


class SearchFinding(Doc):
    """Something about the best plan a user must act on before it runs (beside its idle GPUs)."""

    kind: Literal["cross_vendor_pipeline", "global_batch"]
    message: str
    node_groups: list[str] = Field(description="the node groups it concerns")


class BaselineRecord(Doc):
    """A baseline plan evaluated by the same cost model, with hgplan's speedup over it."""

    description: str
    available: bool
    note: str | None = None
    plan: PlanRecord | None = None
    prediction: PredictionRecord | None = None
    speedup: float | None = None


class ClusterInput(Doc):
    """Where the cluster came from: a path or `example:NAME`, and the sha256 of its text."""

    ref: str
    sha256: str


class ModelInput(Doc):
    """Where the model came from: a path or `preset:NAME`, and its name."""

    ref: str
    name: str


class SearchInputs(Doc):
    """The inputs of a search."""

    cluster: ClusterInput
    model: ModelInput
    training: TrainingRecord
    target: Literal["megatron", "deepspeed", "flagscale"]
    profile: ClusterInput | None = Field(None, description="the calibration profile (--profile): path and sha256")


class SolverRecord(Doc):
    """The CP-SAT parameters and limits of a search: the limits are the largest any solve ran under."""

    num_workers: int
    random_seed: int
    max_deterministic_time: float
    max_time_in_seconds: float
    relative_gap_limit: float
    time_limit_s: float
    budget_deterministic_s: float
    max_gap: float
    max_pp: int | None = Field(None, description="--max-pp: the most pipeline stages searched (null: the layers)")
    max_vpp: int | None = Field(None, description="the deepest interleaving searched (search --max-vpp; default 2 "
                                "with --target megatron, 1 with the others; null in plan files written before "
                                "2026-11-29)")
    solver_params: str = Field("", description="text-format SatParameters given with --solver-params")
    lower_bound_params: str = Field("", description="text-format SatParameters hgplan sets on its lower-bound models "
                                    "(polishing and --prove-gap), before --solver-params")
    mesh_params: str = Field("", description="text-format SatParameters hgplan sets on the asymmetric family's "
                             "models (--target flagscale only), before --solver-params")
    solve_threads: int = Field(1, description="solves run at once where they do not wait on each other (the path "
                               "solves of waiting items, beside the search; a mesh candidate's pairs of end hosts), "
                               "each a num_workers solve on its own thread; fixed, so runs stay reproducible on any "
                               "machine")


class CandidateCounts(Doc):
    """How the search disposed of the outer candidates."""

    total: int
    solved: int
    pruned_by_bound: int
    skipped_by_budget: int
    infeasible: int


class ProofRecord(Doc):
    """`search --prove-gap`: the bound on the reported (simulated) iteration time of every plan of the stock family
    (planner/certify.py; docs/planner.md, "What the gap means")."""

    bound_s: float
    solved: int = Field(description="configurations whose lower-bound model CP-SAT solved")
    pruned_by_bound: int = Field(description="configurations whose cheap lower bound was already within --max-gap")
    skipped_by_budget: int = Field(description="configurations left at their cheap lower bound when time ran out")
    faster_plans_found: int = Field(description="plans the proof found faster, under the simulator, than the search's")
    chains: int = Field(0, description="the simulator's critical chains added to the lower-bound models (each bounds "
                                       "every plan of its schedule shape)")
    resolves: int = Field(0, description="solves again after adding chains")
    retried: int = Field(0, description="solves again, with twice the time each round, of configurations whose solve "
                                        "stopped at its limit below the target")
    unsettled: int = Field(0, description="configurations whose solves all stopped at their limits below the target: "
                                          "they keep the bound CP-SAT reached (a warning says so)")
    solver_statuses: dict[str, int]
    deterministic_time: float
    stopped_by: Literal["complete", "budget", "wall"]


TABLE_ROUNDING = 1e-4
"""Relative amount by which the search's bound may exceed the simulated time of the same plan through the integer
tables' rounding alone (every cost to the nearest microsecond, planner.costs.to_us): on a one-stage plan of 1.498 s
they summed 20 us above the simulator. Within it, the bound is not 'above' the simulated time."""


class SearchStats(Doc):
    """bound_s, relative_gap: proven, of the search objective (closed-form tables); gap_on_reported: of the reported
    (simulated) iteration_time_s, proven only if gap_proven (with --prove-gap, for the stock family: proof;
    gap_note says which; docs/planner.md). Unproven, it is negative when the simulated time is below the search
    objective's bound: that bound then says nothing of the simulated time."""

    stopped_by: Literal["complete", "budget", "wall"]
    candidates: CandidateCounts
    solver_statuses: dict[str, int] = Field(description="solves by CP-SAT status: the stage-level model's by name, "
                                                        "the block model's as BLOCK_ + the status, with the steady "
                                                        "paths as BLOCK_PATHS_ + the status (docs/planner.md)")
    iteration_time_s: float
    gap_on_reported: float
    gap_proven: bool
    gap_note: str
    best_objective_s: float
    bound_s: float
    relative_gap: float
    deterministic_time: float
    wall_time_s: float | None = None
    proof: ProofRecord | None = None

    @property
    def bound_above_reported(self) -> bool:
        """The unproven bound is above the simulated time by more than the tables' rounding, so gap_on_reported
        (negative) says nothing of it."""
        return not self.gap_proven and self.gap_on_reported < -TABLE_ROUNDING

    @property
    def shown_gap(self) -> float:
        """gap_on_reported for display: a bound above the simulated time by no more than the tables' rounding is a
        gap of 0, not a negative one."""
        return max(0.0, self.gap_on_reported) if self.gap_on_reported >= -TABLE_ROUNDING else self.gap_on_reported


class AsymmetricRecord(Doc):
    """`--target flagscale`: the asymmetric (process-mesh) family searched beside the stock one, both judged by the
    reported model. bound_s is proven for both families under the search objective (the stock family is the case
    where every mesh takes the same degrees)."""

    stock_iteration_time_s: float
    stock_plan: PlanRecord
    stock_family: str = Field("", description="which stock plans the stock best was chosen from (FlagScale's "
                              "heterogeneous mode runs neither interleaving nor context parallelism)")
    best_is_asymmetric: bool
    speedup_over_stock: float = Field(description="stock best / best iteration time (>= 1)")
    best_objective_s: float
    bound_s: float
    relative_gap: float
    candidates: CandidateCounts
    solver_statuses: dict[str, int] = Field(description="mesh solves by CP-SAT status, the seed plans of "
                                            "candidates of two or more hosts as SEED_FOUND (below the incumbent), "
                                            "SEED_ABOVE or SEED_NONE, and as BOUNDED the solves that the cuts left "
                                            "no pair of end hosts to solve (docs/planner.md, 'Asymmetric plans')")
    deterministic_time: float
    stopped_by: Literal["complete", "budget", "wall"]


class RegressionRecord(Doc):
    """The CI gate: the fresh best plan against a committed one."""

    baseline_tokens_per_s: float
    tokens_per_s: float
    change: float
    max_regression: float
    failed: bool
    message: str


class SearchReport(Doc):
    """`hgplan search --json`."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    kind: Literal["hgplan.search"] = SEARCH_KIND
    hgplan_version: str
    ortools_version: str
    inputs: SearchInputs
    solver: SolverRecord
    search: SearchStats
    plans: list[PlanEntry] = Field(min_length=1)
    idle_gpus: list[IdleGpus]
    findings: list[SearchFinding] | None = Field(None, description="what the best plan needs before it runs "
                                                 "(e.g. a pipeline across GPU vendors)")
    warnings: list[str]
    baselines: dict[str, BaselineRecord] | None = None
    asymmetric: AsymmetricRecord | None = None
    regression: RegressionRecord | None = None


class SourceText(Doc):
    """An input file travelling inside a plan file: where it came from, its digest and its text."""

    ref: str
    sha256: str
    yaml: str


class ModelSourceText(Doc):
    """The model file inside a plan file."""

    ref: str
    name: str
    yaml: str
    sha256: str


class PlanInputs(Doc):
    """Everything a plan file needs to be re-evaluated without other files."""

    cluster: SourceText
    model: ModelSourceText
    training: TrainingRecord
    target: Literal["megatron", "deepspeed", "flagscale"] = "megatron"
    """The framework the plan was searched for (domain.Target)."""
    profile: SourceText | None = None
    """The calibration profile the plan was made with, embedded so the plan file stays self-contained."""


class PlanFile(Doc):
    """A plan file (`hgplan search -o plan.json`): the best plan, self-contained."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    kind: Literal["hgplan.plan"] = PLAN_KIND
    hgplan_version: str
    inputs: PlanInputs
    plan: PlanRecord
    prediction: PredictionRecord
    stages: list[StageResult] = []
    search: SearchStats | None = None
    solver: SolverRecord | None = None
    baselines: dict[str, BaselineRecord] = {}


class ReshardRecord(Doc):
    """An asymmetric plan's mesh boundary: the sending and the receiving stage's degrees (costmodel/reshard.py)."""

    from_tp: int
    from_dp: int
    to_tp: int
    to_dp: int


class BoundaryRecord(Doc):
    """One pipeline boundary of a plan: where it runs and what one message costs."""

    from_stage: int
    to_stage: int
    path: str
    transport: str | None
    send_s: float
    latency_s: float
    message_mib: float
    reshard: ReshardRecord | None = Field(None, description="a mesh boundary: the degrees it re-shards between")
    host_copy: bool | None = Field(None, description="every message goes through host memory: GPUs of two vendors, "
                                   "or a mesh plan whose meshes talk over gloo (docs/cost-model.md section 3)")


class WhatIf(Doc):
    """A binding resource, what it costs and what improving it gives (re-evaluated by the cost model)."""

    resource: str
    share_of_step: float
    what_if: str
    speedup: float
    text: str


class UpperBound(Doc):
    """HETHUB's yardstick: the fleet's tokens/s with every GPU at its achievable matmul rate."""

    tokens_per_s: float
    definition: str
    share_reached: float


class BasisEntry(Doc):
    """What one term of the prediction rests on."""

    term: str
    basis: Literal["calibrated", "validated", "physics"]
    detail: str


class ExplainBaseline(Doc):
    """A baseline's speedup as `explain` repeats it from the plan file."""

    available: bool
    speedup: float
    description: str


class ExplainInputs(Doc):
    """What `explain` was given."""

    cluster: str
    model: str
    model_name: str
    training: TrainingRecord


class ExplainReport(Doc):
    """`hgplan explain --json`."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    hgplan_version: str
    inputs: ExplainInputs
    plan: PlanRecord
    prediction: PredictionRecord
    stages: list[StageResult]
    boundaries: list[BoundaryRecord]
    findings: list[str]
    what_if: list[WhatIf]
    upper_bound: UpperBound
    baselines: dict[str, ExplainBaseline] | None = None
    warnings: list[str] | None = None
    basis: list[BasisEntry] | None = None


class ExportNode(Doc):
    """One node of an export: its host, rank range and (where the target has one) its command and environment."""

    host: str
    node_rank: int
    node_group: str
    nproc: int
    first_rank: int
    env: dict[str, str] | None = None
    argv: list[str] | None = None


class ExportReport(Doc):
    """`hgplan export --json`: the launch arguments, nodes, file names and contents."""

    format: str
    argv: list[str]
    nodes: list[ExportNode]
    files: list[str]
    warnings: list[str]
    notes: list[str]
    file_contents: dict[str, str]


class GpuConstants(Doc):
    """Cost-model constants of one GPU type measured on the user's hardware (each overrides its architecture's)."""

    gemm_efficiency: float | None = Field(None, gt=0, le=2)
    attention_efficiency: float | None = Field(None, gt=0, le=2)
    fused_attention_efficiency: float | None = Field(None, gt=0, le=2)
    flash1_attention_efficiency: float | None = Field(None, gt=0, le=2)
    fp8_gemm_efficiency: float | None = Field(None, gt=0, le=2)
    hbm_efficiency: float | None = Field(None, gt=0, le=2)
    collective_efficiency: float | None = Field(None, gt=0, le=2)


class TransportConstants(Doc):
    """A transport's achievable share of line rate measured on the user's network."""

    efficiency: float | None = Field(None, gt=0, le=1.5)


class RunResidual(Doc):
    """One calibration run: its measured and fitted iteration time."""

    run: str
    measured_s: float
    predicted_s: float
    error: float


class ProfileFit(Doc):
    """How well the profile explains the runs it was fitted on."""

    runs: int
    rms_error: float
    residuals: list[RunResidual]
    not_identifiable: list[str] = Field(default_factory=list, description="constants the runs do not constrain; "
                                        "kept at the catalog's value")


class BenchDevice(Doc):
    """Where `hgplan bench` ran."""

    name: str = Field(description="the device's own name (torch), e.g. 'NVIDIA H100 80GB HBM3', or 'cpu'")
    backend: Literal["cuda", "rocm", "cpu"]
    count: int = Field(ge=1, description="devices of this kind the collectives ran over (1: none ran)")
    torch_version: str
    runtime_version: str | None = Field(None, description="CUDA or ROCm version torch was built with")
    sm_count: int | None = Field(None, ge=1)
    memory_gib: float | None = Field(None, gt=0)


class BenchGemm(Doc):
    """One timed matmul (m x k) @ (k x n)."""

    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    ms: float = Field(gt=0, description="median of the timed repeats")
    runs_ms: list[float]


class BenchFp8Gemm(Doc):
    """One timed fp8 matmul (m x k) @ (k x n) of a linear layer's pass, as Transformer Engine runs it on Hopper."""

    gemm_pass: Literal["fprop", "dgrad", "wgrad"] = Field(
        description="fprop: E4M3 x E4M3 with fast accumulation; dgrad, wgrad: E5M2 x E4M3 with split accumulation")
    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    ms: float = Field(gt=0, description="median of the timed repeats")
    runs_ms: list[float]


class BenchAttention(Doc):
    """One timed causal attention kernel (PyTorch scaled_dot_product_attention with one backend)."""

    kernel: Literal["flash2", "fused", "efficient", "unfused", "cpu"] = Field(
        description="flash2: SDPA's FlashAttention-2 backend; fused: cuDNN fused attention (what Transformer Engine "
                    "runs on Hopper); efficient: the memory-efficient backend; unfused: SDPA's math backend")
    batch: int = Field(ge=1)
    heads: int = Field(ge=1)
    seq: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    fwd_ms: float = Field(gt=0)
    fwd_bwd_ms: float = Field(gt=0)


class BenchCopy(Doc):
    """One timed device-to-device copy of `bytes` (it reads and writes them once)."""

    bytes: int = Field(ge=1)
    ms: float = Field(gt=0)


class BenchCollective(Doc):
    """One timed collective over the ranks of one node (NCCL on GPUs, gloo on the CPU)."""

    op: Literal["all_reduce", "send_recv"]
    ranks: int = Field(ge=2)
    bytes: int = Field(ge=1, description="the buffer each rank reduces (all_reduce) or sends (send_recv)")
    ms: float = Field(gt=0, description="median over the repeats of the slowest rank's time")

    @property
    def bus_gbytes_per_s(self) -> float:
        """NCCL's bus bandwidth (nccl-tests' busbw): an all-reduce moves 2 (n - 1) / n of the buffer through each
        rank's link; a send moves the buffer once."""
        share = 2 * (self.ranks - 1) / self.ranks if self.op == "all_reduce" else 1.0
        return share * self.bytes / (self.ms / 1e3) / 1e9


class BenchReport(Doc):
    """`hgplan bench`'s output, read by `hgplan calibrate --bench`: kernel and collective times on one machine."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    kind: Literal["hgplan.bench"] = "hgplan.bench"
    hgplan_version: str
    gpu: str | None = Field(None, description="the catalog GPU id the device is (None on the CPU)")
    device: BenchDevice
    precision: Literal["bf16", "fp16", "fp32"]
    repeats: int = Field(ge=1)
    gemms: list[BenchGemm] = Field(default_factory=list)
    fp8_gemms: list[BenchFp8Gemm] = Field(default_factory=list, description="the layer GEMMs' three passes in fp8 "
                                          "(GPUs with an fp8 peak in the catalog)")
    attention: list[BenchAttention] = Field(default_factory=list)
    copies: list[BenchCopy] = Field(default_factory=list)
    collectives: list[BenchCollective] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list, description="what was not measured, and why")


class BenchConstant(Doc):
    """One constant derived from microbenchmarks: the value that makes the cost model's own formula reproduce the
    measured kernels (their median), and how well it then does."""

    gpu: str
    constant: str
    value: float
    measurements: int = Field(ge=1)
    implied_min: float = Field(description="smallest value one measurement alone implies")
    implied_max: float
    catalog_value: float
    median_abs_error_before: float = Field(description="median |error| of the model's kernel times with the "
                                           "catalog's value")
    median_abs_error_after: float


class CalibrationProfile(Doc):
    """`hgplan calibrate`'s output, read by `--profile`: per-GPU and per-transport constants of the user's fleet."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    kind: Literal["hgplan.profile"] = "hgplan.profile"
    hgplan_version: str
    gpus: dict[str, GpuConstants] = Field(default_factory=dict)
    transports: dict[str, TransportConstants] = Field(default_factory=dict)
    fit: ProfileFit | None = None
    bench: list[BenchConstant] | None = Field(None, description="constants measured by `hgplan bench` (held fixed "
                                              "while runs are fitted)")


class ErrorIssue(Doc):
    """One problem, located as precisely as hgplan can: the file, its line and the key inside the document."""

    file: str | None = Field(description="the input file ('<stdin>', '<preset:NAME>'), or null for a command-line "
                                         "option or a finding")
    line: int | None
    key: str | None = Field(description="dotted key path inside the document, e.g. sites.0.node_groups.1.count")
    message: str


class ErrorRecord(ErrorIssue):
    """Why the command failed: its exit code, and the first problem (all of them in `issues`)."""

    code: Literal[1, 2, 3] = Field(description="the exit code: 1 a planning finding (nothing fits, a regression, a "
                                               "target that cannot run the plan), 2 bad usage or bad input, 3 no "
                                               "answer within the time limit")
    kind: Literal["finding", "input", "usage", "no_answer"]
    issues: list[ErrorIssue]


class ErrorDocument(Doc):
    """What a command run with --json writes on stdout when it fails with exit 1, 2 or 3."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    kind: Literal["hgplan.error"] = "hgplan.error"
    hgplan_version: str
    error: ErrorRecord


SCHEMAS: dict[str, type[Doc]] = {"search": SearchReport, "explain": ExplainReport, "export": ExportReport,
                                 "plan": PlanFile, "profile": CalibrationProfile,
                                 "bench": BenchReport, "error": ErrorDocument}
"""The documents whose JSON Schema `hgplan schema` prints, by name."""


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one of SCHEMAS."""
    doc = SCHEMAS[name].model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"https://hgplan.dev/schema/{name}.json",
            **doc}
