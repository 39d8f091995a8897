"""`python -m perfmlp.calibrate --out models/NAME.yaml`: measure the machine
it runs on and write a machine file (an empirical roofline).

Measured on this rank's GPU: the large-GEMM rate (the file's peak), the rates
of the trainer's own GEMMs at its shapes (H in --hidden, per-rank batch in
--local-batch), device memory bandwidth (a large device-to-device copy,
bytes read + written), pageable and pinned H2D/D2H bandwidth (10 MB) and
latency (4 bytes), and the host time per launched operation of the trainer's
step (a tiny step whose GPU work is negligible). Under `mpirun -n P` (P >= 2)
also host MPI_Allreduce and NCCL allreduce over groups of 2 and P ranks,
fitted to the ring model t = 2(p-1) alpha + 2(p-1)/p n / bw (MPI) and
t = alpha + 2(p-1)/p n / bw (NCCL). What is not measured (MPI and NCCL on
one process) is taken from --base and the source line says so.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

from .config import Config
from .model.costs import grad_buffer_bytes, itemsize
from .model.machine import load_machine, machine_from_mapping, machine_to_yaml


def _gemm_rate(cp, a, b, out, reps=20):
    from .gpu.timing import time_ms
    t = median(time_ms(cp, lambda: cp.matmul(a, b, out=out), warmup=3, reps=reps)) * 1e-3
    m, k = a.shape
    return 2 * m * b.shape[1] * k / t


def single_gpu(cp, hidden, local_batches, precisions, log):
    from .gpu.network import GpuNetwork
    from .gpu.timing import time_ms
    from .mlp import init_weights
    D, C = Config.input_size, Config.num_classes
    res = {}
    # large GEMM: the empirical compute roof
    for prec, n in (("float32", 8192), ("float64", 4096)):
        if prec not in precisions:
            continue
        a = cp.random.random((n, n), dtype=prec)
        b = cp.random.random((n, n), dtype=prec)
        c = cp.empty((n, n), dtype=prec)
        res[f"peak_flops_per_s_{prec}"] = _gemm_rate(cp, a, b, c, reps=10)
        log(f"large GEMM {n}^3 {prec}: {res[f'peak_flops_per_s_{prec}'] / 1e12:.2f} TFLOP/s")
    # the trainer's GEMMs, with its layouts
    rates = []
    for prec in precisions:
        for H in hidden:
            for bl in local_batches:
                sizes = (D, H, C)
                net = GpuNetwork(cp, sizes, prec, 0.1, 0.0, bl, bl, "cublas")
                net.set_params(init_weights(sizes, 0))
                x = cp.random.random((bl, D), dtype=prec)
                y = cp.zeros((bl, C), dtype=prec)
                y[cp.arange(bl), cp.arange(bl) % C] = 1
                net.capture = []
                net.forward(x.T); net.loss(y.T); net.backward()
                for a, b, out in net.capture:
                    r = _gemm_rate(cp, a, b, out)
                    rates.append({"m": int(a.shape[0]), "n": int(b.shape[1]), "k": int(a.shape[1]),
                                  "precision": prec, "flops_per_s": float(r)})
                net.capture = None
    res["gemm_flops_per_s"] = rates
    log(f"{len(rates)} trainer GEMM shapes timed")
    # device memory bandwidth: a 1 GiB device-to-device copy, bytes read + written
    src = cp.empty(1 << 30, dtype=cp.uint8)
    dst = cp.empty_like(src)
    t = median(time_ms(cp, lambda: dst.__setitem__(slice(None), src), warmup=2, reps=10)) * 1e-3
    res["mem_bw_bytes_per_s"] = 2 * src.nbytes / t
    del src, dst
    log(f"device copy: {res['mem_bw_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
    # host <-> device copies at the trainer's two sizes (the fp32 gradient
    # buffer of the first hidden size, the X of the largest piece), at rotating
    # offsets of a 256 MB host array as the trainer copies a new slice every
    # batch; t = latency + bytes / bandwidth
    import cupyx
    fp32 = itemsize("float32")
    sizes = (grad_buffer_bytes((D, hidden[0], C), fp32), fp32 * max(local_batches) * D)
    big = 256 * 1000 * 1000
    d = cp.empty(max(sizes), dtype=cp.uint8)
    hp = np.ones(big, dtype=np.uint8)
    hpin = cupyx.empty_pinned(big, dtype=np.uint8)
    hpin[...] = 1
    s = cp.cuda.get_current_stream()
    for direction in ("h2d", "d2h"):
        for mem, h in (("pageable", hp), ("pinned", hpin)):
            ts = []
            for n in sizes:
                k = [0]

                def fn(h=h, n=n, direction=direction):
                    off = (k[0] % (big // n)) * n
                    k[0] += 1
                    if direction == "h2d":
                        d[:n].set(h[off:off + n], stream=s)
                    else:
                        d[:n].get(out=h[off:off + n], stream=s)
                ts.append(median(_host_times(cp, fn, reps=25)))
            bw = (sizes[1] - sizes[0]) / max(ts[1] - ts[0], 1e-9)
            lat = max(ts[0] - sizes[0] / bw, 0.0)
            res[f"{direction}_{mem}_bytes_per_s"] = bw
            res[f"{direction}_{mem}_latency_s"] = lat
            log(f"{direction} {mem}: {sizes[0]} B {ts[0] * 1e6:.1f} us, {sizes[1]} B {ts[1] * 1e6:.1f} us "
                f"-> {bw / 1e9:.1f} GB/s + {lat * 1e6:.1f} us")
    # GPU time a CUDA event adds between kernels: a chain of GPU-bound copies
    # (the host stays ahead) with and without an event recorded after each
    src = cp.empty(64 << 20, dtype=cp.uint8)
    dst = cp.empty_like(src)
    evs = [cp.cuda.Event() for _ in range(100)]

    def chain(with_events):
        for e in evs:
            cp.copyto(dst, src)
            if with_events:
                cp.cuda.runtime.eventRecord(e.ptr, s.ptr)
    t_plain = median(time_ms(cp, lambda: chain(False), warmup=2, reps=15))
    t_events = median(time_ms(cp, lambda: chain(True), warmup=2, reps=15))
    res["trace_event_s"] = max((t_events - t_plain) * 1e-3 / len(evs), 0.0)
    log(f"a CUDA event between GPU-bound kernels: {res['trace_event_s'] * 1e6:.2f} us of GPU time")
    del src, dst
    d4, h4 = cp.empty(1, dtype=cp.float32), np.ones(1, dtype=np.float32)
    res["copy_latency_s"] = median(_host_times(cp, lambda: d4.set(h4), reps=200))
    log(f"4-byte H2D: {res['copy_latency_s'] * 1e6:.1f} us")
    # host time per launched operation of the trainer's step, at a size where
    # the GPU work is negligible: untraced, and with the tracer's hooks (the
    # sweeps' runs are traced)
    import tempfile
    from types import SimpleNamespace
    from .comm import SingleWorld
    from .trace.format import Counts
    from .trace.writer import NullTracer, make_tracer
    sizes, bl = (16, 16, 10), 16
    net = GpuNetwork(cp, sizes, "float32", 0.1, 0.0, bl, bl, "cublas")
    net.set_params(init_weights(sizes, 0))
    x = cp.random.random((bl, 16), dtype=cp.float32)
    y = cp.zeros((bl, 10), dtype=cp.float32)
    y[cp.arange(bl), cp.arange(bl) % 10] = 1
    net.ops = []
    net.forward(x.T); net.loss(y.T); net.backward(); net.update()
    n_ops = len(net.ops)
    world = SingleWorld()
    tracer = make_tracer(Config(precision="float32", trace_dir=tempfile.mkdtemp(), run_id="calibrate"), world)
    tracer.attach(world, SimpleNamespace(name="cupy", xp=cp, reducer=None))
    counts = Counts()
    for key, tr in (("launch_overhead_s", NullTracer()), ("traced_launch_overhead_s", tracer)):
        net.ops = tr.ops

        def tiny_step(tr=tr):
            tr.begin_batch(0, 0, bl, bl)
            for name, fn in (("h2d", lambda: None), ("forward", lambda: net.forward(x.T)),
                             ("loss", lambda: net.loss(y.T)), ("backward", net.backward), ("update", net.update)):
                with tr.phase(name):
                    fn()
            tr.end_batch(None, counts)
        for _ in range(20):
            tiny_step()
        s.synchronize()
        t0 = time.perf_counter()
        reps = 500
        for _ in range(reps):
            tiny_step()
        s.synchronize()
        res[key] = (time.perf_counter() - t0) / reps / n_ops
        log(f"host time per launched operation ({key}): {res[key] * 1e6:.2f} us ({n_ops} per step)")
    tracer.close("complete")
    return res


def _host_times(cp, fn, reps):
    s = cp.cuda.get_current_stream()
    for _ in range(3):
        fn()
    s.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        s.synchronize()
        out.append(time.perf_counter() - t0)
    return out


SIZES_BYTES = [2 ** k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB


def collectives(cp, world, log):
    """Host MPI_Allreduce and NCCL allreduce on groups of 2 and P ranks; the
    ring-model fit over all points. Returns {} on one process."""
    from mpi4py import MPI
    from cupy.cuda import nccl
    P = world.size
    if P < 2:
        return {}
    groups = sorted({2, P})
    pts_mpi, pts_nccl = [], []
    for g in groups:
        color = 0 if world.rank < g else MPI.UNDEFINED
        sub = world.comm.Split(color, world.rank)
        if sub == MPI.COMM_NULL:
            world.comm.Barrier()
            continue
        uid = nccl.get_unique_id() if sub.Get_rank() == 0 else None
        uid = sub.bcast(uid)
        nc = nccl.NcclCommunicator(g, uid, sub.Get_rank())
        s = cp.cuda.get_current_stream()
        for nbytes in SIZES_BYTES:
            n = nbytes // 4
            hb = np.ones(n, np.float32)
            db = cp.ones(n, cp.float32)
            tm, tn = [], []
            for i in range(25):
                sub.Barrier()
                t0 = time.perf_counter()
                sub.Allreduce(MPI.IN_PLACE, hb, op=MPI.SUM)
                t1 = time.perf_counter()
                sub.Barrier()
                t2 = time.perf_counter()
                nc.allReduce(db.data.ptr, db.data.ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
                s.synchronize()
                t3 = time.perf_counter()
                if i >= 5:
                    tm.append(t1 - t0)
                    tn.append(t3 - t2)
            tm = max(sub.allgather(float(np.median(tm))))
            tn = max(sub.allgather(float(np.median(tn))))
            pts_mpi.append((g, nbytes, tm))
            pts_nccl.append((g, nbytes, tn))
        sub.Free()
        world.comm.Barrier()
    res = {}
    if world.rank == 0:
        for name, pts, alpha_steps in (("mpi", pts_mpi, True), ("nccl", pts_nccl, False)):
            A = np.array([[2 * (p - 1) if alpha_steps else 1.0, 2 * (p - 1) / p * n] for p, n, _ in pts])
            t = np.array([x for _, _, x in pts])
            # weighted least squares (relative error): each row divided by its time
            coef, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
            alpha, inv_bw = float(max(coef[0], 0.0)), float(coef[1])
            res[f"{name}_alpha_s"] = alpha
            res[f"{name}_bw_bytes_per_s"] = 1.0 / inv_bw if inv_bw > 0 else float("inf")
            for p, n, x in pts:
                log(f"{name} allreduce p={p} {n} B: {x * 1e6:.1f} us")
            log(f"{name} fit: alpha {alpha * 1e6:.2f} us, bw {res[f'{name}_bw_bytes_per_s'] / 1e9:.2f} GB/s")
        res["points"] = {"mpi": pts_mpi, "nccl": pts_nccl}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="machine file to write (YAML)")
    ap.add_argument("--base", default="h200", help="datasheet machine file for what is not measured")
    ap.add_argument("--name", default=None, help="machine name (default: the GPU's name, calibrated)")
    ap.add_argument("--hidden", default="512,1024,2048")
    ap.add_argument("--local-batch", default="800,1600,3200")
    ap.add_argument("--precisions", default="float32,float64")
    a = ap.parse_args(argv)
    from .comm import make_world
    from .gpu import require_cupy
    from .errors import PerfmlpError
    try:
        cp = require_cupy()
        base = load_machine(a.base)
    except (PerfmlpError, ValueError) as e:
        print(f"perfmlp.calibrate: error: {e}", file=sys.stderr)
        return 2
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    log = (lambda m: print(m, flush=True)) if world.rank == 0 else (lambda m: None)
    gpu_name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    res = {}
    if world.rank == 0:
        res = single_gpu(cp, [int(h) for h in a.hidden.split(",")], [int(b) for b in a.local_batch.split(",")],
                         a.precisions.split(","), log)
    world.barrier()
    coll = collectives(cp, world, log)
    if world.rank != 0:
        return 0
    points = coll.pop("points", None)
    res.update(coll)
    date = dt.date.today().isoformat()
    measured = sorted(k for k in res if k != "gemm_flops_per_s")
    values = {"name": a.name or f"{gpu_name} (calibrated)",
              "source": (f"measured by perfmlp.calibrate on {gpu_name} x {world.size}, {date}: "
                         f"{', '.join(measured)}, gemm_flops_per_s; the rest from {Path(base.path).name} ({base.name}); "
                         f"peak_flops_per_s_* is the large-GEMM rate, not the datasheet peak"),
              "date": date, "gpus": world.size if coll else max(world.size, base.gpus)}
    for k in ("peak_flops_per_s_float32", "peak_flops_per_s_float64", "mem_bw_bytes_per_s",
              "h2d_pageable_bytes_per_s", "h2d_pinned_bytes_per_s", "d2h_pageable_bytes_per_s",
              "d2h_pinned_bytes_per_s", "copy_latency_s", "launch_overhead_s", "mpi_alpha_s",
              "mpi_bw_bytes_per_s", "nccl_alpha_s", "nccl_bw_bytes_per_s"):
        values[k] = float(res.get(k, getattr(base, k)))
    values["gemm_flops_per_s"] = res.get("gemm_flops_per_s", [])
    for k in ("traced_launch_overhead_s", "trace_event_s", "h2d_pageable_latency_s", "h2d_pinned_latency_s",
              "d2h_pageable_latency_s", "d2h_pinned_latency_s"):
        if k in res:
            values[k] = float(res[k])
    machine_from_mapping(values, a.out)  # the file we write must load
    text = "# Written by python -m perfmlp.calibrate; do not edit by hand.\n" + machine_to_yaml(values)
    if points:
        text += "# allreduce points (procs, bytes, seconds): " + repr(points) + "\n"
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
