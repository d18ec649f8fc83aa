"""Issue 13 (first rows): bad inputs end with exit 2 and a message naming the file, line and rule."""

from __future__ import annotations

import json

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


GROUP = ("sites:\n  - name: a\n    node_groups:\n      - name: g\n        count: {count}\n        gpu: {gpu}\n"
         "        gpus_per_node: {gpn}\n        nics: {{transport: infiniband, gbps: {gbps}}}\n{extra}")


def _cluster(count="2", gpu="A100-SXM4-80GB", gpn="8", gbps="200", extra=""):
    return GROUP.format(count=count, gpu=gpu, gpn=gpn, gbps=gbps, extra=extra)


def test_alias_bomb_is_refused_quickly(cli, write):
    """'Billion laughs': nine aliases over nine levels would expand to 387 million nodes."""
    import time

    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join(["*" + prev] * 9) + "]")
        prev = name
    path = write("\n".join(lines) + "\nsites: *i\n")
    start = time.perf_counter()
    r = cli("validate", path)
    assert r.code == 2 and "aliases expand to more than 100,000 nodes" in r.stderr
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("text, expected", [
    ("[" * 3000 + "]" * 3000 + "\n", "input nests too deeply to parse"),
    ("sites: " + "[" * 100 + "]" * 100 + "\n", "input nests deeper than 64 levels"),
])
def test_deep_nesting_is_exit_2(cli, write, text, expected):
    r = cli("validate", write(text))
    assert r.code == 2 and expected in r.stderr


def test_endless_input_is_exit_2(cli):
    r = cli("validate", "/dev/zero")
    assert r.code == 2 and "larger than 16 MiB" in r.stderr


@pytest.mark.parametrize("changes, expected", [
    ({"gbps": ".inf"}, "nics.gbps: must be a finite number"),
    ({"gbps": "1e308"}, "nics.gbps: must be <= 1e+06"),
    ({"gbps": "1e-300"}, "nics.gbps: must be >= 0.001"),
    ({"count": "1000000000000000000000000000000"}, "count: must be <= 100000"),
    ({"gpn": "1000000000000000000000000000000"}, "gpus_per_node: must be <= 128"),
    ({"count": "true"}, "count: must be an integer (got bool True"),
    ({"count": '"12"'}, "count: must be an integer (got str '12'"),
    ({"gpu": "{id: X, vendor: NVIDIA, arch: hopper, bf16_tflops: .inf, hbm_gib: 80, hbm_gbytes_per_s: 3350, "
             "intra_node: {kind: nvlink, gbytes_per_s: 900}}"}, "gpu.bf16_tflops: must be a finite number"),
    ({"gpu": "{id: X, vendor: NVIDIA, arch: hopper, bf16_tflops: 989, hbm_gib: 1e-300, hbm_gbytes_per_s: 3350, "
             "intra_node: {kind: nvlink, gbytes_per_s: 900}}"}, "gpu.hbm_gib: must be >= 0.25"),
])
def test_absurd_numbers_are_exit_2_at_validate_time(cli, write, changes, expected):
    r = cli("validate", write(_cluster(**changes)))
    assert r.code == 2 and expected in r.stderr, r.stderr


def test_link_latency_bounds(cli, write):
    text = _cluster(extra="    links: []\n")
    text += ("  - name: b\n    node_groups:\n      - name: h\n        count: 1\n        gpu: H100-SXM5-80GB\n"
             "        gpus_per_node: 8\n        nics: {transport: infiniband, gbps: 400}\n"
             "links:\n  - between: [a, b]\n    gbps: 100\n    latency_ms: .inf\n")
    r = cli("validate", write(text))
    assert r.code == 2 and "links.0.latency_ms: must be a finite number" in r.stderr, r.stderr


@pytest.mark.parametrize("host", ["a;reboot", "$(id)", "x/y", "-rf", "a..b"])
def test_host_names_must_be_rfc1123_or_ip(cli, write, host):
    r = cli("validate", write(_cluster(count="1", extra=f"        hosts: ['{host}']\n")))
    assert r.code == 2 and "is not a host name (RFC 1123" in r.stderr, r.stderr


@pytest.mark.parametrize("host", ["node-01", "gpu01.dc1.example.com", "10.0.0.7", "fe80::1"])
def test_valid_host_names_pass(cli, write, host):
    r = cli("validate", write(_cluster(count="1", extra=f"        hosts: ['{host}']\n")))
    assert r.code == 0, r.stderr


def test_deep_json_plan_file_is_exit_2(cli, write):
    r = cli("explain", write("[" * 3000, "plan.json"))
    assert r.code == 2 and "nests too deeply" in r.stderr


def test_a_plan_that_does_not_fit_is_not_exported_and_explains_with_exit_1(cli, overfull_plan):
    """A hand-edited plan whose first stage needs ~105 of 80 GiB: export exit 1 naming the stage and the numbers;
    explain still explains it, then exits 1."""
    edited = overfull_plan
    e = cli("export", edited, "--format", "megatron")
    assert e.code == 1 and "the plan does not fit: stage 0 on" in e.stderr and "GiB per GPU of 80 GiB" in e.stderr
    x = cli("explain", edited)
    assert x.code == 1 and "tokens/s" in x.stdout and "not achievable" in x.stderr


def _searched_plan(cli, tmp_path):
    src = tmp_path / "plan.json"
    r = cli("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512", "--top", "1",
            "--no-baselines", "-o", src)
    assert r.code == 0, r.stderr
    return src


def test_edited_embedded_yaml_fails_its_digest_everywhere(cli, tmp_path):
    import json

    src = _searched_plan(cli, tmp_path)
    doc = json.loads(src.read_text())
    doc["inputs"]["cluster"]["yaml"] = doc["inputs"]["cluster"]["yaml"].replace("count: 8", "count: 9", 1)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    for args in (("explain", edited), ("export", edited, "--format", "torchrun"), ("diff", src, edited),
                 ("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
                  "--baseline", edited)):
        r = cli(*args)
        assert r.code == 2 and "inputs.cluster.yaml" in r.stderr and "edited after the search" in r.stderr, args


def test_edited_prediction_is_refused_where_it_is_reported(cli, tmp_path):
    """The CI gate reports the stored prediction of its baseline: a tampered one is exit 2. diff and explain
    recompute it from the embedded inputs, so they report the truth."""
    import json

    src = _searched_plan(cli, tmp_path)
    doc = json.loads(src.read_text())
    true_tps = doc["prediction"]["tokens_per_s"]
    doc["prediction"]["tokens_per_s"] = 9e9
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    gate = cli("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "512",
               "--no-baselines", "--baseline", edited)
    assert gate.code == 2 and "prediction.tokens_per_s" in gate.stderr and f"{true_tps!r}" in gate.stderr
    d = cli("diff", src, edited, "--json")
    assert d.code == 0 and "9000000000" not in d.stdout, d.stdout
    r = cli("explain", edited, "--json")
    assert r.code == 0 and r.json()["prediction"]["tokens_per_s"] == true_tps


def test_baseline_for_other_inputs_is_refused_unless_allowed(cli, tmp_path):
    src = _searched_plan(cli, tmp_path)
    args = ("search", "-c", "two-site", "-m", "llama3.1-70b", "--seq-len", "4096", "--global-batch", "256",
            "--no-baselines", "--baseline", src)
    r = cli(*args)
    assert r.code == 2 and "training global_batch_size differs (baseline 512, now 256)" in r.stderr
    assert "--allow-different-inputs" in r.stderr
    r = cli(*args, "--allow-different-inputs")
    assert r.code in (0, 1) and "baseline" in r.stderr.lower()
    other_model = cli("search", "-c", "two-site", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "512",
                      "--no-baselines", "--baseline", src)
    assert other_model.code == 2 and "the model differs" in other_model.stderr


def test_gate_flags_without_a_baseline_are_refused(cli):
    """A CI job that writes --max-regression but forgot --baseline gated nothing and passed: now exit 2 before any
    work, naming the flags and the fix."""
    base = ("search", "-c", "two-site", "-m", "llama3.1-8b", "--seq-len", "4096", "--global-batch", "512")
    for flags in (("--max-regression", "5%"), ("--allow-different-inputs",),
                  ("--max-regression", "3%", "--allow-different-inputs")):
        r = cli(*base, *flags)
        assert r.code == 2 and "no --baseline to gate against" in r.stderr, (flags, r.stderr)
        assert all(f in r.stderr for f in flags if f.startswith("--")) and not r.stdout


def test_dash_is_stdin_for_inputs_and_stdout_for_one_file(cli, tmp_path):
    """Issue 13: `-` reads an input from standard input and `-o -` writes the one output file to standard output (the
    table then goes to stderr); a second `-` input, `-o -` with --json, and `-o -` for export's directory are exit 2."""
    cluster = cli("profiles", "show", "clusters", "mixed-nic").stdout
    args = ["-m", "llama3.1-8b", "--seq-len", "2048", "--global-batch", "64", "--time-limit", "20", "--no-baselines"]
    r = cli("search", "-c", "-", *args, "-o", "-", stdin=cluster)
    assert r.code == 0, r.stderr
    plan = r.json()  # stdout holds the plan file and nothing else
    assert plan["kind"] == "hgplan.plan" and plan["inputs"]["cluster"]["ref"] == "-"
    assert "plans\n" in r.stderr and "wrote the plan file to standard output" in r.stderr  # the table went to stderr
    from_file = tmp_path / "plan.json"
    assert cli("search", "-c", "mixed-nic", *args, "-o", from_file).code == 0
    assert json.loads(from_file.read_text())["prediction"] == plan["prediction"]
    text = json.dumps(plan)
    assert cli("explain", "-", "--json", stdin=text).json()["prediction"]["iteration_time_s"] == \
        plan["prediction"]["iteration_time_s"]
    assert cli("diff", "-", from_file, stdin=text).code == 0
    assert cli("export", "-", "-f", "megatron", stdin=text).code == 0
    assert cli("validate", "-", stdin=cluster).code == 0
    r = cli("search", "-c", "-", "-m", "-", *args[2:], stdin=cluster)
    assert r.code == 2 and "already read as the cluster" in r.stderr
    r = cli("search", "-c", "mixed-nic", *args, "-o", "-", "--json")
    assert r.code == 2 and "both write to standard output" in r.stderr
    r = cli("export", from_file, "-f", "megatron", "-o", "-")
    assert r.code == 2 and "directory" in r.stderr and r.stdout == ""
