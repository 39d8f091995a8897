"""The study's questions: Question 2.1's FLOPs and utilisation, the modes
that bought the gains, Question 2.2's rooflines, and the rooflines of
several ceilings (GPU and CPU). Every time shown is a configuration's (the
median of its repeats), chosen by the settings its column names.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from ...model.machine import MachineError
from ...model.precision import precision as precision_of
from ...model.predict.cpu import cpu_ceilings
from ...model.summary import part_flops, reference_approx
from ...model.roofline import modified_roofline, standard_roofline
from ..analyses.scaling import overlap_bounds
from ..analyses.accuracy import in_q2_2, study_shaped
from ..analysis import Analysis
from ..configurations import Configuration, configurations
from ..figures import H_COLORS, ceilings_roofline, encode, log_axes, mark, roofline, subplots
from . import Figure, Section, Table, pct
from ... import names as N

# perfmlp's transfer and communication modes, from the reference's scheme to the fastest.
MODES = ((N.PAGEABLE, N.MPI_STAGED), (N.PINNED, N.MPI_STAGED), (N.RESIDENT, N.MPI_STAGED), (N.RESIDENT, N.NCCL))
REFERENCE_SCHEME, BEST = MODES[0], MODES[-1]


def study_job(a: Analysis, c: Configuration) -> bool:
    """A GPU configuration of the study's own job (analyses.accuracy.study_shaped), data parallel."""
    return c.gpu and study_shaped(a, c) and c.s["strategy"] == N.DATA


def pick(a: Analysis, configs, procs: int, transfer: str, comm: str, exec_mode: str) -> Configuration | None:
    """The cuBLAS study-job configuration with exactly these settings (one per trace level: repeats are merged)."""
    found = [c for c in configs if study_job(a, c) and c.s["procs"] == procs and c.s["transfer"] == transfer
             and c.s["comm"] == comm and c.s["exec"] == exec_mode and c.s["gemm"] == N.CUBLAS
             and c.s["overlap"] == "no overlap"]
    return min(found, key=lambda c: (c.s["trace_level"] != N.PHASES_LEVEL, c.s["trace_level"])) if found else None


def runs_text(c: Configuration | None) -> str:
    return " ".join(r.run_id for r in c.runs) if c else "-"


def flops_shapes(a: Analysis) -> list[tuple]:
    """The (layer sizes, B on one process) Question 2.1's FLOPs table counts: the study's where a run had
    it, else each one the runs had (at most 4)."""
    st = a.study
    shapes = list(dict.fromkeys((r.layer_sizes, r.batch // r.procs, r.precision) for r in a.runs))
    study = (st.layer_sizes, st.batch_size, st.precision)
    if any(r.layer_sizes == st.layer_sizes and r.batch == st.batch_size for r in a.runs) or not shapes:
        return [study]
    return shapes[:4]


def flops_table(a: Analysis) -> Table:
    rows = []
    for layers, b, prec in flops_shapes(a):
        ex = part_flops(layers, b, prec)
        ap = reference_approx(layers[0], layers[1], b) if len(layers) == 3 else None
        shape = f"{'-'.join(map(str, layers))}, B={b}"
        for part in ("forward", "backward", "loss", "update", "batch"):
            words = {"loss": "loss (softmax, cross-entropy, output delta)"}.get(part, part)
            rows.append({"shape": shape, "part": words, "approx (2BHD)": ap.get(part) if ap else None,
                         "exact": ex[part]})
    return Table("q2_1_flops", "FLOPs per batch on one process, the approximation 2BHD against the exact count "
                 "(every GEMM, elementwise op and reduction), for the shapes the runs had", rows)


def section_q2_1(a: Analysis) -> Section:
    st, ds = a.study, a.machines.datasheet
    s = Section("Question 2.1: FLOPs per batch and effective compute utilisation")
    s.tables.append(flops_table(a))
    configs = configurations(a)
    if not any(study_job(a, c) for c in configs):
        s.paragraphs.append(f"No run of the study's job (H={st.hidden_size}, B={st.batch_size} split over p, "
                            f"{st.precision}, on a GPU): no utilisation to set beside the reference's.")
    if not a.gpu_runs:
        return s
    ref_exec = st.scheme.get("exec", N.EAGER)
    cols = [("reference scheme (pageable, mpi-staged, eager)", REFERENCE_SCHEME, ref_exec),
            ("resident + NCCL, eager", BEST, N.EAGER), ("resident + NCCL, CUDA graph", BEST, "graph")]
    table = []
    for p in st.procs:
        row = {"GPUs": p, f"reference ({st.reference_gpu}) ms": st.reference_ms_per_batch[p],
               f"reference ({st.reference_gpu}) utilisation": pct(st.reference_utilisation[p]),
               f"target ({st.target_factor:g}x) utilisation": pct(st.target_factor * st.reference_utilisation[p], 1)}
        for name, (tr, cm), ex in cols:
            c = pick(a, configs, p, tr, cm, ex)
            row.update({f"perfmlp, {name}: ms": c.t_ms if c else None,
                        f"perfmlp, {name}: utilisation": pct(c.util) if c else "-",
                        f"perfmlp, {name}: runs": runs_text(c)})
        table.append(row)
    s.paragraphs.append(
        f"Each perfmlp cell is one configuration of the study's job (H={st.hidden_size}, B={st.batch_size} split "
        f"over p GPUs, {st.precision}, cuBLAS, data parallel, no overlap) in the modes its column names, execution "
        "mode included: the median of its repeats' times per batch (the runs are named in the CSV's 'runs' "
        "columns; a configuration traced at several levels shows the `phases` one). The reference scheme's "
        f"column is {ref_exec}, as the reference ran (the study's reference_scheme, {Path(st.path).name}).")
    hidden = tuple(f"perfmlp, {name}: runs" for name, _, _ in cols)
    s.tables.append(Table("q2_1_utilisation", f"Effective compute utilisation, B={st.batch_size} split over p GPUs: "
                          f"job FLOPs per second over p x {ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s ({ds.name} "
                          f"fp32 datasheet); the reference's published figures ({st.title})", table, hidden=hidden))
    return s


def section_modes(a: Analysis) -> Section:
    st = a.study
    s = Section(f"Which change bought how much (H={st.hidden_size}, B={st.batch_size} split)")
    configs = configurations(a)
    table = []
    for p in st.procs:
        prev = None
        steps = [(tr, cm, N.EAGER) for tr, cm in MODES] + [(*BEST, "graph")]
        for tr, cm, ex in steps:
            c = pick(a, configs, p, tr, cm, ex)
            if c is None:
                continue
            table.append({"GPUs": p, "batch": tr, "gradients": cm, "exec": ex, "ms per batch": c.t_ms,
                          "speed-up over previous": (prev / c.t_ms) if prev else None, "utilisation": pct(c.util),
                          "runs": len(c.runs), "run ids": runs_text(c)})
            prev = c.t_ms
    for c in sorted((c for c in configs if study_job(a, c) and c.s["procs"] == 1 and c.s["gemm"] != N.CUBLAS
                     and (c.s["transfer"], c.s["comm"]) == BEST), key=lambda c: c.t_ms):
        table.append({"GPUs": 1, "batch": BEST[0], "gradients": BEST[1], "exec": c.s["exec"], "GEMM": c.s["gemm"],
                      "ms per batch": c.t_ms, "utilisation": pct(c.util), "runs": len(c.runs),
                      "run ids": runs_text(c)})
    s.paragraphs.append("Each row one configuration (the median of its repeats), eager, cuBLAS, from the reference's "
                        "scheme to resident data and NCCL, then the same step as one CUDA graph where it ran; each "
                        "speed-up over the row before it. The fused elementwise kernels' gain over an unfused step "
                        "is measured by benchmarks/gpu_step.py (generic CuPy against perfmlp rows), not by these "
                        "traces.")
    s.tables.append(Table("modes", "Transfer and communication modes, the CUDA graph, then the reference's GEMM "
                          "kernels", table, hidden=("run ids",)))
    return s


def _modified(ai: float, peak: float, bw: float) -> float:
    return peak if not math.isfinite(ai) else modified_roofline(ai, peak, bw)


def section_q2_2(a: Analysis) -> Section:
    st, primary = a.study, a.machines.primary
    s = Section("Question 2.2: the modified and the standard roofline")
    pts, inf_pts = [], []
    for c in (c for c in configurations(a) if c.judged and in_q2_2(a, c.representative)):   # its points
        r = c.representative
        point = {"ai": r.ai, "measured": r.flops_rank0 / (c.t_ms * 1e-3),
                 "predicted": r.flops_rank0 / r.predicted.total_s if r.predicted else None,
                 "H": r.hidden[0], "procs": r.procs, "label": c.label, "runs": runs_text(c),
                 "transfer": r.transfer, "comm": r.comm, "exec": r.exec}
        (pts if math.isfinite(r.ai) else inf_pts).append(point)
    peak = primary.peak_flops_per_s(st.precision)
    bws = {N.PAGEABLE: primary.h2d_pageable_bytes_per_s, N.PINNED: primary.h2d_pinned_bytes_per_s}
    s.paragraphs.append(
        f"Each point is one configuration (B / p = {st.batch_size}, {st.precision}, cuBLAS; the median of its "
        f"repeats): x = FLOPs per batch on one GPU over the bytes that GPU copied with cudaMemcpy (the batch, and "
        f"with mpi-staged the gradients twice), from the counters; y = those FLOPs over the measured time per "
        f"batch. Modified roofline: FLOP/s = AI / (AI / P + 1 / BW) with P = {peak / 1e12:.1f} TFLOP/s and BW the "
        f"host-device bandwidth ({primary.name}). Pageable and pinned configurations copy the same bytes, so they "
        "share an x; each pays its own line. Configurations with resident data and NCCL copy nothing (their AI is "
        "infinite) and are not on these plots: "
        + (", ".join(f"{p['label']} ({p['measured'] / 1e12:.2f} TFLOP/s per GPU)" for p in inf_pts) or "none") + ".")
    if pts:
        for kind in ("modified", "standard"):
            s.figures.append(Figure(f"roofline_{kind}", f"{kind.capitalize()} roofline per GPU with the Question 2.2 "
                                    "configurations", roofline, dict(points=pts, peak=peak, bws=bws, kind=kind,
                                    title=f"{kind.capitalize()} roofline per GPU, {primary.name}, B/p = "
                                          f"{st.batch_size}", model=a.machines.primary_kind,
                                    h_list=st.q2_2_hidden_sizes)))
    s.figures += ceilings_figures(a)   # every GPU run under its precision's ceiling
    s.tables.append(Table("q2_2_points", "The Question 2.2 points", [
        {"configuration": p["label"], "H": p["H"], "procs": p["procs"], "transfer": p["transfer"],
         "comm": p["comm"], "exec": p["exec"], "AI (FLOP/B)": p["ai"] if math.isfinite(p["ai"]) else None,
         "measured TFLOP/s per GPU": p["measured"] / 1e12,
         "predicted TFLOP/s per GPU": (p["predicted"] or 0) / 1e12,
         "modified roofline TFLOP/s (pageable BW)": _modified(p["ai"], peak, bws[N.PAGEABLE]) / 1e12,
         "modified roofline TFLOP/s (pinned BW)": _modified(p["ai"], peak, bws[N.PINNED]) / 1e12, "runs": p["runs"]}
        for p in pts + inf_pts], hidden=("runs",)))
    bounds = overlap_bounds(a).records()
    if bounds:
        s.paragraphs.append(
            "Today's step on several GPUs runs its compute chain, then one all-reduce of the whole gradient buffer: "
            "the serial bound. Overlapped, no schedule passes the longer of the two chains: the overlapped bound. "
            "The sliced schedule (`--slices`, the first layer's weight gradient reduced in slices as each is "
            "written) at the slice count the model prices fastest lies between them (the model's times, "
            f"{primary.name}).")
        s.tables.append(Table("overlap_bounds", "Serial and overlapped bounds per batch (model)", bounds))
        s.figures.append(Figure("overlap_roofline", "The exchange's roofline: serial and overlapped bounds",
                                exchange_roofline, dict(rows=bounds, title=f"Serial and overlapped bounds per GPU, "
                                                                            f"{primary.name}")))
    return s


def exchange_roofline(rows, title: str):
    """The overlap_bounds rows on a roofline of the exchange (x: FLOPs per byte all-reduced): measured, the
    serial, overlapped and sliced bounds; per p, at the median compute rate P and all-reduce bandwidth BW,
    serial AI / (AI / P + 1 / BW) (the modified roofline) and overlapped min(P, AI BW) (the standard one)."""
    fig, ax = subplots(figsize=(7.5, 5.6))
    ais = [r["FLOPs per GPU"] / r["bytes all-reduced per GPU"] for r in rows]
    x = np.logspace(np.log10(min(ais) / 4), np.log10(max(ais) * 4), 200)
    for i, procs in enumerate(sorted({r["procs"] for r in rows})):
        sel = [r for r in rows if r["procs"] == procs]
        peak = float(np.median([r["FLOPs per GPU"] / (r["compute chain ms"] * 1e-3) for r in sel]))
        bw = float(np.median([r["bytes all-reduced per GPU"] / (r["communication chain ms"] * 1e-3) for r in sel]))
        color = H_COLORS[i % len(H_COLORS)]
        ax.plot(x, modified_roofline(x, peak, bw), "-", color=color, lw=1.0,
                label=f"p={procs}: serial (compute {peak / 1e12:.1f} TFLOP/s, all-reduce {bw / 1e9:.0f} GB/s)")
        ax.plot(x, standard_roofline(x, peak, bw), ":", color=color, lw=1.2, label=f"p={procs}: overlapped")
    for r, ai in zip(rows, ais):
        f = r["FLOPs per GPU"]
        for key, style in (("measured ms", dict(marker="o", color="black")),
                           ("serial bound ms", dict(marker="x", color="tab:red")),
                           ("overlapped bound ms", dict(marker="^", color="tab:green")),
                           ("sliced ms", dict(marker="s", facecolors="none", edgecolors="tab:purple"))):
            ax.scatter([ai], [f / (r[key] * 1e-3)], s=40, zorder=3, **style)
    handles, _ = ax.get_legend_handles_labels()
    handles += [mark(lab, m, c, mfc=f) for c, m, f, lab in (
        ("black", "o", "black", "measured"), ("tab:red", "x", "tab:red", "serial bound (model)"),
        ("tab:green", "^", "tab:green", "overlapped bound (model)"),
        ("tab:purple", "s", "none", "sliced schedule (model)"))]
    log_axes(ax, "FLOPs per byte all-reduced (per GPU, per batch)", "FLOP/s per GPU", title, "FLOP/s")
    ax.legend(handles=handles, fontsize=6.5, loc="lower right")
    fig.tight_layout()
    return encode(fig)


# ---- the roofline of several ceilings ---------------------------------------------------------

def ceilings_points(a, backend: str = N.CUPY) -> list[dict]:
    """One point per `backend` run of data parallelism: its GEMM format (NumPy: its precision), measured FLOP/s
    per GPU (rank), its FLOPs per device-memory byte its kernels moved (None where the trace does not count
    them) and per byte it copied (NumPy: per byte its rank exchanges, with several ranks)."""
    out = []
    for r in a.runs:
        if r.backend != backend or r.strategy != N.DATA or not r.t_ms:
            continue
        sent = r.bytes_exchanged_rank0 if r.procs > 1 else 0
        link = (r.ai if math.isfinite(r.ai) else None) if r.gpu else (r.flops_rank0 / sent if sent else None)
        out.append({"precision": precision_of(r.precision).gemm if r.gpu else r.precision,
                    "measured": r.flops_rank0 / (r.t_ms * 1e-3),
                    "ai_hbm": r.flops_rank0 / r.mem_bytes_rank0 if r.mem_bytes_rank0 else None,
                    "ai_pcie": link, "run": r.run_id, "procs": r.procs})
    return out


def ceilings_figures(a) -> list[Figure]:
    """The GPU runs' figure, and the CPU's where NumPy runs are."""
    pts, m = ceilings_points(a), a.machines.primary
    if not pts:
        return cpu_figures(a)
    try:
        ceilings = m.ceilings()
        for p in pts:
            m.peak_flops_per_s(p["precision"])   # a run in a precision the machine has no ceiling for
    except MachineError:
        return []
    bws = {"HBM": m.mem_bw_bytes_per_s, "PCIe pinned, copies overlapped (prefetch):": m.h2d_pinned_bytes_per_s}
    return [Figure("roofline_ceilings", "Roofline of several ceilings: every GPU run under its precision's",
                   ceilings_roofline, dict(points=pts, ceilings=ceilings, bws=bws,
                                           title=f"Ceilings per precision and memory level, {m.name}"))] \
        + cpu_figures(a)


def cpu_figures(a) -> list[Figure]:
    """The CPU's roofline at the NumPy runs' most common rank count (one rank's share of the machine), or none."""
    pts, cpu = ceilings_points(a, N.NUMPY), a.machines.cpu
    if not pts or cpu is None:
        return []
    procs = statistics.mode(p["procs"] for p in pts)
    precisions = sorted({p["precision"] for p in pts})
    c = {p: cpu_ceilings(cpu, p, procs) for p in precisions}
    ceilings = {p: c[p]["peak_flops_per_s"] for p in precisions}
    bws = {"memory": c[precisions[0]]["mem_bw_bytes_per_s"]}
    if c[precisions[0]]["copy_bytes_per_s"]:
        bws["MPI exchange (the modified roofline's copy):"] = c[precisions[0]]["copy_bytes_per_s"]
    return [Figure("roofline_cpu", f"Roofline of the CPU: every NumPy run under one rank's ceilings at p = {procs}",
                   ceilings_roofline, dict(points=pts, ceilings=ceilings, bws=bws, levels=("memory", "MPI"),
                                           units="BLAS", per="rank",
                                           title=f"One rank's ceilings at p = {procs}, {cpu.name}"))]
