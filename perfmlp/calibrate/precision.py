"""The tensor-core precisions (tf32, bf16, fp16: model/precision.py) as GPU time, by gemm.py's method: the
large-GEMM rate of each, the trainer's GEMMs at its shapes and layouts (16-bit operands and results, the
weight gradients in float32) through the step's own handle, and its own kernels on 16-bit storage; and
the prefetching pipeline's host staging rate (host_stage_bytes_per_s: gpu/prefetch.py's threads copying
pageable rows into pinned memory)."""
from __future__ import annotations

import time
from statistics import median

import numpy as np

from ..errors import PerfmlpError
from .gemm import TENSOR, captured_gemms, gemm_rate, peak_rate, step_shapes


def tensor_gemm_rates(cp, net, x, y, prec: str, peak: float, where: str) -> list[dict]:
    """gemm_flops_per_s entries of one step's GEMMs in a tensor-core precision, through the step's handle
    on its stream; a rate over 1.5 x `peak` is an error (it ran outside the timed stream)."""
    rates = []
    for a, b, out in captured_gemms(net, x, y):
        m_, k_, n_ = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
        try:
            with net.stream:   # the spin and the events where the step's handle launches
                r = gemm_rate(cp, lambda a=a, b=b, out=out: net.gemm_again(a, b, out), m_, n_, k_)
        except PerfmlpError as e:
            raise PerfmlpError(f"{prec} GEMM {m_} x {n_} x {k_} of {where} "
                               f"({a.dtype}{'' if a.flags.c_contiguous else ' transposed'} x "
                               f"{b.dtype}{'' if b.flags.c_contiguous else ' transposed'} -> "
                               f"{out.dtype}): {e}") from None
        if r > 1.5 * peak:
            raise PerfmlpError(f"{prec} GEMM {m_} x {n_} x {k_} of {where}: timed at {r / 1e12:.0f} TFLOP/s, "
                               "over the large GEMM's rate: not timed where it ran")
        rates.append({"m": m_, "n": n_, "k": k_, "precision": prec, "flops_per_s": float(r)})
    return rates


def precision_rates(cp, hidden, local_batches, precisions, log) -> dict:
    """For each tensor-core precision asked for: peak_flops_per_s_<p>, and gemm_flops_per_s and kernel_s
    entries of the step of 784-H-10 at each H and per-rank batch."""
    res: dict = {"gemm_flops_per_s": [], "kernel_s": []}
    own: dict = {}
    for prec in (p for p in precisions if p in TENSOR):
        res[f"peak_flops_per_s_{prec}"] = peak = peak_rate(cp, prec, log)
        res["gemm_flops_per_s"] += step_shapes(
            cp, hidden, local_batches, prec,
            lambda net, x, y, where: tensor_gemm_rates(cp, net, x, y, prec, peak, where), own)
        res["kernel_s"] = list(own.values())
        log(f"{prec}: {sum(e['precision'] == prec for e in res['gemm_flops_per_s'])} trainer GEMM shapes, "
            f"{sum(e['precision'] == prec for e in res['kernel_s'])} own kernel shapes timed (GPU time, queued ahead)")
    return res


def stage_rate(cp, piece_bytes: list[int], log, reps: int = 7) -> dict:
    """host_stage_bytes_per_s: the prefetch threads staging the largest piece's pageable rows into pinned memory."""
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
