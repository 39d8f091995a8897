"""The step as CUDA graphs: captured once, replayed every batch.

An eager step is about a dozen kernel launches from Python, and at the
trainer's sizes the host's launching, not the GPU, sets the pace. In graph
mode the network's kernels (the same calls as eager: perfmlp/mlp.py) are
captured once into a CUDA graph and each batch is one graph launch.

What a graph holds, per gradient exchange:
- nccl: forward, loss, backward, the allreduce (or, overlapped, one per
  gradient piece on the communication stream: a fork and a join) and the
  update: the whole step.
- mpi-staged: forward, loss and backward only. The staged exchange needs
  the host in the middle of the step (D2H, MPI_Allreduce on the host, H2D),
  so it and the update (one kernel) run eagerly after the replay.
A graph reads its input from the same addresses at every replay, so the
batch piece lands in static device buffers first, outside the graph:
pageable and pinned copies land there anyway; resident data is copied device
to device (batches.DeviceBatches.static, inside the `graph` phase), as
PyTorch's CUDA-graph recipe copies into its static inputs. One graph serves
every batch of a piece size (a short last batch gets its own). The
alternative, a graph per batch position reading the resident slices in
place, saves that copy (7.5 us at b = 3200 on an H200:
benchmarks/results/h200-x2/graph/kernel_breakdown.md) but pays a capture and
an instantiation per position in the first epoch (a graph step's first
batch took 0.8 ms there, against 0.22 ms steady: graph_step.md).

A graph bakes in everything the kernels were launched with: pointers,
shapes and scalars (the learning rate, 1/B). Parameters are updated in
place, so replays see the current values. The network records its
operations and the reducer its counters during the capture; each replay
adds the same to the batch's trace, so counters stay exact per batch.
"""
from __future__ import annotations

import contextlib

from ..trace.format import Counts

NOPHASE = contextlib.nullcontext()


class _Captured:
    __slots__ = ("graph", "ops", "kernels", "counts")


class GraphStep:
    """Replays the step's graphs; perfmlp.train.step calls `replay` in place
    of the eager forward/loss/backward (and, `whole_step`, the rest)."""

    def __init__(self, cupy, net, batches, reducer, stream):
        self.cp, self.net, self.batches, self.reducer, self.stream = cupy, net, batches, reducer, stream
        self.whole_step = reducer.name == "nccl"  # else the exchange and the update run after the replay
        self.graphs: dict = {}

    def _capture(self, x, y) -> _Captured:
        net, rt = self.net, self.cp.cuda.runtime
        ops, kernels = net.ops, net.kernels_launched
        c = _Captured()
        c.counts = Counts()
        net.ops, net.kernels_launched = [], 0
        graph = None
        # relaxed: a first use of a kernel may load its module during the capture
        # (every launch of the step names the stream: perfmlp/gpu/network.py)
        self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", 2))
        try:
            net.forward(x)
            net.loss(y)
            net.backward()
            if self.whole_step:
                self.reducer.reduce(net.g.flat, lambda name: NOPHASE, c.counts)
                net.update()
        finally:
            try:
                graph = self.stream.end_capture()
            finally:
                c.ops, c.kernels = net.ops, net.kernels_launched
                net.ops, net.kernels_launched = ops, kernels
        graph.upload(self.stream)  # the first replay costs no more than the others
        c.graph = graph
        return c

    def replay(self, lo: int, hi: int, phase, counts) -> None:
        """The batch piece [lo, hi) through the graph of its size (captured on
        first use): forward, loss, backward, and with NCCL the
        exchange and the update too (`whole_step`)."""
        net = self.net
        resident = self.batches.mode == "resident"
        if not resident:
            x, y = self.batches.get(lo, hi, phase, counts)  # copied into the static buffers (h2d phase)
        with phase("graph"):
            if resident:
                x, y = self.batches.static(lo, hi, counts)
            key = (x.data.ptr, y.data.ptr, hi - lo, net.global_batch)
            g = self.graphs.get(key)
            if g is None:
                g = self.graphs[key] = self._capture(x, y)
            g.graph.launch(self.stream)
            if net.ops is not None:
                net.ops.extend(g.ops)
                net.kernels_launched += g.kernels
        counts.add(g.counts)
