"""Sends that one NCCL communicator cannot carry: between vendors, or between network transports (InfiniBand to
RoCE, either to a link without RDMA). FlagScale sends every boundary between meshes through host memory over gloo
then (hetero_use_cpu_communication), which its export switches on and the cost model prices on each such boundary;
Megatron-LM's export puts the groups that span the stages on sockets instead; Megatron-DeepSpeed can do neither, so
--target deepspeed keeps its pipeline on one transport and its export refuses a plan that is not."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from hgplan.costmodel.evaluate import evaluate
from hgplan.costmodel.reshard import host_copies, host_copy_s, mesh_host_path, one_communicator
from hgplan.errors import PlanningError
from hgplan.export.deepspeed import export_deepspeed
from hgplan.export.flagscale import export_flagscale
from hgplan.export.megatron import export_megatron
from hgplan.inputs import make_training
from hgplan.io import catalog, resolve_cluster, resolve_model
from hgplan.plan import ParallelConfig, Plan, Recompute, StageAssignment
from hgplan.validate import check_plan

FLEET = """name: islands
sites:
  - name: dc
    node_groups:
      - {name: ib, count: 2, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
      - {name: ib2, count: 2, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
      - {name: roce, count: 2, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: roce, gbps: 100, count: 4}}
    links:
      - {between: [ib, roce], gbps: 25, latency_ms: 0.05, transport: ethernet}
      - {between: [ib2, roce], gbps: 25, latency_ms: 0.05, transport: ethernet}
  - name: edge
    node_groups:
      - {name: eth, count: 2, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: ethernet, gbps: 100, count: 2}}
      - {name: eth2, count: 2, gpu: A100-SXM4-80GB, gpus_per_node: 8, nics: {transport: ethernet, gbps: 100, count: 2}}
links:
  - {between: [dc, edge], gbps: 100, latency_ms: 1}
"""
INF = {"tp": 1, "recompute": Recompute.NONE}


@pytest.fixture(scope="module")
def islands(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "islands.yaml"
    path.write_text(FLEET)
    fleet, _, _ = resolve_cluster(str(path), catalog())
    model, _ = resolve_model("gpt-1.7b")  # tied embeddings
    train = make_training({"seq_length": 2048, "global_batch_size": 64}, model)
    return fleet, model, train


def _plan(*stages: tuple[str, int, int]) -> Plan:
    """Stages (node group, layers, dp) of tp 1; asymmetric when the dp differ."""
    cfg = ParallelConfig(tp=1, pp=len(stages), dp=stages[0][2], micro_batch_size=1, zero_stage=1)
    return Plan(config=cfg, stages=tuple(StageAssignment(node_group=f"{'edge' if g.startswith('eth') else 'dc'}/{g}",
                                                         num_layers=n, dp=dp, **INF)
                                         for g, n, dp in stages))


def test_which_pairs_one_communicator_joins(islands):
    fleet = islands[0]
    g = {n: fleet.group(f"{'edge' if n.startswith('eth') else 'dc'}/{n}") for n in ("ib", "ib2", "roce", "eth", "eth2")}
    assert fleet.one_transport(g["ib"], g["ib"]) and fleet.one_transport(g["ib"], g["ib2"])  # one fabric
    assert not fleet.one_transport(g["ib"], g["roce"])  # two transports, over Ethernet
    assert not fleet.one_transport(g["ib"], g["eth"])  # RDMA on one side only, across sites
    assert fleet.one_transport(g["eth"], g["eth2"])  # sockets throughout
    assert one_communicator(fleet, g["eth"], g["eth2"])
    amd = replace(g["ib2"], gpu=catalog().gpu_type(catalog().gpus["MI300X"]))  # on ib's fabric, another vendor's GPUs
    assert fleet.one_transport(g["ib"], amd)
    assert not one_communicator(fleet, g["ib"], amd)


def test_every_boundary_between_meshes_pays_the_host_copy_once_one_needs_it(islands):
    fleet, model, train = islands
    # three meshes: ib (dp 4) -> ib2 (dp 2), one fabric -> roce (dp 2), two transports
    plan = _plan(("ib", 8, 4), ("ib2", 8, 2), ("roce", 8, 2))
    assert plan.asymmetric and plan.meshes() == [(0, 1), (1, 1), (2, 1)]
    assert check_plan(plan, fleet, model, train) == []
    assert mesh_host_path(plan, fleet)
    assert host_copies(plan, fleet) == ([True, True], True)
    pred = evaluate(plan, fleet, model, train)
    assert [b.get("host_copy", False) for b in pred.boundaries] == [True, True]
    # the same meshes on one fabric: NCCL throughout, no host copy
    plain = _plan(("ib", 8, 4), ("ib2", 16, 2))
    assert not mesh_host_path(plain, fleet) and host_copies(plain, fleet) == ([False], False)
    # the ib -> ib2 boundary's send goes over gloo: its message over one TCP socket (2 GB/s, below the fabric's rate
    # of the same send over NCCL) plus a device-host copy at each end
    one_fabric = evaluate(_plan(("ib", 8, 4), ("ib2", 8, 2), ("ib2", 8, 2)), fleet, model, train).boundaries[0]
    msg = pred.boundaries[0]["message_mib"] * 2 ** 20
    assert one_fabric["message_mib"] == pred.boundaries[0]["message_mib"] and one_fabric["send_s"] < msg / 2e9
    assert pred.boundaries[0]["send_s"] == pytest.approx(msg / 2e9 + host_copy_s(msg), rel=1e-9)


def test_a_stock_plan_keeps_megatrons_sockets(islands):
    fleet, model, train = islands
    stock = _plan(("ib", 12, 2), ("roce", 12, 2))
    assert not stock.asymmetric and mesh_host_path(stock, fleet)
    assert host_copies(stock, fleet) == ([False], False)  # priced as Megatron-LM runs it: NCCL on sockets
    ex = export_megatron(stock, fleet, model, train)
    assert "nccl_pg.yaml" in ex.files
    fs = export_flagscale(stock, fleet, model, train)
    assert any("leaves out" in w for w in fs.warnings)


def test_flagscale_export_switches_to_gloo_and_keeps_each_groups_environment(islands):
    fleet, model, train = islands
    plan = _plan(("ib", 8, 4), ("ib2", 8, 2), ("roce", 8, 2))
    ex = export_flagscale(plan, fleet, model, train)
    cfg = OmegaConf.to_container(OmegaConf.create(ex.files["conf/train/hgplan.yaml"]))
    hetero = cfg["system"]["hetero"]
    assert hetero["hetero_use_cpu_communication"] is True
    # one GPU model whose node groups need different NCCL settings: a label (and an environment) per node group
    labels = ["A100-SXM4-80GB_dc_ib", "A100-SXM4-80GB_dc_ib2", "A100-SXM4-80GB_dc_roce"]
    assert hetero["hetero_device_types"] == labels
    exp = OmegaConf.to_container(OmegaConf.create(ex.files["conf/train_hgplan.yaml"]))
    envs = exp["experiment"]["envs"]["device_type_specific"]
    assert all(envs[lab]["NCCL_CROSS_NIC"] == "0" and "NCCL_IB_GID_INDEX" not in envs[lab] for lab in labels[:2])
    assert envs[labels[2]]["NCCL_IB_GID_INDEX"] == "3"
    assert all(e["GLOO_SOCKET_IFNAME"] for e in envs.values())
    assert any("gloo" in n for n in ex.notes)
    # one fabric: NCCL, no switch, no gloo interface
    plain = export_flagscale(_plan(("ib", 8, 4), ("ib2", 16, 2)), fleet, model, train)
    cfg = OmegaConf.to_container(OmegaConf.create(plain.files["conf/train/hgplan.yaml"]))
    assert "hetero_use_cpu_communication" not in cfg["system"]["hetero"]
    assert cfg["system"]["hetero"]["hetero_device_types"] == ["A100-SXM4-80GB"] * 2  # alike: the model's own name
    assert "GLOO_SOCKET_IFNAME" not in plain.files["conf/train_hgplan.yaml"]


def test_ethernet_only_nodes_need_no_socket_file(islands):
    """Nodes with Ethernet NICs alone run NCCL on sockets throughout: no per-communicator file, no warning."""
    fleet, model, train = islands
    plan = _plan(("eth", 12, 2), ("eth2", 12, 2))
    ex = export_megatron(plan, fleet, model, train)
    assert "nccl_pg.yaml" not in ex.files and not ex.warnings


def test_deepspeed_sees_no_path_between_transports(islands):
    fleet = islands[0]
    ds = fleet.for_target("deepspeed")
    ib, ib2, roce = (fleet.group(f"dc/{n}") for n in ("ib", "ib2", "roce"))
    assert fleet.path(ib, roce) is not None and ds.path(ib, roce) is None
    assert ds.path(ib, ib2) == fleet.path(ib, ib2) and fleet.for_target("megatron") is fleet


def test_deepspeed_export_refuses_a_pipeline_across_transports(islands):
    fleet, model, train = islands
    with pytest.raises(PlanningError, match="re-plan with --target deepspeed"):
        export_deepspeed(_plan(("ib", 12, 2), ("roce", 12, 2)), fleet, model, train)
    export_deepspeed(_plan(("ib", 12, 2), ("ib2", 12, 2)), fleet, model, train)  # one fabric: exported


def test_search_for_deepspeed_keeps_the_pipeline_on_one_transport(cli):
    r = cli("search", "-c", "mixed-nic", "-m", "gpt-1.7b", "--seq-len", "2048", "--global-batch", "128", "--target",
            "deepspeed", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {s["node_group"] for s in doc["plans"][0]["plan"]["stages"]} == {"lab/ib"}
    [idle] = doc["idle_gpus"]
    assert idle["node_group"] == "lab/roce" and "Megatron-DeepSpeed" in idle["reason"]
    assert "no path joins lab/ib to lab/roce" in doc["baselines"]["proportional"]["note"]
    # Megatron-LM's best of a larger model does cross the islands (NCCL on sockets for the groups that span stages)
    r = cli("search", "-c", "mixed-nic", "-m", "gpt-7.5b", "--seq-len", "2048", "--global-batch", "512", "--json",
            "--no-baselines")
    assert {s["node_group"] for s in json.loads(r.stdout)["plans"][0]["plan"]["stages"]} == {"lab/ib", "lab/roce"}


def test_nothing_fits_for_deepspeed_says_which_groups_it_cannot_join(cli, tmp_path):
    """Two A100 nodes, one on InfiniBand and one on RoCE in another site: gpt-18.4b needs both; Megatron-LM pipelines
    them, Megatron-DeepSpeed cannot, and its search says so beside the memory it lacks."""
    fleet = tmp_path / "two.yaml"
    fleet.write_text("""name: two
sites:
  - name: a
    node_groups:
      - {name: ib, count: 1, gpu: A100-SXM4-40GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 200, count: 8}}
  - name: b
    node_groups:
      - {name: roce, count: 1, gpu: A100-SXM4-40GB, gpus_per_node: 8, nics: {transport: roce, gbps: 200, count: 8}}
links:
  - {between: [a, b], gbps: 100, latency_ms: 5}
""")
    args = ["search", "-c", fleet, "-m", "gpt-18.4b", "--seq-len", "2048", "--global-batch", "64", "--no-baselines"]
    assert cli(*args).code == 0
    r = cli(*args, "--target", "deepspeed")
    assert r.code == 1 and "Megatron-DeepSpeed cannot pipeline a/ib (infiniband) with b/roce (roce)" in r.stderr
