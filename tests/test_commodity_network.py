"""Communication on commodity hardware (issue 10, part 2): PCIe without NVLink, NCCL over TCP sockets, the bytes a
pipeline boundary moves, and the tied-embedding all-reduce. Each expected value is worked out from the source the
model cites (NCCL src/graph, megatron/core schedules), not read back from the code."""

from __future__ import annotations

import pytest

from hgplan.costmodel.comm import group_busbw_gbytes_per_s, intra_node_busbw, nic_gbytes_per_s
from hgplan.costmodel.evaluate import (p2p_message_bytes, p2p_seconds, pipeline_gather_s, tied_embedding_sync_s)
from hgplan.costmodel.reshard import HOST_COPY_GBYTES_PER_S, host_copy_s
from hgplan.domain import Precision, TrainingSettings
from hgplan.export.common import NSOCKS_PERTHREAD, SOCKET_NTHREADS, nccl_env
from hgplan.inputs import load_cluster, load_model
from hgplan.io import catalog
from hgplan.plan import ParallelConfig

CAT = catalog()


def _fleet(gpu: str, *, intra: str = "", nic: str = "{transport: ethernet, gbps: 10}", gpus: int = 8, nodes: int = 2):
    text = f"""
name: t
sites:
  - name: lab
    node_groups:
      - name: g
        count: {nodes}
        gpu: {gpu}
        gpus_per_node: {gpus}
        {intra}
        nics: {nic}
"""
    return load_cluster(text, "<test>", CAT)[0]


def test_pcie_p2p_inside_a_socket_gets_ncclss_pcie_figure():
    g = _fleet("A100-PCIe-80GB").groups[0]
    bw, hop = intra_node_busbw(g, span=4)
    assert bw == pytest.approx(24.0)  # Gen4 x16: 64 GB/s bidirectional, 32 per direction, x 0.75 (NCCL topo.cc)
    assert hop == pytest.approx(5.7e-6)


def test_geforce_cards_stage_through_host_memory_shared_by_the_socket():
    g = _fleet("RTX-4090").groups[0]
    assert g.pcie.p2p is False
    bw, _ = intra_node_busbw(g, span=2)
    assert bw == pytest.approx(150.0 / (2 * 8))  # eight GPUs write and read every byte through 150 GB/s


def test_a_ring_across_sockets_is_held_to_the_socket_link():
    g = _fleet("A100-PCIe-80GB", intra="intra_node: {kind: pcie, gbytes_per_s: 64, sockets: 2}").groups[0]
    assert intra_node_busbw(g, span=4)[0] == pytest.approx(24.0)  # four GPUs of one socket keep P2P
    assert intra_node_busbw(g, span=8)[0] == pytest.approx(10.0)  # SHM over UPI (NCCL SKL_QPI_BW)


def test_p2p_off_is_slower_than_on_for_the_same_node():
    on = _fleet("L40S").groups[0]
    off = _fleet("L40S", intra="intra_node: {kind: pcie, gbytes_per_s: 64, p2p: false}").groups[0]
    assert intra_node_busbw(off, span=8)[0] < intra_node_busbw(on, span=8)[0]


def test_nvlink_keeps_the_collective_efficiency():
    g = _fleet("A100-SXM4-80GB").groups[0]
    assert intra_node_busbw(g, span=8)[0] == pytest.approx(600 / 2 * g.gpu.eff.collective_efficiency)


def test_tcp_on_10gbe_reaches_the_frame_payload_share():
    fleet = _fleet("A100-PCIe-80GB", nic="{transport: ethernet, gbps: 10, count: 8}")
    g = fleet.groups[0]
    assert nic_gbytes_per_s(g, fleet.transports[g.nic_transport]) == pytest.approx(10 / 8 * 1448 / 1538, rel=1e-3)


def test_tcp_on_a_fast_nic_is_held_to_its_sockets():
    fleet = _fleet("H100-SXM5-80GB", nic="{transport: ethernet, gbps: 400, count: 8}")
    g = fleet.groups[0]
    t = fleet.transports[g.nic_transport]
    assert t.socket_streams == SOCKET_NTHREADS * NSOCKS_PERTHREAD  # what export sets is what the model assumes
    assert nic_gbytes_per_s(g, t) == pytest.approx(t.socket_streams * t.stream_gbytes_per_s)
    assert nic_gbytes_per_s(g, t) < 400 / 8 * t.efficiency


def test_rdma_has_no_socket_cap():
    fleet = _fleet("H100-SXM5-80GB", nic="{transport: infiniband, gbps: 400, count: 8}")
    g = fleet.groups[0]
    assert nic_gbytes_per_s(g, fleet.transports[g.nic_transport]) == pytest.approx(400 / 8 * 0.90)


def test_export_sets_the_socket_threads_on_ethernet_nodes():
    fleet = _fleet("A100-PCIe-80GB")
    env = nccl_env(fleet.groups[0])
    streams = fleet.transports[fleet.groups[0].nic_transport].socket_streams
    assert int(env["NCCL_SOCKET_NTHREADS"]) * int(env["NCCL_NSOCKS_PERTHREAD"]) == streams


@pytest.mark.parametrize("nbytes, share", [(2 ** 20, 0.967), (2 ** 16, 0.650)])
def test_share_of_line_rate_a_send_gets_over_10gbe(nbytes, share):
    """docs/cost-model.md section 3: a 1 MiB send gets 97% of the TCP rate, a 64 KiB one 65%."""
    fleet = _fleet("A100-PCIe-80GB", gpus=1, nodes=2)
    g = fleet.groups[0]
    busy, latency, _ = p2p_seconds(fleet, g, g, ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1),
                                   msg_bytes=nbytes, crossings=1)
    assert busy / (busy + latency) == pytest.approx(share, abs=0.002)


MODEL = load_model(CAT.model_texts["gpt-1.7b"], "gpt-1.7b")
TRAIN = TrainingSettings(seq_length=2048, global_batch_size=64)


@pytest.mark.parametrize("sp, scatter, divisor", [(False, False, 1), (True, False, 4), (False, True, 4), (True, True, 4)])
def test_pipeline_message_is_split_only_by_sequence_parallelism_or_the_old_scatter(sp, scatter, divisor):
    cfg = ParallelConfig(tp=4, pp=2, dp=1, micro_batch_size=2, sequence_parallel=sp)
    train = TrainingSettings(seq_length=2048, global_batch_size=64, pipeline_scatter_gather=scatter)
    whole = 2 * 2048 * MODEL.hidden_size * 2
    assert p2p_message_bytes(MODEL, cfg, train) == pytest.approx(whole / divisor)


def test_the_old_scatter_pays_an_all_gather_on_the_receiving_node():
    g = _fleet("A100-SXM4-80GB").groups[0]
    cfg = ParallelConfig(tp=4, pp=2, dp=1, micro_batch_size=2)
    scatter = TrainingSettings(seq_length=2048, global_batch_size=64, pipeline_scatter_gather=True)
    assert pipeline_gather_s(g, MODEL, cfg, TRAIN) == 0.0
    assert pipeline_gather_s(g, MODEL, cfg, scatter) > 0.0
    assert pipeline_gather_s(g, MODEL, ParallelConfig(tp=4, pp=2, dp=1, micro_batch_size=2, sequence_parallel=True),
                             scatter) == 0.0


def test_tied_embedding_all_reduce_of_two_ranks_sends_each_byte_once():
    fleet = _fleet("A100-PCIe-80GB", gpus=1, nodes=4, nic="{transport: ethernet, gbps: 10}")
    g = fleet.groups[0]
    cfg = ParallelConfig(tp=1, pp=2, dp=2, micro_batch_size=1)
    emb = MODEL.padded_vocab(1) * MODEL.hidden_size * 4.0  # fp32 main grads
    busy, latency, _ = p2p_seconds(fleet, g, g, cfg, msg_bytes=emb, crossings=1)
    assert busy == pytest.approx(emb / (10 / 8 * 1448 / 1538 * 1e9), rel=1e-3)
    assert tied_embedding_sync_s(fleet, g, g, MODEL, cfg, TRAIN) == pytest.approx(busy + 2 * latency)


def test_data_parallel_ring_over_tcp_uses_the_node_nics():
    fleet = _fleet("A100-PCIe-80GB", gpus=4, nic="{transport: ethernet, gbps: 10, count: 1}")
    g = fleet.groups[0]
    bw, lat = group_busbw_gbytes_per_s(g, fleet.transports[g.nic_transport], members=8, stride=1)
    assert bw == pytest.approx(4 * (10 / 4) / 8 * 1448 / 1538, rel=1e-3)  # four GPUs share one NIC, a ring gets k x their share
    assert lat == pytest.approx(30e-6)


def test_explain_charges_more_for_tp_on_a_node_without_p2p(cli, write):
    base = """
name: pcie
sites:
  - name: lab
    node_groups:
      - name: g
        count: 2
        gpu: RTX-A6000
        gpus_per_node: 8
        intra_node: {kind: pcie, gbytes_per_s: 64, p2p: P2P}
        nics: {transport: ethernet, gbps: 10}
"""
    times = {}
    for p2p in ("true", "false"):
        c = write(base.replace("P2P", p2p), f"c{p2p}.yaml")
        r = cli("explain", "-c", c, "-m", "gpt-1.7b", "--seq-len", "2048", "--global-batch", "64", "--tp", "4",
                "--pp", "1", "--dp", "4", "--mbs", "4", "--json")
        assert r.code == 0, r.stderr
        times[p2p] = r.json()["prediction"]["iteration_time_s"]
    assert times["false"] > times["true"]


def test_catalog_has_the_issue_gpus_each_with_a_source():
    wanted = {"T4", "V100-SXM2-16GB", "V100-PCIe-16GB", "V100-PCIe-32GB", "RTX-3090", "RTX-4090", "RTX-A6000",
              "RTX-6000-Ada", "A40", "L40", "H100-NVL", "GH200-96GB", "GH200-144GB", "GB200", "B300-HGX", "MI355X"}
    assert wanted <= set(CAT.gpus)
    for gid in wanted:
        assert CAT.gpus[gid].source, gid
    assert CAT.gpu_type(CAT.gpus["MI355X"]).supports(Precision.FP8)
    assert not CAT.gpu_type(CAT.gpus["T4"]).supports(Precision.BF16)


@pytest.mark.parametrize("field, value", [("sockets", 0), ("sockets", 9), ("inter_socket_gbytes_per_s", 0),
                                          ("p2p", "maybe")])
def test_bad_pcie_settings_exit_2_with_the_field(cli, write, field, value):
    c = write(f"""
name: bad
sites:
  - name: lab
    node_groups:
      - name: g
        count: 1
        gpu: L40S
        gpus_per_node: 8
        intra_node: {{kind: pcie, gbytes_per_s: 64, {field}: {value}}}
        nics: {{transport: ethernet, gbps: 10}}
""")
    r = cli("validate", c)
    assert r.code == 2
    assert field in r.stderr


def _two_sites(latency_ms: float, window: str = "") -> object:
    text = f"""
name: wan
sites:
  - name: a
    node_groups:
      - {{name: g, count: 1, gpu: H100-SXM5-80GB, gpus_per_node: 8, nics: {{transport: ethernet, gbps: 400, count: 8}}}}
  - name: b
    node_groups:
      - {{name: h, count: 1, gpu: H100-SXM5-80GB, gpus_per_node: 8, nics: {{transport: ethernet, gbps: 400, count: 8}}}}
links:
  - {{between: [a, b], gbps: 3200, latency_ms: {latency_ms}{window}}}
"""
    return load_cluster(text, "<test>", CAT)[0]


def test_a_socket_carries_at_most_a_tcp_window_per_round_trip():
    """Over a 20 ms WAN (40 ms round trip) each of a flow's 16 sockets carries at most 3 MiB per round trip (Linux's
    default window), 16 x 3 MiB / 40 ms = 1.26 GB/s, far below the line rate; a link whose hosts are tuned for it
    (tcp_window_mib 128) is held by the sockets' own 2 GB/s instead; inside a fabric the window is no limit."""
    cfg = ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1)
    msg = 64 * 2 ** 20
    for latency_ms, window, per_flow in ((20, "", 16 * 3 * 2 ** 20 / 0.040), (20, ", tcp_window_mib: 128", 16 * 2e9),
                                         (0.02, "", 16 * 2e9)):
        fleet = _two_sites(latency_ms, window)
        a, b = fleet.groups
        busy, latency, _ = p2p_seconds(fleet, a, b, cfg, msg_bytes=msg, crossings=1)
        assert busy == pytest.approx(msg / per_flow, rel=1e-9) and latency == pytest.approx(latency_ms / 1e3)
    t = CAT.transports["ethernet"]
    assert t.window_mib == 3.0 and t.achieved_gbytes_per_s(400, rtt_s=60e-6) == t.socket_streams * t.stream_gbytes_per_s


def test_a_send_through_host_memory_takes_one_gloo_connection():
    """gloo joins two ranks by one TCP socket (gloo/transport/tcp/pair.cc), so a send through host memory
    (FlagScale's host path, a boundary between vendors) carries at most one socket's 2 GB/s and, across a 20 ms WAN,
    one 3 MiB window per 40 ms round trip: 78.6 MB/s, where NCCL's 16 sockets carry 1.26 GB/s; plus the two copies
    through host memory (12 GB/s each way). A tuned link's window lifts the WAN limit to the socket's own rate."""
    cfg = ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1)
    msg = 64 * 2 ** 20
    copies = 2 * msg / (HOST_COPY_GBYTES_PER_S * 1e9)
    for latency_ms, window, per_flow in ((20, "", 3 * 2 ** 20 / 0.040), (20, ", tcp_window_mib: 128", 2e9),
                                         (0.02, "", 2e9)):
        fleet = _two_sites(latency_ms, window)
        a, b = fleet.groups
        nccl, _, _ = p2p_seconds(fleet, a, b, cfg, msg_bytes=msg, crossings=1)
        gloo, latency, _ = p2p_seconds(fleet, a, b, cfg, msg_bytes=msg, crossings=1, host_copy=True)
        assert gloo == pytest.approx(msg / per_flow + copies, rel=1e-9)
        assert gloo > nccl + copies and latency == pytest.approx(latency_ms / 1e3)


def test_one_gloo_connection_holds_an_rdma_path_to_a_socket():
    """Inside an InfiniBand fabric a send between vendors (NCCL and RCCL share no communicator) goes over gloo's TCP
    whatever the NICs: one socket's 2 GB/s, not the fabric's 45 GB/s per GPU; a send between two NVIDIA groups on
    the same fabric keeps the fabric's rate and no copy."""
    text = """
name: v
sites:
  - name: a
    node_groups:
      - {name: n, count: 1, gpu: H100-SXM5-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}
      - {name: m, count: 1, gpu: MI300X, gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}
      - {name: o, count: 1, gpu: H100-SXM5-80GB, gpus_per_node: 8, nics: {transport: infiniband, gbps: 400, count: 8}}
"""
    fleet = load_cluster(text, "<test>", CAT)[0]
    n, m, o = fleet.groups
    cfg = ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1)
    msg = 64 * 2 ** 20
    between, _, path = p2p_seconds(fleet, n, m, cfg, msg_bytes=msg, crossings=1)
    assert path.transport.value == "infiniband"
    assert between == pytest.approx(msg / 2e9 + host_copy_s(msg), rel=1e-9)
    same, _, _ = p2p_seconds(fleet, n, o, cfg, msg_bytes=msg, crossings=1)
    assert same == pytest.approx(msg / (400 / 8 * 0.90 * 1e9), rel=1e-9)
