"""Does a pageable H2D copy overlap the GPU work queued before it?

The CUDA runtime stages a cudaMemcpyAsync from pageable host memory into
pinned buffers of its own; the DMA waits for the stream, the host's
staging need not (CUDA's "API synchronization behavior" notes). If so, the
next batch's pageable copy overlaps the previous batch's kernels up to the
staging buffers' size, and the model's serialised copy + compute is too
slow there. validate7 (2 x H200) showed it: H=512 B=800 p=2 pageable/nccl
graph took 0.218 ms a batch with its pageable copies alone at 0.185 ms of
host time and the replay about 0.1 ms on the GPU.

On one GPU, at each size, median of `reps`:
- `call_behind_spin_us`: the host time of the copy call queued behind a
  5 ms spin kernel (a call that returns well before 5 ms staged the whole
  copy without waiting for the GPU);
- `alone_us`: the copy with the stream idle, host wall time to completion;
- for GPU work of `work_us` (a spin) before each copy, 40 iterations back
  to back, synchronised once: `loop_us` a iteration, against `serial_us`
  = work + copy alone; `hidden` = 1 - (loop - max(work, alone)) /
  min(work, alone), the share of the shorter one hidden (0: serialised,
  1: fully overlapped).

    python3 benchmarks/pageable_overlap.py OUT.json

Writes OUT.json (with the machine's GPU name and date) and prints a table.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
import time
from statistics import median

import numpy as np


def main(out: str) -> int:
    import cupy as cp
    from perfmlp.calibrate import _spin, spin_cycles_per_s
    sizes = [256_000, 1_254_400, 2_508_800, 5_017_600, 10_035_200, 20_070_400]
    works_us = [100, 500, 2000]
    reps, loop = 15, 40
    big = 512 * 1000 * 1000
    h = np.ones(big, dtype=np.uint8)
    d = cp.empty(max(sizes), dtype=cp.uint8)
    s = cp.cuda.get_current_stream()
    spin, _ = _spin(cp)
    cps = spin_cycles_per_s(cp)
    k = [0]

    def copy(n):
        off = (k[0] % (big // n)) * n
        k[0] += 1
        d[:n].set(h[off:off + n], stream=s)

    def work(us):
        spin((1,), (1,), (np.int64(us * 1e-6 * cps),))

    rows = []
    for n in sizes:
        copy(n)
        s.synchronize()
        behind, alone = [], []
        for _ in range(reps):
            work(5000)
            t0 = time.perf_counter()
            copy(n)
            behind.append(time.perf_counter() - t0)
            s.synchronize()
            t0 = time.perf_counter()
            copy(n)
            s.synchronize()
            alone.append(time.perf_counter() - t0)
        row = {"bytes": n, "call_behind_spin_us": median(behind) * 1e6, "alone_us": median(alone) * 1e6}
        for w in works_us:
            ts = []
            for _ in range(5):
                s.synchronize()
                t0 = time.perf_counter()
                for _ in range(loop):
                    work(w)
                    copy(n)
                s.synchronize()
                ts.append((time.perf_counter() - t0) / loop * 1e6)
            lp = median(ts)
            a = row["alone_us"]
            row[f"work{w}"] = {"loop_us": lp, "serial_us": w + a,
                               "hidden": 1 - (lp - max(w, a)) / min(w, a)}
        rows.append(row)
        print(f"{n / 1e6:6.2f} MB: call behind a 5 ms spin {row['call_behind_spin_us']:8.1f} us, alone "
              f"{row['alone_us']:7.1f} us; " + ", ".join(
                  f"work {w} us: loop {row[f'work{w}']['loop_us']:7.1f} us (serial {row[f'work{w}']['serial_us']:7.1f}, "
                  f"hidden {row[f'work{w}']['hidden']:.2f})" for w in works_us), flush=True)
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    with open(out, "w") as f:
        json.dump({"gpu": gpu, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                   "reps": reps, "loop": loop, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 benchmarks/pageable_overlap.py OUT.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
