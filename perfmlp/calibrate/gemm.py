"""GEMM rates as GPU time: the large-GEMM rate (peak_flops_per_s_*, the
empirical compute roof) and the trainer's own GEMMs at its shapes and
layouts, for cuBLAS and, with --gemm-kernels, the reference's kernels,
each over back-to-back calls queued behind a spin kernel
(gpu.timing.queued_ahead) so that the host's dispatch (launch_overhead_s,
host.py) is not in it; and the step's own kernels on the same networks."""
from __future__ import annotations

from ..config import Config
from ..gpu.gemm import cublas_gemm, gemm
from ..gpu.network import GpuNetwork
from ..mlp import init_weights
from ..gpu.timing import queued_ahead
from .kernels import own_kernel_times
from .. import names as N

PEAK_SIZES = (("float32", 8192), ("float64", 4096))   # n of the n x n x n GEMM per precision


def gemm_rate(cp, call, m: int, n: int, k: int, calls: int = 50) -> float:
    """FLOP/s of an m x n x k GEMM call(), GPU time queued ahead."""
    t, _ = queued_ahead(cp, call, calls)
    return 2 * m * n * k / t


def step_network(cp, sizes, precision, b):
    """A GpuNetwork of `sizes` (cuBLAS) for pieces of b samples, with a
    random piece x (b x D) and one-hot labels y (b x C)."""
    net = GpuNetwork(cp, sizes, precision, 0.1, 0.0, b, b, N.CUBLAS)
    net.set_params(init_weights(sizes, 0))
    x = cp.random.random((b, sizes[0]), dtype=precision)
    y = cp.zeros((b, sizes[-1]), dtype=precision)
    y[cp.arange(b), cp.arange(b) % sizes[-1]] = 1
    return net, x, y


def peak_rates(cp, precisions, log) -> dict:
    """peak_flops_per_s_<precision>: the rate of a large square cuBLAS GEMM."""
    res = {}
    for prec, n in PEAK_SIZES:
        if prec not in precisions:
            continue
        a = cp.random.random((n, n), dtype=prec)
        b = cp.random.random((n, n), dtype=prec)
        c = cp.empty((n, n), dtype=prec)
        g = cublas_gemm(cp, prec)
        res[f"peak_flops_per_s_{prec}"] = gemm_rate(cp, lambda: g(a, b, c), n, n, n, calls=3)
        log(f"large GEMM {n}^3 {prec}: {res[f'peak_flops_per_s_{prec}'] / 1e12:.2f} TFLOP/s")
    return res


def step_gemm_rates(cp, net, x, y, kinds) -> list[dict]:
    """The rates of the GEMMs one forward and backward of `net` on x, y
    launches (recorded through net.capture, then each relaunched alone),
    with each GEMM kernel of `kinds`: gemm_flops_per_s entries."""
    prec = net.dtype.name
    net.capture = []
    net.forward(x.T); net.loss(y.T); net.backward()
    captured, net.capture = net.capture, None
    rates = []
    for kind in kinds:
        for a, b, out in captured:
            m_, k_, n_ = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
            call = (lambda a=a, b=b, out=out, g=cublas_gemm(cp, prec): g(a, b, out)) if kind == N.CUBLAS \
                else (lambda a=a, b=b, out=out, kind=kind: gemm(cp, kind, a, b, out=out))
            r = gemm_rate(cp, call, m_, n_, k_, calls=50 if kind == N.CUBLAS else 10)
            rates.append({"m": m_, "n": n_, "k": k_, "precision": prec, "flops_per_s": float(r),
                          **({"kernel": kind} if kind != N.CUBLAS else {})})
    return rates


def step_rates(cp, hidden, local_batches, precisions, log, gemm_kernels=()) -> dict:
    """The trainer's GEMMs, with its layouts, and the step's own kernels at
    the same shapes, as GPU time: one network per (precision, H, b), whose
    step's GEMM calls are recorded once and timed with each GEMM kernel (the
    reference's in float32 only); an own kernel's shape met again, as
    sgd_update's at every b, keeps its first time. gemm_flops_per_s and
    kernel_s."""
    D, C = Config.input_size, Config.num_classes
    rates, own = [], {}
    for prec in precisions:
        kinds = (N.CUBLAS, *(gemm_kernels if prec == N.FLOAT32 else ()))
        for H in hidden:
            for bl in local_batches:
                net, x, y = step_network(cp, (D, H, C), prec, bl)
                rates += step_gemm_rates(cp, net, x, y, kinds)
                for e in own_kernel_times(cp, net, x, y):
                    own.setdefault((e["kernel"], tuple(e["shape"]), e["precision"]), e)
    log(f"{len(rates)} trainer GEMM shapes timed (GPU time, queued ahead)")
    span: dict = {}
    for e in own.values():
        span.setdefault(e["kernel"], []).append(e["s"] * 1e6)
    log(f"{len(own)} own kernel shapes timed (GPU time, queued ahead): "
        + ", ".join(f"{k} {min(t):.1f}-{max(t):.1f} us" for k, t in span.items()))
    return {"gemm_flops_per_s": rates, "kernel_s": list(own.values())}
