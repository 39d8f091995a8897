"""What each trace level costs: the whole training loop (perfmlp.train.train)
run untraced and at every --trace-level, alternating, in one process per
rank (under mpirun for several GPUs), on the same data.

Each run: H=512, B=3200 split over the ranks, resident data, NCCL, N =
B * --batches-per-epoch synthetic samples, --epochs epochs; its time per
batch is the median over epochs of the synchronised wall time after each
epoch's first batch (train's EpochResult.ms_per_batch). Repeats rotate the
order of the variants; the overhead of a level is the median over repeats of
(level / the untraced run of the same repeat) - 1, with its range.

    PYTHONPATH=. mpirun -n 2 python benchmarks/timeline_overhead.py --exec eager --out results/x.json
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp import data as data_mod  # noqa: E402
from perfmlp import train as train_mod  # noqa: E402
from perfmlp.comm import make_world  # noqa: E402
from perfmlp.config import Config, from_mapping  # noqa: E402
from perfmlp.trace.format import TRACE_LEVELS  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402

VARIANTS = ("untraced", *TRACE_LEVELS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--exec", dest="exec_mode", default="eager")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batches-per-epoch", type=int, default=40)
    a = ap.parse_args()
    world = make_world()
    data_mod.load = functools.lru_cache(maxsize=2)(data_mod.load)  # the same samples for every run, made once
    tdir = Path(tempfile.mkdtemp()) if world.rank == 0 else None
    tdir = Path(world.bcast(str(tdir) if tdir else None))
    B = 3200
    base = {"batch_size": B, "n_train": B * a.batches_per_epoch, "epochs": a.epochs, "hidden_sizes": [512],
            "learning_rate": 1e-4, "batch_transfer": "resident", "comm": "nccl", "backend": "cupy",
            "data": "synthetic", "n_heldout": 0, "quiet": True, "trace_dir": str(tdir)}
    if "exec" in {f.name for f in dataclasses.fields(Config)}:
        base["exec"] = a.exec_mode
    elif a.exec_mode != "eager":
        raise SystemExit(f"--exec {a.exec_mode}: this perfmlp has no exec option")
    times: dict = {v: [] for v in VARIANTS}
    walls: dict = {v: [] for v in VARIANTS}
    used: dict = {}
    for rep in range(a.repeats):
        order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
        for v in order:
            cfg = from_mapping({**base, "trace": v != "untraced", "trace_level": v if v != "untraced" else "counters",
                                "run_id": f"{v}-{rep}"})
            tracer = NullTracer() if v == "untraced" else make_tracer(cfg, world)
            world.barrier()
            t0 = time.perf_counter()
            res = train_mod.train(cfg, world, tracer)
            tracer.close("complete")
            wall = time.perf_counter() - t0
            times[v].append(statistics.median(e.ms_per_batch for e in res.epochs))
            walls[v].append(wall)
            used[v] = getattr(tracer, "level", "untraced")
    if world.rank != 0:
        return
    rows = []
    for v in VARIANTS:
        ratios = [t / u - 1 for t, u in zip(times[v], times["untraced"])]
        rows.append({"variant": v, "level_ran": used[v], "ms_per_batch_median": statistics.median(times[v]),
                     "ms_per_batch_all": times[v], "overhead_pct_median": 100 * statistics.median(ratios),
                     "overhead_pct_min": 100 * min(ratios), "overhead_pct_max": 100 * max(ratios),
                     "run_wall_s_all": walls[v]})
        r = rows[-1]
        print(f"p={world.size} exec={a.exec_mode} {v:9s} ({used[v]:9s}) {r['ms_per_batch_median']:.4f} ms/batch  "
              f"overhead {r['overhead_pct_median']:+.2f}% [{r['overhead_pct_min']:+.2f}, {r['overhead_pct_max']:+.2f}]",
              flush=True)
    import cupy
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"gpu": gpu, "procs": world.size, "exec": a.exec_mode,
                                       "date": dt.date.today().isoformat(), "command": " ".join(sys.argv),
                                       "config": base, "repeats": a.repeats, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
