"""A table no one here wrote: the reference's published times per batch
beside the model, which terms explain them, and what each unknown would
have to be (docs/model.md, "The published times").

The study names the published times (reference_ms_per_batch, per p), the
reference GPU's machine file (datasheet figures only) and the reference's
scheme (its own GEMM kernel, pageable copies, gradients through host MPI).
The section computes, for that scheme, untraced:
1. the model's terms on the datasheet file, where the reference's kernel has
   no rate and is priced at the peak;
2. the same with that kernel's rates measured on the report's calibrated GPU,
   scaled to the reference GPU by the two datasheets' fp32 peak ratio (and,
   as the other bound, their memory-bandwidth ratio);
3. per p, the value one unknown alone would need to give the published time,
   everything else as the datasheet file says: the kernel's GEMM rate (one
   rate for every shape), the pageable copy bandwidth, the MPI bandwidth;
4. one explanation of all p: the GEMM rate that gives p = 1 (no allreduce
   there), then the MPI latency and bandwidth that, with that rate, give the
   other p (the ring model, alpha-beta, solved from the allreduce time each p
   leaves), set beside the study's assumed networks.
Every implied value is solved on predict_batch itself (bisection on the
predicted total), so putting it back reproduces the published time.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..model.costs import grad_buffer_bytes, itemsize, op_cost, pieces, step_kernels
from ..model.machine import GemmRate, Machine, MachineError, load_machine
from ..model.predict import Prediction, predict_batch
from .analysis import Analysis
from .sections import Section, Table

TERM_NAMES = ("h2d_batch", "gemm", "elementwise", "kernel_gaps", "launches", "d2h_grad", "allreduce", "h2d_grad")
REFERENCE_KERNELS = ("naive", "tiled", "regblock")
ONE_CONSTANT = 1.5   # an unknown whose implied values over p stay within this factor could be one constant
CLOSE = 0.25         # a prediction within this fraction of the published time "accounts for" it


# ---- the model with one number changed --------------------------------------------------

def reference_prediction(machine: Machine, study, procs: int, gemm: str | None = None) -> Prediction:
    """The model's time per batch of the reference's scheme on `machine`
    (`gemm`: another GEMM kernel than the scheme's). The reference's step
    runs every product as a GEMM: no fused output backward."""
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
                               allreduce_s=tuple(p for p in machine.allreduce_s if p.comm != "mpi"))


def solve(f, target: float, lo: float, hi: float, rel: float = 1e-9) -> float | None:
    """x in [lo, hi] (both > 0) with f(x) = target for f monotone and
    continuous, by bisection on log x; None when f(lo) and f(hi) do not
    bracket the target."""
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


def implied_gemm_rate(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The one GEMM rate of the reference's kernel that alone gives target_s."""
    k, prec = study.scheme["gemm"], study.precision
    return solve(lambda r: reference_prediction(with_gemm_rate(machine, k, prec, r), study, procs).total_s,
                 target_s, *RATE_RANGE)


def implied_copy_bw(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The copy bandwidth (the scheme's host memory, both ways) that alone gives target_s."""
    mem = "pageable" if study.scheme["batch_transfer"] == "pageable" else "pinned"
    return solve(lambda bw: reference_prediction(with_copy_bw(machine, mem, bw), study, procs).total_s,
                 target_s, *BW_RANGE)


def implied_mpi_bw(machine: Machine, study, procs: int, target_s: float) -> float | None:
    """The MPI bandwidth (the file's latency) that alone gives target_s (p > 1, host MPI)."""
    if procs <= 1 or study.scheme["comm"] != "mpi-staged":
        return None
    return solve(lambda bw: reference_prediction(with_mpi(machine, machine.mpi_alpha_s, bw), study, procs).total_s,
                 target_s, *BW_RANGE)


def ring_fit(times_s: dict[int, float], nbytes: int) -> tuple[float, float] | None:
    """(alpha_s, bw_bytes_per_s) of the host ring allreduce, 2(p-1) alpha +
    2(p-1)/p n / bw, through the allreduce times per p (exact for two p,
    least squares for more); None unless both come out positive."""
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
    """One explanation of every published time (see the module docstring, 4)."""
    pub = {p: t * 1e-3 for p, t in study.reference_ms_per_batch.items()}
    p0 = min(pub)
    rate = implied_gemm_rate(machine, study, p0, pub[p0])
    if rate is None:
        return Explanation(None, {}, None, None)
    m = with_gemm_rate(machine, study.scheme["gemm"], study.precision, rate)
    left = {}
    for p, t in pub.items():
        if p > p0:
            pred = reference_prediction(m, study, p)
            left[p] = t - (pred.total_s - pred.terms["allreduce"])   # the allreduce adds to the batch as it is
    net = ring_fit(left, grad_buffer_bytes(study.layer_sizes, itemsize(study.precision))) \
        if study.scheme["comm"] == "mpi-staged" else None
    return Explanation(rate, left, net, with_mpi(m, *net) if net else None)


# ---- the section ---------------------------------------------------------------------------

def _ms(pred: Prediction) -> float:
    return pred.total_s * 1e3


def gemm_flops(study, procs: int) -> int:
    """FLOPs of the GEMMs of one step on the largest piece."""
    isz = itemsize(study.precision)
    b = max(pieces(study.batch_size, procs))
    return sum(op_cost(name, shape, isz)[0] for kernels in step_kernels(study.layer_sizes, b, None, isz).values()
               for kernel in kernels for name, shape in kernel if name == "gemm")


def gemm_effective(pred: Prediction, study, procs: int) -> float:
    """FLOP/s of the step's GEMMs together (their FLOPs over their time)."""
    return gemm_flops(study, procs) / pred.terms["gemm"] if pred.terms["gemm"] else math.inf


def section_published(a: Analysis) -> Section | None:
    st = a.study
    if not st.reference_machine:
        return None
    try:
        ref = load_machine(st.reference_machine)
    except MachineError as e:
        s = Section("The reference's published times beside the model")
        s.paragraphs.append(f"No reference machine file: {e}.")
        return s
    sc, kernel, prec = st.scheme, st.scheme["gemm"], st.precision
    procs = sorted(st.reference_ms_per_batch)
    pub = {p: st.reference_ms_per_batch[p] for p in procs}
    s = Section("The reference's published times beside the model")
    scheme = (f"{sc['batch_transfer']} copies, {sc['comm']}, {sc['exec']}, GEMM kernel {kernel}")
    s.paragraphs.append(
        f"{st.title}: the reference's published solution took {', '.join(f'{pub[p]:g}' for p in procs)} ms per "
        f"batch on {', '.join(map(str, procs))} {st.reference_gpu} GPUs (D={st.input_size}, H={st.hidden_size}, "
        f"B={st.batch_size} split, {st.precision}). Its scheme as the study states it ({Path(st.path).name}): "
        f"{scheme}; the model's terms for it below are untraced, on {ref.name} ({Path(ref.path).name}: "
        f"{ref.source}). Each implied value below is solved on the model itself, so putting it back gives the "
        "published time (tests/test_published.py holds it to 1%).")

    # 1-2. the model's terms: datasheet; the kernel's calibrated rates scaled
    base = {p: reference_prediction(ref, st, p) for p in procs}
    variants = [("datasheet file" + (f" ({kernel} has no rate: priced at the peak)"
                                     if not ref.has_gemm_kernel(kernel) else ""), ref)]
    cal, ds = a.machines.calibrated, a.machines.datasheet
    scaled = {}
    if cal is not None and ds.name != ref.name:
        flop_ratio = ref.peak_flops_per_s(prec) / ds.peak_flops_per_s(prec)
        bw_ratio = ref.mem_bw_bytes_per_s / ds.mem_bw_bytes_per_s
        for k in REFERENCE_KERNELS:
            if cal.has_gemm_kernel(k):
                scaled[k] = {"flop": with_scaled_kernel(ref, cal, k, flop_ratio),
                             "bw": with_scaled_kernel(ref, cal, k, bw_ratio)}
        if kernel in scaled:
            variants.append((f"{kernel} rates measured on {cal.name}, x {flop_ratio:.3f} (fp32 peak ratio)",
                             scaled[kernel]["flop"]))
    rows = []
    for name, m in variants:
        for p in procs:
            pred = base[p] if m is ref else reference_prediction(m, st, p)
            row = {"GPUs": p, "model": name, "published ms": pub[p], "predicted ms": _ms(pred),
                   "published / predicted": pub[p] / _ms(pred)}
            row.update({f"{t} ms": pred.terms[t] * 1e3 for t in TERM_NAMES})
            rows.append(row)
    ratios = [pub[p] / _ms(base[p]) for p in procs]
    trend = ("falling" if all(_ms(base[q]) < _ms(base[p]) for p, q in zip(procs, procs[1:])) else
             "rising" if all(_ms(base[q]) > _ms(base[p]) for p, q in zip(procs, procs[1:])) else "not monotone")
    pub_trend = ("rising" if all(pub[q] > pub[p] for p, q in zip(procs, procs[1:])) else
                 "falling" if all(pub[q] < pub[p] for p, q in zip(procs, procs[1:])) else "not monotone")
    s.paragraphs.append(
        f"The datasheet file predicts {', '.join(f'{_ms(base[p]):.2f}' for p in procs)} ms: "
        f"{min(ratios):.1f}-{max(ratios):.1f}x too fast, and {trend} with p where the published time is "
        f"{pub_trend}. Its GEMM term is {base[procs[0]].terms['gemm'] * 1e3:.2f} ms at p = {procs[0]} (the "
        f"peak, {ref.peak_flops_per_s(prec) / 1e12:.1f} TFLOP/s); the copies, at "
        f"{ref.h2d_pageable_bytes_per_s / 1e9:g} GB/s, "
        f"{sum(base[procs[0]].terms[t] for t in ('h2d_batch', 'd2h_grad', 'h2d_grad')) * 1e3:.2f} ms.")
    s.tables.append(Table("published_terms", f"The reference's scheme on {ref.name}: the model's terms beside "
                          "the published time per batch", rows))

    # 3. one unknown alone, per p
    unknowns = []
    alone = {"gemm": {p: implied_gemm_rate(ref, st, p, pub[p] * 1e-3) for p in procs},
             "copy": {p: implied_copy_bw(ref, st, p, pub[p] * 1e-3) for p in procs},
             "mpi": {p: implied_mpi_bw(ref, st, p, pub[p] * 1e-3) for p in procs}}
    mem = "pageable" if sc["batch_transfer"] == "pageable" else "pinned"
    for key, what, unit, scale, file_value in (
            ("gemm", f"{kernel} GEMM rate (one for every shape)", "TFLOP/s", 1e12, ref.gemm_rate(
                st.hidden_size, st.batch_size, st.input_size, prec, kernel=kernel)),
            ("copy", f"{mem} copy bandwidth, both ways", "GB/s", 1e9, ref.copy_bw("h2d", mem)),
            ("mpi", f"MPI allreduce bandwidth (latency {ref.mpi_alpha_s * 1e6:g} us)", "GB/s", 1e9,
             ref.mpi_bw_bytes_per_s)):
        row = {"unknown, alone": what, "unit": unit, "the file's": file_value / scale}
        for p in procs:
            v = alone[key][p]
            row[f"p={p}"] = v / scale if v is not None else (
                "-" if key == "mpi" and p <= 1 else "none: the other terms alone exceed it")
        unknowns.append(row)
    s.tables.append(Table("published_unknowns", "What one unknown alone would have to be for the model to give "
                          "each published time (the other terms as the datasheet file says)", unknowns))
    words = {"gemm": "the GEMM rate", "copy": "the copy bandwidth", "mpi": "the MPI bandwidth"}
    each, explains = [], []
    for key in ("gemm", "copy", "mpi"):
        got = {p: v for p, v in alone[key].items() if v}
        missing = [p for p in procs if p not in got]
        spread = max(got.values()) / min(got.values()) if got else None
        if spread is not None and not missing and spread <= ONE_CONSTANT:
            explains.append(words[key])
        each.append(f"{words[key]} " + (f"would take values {spread:.1f}x apart over p = {', '.join(map(str, got))}"
                                         if spread is not None and len(got) > 1 else
                                         f"gives p = {', '.join(map(str, got))}" if got else "gives no p") +
                    (f" and cannot give p = {', '.join(map(str, missing))}" if missing else ""))
    s.paragraphs.append(
        (f"One unknown alone could explain every p within {ONE_CONSTANT:g}x: {', '.join(explains)} ("
         if explains else "No one unknown alone explains every p (") + "; ".join(each) +
        "). The GEMM and copy terms shrink with the piece (B/p), so a time that rises with p must come from what "
        "grows with p, the exchange, and the p = 1 time (no exchange) from the rest.")

    # 4. one explanation of every p
    ex = explain(ref, st)
    if ex.gemm_flops_per_s is None:
        s.paragraphs.append(f"No GEMM rate explains p = {procs[0]}: the other terms alone exceed it.")
        return s
    p0 = procs[0]
    frac = ex.gemm_flops_per_s / ref.peak_flops_per_s(prec)
    text = (f"One explanation. At p = {p0} there is no allreduce: the GEMMs at {ex.gemm_flops_per_s / 1e12:.2f} "
            f"TFLOP/s ({100 * frac:.1f}% of the {ref.peak_flops_per_s(prec) / 1e12:.1f} TFLOP/s peak) give "
            f"{pub[p0]:g} ms. With that rate (the GEMM term then falls as 1/p), the allreduce would have to take "
            + ", ".join(f"{t * 1e3:.2f} ms at p = {p}" for p, t in ex.allreduce_s.items()) + ".")
    nbytes = grad_buffer_bytes(st.layer_sizes, itemsize(prec))
    if ex.network:
        alpha, bw = ex.network
        text += (f" The host ring allreduce of the {nbytes:,}-byte gradient buffer, 2(p-1) alpha + 2(p-1)/p n / bw, "
                 f"through those times: alpha = {alpha * 1e6:.1f} us, bw = {bw / 1e9:.3f} GB/s "
                 f"({8 * bw / 1e9:.2f} Gb/s)")
        nets = sorted(st.networks, key=lambda n: n.mpi_bw_bytes_per_s)
        below = [n for n in nets if n.mpi_bw_bytes_per_s <= bw]
        above = [n for n in nets if n.mpi_bw_bytes_per_s > bw]
        if nets:
            text += (": " + (f"between {below[-1].name} and {above[0].name}" if below and above else
                             f"slower than {above[0].name}" if above else f"faster than {below[-1].name}") +
                     " of the study's assumed networks (bandwidth), against the datasheet file's "
                     f"{ref.mpi_bw_bytes_per_s / 1e9:g} GB/s and {ref.mpi_alpha_s * 1e6:g} us.")
        else:
            text += "."
    else:
        text += " No ring allreduce with a positive latency and bandwidth goes through those times."
    s.paragraphs.append(text)
    erows = []
    if ex.machine:
        erows.append({"model": "implied: GEMM rate from p = %d, network from the rest" % p0,
                      "GEMM TFLOP/s": ex.gemm_flops_per_s / 1e12, "MPI alpha us": ex.network[0] * 1e6,
                      "MPI GB/s": ex.network[1] / 1e9,
                      **{f"p={p} ms": ex.predicted_ms(st, p) for p in procs},
                      **{f"p={p} error %": 100 * (ex.predicted_ms(st, p) / pub[p] - 1) for p in procs}})
    mg = with_gemm_rate(ref, kernel, prec, ex.gemm_flops_per_s)
    for n in st.networks:
        m = with_mpi(mg, n.mpi_alpha_s, n.mpi_bw_bytes_per_s)
        t = {p: _ms(reference_prediction(m, st, p)) for p in procs}
        erows.append({"model": f"GEMM rate from p = {p0}, {n.name} (assumed)", "GEMM TFLOP/s": ex.gemm_flops_per_s / 1e12,
                      "MPI alpha us": n.mpi_alpha_s * 1e6, "MPI GB/s": n.mpi_bw_bytes_per_s / 1e9,
                      **{f"p={p} ms": t[p] for p in procs},
                      **{f"p={p} error %": 100 * (t[p] / pub[p] - 1) for p in procs}})
    erows.append({"model": "published", **{f"p={p} ms": pub[p] for p in procs}})
    s.tables.append(Table("published_explained", "The implied GEMM rate and network against the published times, "
                          "and the same GEMM rate with each of the study's assumed networks", erows))

    # the implied rate against the reference kernels measured here
    if scaled:
        krows = []
        for k, ms in scaled.items():
            pf, pb = reference_prediction(ms["flop"], st, p0, k), reference_prediction(ms["bw"], st, p0, k)
            measured = reference_prediction(dataclasses.replace(ms["flop"], gemm_flops_per_s=tuple(
                g for g in cal.gemm_flops_per_s if g.kernel == k)), st, p0, k)
            krows.append({"kernel": k, f"measured on {cal.name} TFLOP/s": gemm_effective(measured, st, p0) / 1e12,
                          "x fp32 peak ratio TFLOP/s": gemm_effective(pf, st, p0) / 1e12,
                          "x memory-bandwidth ratio TFLOP/s": gemm_effective(pb, st, p0) / 1e12,
                          "implied TFLOP/s": ex.gemm_flops_per_s / 1e12,
                          f"p={p0} predicted ms (peak ratio)": _ms(pf), f"p={p0} predicted ms (bandwidth ratio)": _ms(pb),
                          f"p={p0} published ms": pub[p0]})
        s.tables.append(Table("published_kernels", f"The implied GEMM rate (p = {p0}) against the reference's "
                              f"kernels measured on {cal.name} ({Path(cal.path).name}) at the p = {p0} shapes, "
                              f"scaled to {ref.name} by the datasheets' fp32 peak ratio ({flop_ratio:.3f}) and "
                              f"memory-bandwidth ratio ({bw_ratio:.3f}); effective rate = the step's GEMM FLOPs "
                              "over their time", krows))
        key = f"p={p0} predicted ms (peak ratio)"
        best = min(krows, key=lambda r: abs(r[key] / pub[p0] - 1))
        mine = next((r for r in krows if r["kernel"] == kernel), best)
        err = mine[key] / pub[p0] - 1
        s.paragraphs.append(
            f"Scaled by the fp32 peak ratio, the {mine['kernel']} kernel measured here runs the p = {p0} GEMMs at "
            f"{mine['x fp32 peak ratio TFLOP/s']:.2f} TFLOP/s against the implied {ex.gemm_flops_per_s / 1e12:.2f}, "
            f"and the model with it predicts {mine[key]:.2f} ms ({100 * err:+.0f}% against {pub[p0]:g}); by the "
            f"memory-bandwidth ratio, {mine[f'p={p0} predicted ms (bandwidth ratio)']:.2f} ms. The closest of the "
            f"reference's kernels by the peak ratio is {best['kernel']} ({best[key]:.2f} ms). " +
            (f"So the reference's own GEMM kernel accounts for the p = {p0} time within {100 * CLOSE:.0f}%: the "
             f"datasheet file's peak GEMM rate is what makes the model {ratios[0]:.1f}x too fast there."
             if abs(err) <= CLOSE else
             f"The reference's kernel, priced from these measurements, does not account for the p = {p0} time "
             f"within {100 * CLOSE:.0f}%: the kernel rate on the reference GPU is itself an unknown."))
    else:
        s.paragraphs.append("No calibrated machine file with the reference's kernels beside these traces "
                            "(`python -m perfmlp.calibrate --gemm-kernels naive,tiled,regblock`): the implied GEMM "
                            "rate is not compared with a measured one.")
    s.paragraphs.append(
        "Not modelled, and so inside the implied values: how the reference distributed each batch (the project "
        "text suggests MPI from one process: the network would then also carry (p-1)/p of every batch), its "
        "nodes' placement (one node or several) and host MPI's own copies; the time per batch it published "
        "may also include work outside the step.")
    return s
