"""Does the host's time per launched operation of the eager step depend on
the step's sizes, or on whether the GPU is idle or busy when it launches?
(issue 13: calibrate.host_dispatch times the trainer's eager step at a
tiny size, (16, 16, 10) with pieces of 16; on one H100, h100/validate6,
the trainer's eager H=1024 B=800 pageable/NCCL runs spent 185-191 us of
host time in their forward phase, 3-4 launches, where the calibration's
15.97 us a launch gives about 60; the same forward at B=6400 with
resident data, the GPU busy, took 67-93.)

One process, the trainer's eager step (perfmlp/step.py, resident pieces,
the NCCL reducer over one rank, untraced) at each size: host seconds per
launched operation (the model's count: the step's kernels and its
collective call), the GPU idle at each step's start (synchronised before,
the step's own launches timed; with --pollute after a pageable copy, as
the trainer's eager pageable step launches right after its batch copy) and busy (30 steps enqueued back to back,
the host's time to enqueue them), median of 5 rounds. Prints a table and
appends JSON lines to --out.

    python3 benchmarks/launch_sizes.py --out $OUT/launch_sizes.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.model.costs import step_kernels  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16x16,512x800,1024x800,1024x6400,2048x3200",
                    help="HxB pairs (784-H-10, pieces of B; 16x16 is the calibration's 16-16-10)")
    ap.add_argument("--pollute", type=int, default=0, metavar="BYTES",
                    help="before each idle-GPU step (untimed), a pageable H2D copy of BYTES from rotating slices "
                         "of a 256 MB host array, as the trainer's pageable batch copy before its launches "
                         "(default: none)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cupy as cp
    from perfmlp.calibrate import resident_step
    from perfmlp.gpu import use_device
    from perfmlp.partition import LocalGroup
    from perfmlp.step import step
    from perfmlp.trace.format import Counts
    from perfmlp.trace.writer import NullTracer
    stream = use_device(cp, 0)
    group = LocalGroup()
    big = 256 * 1000 * 1000
    if a.pollute:
        src, dst, k = np.ones(big, np.uint8), cp.empty(a.pollute, cp.uint8), [0]

    def pollute():
        if a.pollute:
            off = (k[0] % (big // a.pollute)) * a.pollute
            k[0] += 1
            dst.set(src[off:off + a.pollute], stream=stream)
            stream.synchronize()
    rows = []
    for pair in a.sizes.split(","):
        H, B = (int(v) for v in pair.split("x"))
        sizes = (16, 16, 10) if (H, B) == (16, 16) else (784, H, 10)
        net, batches, reducer = resident_step(cp, sizes, B, group, pieces=2)
        tr, counts = NullTracer(), Counts()
        net.ops = tr.ops
        ops = sum(len(k) for k in step_kernels(sizes, B, None, 4).values()) + 1
        idle, busy, gpu = [], [], []
        for rnd in range(6):
            t = []
            for _ in range(30):
                pollute()
                stream.synchronize()
                t0 = time.perf_counter()
                step(net, batches, reducer, 0, B, tr.phase, counts)
                t.append(time.perf_counter() - t0)
                counts.reset()
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(30):
                step(net, batches, reducer, 0, B, tr.phase, counts)
                counts.reset()
            t1 = time.perf_counter()
            stream.synchronize()
            t2 = time.perf_counter()
            if rnd:
                idle.append(median(t) / ops)
                busy.append((t1 - t0) / 30 / ops)
                gpu.append((t2 - t0) / 30)
        row = {"H": H, "B": B, "ops": ops, "pollute_bytes": a.pollute, "idle_us": median(idle) * 1e6,
               "busy_us": median(busy) * 1e6, "step_wall_us": median(gpu) * 1e6}
        rows.append(row)
        after = f" (a {a.pollute} B pageable copy before each idle step)" if a.pollute else ""
        print(f"H={H} B={B}{after}: host per operation, GPU idle {row['idle_us']:.2f} us, "
              f"GPU busy {row['busy_us']:.2f} us ({ops} a step); step wall time back to back "
              f"{row['step_wall_us']:.1f} us", flush=True)
    with open(a.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
