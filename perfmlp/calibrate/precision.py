"""The tensor-core precisions (tf32, bf16, fp16: model/precision.py) as GPU
time, by gemm.py's method: the large-GEMM rate of each
(peak_flops_per_s_<precision>), the trainer's GEMMs at its shapes and
layouts (16-bit operands and results, the weight gradients in float32) and
its own kernels on 16-bit storage; and the prefetching pipeline's host
staging rate (host_stage_bytes_per_s: gpu/prefetch.py's threads copying
pageable rows into pinned memory)."""
from __future__ import annotations

import time
from statistics import median

import numpy as np

from ..errors import PerfmlpError
from .gemm import gemm_rate
from .kernels import own_kernel_times
from .. import names as N

TENSOR = (N.TF32, N.BF16, N.FP16)
PEAK_N = 8192


def precision_network(cp, sizes, precision, b):
    """A GpuNetwork in `precision` for pieces of b samples, with a random
    piece x (b x D) and one-hot labels y in its storage type."""
    from ..gpu.network import GpuNetwork
    from ..mixed import device_view, to_storage
    from ..mlp import init_weights
    net = GpuNetwork(cp, sizes, precision, 0.1, 0.0, b, b, N.CUBLAS)
    net.set_params(init_weights(sizes, 0))
    rng = np.random.default_rng(0)
    x = cp.asarray(device_view(to_storage(rng.random((b, sizes[0])), precision)))
    y = cp.asarray(device_view(to_storage(np.eye(sizes[-1])[np.arange(b) % sizes[-1]], precision)))
    return net, x, y


def tensor_peak(cp, precision: str, n: int = PEAK_N) -> float:
    """FLOP/s of an n x n x n cuBLAS GEMM on the precision's tensor cores
    (operands and result in its storage type, float32 accumulation)."""
    from ..gpu.gemm import cublas_gemm
    from ..gpu.kernels import device_dtype
    def operand():   # random values in the storage type (bfloat16: a float32's top 16 bits)
        f = cp.random.random((n, n), dtype=cp.float32)
        if precision == N.BF16:
            return (f.view(cp.uint32) >> 16).astype(cp.uint16)
        return f.astype(device_dtype(precision))
    a, b, c = operand(), operand(), operand()
    g = cublas_gemm(cp, np.float32, precision=precision)
    return gemm_rate(cp, lambda: g(a, b, c), n, n, n, calls=3)


def precision_rates(cp, hidden, local_batches, precisions, log) -> dict:
    """For each tensor-core precision asked for: peak_flops_per_s_<p>, and
    the rates of the GEMMs one step of 784-H-10 launches (recorded through
    GpuNetwork.capture, each relaunched alone) and its own kernels' times
    at each H and per-rank batch: gemm_flops_per_s and kernel_s entries."""
    from ..config import Config
    D, C = Config.input_size, Config.num_classes
    res: dict = {"gemm_flops_per_s": [], "kernel_s": []}
    own: dict = {}
    for prec in (p for p in precisions if p in TENSOR):
        res[f"peak_flops_per_s_{prec}"] = tensor_peak(cp, prec)
        log(f"large GEMM {PEAK_N}^3 {prec}: {res[f'peak_flops_per_s_{prec}'] / 1e12:.1f} TFLOP/s")
        for H in hidden:
            for bl in local_batches:
                net, x, y = precision_network(cp, (D, H, C), prec, bl)
                net.capture = []
                net.forward(x.T); net.loss(y.T); net.backward()
                calls, net.capture = net.capture, None
                for a, b, out in calls:
                    m_, k_, n_ = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
                    try:
                        with net.stream:   # the spin and the events where the step's handle launches
                            r = gemm_rate(cp, lambda a=a, b=b, out=out: net.gemm_again(a, b, out), m_, n_, k_)
                    except PerfmlpError as e:
                        raise PerfmlpError(f"{prec} GEMM {m_} x {n_} x {k_} of H={H}, b={bl} "
                                           f"({a.dtype}{'' if a.flags.c_contiguous else ' transposed'} x "
                                           f"{b.dtype}{'' if b.flags.c_contiguous else ' transposed'} -> "
                                           f"{out.dtype}): {e}") from None
                    if r > 1.5 * res[f"peak_flops_per_s_{prec}"]:   # ran outside the timed stream
                        raise PerfmlpError(f"{prec} GEMM {m_} x {n_} x {k_} of H={H}, b={bl}: timed at "
                                           f"{r / 1e12:.0f} TFLOP/s, over the large GEMM's rate: not timed "
                                           "where it ran")
                    res["gemm_flops_per_s"].append({"m": m_, "n": n_, "k": k_, "precision": prec,
                                                    "flops_per_s": float(r)})
                for e in own_kernel_times(cp, net, x, y):   # a shape met again (sgd_update's) keeps its first time
                    own.setdefault((prec, e["kernel"], tuple(e["shape"])), {**e, "precision": prec})
        res["kernel_s"] = list(own.values())
        log(f"{prec}: {sum(e['precision'] == prec for e in res['gemm_flops_per_s'])} trainer GEMM shapes, "
            f"{sum(e['precision'] == prec for e in res['kernel_s'])} own kernel shapes timed (GPU time, queued ahead)")
    return res


def stage_rate(cp, piece_bytes: list[int], log, reps: int = 7) -> dict:
    """host_stage_bytes_per_s: the prefetching pipeline's staging of a
    piece's pageable rows into pinned memory (gpu/prefetch.py's threads, as
    the trainer runs them), at the largest piece, median of reps."""
    import cupyx
    from concurrent.futures import ThreadPoolExecutor
    from ..gpu.prefetch import STAGE_THREADS
    n = max(piece_bytes)
    src = np.random.default_rng(0).integers(0, 255, 4 * n, dtype=np.uint8)   # pageable, a new slice each time
    dst = cupyx.empty_pinned((n,), np.uint8)
    cuts = np.linspace(0, n, STAGE_THREADS + 1).astype(int)
    times = []
    with ThreadPoolExecutor(STAGE_THREADS) as pool:
        for r in range(reps + 1):
            off = (r % 3) * n
            t = time.perf_counter()
            for f in [pool.submit(np.copyto, dst[a:b], src[off + a:off + b]) for a, b in zip(cuts, cuts[1:])]:
                f.result()
            times.append(time.perf_counter() - t)
    bw = n / median(times[1:])
    log(f"host staging of {n} B pageable into pinned ({STAGE_THREADS} threads): {bw / 1e9:.1f} GB/s")
    return {"host_stage_bytes_per_s": bw}
