"""Every run, one row each; which runs the model is judged on; and the model
against the measurement: each GPU run term by term, and the median and worst
|error| over the runs it is judged on, per machine file. Where the host paces
the step, the limit is the measured run-to-run spread."""
from __future__ import annotations

import statistics

from ..analysis import TERMS, error_pct, predicted_terms
from ..thresholds import WITHIN_CLOSE, WITHIN_FAIR
from ... import names as N
from .table import Table


def judged_for_model(s) -> bool:
    """The runs the model is judged on: cuBLAS (the files' rates), no profiler, timed on the GPU."""
    return s.gpu and s.gemm == N.CUBLAS and not s.profiled and not s.host_enqueue


def in_q2_2(a, s) -> bool:
    """A Question 2.2 point: B / p = the study's B, one of its H, its precision, cuBLAS."""
    st = a.study
    return (judged_for_model(s) and s.batch == st.batch_size * s.procs and s.precision == st.precision
            and s.hidden in {(h,) for h in st.q2_2_hidden_sizes} and s.strategy == N.DATA)


def study_shaped(a, c) -> bool:
    """A judged configuration of the study's own job: its H, B split over p, precision."""
    st, s = a.study, c.s
    return (c.judged and s["hidden"] == str(st.hidden_size) and s["batch"] == st.batch_size
            and s["precision"] == st.precision)


def run_row(a, r, label: str) -> dict:
    """One run's row: GPU-only settings and figures only for GPU runs."""
    row = {"run": r.run_id, "label": label, "H": r.hidden_label, "B": r.batch, "procs": r.procs,
           "precision": r.precision}
    if r.gpu:
        row.update({"transfer": r.transfer, "comm": r.comm, "gemm": r.gemm, "exec": r.exec})
    else:
        row["comm"] = r.comm
    row.update({"backend": r.backend, "trace level": r.trace_level, "status": r.status, "profiled": r.profiled,
                "batches": r.batches, "t_ms": r.t_ms, "flops_job": r.flops_job, "flops_rank0": r.flops_rank0})
    if r.gpu:
        row.update({"bytes_copied_rank": r.bytes_copied_rank, "ai": r.ai})
    row["tflops_job"] = r.tflops_job
    if r.gpu:
        row.update({"util_datasheet": r.util_datasheet,
                    "pred_datasheet_ms": r.datasheet.total_s * 1e3 if r.datasheet else None,
                    "err_datasheet_pct": r.error_pct(r.datasheet)})
        if a.machines.calibrated:
            row.update({"pred_calibrated_ms": r.calibrated.total_s * 1e3 if r.calibrated else None,
                        "err_calibrated_pct": r.error_pct(r.calibrated),
                        "util_calibrated_peak": r.util_calibrated_peak})
    return row


def runs(a, labels: dict | None = None, bound: dict | None = None) -> Table:
    """Every run (`labels`: run id -> short label; `bound`: run id -> what bounds it, words)."""
    labels, bound = labels or {}, bound or {}
    rows = [{**run_row(a, r, labels.get(r.run_id, r.run_id)), "bound by": bound.get(r.run_id, "-")} for r in a.runs]
    return Table.from_records("runs", rows)


# The per-term tables' column for measured terms they do not compare: the host's time for each
HOST_CLOCK_COLUMN = "host clock, not compared (ms)"


def host_clock_cell(measured: dict[str, float], terms: tuple[str, ...]) -> str:
    """HOST_CLOCK_COLUMN's cell: each term left out, with the host's time for it."""
    return ", ".join(f"{t} {measured[t]:.3f}" for t in terms) or "-"


def host_paced_spread(pred) -> float | None:
    """A host-paced prediction's run-to-run spread (0.05: +-5%) from its interval; else None."""
    d = pred.detail if pred is not None else {}
    iv = d.get("interval_s") if d.get("host_paced") else None
    return None if iv is None else (iv[1] - iv[0]) / (iv[1] + iv[0])


def limit_text(pred) -> str | None:
    """'host-paced: +-X% from one run to the next', or None where the prediction is a point target."""
    spread = host_paced_spread(pred)
    return None if spread is None else f"host-paced: +-{100 * spread:.0f}% from one run to the next"


def terms(a, labels: dict | None = None) -> Table:
    """Each GPU run term by term with the primary machine (ms; a term timed on the host clock is None)."""
    rows = []
    for r in a.gpu_runs:
        meas, pred = r.measured_terms(r.slowest_rank), predicted_terms(r.predicted)
        entry = {"run": r.run_id, **({"label": labels.get(r.run_id, r.run_id)} if labels else {}),
                 "rank": r.slowest_rank}
        for k in TERMS:
            entry[f"{k} measured ms"] = None if k in r.incomparable_terms else meas[k]
            entry[f"{k} predicted ms"] = pred[k]
        entry.update({HOST_CLOCK_COLUMN: host_clock_cell(meas, r.incomparable_terms),
                      "total measured ms": r.t_ms, "total predicted ms": r.predicted_ms,
                      "error %": error_pct(r.predicted_ms, r.t_ms),
                      "datasheet predicted ms": r.datasheet.total_s * 1e3,
                      "datasheet error %": r.error_pct(r.datasheet)})
        limit = limit_text(r.predicted)
        if limit:
            entry["limit"] = limit
        rows.append(entry)
    return Table.from_records("terms", rows)


def model_accuracy(a) -> Table:
    """Median and worst |error| per selection of runs and machine file, and how many fall within the
    thresholds (report/thresholds.py)."""
    judged = [r for r in a.runs if judged_for_model(r)]
    lines = []
    for name, sel in (("Question 2.2 sweep and its pinned, resident and NCCL variants",
                       [r for r in judged if in_q2_2(a, r)]), ("every cuBLAS GPU run", judged)):
        for which, machine in (("calibrated", a.machines.calibrated), ("datasheet", a.machines.datasheet)):
            errs = [abs(r.error_pct(getattr(r, which))) for r in sel if getattr(r, which)]
            if errs:
                close, fair = WITHIN_CLOSE.value, WITHIN_FAIR.value
                lines.append({"runs": name, "machine file": machine.name, "n": len(errs),
                              "median |error| %": statistics.median(errs), "worst |error| %": max(errs),
                              f"within {close:g}%": sum(e <= close for e in errs),
                              f"within {fair:g}%": sum(e <= fair for e in errs)})
    return Table.from_records("model_accuracy", lines)
