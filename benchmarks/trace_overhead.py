"""Tracing overhead on one GPU: time per step traced at each level against
untraced, in eager and graph mode, at H=512 with B=3200 and B=800
(resident data, NCCL: the step the default level is chosen for).

For each mode, batch and level, one process builds the step once and runs
blocks of steps untraced (the no-op tracer) and traced (a real Tracer at
that level, writing its trace) in ABBA order, `--rounds` rounds; each
block is timed by the host clock from a synchronised start to a
synchronised end (perfmlp.gpu.timing.per_call_s), so the figure is the
step's time as a user sees it. One tracer at a time: a CUPTI level's
collector is stopped before the next level starts. Reported per row: the
untraced and traced medians (us), the overhead's median over rounds (each
round's traced block against its own untraced one) and its spread (min,
25th, 75th percentile, max), the level that ran (a level that cannot run
falls back: the manifest's note), against the 2% target.

    python benchmarks/trace_overhead.py --out DIR        (DIR/trace_overhead.{json,md})
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.backend import build  # noqa: E402
from perfmlp.comm import make_world  # noqa: E402
from perfmlp.config import from_mapping  # noqa: E402
from perfmlp.gpu.timing import per_call_s  # noqa: E402
from perfmlp.mlp import init_weights  # noqa: E402
from perfmlp.step import step  # noqa: E402
from perfmlp.trace.format import OVERHEAD_TARGET, Counts  # noqa: E402
from perfmlp.trace.manifest import git_commit  # noqa: E402
from perfmlp.trace.writer import NullTracer, make_tracer  # noqa: E402

NB = 4  # batch positions cycled (resident data: the same buffers)


def block(cp, be, tracer, nsteps: int, B: int) -> float:
    """Seconds per step of nsteps steps, synchronised at both ends."""
    s = cp.cuda.get_current_stream()
    be.net.ops = tracer.ops
    counts = Counts()
    k = iter(range(nsteps))

    def one():
        i = next(k)
        lo = (i % NB) * B
        tracer.begin_batch(0, i, B, B)
        step(be.net, be.batches, be.reducer, lo, lo + B, tracer.phase, counts, be.graph, be.parts)
        tracer.end_batch(None, counts)
        counts.reset()
    return per_call_s(one, nsteps, start=s.synchronize, end=s.synchronize)


def measure(cp, world, exec_mode: str, B: int, level: str, a) -> dict:
    tdir = Path(tempfile.mkdtemp())
    cfg = from_mapping(dict(batch_size=B, n_train=B * NB, hidden_sizes=[512], batch_transfer="resident",
                            comm="nccl", exec=exec_mode, backend="cupy", trace=True, trace_level=level,
                            trace_dir=str(tdir), run_id="overhead", quiet=True))
    rng = np.random.default_rng(0)
    x = rng.random((cfg.n_train, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, cfg.n_train)]
    be = build(cfg, world, x, y)
    be.net.set_params(init_weights(cfg.layer_sizes, 0))
    tracer = make_tracer(cfg, world)
    tracer.attach(world, be)
    null = NullTracer()
    for tr in (null, tracer, null, tracer):   # warm-up: compilation, the graphs' capture, the first replays
        block(cp, be, tr, 30, B)
    off, on = [], []
    for r in range(a.rounds):
        pair = (null, tracer) if r % 2 == 0 else (tracer, null)   # ABBA
        t = {id(tr): block(cp, be, tr, a.steps, B) for tr in pair}
        off.append(t[id(null)])
        on.append(t[id(tracer)])
    tracer.close("complete")
    ran = tracer.manifest.ran if tracer.manifest else None
    pct = [100 * (b / o - 1) for o, b in zip(off, on)]
    q = statistics.quantiles(pct, n=4)
    return {"exec": exec_mode, "batch": B, "level": level, "level_ran": tracer.level,
            "level_note": ran.trace_level_note if ran else None,
            "untraced_us": statistics.median(off) * 1e6, "traced_us": statistics.median(on) * 1e6,
            "overhead_pct_median": statistics.median(pct), "overhead_pct_min": min(pct), "overhead_pct_p25": q[0],
            "overhead_pct_p75": q[2], "overhead_pct_max": max(pct), "rounds": a.rounds, "steps": a.steps,
            "under_target": statistics.median(pct) < 100 * OVERHEAD_TARGET}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder: trace_overhead.json and trace_overhead.md")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--levels", default="counters,phases,timeline,kernels")
    ap.add_argument("--batches", default="3200,800")
    a = ap.parse_args()
    import cupy as cp
    world = make_world()
    rows = []
    for exec_mode in ("eager", "graph"):
        for B in map(int, a.batches.split(",")):
            for level in a.levels.split(","):
                row = measure(cp, world, exec_mode, B, level, a)
                rows.append(row)
                print(f"{exec_mode} B={B} {level} (ran {row['level_ran']}): untraced {row['untraced_us']:.1f} us, "
                      f"traced {row['traced_us']:.1f} us, {row['overhead_pct_median']:+.2f}% "
                      f"[{row['overhead_pct_min']:+.2f}, {row['overhead_pct_max']:+.2f}]", flush=True)
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    meta = {"gpu": gpu, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(), "command": " ".join(["python", *sys.argv]), "target_pct": 100 * OVERHEAD_TARGET}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace_overhead.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    md = [f"# Tracing overhead, one GPU ({gpu})", "", f"Date {meta['date']}, commit {meta['commit']}.", "",
          f"Command: `{meta['command']}`", "",
          "H=512, resident data, NCCL; ABBA rounds of untraced and traced blocks; overhead per round, median and "
          "spread (min / 25th / 75th percentile / max).", "",
          "| exec | B | level | ran | untraced us | traced us | overhead % (median) | spread % | under 2% |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    md += [f"| {r['exec']} | {r['batch']} | {r['level']} | {r['level_ran']} | {r['untraced_us']:.1f} | "
           f"{r['traced_us']:.1f} | {r['overhead_pct_median']:+.2f} | {r['overhead_pct_min']:+.2f} / "
           f"{r['overhead_pct_p25']:+.2f} / {r['overhead_pct_p75']:+.2f} / {r['overhead_pct_max']:+.2f} | "
           f"{'yes' if r['under_target'] else 'no'} |" for r in rows]
    (out / "trace_overhead.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
