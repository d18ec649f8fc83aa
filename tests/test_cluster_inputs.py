"""Issue 2: cluster files are validated in one pass; each bad input gets a precise message and exit 2."""

from __future__ import annotations

import pytest

from hgplan.io import catalog

GOOD = """\
sites:
  - name: a
    node_groups:
      - name: h100
        count: 2
        gpu: H100-SXM5-80GB
        gpus_per_node: 8
        nics: {transport: infiniband, gbps: 400, count: 8}
  - name: b
    node_groups:
      - name: a100
        count: 2
        gpu: A100-SXM4-80GB
        gpus_per_node: 8
        nics: {transport: roce, gbps: 200, count: 4}
links:
  - between: [a, b]
    gbps: 100
    latency_ms: 20
"""


def test_good_file_validates(cli, write):
    r = cli("validate", write(GOOD), "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["num_gpus"] == 32
    assert doc["gpus_by_type"] == {"A100-SXM4-80GB": 16, "H100-SXM5-80GB": 16}
    # 16 x 989.5 + 16 x 312 TFLOP/s
    assert doc["peak_pflops"] == pytest.approx((16 * 989.5 + 16 * 312) / 1000, abs=1e-3)
    assert doc["links"][0]["between"] == ["a", "b"]


@pytest.mark.parametrize("text, expected", [
    ("sites: [\n  - name: a\n", "YAML syntax error"),
    (GOOD.replace("gpus_per_node: 8\n        nics: {transport: infiniband",
                  "gpus_per_nod: 8\n        gpus_per_node: 8\n        nics: {transport: infiniband"),
     ":7: sites.0.node_groups.0.gpus_per_nod: unknown key 'gpus_per_nod'; did you mean 'gpus_per_node'?"),
    (GOOD.replace("count: 2\n        gpu: H100", "nodes: 2\n        gpu: H100"),
     "sites.0.node_groups.0.nodes: unknown key 'nodes'; did you mean 'count'?"),
    (GOOD.replace("count: 2\n        gpu: H100", "count: two\n        gpu: H100"),
     "sites.0.node_groups.0.count: must be an integer"),
    (GOOD.replace("count: 2\n        gpu: H100", "count: 0\n        gpu: H100"),
     ":5: sites.0.node_groups.0.count: must be >= 1 (got 0)"),
    (GOOD.replace("count: 2\n        gpu: A100", "count: -3\n        gpu: A100"),
     "sites.1.node_groups.0.count: must be >= 1 (got -3)"),
    (GOOD.replace("gpu: H100-SXM5-80GB", "gpu: H100"),
     "sites.0.node_groups.0.gpu: unknown GPU id 'H100'; did you mean 'H100-NVL', 'H100-PCIe-80GB', 'H100-SXM5-80GB'"),
    (GOOD.replace("gbps: 400, count: 8", "gbps: 0, count: 8"), "sites.0.node_groups.0.nics.gbps: must be >= 0.001 (got 0)"),
    (GOOD.replace("transport: roce", "transport: rocev2"),
     "sites.1.node_groups.0.nics.transport: must be one of 'infiniband', 'roce' or 'ethernet' (got 'rocev2')"),
    (GOOD.replace("""    node_groups:
      - name: a100
        count: 2
        gpu: A100-SXM4-80GB
        gpus_per_node: 8
        nics: {transport: roce, gbps: 200, count: 4}
""", "    node_groups: []\n"), "sites.1.node_groups: site has no nodes"),
    (GOOD.replace("between: [a, b]", "between: [a, c]"), "links.0.between.1: unknown site 'c'; sites: a, b"),
    (GOOD.replace("between: [a, b]", "between: [a, a]"), "a link must join two different sites"),
    (GOOD.replace("latency_ms: 20", "latency_ms: -1"), "links.0.latency_ms: must be >= 0 (got -1)"),
    (GOOD.replace("links:\n  - between: [a, b]\n    gbps: 100\n    latency_ms: 20\n", ""),
     "sites b are not linked to 'a'"),
    (GOOD.replace("gpu: A100-SXM4-80GB", "gpu: A10G"), "GPU 'A10G' has no published tensor TFLOP/s"),
    ("- just\n- a list\n", "expected a cluster mapping at the top level"),
    ("sites: 3\n", "sites: expected a list"),
])
def test_bad_cluster(cli, write, text, expected):
    r = cli("validate", write(text))
    assert r.code == 2
    assert expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_every_error_in_one_pass(cli, write):
    text = GOOD.replace("count: 2\n        gpu: H100", "count: 0\n        gpu: H100") \
               .replace("gpu: A100-SXM4-80GB", "gpu: B100").replace("between: [a, b]", "between: [a, z]")
    r = cli("validate", write(text))
    assert r.code == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 3, r.stderr
    assert all(":" in ln.split()[1] for ln in lines)  # file:line: prefix on each


def test_empty_file_and_directory(cli, write, tmp_path):
    r = cli("validate", write("", "empty.yaml"))
    assert r.code == 2 and "empty.yaml:1: the file is empty" in r.stderr
    r = cli("validate", tmp_path)
    assert r.code == 2 and "is a directory; expected a cluster YAML file" in r.stderr
    r = cli("validate", tmp_path / "missing.yaml")
    assert r.code == 2 and "no such cluster file" in r.stderr
    r = cli("validate", "no-such-example")
    assert r.code == 2 and "neither a file nor an example fleet" in r.stderr


def test_islands_of_different_transport_need_a_link(cli, write):
    text = """\
sites:
  - name: lab
    node_groups:
      - {name: ib, count: 1, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
      - {name: eth, count: 1, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: ethernet, gbps: 100, count: 1}}
"""
    r = cli("validate", write(text))
    assert r.code == 2
    assert "'ib' (infiniband) and 'eth' (ethernet) in site 'lab' have no link" in r.stderr
    fixed = text + "    links:\n      - {between: [ib, eth], gbps: 25, latency_ms: 0.1}\n"
    assert cli("validate", write(fixed)).code == 0


def test_missing_site_pair_is_a_warning_not_silent(cli, write):
    three = GOOD.replace("links:", """  - name: c
    node_groups:
      - {name: x, count: 1, gpu: L40S, gpus_per_node: 8, nics: {transport: ethernet, gbps: 100, count: 2}}
links:
  - between: [b, c]
    gbps: 10
    latency_ms: 5""")
    r = cli("validate", write(three))
    assert r.code == 0, r.stderr
    assert "no link between sites 'a' and 'c'" in r.stderr


INLINE_GPU = """gpu:
          id: MyAccel
          vendor: Acme
          arch: hopper
          bf16_tflops: 500
          hbm_gib: 64
          hbm_gbytes_per_s: 2000
          intra_node: {kind: pcie, gbytes_per_s: 64}"""
"""A GPU type of no catalog, given inline in place of a catalog id."""


def test_inline_gpu_spec(cli, write):
    text = GOOD.replace("gpu: A100-SXM4-80GB", INLINE_GPU)
    r = cli("validate", write(text), "--json")
    assert r.code == 0, r.stderr
    assert r.json()["gpus_by_type"]["MyAccel"] == 16
    bad = text.replace("arch: hopper", "arch: hoper").replace("hbm_gib: 64", "hbm_gb: 64")
    r = cli("validate", write(bad))
    assert r.code == 2
    assert "unknown arch 'hoper'; did you mean 'hopper'" in r.stderr
    assert "unknown key 'hbm_gb'; did you mean 'hbm_gib'" in r.stderr
    # one mistake, one error: the misspelt key's message covers the required key it misses (docs/getting-started.md)
    assert "missing required key 'hbm_gib'" not in r.stderr and r.stderr.count("error:") == 2
    r = cli("validate", write(text.replace("          hbm_gbytes_per_s: 2000\n", "")))
    assert r.code == 2 and "missing required key 'hbm_gbytes_per_s'" in r.stderr


@pytest.mark.parametrize("name", sorted(catalog().cluster_texts))
def test_every_example_fleet_validates(cli, name):
    r = cli("validate", name, "--json")
    assert r.code == 0, r.stderr
    assert r.json()["num_gpus"] > 0


def test_validate_takes_the_cluster_as_search_does():
    """`validate -c CLUSTER` as on search and explain (the positional form stays); none, or two different ones,
    is exit 2 saying how to give one."""
    from typer.testing import CliRunner

    from hgplan.cli import app
    run = CliRunner().invoke
    assert run(app, ["validate", "-c", "two-site", "--json"]).stdout == run(app, ["validate", "two-site",
                                                                                "--json"]).stdout != ""
    assert run(app, ["validate", "two-site", "-c", "two-site"]).exit_code == 0
    r = run(app, ["validate"])
    assert r.exit_code == 2 and "no cluster to check" in r.stderr and "validate -c CLUSTER" in r.stderr
    r = run(app, ["validate", "two-site", "--cluster", "large"])
    assert r.exit_code == 2 and "two clusters given" in r.stderr


def test_example_fleets_match_the_issue():
    from hgplan.inputs import load_cluster
    cat = catalog()
    fleets = {n: load_cluster(t, n, cat)[0] for n, t in cat.cluster_texts.items()}
    two = fleets["two-site"]
    assert [(g.gpu.id, g.num_nodes, g.nic_transport, g.nic_gbps, g.nic_count) for g in two.groups] == [
        ("H100-SXM5-80GB", 16, "infiniband", 400, 8), ("A100-SXM4-80GB", 32, "roce", 200, 4)]
    assert (two.links[0].gbps, two.links[0].latency_ms) == (100, 20)
    mixed = fleets["mixed-nic"]
    assert {g.nic_transport for g in mixed.groups} == {"infiniband", "roce"} and mixed.links[0].gbps == 25
    assert {g.gpu.arch for g in fleets["three-generations"].groups} == {"volta", "ampere", "hopper"}
    assert {g.gpu.vendor for g in fleets["mixed-vendor"].groups} == {"AMD", "NVIDIA"}
    large = fleets["large"]
    assert large.num_gpus >= 4096 and len(large.sites) >= 3 and len({g.gpu.id for g in large.groups}) >= 4


def test_inline_gpu_spec_carries_its_own_hbm_rate(cli, write):
    """An inline spec (or a catalog entry, as the H200's) may give its measured HBM rate: it overrides the
    architecture's for that GPU type only; out of (0, 1] it is refused with the rule."""
    from hgplan.inputs import load_cluster

    spec = INLINE_GPU.replace("intra_node:", "hbm_efficiency: 0.8\n          intra_node:")
    text = GOOD.replace("gpu: A100-SXM4-80GB", spec)
    fleet, _ = load_cluster(text, "inline", catalog())
    archs = catalog().archs
    rates = {g.gpu.id: g.gpu.eff.hbm_efficiency for g in fleet.groups}
    assert rates["MyAccel"] == 0.8 and archs["hopper"].hbm_efficiency == 0.891
    assert all(g.gpu.eff.hbm_efficiency == archs[g.gpu.arch].hbm_efficiency for g in fleet.groups
               if g.gpu.id != "MyAccel")
    r = cli("validate", write(text.replace("hbm_efficiency: 0.8", "hbm_efficiency: 1.3")))
    assert r.code == 2 and "hbm_efficiency" in r.stderr


def _h100_group(name: str, count: int, nic_gbps: int) -> str:
    return (f"      - {{name: {name}, count: {count}, gpu: H100-SXM5-80GB, gpus_per_node: 8,\n"
            f"         nics: {{transport: infiniband, gbps: {nic_gbps}, count: 8}}}}\n")


# site a: h100 (2 nodes) and two racks more of H100 nodes, rack3 with slower NICs
RACKS = GOOD.replace("  - name: b\n", _h100_group("rack2", 3, 400) + _h100_group("rack3", 1, 200) + "  - name: b\n", 1)


def test_node_groups_on_one_fabric_get_a_note(cli, write):
    """Racks of the same nodes on one fabric, described as node groups, bound every stage to one rack: validate says
    so and how to merge them (the rack with slower NICs is another fabric's; the groups of site b stand alone)."""
    r = cli("validate", write(RACKS), "--json")
    assert r.code == 0, r.stderr
    notes = r.json()["notes"]
    assert len(notes) == 1 and notes[0].startswith("node groups a/h100, a/rack2 have the same nodes on one fabric")
    assert "describe them as one node group (count: 5)" in notes[0]
    r = cli("validate", write(RACKS))
    assert "note: node groups a/h100, a/rack2" in r.stdout
    # a link of their own between the two: not one fabric, no note
    link = "    links:\n      - {between: [h100, rack2], gbps: 100, latency_ms: 0.01}\n"
    linked = RACKS.replace("  - name: b\n", link + "  - name: b\n", 1)
    r = cli("validate", write(linked), "--json")
    assert r.code == 0, r.stderr
    assert r.json()["notes"] == []
    assert cli("validate", write(GOOD), "--json").json()["notes"] == []


def test_validate_with_a_model_sets_its_training_state_against_the_fleet(cli, tmp_path):
    """`validate --model` printed only the parameter count, also for a 70B model on 32 GPUs of 16 GB (1,314 GiB of
    fp16 training state against 448 GiB): it now gives both figures and a note when the state cannot fit."""
    small = tmp_path / "small.yaml"
    small.write_text("name: small\nsites:\n  - name: lab\n    node_groups:\n      - {name: t4, count: 4, gpu: T4, "
                     "gpus_per_node: 4, nics: {transport: ethernet, gbps: 10, count: 1}}\n")
    r = cli("validate", small, "--model", "llama3.1-70b", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["model"]["state_gib"] > doc["model"]["fleet_memory_gib"] > 0
    assert any("training state" in n and "no plan fits" in n for n in doc["notes"]), doc["notes"]
    big = cli("validate", "two-site", "--model", "llama3.1-70b", "--json").json()
    assert big["model"]["state_gib"] == pytest.approx(70.554e9 * 18 / 2**30, rel=1e-3)
    assert not any("training state" in n for n in big["notes"])
