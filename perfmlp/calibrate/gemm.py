"""GEMM rates as GPU time: the large-GEMM rate of each precision (peak_flops_per_s_*, the empirical
compute roof) and the trainer's own GEMMs at its shapes and layouts, recorded from one step
(GpuNetwork.capture) and each relaunched alone, for cuBLAS and, with --gemm-kernels, the reference's
kernels, each over back-to-back calls queued behind a spin kernel (gpu.timing.queued_ahead) so that
the host's dispatch (launch_overhead_s, host.py) is not in it; and the step's own kernels on the same
networks. The tensor-core precisions' step: precision.py."""
from __future__ import annotations

import numpy as np

from ..config import Config
from ..gpu.gemm import cublas_gemm, gemm
from ..gpu.kernels import device_dtype
from ..gpu.network import GpuNetwork
from ..gpu.timing import queued_ahead
from ..mixed import device_view, to_storage
from ..mlp import init_weights
from .kernels import own_kernel_times
from .. import names as N

TENSOR = (N.TF32, N.BF16, N.FP16)
PEAK_N = {N.FLOAT64: 4096}   # n of the large n x n x n GEMM where not 8192


def gemm_rate(cp, call, m: int, n: int, k: int, calls: int = 50) -> float:
    """FLOP/s of an m x n x k GEMM call(), GPU time queued ahead."""
    t, _ = queued_ahead(cp, call, calls)
    return 2 * m * n * k / t


def step_network(cp, sizes, precision, b):
    """A GpuNetwork of `sizes` (cuBLAS) in `precision` for pieces of b samples, with a random piece x
    (b x D) and one-hot labels y (b x C) in its storage type."""
    net = GpuNetwork(cp, sizes, precision, 0.1, 0.0, b, b, N.CUBLAS)
    net.set_params(init_weights(sizes, 0))
    rng = np.random.default_rng(0)
    x = cp.asarray(device_view(to_storage(rng.random((b, sizes[0])), precision)))
    y = cp.asarray(device_view(to_storage(np.eye(sizes[-1])[np.arange(b) % sizes[-1]], precision)))
    return net, x, y


def peak_rate(cp, precision: str, log) -> float:
    """FLOP/s of a large n x n x n cuBLAS GEMM in the precision's storage type (tensor cores: float32 accumulation)."""
    n = PEAK_N.get(precision, 8192)
    def operand():   # random values in the storage type (bfloat16: a float32's top 16 bits)
        f = cp.random.random((n, n), dtype=cp.float32)
        if precision == N.BF16:
            return (f.view(cp.uint32) >> 16).astype(cp.uint16)
        return f.astype(device_dtype(precision))
    a, b, c = operand(), operand(), operand()
    g = cublas_gemm(cp, np.float32 if precision in TENSOR else precision, precision=precision)
    rate = gemm_rate(cp, lambda: g(a, b, c), n, n, n, calls=3)
    log(f"large GEMM {n}^3 {precision}: {rate / 1e12:.{1 if precision in TENSOR else 2}f} TFLOP/s")
    return rate


def peak_rates(cp, precisions, log) -> dict:
    """peak_flops_per_s_float32 and _float64, where asked for."""
    return {f"peak_flops_per_s_{p}": peak_rate(cp, p, log) for p in (N.FLOAT32, N.FLOAT64) if p in precisions}


def captured_gemms(net, x, y) -> list:
    """(a, b, out) of every GEMM one forward and backward of `net` on x, y (b x D, b x C) launches."""
    net.capture = []
    net.forward(x.T)
    net.loss(y.T)
    net.backward()
    captured, net.capture = net.capture, None
    return captured


def step_gemm_rates(cp, net, x, y, kinds) -> list[dict]:
    """gemm_flops_per_s entries of the GEMMs of one step of `net` on x, y with each GEMM kernel of `kinds`."""
    prec = net.dtype.name
    rates, gemms = [], captured_gemms(net, x, y)
    for kind in kinds:
        for a, b, out in gemms:
            m_, k_, n_ = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
            call = (lambda a=a, b=b, out=out, g=cublas_gemm(cp, prec): g(a, b, out)) if kind == N.CUBLAS \
                else (lambda a=a, b=b, out=out, kind=kind: gemm(cp, kind, a, b, out=out))
            r = gemm_rate(cp, call, m_, n_, k_, calls=50 if kind == N.CUBLAS else 10)
            rates.append({"m": m_, "n": n_, "k": k_, "precision": prec, "flops_per_s": float(r),
                          **({"kernel": kind} if kind != N.CUBLAS else {})})
    return rates


def step_shapes(cp, hidden, local_batches, prec: str, gemm_rates, own: dict) -> list[dict]:
    """The gemm_flops_per_s entries gemm_rates(net, x, y, where) gives for the step of 784-H-10 in `prec`
    at each H and per-rank batch; its own kernels' kernel_s entries into `own` (a shape met again, as
    sgd_update's at every b, keeps its first time)."""
    D, C = Config.input_size, Config.num_classes
    rates = []
    for H in hidden:
        for bl in local_batches:
            net, x, y = step_network(cp, (D, H, C), prec, bl)
            rates += gemm_rates(net, x, y, f"H={H}, b={bl}")
            for e in own_kernel_times(cp, net, x, y):
                own.setdefault((e["kernel"], tuple(e["shape"]), prec), {**e, "precision": prec})
    return rates


def step_rates(cp, hidden, local_batches, precisions, log, gemm_kernels=()) -> dict:
    """gemm_flops_per_s and kernel_s of the float32 and float64 steps by GEMM kernel (the reference's: float32)."""
    rates, own = [], {}
    for prec in precisions:
        kinds = (N.CUBLAS, *(gemm_kernels if prec == N.FLOAT32 else ()))
        rates += step_shapes(cp, hidden, local_batches, prec,
                             lambda net, x, y, where: step_gemm_rates(cp, net, x, y, kinds), own)
    log(f"{len(rates)} trainer GEMM shapes timed (GPU time, queued ahead)")
    span: dict = {}
    for e in own.values():
        span.setdefault(e["kernel"], []).append(e["s"] * 1e6)
    log(f"{len(own)} own kernel shapes timed (GPU time, queued ahead): "
        + ", ".join(f"{k} {min(t):.1f}-{max(t):.1f} us" for k, t in span.items()))
    return {"gemm_flops_per_s": rates, "kernel_s": list(own.values())}
