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
  against the model's terms summed into the same groups, where the trace
  timed the group's work (trace.format.comparable_terms: on the GPU, or on
  the host clock where the work blocks the host); other measured groups are
  shown, not compared.
- What-if: from the reference-scheme run of a size on one GPU, each other
  measured configuration of that size predicted by perfmlp.whatif, beside
  its measurement.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..model.predict import GROUPS
from ..trace.reader import STEADY_RULE
from .analysis import Analysis, RunSummary, predicted_terms
from .sections import HOST_CLOCK_COLUMN, Section, Table, host_clock_cell, host_clock_note

PREDICTIONS = "predictions.json"  # perfmlp/sweep.py writes it
MORE_PREDICTIONS = "predictions-*.json"   # sweep --predict-also: another machine file's, e.g. another GPU's
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


def config_key(s: RunSummary) -> tuple:
    return (s.hidden, s.batch, s.procs, s.precision, s.transfer, s.comm, s.gemm, s.exec, s.overlap, s.bucket_bytes,
            s.cprofile)


def read_predictions(folder: Path | None, name: str = PREDICTIONS) -> tuple[dict | None, str]:
    """(the predictions file's content, one line about it)."""
    if folder is None:
        return None, "no trace folder"
    path = Path(folder) / name
    if not path.exists():
        return None, f"no {name} beside the traces"
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


SIGN_TEST_LEVEL = 0.05  # a sign bias is stated when the two-sided sign test gives less than this


def sign_test_p(above: int, below: int) -> float:
    """Two-sided sign test: the chance that a fair coin splits above + below
    runs at least as unevenly as this (ties left out)."""
    n, k = above + below, min(above, below)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def sign_verdict(above: int, below: int) -> str:
    """The sign test in words."""
    n, p = above + below, sign_test_p(above, below)
    if n == 0:
        return "no error with a sign"
    side = "too slow (above the measurement)" if above > below else "too fast (below the measurement)"
    if p < SIGN_TEST_LEVEL:
        return f"{above} above, {below} below: biased, the model is {side}; a fair coin splits {n} that unevenly " \
               f"with chance {p:.3f}"
    if above == 0 or below == 0:
        return f"all {n} {'above' if above else 'below'} (the model {side.split(' (')[0]}), but {n} are too few " \
               f"for the sign test to call it a bias at {SIGN_TEST_LEVEL:g} (its least p with {n} is {p:.3g})"
    return f"{above} above, {below} below: within what chance gives (sign test p = {p:.2f})"


def _summary(rows: list[dict], err_key: str, within_key: str) -> dict:
    errs = [r[err_key] for r in rows if r.get(err_key) is not None]
    if not errs:
        return {}
    above, below = sum(e > 0 for e in errs), sum(e < 0 for e in errs)
    return {"median |error| %": statistics.median(abs(e) for e in errs), "worst |error| %": max(abs(e) for e in errs),
            "signed median %": statistics.median(errs), "above": above, "below": below,
            "within noise": sum(1 for r in rows if r.get(within_key) == "yes"), "sign test p": sign_test_p(above, below)}


def within_noise(err: float | None, spread: float | None) -> str:
    return "yes" if spread is not None and err is not None and abs(err) <= spread / 2 else \
        "no" if spread is not None and err is not None else "-"


def resolution(median_abs_err: float, median_spread: float | None) -> str:
    """Whether the run-to-run spread lets the error be judged at this level."""
    if median_spread is None:
        return "no repeats: spread unknown"
    if median_abs_err <= median_spread / 2:
        return "spread larger than the error: not resolved"
    return "error larger than half the spread: resolved"


def quiet_label(quiet_pct: float) -> str:
    return f"spread < {quiet_pct:g}%"


def summary_rows(judged: list[dict], quiet_pct: float | None = None) -> list[dict]:
    """Error figures overall, per p, communication, execution and transfer
    mode: the calibrated (or blind) prediction's and the datasheet's; with
    `quiet_pct`, also over the configurations whose repeats agree within
    it (spread below) and over the others: where a configuration's own
    noise lets its error be judged at the target's level."""
    out = []
    selections = [("all", judged)]
    for key, name in (("p", "p="), ("comm", "comm "), ("exec", "exec "), ("transfer", "transfer ")):
        for v in sorted({r[key] for r in judged}):
            selections.append((f"{name}{v}", [r for r in judged if r[key] == v]))
    if quiet_pct is not None:
        quiet = [r for r in judged if r.get("spread %") is not None and r["spread %"] < quiet_pct]
        selections += [(quiet_label(quiet_pct), quiet),
                       (f"spread >= {quiet_pct:g}%", [r for r in judged if r not in quiet])]
    for name, sel in selections:
        cal = _summary(sel, "error %", "within noise")
        if not cal:
            continue
        noise = [r["spread %"] for r in sel if r.get("spread %") is not None]
        spread = statistics.median(noise) if noise else None
        ds = _summary(sel, "datasheet error %", "datasheet within noise")
        out.append({"runs": name, "n": sum(r.get("error %") is not None for r in sel), "median spread %": spread,
                    **cal, "resolution": resolution(cal["median |error| %"], spread),
                    **{f"datasheet {k}": v for k, v in ds.items()}})
    return out


def incomparable_groups(runs: list[RunSummary]) -> tuple[str, ...]:
    """The phase groups of a configuration that some repeat timed on the
    host clock, where that time is not the work's (RunSummary.incomparable_terms)."""
    left = {g for r in runs for g in r.incomparable_terms}
    return tuple(g for g in GROUPS if g in left)


def section_validation(a: Analysis) -> Section:
    s = Section("The model tested blind: protocol, noise floor and error per term")
    cal = a.machines.calibrated
    preds, pred_note = read_predictions(a.folder)
    traces = {t.run_id: t for t in a.traces}
    groups: dict[tuple, Config] = {}
    for r in a.gpu_runs:
        if r.profiled:
            continue
        key = config_key(r)
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
    left_out = []  # each configuration's groups timed on the host clock, not compared
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
               "within noise": within_noise(err, spread), "datasheet error %": ds,
               "datasheet within noise": within_noise(ds, spread),
               "p": c.key[2], "comm": c.key[5], "exec": c.key[7], "transfer": c.key[4]}
        # the reference's kernels only where the machine file has their rates; cProfile's host cost is not
        # modelled; a time per batch on the host's enqueue clock is not the GPU's
        row["judged"] = ("no: host enqueue times" if any(r.host_enqueue for r in c.runs) else
                         "no: under cProfile" if c.key[10] else
                         "yes" if c.key[6] == "cublas" or (cal is not None and cal.has_gemm_kernel(c.key[6])) else
                         "no: no rate for its GEMM kernel")
        rows.append(row)
        if row["judged"] == "yes":
            judged.append(row)
        meas = {g: statistics.median(r.measured_terms(r.slowest_rank)[g] for r in c.runs) for g in GROUPS}
        if c.key[7] == "graph" and c.key[5] != "mpi-staged":
            # one replay holds the NCCL collectives: the trace times them inside compute, so the
            # prediction is compared the same way
            inside = pred_groups.get("compute", 0.0) + pred_groups.get("allreduce", 0.0)
            pred_groups = {**pred_groups, "compute": inside, "allreduce": 0.0}
        trow = {"configuration": c.label}
        apart = incomparable_groups(c.runs)
        for g in GROUPS:
            if meas[g] or pred_groups.get(g):
                trow[f"{g} measured ms"] = None if g in apart else meas[g]
                trow[f"{g} predicted ms"] = pred_groups.get(g, 0.0)
                trow[f"{g} error ms"] = None if g in apart else pred_groups.get(g, 0.0) - meas[g]
        trow[HOST_CLOCK_COLUMN] = host_clock_cell(meas, apart)
        term_rows.append(trow)
        left_out.append(apart)
    if not rows:
        s.paragraphs.append("No GPU run outside a profiler: nothing to validate.")
        return s
    tg = a.study.targets
    summary = summary_rows(judged, tg.model_median_error_pct)
    per_term = []
    for g in GROUPS:
        errs = [(t[f"{g} predicted ms"], t[f"{g} measured ms"]) for t in term_rows
                if t.get(f"{g} error ms") is not None]
        rel = [100 * (p / m - 1) for p, m in errs if m > 0]
        if errs:
            per_term.append({"term": g, "configurations": len(errs),
                             "median |error| ms": statistics.median(abs(p - m) for p, m in errs),
                             "median |error| %": statistics.median(abs(e) for e in rel) if rel else None,
                             "signed median %": statistics.median(rel) if rel else None})
    s.paragraphs.append(f"Targets: {tg.model_median_error_pct:g}% median, {tg.model_worst_error_pct:g}% worst "
                        "(the study's), no sign bias (as many above as below, within what chance gives: a two-sided "
                        f"sign test below {SIGN_TEST_LEVEL:g} is called a bias), per p and per communication mode; "
                        "where the median spread is larger than the error, the error is within the run-to-run "
                        "noise and cannot be judged finer (both are shown).")
    s.paragraphs.append(judged_note(rows, groups, judged, summary, tg))
    s.tables.append(Table("validation_summary", "Model error against the median of the repeats, overall, per p, "
                          "per communication, execution and transfer mode: the calibrated (or blind) prediction, "
                          "then the datasheet-only model's (columns 'datasheet ...')", summary))
    for path in sorted(Path(a.folder).glob(MORE_PREDICTIONS)) if a.folder is not None else []:
        cross_section(s, path, judged, groups, traces)
    note = host_clock_note(left_out, "configuration(s)", "are left out of the error per term")
    if note:
        s.paragraphs.append("Per term: " + note)
    s.tables.append(Table("validation_terms_summary", "Error per term (phase group), over the configurations "
                          "whose trace timed the group's work (on the GPU, or on the host clock where it blocks "
                          "the host)", per_term))
    s.tables.append(Table("validation_runs", "Each configuration: repeats, spread, prediction and error", rows))
    s.tables.append(Table("validation_terms", "Each configuration, term by term (slowest rank, median over "
                          "the repeats; in a graph run with NCCL the collectives are inside the replay, so in "
                          "compute, measured and predicted; '-': measured on the host clock, not compared: the "
                          f"column '{HOST_CLOCK_COLUMN}')", term_rows))
    wi = what_if_rows(a, groups)
    if wi:
        s.tables.append(Table("validation_whatif", "What-if from the reference-scheme run (pageable, mpi-staged, "
                              "eager, one GPU) of each size: perfmlp.whatif's prediction against the measurement",
                              wi))
    return s


def cross_section(s: Section, path: Path, judged: list[dict], groups: dict, traces: dict) -> None:
    """Another machine file's predictions of the judged configurations
    (sweep --predict-also), their error apart from the main one's."""
    preds, note = read_predictions(path.parent, path.name)
    if preds is None:
        s.paragraphs.append(f"{path.name}: {note}.")
        return
    by_label = {c.label: c for c in groups.values()}
    rows, blind = [], 0
    for j in judged:
        c = by_label[j["configuration"]]
        entries = [(preds["runs"].get(r.run_id), traces[r.run_id].manifest.get("start")) for r in c.runs]
        entries = [(e, start) for e, start in entries if e]
        if not entries:
            continue
        blind += all(blind_status(e, start) == "blind" for e, start in entries) and len(entries) == len(c.runs)
        err = 100 * (entries[0][0]["total_s"] * 1e3 / c.t_ms - 1)
        rows.append({**{k: j[k] for k in ("p", "comm", "exec", "transfer", "spread %")}, "error %": err,
                     "within noise": within_noise(err, j["spread %"])})
    m = preds.get("machine", {})
    if not rows:
        s.paragraphs.append(f"{path.name} ({m.get('name')}): no prediction of a judged configuration.")
        return
    summary = summary_rows(rows)
    al = summary[0]
    s.paragraphs.append(
        f"Predicted with another machine file, {m.get('name')} ({path.name}, SHA-256 {str(m.get('sha256'))[:12]}): "
        f"{al['n']} judged configuration(s), {blind} blind; median |error| {al['median |error| %']:.1f}%, worst "
        f"{al['worst |error| %']:.1f}%, signed median {al['signed median %']:+.1f}%; sign: "
        f"{sign_verdict(al['above'], al['below'])}.")
    s.tables.append(Table(f"validation_{path.stem.replace('-', '_')}", f"Model error with {m.get('name')} "
                          f"({path.name}), against the same medians of the repeats", summary))


def judged_note(rows: list[dict], groups: dict, judged: list[dict], summary: list[dict], tg) -> str:
    """Which configurations the error figures leave out and why, then the
    overall figures and the sign test in words."""
    left = {}
    for r in rows:
        if r["judged"] != "yes":
            left.setdefault(r["judged"][4:], []).append(r["configuration"])
    parts = []
    for why, names in left.items():
        if why == "host enqueue times":
            n_runs = sum(len(c.runs) for c in groups.values() if c.label in names)
            parts.append(f"{len(names)} configuration(s) ({n_runs} runs) are left out of the error figures: their "
                         "batch lines are on the host clock (a GPU run traced without device timing) and their "
                         "epoch lines carry no synchronised steady time per batch (traces written before the epoch "
                         "line had it), so their time per batch is the host's enqueue time, not the GPU's "
                         f"(validation_runs.csv shows them, not judged): {'; '.join(names)}")
        else:
            parts.append(f"left out ({why}): {'; '.join(names)}")
    if not summary:
        return ". ".join(parts + ["No configuration is left to judge"]) + "."
    al = summary[0]
    cal_ok = al["median |error| %"] <= tg.model_median_error_pct and al["worst |error| %"] <= tg.model_worst_error_pct
    parts.append(f"Judged: {al['n']} configuration(s); median |error| {al['median |error| %']:.1f}%, worst "
                 f"{al['worst |error| %']:.1f}% ({'within' if cal_ok else 'outside'} the targets), against a median "
                 f"run-to-run spread of " + (f"{al['median spread %']:.2f}%" if al["median spread %"] is not None
                                              else "(no repeats)") + f" ({al['resolution']}); sign: "
                 f"{sign_verdict(al['above'], al['below'])}. The datasheet-only model: median |error| "
                 f"{al['datasheet median |error| %']:.1f}%, worst {al['datasheet worst |error| %']:.1f}%; sign: "
                 f"{sign_verdict(al['datasheet above'], al['datasheet below'])}")
    quiet = next((r for r in summary if r["runs"] == quiet_label(tg.model_median_error_pct)), None)
    if quiet:
        ok = quiet["median |error| %"] <= tg.model_median_error_pct and \
            quiet["worst |error| %"] <= tg.model_worst_error_pct
        parts.append(f"Where the repeats agree within {tg.model_median_error_pct:g}% ({quiet['n']} configuration(s), "
                     f"the noise the targets need): median |error| {quiet['median |error| %']:.1f}%, worst "
                     f"{quiet['worst |error| %']:.1f}% ({'within' if ok else 'outside'} the targets); sign: "
                     f"{sign_verdict(quiet['above'], quiet['below'])}")
    biased = [r["runs"] for r in summary[1:] if r["sign test p"] < SIGN_TEST_LEVEL]
    if biased:
        parts.append(f"Sign bias within: {', '.join(biased)}")
    one_sided = [f"{r['runs']} (all {r['above'] or r['below']} {'above' if r['above'] else 'below'})"
                 for r in summary[1:] if r["sign test p"] >= SIGN_TEST_LEVEL and r["above"] + r["below"] > 1
                 and 0 in (r["above"], r["below"])]
    if one_sided:
        parts.append(f"Every error on one side, too few to test: {', '.join(one_sided)}")
    unresolved = [r["runs"] for r in summary if r["resolution"].startswith("spread larger")]
    if unresolved:
        parts.append(f"Where the spread is larger than the error ({', '.join(unresolved)}), the error is not "
                     "resolved by these repeats")
    return ". ".join(parts) + "."


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
        host = any(r.host_enqueue for r in groups[base_key].runs + c.runs)
        out.append({"from": groups[base_key].label, "to": c.label, "changed terms": ", ".join(w.changed_terms),
                    "what-if ms": w.total_ms, "measured ms": c.t_ms, "error %": err,
                    "model alone ms": w.predicted_after.total_s * 1e3,
                    "judged": "no: host enqueue times" if host else "yes"})
    return out
