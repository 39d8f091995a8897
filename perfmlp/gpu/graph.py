"""The step as CUDA graphs: captured once, replayed every batch (at the trainer's sizes the host's
launching sets an eager step's pace). A graph holds the strategy's parts (perfmlp/step.py) as they run
eagerly: with device collectives the whole step; with the staged exchange, which needs the host
mid-step, the compute only, the exchange and update running eagerly after the replay.

A graph reads its input from fixed addresses, so the batch lands in static device buffers first
(resident data copied device to device: batches.DeviceBatches.static); one graph serves every batch of
a piece size and address (a prefetch slot has its own). Pointers, shapes and scalars are baked in,
parameters updated in place; the operations and counters recorded during the capture are added to each
replay's batch. With ps-nccl each rank captures its own graph, the update on rank 0 only; model and
hybrid parallelism over staged or host exchanges are refused (model.predict.graph_refusal says why)."""
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
    """perfmlp.step.step calls `replay` in place of the eager compute part (and, `whole_step`, of the
    exchange too); `parts`: the strategy's step (perfmlp/step.py)."""

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
        # relaxed: a kernel's first use may load its module during the capture (every launch names the stream)
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
        """The batch piece [lo, hi) through the graph of its size (captured on first use): the compute part, and with
        device collectives the exchange and the update too (`whole_step`)."""
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
