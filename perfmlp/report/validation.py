"""The model tested blind: the protocol the report carries out and states.

- Calibration: the machine file's own `source:` line says what was measured
  (perfmlp.calibrate: microbenchmarks only, never the trainer).
- Blind predictions: `predictions.json` beside the traces (written by
  `perfmlp.sweep --predict` before it launches a run); a prediction counts
  as blind only when it was made before its run started (the manifest's
  start). Runs without one are judged with the report's own (calibrated)
  prediction and marked "not blind".
- Repeats: runs of the same configuration are grouped; the measured time is
  the median of the repeats' times per batch, the run-to-run spread is
  (max - min) / median, and a model error within half that spread is
  "within noise".
- Windows: the trace reader's steady rule (trace/reader.py STEADY_RULE);
  runs with fewer than MIN_STEADY steady batches are named.
- Error per term: the slowest rank's median time of each phase group
  against the model's terms summed into the same groups.
- What-if: from the reference-scheme run of a size on one GPU, each other
  measured configuration of that size predicted by perfmlp.whatif, beside
  its measurement.
"""
from __future__ import annotations

import datetime as dt
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..model.costs import DEFAULT_BUCKET_BYTES
from ..model.predict import GROUPS
from ..trace.reader import STEADY_RULE
from .analysis import Analysis, RunSummary, exec_of, predicted_terms
from .sections import Section, Table

PREDICTIONS = "predictions.json"  # perfmlp/sweep.py writes it
MIN_STEADY = 20


@dataclass
class Config:
    key: tuple
    runs: list            # RunSummary, one per repeat
    label: str

    @property
    def t_ms(self) -> float:
        return statistics.median(r.t_ms for r in self.runs)

    @property
    def spread_pct(self) -> float | None:
        if len(self.runs) < 2:
            return None
        t = [r.t_ms for r in self.runs]
        return 100 * (max(t) - min(t)) / statistics.median(t)


def config_key(s: RunSummary, exec_mode: str, cfg: dict) -> tuple:
    return (s.hidden, s.batch, s.procs, s.precision, s.transfer, s.comm, s.gemm, exec_mode,
            bool(cfg.get("overlap", False)), int(cfg.get("bucket_bytes", DEFAULT_BUCKET_BYTES)), bool(cfg.get("cprofile", False)))


def read_predictions(folder: Path | None) -> tuple[dict | None, str]:
    """(the predictions file's content, one line about it)."""
    if folder is None:
        return None, "no trace folder"
    path = Path(folder) / PREDICTIONS
    if not path.exists():
        return None, f"no {PREDICTIONS} beside the traces"
    try:
        data = json.loads(path.read_text())
        assert isinstance(data, dict) and isinstance(data.get("runs"), dict)
        return data, f"{path}"
    except (OSError, ValueError, AssertionError):
        return None, f"{path}: unreadable, ignored"


def _time(text: str | None) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def blind_status(pred: dict | None, start: str | None) -> str:
    """"blind" when the prediction was made no later than the run's start
    (the manifest's start has whole seconds: the prediction's time is
    compared truncated to the second), else why not."""
    if pred is None:
        return "not blind (no prediction)"
    p, s = _time(pred.get("predicted_at")), _time(start)
    if p is None or s is None:
        return "not blind (no time)"
    return "blind" if p.replace(microsecond=0) <= s else "not blind (predicted after the run started)"


def _summary(rows: list[dict], err_key: str) -> dict:
    errs = [r[err_key] for r in rows if r.get(err_key) is not None]
    if not errs:
        return {}
    noise = [r["spread %"] for r in rows if r.get("spread %") is not None]
    return {"n": len(errs), "median |error| %": statistics.median(abs(e) for e in errs),
            "worst |error| %": max(abs(e) for e in errs), "signed median %": statistics.median(errs),
            "above": sum(e > 0 for e in errs), "below": sum(e < 0 for e in errs),
            "within noise": sum(1 for r in rows if r.get("within noise") == "yes"),
            "median spread %": statistics.median(noise) if noise else None}


def section_validation(a: Analysis) -> Section:
    s = Section("The model tested blind: protocol, noise floor and error per term")
    cal = a.machines.calibrated
    preds, pred_note = read_predictions(a.folder)
    traces = {t.run_id: t for t in a.traces}
    groups: dict[tuple, Config] = {}
    for r in a.gpu_runs:
        if r.profiled:
            continue
        t = traces[r.run_id]
        key = config_key(r, exec_of(t), t.config)
        label = (f"H={r.hidden_label} B={r.batch} p={r.procs} {r.precision} {r.transfer}/{r.comm} {r.gemm} "
                 f"{key[7]}" + (" overlap" if key[8] else "") + (" under cProfile" if key[10] else ""))
        groups.setdefault(key, Config(key, [], label)).runs.append(r)
    commits = sorted({str((t.manifest.get("versions") or {}).get("perfmlp_git")) for t in a.traces})
    short = [r.run_id for r in a.gpu_runs if r.batches < MIN_STEADY]
    pred_machine = (preds or {}).get("machine", {})
    s.paragraphs.append(
        "Protocol. Calibration: " + (f"{cal.name} ({Path(cal.path).name}): {cal.source}" if cal else
                                     "no calibrated machine file") + ". Predictions: " +
        (f"{pred_note}, made with {pred_machine.get('name')} (SHA-256 {str(pred_machine.get('sha256'))[:12]}); a "
         "prediction is blind when it was made before its run started" if preds else
         f"{pred_note}: every prediction below is the report's own, made after the runs (not blind)") +
        f". Steady window: {STEADY_RULE}; " +
        (f"{len(short)} run(s) have fewer than {MIN_STEADY} steady batches: {', '.join(short)}" if short else
         f"every run has at least {MIN_STEADY} steady batches") +
        f". Repeats: runs of one configuration are grouped; measured = the median of their times per batch, "
        f"spread = (max - min) / median; an error within half the spread is within noise. Code: "
        f"{', '.join(commits)} (the manifests' perfmlp_git).")
    rows, term_rows, judged = [], [], []
    for c in sorted(groups.values(), key=lambda c: c.label):
        statuses, blind_totals, blind_groups = [], [], []
        for r in c.runs:
            p = (preds or {}).get("runs", {}).get(r.run_id)
            st = blind_status(p, traces[r.run_id].manifest.get("start"))
            statuses.append(st)
            if st == "blind":
                blind_totals.append(p["total_s"] * 1e3)
                blind_groups.append({g: v * 1e3 for g, v in p.get("groups_s", {}).items()})
        blind = bool(blind_totals) and len(blind_totals) == len(c.runs)
        ref = c.runs[0]
        pred_ms = blind_totals[0] if blind else (ref.predicted.total_s * 1e3 if ref.predicted else None)
        pred_groups = blind_groups[0] if blind else (predicted_terms(ref.predicted) if ref.predicted else {})
        spread = c.spread_pct
        err = 100 * (pred_ms / c.t_ms - 1) if pred_ms else None
        ds = 100 * (ref.datasheet.total_s * 1e3 / c.t_ms - 1) if ref.datasheet else None
        row = {"configuration": c.label, "repeats": len(c.runs), "steady batches (min)": min(r.batches for r in c.runs),
               "measured ms (median)": c.t_ms, "spread %": spread, "predicted ms": pred_ms,
               "prediction": "blind" if blind else next(st for st in statuses if st != "blind"), "error %": err,
               "within noise": ("yes" if spread is not None and err is not None and abs(err) <= spread / 2 else
                                "no" if spread is not None else "-"),
               "datasheet error %": ds, "p": c.key[2], "comm": c.key[5], "exec": c.key[7]}
        rows.append(row)
        if (c.key[6] == "cublas" or (cal is not None and cal.has_gemm_kernel(c.key[6]))) and not c.key[10]:
            judged.append(row)  # the reference's kernels only where the machine file has their rates; cProfile's
            #                     host cost is not modelled
        meas = {g: statistics.median(r.measured_terms(r.slowest_rank)[g] for r in c.runs) for g in GROUPS}
        trow = {"configuration": c.label}
        for g in GROUPS:
            if meas[g] or pred_groups.get(g):
                trow[f"{g} measured ms"] = meas[g]
                trow[f"{g} predicted ms"] = pred_groups.get(g, 0.0)
                trow[f"{g} error ms"] = pred_groups.get(g, 0.0) - meas[g]
        term_rows.append(trow)
    if not rows:
        s.paragraphs.append("No GPU run outside a profiler: nothing to validate.")
        return s
    summary = []
    for name, sel in [("all", judged)] + \
            [(f"p={p}", [r for r in judged if r["p"] == p]) for p in sorted({r["p"] for r in judged})] + \
            [(f"comm {m}", [r for r in judged if r["comm"] == m]) for m in sorted({r["comm"] for r in judged})] + \
            [(f"exec {m}", [r for r in judged if r["exec"] == m]) for m in sorted({r["exec"] for r in judged})]:
        line = _summary(sel, "error %")
        if line:
            ds = _summary(sel, "datasheet error %")
            summary.append({"runs": name, **line, "datasheet median |error| %": ds.get("median |error| %"),
                            "datasheet worst |error| %": ds.get("worst |error| %")})
    per_term = []
    for g in GROUPS:
        errs = [(t[f"{g} predicted ms"], t[f"{g} measured ms"]) for t in term_rows if f"{g} measured ms" in t]
        rel = [100 * (p / m - 1) for p, m in errs if m > 0]
        if errs:
            per_term.append({"term": g, "configurations": len(errs),
                             "median |error| ms": statistics.median(abs(p - m) for p, m in errs),
                             "median |error| %": statistics.median(abs(e) for e in rel) if rel else None,
                             "signed median %": statistics.median(rel) if rel else None})
    tg = a.study.targets
    s.paragraphs.append(f"Targets: {tg.model_median_error_pct:g}% median, {tg.model_worst_error_pct:g}% worst "
                        "(the study's), no sign bias (as many above as below), per p and per communication mode; "
                        "where the median spread is larger than the error, the error is within the run-to-run "
                        "noise and cannot be judged finer.")
    s.tables.append(Table("validation_summary", "Model error against the median of the repeats, overall, per p, "
                          "per communication mode and per execution mode (datasheet-only beside it)", summary))
    s.tables.append(Table("validation_terms_summary", "Error per term (phase group), over the configurations",
                          per_term))
    s.tables.append(Table("validation_runs", "Each configuration: repeats, spread, prediction and error", rows))
    s.tables.append(Table("validation_terms", "Each configuration, term by term (slowest rank, median over "
                          "the repeats)", term_rows))
    wi = what_if_rows(a, groups)
    if wi:
        s.tables.append(Table("validation_whatif", "What-if from the reference-scheme run (pageable, mpi-staged, "
                              "eager, one GPU) of each size: perfmlp.whatif's prediction against the measurement",
                              wi))
    return s


def what_if_rows(a: Analysis, groups: dict) -> list[dict]:
    """perfmlp.whatif from each size's one-GPU reference-scheme run to every
    other measured configuration of that size."""
    from ..whatif import what_if
    machine = a.machines.primary
    traces = {t.run_id: t for t in a.traces}
    out = []
    for key, c in sorted(groups.items(), key=lambda kv: kv[1].label):
        hidden, batch, procs, prec, transfer, comm, gemm, exec_mode, overlap, bucket, cprofile = key
        base_key = (hidden, batch, 1, prec, "pageable", "mpi-staged", gemm, "eager", False, bucket, cprofile)
        if key == base_key or base_key not in groups:
            continue
        base = traces[groups[base_key].runs[0].run_id]
        sets = {"comm": comm, "batch_transfer": transfer, "exec": exec_mode, "overlap": overlap}
        try:
            w = what_if(base, machine, sets, procs)
        except ValueError:
            continue
        err = 100 * (w.total_ms / c.t_ms - 1)
        out.append({"from": groups[base_key].label, "to": c.label, "changed terms": ", ".join(w.changed_terms),
                    "what-if ms": w.total_ms, "measured ms": c.t_ms, "error %": err,
                    "model alone ms": w.predicted_after.total_s * 1e3})
    return out
