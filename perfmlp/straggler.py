"""An injected straggler (`--straggler-delay-ms MS --straggler-rank R`):
rank R sleeps MS milliseconds in every batch it computes, after the batch
starts and before its first phase, so the batch's wall time holds the delay
and no phase does. A stated, reproducible slowdown of one rank, to show what
waiting for the slowest rank costs a synchronous exchange and what an
asynchronous one saves (perfmlp/psasync)."""
from __future__ import annotations

import time
from typing import Callable

from .errors import PerfmlpError


def _nothing() -> None:
    pass


def straggler(cfg, rank: int, size: int) -> Callable[[], None]:
    """What this rank calls at the start of each batch it computes."""
    if not cfg.straggler_delay_ms:
        return _nothing
    if cfg.straggler_rank >= size:
        raise PerfmlpError(f"--straggler-rank {cfg.straggler_rank}: this run has ranks 0..{size - 1}")
    if rank != cfg.straggler_rank:
        return _nothing
    delay_s = cfg.straggler_delay_ms / 1e3
    return lambda: time.sleep(delay_s)
