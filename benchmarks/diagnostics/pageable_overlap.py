"""Does a pageable H2D copy overlap the GPU work queued before it?

The CUDA runtime stages a cudaMemcpyAsync from pageable host memory into
pinned buffers of its own; the DMA waits for the stream, the host's
staging need not (CUDA's "API synchronization behavior" notes). If so, the
next batch's pageable copy overlaps the previous batch's kernels up to the
staging buffers' size, and the model's serialised copy + compute is too
slow there. On 2 x H200, H=512 B=800 p=2 pageable/nccl graph took 0.218
ms a batch with its pageable copies alone at 0.185 ms of host time and the
replay about 0.1 ms on the GPU. What this measured became the model's rule
for a pageable copy behind a busy stream (docs/model.md), which the
calibration measures on every machine (perfmlp.calibrate.pageable_ahead).

On one GPU, at each size, median of `reps`:
- `call_behind_spin_us`: the host time of the copy call queued behind a
  5 ms spin kernel (a call that returns well before 5 ms staged the whole
  copy without waiting for the GPU);
- `alone_us`: the copy with the stream idle, host wall time to completion;
- for GPU work of `work_us` (a spin) before each copy, 40 iterations back
  to back, synchronised once: `loop_us` a iteration, against `serial_us`
  = work + copy alone; `hidden` = 1 - (loop - max(work, alone)) /
  min(work, alone), the share of the shorter one hidden (0: serialised,
  1: fully overlapped), and `hidden_us` = serial - loop, the time hidden;
- at 5.02 MB (the trainer's X piece at B = 3200, p = 2) the same loop with
  the host busy for `gap_us` between queuing the work and calling the copy,
  as the trainer's host is between a graph launch and the next batch's copy.

Under mpirun with several ranks (one GPU each) every rank runs the same
measurements at once (a barrier before each), as the trainer's ranks copy
at once; a figure is the slowest rank's.

    python3 benchmarks/diagnostics/pageable_overlap.py OUT.json
    mpirun -n 2 python3 benchmarks/diagnostics/pageable_overlap.py OUT.json

Writes OUT.json (with the machine's GPU name, rank count and date) and
prints a table.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmlp.calibrate.copies import rotating_offsets  # noqa: E402
from perfmlp.gpu.timing import per_call_s, spin_cycles_per_s, spin_kernels, wall_s  # noqa: E402


def main(out: str) -> int:
    import cupy as cp
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    sizes = [256_000, 1_254_400, 2_508_800, 5_017_600, 10_035_200, 20_070_400]
    works_us = [50, 100, 200, 300, 400, 600, 1000, 2000]
    gap_bytes, gaps_us = 5_017_600, [50, 100, 200]
    reps, loop = 15, 40
    big = 512 * 1000 * 1000
    h = np.ones(big, dtype=np.uint8)
    d = cp.empty(max(sizes), dtype=cp.uint8)
    s = cp.cuda.get_current_stream()
    spin, _ = spin_kernels(cp)
    cps = spin_cycles_per_s(cp)
    offsets = {n: rotating_offsets(big, n) for n in sizes}

    def copy(n):
        off = offsets[n]()
        d[:n].set(h[off:off + n], stream=s)

    def work(us):
        spin((1,), (1,), (np.int64(us * 1e-6 * cps),))

    def slowest(x):
        return max(world.allgather(x))

    def busy(us):  # the host busy for `us` without releasing the GIL's thread (as the trainer's host code)
        t = time.perf_counter() + us * 1e-6
        while time.perf_counter() < t:
            pass

    def loop_us(n, w, gap=0):
        def one():
            work(w)
            if gap:
                busy(gap)
            copy(n)
        ts = [per_call_s(one, loop, start=lambda: (s.synchronize(), world.barrier()), end=s.synchronize) * 1e6
              for _ in range(5)]
        return slowest(median(ts))

    rows = []
    for n in sizes:
        copy(n)
        s.synchronize()
        behind, alone = [], []
        for _ in range(reps):
            world.barrier()
            work(5000)
            behind.append(wall_s(lambda: copy(n)))
            s.synchronize()
            world.barrier()
            alone.append(wall_s(lambda: (copy(n), s.synchronize())))
        row = {"bytes": n, "call_behind_spin_us": slowest(median(behind) * 1e6),
               "alone_us": slowest(median(alone) * 1e6)}
        a = row["alone_us"]
        for gap in [0] + (gaps_us if n == gap_bytes else []):
            for w in works_us:
                lp = loop_us(n, w, gap)
                key = f"work{w}" + (f"_gap{gap}" if gap else "")
                # the host's gap runs while the GPU works: serial is work + copy either way
                row[key] = {"loop_us": lp, "serial_us": w + a, "hidden_us": w + a - lp,
                            "hidden": 1 - (lp - max(w, a)) / min(w, a)}
            if world.rank == 0:
                print(f"{n / 1e6:6.2f} MB{f', host gap {gap} us' if gap else ''}: call behind a 5 ms spin "
                      f"{row['call_behind_spin_us']:7.1f} us, alone {a:7.1f} us; hidden (us) behind work of "
                      + ", ".join(f"{w}: {row[f'work{w}' + (f'_gap{gap}' if gap else '')]['hidden_us']:.0f}"
                                  for w in works_us), flush=True)
        rows.append(row)
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    if world.rank == 0:
        with open(out, "w") as f:
            json.dump({"gpu": gpu, "ranks": world.size,
                       "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       "reps": reps, "loop": loop, "works_us": works_us, "gaps_us": gaps_us, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 benchmarks/diagnostics/pageable_overlap.py OUT.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
