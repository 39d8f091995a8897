"""The asynchronous parameter server's section: the trade-off between
statistical efficiency (what a stale gradient is worth) and hardware
efficiency (nobody waits for the slowest), for runs of `--comm ps-async`
beside synchronous runs of the same job on as many workers.

A group is one job (sizes, data, batch, epochs, step size, seed) on W
workers with one straggler setting; its synchronous runs are those of
another --comm on W ranks. The figure puts each run's held-out accuracy,
evaluated at the end of every epoch, against updates (in batches of B
samples: one synchronous update, W asynchronous ones) and against wall time
(the epochs' own seconds, their evaluations left out). The table adds what
the server's update lines measured (staleness, delay, queue, workers held
by the bound) and its time per update beside the model's
(perfmlp/model/psasync.py), from each worker's cycle without its waits and
the server's own time per update, both measured (a worker's cycle: its
batch's wall time less its wait for the server's answer, plus the server's
time on its request).
"""
from __future__ import annotations

import statistics

from ...model.psasync import predict_async
from ...trace.reader import Run
from ..figures import _plt, encode
from . import Figure, Section, Table
from ... import names as N

ASYNC = N.PS_ASYNC
JOB_KEYS = ("input_size", "hidden_sizes", "num_classes", "n_train", "batch_size", "epochs", "learning_rate", "reg",
            "precision", "seed", "shuffle", "data", "n_heldout")
S_COLORS = {0: "tab:blue", 1: "tab:orange", 2: "tab:green", 4: "tab:red"}


def is_async(run: Run) -> bool:
    return run.comm == ASYNC


def workers_of(run: Run) -> int:
    return run.procs - 1 if is_async(run) else run.procs


def scheme(run: Run) -> str:
    if is_async(run):
        return f"ps-async S={run.config.get('staleness', 0)}"
    return "synchronous ps" if run.comm in (N.PS, N.PS_NCCL) else "synchronous all-reduce"


def group_of(run: Run) -> tuple:
    """(job, workers, straggler's delay in ms): which rank straggles is not
    part of it (ps-async's ranks are numbered from the server)."""
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
    """A worker's median cycle when nothing keeps it waiting: its batch's wall
    time less its wait for the server's answer (the pull phase), plus the
    server's time on its request."""
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


def section_psasync(runs: list[Run]) -> Section | None:
    """The trade-off section, or None without a ps-async run."""
    asyncs = [r for r in runs if is_async(r)]
    if not asyncs:
        return None
    keys = {group_of(r) for r in asyncs}
    groups = {k: sorted((r for r in runs if group_of(r) == k and r.config.get("parallel", "data") == N.DATA),
                        key=lambda r: (is_async(r), int(r.config.get("staleness", 0)), r.run_id))
              for k in sorted(keys, key=lambda k: (k[1], k[2]))}
    s = Section("Asynchronous SGD: statistical against hardware efficiency")
    s.paragraphs.append(
        "ps-async: rank 0 applies each worker's gradient as it arrives; a piece of batch k is handed out only "
        "once every batch before k - S is applied, so S = 0 is synchronous SGD and a larger S lets the workers "
        "that are ahead go on without the slowest. Updates are counted in batches of B samples (W asynchronous "
        "updates make one); wall time is the epochs' own, evaluations left out.")
    rows = []
    for key, members in groups.items():
        s.paragraphs += _findings(key, members)
        for r in members:
            pts = curve(r)
            rows.append({"group": group_label(key), "scheme": scheme(r), "run": r.run_id, "procs": r.procs,
                         "workers": workers_of(r), "final_accuracy": pts[-1][2] if pts else None,
                         "wall_s": pts[-1][1] if pts else None,
                         "ms_per_batch": 1e3 * pts[-1][1] / pts[-1][0] if pts and pts[-1][0] else None,
                         **(async_row(r) if is_async(r) else {})})
    s.figures.append(Figure("psasync_tradeoff", "Held-out accuracy against updates (left) and wall time (right), "
                            "one row per group", tradeoff, {"groups": {group_label(k): [(scheme(r), curve(r))
                                                                         for r in m] for k, m in groups.items()}}))
    s.tables.append(Table("psasync", "Each run of the trade-off, and what its server measured", rows))
    return s


def _findings(key: tuple, members: list[Run]) -> list[str]:
    sync = [r for r in members if not is_async(r)]
    if not sync or not curve(sync[0]):
        return [f"{group_label(key)}: no synchronous run of the same job on {key[1]} ranks to compare with."]
    ref = curve(sync[0])[-1]
    parts = []
    for r in members:
        if is_async(r) and curve(r):
            _, wall, acc = curve(r)[-1]
            parts.append(f"{scheme(r)} {100 * acc:.2f}% in {wall:.1f} s ({ref[1] / wall:.2f}x)")
    return [f"{group_label(key)}: synchronous {100 * ref[2]:.2f}% held-out accuracy in {ref[1]:.1f} s; "
            + "; ".join(parts) + "."]


def tradeoff(groups: dict[str, list[tuple[str, list]]]):
    """groups: label -> [(scheme, [(updates, wall_s, accuracy), ...]), ...]."""
    plt = _plt()
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.6 * len(groups)), squeeze=False)
    for (label, series), (a1, a2) in zip(groups.items(), axes):
        for name, pts in series:
            if not pts:
                continue
            S = int(name.split("=")[1]) if "=" in name else None
            style = dict(color=S_COLORS.get(S, "tab:purple"), marker="o", ms=3, lw=1.2) if S is not None else \
                dict(color="black", marker="s", ms=3, lw=2)
            a1.plot([p[0] for p in pts], [100 * p[2] for p in pts], label=name, **style)
            a2.plot([p[1] for p in pts], [100 * p[2] for p in pts], label=name, **style)
        a1.set_xlabel("updates (batches of B samples)")
        a2.set_xlabel("wall time (s)")
        for a in (a1, a2):
            a.set_ylabel("held-out accuracy (%)")
            a.set_title(label, fontsize=9)
            a.grid(True, lw=0.3)
        a1.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return encode(fig)
