"""The batch's copies to the GPU: each one's time, a pageable copy's
staging ahead of the stream, and the prefetching pipeline's own time."""
from __future__ import annotations

from ..machine import Machine
from ... import names as N

# The input pipeline (perfmlp/gpu/prefetch.py): the loop thread's host calls
# per batch that order it (an event recorded and waited on; with a pinned
# source the two copies and their stream's wait and record too; with a
# pageable source the host thread's task handed over and joined instead).
PREFETCH_CALLS = {N.PREFETCH: 6, N.PREFETCH_PAGEABLE: 4}


def prefetch_s(machine: Machine, batch_transfer: str, copies: list[float], nbytes: int,
               exec_mode: str = N.EAGER) -> float:
    """Per batch, the prefetching pipeline's own time: its copies and, from a
    pageable source, the host threads' staging of the piece's nbytes into
    pinned memory, whichever is slower (each runs beside the other and the
    step). The staging: the pace calibrated beside the `exec_mode` loop
    (Machine.prefetch_pace: the threads wait for the loop's GIL), else the
    threads' copy rate alone (Machine.stage_bw)."""
    if batch_transfer != N.PREFETCH_PAGEABLE:
        return sum(copies)
    pace = machine.prefetch_pace(exec_mode, batch_transfer, nbytes)
    return max(sum(copies), pace if pace is not None else nbytes / machine.stage_bw())


def batch_copies(machine: Machine, layer_sizes, b: int, act_bytes: int, batch_transfer: str,
                 procs: int, exec_mode: str = N.EAGER) -> tuple[list[float], list[tuple], float | None]:
    """(seconds of each of the batch's copies, X and Y, at act_bytes an
    element, none when resident or prefetched; for pageable ones the host's
    staging of each ahead of the stream: (seconds, blocks, its ahead delay
    or None); the prefetching pipeline's time, prefetch_s, or None)."""
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
