"""A NumPy run's time per batch on a CPU, from a CPU machine file (machine/files.py).

The step's unfused kernels on the slowest rank's piece, in the GPU model's
terms: gemm (`gemm_rate`), elementwise (`pass_rate`), launches
(kernel_host_s a kernel), tracing, allreduce (MPI in place) and rank_wait
(the slowest of p draws of the step's spread: `slowest_of`); no copies. A
rate measured at (threads, ranks) is used as it is, else the nearest family
in cores per rank, scaled by the cores each rank gets. The interval draws
each term's source (SOURCE_TERMS) as model/interval.py does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import names as N
from ..costs import grad_buffer_bytes, itemsize, kernel_name, kernel_shape, op_cost, pieces, step_kernels
from ..interval import DRAWS, LEVEL, SEED
from ..roofline import modified_roofline, standard_roofline
from .exchange import _interpolated, ring_allreduce_s
from ..machine import PAGEABLE_MODEL_ERROR_SOURCES
from .batch import Prediction

PRECISIONS = (N.FLOAT32, N.FLOAT64)
GEMM, ELEMENTWISE, LAUNCHES, TRACING, RANK_WAIT = "gemm", "elementwise", "launches", "tracing", "rank_wait"
TERMS = (GEMM, ELEMENTWISE, LAUNCHES, TRACING, N.ALLREDUCE, RANK_WAIT)
SOURCE_TERMS = {"blas": (GEMM,), "memory": (ELEMENTWISE,), "host": (LAUNCHES, TRACING), "collective": (N.ALLREDUCE,)}


@dataclass(frozen=True)
class Setting:
    """How a NumPy run shares the machine: ranks, BLAS threads per rank, cores."""
    procs: int
    threads: int
    cores: int

    @property
    def oversubscribed(self) -> bool:
        return self.procs * self.threads > self.cores


def _family(entries, precision: str, s: Setting, threaded: bool):
    """The entries of the measured (threads, ranks) family nearest to s, and the factor its rates take."""
    own = [e for e in entries if e["precision"] == precision]
    if not own:
        raise ValueError(f"the machine file has no {precision} entries")

    def per_rank(t, p):
        return min(t, s.cores / p) if threaded else min(1.0, s.cores / p)
    want = per_rank(s.threads, s.procs)
    keys = sorted({(e["threads"], e["ranks"]) for e in own},
                  key=lambda k: (k != (s.threads, s.procs), abs(math.log(per_rank(*k) / want)),
                                 abs(k[0] - s.threads), abs(k[1] - s.procs)))
    t, p = keys[0]
    factor = 1.0 if (t, p) == (s.threads, s.procs) else want / per_rank(t, p)
    return [e for e in own if (e["threads"], e["ranks"]) == (t, p)], factor


def gemm_rate(machine, shape, precision: str, s: Setting) -> float:
    """FLOP/s of an (m, n, k) GEMM: geometric mean of the four nearest entries in log-shape
    space, weighted by inverse squared distance, times the family's factor."""
    fam, factor = _family(machine["gemm_flops_per_s"], precision, s, threaded=True)
    dist = [(sum(math.log(a / b) ** 2 for a, b in zip((e["m"], e["n"], e["k"]), shape)), e["flops_per_s"])
            for e in fam]
    dist.sort(key=lambda d: d[0])
    if dist[0][0] == 0:
        return dist[0][1] * factor
    near = dist[:4]
    w = [1 / d for d, _ in near]
    return math.exp(sum(wi * math.log(r) for wi, (_, r) in zip(w, near)) / sum(w)) * factor


def pass_rate(machine, kernel: str, nbytes: int, precision: str, s: Setting) -> float:
    """Bytes/s of a kernel's pass over nbytes: log-log between the family's sizes."""
    fam, factor = _family(machine["pass_bytes_per_s"], precision, s, threaded=False)
    pts = sorted((e["bytes"], e["bytes_per_s"]) for e in fam if e["kernel"] == kernel)
    if not pts:
        raise ValueError(f"the machine file has no {precision} pass of {kernel}")
    return _interpolated(pts, nbytes) * factor


def allreduce_s(machine, nbytes: int, procs: int) -> float:
    """One in-place MPI allreduce over procs local ranks: the measured table, else the ring."""
    pts = sorted((e["bytes"], e["s"]) for e in machine.get("allreduce_s", ()) if e["procs"] == procs)
    if procs <= 1:
        return _interpolated(pts, nbytes)
    alpha, bw = machine.get("mpi_alpha_s"), machine.get("mpi_bw_bytes_per_s")
    if alpha is None or bw is None:
        if not pts:
            raise ValueError(f"the machine file has no allreduce on {procs} ranks and no ring fit")
        return _interpolated(pts, nbytes)
    ring = lambda n: ring_allreduce_s(n, procs, alpha, bw)  # noqa: E731
    return _interpolated(pts, nbytes, ring) if pts else ring(nbytes)


def ratios_of(machine, source: str) -> tuple:
    """A spread source's sorted ratios ((): none measured)."""
    return tuple(sorted(next((e["ratios"] for e in machine.get("spread", ()) if e["source"] == source), ())))


def slowest_of(ratios, p: int) -> float:
    """The median of the largest of p draws from sorted ratios: their quantile 0.5 ** (1 / p)."""
    q = 0.5 ** (1.0 / p) * (len(ratios) - 1)
    return float(np.interp(q, np.arange(len(ratios)), ratios))


def step_flops(layer_sizes, b: int, precision: str) -> int:
    """FLOPs of one step on a piece of b samples (costs' count)."""
    w = itemsize(precision)
    return sum(op_cost(op, sh, w)[0] for ks in step_kernels(layer_sizes, b, None, w, fuse_output=False).values()
               for k in ks for op, sh in k)


def setting_of(machine, procs: int, threads: int | None) -> Setting:
    """A run's ranks, BLAS threads per rank (default: the trainer's rule) and cores."""
    cores = int(machine["cores"])
    if threads is None:
        threads = int(machine["default_threads"]) if procs == 1 else max(1, cores // int(procs))
    return Setting(int(procs), int(threads), cores)


def compute_terms(machine, layer_sizes, b: int, precision: str, s: Setting) -> tuple[dict, int]:
    """(gemm, elementwise, launches seconds; kernels) of one step on a piece of b samples."""
    w = itemsize(precision)
    out = {GEMM: 0.0, ELEMENTWISE: 0.0, LAUNCHES: 0.0}
    kernels = [k for ks in step_kernels(layer_sizes, b, None, w, fuse_output=False).values() for k in ks]
    for kernel in kernels:
        name, shape = kernel_name(kernel), kernel_shape(kernel)
        if name == GEMM:
            out[GEMM] += op_cost(GEMM, shape, w)[0] / gemm_rate(machine, shape, precision, s)
        else:
            nbytes = sum(op_cost(op, sh, w)[1] for op, sh in kernel)
            out[ELEMENTWISE] += nbytes / pass_rate(machine, name, nbytes, precision, s)
    out[LAUNCHES] = len(kernels) * machine.get("kernel_host_s", 0.0) / min(1.0, s.cores / s.procs)
    return out, len(kernels)


def predict_cpu(machine, layer_sizes, batch: int, procs: int = 1, threads: int | None = None,
                precision: str = N.FLOAT32, traced: bool = True) -> Prediction:
    """Time per batch of a NumPy run over `procs` local ranks of `threads` BLAS threads each."""
    if precision not in PRECISIONS:
        raise ValueError(f"a NumPy run computes in {N.FLOAT32} or {N.FLOAT64}, not {precision}")
    if procs < 1 or batch < procs:
        raise ValueError(f"{procs} ranks cannot split a batch of {batch}")
    s = setting_of(machine, procs, threads)
    b = max(pieces(batch, procs))
    terms, kernels = compute_terms(machine, layer_sizes, b, precision, s)
    terms[TRACING] = machine.get("trace_batch_host_s", 0.0) / min(1.0, s.cores / s.procs) if traced else 0.0
    nbytes = grad_buffer_bytes(layer_sizes, itemsize(precision))
    terms[N.ALLREDUCE] = allreduce_s(machine, nbytes, procs)
    step = ratios_of(machine, "step")
    compute = terms[GEMM] + terms[ELEMENTWISE] + terms[LAUNCHES] + terms[TRACING]
    # the quantile 0.5 ** (1 / p) grows with p: the wait is never negative
    terms[RANK_WAIT] = compute * (slowest_of(step, procs) - slowest_of(step, 1)) if procs > 1 and step else 0.0
    total = sum(terms.values())
    detail = {"procs": s.procs, "threads": s.threads, "cores": s.cores, "oversubscribed": s.oversubscribed,
              "kernels": kernels, "bytes_mpi": nbytes, "interval_s": interval_s(machine, terms)}
    return Prediction(terms=terms, total_s=total, overlapped_s=total,
                      flops_per_rank=step_flops(layer_sizes, b, precision),
                      flops_job=sum(step_flops(layer_sizes, pb, precision) for pb in pieces(batch, procs)),
                      bytes_copied_per_rank=0, machine=str(machine.get("name", "")), detail=detail)


def interval_s(machine, terms: dict) -> tuple[float, float] | None:
    """The 90% interval of the total; None where no source has spread."""
    rng = np.random.default_rng(SEED)

    def draws(r):   # DRAWS factors from the sorted ratios r, linear between them
        return np.interp(rng.random(DRAWS) * (len(r) - 1), np.arange(len(r)), r)
    totals = np.full(DRAWS, sum(terms.values()))
    drawn = False
    for source, names in SOURCE_TERMS.items():
        r, t = ratios_of(machine, source), sum(terms.get(n, 0.0) for n in names)
        if len(r) >= 2 and t:
            totals += t * (draws(r) - 1.0)
            drawn = True
    if not drawn:
        return None
    model = ratios_of(machine, PAGEABLE_MODEL_ERROR_SOURCES[N.EAGER])
    if len(model) >= 2:   # the model's blind error: the whole total's factor
        totals *= draws(model)
    lo, hi = np.percentile(totals, LEVEL)
    return float(lo), float(hi)


def cpu_ceilings(machine, precision: str = N.FLOAT32, procs: int = 1, threads: int | None = None) -> dict:
    """One rank's roofline ceilings: its share of the GEMM peak and memory bandwidth, and MPI's."""
    s = setting_of(machine, procs, threads)
    share = min(s.threads, s.cores / s.procs) / s.cores   # the cores a rank's BLAS gets
    bw = machine.get("mpi_bw_bytes_per_s")
    return {"peak_flops_per_s": machine[f"peak_flops_per_s_{precision}"] * share,
            "mem_bw_bytes_per_s": machine["mem_bw_bytes_per_s"] * min(1.0, s.cores / s.procs),  # one NumPy thread
            "copy_bytes_per_s": bw}


def roofline_rates(machine, ai_mem: float, ai_copy: float, precision: str = N.FLOAT32, procs: int = 1,
                   threads: int | None = None) -> dict:
    """The standard roofline at FLOPs per memory byte, the modified one per exchanged byte."""
    c = cpu_ceilings(machine, precision, procs, threads)
    out = {"standard": float(standard_roofline(ai_mem, c["peak_flops_per_s"], c["mem_bw_bytes_per_s"]))}
    if c["copy_bytes_per_s"]:
        out["modified"] = float(modified_roofline(ai_copy, c["peak_flops_per_s"], c["copy_bytes_per_s"]))
    return out


@dataclass(frozen=True)
class Alternative:
    """A change to a NumPy run and its prediction (ranked per sample)."""
    change: dict              # the setting changed: procs, threads, batch, precision
    prediction: Prediction
    batch: int

    @property
    def s_per_sample(self) -> float:
        return self.prediction.total_s / self.batch


def cpu_alternatives(machine, layer_sizes, batch: int, procs: int = 1, threads: int | None = None,
                     precision: str = N.FLOAT32, traced: bool = True) -> list[Alternative]:
    """The run as it is (change {}) and each single change the CPU offers, fastest per sample first."""
    s = setting_of(machine, procs, threads)
    base = {"batch": batch, "procs": s.procs, "threads": s.threads, "precision": precision}
    changes = [{}] + [{"procs": p} for p in range(1, s.cores + 1) if p != s.procs] \
        + [{"threads": t} for t in range(1, s.cores + 1) if t != s.threads] \
        + [{"batch": b} for b in (batch // 2, batch * 2) if b >= max(1, s.procs)] \
        + [{"precision": p} for p in PRECISIONS if p != precision]
    out = []
    for change in changes:
        c = {**base, **change}
        try:
            pred = predict_cpu(machine, layer_sizes, c["batch"], c["procs"], c["threads"], c["precision"], traced)
        except ValueError:
            continue          # a setting the file cannot price (no entries of that precision): not offered
        out.append(Alternative(change, pred, c["batch"]))
    return sorted(out, key=lambda a: a.s_per_sample)
