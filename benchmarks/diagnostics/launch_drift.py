"""How steady is the host's launch cost, and does the trainer launch at the
calibration's pace? (Two blind sweeps on one H100 calibrated 18.05 and
13.51 us an operation, the latter's two draws 15.60 and 11.42; the
trainer's eager steps in the first ran at 17-27.)

One process (run it several times: each launch draws the host's speed
again): `--rounds` rounds, each timing, as perfmlp.calibrate.host does, the
eager step's host time per operation at the dispatch calibration's tiny
size and at H, b (resident, NCCL over one rank, untraced, `--reps` steps
enqueued back to back), and the trainer's own run of the same size
(`python -m perfmlp.run`, eager, resident, NCCL, untraced, 2 epochs of 60
batches: its synchronised time per batch, the median over its epochs, over
the same operation count).
Prints one line per round; appends JSON lines to --out.

    for i in 1 2 3; do python3 benchmarks/diagnostics/launch_drift.py --launch $i --out drift.jsonl; done
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmlp.calibrate.host import DISPATCH_BATCH, DISPATCH_SIZES, resident_step  # noqa: E402
from perfmlp.gpu import timing, use_device  # noqa: E402
from perfmlp.model.costs import step_kernels  # noqa: E402
from perfmlp.step import step  # noqa: E402
from perfmlp.strategies.groups import LocalGroup  # noqa: E402
from perfmlp.trace.format import Counts  # noqa: E402
from perfmlp.trace.writer import NullTracer  # noqa: E402


def ops(sizes, b: int) -> int:
    """The eager step's operations as the dispatch calibration counts them:
    its kernels and its collective call."""
    return sum(len(k) for k in step_kernels(sizes, b, None, 4).values()) + 1


def per_op(cp, stream, sizes, b: int, reps: int) -> float:
    net, batches, reducer = resident_step(cp, sizes, b, LocalGroup())
    counts, tr = Counts(), NullTracer()

    def one():
        step(net, batches, reducer, 0, b, tr.phase, counts)
        counts.reset()
    one()
    t = timing.per_call_s(one, reps, start=stream.synchronize)   # the host's time to enqueue them
    stream.synchronize()
    return t / ops(sizes, b)


def trainer_per_op(hidden: int, b: int) -> float:
    cmd = [sys.executable, "-m", "perfmlp.run", "--backend", "cupy", "--data", "synthetic", "--n-train", str(60 * b),
           "--hidden-size", str(hidden), "--batch-size", str(b), "--batch-transfer", "resident", "--comm", "nccl",
           "--exec", "eager", "--epochs", "2", "--no-trace"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    ms = [float(x) for x in re.findall(r"([\d.]+) ms/batch", out)]
    return ms[-1] * 1e-3 / ops((784, hidden, 10), b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--launch", default="1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    stream = use_device(cp, 0)
    rows = []
    for r in range(a.rounds):
        tiny = per_op(cp, stream, DISPATCH_SIZES, DISPATCH_BATCH, a.reps)
        sized = per_op(cp, stream, (784, a.hidden, 10), a.batch, a.reps)
        run = trainer_per_op(a.hidden, a.batch)
        row = {"launch": a.launch, "round": r, "time": time.time(), "tiny_us": tiny * 1e6, "sized_us": sized * 1e6,
               "trainer_us": run * 1e6, "hidden": a.hidden, "batch": a.batch}
        rows.append(row)
        print(f"launch {a.launch} round {r}: per operation, calibration's size {tiny * 1e6:.2f} us, "
              f"H={a.hidden} b={a.batch} {sized * 1e6:.2f} us (factor {sized / tiny:.2f}), "
              f"the trainer's run {run * 1e6:.2f} us (over the sized step {run / sized:.2f})", flush=True)
    with open(a.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
