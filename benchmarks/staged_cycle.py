"""Are the host paths of the staged exchange slower in the step's order than
one at a time? (issue 13: on 2 x H200, validate12, the trainer's pageable
batch copies took 10-17% longer than the calibration's and its host MPI
allreduce 10-22% longer, at p = 1 too for the copies; pageable rows with
NCCL were within 3.4%.)

The calibration times each host path in a loop of its own: a batch piece's
H2D copy after a barrier, again and again; a D2H of the gradient buffer and
its MPI_Allreduce, again and again. The trainer's staged step runs them in
turn: H2D of the piece (x, then y), the GPU's forward and backward, D2H of
the gradients, MPI_Allreduce, H2D of the gradients back, the update kernel;
the driver's staging buffers and the host's caches see every direction in
turn. This times, on every rank under `mpirun -n P`, per (H, b, memory):

- alone: the piece's two copies after a barrier (as calibrate.host_copies,
  with y); the D2H, allreduce and H2D back after a barrier (as
  calibrate.collectives);
- paced: the piece's two copies with a spin kernel of the step's GPU time
  between them and no barrier (the NCCL step's host path);
- cycle: the staged step's order with the GPU work a spin kernel of the
  step's GPU time (compute_us, from the H200's GEMM rate: 2 x 3 x b x
  weights / 40 TFLOP/s) and no barrier.

Each a median over 30 iterations after 5 warm-up ones; the slowest rank's.
Prints a table and writes JSON lines to --out. Microbenchmarks only: no
trainer code runs.

    mpirun -n 2 python3 benchmarks/staged_cycle.py --out $OUT/cycle.jsonl
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

from perfmlp.calibrate import _copy_time, _spin, spin_cycles_per_s  # noqa: E402
from perfmlp.comm import make_world  # noqa: E402
from perfmlp.model.costs import grad_buffer_bytes  # noqa: E402

D, C = 784, 10
WARM, REPS = 5, 30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", default="512,1024,2048")
    ap.add_argument("--local-batch", default="400,1600,3200")
    ap.add_argument("--memory", default="pageable,pinned")
    ap.add_argument("--out", help="JSON lines to append to")
    ap.add_argument("--phases", metavar="TRACES", help="instead: the trainer's phase medians per run under TRACES")
    a = ap.parse_args()
    if a.phases:
        return phases(a.phases)
    import cupy as cp
    import cupyx
    from mpi4py import MPI
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    comm = getattr(world, "comm", None) if world.size > 1 else None
    s = cp.cuda.get_current_stream()
    spin, empty = _spin(cp)
    cps = spin_cycles_per_s(cp)
    ev = [cp.cuda.Event() for _ in range(2)]
    big = 512 * 1000 * 1000
    rows = []

    def barrier():
        if comm is not None:
            comm.Barrier()

    def allreduce(h):
        if comm is not None:
            comm.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)

    for memory in a.memory.split(","):
        pinned = memory == "pinned"
        hx = cupyx.empty_pinned(big // 4, np.float32) if pinned else np.empty(big // 4, np.float32)
        hx[...] = 1.0
        for H in map(int, a.hidden.split(",")):
            gbytes = grad_buffer_bytes((D, H, C), 4)
            dg = cp.ones(gbytes // 4, cp.float32)
            hg = cupyx.empty_pinned(gbytes // 4, np.float32) if pinned else np.empty(gbytes // 4, np.float32)
            for b in map(int, a.local_batch.split(",")):
                xd = cp.empty(D * b, cp.float32)
                yd = cp.empty(C * b, cp.float32)
                slots = big // 4 // ((D + C) * b)
                k = [0]
                compute_s = 2 * 3 * b * (D * H + H * C) / 40e12
                cyc = np.int64(compute_s * cps)

                def piece():   # the next batch piece, x then y, as DeviceBatches.get copies them
                    off = (k[0] % slots) * (D + C) * b
                    k[0] += 1
                    xd.set(hx[off:off + D * b], stream=s)
                    yd.set(hx[off + D * b:off + (D + C) * b], stream=s)

                def timed(fn):
                    """host seconds of fn (pageable: it blocks), or GPU seconds between events (pinned)."""
                    return _copy_time(cp, fn, pinned, *ev)

                res = {"alone": {}, "paced": {}, "cycle": {}}
                # alone: the calibration's way
                t = []
                for i in range(WARM + REPS):
                    barrier()
                    x = timed(piece)
                    if i >= WARM:
                        t.append(x)
                res["alone"]["h2d_batch"] = median(t)
                t2, t3 = [], []
                for i in range(WARM + REPS):
                    dg.get(out=hg, stream=s)
                    s.synchronize()
                    barrier()
                    t0 = time.perf_counter()
                    allreduce(hg)
                    ar = time.perf_counter() - t0
                    back = timed(lambda: dg.set(hg, stream=s))
                    if i >= WARM:
                        t2.append(ar)
                        t3.append(back)
                res["alone"]["allreduce"], res["alone"]["h2d_grad"] = median(t2), median(t3)
                t = []
                for i in range(WARM + REPS):
                    dt0 = time.perf_counter()
                    dg.get(out=hg, stream=s)
                    s.synchronize()
                    if i >= WARM:
                        t.append(time.perf_counter() - dt0)
                res["alone"]["d2h_grad"] = median(t)
                # paced: the piece's copies behind the step's GPU work, no barrier
                barrier()
                t = []
                for i in range(WARM + REPS):
                    spin((1,), (1,), (cyc,))
                    s.synchronize()
                    x = timed(piece)
                    if i >= WARM:
                        t.append(x)
                res["paced"]["h2d_batch"] = median(t)
                # cycle: the staged step's order
                barrier()
                parts = {n: [] for n in ("h2d_batch", "d2h_grad", "allreduce", "h2d_grad", "step")}
                for i in range(WARM + REPS):
                    st = time.perf_counter()
                    x = timed(piece)
                    spin((1,), (1,), (cyc,))
                    t0 = time.perf_counter()
                    dg.get(out=hg, stream=s)
                    s.synchronize()
                    t1_ = time.perf_counter()
                    allreduce(hg)
                    t2_ = time.perf_counter()
                    back = timed(lambda: dg.set(hg, stream=s))
                    empty((1,), (1,), ())
                    if i >= WARM:
                        parts["h2d_batch"].append(x)
                        parts["d2h_grad"].append(t1_ - t0)
                        parts["allreduce"].append(t2_ - t1_)
                        parts["h2d_grad"].append(back)
                        parts["step"].append(time.perf_counter() - st)
                s.synchronize()
                res["cycle"] = {n: median(v) for n, v in parts.items()}
                mine = {f"{m}.{n}": v for m, d in res.items() for n, v in d.items()}
                got = world.allgather(mine)
                slow = {key: max(g[key] for g in got) for key in mine}
                row = {"procs": world.size, "memory": memory, "H": H, "b": b, "piece_bytes": 4 * (D + C) * b,
                       "grad_bytes": gbytes, "compute_us": compute_s * 1e6,
                       **{key: v * 1e6 for key, v in slow.items()}}
                rows.append(row)
                if world.rank == 0:
                    print(f"p={world.size} {memory:8s} H={H:5d} b={b:5d} (us, slowest rank): "
                          f"h2d piece alone {row['alone.h2d_batch']:7.1f} paced {row['paced.h2d_batch']:7.1f} "
                          f"cycle {row['cycle.h2d_batch']:7.1f} | allreduce alone {row['alone.allreduce']:7.1f} "
                          f"cycle {row['cycle.allreduce']:7.1f} | d2h alone {row['alone.d2h_grad']:6.1f} "
                          f"cycle {row['cycle.d2h_grad']:6.1f} | h2d_grad alone {row['alone.h2d_grad']:6.1f} "
                          f"cycle {row['cycle.h2d_grad']:6.1f} | cycle step {row['cycle.step']:7.1f}", flush=True)
    if world.rank == 0:
        with open(a.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


def phases(folder: str) -> None:
    """Each run's steady phases (median over batches, the slowest rank's) in us,
    as the trainer's host clock timed them."""
    from perfmlp.trace.reader import read_traces
    runs, _ = read_traces(folder)
    for r in sorted(runs, key=lambda r: r.run_id):
        ph: dict = {}
        for rank in r.ranks:
            for k, v in r.phase_ms(rank).items():
                ph[k] = max(ph.get(k, 0.0), v)
        print(f"{r.run_id}: batch {r.median_batch_ms() * 1e3:.1f} us; "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in ph.items()))


if __name__ == "__main__":
    main()
