"""The training step, written once for every strategy and execution mode.

A strategy's step is two `Parts`, functions that issue their kernels, copies and collectives within the
phases they record: `compute(net, x, y, phase, counts)` (forward, loss, backward) and `exchange(net,
reducer, phase, counts)` (the gradient exchange and the update; it returns the reduced loss sum where
reading it costs no device synchronisation, else None, and raises NonFiniteLoss before an update with a
non-finite loss). `step` issues both eagerly or replays the CUDA graph captured from them
(perfmlp/gpu/graph.py), with the exchange in it where it needs no host (`whole_step`)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import RunFailure
from .trace.records import Phase


class NonFiniteLoss(RunFailure):
    """Seen on every rank at once (reduced with the gradients); `params`, `where`: the last finite ones."""

    params: dict | None = None
    where: str = ""


def no_phase(name: str):
    """A phase function that times nothing."""
    return contextlib.nullcontext()


def compute(net, x, y, phase, counts) -> None:
    """Forward, loss and backward on the rank's piece (a model group's column-split output combined in its own
    phase after forward)."""
    with phase(Phase.FORWARD):
        net.forward(x)
    if net.combines_output:
        with phase(Phase.COMBINE):
            net.combine_output()
    with phase(Phase.LOSS):
        net.loss(y)
    with phase(Phase.BACKWARD):
        net.backward()


def exchange(net, reducer, phase, counts) -> float | None:
    """The reducer's sum of the gradient buffer over the ranks, then the update."""
    reducer.reduce(net.g.flat, phase, counts)
    ce = reducer.host_value(net.g.flat, net.g.n_params)
    if ce is not None and not np.isfinite(ce):
        raise NonFiniteLoss(ce)  # before the update: the parameters are still the last finite ones
    with phase(Phase.UPDATE):
        net.update()
    return ce


@dataclass(frozen=True)
class Parts:
    compute: Callable = compute
    exchange: Callable = exchange


DATA = Parts()


def step(net, batches, reducer, lo: int, hi: int, phase, counts, graph=None, parts: Parts = DATA) -> float | None:
    """One step on samples [lo, hi) of the current order; the exchange's return (`graph`: a GraphStep)."""
    if graph is None:
        x, y = batches.get(lo, hi, phase, counts)
        parts.compute(net, x, y, phase, counts)
    else:
        graph.replay(lo, hi, phase, counts)
        if graph.whole_step:
            return None  # the exchange and the update were in the graph; the loss stays on the device
    return parts.exchange(net, reducer, phase, counts)
