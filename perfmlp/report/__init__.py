"""`python -m perfmlp.report traces/`: the roofline analysis of every run
under a folder, measured beside predicted.

Writes report.md, a self-contained report.html (figures embedded), each
figure as PNG and SVG and each table as CSV. Reads only trace files (and,
where they sit beside the traces, correctness results, cProfile dumps and
Nsight Systems SQLite exports); never imports CuPy or the trainer.
"""
from __future__ import annotations

import base64
import csv
import html
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..model.costs import batch_counts, reference_approx
from ..model.machine import MODELS_DIR, DEFAULT_MACHINE, Machine, MachineError, load_machine
from ..model.predict import predict_batch
from ..model.roofline import modified_roofline
from ..trace.reader import Run, read_traces
from . import figures as F  # matplotlib itself is imported when a figure is drawn

# The reference course's published solution (Quadro RTX 6000, D=784, H=512, B=3200)
REFERENCE_UTIL = {1: 0.0645, 2: 0.0224, 4: 0.0096}

TERM_PHASES = {"h2d_batch": ("h2d",), "compute": ("forward", "loss", "backward", "update"),
               "d2h_grad": ("d2h",), "allreduce": ("allreduce",), "h2d_grad": ("h2d_grad",)}


@dataclass
class Section:
    title: str
    paragraphs: list = field(default_factory=list)       # str
    tables: list = field(default_factory=list)           # (name, caption, rows: list[dict])
    figures: list = field(default_factory=list)          # (name, caption)


# ---- machines --------------------------------------------------------------------------

def pick_machines(runs: list[Run], machine_arg: str | None):
    """(datasheet, calibrated or None, primary) for the GPU the traces saw."""
    gpus = [r.gpu for r in runs if r.gpu]
    gpu = statistics.mode(gpus) if gpus else None
    files = []
    for p in sorted(MODELS_DIR.glob("*.yaml")):
        try:
            files.append(load_machine(p))
        except MachineError:
            continue
    datasheet = next((m for m in files if gpu and m.name == gpu and not m.calibrated), None)
    calibrated = next((m for m in files if gpu and m.name.startswith(gpu) and m.calibrated), None)
    if datasheet is None:
        datasheet = load_machine(DEFAULT_MACHINE)
    if machine_arg:
        primary = load_machine(machine_arg)
        if primary.calibrated:
            calibrated = primary
        else:
            datasheet = primary
    primary = calibrated or datasheet
    return datasheet, calibrated, primary


# ---- per run ------------------------------------------------------------------------------

def slowest_rank(run: Run) -> int:
    per = {r: statistics.median(run.batch_time_ms(recs[r]) for recs in run.steady_batches().values())
           for r in run.ranks}
    return max(per, key=per.get)


def predict(run: Run, m: Machine | None):
    if m is None:
        return None
    c = run.config
    return predict_batch(m, run.layer_sizes, c["batch_size"], run.procs, c["precision"], run.comm,
                         c["batch_transfer"] if run.manifest.get("backend") == "cupy" else "resident",
                         traced=True)


def run_row(run: Run, ds: Machine, cal: Machine | None) -> dict:
    c = run.config
    t_ms = run.median_batch_ms()
    recs = {r: run.counters(r) for r in run.ranks}
    flops_job = sum(sum(rec.get("flops", {}).values()) for rec in recs.values())
    r0 = recs[0]
    flops_rank = sum(r0.get("flops", {}).values())
    bytes_rank = max((rec.get("bytes_h2d", 0) + rec.get("bytes_d2h", 0)) for rec in recs.values())
    ai = flops_rank / bytes_rank if bytes_rank else math.inf
    p_ds, p_cal = predict(run, ds), predict(run, cal)
    t_s = t_ms * 1e-3
    peak_ds = ds.peak_flops_per_s(c["precision"])
    row = {
        "run": run.run_id, "H": "x".join(map(str, c["hidden_sizes"])), "B": c["batch_size"], "procs": run.procs,
        "precision": c["precision"], "transfer": c["batch_transfer"], "comm": run.comm, "gemm": c["gemm"],
        "backend": run.manifest.get("backend", "?"), "status": run.status + (", profiled" if run.profiled else ""),
        "batches": len(run.steady_batches()), "t_ms": t_ms,
        "flops_job": flops_job, "flops_rank0": flops_rank, "bytes_copied_rank": bytes_rank,
        "ai": ai, "tflops_job": flops_job / t_s / 1e12,
        "util_datasheet": flops_job / t_s / (run.procs * peak_ds),
        "pred_datasheet_ms": p_ds.total_s * 1e3 if p_ds else None,
        "err_datasheet_pct": 100 * (p_ds.total_s / t_s - 1) if p_ds else None,
        "pred_calibrated_ms": p_cal.total_s * 1e3 if p_cal else None,
        "err_calibrated_pct": 100 * (p_cal.total_s / t_s - 1) if p_cal else None,
    }
    if cal:
        row["util_calibrated_peak"] = flops_job / t_s / (run.procs * cal.peak_flops_per_s(c["precision"]))
    row["verdict"] = verdict(run, p_cal or p_ds)
    return row


def measured_terms(run: Run, rank: int) -> dict[str, float]:
    ph = run.phase_ms(rank)
    return {term: sum(ph.get(p, 0.0) for p in phases) for term, phases in TERM_PHASES.items()}


def verdict(run: Run, pred) -> str:
    """What limits this run, from its measured phases (and the model's GPU time)."""
    r = slowest_rank(run)
    terms = measured_terms(run, r)
    total = sum(terms.values()) or 1.0
    copies = terms["h2d_batch"] + terms["d2h_grad"] + terms["h2d_grad"]
    parts = {"host-device copies": copies, "the gradient allreduce": terms["allreduce"], "compute": terms["compute"]}
    top = max(parts, key=parts.get)
    share = 100 * parts[top] / total
    if top == "compute" and pred is not None:
        gpu_ms = (pred.terms["gemm"] + pred.terms["elementwise"]) * 1e3
        if terms["compute"] > 1.5 * gpu_ms:
            return (f"compute phases {share:.0f}% of the batch, {terms['compute'] / gpu_ms:.1f}x the model's GPU "
                    f"time: host-bound (kernel launches, synchronisation)")
        gemm_share = 100 * pred.terms["gemm"] * 1e3 / total
        return f"compute {share:.0f}% of the batch, GEMMs about {gemm_share:.0f}%: GPU-bound"
    if top == "the gradient allreduce" and run.procs > 1:
        spread = _imbalance(run)
        extra = f"; ranks' compute differs by {spread:.2f} ms (waiting)" if spread > 0.05 * total else ""
        return f"the gradient allreduce {share:.0f}% of the batch ({run.comm}){extra}"
    return f"{top} {share:.0f}% of the batch ({run.config.get('batch_transfer')} memory)"


def _imbalance(run: Run) -> float:
    comp = [measured_terms(run, r)["compute"] + measured_terms(run, r)["h2d_batch"] for r in run.ranks]
    return max(comp) - min(comp)


# ---- the sections -------------------------------------------------------------------------

def fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        if abs(v) >= 1e5 or (abs(v) < 1e-3 and v != 0):
            return f"{v:.3g}"
        return f"{v:.{nd}f}"
    return str(v)


def _is(run_row, **kw):
    return "profiled" not in run_row["status"] and all(run_row.get(k) == v for k, v in kw.items())


def section_runs(rows, skipped, ds, cal) -> Section:
    s = Section("Runs")
    s.paragraphs.append(f"{len(rows)} runs read. Time per batch is the median over the steady batches (the first "
                        f"batch of a run, which compiles kernels, is left out) of the slowest rank's CUDA-event "
                        f"time (host clock on the CPU). Utilisation is the job's FLOPs per second over "
                        f"p x {ds.name} fp32/fp64 peak ({ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s fp32, "
                        f"datasheet).")
    if skipped:
        s.paragraphs.append("Skipped: " + "; ".join(skipped))
    s.tables.append(("runs", "Every run", rows))
    return s


def section_q21(rows, ds, cal) -> Section:
    s = Section("Question 2.1: FLOPs per batch and effective compute utilisation")
    D, H, B = 784, 512, 3200
    ap = reference_approx(D, H, B)
    ex = batch_counts((D, H, 10), B, 4)
    s.tables.append(("q2_1_flops", "FLOPs for D=784, H=512, B=3200 (one process), approximation 2BHD against "
                     "the exact count (every GEMM, elementwise op and reduction)", [
                         {"part": "forward", "approx (2BHD)": ap["forward"], "exact": ex.flops["forward"]},
                         {"part": "backward", "approx (2BHD)": ap["backward"], "exact": ex.flops["backward"]},
                         {"part": "loss (softmax, cross-entropy, output delta)", "approx (2BHD)": None,
                          "exact": ex.flops["loss"]},
                         {"part": "update", "approx (2BHD)": None, "exact": ex.flops["update"]},
                         {"part": "batch", "approx (2BHD)": ap["batch"], "exact": ex.flops_total}]))
    table = []
    for p in (1, 2, 4):
        ref = [r for r in rows if _is(r, H="512", B=3200, procs=p, precision="float32", gemm="cublas",
                                      transfer="pageable", comm="mpi-staged")]
        best = [r for r in rows if _is(r, H="512", B=3200, procs=p, precision="float32", gemm="cublas",
                                       transfer="resident", comm="nccl")]
        table.append({
            "GPUs": p, "reference solution (RTX 6000)": f"{100 * REFERENCE_UTIL[p]:.2f}%",
            "target (5x)": f"{500 * REFERENCE_UTIL[p]:.1f}%",
            "perfmlp, reference scheme (pageable, staged) ms": fmt(ref[0]["t_ms"]) if ref else "-",
            "utilisation": f"{100 * ref[0]['util_datasheet']:.2f}%" if ref else "-",
            "perfmlp best (resident, NCCL) ms": fmt(best[0]["t_ms"]) if best else "-",
            "utilisation ": f"{100 * best[0]['util_datasheet']:.2f}%" if best else "-",
        })
    s.tables.append(("q2_1_utilisation", f"Effective compute utilisation, B=3200 split over p GPUs: job FLOPs per "
                     f"second over p x {ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s ({ds.name} fp32 datasheet)",
                     table))
    return s


def section_modes(rows) -> Section:
    s = Section("Which change bought how much (H=512, B=3200 split)")
    order = [("pageable", "mpi-staged"), ("pinned", "mpi-staged"), ("resident", "mpi-staged"), ("resident", "nccl")]
    table = []
    for p in (1, 2, 4):
        prev = None
        for tr, cm in order:
            r = [x for x in rows if _is(x, H="512", B=3200, procs=p, precision="float32", gemm="cublas",
                                        transfer=tr, comm=cm)]
            if not r:
                continue
            t = r[0]["t_ms"]
            table.append({"GPUs": p, "batch": tr, "gradients": cm, "ms per batch": t,
                          "speed-up over previous": (prev / t) if prev else None,
                          "utilisation": f"{100 * r[0]['util_datasheet']:.2f}%"})
            prev = t
    kern = [x for x in rows if _is(x, H="512", B=3200, procs=1, precision="float32", transfer="resident", comm="nccl")]
    for r in sorted(kern, key=lambda x: x["t_ms"]):
        table.append({"GPUs": 1, "batch": "resident", "gradients": "nccl", "GEMM": r["gemm"], "ms per batch": r["t_ms"],
                      "utilisation": f"{100 * r['util_datasheet']:.2f}%"})
    s.paragraphs.append("The fused elementwise kernels' gain over an unfused step is measured by "
                        "benchmarks/gpu_step.py (generic CuPy against perfmlp rows), not by these traces.")
    s.tables.append(("modes", "Transfer and communication modes, then the reference's GEMM kernels", table))
    return s


def section_q22(runs, rows, primary, cal, out) -> Section:
    s = Section("Question 2.2: the modified and the standard roofline")
    sel = [(run, row) for run, row in zip(runs, rows)
           if row["B"] == 3200 * row["procs"] and row["gemm"] == "cublas" and row["precision"] == "float32"
           and not run.profiled]
    pts, inf_pts = [], []
    for run, row in sel:
        t_s = row["t_ms"] * 1e-3
        pred = predict(run, primary)
        point = {"ai": row["ai"], "measured": row["flops_rank0"] / t_s,
                 "predicted": row["flops_rank0"] / pred.total_s if pred else None,
                 "H": int(row["H"]) if row["H"].isdigit() else 0, "procs": row["procs"], "run": row["run"],
                 "transfer": row["transfer"], "comm": row["comm"]}
        (pts if math.isfinite(row["ai"]) else inf_pts).append(point)
    P = primary.peak_flops_per_s_float32
    bws = {"pageable": primary.h2d_pageable_bytes_per_s, "pinned": primary.h2d_pinned_bytes_per_s}
    s.paragraphs.append(
        f"Each point is one run (B / p = 3200, fp32): x = FLOPs per batch on one GPU over the bytes that GPU "
        f"copied with cudaMemcpy (the batch, and with mpi-staged the gradients twice), from the counters; y = those "
        f"FLOPs over the measured time per batch. Modified roofline: FLOP/s = AI / (AI / P + 1 / BW) with "
        f"P = {P / 1e12:.1f} TFLOP/s and BW the host-device bandwidth ({primary.name}). Runs with resident data "
        f"and NCCL copy nothing, so their AI is infinite and they are not on these plots: "
        + (", ".join(f"{p['run']} ({p['measured'] / 1e12:.2f} TFLOP/s per GPU)" for p in inf_pts) or "none") + ".")
    if pts:
        for kind in ("modified", "standard"):
            figure = f"roofline_{kind}"
            F.roofline(pts, P, bws, kind, f"{kind.capitalize()} roofline per GPU, {primary.name}", out, figure)
            s.figures.append((figure, f"{kind.capitalize()} roofline per GPU with the Question 2.2 runs"))
    s.tables.append(("q2_2_points", "The Question 2.2 points", [
        {"run": p["run"], "H": p["H"], "procs": p["procs"], "transfer": p["transfer"], "comm": p["comm"],
         "AI (FLOP/B)": p["ai"], "measured TFLOP/s per GPU": p["measured"] / 1e12,
         "predicted TFLOP/s per GPU": (p["predicted"] or 0) / 1e12,
         "modified roofline TFLOP/s (pageable BW)": _mod(p["ai"], P, bws["pageable"]) / 1e12,
         "modified roofline TFLOP/s (pinned BW)": _mod(p["ai"], P, bws["pinned"]) / 1e12}
        for p in pts + inf_pts]))
    return s


def _mod(ai, P, bw):
    return P if not math.isfinite(ai) else modified_roofline(ai, P, bw)


def section_model(runs, rows, ds, cal, out) -> Section:
    s = Section("Measured against predicted time per batch")
    table, acc = [], []
    primary = cal or ds
    for run, row in zip(runs, rows):
        pred = predict(run, primary)
        r = slowest_rank(run)
        meas = measured_terms(run, r)
        pt = pred.terms
        pterms = {"h2d_batch": pt["h2d_batch"],
                  "compute": pt["gemm"] + pt["elementwise"] + pt["launches"] + pt["tracing"],
                  "d2h_grad": pt["d2h_grad"], "allreduce": pt["allreduce"], "h2d_grad": pt["h2d_grad"]}
        entry = {"run": row["run"], "rank": r}
        for k in TERM_PHASES:
            entry[f"{k} measured ms"] = meas[k]
            entry[f"{k} predicted ms"] = pterms[k] * 1e3
        entry["total measured ms"] = row["t_ms"]
        entry["total predicted ms"] = pred.total_s * 1e3
        entry["error %"] = 100 * (pred.total_s * 1e3 / row["t_ms"] - 1)
        entry["datasheet predicted ms"] = row["pred_datasheet_ms"]
        entry["datasheet error %"] = row["err_datasheet_pct"]
        table.append(entry)
        acc.append({"label": row["run"], "measured_ms": row["t_ms"], "predicted_ms": pred.total_s * 1e3,
                    "datasheet_ms": row["pred_datasheet_ms"]})
    cuda = [r for r in rows if r["backend"] == "cupy" and r["gemm"] == "cublas" and "profiled" not in r["status"]]
    q22 = [r for r in cuda if r["B"] == 3200 * r["procs"] and r["precision"] == "float32"]
    lines = []
    for name, sel in (("Question 2.2 sweep and its pinned, resident and NCCL variants", q22),
                      ("every cuBLAS GPU run", cuda)):
        for which in ("calibrated", "datasheet"):
            errs = [abs(r[f"err_{which}_pct"]) for r in sel if r.get(f"err_{which}_pct") is not None]
            if errs:
                lines.append({"runs": name, "machine file": (cal.name if which == "calibrated" and cal else ds.name),
                              "n": len(errs), "median |error| %": statistics.median(errs),
                              "worst |error| %": max(errs),
                              "within 5%": sum(e <= 5 for e in errs), "within 15%": sum(e <= 15 for e in errs)})
    s.paragraphs.append(
        "Prediction: the model package's sum of named terms (GEMMs at the machine file's rate for each shape, "
        "elementwise kernels at memory bandwidth, exposed launch time, host-device copies, allreduce with the "
        "alpha-beta ring model), for the slowest rank's piece. Measured terms are the slowest rank's median phase "
        "times: compute = forward + loss + backward + update (the predicted compute includes the GPU time of "
        "the tracer's own CUDA events). Targets (SPEC section 6): 5% median, 15% worst, after calibration. "
        "The machine files hold cuBLAS rates only: runs with the reference's own GEMM kernels are predicted "
        "as if they used cuBLAS, and are left out of the accuracy figures, as are runs made under a profiler.")
    if any(r["backend"] != "cupy" for r in rows):
        s.paragraphs.append("NumPy-backend runs are set beside a GPU machine's prediction only for form: the model "
                            "describes a GPU, so their errors say nothing about it.")
    s.tables.append(("model_accuracy", "Model accuracy", lines))
    s.tables.append(("terms", "Term by term, calibrated model (datasheet total beside it)", table))
    F.measured_vs_predicted(acc, out, "measured_vs_predicted")
    s.figures.append(("measured_vs_predicted", "Predicted against measured time per batch"))
    return s


def section_scaling(rows, out) -> Section:
    s = Section("Scaling")
    groups: dict = {}
    for r in rows:
        if r["backend"] != "cupy" or "profiled" in r["status"]:
            continue
        per_proc = r["B"] // r["procs"]
        for kind, key_b in (("strong", r["B"]), ("weak", per_proc)):
            key = (kind, r["H"], key_b, r["precision"], r["transfer"], r["comm"], r["gemm"])
            groups.setdefault(key, {})[r["procs"]] = r
    table, fig = [], {}
    for key, byp in sorted(groups.items()):
        kind, H, b, prec, tr, cm, gm = key
        if 1 not in byp or len(byp) < 2:
            continue
        t1 = byp[1]["t_ms"]
        for p, r in sorted(byp.items()):
            eff = t1 / (p * r["t_ms"]) if kind == "strong" else t1 / r["t_ms"]
            table.append({"scaling": kind, "H": H, ("B" if kind == "strong" else "B/p"): b, "precision": prec,
                          "transfer": tr, "comm": cm, "gemm": gm, "procs": p, "ms per batch": r["t_ms"],
                          "speed-up": t1 / r["t_ms"], "efficiency %": 100 * eff})
            if gm == "cublas" and prec == "float32" and H == "512":
                fig.setdefault(kind, {}).setdefault(f"{tr}, {cm}", []).append((p, r["t_ms"], eff))
    s.paragraphs.append("Strong scaling: B fixed and split over p GPUs, efficiency T1 / (p Tp). Weak scaling: "
                        "B / p fixed, efficiency T1 / Tp. Targets (SPEC section 6, NCCL and resident data): weak "
                        ">= 90% at 4 GPUs; strong: 4 GPUs at least 2x faster than 1.")
    for kind in ("strong", "weak"):
        if fig.get(kind):
            F.scaling(fig[kind], out, f"scaling_{kind}", f"{kind.capitalize()} scaling, H=512")
            s.figures.append((f"scaling_{kind}", f"{kind.capitalize()} scaling, H=512, each transfer/comm mode"))
    s.tables.append(("scaling", "Scaling per configuration", table))
    return s


def section_phases(runs, rows, out) -> Section:
    s = Section("Phase breakdown per rank")
    table, fig = [], []
    for run, row in zip(runs, rows):
        if run.procs < 2:
            continue
        per = {r: run.phase_ms(r) for r in sorted(run.ranks)}
        comp = {r: sum(v.get(p, 0) for p in ("h2d", "forward", "loss", "backward", "update")) for r, v in per.items()}
        ar = {r: v.get("allreduce", 0) for r, v in per.items()}
        table.append({"run": row["run"], "procs": run.procs,
                      "compute+copy min ms": min(comp.values()), "compute+copy max ms": max(comp.values()),
                      "imbalance ms": max(comp.values()) - min(comp.values()),
                      "allreduce min ms": min(ar.values()), "allreduce max ms": max(ar.values()),
                      "waiting (allreduce max - min) ms": max(ar.values()) - min(ar.values())})
        if run.procs == 4 and row["B"] == 3200 and row["gemm"] == "cublas" and row["precision"] == "float32" \
                and (row["transfer"], row["comm"]) in (("pageable", "mpi-staged"), ("resident", "nccl"),
                                                       ("pinned", "mpi-staged")):
            fig.append((f"{row['transfer']}/{row['comm']}", per))
    s.paragraphs.append("A rank that finishes its compute early waits inside the allreduce for the others: "
                        "the spread of the allreduce phase across ranks is that waiting.")
    if fig:
        F.phases(fig, out, "phases_per_rank", "Median phase times per rank, 4 GPUs, H=512, B=3200")
        s.figures.append(("phases_per_rank", "Phase breakdown per rank (4 GPUs)"))
    s.tables.append(("imbalance", "Imbalance and waiting across ranks", table))
    return s


def section_correctness(folder: Path) -> Section | None:
    files = sorted(folder.rglob("correctness*.jsonl"))
    if not files:
        return None
    rows = []
    for f in files:
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            rows.append({k: r.get(k) for k in ("procs", "precision", "comm", "H", "B", "batches", "lr",
                                                "max_abs", "max_rel", "ranks_identical")})
    s = Section("Correctness: GPU against CPU parameters")
    s.paragraphs.append(
        f"From {', '.join(str(f) for f in files)} (benchmarks/correctness.py): after one epoch on real digits, "
        "the GPU parameters against one NumPy process trained on the same batches; max |difference| over all "
        "parameters, and relative to the largest parameter. Every rank's parameters are compared bit for bit.")
    s.tables.append(("correctness", "GPU against CPU after training", rows))
    return s


def section_profiles(runs) -> Section | None:
    import pstats
    profs = [(run, p) for run in runs if run.path for p in sorted(Path(run.path).glob("rank-*.prof"))]
    if not profs:
        return None
    s = Section("Top Python functions (cProfile)")
    for run, p in profs[:4]:
        st = pstats.Stats(str(p))
        items = sorted(st.stats.items(), key=lambda kv: kv[1][3], reverse=True)[:10]
        s.tables.append((f"profile_{run.run_id}_{p.stem}", f"{run.run_id} {p.name}: cumulative time", [
            {"function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "calls": v[1], "total s": v[2], "cumulative s": v[3]}
            for k, v in items]))
    return s


def section_nsys(folder: Path, runs) -> Section | None:
    dbs = sorted(folder.rglob("*.sqlite"))
    if not dbs:
        return None
    from ..trace.nsys import cross_check
    s = Section("Nsight Systems cross-check")
    by_id = {r.run_id: r for r in runs}
    for db in dbs:
        run = next((by_id[d.name] for d in [db.parent, *db.parents] if d.name in by_id), None)
        if run is None:
            s.paragraphs.append(f"{db}: no trace of the same run beside it; skipped")
            continue
        try:
            rows, notes = cross_check(db, run)
        except Exception as e:  # a damaged export: say so, report the rest
            s.paragraphs.append(f"{db}: cannot read ({type(e).__name__}: {e})")
            continue
        s.paragraphs.extend(notes)
        s.tables.append((f"nsys_{run.run_id}", f"{db.name} against {run.run_id}", rows))
    return s


# ---- rendering ------------------------------------------------------------------------------

def write_csv(path: Path, rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})


def md_table(rows: list[dict]) -> str:
    if not rows:
        return "(none)\n"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(k)) for k in keys) + " |")
    return "\n".join(out) + "\n"


def html_table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(sections: list[Section], out: Path, title: str, header: list[str]) -> None:
    md = [f"# {title}", ""] + header + [""]
    hb = [f"<h1>{html.escape(title)}</h1>"] + [f"<p>{html.escape(h)}</p>" for h in header]
    for s in sections:
        md += [f"## {s.title}", ""]
        hb.append(f"<h2>{html.escape(s.title)}</h2>")
        for p in s.paragraphs:
            md += [p, ""]
            hb.append(f"<p>{html.escape(p)}</p>")
        for name, cap in s.figures:
            md += [f"![{cap}]({name}.png)", "", f"*{cap}* ([SVG]({name}.svg))", ""]
            data = base64.b64encode((out / f"{name}.png").read_bytes()).decode()
            hb.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(cap)}">'
                      f"<figcaption>{html.escape(cap)}</figcaption></figure>")
        for name, cap, rows in s.tables:
            write_csv(out / f"{name}.csv", rows)
            md += [f"**{cap}** ([{name}.csv]({name}.csv))", "", md_table(rows), ""]
            hb.append(f"<h3>{html.escape(cap)}</h3>{html_table(rows)}")
    (out / "report.md").write_text("\n".join(md))
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
             "font-size:11px;margin-bottom:1em}td,th{border:1px solid #ccc;padding:2px 5px}img{max-width:100%}")
    (out / "report.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
                                     f"</title><style>{style}</style></head><body>{''.join(hb)}</body></html>")


def build(folder: str | Path, out: str | Path, machine: str | None = None, log=print) -> Path:
    """The report of every run under `folder`, written to `out`."""
    folder = Path(folder)
    runs, skipped = read_traces(folder)
    for line in skipped:
        log(f"skipped: {line}")
    if not runs:
        from ..errors import PerfmlpError
        raise PerfmlpError(f"{folder}: no readable run" + (f" ({len(skipped)} skipped)" if skipped else ""))
    return build_from_runs(runs, skipped, out, machine, folder)


def build_from_runs(runs: list[Run], skipped: list[str], out: str | Path, machine: str | None = None,
                    folder: Path | None = None) -> Path:
    """The report of runs already read (or made with Run.from_records)."""
    out = Path(out)
    ds, cal, primary = pick_machines(runs, machine)
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_row(r, ds, cal) for r in runs]
    order = sorted(range(len(runs)), key=lambda i: (rows[i]["H"], rows[i]["procs"], rows[i]["B"], rows[i]["run"]))
    runs, rows = [runs[i] for i in order], [rows[i] for i in order]
    sections = [section_runs(rows, skipped, ds, cal)]
    gpu_runs = [(run, row) for run, row in zip(runs, rows) if row["backend"] == "cupy"]
    sections.append(section_q21(rows, ds, cal))
    if gpu_runs:
        sections.append(section_modes(rows))
        sections.append(section_q22([r for r, _ in gpu_runs], [w for _, w in gpu_runs], primary, cal, out))
    sections.append(section_model(runs, rows, ds, cal, out))
    sections.append(section_scaling(rows, out))
    sections.append(section_phases(runs, rows, out))
    extras = (section_correctness(folder), section_profiles(runs), section_nsys(folder, runs)) if folder else ()
    for extra in extras:
        if extra is not None:
            sections.append(extra)
    header = [f"Traces: {folder or 'in memory'} ({len(runs)} runs). Machine files: datasheet {ds.name} ({Path(ds.path).name})"
              + (f", calibrated {cal.name} ({Path(cal.path).name})" if cal else ", no calibrated file for this GPU")
              + ".", "Made by `python -m perfmlp.report` from the trace files alone."]
    render(sections, out, "perfmlp report", header)
    return out
