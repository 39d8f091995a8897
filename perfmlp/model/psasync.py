"""The asynchronous parameter server's time per update (`--comm ps-async`;
perfmlp/psasync; docs/psasync.md derives it). Pure.

Worker w cycles in c_w when nothing keeps it waiting (`worker_cycle_s`).
- workers: t_workers = 1 / sum_w (1 / c_w), nobody waiting for the slowest;
- staleness S (a piece of step k handed out once every step before k - S is
  applied): t_stale = c_max / (1 + min(sum_{others} c_max / c_w, (S + 1) W - 1));
- the server: t_server = 2 m / bw + apply_s (gradient in, parameters out).
Time per update: max(t_stale, t_server); the server saturates at
W* = c / t_server workers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class AsyncPrediction:
    workers: int
    cycle_s: tuple[float, ...]    # each worker's cycle, nothing waited for
    workers_s: float              # t_workers: per update, nobody waiting for the slowest
    stale_s: float                # t_stale: per update, the staleness bound holding the others back
    link_s: float                 # per update on the server's link (gradient in, parameters out)
    apply_s: float                # per update, the server's own update
    server_s: float               # t_server = link_s + apply_s
    update_s: float               # predicted time per update
    bound: str                    # "workers", "staleness" or "server"
    saturation_workers: float     # W*: workers of the mean cycle at which the server saturates
    staleness_to_hide: int        # the least S at which the slowest worker holds nobody back


def worker_cycle_s(compute_s: float, message_bytes: int, link_bytes_per_s: float | None = None,
                   latency_s: float = 0.0, staged_bytes: int = 0, copy_bytes_per_s: float | None = None,
                   server_s: float = 0.0) -> float:
    """A worker's cycle: compute, two messages, its staged copies and the server's time on its request."""
    msg = 0.0 if link_bytes_per_s is None else 2 * (latency_s + message_bytes / link_bytes_per_s)
    copies = 0.0 if copy_bytes_per_s is None else staged_bytes / copy_bytes_per_s
    return compute_s + msg + copies + server_s


def staleness_to_hide(cycle_s: Sequence[float]) -> int:
    """The least S with (S + 1) W - 1 >= c_max sum_{others} 1 / c_w: nobody waits for the slowest."""
    W = len(cycle_s)
    slow = max(range(W), key=lambda w: cycle_s[w])
    others = sum(cycle_s[slow] / c for w, c in enumerate(cycle_s) if w != slow)
    return max(0, math.ceil((others + 1) / W - 1 - 1e-12))


def predict_async(cycle_s: Sequence[float], staleness: int, message_bytes: int = 0,
                  link_bytes_per_s: float | None = None, apply_s: float = 0.0) -> AsyncPrediction:
    """Time per update of len(cycle_s) workers under staleness S, and the bounds."""
    W = len(cycle_s)
    if W < 1 or min(cycle_s) <= 0 or staleness < 0:
        raise ValueError(f"cycles {list(cycle_s)}, staleness {staleness}")
    workers_s = 1.0 / sum(1.0 / c for c in cycle_s)
    slow = max(cycle_s)
    others = slow * (1.0 / workers_s - 1.0 / slow)
    stale_s = slow / (1.0 + min(others, (staleness + 1) * W - 1))
    link_s = 0.0 if link_bytes_per_s is None else 2 * message_bytes / link_bytes_per_s
    server_s = link_s + apply_s
    update_s = max(stale_s, server_s)
    bound = "server" if server_s >= stale_s and server_s > 0 else \
        "workers" if stale_s <= workers_s * (1 + 1e-9) else "staleness"
    mean = sum(cycle_s) / W
    return AsyncPrediction(W, tuple(cycle_s), workers_s, stale_s, link_s, apply_s, server_s, update_s, bound,
                           mean / server_s if server_s > 0 else math.inf, staleness_to_hide(cycle_s))
