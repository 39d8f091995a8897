"""The batch's copies to the GPU: each one's time, a pageable copy's
staging ahead of the stream, and the prefetching pipeline's own time."""
from __future__ import annotations

from ..machine import Machine
from ... import names as N

# The loop thread's host calls per batch that order the input pipeline (perfmlp/gpu/prefetch.py).
PREFETCH_CALLS = {N.PREFETCH: 6, N.PREFETCH_PAGEABLE: 4}


def prefetch_s(machine: Machine, batch_transfer: str, copies: list[float], nbytes: int,
               exec_mode: str = N.EAGER) -> float:
    """The prefetching pipeline's own time per batch: its copies or, from a pageable source, its
    threads' staging (the calibrated pace, else Machine.stage_bw), whichever is slower."""
    if batch_transfer != N.PREFETCH_PAGEABLE:
        return sum(copies)
    pace = machine.prefetch_pace(exec_mode, batch_transfer, nbytes)
    return max(sum(copies), pace if pace is not None else nbytes / machine.stage_bw())


def batch_copies(machine: Machine, layer_sizes, b: int, act_bytes: int, batch_transfer: str,
                 procs: int, exec_mode: str = N.EAGER) -> tuple[list[float], list[tuple], float | None]:
    """(seconds of each of X's and Y's copies, none resident or prefetched; pageable ones'
    (ahead seconds, blocks, ahead delay); the prefetching pipeline's time or None)."""
    if batch_transfer == N.RESIDENT:
        return [], [], None
    mem = N.PAGEABLE if batch_transfer == N.PAGEABLE else N.PINNED
    sizes = [act_bytes * b * n for n in (layer_sizes[0], layer_sizes[-1])]
    copies = [machine.copy_s("h2d", mem, n, sharing=procs) for n in sizes]
    if batch_transfer in N.PREFETCH_TRANSFERS:   # on a copy stream, beside the step: priced after the timeline
        return [], [], prefetch_s(machine, batch_transfer, copies, sum(sizes), exec_mode)
    ahead = []
    if mem == N.PAGEABLE:
        for n in sizes:
            a, blocks = machine.pageable_ahead(n, sharing=procs)
            ahead.append((a, blocks, machine.pageable_ahead_delay(n, sharing=procs) if blocks else None))
    return copies, ahead, None
