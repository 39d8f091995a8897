"""`python -m perfmlp.calibrate --out models/NAME.yaml`: measure the machine
it runs on with microbenchmarks (never the trainer's loop) and write a
machine file (an empirical roofline).

Measured on this rank's GPU:
- GEMMs as GPU time: the large-GEMM rate (the file's peak), and the rates of
  the trainer's own GEMMs at its shapes and layouts (H in --hidden, per-rank
  batch in --local-batch) for cuBLAS and, with --gemm-kernels, the
  reference's kernels. Each is timed over back-to-back calls queued behind
  a spin kernel, so the host's dispatch is not in the GPU time; the host's
  dispatch is the separate launch_overhead_s.
- the step's own kernels (kernels.cu: bias_sigmoid, output_backward, ...)
  as GPU time the same way, each relaunched as one eager step at those
  shapes launched it, with the fused output backward and without it
  (kernel_s);
- kernel_gap_s (an empty kernel queued ahead, per kernel), graph_kernel_gap_s
  (the same in a replayed CUDA graph), graph_replay_gap_s (the GPU's time
  per replay beyond its kernels, graphs replayed back to back) and
  graph_launch_s (host time of one graph launch);
- a CUDA event's GPU time between kernels (trace_event_s);
- device memory bandwidth (a large device-to-device copy, read + write),
  and the device-to-device copies of a graph step's batch pieces into its
  static inputs at each piece size (d2d_copy_s, GPU time queued back to
  back: their fixed cost, which the bandwidth leaves out, dominates below
  a few MB);
  pageable and pinned H2D/D2H bandwidth and latency at the trainer's sizes
  (pageable: host wall time, the copy blocks the host; pinned: GPU time,
  calls queued ahead, as the trainer's pinned copies run behind its kernels);
- the copies the trainer makes, each at its own size (host_copy_s): the
  batch pieces H2D and the gradient buffers both ways, pageable and pinned,
  by rank 0 alone and, under `mpirun -n P`, by groups of 2 and of P ranks
  copying at once (host memory and PCIe shared; the slowest rank's time),
  and the staged exchange's copy back from the host buffer MPI has just
  reduced (a pageable copy then reads the host's caches), and each pageable
  H2D copy queued behind a busy stream (pageable_ahead: how much the host
  stages before it needs the stream, whether the call waits, and for one
  that waits how much of the work queued before it it does not hide:
  ahead_delay_s); the aggregate
  bandwidth of each group at the largest size (copy_aggregate_bytes_per_s)
  for sizes beyond them;
- under `mpirun -n P` (P >= 2): host
  MPI_Allreduce (host wall time, the host buffer freshly written by a D2H
  copy as the trainer's is) and NCCL allreduce (GPU time, calls queued
  ahead: what a replayed graph or a host running ahead sees; the host's
  call is the launch term) over groups of 2 and P ranks at the trainer's
  gradient sizes and a size ladder (a table, and the ring-model fit), and
  the wait for the slowest rank at a collective when every rank does the
  same work (collective_wait_s); host MPI through pinned and through
  pageable host buffers (the staged scheme's two kinds); and the staged
  exchange's own wait for the slowest rank (staged_wait: its step in the
  trainer's order on 2 and P ranks against one rank, beyond its parts
  each timed alone, through each host memory; collective_wait_s points
  with `memory`);
- on every rank (host_dispatch), first and last (the mean of the two: the
  host's speed changes between launches and over minutes): the host's time per operation of the
  trainer's eager step (perfmlp/step.py with resident data and the NCCL
  reducer, the train loop's tracer calls around it) at a size where the GPU
  work is negligible, untraced and with the tracer at its counters level:
  one rank alone (launch_overhead_s, trace_phase_host_s), then groups of 2
  and P ranks launching at once, the slowest rank's (host_dispatch_s); and
  the host's time per batch of the same step as a CUDA graph, one rank
  (graph_step_host_s: the replay's launch, the copies into its static
  inputs and the loop's own work between batches); and the eager step's
  host time per operation at each of the trainer's sizes over its time at
  the tiny one, in the same rounds (launch_size_factor).
What is not measured is taken from --base and the source line says so.
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
from .model.costs import grad_buffer_bytes, itemsize, kernel_name, kernel_shape, step_kernels
from .model.machine import load_machine, machine_from_mapping, machine_to_yaml


SPIN_SRC = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void empty() { }
"""
_spin_mod = {}


def _spin(cp):
    """(spin(cycles), empty()) RawKernels of this device."""
    key = cp.cuda.Device().id
    if key not in _spin_mod:
        mod = cp.RawModule(code=SPIN_SRC)
        _spin_mod[key] = (mod.get_function("spin"), mod.get_function("empty"))
    return _spin_mod[key]


_cycles_per_s: dict = {}


def spin_cycles_per_s(cp) -> float:
    """clock64() cycles per second of this device, from a timed spin (the
    device properties' clock rate is gone from CUDA 13's)."""
    key = cp.cuda.Device().id
    if key not in _cycles_per_s:
        spin, _ = _spin(cp)
        n = np.int64(20_000_000)
        spin((1,), (1,), (np.int64(1000),))
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        spin((1,), (1,), (n,))
        b.record()
        b.synchronize()
        _cycles_per_s[key] = float(n) / (cp.cuda.get_elapsed_time(a, b) * 1e-3)
    return _cycles_per_s[key]


def queued_ahead(cp, fn, calls: int, spin_s: float = 0.02, reps: int = 5) -> tuple[float, float]:
    """(GPU seconds per call, host seconds per call) of `calls` back-to-back
    fn() queued behind a spin kernel: the host enqueues them all while the
    GPU spins, so the events around them time the GPU alone (median of reps).
    The spin is sized from the device clock; a host slower than the spin
    would show as a GPU time that grows with it, so the host time is
    returned to be checked against spin_s."""
    spin, _ = _spin(cp)
    cycles = np.int64(spin_s * spin_cycles_per_s(cp))
    s = cp.cuda.get_current_stream()
    fn()
    s.synchronize()
    gpu, host = [], []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        spin((1,), (1,), (cycles,))
        a.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t0) / calls)
        b.record()
        b.synchronize()
        gpu.append(cp.cuda.get_elapsed_time(a, b) * 1e-3 / calls)
    h = median(host)
    if h * calls > 0.8 * spin_s:
        raise RuntimeError(f"the host took {h * calls * 1e3:.1f} ms to queue {calls} calls, longer than the "
                           f"{spin_s * 1e3:.0f} ms spin: the GPU time would include host time")
    return median(gpu), h


def _gemm_rate(cp, call, m, n, k, calls=50):
    t, _ = queued_ahead(cp, call, calls)
    return 2 * m * n * k / t


def step_network(cp, sizes, precision, b):
    """A GpuNetwork of `sizes` (cuBLAS) for pieces of b samples, with a
    random piece x (b x D) and one-hot labels y (b x C)."""
    from .gpu.network import GpuNetwork
    from .mlp import init_weights
    net = GpuNetwork(cp, sizes, precision, 0.1, 0.0, b, b, "cublas")
    net.set_params(init_weights(sizes, 0))
    x = cp.random.random((b, sizes[0]), dtype=precision)
    y = cp.zeros((b, sizes[-1]), dtype=precision)
    y[cp.arange(b), cp.arange(b) % sizes[-1]] = 1
    return net, x, y


def resident_step(cp, sizes, b, group, pieces: int = 1):
    """The trainer's eager step at `sizes` on pieces of b samples, as the
    host-time microbenchmarks run it: (the network of step_network, `pieces`
    resident pieces of random samples with one-hot labels, the NCCL reducer
    over `group`)."""
    from .batches import DeviceBatches
    from .comm import NcclReducer
    net, _, _ = step_network(cp, sizes, "float32", b)
    rng = np.random.default_rng(0)
    x = rng.random((pieces * b, sizes[0]), dtype=np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], pieces * b)]
    return net, DeviceBatches(cp, x, y, "resident", b), NcclReducer(cp, group, net)


def own_kernel_times(cp, net, x, y, calls: int = 100) -> list[dict]:
    """The GPU time of each of the step's own kernels (not the GEMMs) as one
    eager step of `net` on x, y launches them: recorded (net.capture_kernels)
    with the fused output backward where the network has it and without it,
    each distinct (kernel, shape) relaunched `calls` times queued ahead. The
    launches must be the model's step (costs.step_kernels), whose shapes key
    the entries: [{kernel, shape, precision, s}]. Relaunching a kernel that
    writes its inputs (bias_sigmoid's z, sgd_update's parameters) changes
    values, not work: no kernel's work depends on its data."""
    sizes, b = net.p.layer_sizes, x.shape[0]
    fused, times = net.fuse_output, {}
    try:
        for fuse in dict.fromkeys((fused, False)):
            net.fuse_output, net.capture_kernels = fuse, []
            net.forward(x.T); net.loss(y.T); net.backward(); net.update()
            launched = net.capture_kernels
            net.capture_kernels = None
            model = [k for ks in step_kernels(sizes, b, fuse_output=fuse).values() for k in ks
                     if kernel_name(k) != "gemm"]
            if [name for name, _ in launched] != [kernel_name(k) for k in model]:
                raise RuntimeError(f"the step launched {[name for name, _ in launched]}, the model lists "
                                   f"{[kernel_name(k) for k in model]}")
            with net.stream:  # the spin, the events and the relaunches on one stream
                for (name, relaunch), k in zip(launched, model):
                    if (name, kernel_shape(k)) not in times:
                        times[name, kernel_shape(k)] = queued_ahead(cp, relaunch, calls)[0]
    finally:
        net.fuse_output, net.capture_kernels = fused, None
    return [{"kernel": name, "shape": list(shape), "precision": net.dtype.name, "s": float(t)}
            for (name, shape), t in times.items()]


def single_gpu(cp, hidden, local_batches, precisions, log, gemm_kernels=()):
    from .gpu.gemm import cublas_gemm, gemm
    from .gpu.timing import time_ms
    D, C = Config.input_size, Config.num_classes
    res = {}
    # large GEMM: the empirical compute roof
    for prec, n in (("float32", 8192), ("float64", 4096)):
        if prec not in precisions:
            continue
        a = cp.random.random((n, n), dtype=prec)
        b = cp.random.random((n, n), dtype=prec)
        c = cp.empty((n, n), dtype=prec)
        g = cublas_gemm(cp, prec)
        res[f"peak_flops_per_s_{prec}"] = _gemm_rate(cp, lambda: g(a, b, c), n, n, n, calls=3)
        log(f"large GEMM {n}^3 {prec}: {res[f'peak_flops_per_s_{prec}'] / 1e12:.2f} TFLOP/s")
    # the trainer's GEMMs, with its layouts, and the step's own kernels at the same shapes, as GPU
    # time: one network per (precision, H, b), whose step's GEMM calls are recorded once and timed
    # with each GEMM kernel (a shape met again, as sgd_update's at every b, keeps its first time)
    rates, own = [], {}
    for prec in precisions:
        kinds = ("cublas", *(gemm_kernels if prec == "float32" else ()))
        for H in hidden:
            for bl in local_batches:
                net, x, y = step_network(cp, (D, H, C), prec, bl)
                net.capture = []
                net.forward(x.T); net.loss(y.T); net.backward()
                captured, net.capture = net.capture, None
                for kind in kinds:
                    for a, b, out in captured:
                        m_, k_, n_ = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
                        call = (lambda a=a, b=b, out=out, g=cublas_gemm(cp, prec): g(a, b, out)) if kind == "cublas" \
                            else (lambda a=a, b=b, out=out, kind=kind: gemm(cp, kind, a, b, out=out))
                        r = _gemm_rate(cp, call, m_, n_, k_, calls=50 if kind == "cublas" else 10)
                        rates.append({"m": m_, "n": n_, "k": k_, "precision": prec, "flops_per_s": float(r),
                                      **({"kernel": kind} if kind != "cublas" else {})})
                for e in own_kernel_times(cp, net, x, y):
                    own.setdefault((e["kernel"], tuple(e["shape"]), e["precision"]), e)
    res["gemm_flops_per_s"] = rates
    log(f"{len(rates)} trainer GEMM shapes timed (GPU time, queued ahead)")
    res["kernel_s"] = list(own.values())
    span = {}
    for e in res["kernel_s"]:
        span.setdefault(e["kernel"], []).append(e["s"] * 1e6)
    log(f"{len(own)} own kernel shapes timed (GPU time, queued ahead): "
        + ", ".join(f"{k} {min(t):.1f}-{max(t):.1f} us" for k, t in span.items()))
    # the GPU's gap between kernels: an empty kernel queued ahead, one by one and in a graph
    _, empty = _spin(cp)
    n_k = 200
    res["kernel_gap_s"], host_empty = queued_ahead(cp, lambda: empty((1,), (1,), ()), n_k)
    log(f"empty kernel queued ahead: {res['kernel_gap_s'] * 1e6:.2f} us GPU, {host_empty * 1e6:.2f} us host")
    try:
        # graphs of 1 and n_k empty kernels, replayed back to back queued ahead:
        # t(n) = replay gap + n x kernel gap (GPU time per replay)
        gs = cp.cuda.Stream(non_blocking=True)
        graphs = {}
        with gs:
            for n in (1, n_k):
                gs.begin_capture()
                for _ in range(n):
                    empty((1,), (1,), ())
                graphs[n] = gs.end_capture()
            t_one = queued_ahead(cp, lambda: graphs[1].launch(stream=gs), n_k)[0]
            t_graph, res["graph_launch_s"] = queued_ahead(cp, lambda: graphs[n_k].launch(stream=gs), 20)
        res["graph_kernel_gap_s"] = max(t_graph - t_one, 0.0) / (n_k - 1)
        res["graph_replay_gap_s"] = max(t_one - res["graph_kernel_gap_s"], 0.0)
        log(f"graph of {n_k} empty kernels: {res['graph_kernel_gap_s'] * 1e6:.2f} us per kernel GPU, "
            f"{res['graph_replay_gap_s'] * 1e6:.2f} us GPU per replay (graphs of 1 kernel back to back), "
            f"launch {res['graph_launch_s'] * 1e6:.2f} us host")
    except Exception as e:  # the rest of the calibration stands without it
        log(f"CUDA graph: not measured ({type(e).__name__}: {e})")
    # device memory bandwidth: a 1 GiB device-to-device copy, bytes read + written
    src = cp.empty(1 << 30, dtype=cp.uint8)
    dst = cp.empty_like(src)
    t = median(time_ms(cp, lambda: dst.__setitem__(slice(None), src), warmup=2, reps=10)) * 1e-3
    res["mem_bw_bytes_per_s"] = 2 * src.nbytes / t
    del src, dst
    log(f"device copy: {res['mem_bw_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
    res["d2d_copy_s"] = static_copies(cp, local_batches, precisions, log)
    # host <-> device copies at the trainer's two sizes (the fp32 gradient
    # buffer of the first hidden size, the X of the largest piece), at rotating
    # offsets of a 256 MB host array as the trainer copies a new slice every
    # batch; t = latency + bytes / bandwidth. A pageable copy blocks the host:
    # its host wall time; a pinned one is queued on the stream as a kernel is:
    # its GPU time, calls queued ahead (its host call is the launch term)
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

                def fn(h=h, n=n, direction=direction, mem=mem):
                    off = (k[0] % (big // n)) * n
                    k[0] += 1
                    if direction == "h2d":
                        d[:n].set(h[off:off + n], stream=s)
                    else:   # pinned: not blocking, so that the calls queue behind the spin
                        d[:n].get(out=h[off:off + n], stream=s, blocking=mem == "pageable")
                ts.append(queued_ahead(cp, fn, calls=20)[0] if mem == "pinned" else median(_host_times(cp, fn, reps=25)))
            bw = (sizes[1] - sizes[0]) / max(ts[1] - ts[0], 1e-9)
            lat = max(ts[0] - sizes[0] / bw, 0.0)
            res[f"{direction}_{mem}_bytes_per_s"] = bw
            res[f"{direction}_{mem}_latency_s"] = lat
            log(f"{direction} {mem} ({'GPU time, queued ahead' if mem == 'pinned' else 'host wall time'}): "
                f"{sizes[0]} B {ts[0] * 1e6:.1f} us, {sizes[1]} B {ts[1] * 1e6:.1f} us "
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
    return res


def static_copies(cp, local_batches, precisions, log) -> list[dict]:
    """GPU time of the device-to-device copies a graph-mode step with
    resident data makes into its static inputs (batches.DeviceBatches.static:
    one cudaMemcpyAsync of X's piece, one of Y's, from rotating rows of a
    resident array), at each piece size and precision: each size's calls
    queued back to back, so a point holds the copy's fixed cost and the gap
    to the next operation as well as its bytes."""
    D, C = Config.input_size, Config.num_classes
    sizes = sorted({itemsize(p) * b * n for p in precisions for b in local_batches for n in (D, C)})
    src = cp.empty(256 * 1000 * 1000, dtype=cp.uint8)
    dst = cp.empty(max(sizes), dtype=cp.uint8)
    rt, s = cp.cuda.runtime, cp.cuda.get_current_stream()
    out = []
    for n in sizes:
        k = [0]

        def fn(n=n):
            off = (k[0] % (src.nbytes // n)) * n
            k[0] += 1
            rt.memcpyAsync(dst.data.ptr, src.data.ptr + off, n, rt.memcpyDeviceToDevice, s.ptr)
        out.append({"bytes": int(n), "s": float(queued_ahead(cp, fn, calls=50)[0])})
    del src, dst
    log("device-to-device copies into static inputs (GPU time, queued back to back): "
        + ", ".join(f"{p['bytes']} B {p['s'] * 1e6:.2f} us" for p in out))
    return out


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


def _copy_time(cp, copy, pinned: bool, a, b) -> float:
    """Seconds of one host <-> device copy, `copy()` on the current stream:
    a pinned one between CUDA events a and b (GPU time), a pageable one by
    the host's wall clock (it blocks the host)."""
    s = cp.cuda.get_current_stream()
    t0 = time.perf_counter()
    a.record(s)
    copy()
    b.record(s)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 if pinned else time.perf_counter() - t0


def pageable_ahead(cp, copy, alone_s: float, reps: int = 10, loop: int = 10) -> tuple[float, bool, float | None]:
    """How a pageable H2D copy behaves queued behind GPU work still
    running: the CUDA runtime stages pageable memory through pinned buffers
    of its own, and only their DMA waits for the stream. A spin kernel of
    max(2 ms, 4 x the copy alone) is queued, then the copy: if its call
    returns while the spin still runs, the host staged all of it ahead
    (seconds ahead: the call's host time; the call does not block), else
    the call waited for the stream (ahead: the copy alone less its time on
    the stream after the spin, between CUDA events). A copy that waits is
    then timed behind work of just that much (w = ahead), `loop` times back
    to back as the trainer's batches are (median of 5): it hides
    w + alone - loop of it, and the rest of w is its delay (staging that
    does not overlap: 2 x H200, 5 MB pieces, about 25 us alone and 50-120 us
    with 2 ranks at once, benchmarks/results/h200-x2/pageable_diag).
    Returns (median seconds ahead, blocks: the call waited in most repeats,
    delay: None for a copy that does not block)."""
    spin, _ = _spin(cp)
    cycles = np.int64(max(2e-3, 4 * alone_s) * spin_cycles_per_s(cp))
    s = cp.cuda.get_current_stream()
    spun, done = cp.cuda.Event(), cp.cuda.Event()
    ahead, blocked = [], 0
    for _ in range(reps):
        s.synchronize()
        spin((1,), (1,), (cycles,))
        spun.record(s)
        t0 = time.perf_counter()
        copy()
        t_call = time.perf_counter() - t0
        waited = spun.done
        done.record(s)
        done.synchronize()
        blocked += waited
        ahead.append(max(0.0, alone_s - cp.cuda.get_elapsed_time(spun, done) * 1e-3) if waited else t_call)
    a, blocks = float(median(ahead)), blocked > reps // 2
    if not blocks:
        return a, False, None
    w = max(a, 20e-6)
    work = np.int64(w * spin_cycles_per_s(cp))
    per = []
    for _ in range(5):
        s.synchronize()
        t0 = time.perf_counter()
        for _ in range(loop):
            spin((1,), (1,), (work,))
            copy()
        s.synchronize()
        per.append((time.perf_counter() - t0) / loop)
    return a, True, float(min(w, max(0.0, median(per) - alone_s)))


def host_copies(cp, world, sizes: dict, log) -> tuple[list[dict], list[dict]]:
    """Host <-> device copies as the trainer makes them: rank 0 alone, then
    groups of 2 and of all P ranks copying at once after a barrier, at each
    size of `sizes` ({direction: [bytes]}: the batch pieces H2D, the gradient
    buffers both ways), pageable and pinned, each from a rotating offset of
    a host array larger than the host's caches (the trainer copies a new
    slice every batch). A pinned copy is timed as GPU time per copy of 4
    queued back to back behind a spin kernel (the trainer queues its pinned
    copies behind the step's kernels and the piece's x before its y; one
    copy between two events adds the engines' start, 6-11 us on an H100:
    h100/validate7/diag, 32 KB 12.1 us alone, 4.6 queued), a pageable one
    by the host's wall clock (it blocks the host); a point is the slowest
    member's median. Returns (host_copy_s
    points, copy_aggregate_bytes_per_s: each group's g x bytes over that
    time at the largest size, for sizes beyond the points)."""
    import cupyx
    P = world.size
    reps, rounds, warm, slots = 24, 3, 4, 8
    top = max(n for ns in sizes.values() for n in ns)
    big = max(256 * 1000 * 1000, slots * top)
    d = cp.empty(top, dtype=cp.uint8)
    hosts = {"pageable": np.ones(big, dtype=np.uint8), "pinned": cupyx.empty_pinned(big, dtype=np.uint8)}
    hosts["pinned"][...] = 1
    s = cp.cuda.get_current_stream()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    points, aggregate = [], []
    keys = [(direction, mem, n) for direction, ns in sizes.items() for mem in hosts for n in sorted(set(ns))]
    for g in sorted({1, min(2, P), P}):
        member = world.rank < g
        ts: dict = {key: [] for key in keys}
        copies: dict = {}
        for key in keys:
            direction, mem, n = key
            h, k = hosts[mem], [0]

            def copy(direction=direction, h=h, n=n, k=k):  # a new slice each call, as the trainer's batches are
                off = (k[0] % (big // n)) * n
                k[0] += 1
                if direction == "h2d":
                    d[:n].set(h[off:off + n], stream=s)
                else:
                    d[:n].get(out=h[off:off + n], stream=s, blocking=False)
            copies[key] = copy
        # the host's copy speed drifts over seconds (one H100, benchmarks/results/h100/drift: a pageable
        # copy's median over 10 calls moved 27-54% within 16 s of one process): each point's calls are
        # spread over the group's whole measurement, in rounds over every point, not taken in one burst
        for rnd in range(rounds):
            for key in keys:
                for i in range((warm if rnd == 0 else 0) + reps // rounds):
                    world.barrier()
                    if not member:
                        continue
                    if key[1] == "pinned":   # GPU time per copy of 4 queued back to back behind a spin, as the
                        t = queued_ahead(cp, copies[key], 4, spin_s=0.002, reps=1)[0]   # trainer queues them
                    else:
                        t = _copy_time(cp, copies[key], False, a, b)
                    if rnd or i >= warm:
                        ts[key].append(t)
        lines: dict = {}
        for key in keys:
            direction, mem, n = key
            mine = float(median(ts[key])) if member else None
            slowest = max(t for t in world.allgather(mine) if t is not None)
            point = {"procs": g, "direction": direction, "memory": mem, "bytes": n, "s": slowest}
            line = lines.setdefault((direction, mem), [])
            line.append(f"{n / 1e6:.2f} MB {slowest * 1e6:.0f}")
            if (direction, mem) == ("h2d", "pageable"):
                # behind a busy stream, all members at once: the least staged ahead, any blocking
                world.barrier()
                ahead = pageable_ahead(cp, copies[key], mine) if member else None
                got = [x for x in world.allgather(ahead) if x is not None]
                point.update(ahead_s=min(x[0] for x in got), blocks=any(x[1] for x in got))
                if point["blocks"]:   # the slowest member's delay
                    point["ahead_delay_s"] = max(x[2] for x in got if x[2] is not None)
                line[-1] += (f" ({point['ahead_s'] * 1e6:.0f} ahead" + (
                    f", blocks, {point['ahead_delay_s'] * 1e6:.0f} delay" if point['blocks'] else "") + ")")
            points.append(point)
            if g > 1 and n == max(sizes[direction]):
                aggregate.append({"procs": g, "direction": direction, "memory": mem, "bytes_per_s": g * n / slowest})
        for (direction, mem), line in lines.items():
            log(f"{direction} {mem}, {'one rank alone' if g == 1 else f'{g} ranks at once'} "
                f"(slowest rank, us): {', '.join(line)}")
    return points, aggregate


def collectives(cp, world, log, grad_bytes=()):
    """Host MPI_Allreduce (host wall time) and NCCL allreduce (GPU time,
    calls queued ahead) on groups of 2 and P ranks, at the trainer's
    gradient sizes and a size ladder; the MPI host buffer is pinned and
    freshly written by a D2H copy before each call, as the trainer's staged
    buffer is (a cache-warm buffer reduces faster), and at the gradient
    sizes the H2D copy of that buffer right after the allreduce is timed too
    (host_copy_s points, buffer "reduced"). Returns the points, the
    ring-model fit and the wait for the slowest rank; {} on one process."""
    from mpi4py import MPI
    from cupy.cuda import nccl
    import cupyx
    P = world.size
    if P < 2:
        return {}
    groups = sorted({2, P})
    grads = {int(n) // 4 * 4 for n in grad_bytes}
    sizes = sorted(set(SIZES_BYTES) | grads)
    pts_mpi, pts_nccl, waits, reduced = [], [], [], []
    a, b = cp.cuda.Event(), cp.cuda.Event()
    spin, _ = _spin(cp)
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
        for nbytes in sizes:
            n = nbytes // 4
            db = cp.ones(n, cp.float32)
            for memory, hb in (("pinned", cupyx.empty_pinned(n, dtype=np.float32)),
                               ("pageable", np.empty(n, dtype=np.float32))):
                tm, tc = [], []
                for i in range(25):
                    db.get(out=hb, stream=s)  # the buffer as the trainer hands it to MPI: just written by the GPU
                    s.synchronize()
                    sub.Barrier()
                    t0 = time.perf_counter()
                    sub.Allreduce(MPI.IN_PLACE, hb, op=MPI.SUM)
                    t1 = time.perf_counter()
                    if nbytes in grads:   # the staged exchange's copy back, from the buffer MPI just wrote
                        tc.append(_copy_time(cp, lambda: db.set(hb, stream=s), memory == "pinned", a, b))
                    if i >= 5:
                        tm.append(t1 - t0)
                pts_mpi.append((g, nbytes, max(sub.allgather(float(np.median(tm)))), memory))
                if tc:
                    reduced.append({"procs": g, "direction": "h2d", "memory": memory, "bytes": nbytes,
                                    "s": max(sub.allgather(float(np.median(tc[5:])))), "buffer": "reduced"})
            # NCCL's allreduce is a kernel on the stream: its GPU time, calls queued ahead behind a
            # spin on every rank of the group (the ranks' skew is spread over the calls), as the
            # step's other kernels are timed; the host's call is part of the launch term
            sub.Barrier()
            tn = queued_ahead(cp, lambda: nc.allReduce(db.data.ptr, db.data.ptr, n, nccl.NCCL_FLOAT32,
                                                       nccl.NCCL_SUM, s.ptr), calls=20)[0]
            tn = max(sub.allgather(float(tn)))
            pts_nccl.append((g, nbytes, tn, "device"))
        # the wait for the slowest rank: every rank runs the same GPU work
        # (a 200 us spin and 10 empty-ish launches, synchronised) then a
        # 4-byte allreduce with no barrier; the time per iteration beyond
        # the work alone and the barriered allreduce is the jitter's cost
        cyc = np.int64(200e-6 * spin_cycles_per_s(cp) / 10)
        one = np.ones(1, np.float32)

        def work():
            for _ in range(10):
                spin((1,), (1,), (cyc,))
            s.synchronize()
        solo, both, ar = [], [], []
        for mode in ("solo", "ar", "both"):
            for i in range(60):
                if mode != "both":
                    sub.Barrier()
                t0 = time.perf_counter()
                if mode != "ar":
                    work()
                if mode != "solo":
                    sub.Allreduce(MPI.IN_PLACE, one, op=MPI.SUM)
                if i >= 10:
                    {"solo": solo, "ar": ar, "both": both}[mode].append(time.perf_counter() - t0)
        solo_s = max(sub.allgather(float(np.median(solo))))
        ar_s = max(sub.allgather(float(np.median(ar))))
        both_s = max(sub.allgather(float(np.mean(both))))
        waits.append((g, max(both_s - solo_s - ar_s, 0.0)))
        sub.Free()
        world.comm.Barrier()
    res = {}
    if world.rank == 0:
        for name, pts, alpha_steps in (("mpi", pts_mpi, True), ("nccl", pts_nccl, False)):
            fit = [pt for pt in pts if pt[3] != "pageable"]   # the ring fit: pinned host buffers (MPI), NCCL
            A = np.array([[2 * (p - 1) if alpha_steps else 1.0, 2 * (p - 1) / p * n] for p, n, _, _ in fit])
            t = np.array([x for _, _, x, _ in fit])
            # weighted least squares (relative error): each row divided by its time
            coef, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
            alpha, inv_bw = float(max(coef[0], 0.0)), float(coef[1])
            res[f"{name}_alpha_s"] = alpha
            res[f"{name}_bw_bytes_per_s"] = 1.0 / inv_bw if inv_bw > 0 else float("inf")
            for p, n, x, mem in pts:
                log(f"{name} allreduce p={p} {n} B{' (pageable host buffer)' if mem == 'pageable' else ''}: "
                    f"{x * 1e6:.1f} us")
            log(f"{name} fit: alpha {alpha * 1e6:.2f} us, bw {res[f'{name}_bw_bytes_per_s'] / 1e9:.2f} GB/s")
        res["allreduce_s"] = [{"comm": c, "procs": int(p), "bytes": int(n), "s": float(x),
                               **({"memory": mem} if c == "mpi" else {})}
                              for c, pts in (("mpi", pts_mpi), ("nccl", pts_nccl)) for p, n, x, mem in pts]
        res["collective_wait_s"] = [{"procs": int(p), "s": float(w)} for p, w in waits]
        res["host_copy_s"] = reduced
        for r in reduced:
            log(f"h2d {r['memory']} of {r['bytes']} B just reduced by MPI, {r['procs']} ranks: "
                f"{r['s'] * 1e6:.1f} us")
        for p, w in waits:
            log(f"wait for the slowest of {p} ranks at a collective: {w * 1e6:.1f} us")
    return res


def _staged_parts(cp, comm, memory: str, piece_bytes: tuple[int, int], grad_bytes: int, spin_cycles,
                  reps: int = 30, warm: int = 5) -> tuple[float, float]:
    """One rank's (sum of the staged step's parts each timed alone, the
    step in the trainer's order): parts = the batch piece's two H2D copies
    (x, y: a new slice each call), the gradients' D2H, MPI_Allreduce (after
    a barrier) and H2D back, each a median over `reps` calls; the step =
    the piece's copies, a spin kernel (GPU work: the stream is idle at the
    next copy, as after the trainer's step), the D2H, the allreduce with no
    barrier, the H2D back and one empty kernel (the update), median wall
    time per step, less the spin's GPU time. `comm` None: one rank."""
    import cupyx
    from mpi4py import MPI
    pinned = memory == "pinned"
    s = cp.cuda.get_current_stream()
    spin, empty = _spin(cp)
    ev = cp.cuda.Event(), cp.cuda.Event()
    nx, ny = (n // 4 for n in piece_bytes)
    big = max(256 * 1000 * 1000 // 4, 8 * (nx + ny))
    host = cupyx.empty_pinned(big, np.float32) if pinned else np.empty(big, np.float32)
    host[...] = 1.0
    hg = cupyx.empty_pinned(grad_bytes // 4, np.float32) if pinned else np.empty(grad_bytes // 4, np.float32)
    xd, yd, dg = cp.empty(nx, cp.float32), cp.empty(ny, cp.float32), cp.ones(grad_bytes // 4, cp.float32)
    k = [0]
    slots = big // (nx + ny)

    def piece():
        off = (k[0] % slots) * (nx + ny)
        k[0] += 1
        xd.set(host[off:off + nx], stream=s)
        yd.set(host[off + nx:off + nx + ny], stream=s)

    def d2h():
        dg.get(out=hg, stream=s)
        s.synchronize()

    def allreduce():
        if comm is not None:
            comm.Allreduce(MPI.IN_PLACE, hg, op=MPI.SUM)

    def barrier():
        if comm is not None:
            comm.Barrier()

    def alone(fn, before=lambda: None):
        t = []
        for i in range(warm + reps):
            before()
            barrier()
            t.append(_copy_time(cp, fn, pinned, *ev) if fn is not allreduce else _wall(allreduce))
        return median(t[warm:])

    def back():
        dg.set(hg, stream=s)
    parts = alone(piece) + alone(d2h) + alone(allreduce, before=d2h) + alone(back, before=d2h)
    a, b = ev
    a.record(s)
    spin((1,), (1,), (spin_cycles,))
    b.record(s)
    b.synchronize()
    spin_s = cp.cuda.get_elapsed_time(a, b) * 1e-3
    barrier()
    steps = []
    for i in range(warm + reps):
        t0 = time.perf_counter()
        piece()
        spin((1,), (1,), (spin_cycles,))
        d2h()
        allreduce()
        back()
        empty((1,), (1,), ())
        s.synchronize()
        steps.append(time.perf_counter() - t0 - spin_s)
    return parts, median(steps[warm:])


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def staged_wait(cp, world, log, pieces: list[tuple[int, int]], grads: list[int]) -> list[dict]:
    """The staged exchange's wait for the slowest rank: on one rank and on
    groups of 2 and P ranks at once, for each host memory, the staged
    step in the trainer's order against its parts each timed alone
    (_staged_parts) at each batch piece (x, y bytes) and gradient size; the
    group's excess per step over one rank's, median over the sizes, is the
    time a step of the staged exchange loses to the ranks' copies, D2H and
    MPI differing from batch to batch and rank to rank (2 x H200,
    2026-11-24, benchmarks/results/h200-x2/staged_cycle: at p = 2 a median
    of 164 and 115 us a step through pageable memory in two rounds, single
    sizes from -625 to +508, and 46 and 12 us through pinned). Returns
    collective_wait_s points {procs, s, memory}; [] on one process."""
    P = world.size
    if P < 2:
        return []
    from mpi4py import MPI
    cycles = np.int64(100e-6 * spin_cycles_per_s(cp))
    out = []
    for memory in ("pageable", "pinned"):
        excess: dict[int, list[float]] = {}
        for g in sorted({1, 2, P}):
            color = 0 if world.rank < g else MPI.UNDEFINED
            sub = world.comm.Split(color, world.rank)
            if sub != MPI.COMM_NULL:
                for pb in pieces:
                    for gb in grads:
                        parts, step = _staged_parts(cp, sub if g > 1 else None, memory, pb, gb, cycles)
                        excess.setdefault(g, []).append(max(sub.allgather(step)) - max(sub.allgather(parts)))
                sub.Free()
            world.comm.Barrier()
        if world.rank == 0:
            base = median(excess[1])
            for g in sorted(excess):
                if g > 1:
                    w = max(0.0, median(excess[g]) - base)
                    out.append({"procs": g, "s": float(w), "memory": memory})
                    log(f"staged exchange through {memory} memory, wait for the slowest of {g} ranks: "
                        f"{w * 1e6:.1f} us a step (excess over the parts alone, us: "
                        f"{', '.join(f'{x * 1e6:.0f}' for x in excess[g])}; one rank: "
                        f"{', '.join(f'{x * 1e6:.0f}' for x in excess[1])})")
    return out


def _dispatch_step_times(cp, group, barrier, rounds: int, reps: int) -> dict:
    """This rank's host seconds per step of the trainer's eager step at a
    tiny size (median over rounds, each round started together after a
    barrier and ended synchronised), untraced and traced (counters), and of
    its graph step (the whole step one replay, resident pieces copied into
    its static inputs), untraced."""
    import tempfile
    from types import SimpleNamespace
    from .comm import SingleWorld
    from .gpu import use_device
    from .gpu.graph import GraphStep
    from .step import step
    from .trace.format import Counts
    from .trace.writer import NullTracer, make_tracer
    stream = use_device(cp, cp.cuda.Device().id)   # the trainer's own non-blocking stream, made current
    bl = DISPATCH_BATCH
    net, batches, reducer = resident_step(cp, DISPATCH_SIZES, bl, group, pieces=4)
    world1 = SingleWorld()
    tracer = make_tracer(Config(precision="float32", trace_dir=tempfile.mkdtemp(), run_id="calibrate"), world1)
    tracer.attach(world1, SimpleNamespace(name="cupy", xp=cp, net=net, reducer=reducer))
    counts = Counts()
    graph = GraphStep(cp, net, batches, reducer, stream)
    out = {"untraced": [], "traced": [], "graph": []}
    for r in range(rounds + 1):             # round 0 warms up (and captures the graph)
        for key, tr in (("untraced", NullTracer()), ("traced", tracer), ("graph", NullTracer())):
            net.ops = tr.ops
            barrier()
            t0 = time.perf_counter()
            for k in range(reps):
                tr.begin_batch(0, k, bl, bl)
                step(net, batches, reducer, 0, bl, tr.phase, counts, graph if key == "graph" else None)
                tr.end_batch(None, counts)
                counts.reset()
            stream.synchronize()
            if r:
                out[key].append((time.perf_counter() - t0) / reps)
    tracer.close("complete")
    return {k: float(median(v)) for k, v in out.items()}


DISPATCH_SIZES, DISPATCH_BATCH = (16, 16, 10), 16


def dispatch_size_factors(cp, hidden, local, log, rounds: int = 4, reps: int = 30) -> list[dict]:
    """The host's time per operation of the eager step at the trainer's sizes
    (784-H-10 for H in `hidden`, pieces of b in `local`; the step of
    _dispatch_step_times, untraced, resident pieces, NCCL over one rank)
    over its time at DISPATCH_SIZES, in the same rounds (the host's speed
    drifts from one round to the next: a ratio of neighbours cancels it):
    the host enqueues `reps` steps and the GPU runs them after (one H100,
    benchmarks/results/h100/validate7/diag: 12.4 us an operation at the
    calibration's size, 16-24 at the trainer's). Median ratio over the
    rounds after the first; launch_size_factor entries {hidden, batch,
    factor}."""
    from .gpu import use_device
    from .partition import LocalGroup
    from .step import step
    from .trace.format import Counts
    from .trace.writer import NullTracer
    stream = use_device(cp, cp.cuda.Device().id)
    group, tr, counts = LocalGroup(), NullTracer(), Counts()
    setups = {}
    for key in [(0, DISPATCH_BATCH)] + [(h, b) for h in hidden for b in local]:
        b = key[1]
        sizes = DISPATCH_SIZES if key[0] == 0 else (Config.input_size, key[0], Config.num_classes)
        setups[key] = (*resident_step(cp, sizes, b, group), b)
    ratios: dict = {key: [] for key in setups if key[0]}
    for rnd in range(rounds + 1):
        t = {}
        for key, (net, batches, reducer, b) in setups.items():
            net.ops = tr.ops
            stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                step(net, batches, reducer, 0, b, tr.phase, counts)
                counts.reset()
            t[key] = time.perf_counter() - t0
            stream.synchronize()
        if rnd:
            for key in ratios:
                ratios[key].append(t[key] / t[(0, DISPATCH_BATCH)])
    out = [{"hidden": h, "batch": b, "factor": float(median(r))} for (h, b), r in ratios.items()]
    log("host time per operation of the eager step at the trainer's sizes, over the calibration's size: "
        + ", ".join(f"H={e['hidden']} b={e['batch']} {e['factor']:.2f}" for e in out))
    return out


def host_dispatch(cp, world, log, rounds: int = 5, reps: int = 200) -> dict:
    """The host's time per operation of the eager step and the tracer's per
    phase: one rank alone (launch_overhead_s, trace_phase_host_s), then
    groups of 2 and P ranks launching at once, the slowest rank's
    (host_dispatch_s). Operations: the step's kernels and its collective
    call, as the model counts them (predict.py's timeline items)."""
    from .model.costs import step_kernels
    from .model.predict import traced_phases
    from .partition import Group, LocalGroup
    ops = sum(len(k) for k in step_kernels(DISPATCH_SIZES, DISPATCH_BATCH, None, 4).values()) + 1
    phases = traced_phases("nccl", "resident", "eager")
    P = world.size
    res, points = {}, []
    groups = []   # kept alive: the reducers' NCCL communicators are cached by the group object's id
    for g in sorted({1, 2, P} & set(range(1, P + 1))):
        member = world.rank < g
        if P > 1:
            from mpi4py import MPI
            sub = world.comm.Split(0 if member else MPI.UNDEFINED, world.rank)
        if member:
            group = Group(sub, world.library) if P > 1 else LocalGroup()
            groups.append(group)
            t = _dispatch_step_times(cp, group, sub.Barrier if P > 1 else (lambda: None), rounds, reps)
            per_rank = group.allgather(t)
        world.barrier()
        if world.rank != 0:
            continue
        launch = [r["untraced"] / ops for r in per_rank]
        trace = [max(r["traced"] - r["untraced"], 0.0) / phases for r in per_rank]
        slow = max(range(g), key=lambda i: per_rank[i]["traced"])
        log(f"host time per launched operation, {g} rank(s) at once ({ops} a step): "
            + " ".join(f"{v * 1e6:.2f}" for v in launch) + " us; the tracer per phase: "
            + " ".join(f"{v * 1e6:.2f}" for v in trace) + f" us (slowest: rank {slow})")
        if g == 1:
            res["launch_overhead_s"], res["trace_phase_host_s"] = launch[0], trace[0]
            res["graph_step_host_s"] = per_rank[0]["graph"]
            log(f"host time per batch of the graph step (resident, one replay), one rank: "
                f"{per_rank[0]['graph'] * 1e6:.2f} us")
        else:
            points.append({"procs": g, "launch_s": float(launch[slow]), "trace_phase_s": float(trace[slow])})
    if points:
        res["host_dispatch_s"] = points
    return res


def mean_dispatch(a: dict, b: dict) -> dict:
    """The mean of two host_dispatch results (rank 0's; {} elsewhere)."""
    if not a:
        return {}
    out = {k: (a[k] + b[k]) / 2 for k in ("launch_overhead_s", "trace_phase_host_s", "graph_step_host_s")}
    if a.get("host_dispatch_s"):
        out["host_dispatch_s"] = [{"procs": x["procs"], **{k: (x[k] + y[k]) / 2 for k in ("launch_s", "trace_phase_s")}}
                                  for x, y in zip(a["host_dispatch_s"], b["host_dispatch_s"])]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="machine file to write (YAML)")
    ap.add_argument("--base", default="h200", help="datasheet machine file for what is not measured")
    ap.add_argument("--name", default=None, help="machine name (default: the GPU's name, calibrated)")
    ap.add_argument("--hidden", default="512,1024,2048")
    ap.add_argument("--local-batch", default="800,1600,3200")
    ap.add_argument("--precisions", default="float32,float64")
    ap.add_argument("--gemm-kernels", default="",
                    help="the reference's GEMM kernels to calibrate too (naive,tiled,regblock; float32) "
                         "(default: none)")
    a = ap.parse_args(argv)
    from .comm import make_world
    from .gpu import require_cupy
    from .errors import PerfmlpError
    try:
        cp = require_cupy()
        base = load_machine(a.base)
        hidden = [int(h) for h in a.hidden.split(",")]
        local = [int(b) for b in a.local_batch.split(",")]
        kernels = tuple(k for k in a.gemm_kernels.split(",") if k)
        bad = [k for k in kernels if k not in ("naive", "tiled", "regblock")]
        if bad:
            raise PerfmlpError(f"--gemm-kernels: unknown kernel {bad[0]!r} (naive, tiled, regblock)")
    except ValueError as e:
        print(f"perfmlp.calibrate: error: {e}", file=sys.stderr)
        return 2
    except PerfmlpError as e:
        print(f"perfmlp.calibrate: error: {e}", file=sys.stderr)
        return 2
    world = make_world()
    cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
    log = (lambda m: print(m, flush=True)) if world.rank == 0 else (lambda m: None)
    gpu_name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    res = {}
    # the host's speed differs from one launch of a process to the next and over minutes
    # (benchmarks/results/h200-x4/host_jitter): two draws, first and last, and their mean
    first = host_dispatch(cp, world, log)
    if world.rank == 0:
        res = single_gpu(cp, hidden, local, a.precisions.split(","), log, kernels)
    world.barrier()
    D, C = Config.input_size, Config.num_classes
    precisions = a.precisions.split(",")
    grads = sorted({grad_buffer_bytes((D, h, C), itemsize(p)) for h in hidden for p in precisions})
    pieces = sorted({itemsize(p) * b * n for p in precisions for b in local for n in (D, C)})
    res["host_copy_s"], res["copy_aggregate_bytes_per_s"] = host_copies(
        cp, world, {"h2d": sorted(set(pieces) | set(grads)), "d2h": grads}, log)
    col = collectives(cp, world, log, grads)
    res["host_copy_s"] += col.pop("host_copy_s", [])
    res.update(col)
    hs = sorted({min(hidden), max(hidden)})   # the staged step's wait: float32, the sizes' extremes
    waits = staged_wait(cp, world, log, [(4 * b * D, 4 * b * C) for b in sorted({min(local), max(local)})],
                        [grad_buffer_bytes((D, h, C), 4) for h in hs])
    if world.rank == 0 and waits:
        res["collective_wait_s"] = res.get("collective_wait_s", []) + waits
    res.update(mean_dispatch(first, host_dispatch(cp, world, log)))
    if world.rank == 0:
        res["launch_size_factor"] = dispatch_size_factors(cp, hidden, local, log)
    world.barrier()
    if world.rank != 0:
        return 0
    date = dt.date.today().isoformat()
    tables = ("gemm_flops_per_s", "allreduce_s", "collective_wait_s", "kernel_s", "host_dispatch_s",
              "copy_aggregate_bytes_per_s", "d2d_copy_s", "host_copy_s", "launch_size_factor")
    measured = sorted(k for k in res if k not in tables) + [t for t in tables if res.get(t)]
    values = {"name": a.name or f"{gpu_name} (calibrated)",
              "source": (f"measured by perfmlp.calibrate (microbenchmarks only) on {gpu_name} x {world.size}, "
                         f"{date}: {', '.join(measured)}; GEMM rates and kernel_s are GPU time (calls queued behind "
                         f"a spin kernel), host dispatch is launch_overhead_s; the rest from {Path(base.path).name} "
                         f"({base.name}); peak_flops_per_s_* is the large-GEMM rate, not the datasheet peak"),
              "date": date, "gpus": world.size if world.size > 1 else max(world.size, base.gpus)}
    for k in ("peak_flops_per_s_float32", "peak_flops_per_s_float64", "mem_bw_bytes_per_s",
              "h2d_pageable_bytes_per_s", "h2d_pinned_bytes_per_s", "d2h_pageable_bytes_per_s",
              "d2h_pinned_bytes_per_s", "copy_latency_s", "launch_overhead_s", "mpi_alpha_s",
              "mpi_bw_bytes_per_s", "nccl_alpha_s", "nccl_bw_bytes_per_s"):
        values[k] = float(res.get(k, getattr(base, k)))
    for k in tables:
        values[k] = res.get(k, [])
    for k in ("trace_event_s", "trace_phase_host_s", "kernel_gap_s", "graph_kernel_gap_s", "graph_replay_gap_s",
              "graph_launch_s", "graph_step_host_s",
              "h2d_pageable_latency_s", "h2d_pinned_latency_s", "d2h_pageable_latency_s", "d2h_pinned_latency_s"):
        if k in res:
            values[k] = float(res[k])
    machine_from_mapping(values, a.out)  # the file we write must load
    text = "# Written by python -m perfmlp.calibrate; do not edit by hand.\n" + machine_to_yaml(values)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
