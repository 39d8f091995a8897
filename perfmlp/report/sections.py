"""What each section of the report selects and says.

A section is pure: it reads the analysis (perfmlp/report/analysis.py) and
returns paragraphs, tables (rows as dicts: column name -> value) and
figures (a drawing function and its arguments); nothing is written here.
Selections use the summaries' typed fields and the study's sizes.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..model.costs import batch_counts, itemsize
from ..model.roofline import modified_roofline
from ..model.summary import reference_approx
from ..trace.reader import STEADY_RULE
from .analysis import TERMS, Analysis, RunSummary, error_pct, predicted_terms
from .ceilings import ceilings_figures
from .figures import measured_vs_predicted, phases, roofline, scaling

# perfmlp's transfer and communication modes, from the reference's scheme to the fastest.
MODES = (("pageable", "mpi-staged"), ("pinned", "mpi-staged"), ("resident", "mpi-staged"), ("resident", "nccl"))
REFERENCE_SCHEME, BEST = MODES[0], MODES[-1]
PHASE_FIGURE_MODES = (MODES[0], MODES[-1], MODES[1])


@dataclass
class Table:
    name: str
    caption: str
    rows: list[dict]


@dataclass
class Figure:
    name: str
    caption: str
    draw: Callable[..., dict[str, bytes]]   # perfmlp/report/figures.py
    args: dict


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


# The per-term tables' column for measured terms they do not compare: the host's time for each
HOST_CLOCK_COLUMN = "host clock, not compared (ms)"


def host_clock_cell(measured: dict[str, float], terms: tuple[str, ...]) -> str:
    """HOST_CLOCK_COLUMN's cell: each term left out, with the host's time for it."""
    return ", ".join(f"{t} {measured[t]:.3f}" for t in terms) or "-"


def host_clock_note(left_out: list[tuple[str, ...]], rows: str, outcome: str) -> str | None:
    """One sentence on the measured terms a per-term table does not compare:
    `left_out` holds each row's (a run's or a configuration's) terms left out."""
    by_term = Counter(t for terms in left_out for t in terms)
    if not by_term:
        return None
    where = ", ".join(f"{t} in {by_term[t]}" for t in TERMS if by_term[t])
    return (f"{sum(by_term.values())} measured term(s) in {sum(map(bool, left_out))} of {len(left_out)} {rows} "
            f"{outcome} ({where}): they were timed on the host clock (trace level counters), where work the host "
            "only enqueues (kernels, graph replays, NCCL collectives, pinned copies) measures its enqueue and the "
            "staged D2H its wait for the backward pass, not the time the model's term prices "
            f"(trace.format.comparable_terms; the host's times are in the column '{HOST_CLOCK_COLUMN}').")


def pct(fraction: float | None, nd: int = 2) -> str:
    return "-" if fraction is None else f"{100 * fraction:.{nd}f}%"


def study_shape(a: Analysis, s: RunSummary) -> bool:
    """A GPU run of the study's own sizes (B split over p), not profiled."""
    st = a.study
    return (s.gpu and not s.profiled and s.hidden == (st.hidden_size,) and s.batch == st.batch_size
            and s.precision == st.precision and s.strategy == "data")


def mode_runs(a: Analysis, procs: int, mode: tuple[str, str], gemm: str | None = "cublas") -> list[RunSummary]:
    """The study-shaped runs of one mode on `procs` GPUs, in the report's order
    (where a mode ran twice, the tables show the first by run id)."""
    return [s for s in a.runs if study_shape(a, s) and s.procs == procs and (s.transfer, s.comm) == mode
            and (gemm is None or s.gemm == gemm)]


def cublas_gpu(s: RunSummary) -> bool:
    """The runs the model's accuracy is judged on: cuBLAS (the machine files
    hold cuBLAS rates), not under a profiler, timed on the GPU (not by the
    host's enqueue)."""
    return s.gpu and s.gemm == "cublas" and not s.profiled and not s.host_enqueue


def in_q2_2(a: Analysis, s: RunSummary) -> bool:
    """A Question 2.2 point: B / p = the study's B, one of its H, its precision, cuBLAS."""
    st = a.study
    return (cublas_gpu(s) and s.batch == st.batch_size * s.procs and s.precision == st.precision
            and s.hidden in {(h,) for h in st.q2_2_hidden_sizes} and s.strategy == "data")


# ---- sections ----------------------------------------------------------------------------

def section_runs(a: Analysis) -> Section:
    ds, cal = a.machines.datasheet, a.machines.calibrated
    s = Section("Runs")
    s.paragraphs.append(f"{len(a.runs)} runs read. Time per batch is the median over the steady batches ({STEADY_RULE}) "
                        f"of the slowest rank's time: a batch's GPU time where its trace timed it (CUDA events, "
                        f"CUPTI), else, on a GPU run traced on the host clock, its epoch's synchronised wall time "
                        f"per steady batch (the host clock on the CPU). Utilisation is the job's FLOPs per second over "
                        f"p x {ds.name} fp32/fp64 peak ({ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s fp32, "
                        f"datasheet).")
    if a.gpu_runs and len(a.gpu_runs) < len(a.runs):
        s.paragraphs.append("NumPy-backend runs have no utilisation or prediction: the machine files describe GPUs.")
    if a.skipped:
        s.paragraphs.append("Skipped: " + "; ".join(a.skipped))
    rows = []
    for r in a.runs:
        row = {"run": r.run_id, "H": r.hidden_label, "B": r.batch, "procs": r.procs, "precision": r.precision,
               "transfer": r.transfer, "comm": r.comm, "gemm": r.gemm, "backend": r.backend, "status": r.status,
               "profiled": r.profiled, "batches": r.batches, "t_ms": r.t_ms, "flops_job": r.flops_job,
               "flops_rank0": r.flops_rank0, "bytes_copied_rank": r.bytes_copied_rank, "ai": r.ai,
               "tflops_job": r.tflops_job}
        if a.gpu_runs:  # the machine files describe GPUs
            row.update({"util_datasheet": r.util_datasheet,
                        "pred_datasheet_ms": r.datasheet.total_s * 1e3 if r.datasheet else None,
                        "err_datasheet_pct": r.error_pct(r.datasheet)})
        if a.gpu_runs and cal:
            row.update({"pred_calibrated_ms": r.calibrated.total_s * 1e3 if r.calibrated else None,
                        "err_calibrated_pct": r.error_pct(r.calibrated), "util_calibrated_peak": r.util_calibrated_peak})
        row["verdict"] = r.verdict
        rows.append(row)
    s.tables.append(Table("runs", "Every run", rows))
    return s


def section_q2_1(a: Analysis) -> Section:
    st, ds = a.study, a.machines.datasheet
    D, H, B = st.input_size, st.hidden_size, st.batch_size
    s = Section("Question 2.1: FLOPs per batch and effective compute utilisation")
    ap = reference_approx(D, H, B)
    ex = batch_counts(st.layer_sizes, B, itemsize(st.precision))
    s.tables.append(Table("q2_1_flops", f"FLOPs for D={D}, H={H}, B={B} (one process), approximation 2BHD against "
                          "the exact count (every GEMM, elementwise op and reduction)", [
                              {"part": "forward", "approx (2BHD)": ap["forward"], "exact": ex.flops["forward"]},
                              {"part": "backward", "approx (2BHD)": ap["backward"], "exact": ex.flops["backward"]},
                              {"part": "loss (softmax, cross-entropy, output delta)", "approx (2BHD)": None,
                               "exact": ex.flops["loss"]},
                              {"part": "update", "approx (2BHD)": None, "exact": ex.flops["update"]},
                              {"part": "batch", "approx (2BHD)": ap["batch"], "exact": ex.flops_total}]))
    if not a.gpu_runs:
        return s
    ref_name, best_name = ", ".join(REFERENCE_SCHEME), ", ".join(BEST)
    table = []
    for p in st.procs:
        ref, best = mode_runs(a, p, REFERENCE_SCHEME), mode_runs(a, p, BEST)
        table.append({
            "GPUs": p, f"reference ({st.reference_gpu}) ms": st.reference_ms_per_batch[p],
            f"reference ({st.reference_gpu}) utilisation": pct(st.reference_utilisation[p]),
            f"target ({st.target_factor:g}x) utilisation": pct(st.target_factor * st.reference_utilisation[p], 1),
            f"perfmlp, reference scheme ({ref_name}) ms": ref[0].t_ms if ref else None,
            "perfmlp, reference scheme utilisation": pct(ref[0].util_datasheet) if ref else "-",
            f"perfmlp best ({best_name}) ms": best[0].t_ms if best else None,
            "perfmlp best utilisation": pct(best[0].util_datasheet) if best else "-",
        })
    s.tables.append(Table("q2_1_utilisation", f"Effective compute utilisation, B={B} split over p GPUs: job FLOPs "
                          f"per second over p x {ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s ({ds.name} fp32 "
                          f"datasheet); the reference's published figures ({st.title})", table))
    return s


def section_modes(a: Analysis) -> Section:
    st = a.study
    s = Section(f"Which change bought how much (H={st.hidden_size}, B={st.batch_size} split)")
    table = []
    for p in st.procs:
        prev = None
        for tr, cm in MODES:
            r = mode_runs(a, p, (tr, cm))
            if not r:
                continue
            t = r[0].t_ms
            table.append({"GPUs": p, "batch": tr, "gradients": cm, "ms per batch": t,
                          "speed-up over previous": (prev / t) if prev else None,
                          "utilisation": pct(r[0].util_datasheet)})
            prev = t
    for r in sorted(mode_runs(a, 1, BEST, gemm=None), key=lambda x: x.t_ms):
        table.append({"GPUs": 1, "batch": BEST[0], "gradients": BEST[1], "GEMM": r.gemm, "ms per batch": r.t_ms,
                      "utilisation": pct(r.util_datasheet)})
    s.paragraphs.append("The fused elementwise kernels' gain over an unfused step is measured by "
                        "benchmarks/gpu_step.py (generic CuPy against perfmlp rows), not by these traces.")
    s.tables.append(Table("modes", "Transfer and communication modes, then the reference's GEMM kernels", table))
    return s


def _modified(ai: float, peak: float, bw: float) -> float:
    return peak if not math.isfinite(ai) else modified_roofline(ai, peak, bw)


def section_q2_2(a: Analysis) -> Section:
    st, primary = a.study, a.machines.primary
    s = Section("Question 2.2: the modified and the standard roofline")
    pts, inf_pts = [], []
    for r in a.runs:
        if not in_q2_2(a, r):
            continue
        t_s = r.t_ms * 1e-3
        point = {"ai": r.ai, "measured": r.flops_rank0 / t_s,
                 "predicted": r.flops_rank0 / r.predicted.total_s if r.predicted else None,
                 "H": r.hidden[0], "procs": r.procs, "run": r.run_id, "transfer": r.transfer, "comm": r.comm}
        (pts if math.isfinite(r.ai) else inf_pts).append(point)
    peak = primary.peak_flops_per_s(st.precision)
    bws = {"pageable": primary.h2d_pageable_bytes_per_s, "pinned": primary.h2d_pinned_bytes_per_s}
    s.paragraphs.append(
        f"Each point is one run (B / p = {st.batch_size}, {st.precision}): x = FLOPs per batch on one GPU over the "
        f"bytes that GPU copied with cudaMemcpy (the batch, and with mpi-staged the gradients twice), from the "
        f"counters; y = those FLOPs over the measured time per batch. Modified roofline: FLOP/s = AI / (AI / P + "
        f"1 / BW) with P = {peak / 1e12:.1f} TFLOP/s and BW the host-device bandwidth ({primary.name}). Runs with "
        f"resident data and NCCL copy nothing, so their AI is infinite and they are not on these plots: "
        + (", ".join(f"{p['run']} ({p['measured'] / 1e12:.2f} TFLOP/s per GPU)" for p in inf_pts) or "none") + ".")
    if pts:
        for kind in ("modified", "standard"):
            s.figures.append(Figure(f"roofline_{kind}", f"{kind.capitalize()} roofline per GPU with the Question 2.2 "
                                    "runs", roofline, dict(points=pts, peak=peak, bws=bws, kind=kind,
                                    title=f"{kind.capitalize()} roofline per GPU, {primary.name}",
                                    model=a.machines.primary_kind, h_list=st.q2_2_hidden_sizes)))
    s.figures += ceilings_figures(a, Figure)   # every GPU run under its precision's ceiling (report/ceilings.py)
    s.tables.append(Table("q2_2_points", "The Question 2.2 points", [
        {"run": p["run"], "H": p["H"], "procs": p["procs"], "transfer": p["transfer"], "comm": p["comm"],
         "AI (FLOP/B)": p["ai"], "measured TFLOP/s per GPU": p["measured"] / 1e12,
         "predicted TFLOP/s per GPU": (p["predicted"] or 0) / 1e12,
         "modified roofline TFLOP/s (pageable BW)": _modified(p["ai"], peak, bws["pageable"]) / 1e12,
         "modified roofline TFLOP/s (pinned BW)": _modified(p["ai"], peak, bws["pinned"]) / 1e12}
        for p in pts + inf_pts]))
    return s


def section_model(a: Analysis) -> Section:
    ds, cal, kind = a.machines.datasheet, a.machines.calibrated, a.machines.primary_kind
    tg = a.study.targets
    s = Section("Measured against predicted time per batch")
    table = []
    for r in a.gpu_runs:
        meas, pred = r.measured_terms(r.slowest_rank), predicted_terms(r.predicted)
        entry = {"run": r.run_id, "rank": r.slowest_rank}
        for k in TERMS:
            entry[f"{k} measured ms"] = None if k in r.incomparable_terms else meas[k]
            entry[f"{k} predicted ms"] = pred[k]
        entry.update({HOST_CLOCK_COLUMN: host_clock_cell(meas, r.incomparable_terms),
                      "total measured ms": r.t_ms, "total predicted ms": r.predicted_ms,
                      "error %": error_pct(r.predicted_ms, r.t_ms),
                      "datasheet predicted ms": r.datasheet.total_s * 1e3,
                      "datasheet error %": r.error_pct(r.datasheet)})
        table.append(entry)
    judged = [r for r in a.runs if cublas_gpu(r)]
    lines = []
    for name, sel in (("Question 2.2 sweep and its pinned, resident and NCCL variants",
                       [r for r in judged if in_q2_2(a, r)]), ("every cuBLAS GPU run", judged)):
        for which, machine in (("calibrated", cal), ("datasheet", ds)):
            errs = [abs(r.error_pct(getattr(r, which))) for r in sel if getattr(r, which)]
            if errs:
                lines.append({"runs": name, "machine file": machine.name, "n": len(errs),
                              "median |error| %": statistics.median(errs), "worst |error| %": max(errs),
                              "within 5%": sum(e <= 5 for e in errs), "within 15%": sum(e <= 15 for e in errs)})
    s.paragraphs.append(
        "Prediction: the model package's sum of named terms (GEMMs at the machine file's rate for each shape, "
        "perfmlp's own kernels at their measured time where the file has one (kernel_s), else at memory "
        "bandwidth, exposed launch time, host-device copies, allreduce with the "
        "alpha-beta ring model), for the slowest rank's piece. Measured terms are the slowest rank's median phase "
        "times: compute = forward + loss + backward + update (the predicted compute includes the tracer's cost "
        "at the level each run ran at: its host time per phase, and at `phases` its CUDA events' GPU time). "
        f"Targets ({_study_file(a)}): {tg.model_median_error_pct:g}% median, "
        f"{tg.model_worst_error_pct:g}% worst, after calibration. "
        "The machine files hold cuBLAS rates only: runs with the reference's own GEMM kernels are predicted "
        "as if they used cuBLAS, and are left out of the accuracy figures, as are runs made under a profiler "
        "and runs whose batch times are the host's enqueue times (the validation section names them).")
    note = host_clock_note([r.incomparable_terms for r in a.gpu_runs], "run(s)", "are shown as '-' in the term by "
                           "term table")
    if note:
        s.paragraphs.append(note)
    unpriced = Counter(r.predicted.detail["trace_uncalibrated"] for r in judged
                       if r.predicted.detail.get("trace_uncalibrated"))
    if unpriced:
        s.paragraphs.append("Not in the predictions (those levels priced as `counters`): "
                            + "; ".join(f"{n}, {k} run(s)" for n, k in unpriced.items()) + ".")
    if cal is None:
        s.paragraphs.append(f"No calibrated machine file for this GPU: every prediction here is the datasheet's "
                            f"({ds.name}); `python -m perfmlp.calibrate` measures one.")
    if len(a.gpu_runs) < len(a.runs):
        s.paragraphs.append("NumPy-backend runs are left out: the model describes a GPU.")
    s.tables.append(Table("model_accuracy", "Model accuracy", lines))
    s.tables.append(Table("terms", f"Term by term, {kind} model" + (" (datasheet total beside it)" if cal else "") +
                          f"; '-': measured on the host clock, not comparable (the column '{HOST_CLOCK_COLUMN}')",
                          table))
    series = {"predicted_ms": "calibrated", "datasheet_ms": "datasheet"} if cal else {"datasheet_ms": "datasheet"}
    points = [{"label": r.run_id, "measured_ms": r.t_ms, "datasheet_ms": r.datasheet.total_s * 1e3,
               "predicted_ms": r.predicted.total_s * 1e3} for r in judged]
    if points:
        s.figures.append(Figure("measured_vs_predicted", "Predicted against measured time per batch (cuBLAS runs, "
                                "not profiled)", measured_vs_predicted, dict(rows=points, series=series)))
    return s


def _study_file(a: Analysis) -> str:
    return f"study {Path(a.study.path).name}"


def section_scaling(a: Analysis) -> Section:
    st = a.study
    s = Section("Scaling")
    groups: dict = {}
    for r in a.gpu_runs:
        if r.profiled or r.strategy != "data":  # the partitioning section scales those
            continue
        for kind, key_b in (("strong", r.batch), ("weak", r.batch // r.procs)):
            key = (kind, r.hidden, key_b, r.precision, r.transfer, r.comm, r.gemm)
            groups.setdefault(key, {})[r.procs] = r
    table, fig = [], {}
    for (kind, hidden, b, prec, tr, cm, gm), byp in sorted(groups.items()):
        if 1 not in byp or len(byp) < 2:
            continue
        t1 = byp[1].t_ms
        for p, r in sorted(byp.items()):
            eff = t1 / (p * r.t_ms) if kind == "strong" else t1 / r.t_ms
            table.append({"scaling": kind, "H": r.hidden_label, ("B" if kind == "strong" else "B/p"): b,
                          "precision": prec, "transfer": tr, "comm": cm, "gemm": gm, "procs": p,
                          "ms per batch": r.t_ms, "speed-up": t1 / r.t_ms, "efficiency %": 100 * eff})
            if gm == "cublas" and prec == st.precision and hidden == (st.hidden_size,):
                fig.setdefault(kind, {}).setdefault(f"{tr}, {cm}", []).append((p, r.t_ms, eff))
    tg, pmax = st.targets, max(st.procs)
    s.paragraphs.append(f"Strong scaling: B fixed and split over p GPUs, efficiency T1 / (p Tp). Weak scaling: "
                        f"B / p fixed, efficiency T1 / Tp. Targets ({_study_file(a)}; NCCL and resident data): weak "
                        f">= {tg.weak_efficiency_pct:g}% at {pmax} GPUs; strong: {pmax} GPUs at least "
                        f"{tg.strong_speedup:g}x faster than 1.")
    for kind in ("strong", "weak"):
        if fig.get(kind):
            s.figures.append(Figure(f"scaling_{kind}", f"{kind.capitalize()} scaling, H={st.hidden_size}, each "
                                    "transfer/comm mode", scaling, dict(groups=fig[kind], ticks=st.procs,
                                    title=f"{kind.capitalize()} scaling, H={st.hidden_size}")))
    s.tables.append(Table("scaling", "Scaling per configuration", table))
    return s


def section_no_gpu(a: Analysis) -> Section:
    backends = ", ".join(sorted({r.backend for r in a.runs}))
    s = Section("No GPU runs")
    s.paragraphs.append(f"None of the {len(a.runs)} runs ran on a GPU (backend {backends}). Question 2.1's "
                        "utilisation, the transfer and communication modes, Question 2.2's rooflines, measured "
                        "against predicted time and scaling compare GPU runs with a GPU's machine file, so they "
                        "are left out of this report.")
    return s


def section_phases(a: Analysis) -> Section:
    st = a.study
    s = Section("Phase breakdown per rank")
    multi = [r for r in a.runs if r.procs > 1]
    if not multi:
        s.paragraphs.append("Every run used one process: there is no imbalance or waiting between ranks to show.")
        return s
    table, fig = [], []
    for r in multi:
        busy = [r.busy_ms(k) for k in sorted(r.phases_ms)]
        ar = [ph.get("allreduce", 0) for _, ph in sorted(r.phases_ms.items())]
        table.append({"run": r.run_id, "procs": r.procs,
                      "compute+copy min ms": min(busy), "compute+copy max ms": max(busy),
                      "imbalance ms": max(busy) - min(busy),
                      "allreduce min ms": min(ar), "allreduce max ms": max(ar),
                      "waiting (allreduce max - min) ms": max(ar) - min(ar)})
        if (study_shape(a, r) and r.procs == max(st.procs) and r.gemm == "cublas"
                and (r.transfer, r.comm) in PHASE_FIGURE_MODES):
            fig.append((f"{r.transfer}/{r.comm}", dict(r.phases_ms)))
    s.paragraphs.append("A rank that finishes its compute early waits inside the allreduce for the others: "
                        "the spread of the allreduce phase across ranks is that waiting.")
    if fig:
        p = max(st.procs)
        s.figures.append(Figure("phases_per_rank", f"Phase breakdown per rank ({p} GPUs)", phases,
                                dict(runs_phases=fig, title=f"Median phase times per rank, {p} GPUs, "
                                     f"H={st.hidden_size}, B={st.batch_size}")))
    s.tables.append(Table("imbalance", "Imbalance and waiting across ranks", table))
    return s
