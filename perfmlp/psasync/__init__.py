"""The asynchronous parameter server (`--comm ps-async --staleness S`).

Rank 0 serves; every other rank asks for a piece of a batch, gets it with the current parameters, sends
back its gradient (scaled by 1/B of the whole batch) and asks again. The server applies gradients in
arrival order and hands out pieces under the stale-synchronous rule (schedule.py). The regularisation
term goes with a step's first applied piece only, so S = 0 is synchronous SGD up to summation order;
with S > 0 the trace's update lines (trace/updates.py) record the order, and replay.py remakes the run.

Transport: MPI non-blocking point to point, a waiting rank yielding its core between tests (MPI moves
large messages only as both sides test); the server sends from a snapshot so it can go on updating.
NCCL is refused: its receive names the sender, not arrival order."""
from __future__ import annotations

from .. import names as N

COMM = N.PS_ASYNC
SERVER = 0      # the rank that serves the parameters


def refusal(cfg) -> str | None:
    """Why a ps-async configuration cannot run (one line), or None; data parallelism's options:
    backend.check_options; the rank count: check_world."""
    if cfg.comm == N.PS_ASYNC_NCCL:
        return ("--comm ps-async-nccl: NCCL's receive names its sender, so the server could not take "
                "gradients in the order they arrive; use --comm ps-async (staged through the host on the GPU)")
    if cfg.comm == COMM and cfg.exec == N.GRAPH:
        return ("--exec graph with --comm ps-async: the worker's exchange and the server's update need the host "
                "every batch (MPI point to point); use --exec eager")
    return None


def check_world(cfg, size: int) -> None:
    """The rank count and the straggler against the server's layout."""
    from ..errors import PerfmlpError
    if size < 2:
        raise PerfmlpError(f"--comm ps-async needs at least 2 ranks (rank 0 serves, the others work); "
                           f"this run has {size}")
    if cfg.straggler_delay_ms and cfg.straggler_rank == SERVER:
        raise PerfmlpError("--straggler-rank 0 is the server with --comm ps-async: name a worker, 1.."
                           f"{size - 1}")

# the wire: a worker sends TAG_GRAD (its gradient buffer, loss slot last); the
# server answers TAG_HEADER (int64 status, step, piece) and, with OK, TAG_PARAMS
TAG_GRAD, TAG_HEADER, TAG_PARAMS = 11, 12, 13
OK, DONE, FAILED = 0, 1, 2
