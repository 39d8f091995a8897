"""The asynchronous parameter server (`--comm ps-async --staleness S`).

Rank 0 serves the parameters; every other rank is a worker. A worker asks
for a piece of a batch, gets it with the server's current parameters,
computes its gradient (scaled by 1/B of the whole batch, as a data-parallel
rank's), sends it and asks again. The server applies each gradient in
arrival order and hands out the pieces under the stale-synchronous rule
(schedule.py): a piece of batch k only once every batch before k - S is
wholly applied.

The update, for the gradient g of a piece of step k: w <- w - lr (g_w +
lambda w) if it is the first of step k's pieces to arrive, else
w <- w - lr g_w; b <- b - lr g_b: the regularisation term once per step, as
synchronous SGD applies it. So with S = 0 the parameters equal synchronous
SGD's up to the order of summation (tests/mpi_psasync.py); with S > 0 the
run is determined by the gradients' arrival order, which the trace records
(trace/updates.py) and replay.py remakes the parameters from.

Transport: MPI non-blocking point to point. The server keeps one receive
posted per worker with a piece out and answers each request with a small
header (status, step, piece) and the parameters, sent from a snapshot so
the server can go on updating; a waiting rank tests its request and yields
its core between tests (sched_yield: the computing ranks keep theirs, and
MPI moves large messages only as both sides test). On the GPU a worker
stages through the host; the server holds the parameters on its GPU. NCCL
is refused: its receive names the sender, not arrival order.
"""
from __future__ import annotations

from .. import names as N

COMM = N.PS_ASYNC
SERVER = 0      # the rank that serves the parameters


def refusal(cfg, backend: str) -> str | None:
    """Why a ps-async configuration cannot run (a one-line error), or None.
    The rank count is checked once the world exists (check_world)."""
    if cfg.comm == N.PS_ASYNC_NCCL:
        return ("--comm ps-async-nccl: NCCL's receive names its sender, so the server could not take "
                "gradients in the order they arrive; use --comm ps-async (staged through the host on the GPU)")
    if cfg.comm != COMM:
        return None
    if cfg.exec == N.GRAPH:
        return ("--exec graph with --comm ps-async: the worker's exchange and the server's update need the host "
                "every batch (MPI point to point); use --exec eager")
    if cfg.overlap:
        return "--overlap is for data parallelism with an allreduce (this run: --comm ps-async)"
    from ..model.precision import precision
    if precision(cfg.precision).mixed:
        return (f"--precision {cfg.precision} is for data parallelism with an allreduce (this run: --comm "
                "ps-async): the server's update does not rewrite the 16-bit weight copy")
    if cfg.batch_transfer in N.PREFETCH_TRANSFERS:
        return (f"--batch-transfer {cfg.batch_transfer} is for data parallelism with an allreduce (this run: "
                "--comm ps-async, whose worker takes its next piece only from the server's answer)")
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
