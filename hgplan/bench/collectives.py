"""Time all-reduce and send/recv between the devices of this node: one process per rank (NCCL/RCCL on GPUs, gloo on
the CPU), rendezvous on a free localhost port, each sample the slowest rank's time of back-to-back operations."""

from __future__ import annotations

import math
import socket
import statistics
import time
from typing import Any

from hgplan.bench.kernels import SAMPLE_TARGET_S, WARMUP_CALLS
from hgplan.documents import BenchCollective

COLLECTIVE_BYTES = {"full": [1 << 20, 16 << 20, 256 << 20, 1 << 30], "quick": [16 << 20, 256 << 20],
                    "cpu": [1 << 20, 4 << 20]}
"""Message sizes per mode: from latency-bound to bandwidth-bound (nccl-tests' range)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(torch: Any, dist: Any, op: Any, *, cuda: bool, device: Any, inner: int) -> float:
    """Milliseconds per operation of the slowest rank over `inner` back-to-back operations."""
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(inner):
        op()
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - t0) * 1e3 / inner], dtype=torch.float64,
                           device=device if cuda else "cpu")
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def _measure(torch: Any, dist: Any, rank: int, ranks: int, *, cuda: bool, device: Any, sizes: list[int],
             repeats: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        buf = torch.ones(nbytes // 4, dtype=torch.float32, device=device)

        def all_reduce() -> None:
            dist.all_reduce(buf)

        def send_recv() -> None:  # rank 0 sends to rank 1; the others wait at the next barrier
            if rank == 0:
                dist.send(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)

        for name, op in (("all_reduce", all_reduce), ("send_recv", send_recv)):
            for _ in range(WARMUP_CALLS):
                op()
            first = _timed(torch, dist, op, cuda=cuda, device=device, inner=1)
            inner = max(1, min(200, math.ceil(SAMPLE_TARGET_S * 1e3 / max(first, 1e-3))))
            samples = [_timed(torch, dist, op, cuda=cuda, device=device, inner=inner) for _ in range(repeats)]
            rows.append({"op": name, "ranks": ranks if name == "all_reduce" else 2, "bytes": nbytes,
                         "ms": statistics.median(samples)})
    return rows


def _worker(rank: int, ranks: int, port: int, cuda: bool, sizes: list[int], repeats: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=ranks)
    try:
        rows = _measure(torch, dist, rank, ranks, cuda=cuda, device=device, sizes=sizes, repeats=repeats)
        if rank == 0:
            queue.put(rows)
    finally:
        dist.destroy_process_group()


def time_collectives(*, ranks: int, cuda: bool, sizes: list[int], repeats: int) -> list[BenchCollective]:
    """All-reduce over `ranks` devices and send/recv between the first two, per message size."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(ranks, _free_port(), cuda, sizes, repeats, queue), nprocs=ranks, join=True,
                       start_method="spawn")
    return [BenchCollective(**row) for row in queue.get()]
