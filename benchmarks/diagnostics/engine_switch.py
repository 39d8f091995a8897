"""One-off: what a copy between kernels costs the stream beyond the copy.

    python benchmarks/diagnostics/engine_switch.py > engine-switch.txt

The staged exchange's graph steps are predicted too fast (11 of 11
host-bound ones in six sweeps) and so are graph steps copying their batch
from pinned memory (10 of 10): both put copies between kernels on the
step's stream. Here, behind a spin kernel (everything queued ahead; CUDA
events around many), the GPU time of N repetitions of single operations
and of pairs: a small kernel K, a graph replay G (a few kernels captured),
copies of a gradient-sized buffer device to pinned host (D2H), pinned host
to device (H2D) and device to device (D2D). A pair's extra time per
switch is (T(pairs) - T(first alone) - T(second alone)) / (2 N). Then the
same pairs issued just in time: the host issues the pair and synchronises,
N times, host wall per pair, less the GPU times alone (the host's calls
and the GPU's wake-ups). Median of rounds, interleaved.
"""
import sys
import time
from statistics import median

import numpy as np

from perfmlp.gpu import timing

cp = None   # CuPy, imported by main (the file loads without a GPU)

N = 200
ROUNDS = 7
NBYTES = 1_628_204            # the gradient buffer at H = 512 (float32)
KERNEL_N = 400_000            # a small elementwise kernel (a few us)


def ops():
    import cupyx
    n = NBYTES // 4
    dev = cp.zeros(n, cp.float32)
    dev2 = cp.zeros(n, cp.float32)
    hostarr = cupyx.empty_pinned((n,), np.float32)   # as the staged exchange's host buffer
    x = cp.ones(KERNEL_N, cp.float32)
    s = cp.cuda.get_current_stream()

    scale = cp.RawKernel(r'''extern "C" __global__ void scale(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 1.0001f; }''', "scale")

    def k():
        scale(((KERNEL_N + 255) // 256,), (256,), (x, np.int32(KERNEL_N)))

    g_stream = cp.cuda.Stream(non_blocking=True)
    with g_stream:
        k()
        g_stream.begin_capture()
        for _ in range(4):
            k()
        graph = g_stream.end_capture()
    g_stream.synchronize()

    def g():
        graph.launch(s)

    rt = cp.cuda.runtime

    def d2h():   # cudaMemcpyAsync, as CuPy's get(out=pinned) issues it (that call then also synchronises)
        rt.memcpyAsync(hostarr.ctypes.data, dev.data.ptr, NBYTES, rt.memcpyDeviceToHost, s.ptr)

    def h2d():   # CuPy's set from pinned memory: one cudaMemcpyAsync
        rt.memcpyAsync(dev.data.ptr, hostarr.ctypes.data, NBYTES, rt.memcpyHostToDevice, s.ptr)

    def d2d():
        dev2.data.copy_from_device_async(dev.data, NBYTES, s)

    return {"K": k, "G": g, "D2H": d2h, "H2D": h2d, "D2D": d2d}


def seq(fns):
    def run():
        for f in fns:
            f()
    return run


def just_in_time(fns, n: int) -> float:
    s = cp.cuda.get_current_stream()
    s.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        for f in fns:
            f()
        s.synchronize()
    return (time.perf_counter() - t) / n


def main() -> None:
    global cp
    import cupy as cp
    o = ops()
    singles = ("K", "G", "D2H", "H2D", "D2D")
    pairs = (("K", "D2H"), ("K", "H2D"), ("K", "D2D"), ("G", "D2H"), ("G", "H2D"), ("G", "D2D"),
             ("D2H", "H2D"), ("K", "G"))
    queued = {name: (lambda f=o[name]: timing.queued_ahead(cp, f, N, reps=1)[0]) for name in singles}
    queued.update({a + "+" + b: (lambda f=seq((o[a], o[b])): timing.queued_ahead(cp, f, N, reps=1)[0])
                   for a, b in pairs})
    jit = {"jit " + a + "+" + b: (lambda f=(o[a], o[b]): just_in_time(f, N)) for a, b in pairs}
    jit.update({"jit " + a: (lambda f=(o[a],): just_in_time(f, N)) for a in singles})
    for name, f in o.items():   # which operation holds the host (a copy CuPy makes synchronous) says so here
        s = cp.cuda.get_current_stream()
        s.synchronize()
        t = time.perf_counter()
        timing.spin_kernels(cp)[0]((1,), (1,), (timing.spin_cycles(cp, 0.01),))
        f()
        print(f"# {name}: the call took {(time.perf_counter() - t) * 1e6:.0f} us behind a 10 ms spin")
        s.synchronize()
    got = timing.rounds({**queued, **jit}, ROUNDS, warmup_rounds=1)
    med = {k: median(v) * 1e6 for k, v in got.items()}
    lo = {k: min(v) * 1e6 for k, v in got.items()}
    hi = {k: max(v) * 1e6 for k, v in got.items()}
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{dev}, {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; N = {N}, {ROUNDS} rounds "
          f"(median, min-max), {NBYTES} B copies, a {KERNEL_N}-element kernel, a graph of 4 of them")
    print("queued ahead, GPU us per operation:")
    for k in singles:
        print(f"  {k:5s} {med[k]:7.2f}  ({lo[k]:.2f}-{hi[k]:.2f})")
    print("queued ahead, pairs: GPU us per pair, and the extra per switch (pair - both alone) / 2:")
    for a, b in pairs:
        p = a + "+" + b
        extra = (med[p] - med[a] - med[b]) / 2
        print(f"  {p:8s} {med[p]:7.2f}  ({lo[p]:.2f}-{hi[p]:.2f})  extra per switch {extra:+.2f}")
    print("just in time (issue, synchronise; host wall us), and beyond the queued GPU time:")
    for k in [*singles, *(a + "+" + b for a, b in pairs)]:
        j = "jit " + k
        gpu = med[k]
        print(f"  {k:8s} {med[j]:7.2f}  ({lo[j]:.2f}-{hi[j]:.2f})  beyond the GPU's {gpu:.2f}: {med[j] - gpu:+.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
