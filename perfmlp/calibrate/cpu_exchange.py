"""The NumPy trainer's exchange measured: mpi4py's in-place Allreduce on
NumPy buffers (comm.MPIWorld.allreduce_sum) at sizes from 8 B to 16 MB and
the gradient buffers', on rank 0 alone (COMM_SELF: the call a one-process
run still makes) and on every local rank at once, in blocks of calls started
together after a barrier, the slowest rank's; the blocks over their median
are the spread; the ring model is fitted to the world's."""
from __future__ import annotations

import time
from statistics import median

import numpy as np

from ..gpu.timing import per_call_s
from .collectives import ring_fit

SIZES = tuple(8 * 4 ** i for i in range(11)) + (16 << 20,)   # 8 B ... 8 MB by 4x, and 16 MB
QUICK_SIZES = (8, 4096, 1 << 20)


def _block_s(comm, buf, calls: int) -> float:
    """The slowest rank's seconds per call of `calls` in-place allreduces, started together."""
    from mpi4py import MPI
    dt = per_call_s(lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), calls, start=comm.Barrier)
    return comm.allreduce(dt, op=MPI.MAX)


def allreduce_points(comm, sizes, budget_s: float, blocks: int = 5) -> tuple[list[dict], list[float]]:
    """({procs, bytes, s} per size, the blocks' ratios to their size's median) on `comm` (a collective)."""
    points, ratios = [], []
    for nbytes in sorted(set(int(n) for n in sizes)):
        buf = np.ones(max(1, nbytes // 8), dtype=np.float64)
        first = _block_s(comm, buf, 1)                             # warm-up, and the call's size
        calls = int(comm.bcast(max(1, min(1000, (budget_s / blocks) // max(first, 1e-7)))))
        times = [_block_s(comm, buf, calls) for _ in range(blocks)]
        m = median(times)
        points.append({"procs": comm.Get_size(), "bytes": int(buf.nbytes), "s": float(m)})
        ratios += [t / m for t in times if m > 0]
    return points, ratios


def exchange(world_comm, sizes, budget_s: float, log) -> dict:
    """allreduce_s points on rank 0 alone and on the world, the world's ring fit (mpi_alpha_s,
    mpi_bw_bytes_per_s) and ratios (`_spread_collective`). A collective; the others wait without polling."""
    from mpi4py import MPI
    out: dict = {"allreduce_s": [], "_spread_collective": []}
    if world_comm.Get_rank() == 0:
        pts, _ = allreduce_points(MPI.COMM_SELF, sizes, budget_s)
        out["allreduce_s"] += pts
    quiet_barrier(world_comm)
    p = world_comm.Get_size()
    if p > 1:
        pts, ratios = allreduce_points(world_comm, sizes, budget_s)
        out["allreduce_s"] += pts
        out["_spread_collective"] = ratios
        alpha, bw = ring_fit([(pt["procs"], pt["bytes"], pt["s"], None) for pt in pts], alpha_steps=True)
        out["mpi_alpha_s"], out["mpi_bw_bytes_per_s"] = alpha, bw
        log(f"MPI allreduce on {p} ranks: alpha {alpha * 1e6:.2f} us, {bw / 1e9:.2f} GB/s "
            f"({len(pts)} sizes, {pts[0]['bytes']} B to {pts[-1]['bytes']} B)")
    return out


def quiet_barrier(comm, poll_s: float = 0.002) -> None:
    """A barrier whose waiting ranks sleep (an MPI barrier polls, taking a core from a rank measuring)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)
