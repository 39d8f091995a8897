"""The tracer's host time per batch of a NumPy run: the trainer's own step
(HostBatches, the HostReducer on one process, begin_batch and end_batch
around it) at a size whose NumPy work is small, untraced and traced, in
interleaved rounds (the difference of neighbours cancels the host's drift)."""
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
from ..gpu.timing import rounds as interleaved
from ..mlp import Network, init_weights
from ..step import step
from ..trace.format import Counts
from ..trace.writer import NullTracer, make_tracer

SIZES, BATCH = (16, 16, 10), 8     # a step whose NumPy work is small


def _loop(net, batches, reducer, tracer, counts, reps: int):
    def one_round() -> float:
        net.ops = tracer.ops
        t0 = time.perf_counter()
        for k in range(reps):
            tracer.begin_batch(0, k, BATCH, BATCH)
            step(net, batches, reducer, 0, BATCH, tracer.phase, counts)
            tracer.end_batch(None, counts)
            counts.reset()
        return (time.perf_counter() - t0) / reps
    return one_round


def trace_host_s(log, rounds: int = 7, reps: int = 200) -> float:
    """Seconds per batch: the median over the rounds of the traced step less the untraced one (at least 0)."""
    world = SingleWorld()
    net = Network(np, SIZES, N.FLOAT32, 0.1, 1e-4, BATCH)
    net.set_params(init_weights(SIZES, 0))
    rng = np.random.default_rng(0)
    x = rng.random((BATCH, SIZES[0]), dtype=np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
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
