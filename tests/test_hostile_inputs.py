"""Issue 13 (first rows): bad inputs end with exit 2 and a message naming the file, line and rule."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_time_limit_must_be_finite_and_positive(cli, value):
    r = cli("search", "-c", "mixed-nic", "-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "256",
            "--time-limit", value)
    assert r.code == 2 and "--time-limit must be a finite number of seconds > 0" in r.stderr


def test_duplicate_yaml_keys_name_both_lines(cli, write):
    path = write("name: dup\nsites:\n  - name: a\n    node_groups:\n      - name: g\n        count: 2\n"
                 "        count: 64\n        gpu: A100-SXM4-80GB\n        gpus_per_node: 8\n"
                 "        nics: {transport: infiniband, gbps: 200}\n")
    r = cli("validate", path)
    assert r.code == 2
    assert ":7: sites.0.node_groups.0.count: duplicate key 'count' (lines 6 and 7)" in r.stderr


def test_diff_exit_codes(cli, tmp_path):
    """diff exits 0 on identical plans, 1 on different ones (like diff), 0 with --exit-zero."""
    import json
    a = tmp_path / "a.json"
    r = cli("search", "-c", "mixed-nic", "-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "256", "--top", "1",
            "--no-baselines", "-o", a)
    assert r.code == 0, r.stderr
    assert cli("diff", a, a).code == 0
    doc = json.loads(a.read_text())
    doc["plan"]["recompute"] = "full" if doc["plan"]["recompute"] != "full" else "none"
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    r = cli("diff", a, b)
    assert r.code == 1 and "recompute:" in r.stdout
    assert cli("diff", a, b, "--exit-zero").code == 0
