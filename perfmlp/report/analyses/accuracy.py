"""The model against the measurement: each GPU run term by term, and the
median and worst |error| over the runs it is judged on, per machine file.
Where the host paces the step, the limit is the measured run-to-run spread."""
from __future__ import annotations

import statistics

from ..analysis import TERMS, error_pct, predicted_terms
from ..thresholds import WITHIN_CLOSE, WITHIN_FAIR
from .runs import in_q2_2, judged_for_model
from .table import Table

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
