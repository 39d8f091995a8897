"""The asynchronous parameter server's time per update (`--comm ps-async`;
perfmlp/psasync): pure, numbers in and numbers out (docs/psasync.md).

An update is one worker's gradient applied by the server. Worker w cycles
in c_w seconds when nothing keeps it waiting: its piece's compute (and an
injected delay), its staged copies, its two messages and the server's
service of its own request (`worker_cycle_s`).

- The workers' bound, nobody waiting for the slowest: gradients arrive at
  sum_w 1 / c_w, so t_workers = 1 / sum_w (1 / c_w).
- The staleness bound. A piece of step k is handed out only once every step
  before k - S is applied, so while the slowest worker (c_max) computes one
  piece the others take at most (S + 1) W - 1 pieces, and can take
  c_max sum_{w != slowest} 1 / c_w: t_stale = c_max / (1 + min(others,
  (S + 1) W - 1)). With S = 0 and equal workers it is c / W (synchronous
  SGD); with S large enough (`staleness_to_hide`) it is t_workers.
- The server's own bound: its link carries the gradient in and the
  parameters out, 2 m / bw for m bytes each way (both directions sharing
  it), and it applies the update: t_server = 2 m / bw + apply_s.

Time per update: max(t_stale, t_server), the bound naming which is larger.
The server saturates at W* = c / t_server workers of cycle c: beyond W*,
only its queue grows.
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
    """A worker's cycle: compute, two messages (gradient out, parameters in)
    of `message_bytes` each, on the GPU its staged copies (D2H of the
    gradient, H2D of the parameters: `staged_bytes` in all), and the
    server's time on its request (`server_s`: the update and the reply)."""
    msg = 0.0 if link_bytes_per_s is None else 2 * (latency_s + message_bytes / link_bytes_per_s)
    copies = 0.0 if copy_bytes_per_s is None else staged_bytes / copy_bytes_per_s
    return compute_s + msg + copies + server_s


def staleness_to_hide(cycle_s: Sequence[float]) -> int:
    """The least S at which the slowest worker keeps no other waiting:
    (S + 1) W - 1 >= c_max sum_{others} 1 / c_w."""
    W = len(cycle_s)
    slow = max(range(W), key=lambda w: cycle_s[w])
    others = sum(cycle_s[slow] / c for w, c in enumerate(cycle_s) if w != slow)
    return max(0, math.ceil((others + 1) / W - 1 - 1e-12))


def predict_async(cycle_s: Sequence[float], staleness: int, message_bytes: int = 0,
                  link_bytes_per_s: float | None = None, apply_s: float = 0.0) -> AsyncPrediction:
    """Predicted time per update of W = len(cycle_s) workers under staleness
    S, and the server's bounds (module docstring). `link_bytes_per_s` None:
    the link's time is already in apply_s (a measured per-update time)."""
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
    if server_s >= stale_s and server_s > 0:
        bound = "server"
    else:
        bound = "workers" if stale_s <= workers_s * (1 + 1e-9) else "staleness"
    mean = sum(cycle_s) / W
    return AsyncPrediction(W, tuple(cycle_s), workers_s, stale_s, link_s, apply_s, server_s, update_s, bound,
                           mean / server_s if server_s > 0 else math.inf, staleness_to_hide(cycle_s))
