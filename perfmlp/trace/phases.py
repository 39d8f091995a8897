"""The phase hooks a Tracer hands out (`tracer.phase(Phase.X)`, a dict look-up done in C).

At the default level a phase costs one `with` and one perf_counter() appended to the batch's
stamps, all in C (`stamp_class`). Only the first batch of each piece size (`Recording`) notes
the phases that ran and the operations launched in each. `Event` (`phases` on the GPU) records
a CUDA event as a phase ends, from a pool, through the runtime directly (CuPy's Event wrappers
cost host time on every phase); `Hooked` pushes and pops an NVTX range and a CUPTI external
correlation id."""
from __future__ import annotations

import time
from itertools import repeat, starmap

from . import activity as act
from . import nvtx as nv
from .fastpath import CStamper
from .records import Phase

_now = time.perf_counter  # seconds as a float: cheaper to pack than integer ns
DRAIN_AT = (Phase.BACKWARD, Phase.GRAPH)  # finished GPU batches are written as one of these starts


# A C callable that takes any arguments and returns None: object.__init__ of
# an immutable object (the empty tuple's). A `with` block's __exit__ that
# runs no Python code, and returns a false value (exceptions propagate).
NOOP = ().__init__


def stamp_class(stamps: list, compiled: bool = False) -> type:
    """The class of a phase on the host clock: one stamp into `stamps` as it starts (a phase ends
    where the next starts). Both hooks are C callables used as they are (no bound method): __exit__
    is NOOP; __enter__ is the C Stamper (`compiled`), else a map() iterator's __next__ that reads
    the clock and appends it."""
    stamp = CStamper(stamps) if compiled else map(stamps.append, starmap(_now, repeat(()))).__next__
    return type("Stamp", (), {"__slots__": (), "__enter__": stamp, "__exit__": NOOP})


class Event:
    """A phase timed on the GPU: a CUDA event as it ends (it starts at the event before it)."""

    __slots__ = ("t", "drain")

    def __init__(self, tracer, name: Phase):
        self.t, self.drain = tracer, name in DRAIN_AT

    def __enter__(self):
        t = self.t
        if self.drain and t._pending:
            t._drain(block=False)  # the host waits on the GPU here anyway

    def __exit__(self, tp, v, tb):
        self.t._stamps.append(self.t._event())


class Hooked:
    """An NVTX range and, collecting GPU activity, a CUPTI external correlation id around a phase."""

    __slots__ = ("t", "base", "name", "code")

    def __init__(self, tracer, name: Phase, base):
        self.t, self.base, self.name = tracer, base, name
        self.code = list(Phase).index(name) + 1  # 0: the batch itself, between phases

    def __enter__(self):
        t = self.t
        nv.push(self.name.value, t._batch_no)
        if t._push is not None:
            t._push((t._seq << act.PHASE_BITS) | self.code)
        self.base.__enter__()

    def __exit__(self, tp, v, tb):
        self.base.__exit__(tp, v, tb)
        t = self.t
        if t._push is not None:
            t._collector.pop()
        nv.pop()


class Recording:
    """The first batch of a piece size: which phases ran, in order, and what each launched."""

    __slots__ = ("t", "base", "name")

    def __init__(self, tracer, name: Phase, base):
        self.t, self.base, self.name = tracer, base, name

    def __enter__(self):
        t = self.t
        t._open = (len(t._ops), t._kernels.kernels_launched)
        self.base.__enter__()

    def __exit__(self, tp, v, tb):
        self.base.__exit__(tp, v, tb)
        t = self.t
        i0, k0 = t._open
        t._ran.append((self.name, i0, len(t._ops), t._kernels.kernels_launched - k0))


def phase_code_names() -> dict[int, Phase]:
    """CUPTI external correlation code -> phase (Hooked's codes)."""
    return {i + 1: p for i, p in enumerate(Phase)}
