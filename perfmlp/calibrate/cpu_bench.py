"""The CPU's microbenchmarks, each where the NumPy trainer runs it (calibrate/cpu.py orders them).

The step's kernels: inside whole steps of perfmlp.mlp.Network, each kernel's NumPy work timed around its
call, so a kernel meets the caches the step before it left; the output backward runs unfused (as
costs.step_kernels(..., fuse_output=False) prices it). The tracer's host time per batch: the trainer's
own step at a size whose NumPy work is small, untraced and traced in interleaved rounds (the difference
of neighbours cancels the host's drift). The exchange: mpi4py's in-place Allreduce on NumPy buffers on
rank 0 alone (COMM_SELF: the call a one-process run still makes) and on every local rank at once, in
blocks of calls started together after a barrier, the slowest rank's; the blocks over their median are
the spread; the ring model is fitted to the world's."""
from __future__ import annotations

import tempfile
import time
from statistics import median
from types import SimpleNamespace

import numpy as np

from .. import names as N
from ..batches import HostBatches
from ..comm import HostReducer, SingleWorld
from ..config import Config
from ..gpu.timing import per_call_s, wall_s
from ..gpu.timing import rounds as interleaved
from ..mlp import Network, init_weights
from ..model.costs import kernel_name, kernel_shape
from ..step import step
from ..trace.format import Counts
from ..trace.writer import NullTracer, make_tracer
from .collectives import ring_fit
from .kernels import one_step


# the Network's array-work methods, each timed around its call
_WORK = ("_gemm", "_bias_sigmoid", "_bias_add", "_softmax_ce_grad", "_row_sum", "_sigmoid_grad_row_sum",
         "_sgd_update")
GEMM = "gemm"   # the cost registry's name of a GEMM, as operation and as kernel


class TimedNetwork(Network):
    """A NumPy Network whose kernels' array work is timed: `times` maps (kernel name, shape) to seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fuse_output = False
        self.ops = []
        self.times: dict[tuple, list[float]] = {}
        self._mark = 0
        for name in _WORK:
            setattr(self, name, self._timed(getattr(self, name)))

    def _timed(self, work):
        def call(*args):
            kernel = tuple(self.ops[self._mark:])
            self._mark = len(self.ops)
            t0 = time.perf_counter()
            out = work(*args)
            dt = time.perf_counter() - t0
            self.times.setdefault((kernel_name(kernel), kernel_shape(kernel)), []).append(dt)
            return out
        return call

    def clear(self) -> None:
        self.ops.clear()
        self._mark = 0


def step_piece(sizes, precision, b, seed: int = 0):
    """A random piece of b samples (D x b, its one-hot labels C x b) in the precision's type."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(precision)
    x = rng.random((sizes[0], b)).astype(dtype)
    y = np.zeros((sizes[-1], b), dtype=dtype)
    y[np.arange(b) % sizes[-1], np.arange(b)] = 1
    return x, y


def _net(cls, sizes, precision, b):
    net = cls(np, sizes, precision, 0.1, 1e-4, b)
    net.set_params(init_weights(sizes, 0))
    net.fuse_output = False
    return net


def reps_for(step_s: float, budget_s: float, lo: int = 3, hi: int = 30) -> int:
    """Steps to time within about budget_s, lo to hi; a step over ten budgets gets lo - 1."""
    if step_s > 10 * budget_s:
        return max(2, lo - 1)
    return int(min(hi, max(lo, budget_s // max(step_s, 1e-9))))


def time_step(sizes, precision, b, budget_s: float, start=None) -> dict:
    """{"kernels": {(name, shape): median seconds}, "step_s", "host_s", and each step's "plain_steps",
    "gemm_steps", "pass_steps"} on a piece of b samples; `start` (a barrier) before each timed block."""
    x, y = step_piece(sizes, precision, b)
    start = start or (lambda: None)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        plain = _net(Network, sizes, precision, b)
        reps = reps_for(wall_s(lambda: one_step(plain, x, y)), budget_s / 2)   # warm-up, and the step's size
        start()
        plain_s = [wall_s(lambda: one_step(plain, x, y)) for _ in range(reps)]
        net = _net(TimedNetwork, sizes, precision, b)
        one_step(net, x, y)
        net.times.clear()
        start()
        gemm_steps, pass_steps, excess = [], [], []
        for _ in range(reps):
            net.clear()
            before = {k: len(v) for k, v in net.times.items()}
            t0 = time.perf_counter()
            one_step(net, x, y)
            wall = time.perf_counter() - t0
            new = {k: v[before.get(k, 0):] for k, v in net.times.items()}
            gemm_steps.append(sum(sum(v) for k, v in new.items() if k[0] == GEMM))
            pass_steps.append(sum(sum(v) for k, v in new.items() if k[0] != GEMM))
            excess.append((wall - gemm_steps[-1] - pass_steps[-1]) / sum(len(v) for v in new.values()))
    return {"kernels": {k: float(median(v)) for k, v in net.times.items()}, "step_s": float(median(plain_s)),
            "plain_steps": plain_s, "gemm_steps": gemm_steps, "pass_steps": pass_steps,
            "host_s": float(median(excess))}


TRACE_SIZES, TRACE_BATCH = (16, 16, 10), 8     # the traced step: one whose NumPy work is small


def _loop(net, batches, reducer, tracer, counts, reps: int):
    def one_round() -> float:
        net.ops = tracer.ops
        t0 = time.perf_counter()
        for k in range(reps):
            tracer.begin_batch(0, k, TRACE_BATCH, TRACE_BATCH)
            step(net, batches, reducer, 0, TRACE_BATCH, tracer.phase, counts)
            tracer.end_batch(None, counts)
            counts.reset()
        return (time.perf_counter() - t0) / reps
    return one_round


def trace_host_s(log, rounds: int = 7, reps: int = 200) -> float:
    """Seconds per batch: the median over the rounds of the traced step less the untraced one (at least 0)."""
    world = SingleWorld()
    net = Network(np, TRACE_SIZES, N.FLOAT32, 0.1, 1e-4, TRACE_BATCH)
    net.set_params(init_weights(TRACE_SIZES, 0))
    rng = np.random.default_rng(0)
    x = rng.random((TRACE_BATCH, TRACE_SIZES[0]), dtype=np.float32)
    y = np.eye(TRACE_SIZES[-1], dtype=np.float32)[rng.integers(0, TRACE_SIZES[-1], TRACE_BATCH)]
    batches, reducer, counts = HostBatches(x, y), HostReducer(world), Counts()
    with tempfile.TemporaryDirectory() as d:
        cfg = Config(precision=N.FLOAT32, backend=N.NUMPY, trace_dir=d, run_id="calibrate-cpu")
        tracer = make_tracer(cfg, world)
        tracer.attach(world, SimpleNamespace(name=N.NUMPY, xp=np, net=net, reducer=reducer))
        try:
            out = interleaved({N.UNTRACED: _loop(net, batches, reducer, NullTracer(), counts, reps),
                               "traced": _loop(net, batches, reducer, tracer, counts, reps)}, rounds,
                              warmup_rounds=1)
        finally:
            tracer.close("complete")
    m = float(median(t - u for t, u in zip(out["traced"], out[N.UNTRACED])))
    if m < 0:
        log(f"the traced step was faster than the untraced one ({m * 1e6:.2f} us a batch): written as 0")
    return max(m, 0.0)


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
