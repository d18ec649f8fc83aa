"""Exporters: a validated plan -> launch arguments, scripts and environment for Megatron-LM, DeepSpeed, torchrun and
FlagScale.

Pure functions: they return file names and contents; only the CLI writes them.
"""

from __future__ import annotations

from typing import Callable

from hgplan.domain import ExportFormat, Fleet, ModelArch, TrainingSettings
from hgplan.errors import PlanningError
from hgplan.export.common import Export
from hgplan.export.deepspeed import export_deepspeed
from hgplan.export.flagscale import export_flagscale
from hgplan.export.megatron import export_megatron
from hgplan.export.torchrun import export_torchrun
from hgplan.plan import Plan


EXPORTERS: dict[ExportFormat, Callable[..., Export]] = {
    ExportFormat.MEGATRON: export_megatron, ExportFormat.DEEPSPEED: export_deepspeed,
    ExportFormat.TORCHRUN: export_torchrun, ExportFormat.FLAGSCALE: export_flagscale}
"""Each target's exporter: (plan, fleet, model, train, *, script=...) -> Export."""


def export_plan(fmt: ExportFormat, plan: Plan, fleet: Fleet, model: ModelArch, train: TrainingSettings,
                **kwargs) -> Export:
    """The launch files of `fmt` for a plan; PlanningError when the target cannot run it (only FlagScale runs a plan
    whose stages have their own tp, dp or recomputation)."""
    if plan.asymmetric and fmt is not ExportFormat.FLAGSCALE:
        raise PlanningError(f"the plan gives its stages their own tp, dp or recomputation (process meshes), which "
                            f"{fmt.value} cannot run; export it with --format flagscale")
    return EXPORTERS[fmt](plan, fleet, model, train, **kwargs)
