"""A table no one here wrote: the reference's published times per batch
beside the model, which terms explain them, and what each unknown would
have to be, in words (docs/model.md, "The published times"). The numbers
are perfmlp/model/published.py's; this section only words them."""
from __future__ import annotations

from pathlib import Path

from ...model.machine import Machine, MachineError, load_machine
from ...model.summary import gradient_bytes
from ...model.published import (ONE_CONSTANT, Explanation, ScaledKernels, explain, kernel_rates,
                               reference_prediction, scaled_kernels, unknowns_alone, with_networks)
from ..analysis import Analysis
from . import Section, Table
from ... import names as N
from ..thresholds import PUBLISHED_CLOSE

TITLE = "The reference's published times beside the model"
TERM_NAMES = (N.H2D_BATCH, "gemm", "elementwise", "kernel_gaps", "launches", N.D2H_GRAD, "allreduce", N.H2D_GRAD)
UNKNOWN_WORDS = {"gemm": "the GEMM rate", "copy": "the copy bandwidth", "mpi": "the MPI bandwidth"}


def section_published(a: Analysis) -> Section | None:
    st = a.study
    if not st.reference_machine:
        return None
    s = Section(TITLE)
    try:
        ref = load_machine(st.reference_machine)
    except MachineError as e:
        s.paragraphs.append(f"No reference machine file: {e}.")
        return s
    s.paragraphs.append(_introduction(st, ref))
    scaled = scaled_kernels(ref, a.machines.calibrated, a.machines.datasheet, st.precision)
    base = {p: reference_prediction(ref, st, p) for p in _procs(st)}
    _terms(s, st, ref, base, scaled)
    _unknowns(s, st, ref)
    ex = explain(ref, st)
    if ex.gemm_flops_per_s is None:
        s.paragraphs.append(f"No GEMM rate explains p = {_procs(st)[0]}: the other terms alone exceed it.")
        return s
    _explanation(s, st, ref, ex)
    if scaled and scaled.machines:
        _kernels(s, st, ref, ex, scaled, _ms(base[_procs(st)[0]]))
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


def _procs(st) -> list[int]:
    return sorted(st.reference_ms_per_batch)


def _ms(pred) -> float:
    return pred.total_s * 1e3


def _introduction(st, ref: Machine) -> str:
    sc, procs, pub = st.scheme, _procs(st), st.reference_ms_per_batch
    scheme = f"{sc['batch_transfer']} copies, {sc['comm']}, {sc['exec']}, GEMM kernel {sc['gemm']}"
    return (f"{st.title}: the reference's published solution took {', '.join(f'{pub[p]:g}' for p in procs)} ms per "
            f"batch on {', '.join(map(str, procs))} {st.reference_gpu} GPUs (D={st.input_size}, H={st.hidden_size}, "
            f"B={st.batch_size} split, {st.precision}). Its scheme as the study states it ({Path(st.path).name}): "
            f"{scheme}; the model's terms for it below are untraced, on {ref.name} ({Path(ref.path).name}: "
            f"{ref.source}). Each implied value below is solved on the model itself, so putting it back gives the "
            "published time (tests/test_published.py holds it to 1%).")


def _trend(values: list[float]) -> str:
    pairs = list(zip(values, values[1:]))
    return ("rising" if all(q > p for p, q in pairs) else "falling" if all(q < p for p, q in pairs)
            else "not monotone")


def _terms(s: Section, st, ref: Machine, base: dict, scaled: ScaledKernels | None) -> None:
    """1-2. The model's terms on the datasheet file, and with the kernel's rates scaled by the fp32 peak ratio."""
    kernel, prec, procs, pub = st.scheme["gemm"], st.precision, _procs(st), st.reference_ms_per_batch
    variants = [("datasheet file" + (f" ({kernel} has no rate: priced at the peak)"
                                     if not ref.has_gemm_kernel(kernel) else ""), ref)]
    if scaled and kernel in scaled.machines:
        variants.append((f"{kernel} rates measured on {scaled.measured.name}, x {scaled.flop_ratio:.3f} "
                         "(fp32 peak ratio)", scaled.machines[kernel]["flop"]))
    rows = []
    for name, m in variants:
        for p in procs:
            pred = base[p] if m is ref else reference_prediction(m, st, p)
            row = {"GPUs": p, "model": name, "published ms": pub[p], "predicted ms": _ms(pred),
                   "published / predicted": pub[p] / _ms(pred)}
            row.update({f"{t} ms": pred.terms[t] * 1e3 for t in TERM_NAMES})
            rows.append(row)
    ratios = [pub[p] / _ms(base[p]) for p in procs]
    trend = _trend([_ms(base[p]) for p in procs])
    s.paragraphs.append(
        f"The datasheet file predicts {', '.join(f'{_ms(base[p]):.2f}' for p in procs)} ms: "
        f"{min(ratios):.1f}-{max(ratios):.1f}x too fast, and {trend} with p where the published time is "
        f"{_trend([pub[p] for p in procs])}. Its GEMM term is {base[procs[0]].terms['gemm'] * 1e3:.2f} ms at "
        f"p = {procs[0]} (the peak, {ref.peak_flops_per_s(prec) / 1e12:.1f} TFLOP/s); the copies, at "
        f"{ref.h2d_pageable_bytes_per_s / 1e9:g} GB/s, "
        f"{sum(base[procs[0]].terms[t] for t in (N.H2D_BATCH, N.D2H_GRAD, N.H2D_GRAD)) * 1e3:.2f} ms.")
    s.tables.append(Table("published_terms", f"The reference's scheme on {ref.name}: the model's terms beside "
                          "the published time per batch", rows))


def _unknowns(s: Section, st, ref: Machine) -> None:
    """3. One unknown alone, per p."""
    kernel, procs = st.scheme["gemm"], _procs(st)
    mem = N.PAGEABLE if st.scheme["batch_transfer"] == N.PAGEABLE else N.PINNED
    alone = unknowns_alone(ref, st)
    what = {"gemm": (f"{kernel} GEMM rate (one for every shape)", "TFLOP/s", 1e12),
            "copy": (f"{mem} copy bandwidth, both ways", "GB/s", 1e9),
            "mpi": (f"MPI allreduce bandwidth (latency {ref.mpi_alpha_s * 1e6:g} us)", "GB/s", 1e9)}
    rows = []
    for key, (words, unit, scale) in what.items():
        row = {"unknown, alone": words, "unit": unit, "the file's": alone[key].file_value / scale}
        for p in procs:
            v = alone[key].values[p]
            row[f"p={p}"] = v / scale if v is not None else (
                "-" if key == N.MPI and p <= 1 else "none: the other terms alone exceed it")
        rows.append(row)
    s.tables.append(Table("published_unknowns", "What one unknown alone would have to be for the model to give "
                          "each published time (the other terms as the datasheet file says)", rows))
    explains = [UNKNOWN_WORDS[k] for k, u in alone.items() if u.explains_every_p]
    each = [_unknown_words(u) for u in alone.values()]
    s.paragraphs.append(
        (f"One unknown alone could explain every p within {ONE_CONSTANT:g}x: {', '.join(explains)} ("
         if explains else "No one unknown alone explains every p (") + "; ".join(each) +
        "). The GEMM and copy terms shrink with the piece (B/p), so a time that rises with p must come from what "
        "grows with p, the exchange, and the p = 1 time (no exchange) from the rest.")


def _unknown_words(u) -> str:
    got, missing, spread = u.solved, u.missing, u.spread
    return (f"{UNKNOWN_WORDS[u.key]} " + (f"would take values {spread:.1f}x apart over p = {', '.join(map(str, got))}"
                                         if spread is not None and len(got) > 1 else
                                         f"gives p = {', '.join(map(str, got))}" if got else "gives no p") +
            (f" and cannot give p = {', '.join(map(str, missing))}" if missing else ""))


def _explanation(s: Section, st, ref: Machine, ex: Explanation) -> None:
    """4. One explanation of every p, and the study's assumed networks with its GEMM rate."""
    procs, pub, prec = _procs(st), st.reference_ms_per_batch, st.precision
    p0 = procs[0]
    frac = ex.gemm_flops_per_s / ref.peak_flops_per_s(prec)
    text = (f"One explanation. At p = {p0} there is no allreduce: the GEMMs at {ex.gemm_flops_per_s / 1e12:.2f} "
            f"TFLOP/s ({100 * frac:.1f}% of the {ref.peak_flops_per_s(prec) / 1e12:.1f} TFLOP/s peak) give "
            f"{pub[p0]:g} ms. With that rate (the GEMM term then falls as 1/p), the allreduce would have to take "
            + ", ".join(f"{t * 1e3:.2f} ms at p = {p}" for p, t in ex.allreduce_s.items()) + ".")
    s.paragraphs.append(text + _network_words(st, ref, ex))

    def row(model: str, alpha_s: float, bw: float, ms: dict) -> dict:
        return {"model": model, "GEMM TFLOP/s": ex.gemm_flops_per_s / 1e12, "MPI alpha us": alpha_s * 1e6,
                "MPI GB/s": bw / 1e9, **{f"p={p} ms": ms[p] for p in procs},
                **{f"p={p} error %": 100 * (ms[p] / pub[p] - 1) for p in procs}}
    rows = [row("implied: GEMM rate from p = %d, network from the rest" % p0, *ex.network,
                {p: ex.predicted_ms(st, p) for p in procs})] if ex.machine else []
    rows += [row(f"GEMM rate from p = {p0}, {n.name} (assumed)", n.mpi_alpha_s, n.mpi_bw_bytes_per_s, t)
             for n, t in with_networks(ref, st, ex.gemm_flops_per_s, st.networks)]
    rows.append({"model": "published", **{f"p={p} ms": pub[p] for p in procs}})
    s.tables.append(Table("published_explained", "The implied GEMM rate and network against the published times, "
                          "and the same GEMM rate with each of the study's assumed networks", rows))


def _network_words(st, ref: Machine, ex: Explanation) -> str:
    if not ex.network:
        return " No ring allreduce with a positive latency and bandwidth goes through those times."
    alpha, bw = ex.network
    nbytes = gradient_bytes(st.layer_sizes, st.precision)
    text = (f" The host ring allreduce of the {nbytes:,}-byte gradient buffer, 2(p-1) alpha + 2(p-1)/p n / bw, "
            f"through those times: alpha = {alpha * 1e6:.1f} us, bw = {bw / 1e9:.3f} GB/s "
            f"({8 * bw / 1e9:.2f} Gb/s)")
    nets = sorted(st.networks, key=lambda n: n.mpi_bw_bytes_per_s)
    if not nets:
        return text + "."
    below = [n for n in nets if n.mpi_bw_bytes_per_s <= bw]
    above = [n for n in nets if n.mpi_bw_bytes_per_s > bw]
    return (text + ": " + (f"between {below[-1].name} and {above[0].name}" if below and above else
                           f"slower than {above[0].name}" if above else f"faster than {below[-1].name}") +
            " of the study's assumed networks (bandwidth), against the datasheet file's "
            f"{ref.mpi_bw_bytes_per_s / 1e9:g} GB/s and {ref.mpi_alpha_s * 1e6:g} us.")


def _kernels(s: Section, st, ref: Machine, ex: Explanation, scaled: ScaledKernels, datasheet_ms: float) -> None:
    """The implied rate against the reference kernels measured on the calibrated GPU."""
    p0, pub, cal, kernel = _procs(st)[0], st.reference_ms_per_batch, scaled.measured, st.scheme["gemm"]
    key = f"p={p0} predicted ms (peak ratio)"
    rows = [{"kernel": k.kernel, f"measured on {cal.name} TFLOP/s": k.measured_flops_per_s / 1e12,
             "x fp32 peak ratio TFLOP/s": k.flop_scaled_flops_per_s / 1e12,
             "x memory-bandwidth ratio TFLOP/s": k.bw_scaled_flops_per_s / 1e12,
             "implied TFLOP/s": ex.gemm_flops_per_s / 1e12,
             key: k.flop_scaled_ms, f"p={p0} predicted ms (bandwidth ratio)": k.bw_scaled_ms,
             f"p={p0} published ms": pub[p0]} for k in kernel_rates(scaled, st, p0)]
    s.tables.append(Table("published_kernels", f"The implied GEMM rate (p = {p0}) against the reference's "
                          f"kernels measured on {cal.name} ({Path(cal.path).name}) at the p = {p0} shapes, "
                          f"scaled to {ref.name} by the datasheets' fp32 peak ratio ({scaled.flop_ratio:.3f}) and "
                          f"memory-bandwidth ratio ({scaled.bw_ratio:.3f}); effective rate = the step's GEMM FLOPs "
                          "over their time", rows))
    best = min(rows, key=lambda r: abs(r[key] / pub[p0] - 1))
    mine = next((r for r in rows if r["kernel"] == kernel), best)
    err = mine[key] / pub[p0] - 1
    s.paragraphs.append(
        f"Scaled by the fp32 peak ratio, the {mine['kernel']} kernel measured here runs the p = {p0} GEMMs at "
        f"{mine['x fp32 peak ratio TFLOP/s']:.2f} TFLOP/s against the implied {ex.gemm_flops_per_s / 1e12:.2f}, "
        f"and the model with it predicts {mine[key]:.2f} ms ({100 * err:+.0f}% against {pub[p0]:g}); by the "
        f"memory-bandwidth ratio, {mine[f'p={p0} predicted ms (bandwidth ratio)']:.2f} ms. The closest of the "
        f"reference's kernels by the peak ratio is {best['kernel']} ({best[key]:.2f} ms). " +
        (f"So the reference's own GEMM kernel accounts for the p = {p0} time within "
         f"{100 * PUBLISHED_CLOSE.value:.0f}%: the "
         f"datasheet file's peak GEMM rate is what makes the model {pub[p0] / datasheet_ms:.1f}x too fast there."
         if abs(err) <= PUBLISHED_CLOSE.value else
         f"The reference's kernel, priced from these measurements, does not account for the p = {p0} time "
         f"within {100 * PUBLISHED_CLOSE.value:.0f}%: the kernel rate on the reference GPU is itself an unknown."))
