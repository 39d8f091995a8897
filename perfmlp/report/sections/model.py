"""Every run, and the model's predictions against the measurement."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from ...trace.reader import STEADY_RULE
from ..analysis import Analysis, RunSummary
from ..analyses.accuracy import HOST_CLOCK_COLUMN, model_accuracy, terms
from ..analyses.runs import judged_for_model, runs as runs_table
from ..figures import measured_vs_predicted
from . import Figure, Section, Table, host_clock_note

def section_runs(a: Analysis, labels: dict[str, str], bound: dict[str, str]) -> Section:
    """Every run, named by its short label (`labels`: run id -> label; the id in the tooltip and
    the CSV), with what bounds it (`bound`: run id -> verdict text)."""
    ds = a.machines.datasheet
    s = Section("Runs")
    n = len(a.runs)
    text = (f"{n} run{'s' if n != 1 else ''} read. Time per batch is the median over the steady batches "
            f"({STEADY_RULE}) of the slowest rank's time: a batch's GPU time where its trace timed it (CUDA events, "
            f"CUPTI), else, on a GPU run traced on the host clock, its epoch's synchronised wall time per steady "
            f"batch; on the CPU the host clock.")
    if a.gpu_runs:
        text += (f" Utilisation is the job's FLOPs per second over p x {ds.name} fp32/fp64 peak "
                 f"({ds.peak_flops_per_s_float32 / 1e12:.1f} TFLOP/s fp32, datasheet).")
    s.paragraphs.append(text)
    if a.gpu_runs and len(a.gpu_runs) < n:
        s.paragraphs.append("NumPy-backend runs have no copy settings, utilisation or prediction: the machine files "
                            "describe GPUs.")
    if a.skipped:
        s.paragraphs.append("Skipped: " + "; ".join(a.skipped))
    rows = runs_table(a, labels, bound).records()
    s.tables.append(Table("runs", "Every run (hover a label for its run id)", rows, hidden=("run",),
                          tips={"label": "run"}))
    return s


def section_model(a: Analysis, labels: dict[str, str] | None = None) -> Section:
    """Measured against predicted per run (`labels`: run id -> short label, shown with the id in its tooltip)."""
    ds, cal, kind = a.machines.datasheet, a.machines.calibrated, a.machines.primary_kind
    tg = a.study.targets
    s = Section("Measured against predicted time per batch")
    table = terms(a, labels).records()
    lines = model_accuracy(a).records()
    judged = [r for r in a.runs if judged_for_model(r)]
    s.paragraphs.append(
        "Prediction: the model package's sum of named terms (GEMMs at the machine file's rate for each shape, "
        "perfmlp's own kernels at their measured time where the file has one (kernel_s), else at memory "
        "bandwidth, exposed launch time, host-device copies, allreduce with the "
        "alpha-beta ring model), for the slowest rank's piece. Measured terms are the slowest rank's median phase "
        "times: compute = forward + loss + backward + update (the predicted compute includes the tracer's cost "
        "at the level each run ran at: its host time per phase, and at `phases` its CUDA events' GPU time). "
        f"Targets (study {Path(a.study.path).name}): {tg.model_median_error_pct:g}% median, "
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
                          table, hidden=("run",) if labels else (), tips={"label": "run"} if labels else {}))
    s.figures += accuracy_figure(judged, cal is not None)
    return s


def accuracy_figure(judged: list[RunSummary], calibrated: bool) -> list[Figure]:
    """Predicted against measured time per batch for the runs the accuracy is judged on."""
    series = {"predicted_ms": "calibrated"} if calibrated else {}
    series["datasheet_ms"] = "datasheet"
    points = [{"label": r.run_id, "measured_ms": r.t_ms, "datasheet_ms": r.datasheet.total_s * 1e3,
               "predicted_ms": r.predicted.total_s * 1e3} for r in judged]
    return [Figure("measured_vs_predicted", "Predicted against measured time per batch (cuBLAS runs, not profiled)",
                   measured_vs_predicted, dict(rows=points, series=series))] if points else []


def section_no_gpu(a: Analysis) -> Section:
    backends = ", ".join(sorted({r.backend for r in a.runs}))
    s = Section("No GPU runs")
    n = len(a.runs)
    s.paragraphs.append(f"{'None of the ' + str(n) + ' runs' if n != 1 else 'The run did not'} "
                        f"{'ran' if n != 1 else 'run'} on a GPU (backend {backends}). Question 2.1's "
                        "utilisation, the transfer and communication modes, Question 2.2's rooflines, measured "
                        "against predicted time and scaling compare GPU runs with a GPU's machine file, so they "
                        "are left out of this report.")
    return s
