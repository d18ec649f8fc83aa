"""Issue 3: predictions against published measurements (benchmarks/data/calibration.yaml)."""

from __future__ import annotations

from pathlib import Path

import yaml

import fidelity_cases as fidelity
from hgplan.io import catalog

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "calibration.yaml"


def test_fidelity_targets():
    rows = yaml.safe_load(DATA.read_text())["rows"]
    results, skipped = fidelity.run(rows, catalog())
    # every row is predicted (fp8 included) but the three whose model shape the source does not give
    assert len(results) >= 167 and all("does not give the model" in why for _, why in skipped), skipped
    assert sum("fp8" in r.id for r in results) >= 7
    summ = fidelity.summary(results)
    # Issue 3 target: median |error| <= 10%.
    assert summ["median_abs_error"] <= 0.10, summ
    # Issue 3 target: every row <= 25%.
    over = sorted((r.id, round(r.error, 3)) for r in results if abs(r.error) > 0.25)
    assert not over, over
    # profiles/validation.yaml (what explain cites) is the current per-GPU residual of this very run
    current = yaml.safe_load((DATA.parent.parent.parent / "profiles" / "validation.yaml").read_text())
    assert current["calibration_set"] == fidelity.by_gpu(results), "regenerate: python benchmarks/fidelity.py " \
        "--write-validation profiles/validation.yaml"
    from fidelity import step_residuals
    assert current["megatron_core_steps"] == step_residuals(), "regenerate: python benchmarks/fidelity.py " \
        "--write-validation profiles/validation.yaml"
    by_family = {}
    for r in results:
        by_family.setdefault(r.family, []).append(abs(r.error))
    # Megatron-LM families (what hgplan exports to) are all within 15%.
    for fam in ("sc21-weak-scaling", "sc21-ptdp", "korthikanti", "korthikanti-layer"):
        assert max(by_family[fam]) <= 0.15, (fam, max(by_family[fam]))


def test_deepspeed_zero3_is_bound_by_its_gathers_not_by_rank_count():
    """SC'21 Table 2: at one micro-batch per GPU, ZeRO-3 (DeepSpeed 2021) took the same time on 768 and 1536 GPUs
    and on 1120 and 2240: the parameter traffic per GPU does not shrink with more ranks. The model must show it."""
    rows = {r["id"]: r for r in yaml.safe_load(DATA.read_text())["rows"]}
    for small, large in (("174.6B_768gpu", "174.6B_1536gpu"), ("529.6B_1120gpu", "529.6B_2240gpu")):
        a, b = (fidelity.predict(fidelity.case_from_row(rows[f"megatron_sc21_table2_zero3_{k}"], catalog()))
                for k in (small, large))
        assert abs(b.predicted_s - a.predicted_s) / a.predicted_s < 0.02, (a.predicted_s, b.predicted_s)
