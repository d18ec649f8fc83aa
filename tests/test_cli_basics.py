"""Issue 2: --version, profiles, schema, and the never-a-traceback contract (hypothesis)."""

from __future__ import annotations

import json

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hgplan import __version__
from hgplan.io import catalog


def test_version(cli):
    r = cli("--version")
    assert r.code == 0 and r.stdout.strip() == f"hgplan {__version__}"


def test_profiles_list_and_show(cli):
    gpus = cli("profiles", "list", "gpus", "--json").json()
    ids = {g["id"] for g in gpus}
    for need in ["V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "A800-SXM4-80GB", "A10", "A10G",
                 "L4", "L40S", "H100-SXM5-80GB", "H100-PCIe-80GB", "H800-SXM5-80GB", "H20", "H200-SXM-141GB", "B200-HGX",
                 "MI250X", "MI300X", "Gaudi2", "Gaudi3"]:
        assert need in ids
    assert cli("profiles", "show", "gpus", "H100-SXM5-80GB", "--json").json()["bf16_tflops"] == 989.5
    assert "num_layers: 80" in cli("profiles", "show", "models", "llama3.1-70b").stdout
    assert len(cli("profiles", "list", "clusters", "--json").json()) == 5
    r = cli("profiles", "show", "models", "nope")
    assert r.code == 2 and "unknown model 'nope'" in r.stderr


def test_schema_validates_shipped_files(cli):
    cluster_schema = cli("schema", "cluster").json()
    model_schema = cli("schema", "model").json()
    for text in catalog().cluster_texts.values():
        jsonschema.validate(yaml.safe_load(text), cluster_schema)
    for text in catalog().model_texts.values():
        jsonschema.validate(yaml.safe_load(text), model_schema)
    training = cli("schema", "training").json()
    jsonschema.validate({"seq_length": 4096, "global_batch_size": 512}, training)


def test_usage_error_exits_2(cli):
    assert cli("validate").code == 2
    assert cli("schema", "plans").code == 2


scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 5000), st.floats(allow_nan=False, width=32),
                    st.text(max_size=8), st.sampled_from(["H100-SXM5-80GB", "infiniband", "a", "b"]))
keys = st.sampled_from(["sites", "name", "node_groups", "count", "gpu", "gpus_per_node", "nics", "transport", "gbps",
                        "links", "between", "latency_ms", "bogus", "intra_node"])
docs = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=3),
                                                        st.dictionaries(keys, children, max_size=5)), max_leaves=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=docs)
def test_random_documents_never_traceback(cli, tmp_path, doc):
    p = tmp_path / "fuzz.yaml"
    p.write_text(yaml.safe_dump(doc) if doc is not None else "")
    r = cli("validate", p)
    assert r.code in (0, 2)
    assert "Traceback" not in r.stderr
    if r.code == 2:
        assert r.stderr.startswith("error: ")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.text(max_size=80))
def test_random_text_never_traceback(cli, tmp_path, raw):
    p = tmp_path / "fuzz.yaml"
    p.write_text(raw)
    r = cli("validate", p, "--json")
    assert r.code in (0, 2)
    if r.code == 0:
        json.loads(r.stdout)


def test_shipped_catalog_files_pass_the_strict_parser():
    """The catalog is read with libyaml's loader (yamlio.parse_shipped_yaml, fast at start-up); every shipped file
    must also pass the strict parser user input goes through (no duplicate keys, no aliases blowing up, no
    oversized document), and both must read the same data."""
    from pathlib import Path

    from hgplan.yamlio import parse_shipped_yaml, parse_yaml

    root = Path(__file__).resolve().parent.parent / "profiles"
    files = sorted(root.rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        text = path.read_text()
        assert parse_yaml(text, str(path))[0] == parse_shipped_yaml(text), path
