"""What each trace level costs: the whole training loop (perfmlp.train.train)
run untraced and at every --trace-level, interleaved, in one process per
rank (under mpirun for several GPUs), on the same data.

Each run: H=512, B (--batch-size, 3200 by default) split over the ranks, resident data, NCCL, N =
B * --batches-per-epoch synthetic samples, --epochs epochs, --exec eager or
graph. What is measured, and what is dropped:
- a run's time per batch is the mean over its epochs but the first of the
  synchronised wall time per batch after each epoch's first batch
  (train's EpochResult.ms_per_batch). Dropped: the first epoch (CUDA-graph
  capture per batch position with resident data, first launches, CUPTI's
  first buffers) and every epoch's first batch (the steady window starts
  after it has finished: the device synchronised). So a run measures
  (epochs - 1) * (batches - 1) steady batches: 5 * 149 = 745 by default;
- the time between epochs (the tracer's end_epoch: draining and writing
  the CUPTI records) lies outside that window; it is timed separately and
  reported per batch of the epoch (`between_epochs_us_per_batch`);
- repeats: every repeat runs every variant once, in an order rotated by
  one each repeat (untraced first, then last, ...); the overhead of a level
  in a repeat is (level / the untraced run of the same repeat) - 1. Reported
  per level: the median over repeats, the quartiles and the range. A run's
  time is the median over its measured epochs (one epoch stalled by the
  host does not move it);
- the host's own time per step, apart from the GPU: each epoch starts with
  the device synchronised, so its next batches are launched into an empty
  queue and the host's time from one batch's start to the next is what the
  host spends on a step (tracer included), as long as it has not caught up
  with the GPU's queue. Reported: the median over the run's measured epochs
  of the median of batches HOST_BATCHES (`host_us_per_step`). Against the
  untraced run's, it is the tracer's host cost per batch; against the GPU
  time per batch, it says whether the step is host-bound.

    mpirun -n 2 python benchmarks/timeline_overhead.py --exec eager --out overhead-p2-eager.json
    python benchmarks/timeline_overhead.py --summary overhead-p*-*.json --out overhead.md
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp import data as data_mod  # noqa: E402
from perfmlp import train as train_mod  # noqa: E402
from perfmlp.config import Config, from_mapping  # noqa: E402
from perfmlp.gpu.timing import wall_s  # noqa: E402
from perfmlp.names import TRACE_LEVELS  # noqa: E402
from perfmlp.trace.format import OVERHEAD_TARGET, default_trace_level  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402

VARIANTS = ("untraced", *TRACE_LEVELS)
HOST_BATCHES = range(2, 10)  # batches of an epoch launched into a near-empty queue (batch 0 ends synchronised)


def quartiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def _cached_arrays():
    """data.to_arrays made once per dataset (N x 784 float32 is GBs: the
    conversion would cost more than the run it feeds)."""
    memo: dict = {}
    real = data_mod.to_arrays

    def to_arrays(ds, num_classes, dtype):
        key = (id(ds), num_classes, str(dtype))
        if key not in memo:
            memo[key] = (ds, real(ds, num_classes, dtype))  # ds kept: its id stays unique
        return memo[key][1]
    return to_arrays


def measure(a, world) -> dict:
    data_mod.load = functools.lru_cache(maxsize=2)(data_mod.load)  # the same samples for every run, made once
    train_mod.data_mod.to_arrays = _cached_arrays()
    tdir = Path(tempfile.mkdtemp()) if world.rank == 0 else None
    tdir = Path(world.bcast(str(tdir) if tdir else None))
    B = a.batch_size
    base = {"batch_size": B, "n_train": B * a.batches_per_epoch, "epochs": a.epochs, "hidden_sizes": [512],
            "learning_rate": 1e-4, "batch_transfer": "resident", "comm": "nccl", "backend": "cupy",
            "data": "synthetic", "n_heldout": 0, "quiet": True, "trace_dir": str(tdir)}
    if "exec" in {f.name for f in dataclasses.fields(Config)}:
        base["exec"] = a.exec_mode
    elif a.exec_mode != "eager":
        raise SystemExit(f"--exec {a.exec_mode}: this perfmlp has no exec option")
    times: dict = {v: [] for v in VARIANTS}
    between: dict = {v: [] for v in VARIANTS}
    host: dict = {v: [] for v in VARIANTS}
    used: dict = {}
    for rep in range(a.repeats):
        order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
        for v in order:
            cfg = from_mapping({**base, "trace": v != "untraced", "trace_level": v if v != "untraced" else "counters",
                                "run_id": f"{v}-{rep}"})
            tracer = NullTracer() if v == "untraced" else make_tracer(cfg, world)
            spent = []
            end_epoch = tracer.end_epoch

            def timed(_end=end_epoch, _spent=spent, **values):
                _spent.append(wall_s(lambda: _end(**values)))
            tracer.end_epoch = timed
            starts: list = []
            begin = tracer.begin_batch

            def stamped(*args, _begin=begin, _starts=starts, _now=time.perf_counter):
                _starts.append(_now())
                _begin(*args)
            tracer.begin_batch = stamped
            gc.collect()
            world.barrier()
            res = train_mod.train(cfg, world, tracer)
            tracer.close("complete")
            measured = res.epochs[1:] or res.epochs
            times[v].append(statistics.median(e.ms_per_batch for e in measured))
            host[v].append(host_us_per_step(starts, a.batches_per_epoch, len(res.epochs) - len(measured)))
            between[v].append(1e6 * sum(spent[1:] or spent) / sum(e.batches for e in measured))
            used[v] = getattr(tracer, "level", "untraced")
    rows = []
    for v in VARIANTS:
        ratios = [100 * (t / u - 1) for t, u in zip(times[v], times["untraced"])]
        q1, q3 = quartiles(ratios)
        rows.append({"variant": v, "level_ran": used[v], "ms_per_batch_median": statistics.median(times[v]),
                     "ms_per_batch_all": times[v], "overhead_pct_median": statistics.median(ratios),
                     "overhead_pct_q1": q1, "overhead_pct_q3": q3,
                     "overhead_pct_min": min(ratios), "overhead_pct_max": max(ratios),
                     "between_epochs_us_per_batch": statistics.median(between[v]),
                     "host_us_per_step_median": statistics.median(host[v]), "host_us_per_step_all": host[v]})
    return {"base": base, "rows": rows}


def host_us_per_step(starts: list[float], per_epoch: int, skip_epochs: int) -> float:
    """The median over epochs (after `skip_epochs`) of the median time from
    one batch's start to the next over batches HOST_BATCHES, in us."""
    meds = []
    for e in range(skip_epochs, len(starts) // per_epoch):
        s = starts[e * per_epoch:(e + 1) * per_epoch]
        meds.append(statistics.median(s[k + 1] - s[k] for k in HOST_BATCHES if k + 1 < len(s)))
    return 1e6 * statistics.median(meds)


def summary(files: list[str]) -> str:
    """A markdown table of overhead files, and the default level of each
    execution mode against the target."""
    out = ["| p | exec | level | ms/batch (median) | overhead median | IQR | range | between epochs us/batch "
           "| host us/step | under target |", "|---|---|---|---|---|---|---|---|---|---|"]
    worst: dict = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        for r in d["rows"]:
            hus = r.get("host_us_per_step_median")
            hus = "-" if hus is None else f"{hus:.1f}"
            if r["variant"] == "untraced":
                out.append(f"| {d['procs']} | {d['exec']} | untraced | {r['ms_per_batch_median']:.4f} | | | | | {hus} | |")
                continue
            under = r["overhead_pct_median"] < 100 * OVERHEAD_TARGET
            mark = " (default)" if r["variant"] == default_trace_level(d["exec"]) else ""
            ran = "" if r["level_ran"] == r["variant"] else f" (ran as {r['level_ran']})"
            out.append(f"| {d['procs']} | {d['exec']} | {r['variant']}{mark}{ran} | {r['ms_per_batch_median']:.4f} | "
                       f"{r['overhead_pct_median']:+.2f}% | [{r['overhead_pct_q1']:+.2f}, {r['overhead_pct_q3']:+.2f}] | "
                       f"[{r['overhead_pct_min']:+.2f}, {r['overhead_pct_max']:+.2f}] | "
                       f"{r['between_epochs_us_per_batch']:.1f} | {hus} | {'yes' if under else 'no'} |")
            if mark:
                worst[d["exec"]] = max(worst.get(d["exec"], (None, -1e9)), (r["variant"], r["overhead_pct_median"]),
                                       key=lambda x: x[1])
    out.append("")
    out += [f"- exec {m}: default level {lv}, worst median overhead over p {pct:+.2f}% "
            f"({'under' if pct < 100 * OVERHEAD_TARGET else 'OVER'} the {100 * OVERHEAD_TARGET:.0f}% target)"
            for m, (lv, pct) in sorted(worst.items())]
    d0 = json.loads(Path(files[0]).read_text())
    out.append(f"- {d0['repeats']} repeats per level, interleaved; {d0['epochs'] - 1} measured epochs of "
               f"{d0['batches_per_epoch'] - 1} steady batches each per run, a run's time the median over its "
               f"epochs (rule: benchmarks/timeline_overhead.py)")
    out.append(f"- host us/step: the host's time from one batch's start to the next over batches "
               f"{HOST_BATCHES.start}-{HOST_BATCHES.stop - 1} of each epoch (launched into a near-empty queue after "
               f"the epoch's synchronised first batch), median over epochs and repeats; the tracer's host cost is "
               f"a level's figure minus the untraced one")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--exec", dest="exec_mode", default="eager", choices=("eager", "graph"))
    ap.add_argument("--batch-size", type=int, default=3200, help="B, split over the ranks (default 3200)")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batches-per-epoch", type=int, default=150)
    ap.add_argument("--summary", nargs="+", metavar="OVERHEAD.json", help="write a markdown table of these files")
    a = ap.parse_args()
    if a.summary:
        Path(a.out).write_text(summary(a.summary))
        return
    if a.epochs < 2 or a.batches_per_epoch < HOST_BATCHES.stop + 1:
        raise SystemExit(f"timeline_overhead: --epochs must be at least 2 (the first is dropped) and "
                         f"--batches-per-epoch at least {HOST_BATCHES.stop + 1} (host us/step)")
    from perfmlp.comm import make_world
    world = make_world()
    t0 = time.perf_counter()
    got = measure(a, world)
    if world.rank != 0:
        return
    for r in got["rows"]:
        print(f"p={world.size} exec={a.exec_mode} {r['variant']:9s} ({r['level_ran']:9s}) "
              f"{r['ms_per_batch_median']:.4f} ms/batch  overhead {r['overhead_pct_median']:+.2f}% "
              f"IQR [{r['overhead_pct_q1']:+.2f}, {r['overhead_pct_q3']:+.2f}] "
              f"range [{r['overhead_pct_min']:+.2f}, {r['overhead_pct_max']:+.2f}]", flush=True)
    import cupy
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({
        "gpu": gpu, "procs": world.size, "exec": a.exec_mode, "date": dt.date.today().isoformat(),
        "command": " ".join(sys.argv), "config": got["base"], "repeats": a.repeats, "epochs": a.epochs,
        "batches_per_epoch": a.batches_per_epoch, "seconds": time.perf_counter() - t0, "rows": got["rows"]},
        indent=1))


if __name__ == "__main__":
    main()
