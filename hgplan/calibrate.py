"""`hgplan calibrate`: fit the cost model's per-GPU and per-transport constants to runs on the user's own fleet.

Pure: texts in, a CalibrationProfile out (the CLI reads the files). Each run is a plan that ran (cluster, model,
training settings, degrees and stages) with its measured iteration time, from a Megatron-LM log or given directly.
The fit moves the constants the runs depend on (GEMM, attention, HBM and collective efficiency per GPU type; the
achievable share of line rate per transport) to minimise the squared log error of the predicted iteration times
(Levenberg-Marquardt on log-multipliers, numerical Jacobian). Constants no run depends on are reported as not
identifiable and left at the catalog's values; `--profile` applies the result to `search` and `explain`.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace

import numpy as np

from hgplan import __version__
from hgplan.costmodel.compute import attention_kernel
from hgplan.costmodel.evaluate import evaluate
from hgplan.documents import (SCHEMA_VERSION, BenchConstant, CalibrationProfile, GpuConstants, ProfileFit, RunResidual,
                              TransportConstants)
from hgplan.domain import Attention, Fleet, ModelArch, Precision, TrainingSettings
from hgplan.errors import InputError
from hgplan.inputs import Catalog
from hgplan.plan import Plan

ITERATION_RE = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+)")
MEMORY_RE = re.compile(r"\[Rank (\d+)\].*?memory \(MB\).*?max allocated:\s*([0-9.]+)")
WARMUP_ITERATIONS = 1
"""Logged iterations dropped from the median (Megatron's first logged interval includes start-up)."""
MAX_FIT_STEPS = 60
JACOBIAN_STEP = 1e-4
"""Relative step of the numerical Jacobian (on log-multipliers)."""
IDENTIFIABLE = 1e-6
"""A constant is fitted when halving or raising it by half moves some run's log time by more than this: a term
that does not bind at the catalog's value (a fast NIC) may bind at the user's."""
PROBE = (0.5, 1.5)
TELLS_APART = 1e-3
"""Least singular value of the fitted runs' sensitivities (d log time / d log constant, at the fit) for the
constants to count as pinned down: along a direction below it, changing the constants e-fold moves no run's time by
0.1%, so every mix along it fits as well (fewer runs than constants, or runs that stress the same terms)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSummary:
    """What a Megatron-LM training log says about a run."""

    iteration_s: float
    """Median elapsed time per iteration after the warm-up interval."""
    iterations: int
    """Logged intervals the median is taken over."""
    max_allocated_gib: float | None
    """Largest 'max allocated' of any rank's memory report."""


def parse_megatron_log(text: str, source: str = "<log>") -> LogSummary:
    """The iteration time and peak memory of a Megatron-LM log (`elapsed time per iteration (ms)` lines and the
    `[Rank N] ... memory (MB) ... max allocated` report). InputError when the log has no iteration line after the
    first, which includes start-up."""
    times = [float(ms) / 1e3 for _, ms in ITERATION_RE.findall(text)]
    if not times:
        raise InputError(f"{source}: no 'elapsed time per iteration (ms)' line found; give the Megatron-LM training "
                         "log (stdout of pretrain_gpt.py) or iteration_time_ms in the run")
    kept = times[WARMUP_ITERATIONS:]
    if not kept:
        raise InputError(f"{source}: only the first logged interval ({times[0] * 1e3:.1f} ms per iteration) is in the "
                         "log, and it includes start-up; run past a second --log-interval, or give the steady time "
                         "as iteration_time_ms in the run")
    mem = [float(mb) for _, mb in MEMORY_RE.findall(text)]
    return LogSummary(iteration_s=statistics.median(kept), iterations=len(kept),
                      max_allocated_gib=max(mem) / 1024 if mem else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One measured run, ready to predict."""

    name: str
    plan: Plan
    fleet: Fleet
    model: ModelArch
    train: TrainingSettings
    measured_s: float


Param = tuple[str, str, str]
"""('gpu', GPU id, constant) or ('transport', name, 'efficiency')."""


def _params(runs: list[Run]) -> list[Param]:
    """The constants the runs could depend on: per GPU type used, its GEMM, HBM and collective efficiency, the
    attention kernel it runs and, for fp8 runs, its fp8 GEMM efficiency; per transport of the fleets, its
    efficiency."""
    out: dict[Param, None] = {}
    for r in runs:
        for st in r.plan.stages:
            g = r.fleet.group(st.node_group).gpu
            kernel = attention_kernel(r.train, g)
            names = ["hbm_efficiency", "collective_efficiency"]
            names.append("fp8_gemm_efficiency" if _fp8_rate(r, g) else "gemm_efficiency")
            if kernel is Attention.FUSED and g.eff.fused_attention_efficiency is not None:
                names.append("fused_attention_efficiency")
            elif kernel is Attention.FLASH1 and g.eff.flash1_attention_efficiency is not None:
                names.append("flash1_attention_efficiency")
            elif kernel is not Attention.UNFUSED:
                names.append("attention_efficiency")
            out.update({("gpu", g.id, n): None for n in names})
        out.update({("transport", str(t), "efficiency"): None for t in r.fleet.transports})
    return sorted(out)


def _fp8_rate(r: Run, g) -> bool:
    """Whether the run's linear layers run at the GPU's own fp8 GEMM rate. Its bf16 rate then prices only the output
    layer, a few percent of a step, which fp8 runs hardly tell apart from the linear layers (six runs with +-1% noise
    put it at 8.5): it is fitted from bf16/fp16 runs, or kept."""
    return r.train.precision is Precision.FP8 and g.eff.fp8_gemm_efficiency is not None


def _fp8_only(runs: list[Run], params: list[Param]) -> list[str]:
    """'GPU.gemm_efficiency (...)' for the GPU types whose runs are all fp8 (their bf16 rate is kept)."""
    fitted = {key for kind, key, name in params if name == "gemm_efficiency"}
    used = sorted({r.fleet.group(st.node_group).gpu.id for r in runs for st in r.plan.stages})
    return [f"{gid}.gemm_efficiency (only fp8 runs: kept at the catalog's)" for gid in used if gid not in fitted]


def _base_value(p: Param, runs: list[Run]) -> float:
    kind, key, name = p
    for r in runs:
        if kind == "transport" and key in r.fleet.transports:
            return r.fleet.transports[key].efficiency
        for g in r.fleet.groups:
            if kind == "gpu" and g.gpu.id == key:
                return getattr(g.gpu.eff, name)
    raise AssertionError(p)


def _with_values(fleet: Fleet, values: dict[Param, float]) -> Fleet:
    """The fleet with the given constants set."""
    groups = []
    for g in fleet.groups:
        over = {name: v for (kind, key, name), v in values.items() if kind == "gpu" and key == g.gpu.id}
        groups.append(replace(g, gpu=replace(g.gpu, eff=replace(g.gpu.eff, **over))) if over else g)
    transports = {k: replace(t, efficiency=values.get(("transport", str(k), "efficiency"), t.efficiency))
                  for k, t in fleet.transports.items()}
    return replace(fleet, groups=tuple(groups), transports=transports)


def _log_errors(runs: list[Run], params: list[Param], base: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log(predicted / measured) per run with the constants base x exp(x)."""
    values = dict(zip(params, base * np.exp(x)))
    return np.array([math.log(evaluate(r.plan, _with_values(r.fleet, values), r.model, r.train).iteration_time_s
                              / r.measured_s) for r in runs])


def _jacobian(runs: list[Run], params: list[Param], base: np.ndarray, x: np.ndarray, f0: np.ndarray) -> np.ndarray:
    cols = []
    for i in range(len(params)):
        step = np.zeros_like(x)
        step[i] = JACOBIAN_STEP
        cols.append((_log_errors(runs, params, base, x + step) - f0) / JACOBIAN_STEP)
    return np.array(cols).T


def _levenberg_marquardt(runs: list[Run], params: list[Param], base: np.ndarray) -> np.ndarray:
    """Log-multipliers minimising the squared log errors (damped Gauss-Newton, deterministic)."""
    x = np.zeros(len(params))
    f = _log_errors(runs, params, base, x)
    lam = 1e-3
    for _ in range(MAX_FIT_STEPS):
        J = _jacobian(runs, params, base, x, f)
        A, g = J.T @ J, J.T @ f
        step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
        trial = x + step
        f_trial = _log_errors(runs, params, base, trial)
        if f_trial @ f_trial < f @ f:
            x, f, lam = trial, f_trial, lam / 3
            if np.max(np.abs(step)) < 1e-7:
                break
        else:
            lam *= 5
            if lam > 1e8:
                break
    return x


def calibrate(runs: list[Run], *, fixed: frozenset[Param] = frozenset()) -> CalibrationProfile:
    """Fit the constants the runs depend on; constants no run constrains are listed, not changed. `fixed` constants
    (measured by `hgplan bench`, already in the runs' fleets) are held at their values. A fit that runs off to
    overflow ends in _check_range's message, without numpy's warnings on the way."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _calibrate(runs, fixed)


def _calibrate(runs: list[Run], fixed: frozenset[Param]) -> CalibrationProfile:
    if not runs:
        raise InputError("calibrate needs at least one run")
    candidates = [p for p in _params(runs) if p not in fixed]
    base_all = np.array([_base_value(p, runs) for p in candidates])
    f0 = _log_errors(runs, candidates, base_all, np.zeros(len(candidates)))
    active = []
    for i in range(len(candidates)):
        for factor in PROBE:
            x = np.zeros(len(candidates))
            x[i] = math.log(factor)
            if np.max(np.abs(_log_errors(runs, candidates, base_all, x) - f0)) > IDENTIFIABLE:
                active.append(i)
                break
    params = [candidates[i] for i in active]
    base = base_all[active]
    if len(runs) < len(params):  # fewer equations than unknowns: no fit can tell them apart, say so before the fit
        # (which may run off to overflow on the way and then only say that a constant left the profile's range)
        start = np.zeros(len(params))
        _check_told_apart(runs, params, _jacobian(runs, params, base, start, _log_errors(runs, params, base, start)))
    x = _levenberg_marquardt(runs, params, base) if params else np.zeros(0)
    fitted = dict(zip(params, base * np.exp(x)))
    _check_range(fitted)
    errors = _log_errors(runs, params, base, x)
    if params:
        _check_told_apart(runs, params, _jacobian(runs, params, base, x, errors))
    gpus: dict[str, dict[str, float]] = {}
    transports: dict[str, TransportConstants] = {}
    for (kind, key, name), value in fitted.items():
        if kind == "gpu":
            gpus.setdefault(key, {})[name] = round(float(value), 5)
        else:
            transports[key] = TransportConstants(efficiency=round(float(value), 5))
    residuals = [RunResidual(run=r.name, measured_s=round(r.measured_s, 6),
                             predicted_s=round(r.measured_s * math.exp(e), 6), error=round(math.expm1(e), 6))
                 for r, e in zip(runs, errors)]
    return CalibrationProfile(
        schema_version=SCHEMA_VERSION, kind="hgplan.profile", hgplan_version=__version__,
        gpus={k: GpuConstants(**v) for k, v in sorted(gpus.items())}, transports=dict(sorted(transports.items())),
        fit=ProfileFit(runs=len(runs), rms_error=round(float(np.sqrt(np.mean(np.expm1(errors) ** 2))), 6),
                       residuals=residuals,
                       not_identifiable=[_name(p) for i, p in enumerate(candidates) if i not in active]
                       + _fp8_only(runs, candidates + sorted(fixed))))


def _name(p: Param) -> str:
    kind, key, name = p
    return f"transport {key}" if kind == "transport" else f"{key}.{name}"


def _check_told_apart(runs: list[Run], params: list[Param], jacobian: np.ndarray) -> None:
    """InputError when the runs cannot tell some of the fitted constants apart (TELLS_APART): the fit then picked
    one mix of them out of many that reproduce the runs equally well, and the profile would mispredict other plans.
    Names the constants of each such direction and how many runs there are for how many constants."""
    _, sv, vt = np.linalg.svd(jacobian, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(len(params) - len(sv))])
    loose = [v for s, v in zip(sv, vt) if s < TELLS_APART]
    if not loose:
        return
    weight = np.max(np.abs(np.array(loose)), axis=0)
    names = [_name(p) for p, w in zip(params, weight) if w > 0.1]
    count = f"{len(runs)} run{'s' if len(runs) > 1 else ''} for {len(params)} constants"
    raise InputError(f"calibrate: the runs do not tell {', '.join(names)} apart ({count}: every mix of them that "
                     "keeps the runs' times fits as well, so the fit's choice is arbitrary and mispredicts other "
                     "plans). Add runs that stress different resources (docs/calibrate.md: 'Give runs that stress "
                     "different resources'; at least one per constant), or measure the GPU's kernels with `hgplan "
                     "bench` and give the report with --bench so they are held")


FITTED_MAX = {"gpu": 2.0, "transport": 1.5}
"""The largest value a profile takes (documents.GpuConstants, TransportConstants): a fraction of a datasheet figure."""


def _check_range(fitted: dict[Param, float]) -> None:
    """InputError when the fit put a constant outside what a profile can hold: the runs do not pin it down (too few
    runs for the constants, measurements noisier than what tells two constants apart, or runs that are not what the
    plan and settings say)."""
    bad = [(p, v) for p, v in sorted(fitted.items()) if not 0 < v <= FITTED_MAX[p[0]]]
    if bad:
        what = "; ".join(f"{_name(p)} fitted to {v:.3g} (a profile holds (0, {FITTED_MAX[p[0]]:g}])" for p, v in bad)
        raise InputError(f"calibrate: the runs do not pin down {what}. Check that each run's plan and training "
                         "settings are what ran, add runs that stress that term (docs/calibrate.md: 'Give runs that "
                         "stress different resources'), or measure the GPU's kernels with `hgplan bench` and give "
                         "the report with --bench so they are held")


def bench_params(constants: list[BenchConstant]) -> frozenset[Param]:
    """The (gpu, id, constant) keys of bench-measured constants, as `calibrate(fixed=...)` takes them."""
    return frozenset(("gpu", c.gpu, c.constant) for c in constants)


def with_bench(profile: CalibrationProfile | None, constants: list[BenchConstant]) -> CalibrationProfile:
    """A profile holding the bench-measured constants and, when runs were fitted, the constants fitted to them."""
    gpus: dict[str, dict[str, float]] = {}
    for c in constants:
        gpus.setdefault(c.gpu, {})[c.constant] = c.value
    if profile is not None:
        for gid, fitted in profile.gpus.items():
            gpus.setdefault(gid, {}).update(fitted.model_dump(exclude_none=True))
    return CalibrationProfile(
        hgplan_version=__version__, gpus={k: GpuConstants(**v) for k, v in sorted(gpus.items())},
        transports=profile.transports if profile is not None else {},
        **({"fit": profile.fit} if profile is not None else {}), bench=constants)


def apply_profile(catalog: Catalog, profile: CalibrationProfile) -> Catalog:
    """The catalog with the profile's constants: GPU types by id, transports by name."""
    overrides = {gid: c.model_dump(exclude_none=True) for gid, c in profile.gpus.items()}
    transports = {k: (replace(t, efficiency=profile.transports[k].efficiency, calibrated=True)
                      if k in profile.transports and profile.transports[k].efficiency is not None else t)
                  for k, t in catalog.transports.items()}
    return replace(catalog, gpu_overrides={**catalog.gpu_overrides, **overrides}, transports=transports)
