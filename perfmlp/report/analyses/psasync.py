"""The asynchronous parameter server against synchronous SGD, for runs of
`--comm ps-async` beside synchronous runs of the same job on as many
workers: what a stale gradient is worth against nobody waiting for the
slowest. A group is one job on W workers with one straggler setting. Per
run: held-out accuracy after each epoch against updates (in batches of B
samples: one synchronous update, W asynchronous ones) and against the
epochs' own seconds, and what the server's update lines measured beside the
model's time per update (model/psasync.py).
"""
from __future__ import annotations

import statistics

from ...model.psasync import predict_async
from ...trace.reader import Run
from ... import names as N

JOB_KEYS = ("input_size", "hidden_sizes", "num_classes", "n_train", "batch_size", "epochs", "learning_rate", "reg",
            "precision", "seed", "shuffle", "data", "n_heldout")


def is_async(run: Run) -> bool:
    return run.comm == N.PS_ASYNC


def workers_of(run: Run) -> int:
    return run.procs - 1 if is_async(run) else run.procs


def scheme(run: Run) -> str:
    if is_async(run):
        return f"ps-async S={run.config.get('staleness', 0)}"
    return "synchronous ps" if run.comm in (N.PS, N.PS_NCCL) else "synchronous all-reduce"


def group_of(run: Run) -> tuple:
    """(job, workers, straggler's delay in ms); not which rank straggles (ps-async numbers from the server)."""
    c = run.config
    job = tuple(str(c.get(k)) for k in JOB_KEYS)
    return job, workers_of(run), float(c.get("straggler_delay_ms", 0.0) or 0.0)


def group_label(key: tuple) -> str:
    _, W, delay = key
    return f"{W} workers, " + (f"one {delay:g} ms late per batch" if delay else "no straggler")


def curve(run: Run) -> list[tuple[float, float, float]]:
    """(updates in batches of B, wall seconds, held-out accuracy) at the end of each epoch (rank 0's lines)."""
    rt = run.ranks.get(0)
    if rt is None:
        return []
    c = run.config
    nbatches = -(-int(c["n_train"]) // int(c["batch_size"]))
    W, out, wall = workers_of(run), [], 0.0
    for e in sorted(rt.epochs, key=lambda e: e.epoch):
        wall += float(e.seconds or 0.0)
        x = e.updates / W if is_async(run) and e.updates is not None else (e.epoch + 1) * nbatches
        out.append((x, wall, float("nan") if e.accuracy is None else e.accuracy))
    return out


def _cycle_s(run: Run, rank: int, server_s: float) -> float | None:
    """A worker's median cycle without waits: its batch's wall time less its pull phase, plus the server's."""
    rt = run.ranks.get(rank)
    t = [b.wall_ms - b.t_ms.get("pull", (0.0, 0.0))[1] for b in (rt.batches if rt else ())]
    return statistics.median(t) / 1e3 + server_s if t else None


def async_row(run: Run) -> dict:
    """What the update lines measured, and the model's time per update beside it."""
    ups = run.ranks[0].updates if 0 in run.ranks else []
    if not ups:
        return {}
    seconds = sum(float(e.seconds or 0.0) for e in run.ranks[0].epochs)
    row = {"staleness_mean": statistics.fmean(u.staleness for u in ups),
           "staleness_max": max(u.staleness for u in ups),
           "delay_mean": statistics.fmean(u.update - u.read for u in ups),
           "queue_mean": statistics.fmean(u.queue for u in ups), "queue_max": max(u.queue for u in ups),
           "blocked_mean": statistics.fmean(u.blocked for u in ups),
           "measured_ms_per_update": 1e3 * seconds / len(ups) if seconds else None}
    server_s = statistics.median(u.apply_ms + u.reply_ms for u in ups) / 1e3
    cycles = [_cycle_s(run, r, server_s) for r in range(1, run.procs)]
    if all(cycles):
        p = predict_async(cycles, int(run.config.get("staleness", 0)), apply_s=server_s)
        row.update({"predicted_ms_per_update": 1e3 * p.update_s, "bound": p.bound,
                    "no_wait_ms_per_update": 1e3 * p.workers_s, "server_ms_per_update": 1e3 * p.server_s,
                    "server_saturates_at_workers": p.saturation_workers, "staleness_to_hide": p.staleness_to_hide})
    return row


def groups(runs: list[Run]) -> dict[tuple, list[Run]]:
    """Each ps-async run's group (by workers, then delay) -> its data-parallel runs, synchronous first, then by S."""
    keys = {group_of(r) for r in runs if is_async(r)}
    return {k: sorted((r for r in runs if group_of(r) == k and r.config.get("parallel", "data") == N.DATA),
                      key=lambda r: (is_async(r), int(r.config.get("staleness", 0)), r.run_id))
            for k in sorted(keys, key=lambda k: (k[1], k[2]))}
