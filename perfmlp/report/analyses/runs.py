"""Every run, one row each, and which runs the model is judged on."""
from __future__ import annotations

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
