"""The step as CUDA graphs: captured once, replayed every batch.

An eager step is about a dozen kernel launches from Python, and at the
trainer's sizes the host's launching, not the GPU, sets the pace. In graph
mode the step's kernels and collectives (the same calls as eager: the
strategy's parts, perfmlp/step.py) are captured once into a CUDA graph and
each batch is one graph launch.

What a graph holds, per strategy and exchange:
- data parallelism, nccl: forward, loss, backward, the allreduce (or,
  overlapped, one per gradient piece on the communication stream: a fork
  and a join) and the update: the whole step.
- data parallelism, mpi-staged: forward, loss and backward only. The staged
  exchange needs the host in the middle of the step (D2H, MPI_Allreduce on
  the host, H2D), so it and the update (one kernel) run eagerly after the
  replay.
- model parallelism and the hybrid grid, nccl: the whole step, with the
  model group's ncclAllReduces inside forward and backward (the shard's
  hooks) and the data group's gradient allreduce. With the staged or host
  exchanges those allreduces need the host mid-pass, so the trainer refuses
  graph mode there (model/predict.py: graph_refusal).
- the parameter server, ps-nccl: the whole step: ncclReduce to rank 0, the
  update on rank 0 only (each rank captures its own graph), ncclBroadcast.
A graph reads its input from the same addresses at every replay, so the
batch piece lands in static device buffers first, outside the graph:
pageable and pinned copies land there anyway; resident data is copied device
to device (batches.DeviceBatches.static, inside the `graph` phase), as
PyTorch's CUDA-graph recipe copies into its static inputs. One graph serves
every batch of a piece size (a short last batch gets its own); a prefetched
batch (gpu/prefetch.py) lands in one of the pipeline's slots, so each slot
has its graph. The
alternative, a graph per batch position reading the resident slices in
place, saves that copy (a few us a step) but pays a capture and
an instantiation per position in the first epoch (a graph step's first
batch took 0.8 ms there, against 0.22 ms steady: graph_step.md).

A graph bakes in everything the kernels were launched with: pointers,
shapes and scalars (the learning rate, 1/B). Parameters are updated in
place, so replays see the current values. The network records its
operations and the reducers and allreduces their counters during the
capture (into the capture's Counts: the parts get it as `counts`); each
replay adds the same to the batch's trace, so counters stay exact per
batch. So do the network's own step counters (`step_counters`: a shard
counts its updates).
"""
from __future__ import annotations

import contextlib

from .. import names as N
from ..step import DATA
from ..trace.format import Counts
from ..names import Phase

NOPHASE = contextlib.nullcontext()


def _nophase(name: str):
    return NOPHASE


class _Captured:
    __slots__ = ("graph", "ops", "kernels", "counts", "steps")


class GraphStep:
    """Replays the step's graphs; perfmlp.step.step calls `replay` in place
    of the eager compute part (and, `whole_step`, of the exchange too).
    `parts`: the strategy's step (perfmlp/step.py), captured as it runs
    eagerly."""

    def __init__(self, cupy, net, batches, reducer, stream, parts=DATA):
        self.cp, self.net, self.batches, self.reducer, self.stream = cupy, net, batches, reducer, stream
        self.parts = parts
        # every collective on the device: else the exchange and the update run after the replay
        self.whole_step = reducer.name in N.DEVICE_COMMS
        self.graphs: dict = {}

    def _capture(self, x, y) -> _Captured:
        net, rt = self.net, self.cp.cuda.runtime
        names = getattr(net, "step_counters", ())
        ops, kernels, steps = net.ops, net.kernels_launched, [getattr(net, n) for n in names]
        c = _Captured()
        c.counts = Counts()
        net.ops, net.kernels_launched = [], 0
        graph = None
        # relaxed: a first use of a kernel may load its module during the capture
        # (every launch of the step names the stream: perfmlp/gpu/network.py)
        self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", 2))
        try:
            self.parts.compute(net, x, y, _nophase, c.counts)
            if self.whole_step:
                # no host read: a device exchange's host_value is None, so nothing is checked here
                self.parts.exchange(net, self.reducer, _nophase, c.counts)
        finally:
            try:
                graph = self.stream.end_capture()
            finally:
                c.ops, c.kernels = net.ops, net.kernels_launched
                c.steps = [getattr(net, n) - v for n, v in zip(names, steps)]
                net.ops, net.kernels_launched = ops, kernels
                for n, v in zip(names, steps):
                    setattr(net, n, v)  # nothing ran yet: the replays add it
        graph.upload(self.stream)  # the first replay costs no more than the others
        c.graph = graph
        return c

    def replay(self, lo: int, hi: int, phase, counts) -> None:
        """The batch piece [lo, hi) through the graph of its size (captured on
        first use): the compute part, and with device collectives the
        exchange and the update too (`whole_step`)."""
        net = self.net
        resident = self.batches.mode == N.RESIDENT
        if not resident:
            x, y = self.batches.get(lo, hi, phase, counts)  # copied into the static buffers (h2d phase)
        with phase(Phase.GRAPH):
            if resident:
                x, y = self.batches.static(lo, hi, counts)
            # a sliced schedule (gpu/sliced.py) has two steps: with the last batch's slices pending or not
            key = (x.data.ptr, y.data.ptr, hi - lo, net.global_batch, getattr(self.reducer, "graph_state", None))
            g = self.graphs.get(key)
            if g is None:
                g = self.graphs[key] = self._capture(x, y)
            g.graph.launch(self.stream)
            if hasattr(self.reducer, "replayed"):
                self.reducer.replayed()
            if net.ops is not None:
                net.ops.extend(g.ops)
                net.kernels_launched += g.kernels
        for name, n in zip(getattr(net, "step_counters", ()), g.steps):
            setattr(net, name, getattr(net, name) + n)
        counts.add(g.counts)
