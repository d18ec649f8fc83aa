"""Exporters: a validated plan -> launch arguments, scripts and environment for Megatron-LM, DeepSpeed, torchrun, FlagScale.

Pure functions: they return file names and contents; only the CLI writes them.
"""

from __future__ import annotations

from typing import Callable

from hgplan.domain import ExportFormat
from hgplan.export.common import Export
from hgplan.export.deepspeed import export_deepspeed
from hgplan.export.flagscale import export_flagscale
from hgplan.export.megatron import export_megatron
from hgplan.export.torchrun import export_torchrun


EXPORTERS: dict[ExportFormat, Callable[..., Export]] = {
    ExportFormat.MEGATRON: export_megatron, ExportFormat.DEEPSPEED: export_deepspeed,
    ExportFormat.TORCHRUN: export_torchrun, ExportFormat.FLAGSCALE: export_flagscale}
"""Each target's exporter: (plan, fleet, model, train, *, script=...) -> Export."""
