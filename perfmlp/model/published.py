"""The published-time solver: what the model says of a reference's published
times per batch and what each unknown would have to be (docs/model.md, "The
published times"). The reference's scheme, untraced: 1. on the datasheet
file; 2. with its kernel's rates from a calibrated GPU, scaled
(scaled_kernels); 3. each unknown alone per p (unknowns_alone); 4. the GEMM
rate from the smallest p, then the ring's MPI alpha and bandwidth from the
others (explain). Every value is solved on predict_batch itself, so putting
it back reproduces the published time.
"""
from __future__ import annotations

import dataclasses
import math

from .costs import grad_buffer_bytes, itemsize, op_cost, pieces, step_kernels
from .machine import GemmRate, Machine
from .predict import Prediction, predict_batch
from .. import names as N

REFERENCE_KERNELS = (N.NAIVE, N.TILED, N.REGBLOCK)
ONE_CONSTANT = 1.5   # an unknown whose implied values over p stay within this factor could be one constant


# ---- the model with one number changed --------------------------------------------------

def reference_prediction(machine: Machine, study, procs: int, gemm: str | None = None) -> Prediction:
    """The model's time per batch of the reference's scheme (every product a GEMM) on `machine`."""
    sc = study.scheme
    return predict_batch(machine, study.layer_sizes, study.batch_size, procs, study.precision, sc["comm"],
                         sc["batch_transfer"], exec_mode=sc["exec"], gemm=gemm or sc["gemm"],
                         fuse_output=False)


def with_gemm_rate(machine: Machine, kernel: str, precision: str, flops_per_s: float) -> Machine:
    """`machine` with one rate for every GEMM shape of `kernel`."""
    keep = tuple(g for g in machine.gemm_flops_per_s if not (g.kernel == kernel and g.precision == precision))
    return dataclasses.replace(machine, gemm_flops_per_s=keep + (GemmRate(1, 1, 1, precision, flops_per_s, kernel),))


def with_scaled_kernel(machine: Machine, measured: Machine, kernel: str, ratio: float) -> Machine:
    """`machine` with `measured`'s rates of `kernel` (every shape), times `ratio`."""
    rates = tuple(dataclasses.replace(g, flops_per_s=g.flops_per_s * ratio)
                  for g in measured.gemm_flops_per_s if g.kernel == kernel)
    keep = tuple(g for g in machine.gemm_flops_per_s if g.kernel != kernel)
    return dataclasses.replace(machine, gemm_flops_per_s=keep + rates)


def with_copy_bw(machine: Machine, memory: str, bytes_per_s: float) -> Machine:
    """`machine` with `memory` (pageable, pinned) copies at one bandwidth both ways, no node limit."""
    return dataclasses.replace(machine, **{f"{d}_{memory}_{k}": v for d in ("h2d", "d2h")
                                           for k, v in (("bytes_per_s", bytes_per_s), ("aggregate_bytes_per_s", 0.0))})


def with_mpi(machine: Machine, alpha_s: float, bw_bytes_per_s: float) -> Machine:
    """`machine` with host MPI on the ring model at (alpha, bandwidth), no measured table."""
    return dataclasses.replace(machine, mpi_alpha_s=alpha_s, mpi_bw_bytes_per_s=bw_bytes_per_s,
                               allreduce_s=tuple(p for p in machine.allreduce_s if p.comm != N.MPI))


def solve(f, target: float, lo: float, hi: float, rel: float = 1e-9) -> float | None:
    """x in [lo, hi] (both > 0) with f(x) = target for monotone f, by bisection on log x;
    None when f(lo) and f(hi) do not bracket the target."""
    f_lo, f_hi = f(lo) - target, f(hi) - target
    if f_lo == 0:
        return lo
    if f_lo * f_hi > 0:
        return None
    while hi / lo > 1 + rel:
        mid = math.sqrt(lo * hi)
        f_mid = f(mid) - target
        if f_mid == 0:
            return mid
        if (f_mid > 0) == (f_lo > 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


# ---- what the unknowns would have to be ----------------------------------------------------

# Brackets for the solves: far beyond anything a GPU, a copy or a network does.
RATE_RANGE = (1e6, 1e18)     # FLOP/s
BW_RANGE = (1e5, 1e15)       # bytes/s


def _implied(study, procs: int, target_s: float, changed, bounds: tuple) -> float | None:
    """The x in `bounds` at which the reference's time predicted on changed(x) is target_s."""
    return solve(lambda x: reference_prediction(changed(x), study, procs).total_s, target_s, *bounds)


def implied_gemm_rate(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The one GEMM rate of the reference's kernel that alone gives target_s."""
    k, prec = study.scheme["gemm"], study.precision
    return _implied(study, procs, target_s, lambda r: with_gemm_rate(machine, k, prec, r), RATE_RANGE)


def implied_copy_bw(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The copy bandwidth (the scheme's host memory, both ways) that alone gives target_s."""
    mem = N.PAGEABLE if study.scheme["batch_transfer"] == N.PAGEABLE else N.PINNED
    return _implied(study, procs, target_s, lambda bw: with_copy_bw(machine, mem, bw), BW_RANGE)


def implied_mpi_bw(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The MPI bandwidth (the file's latency) that alone gives target_s (p > 1, host MPI)."""
    if procs <= 1 or study.scheme["comm"] != N.MPI_STAGED:
        return None
    return _implied(study, procs, target_s, lambda bw: with_mpi(machine, machine.mpi_alpha_s, bw), BW_RANGE)


def ring_fit(times_s: dict[int, float], nbytes: int) -> tuple[float, float] | None:
    """(alpha_s, bw_bytes_per_s) of 2(p-1) alpha + 2(p-1)/p n / bw through the times per p
    (least squares); None unless both come out positive."""
    rows = [(2 * (p - 1), 2 * (p - 1) / p * nbytes, t) for p, t in times_s.items() if p > 1]
    if len(rows) < 2:
        return None
    saa = sum(a * a for a, _, _ in rows)
    sab = sum(a * b for a, b, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    sat = sum(a * t for a, _, t in rows)
    sbt = sum(b * t for _, b, t in rows)
    det = saa * sbb - sab * sab
    if det == 0:
        return None
    alpha, inv_bw = (sat * sbb - sbt * sab) / det, (saa * sbt - sab * sat) / det
    if alpha < 0 or inv_bw <= 0:
        return None
    return alpha, 1 / inv_bw


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The GEMM rate from the smallest p, the MPI network from the others."""
    gemm_flops_per_s: float | None
    allreduce_s: dict          # p -> the allreduce time the published time leaves, with that GEMM rate
    network: tuple[float, float] | None   # (alpha_s, bw_bytes_per_s) of the ring through them
    machine: Machine | None    # the datasheet file with both put in

    def predicted_ms(self, study, procs: int) -> float | None:
        return reference_prediction(self.machine, study, procs).total_s * 1e3 if self.machine else None


def explain(machine: Machine, study) -> Explanation:
    """One explanation of every published time (the module docstring's 4)."""
    pub = {p: t * 1e-3 for p, t in study.reference_ms_per_batch.items()}
    p0 = min(pub)
    rate = implied_gemm_rate(machine, study, p0, pub[p0])
    if rate is None:
        return Explanation(None, {}, None, None)
    m = with_gemm_rate(machine, study.scheme["gemm"], study.precision, rate)
    preds = {p: reference_prediction(m, study, p) for p in pub if p > p0}
    # the allreduce adds to the batch as it is
    left = {p: pub[p] - (pred.total_s - pred.terms["allreduce"]) for p, pred in preds.items()}
    net = ring_fit(left, grad_buffer_bytes(study.layer_sizes, itemsize(study.precision))) \
        if study.scheme["comm"] == N.MPI_STAGED else None
    return Explanation(rate, left, net, with_mpi(m, *net) if net else None)


def gemm_effective(pred: Prediction, study, procs: int) -> float:
    """FLOP/s of the step's GEMMs on the largest piece together (their FLOPs over their time)."""
    isz, b = itemsize(study.precision), max(pieces(study.batch_size, procs))
    flops = sum(op_cost(name, shape, isz)[0] for kernels in step_kernels(study.layer_sizes, b, None, isz).values()
                for kernel in kernels for name, shape in kernel if name == "gemm")
    return flops / pred.terms["gemm"] if pred.terms["gemm"] else math.inf


# ---- 2. the reference's kernels measured on another GPU, scaled to the reference's ---------

@dataclasses.dataclass(frozen=True)
class ScaledKernels:
    """The reference's kernels measured on a calibrated GPU, scaled by the fp32 peak and bandwidth ratios."""
    measured: Machine          # the calibrated file the rates come from
    flop_ratio: float
    bw_ratio: float
    machines: dict             # kernel -> {"flop": Machine, "bw": Machine}: the reference file with them


def scaled_kernels(ref: Machine, calibrated: Machine | None, datasheet: Machine,
                   precision: str) -> ScaledKernels | None:
    """The reference kernels the calibrated file has rates for, scaled; None without one, or on the same GPU."""
    if calibrated is None or datasheet.name == ref.name:
        return None
    flop_ratio = ref.peak_flops_per_s(precision) / datasheet.peak_flops_per_s(precision)
    bw_ratio = ref.mem_bw_bytes_per_s / datasheet.mem_bw_bytes_per_s
    machines = {k: {"flop": with_scaled_kernel(ref, calibrated, k, flop_ratio),
                    "bw": with_scaled_kernel(ref, calibrated, k, bw_ratio)}
                for k in REFERENCE_KERNELS if calibrated.has_gemm_kernel(k)}
    return ScaledKernels(calibrated, flop_ratio, bw_ratio, machines)


@dataclasses.dataclass(frozen=True)
class KernelRate:
    """One reference kernel's effective GEMM rate as measured and scaled both ways, with the time per batch."""
    kernel: str
    measured_flops_per_s: float
    flop_scaled_flops_per_s: float
    bw_scaled_flops_per_s: float
    flop_scaled_ms: float
    bw_scaled_ms: float


def kernel_rates(scaled: ScaledKernels, study, procs: int) -> list[KernelRate]:
    out = []
    for k, ms in scaled.machines.items():
        pf, pb = reference_prediction(ms["flop"], study, procs, k), reference_prediction(ms["bw"], study, procs, k)
        measured = reference_prediction(dataclasses.replace(ms["flop"], gemm_flops_per_s=tuple(
            g for g in scaled.measured.gemm_flops_per_s if g.kernel == k)), study, procs, k)
        out.append(KernelRate(k, gemm_effective(measured, study, procs), gemm_effective(pf, study, procs),
                              gemm_effective(pb, study, procs), pf.total_s * 1e3, pb.total_s * 1e3))
    return out


# ---- 3. one unknown alone ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Unknown:
    """What one unknown alone would have to be at each p (None: no value gives it), and the file's value."""
    key: str                   # gemm, copy, mpi
    values: dict               # p -> the implied value, or None
    file_value: float

    @property
    def solved(self) -> dict:
        return {p: v for p, v in self.values.items() if v}

    @property
    def missing(self) -> list:
        return [p for p in self.values if p not in self.solved]

    @property
    def spread(self) -> float | None:
        """The largest implied value over the smallest (None: none solved)."""
        got = self.solved
        return max(got.values()) / min(got.values()) if got else None

    @property
    def explains_every_p(self) -> bool:
        """One constant could give every published time (within ONE_CONSTANT)."""
        return self.spread is not None and not self.missing and self.spread <= ONE_CONSTANT


def unknowns_alone(ref: Machine, study) -> dict[str, Unknown]:
    """The GEMM rate, copy bandwidth and MPI bandwidth, each alone, at every published p."""
    pub = {p: study.reference_ms_per_batch[p] * 1e-3 for p in sorted(study.reference_ms_per_batch)}
    kernel = study.scheme["gemm"]
    mem = N.PAGEABLE if study.scheme["batch_transfer"] == N.PAGEABLE else N.PINNED
    solvers = {"gemm": (implied_gemm_rate, ref.gemm_rate(study.hidden_size, study.batch_size, study.input_size,
                                                         study.precision, kernel=kernel)),
               "copy": (implied_copy_bw, ref.copy_bw("h2d", mem)),
               "mpi": (implied_mpi_bw, ref.mpi_bw_bytes_per_s)}
    return {key: Unknown(key, {p: solve_one(ref, study, p, t) for p, t in pub.items()}, file_value)
            for key, (solve_one, file_value) in solvers.items()}


# ---- 4. the explanation beside the study's assumed networks -------------------------------

def with_networks(ref: Machine, study, gemm_flops_per_s: float, networks) -> list[tuple[object, dict]]:
    """(network, {p: predicted ms}) with the implied GEMM rate and each network's MPI alpha and bandwidth."""
    mg = with_gemm_rate(ref, study.scheme["gemm"], study.precision, gemm_flops_per_s)
    machines = [(n, with_mpi(mg, n.mpi_alpha_s, n.mpi_bw_bytes_per_s)) for n in networks]
    return [(n, {p: reference_prediction(m, study, p).total_s * 1e3 for p in sorted(study.reference_ms_per_batch)})
            for n, m in machines]
