"""The model against the measurements: every run, measured against predicted,
the validation (validation.analyse_validation) and, given `--blind-tests`,
the blind-test history, put into words and tables."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from ...trace.reader import STEADY_RULE
from ..analysis import TERMS, Analysis, RunSummary
from ..model_error import (WORST_PER_MACHINE, ErrorStats, History, history_by_machine, interval_table_rows,
                           sign_test_p, worst_configurations)
from ..analyses.accuracy import (HOST_CLOCK_COLUMN, host_clock_cell, judged_for_model, model_accuracy,
                                 runs as runs_table, terms)
from ..figures import measured_vs_predicted
from . import Figure, Section, Table
from ..validation import OtherMachine, SelectionErrors, Validation, analyse_validation, quiet_label
from ..thresholds import MIN_STEADY, SIGN_TEST_LEVEL

TITLE = "The model tested blind: protocol, noise floor and error per term"
STATS = ("median |error| %", "worst |error| %", "signed median %", "above", "below", "within noise", "sign test p")


def host_clock_note(left_out: list[tuple[str, ...]], rows: str, outcome: str) -> str | None:
    """One sentence on the measured terms a per-term table leaves out (`left_out`: each row's)."""
    by_term = Counter(t for terms in left_out for t in terms)
    if not by_term:
        return None
    where = ", ".join(f"{t} in {by_term[t]}" for t in TERMS if by_term[t])
    return (f"{sum(by_term.values())} measured term(s) in {sum(map(bool, left_out))} of {len(left_out)} {rows} "
            f"{outcome} ({where}): they were timed on the host clock (trace level counters), where work the host "
            "only enqueues (kernels, graph replays, NCCL collectives, pinned copies) measures its enqueue and the "
            "staged D2H its wait for the backward pass, not the time the model's term prices "
            f"(trace.format.comparable_terms; the host's times are in the column '{HOST_CLOCK_COLUMN}').")


def sign_verdict(above: int, below: int) -> str:
    n, p = above + below, sign_test_p(above, below)
    if n == 0:
        return "no error with a sign"
    side = "too slow (above the measurement)" if above > below else "too fast (below the measurement)"
    if p < SIGN_TEST_LEVEL.value:
        return f"{above} above, {below} below: biased, the model is {side}; a fair coin splits {n} that unevenly " \
               f"with chance {p:.3f}"
    if above == 0 or below == 0:
        return f"all {n} {'above' if above else 'below'} (the model {side.split(' (')[0]}), but {n} are too few " \
               f"for the sign test to call it a bias at {SIGN_TEST_LEVEL.value:g} (its least p with {n} is {p:.3g})"
    return f"{above} above, {below} below: within what chance gives (sign test p = {p:.2f})"


def stats_cells(e: ErrorStats | None, prefix: str = "") -> dict:
    if e is None:
        return {}
    values = (e.median_abs_pct, e.worst_abs_pct, e.signed_median_pct, e.above, e.below, e.within_noise, e.sign_p)
    return {f"{prefix}{k}": v for k, v in zip(STATS, values)}


def summary_table_rows(summary) -> list[dict]:
    return [{"runs": s.name, "n": s.model.n, "median spread %": s.median_spread_pct, **stats_cells(s.model),
             "resolution": s.resolution, **stats_cells(s.datasheet, "datasheet ")} for s in summary]


def config_rows(v: Validation) -> list[dict]:
    return [{"configuration": c.label, "repeats": c.repeats, "steady batches (min)": c.steady_min,
             "measured ms (median)": c.measured_ms, "spread %": c.spread_pct, "predicted ms": c.predicted_ms,
             "prediction": c.prediction, "error %": c.error_pct, "within noise": c.within_noise,
             "datasheet error %": c.datasheet_error_pct, "datasheet within noise": c.datasheet_within_noise,
             "p": c.p, "comm": c.comm, "exec": c.exec, "transfer": c.transfer, "judged": c.judged}
            for c in v.configs]


def term_rows(v: Validation) -> list[dict]:
    rows = []
    for t in v.terms:
        row = {"configuration": t.label}
        for g in t.shown():
            row[f"{g} measured ms"] = None if g in t.apart else t.measured[g]
            row[f"{g} predicted ms"] = t.predicted.get(g, 0.0)
            row[f"{g} error ms"] = None if g in t.apart else t.predicted.get(g, 0.0) - t.measured[g]
        row[HOST_CLOCK_COLUMN] = host_clock_cell(t.measured, t.apart)
        rows.append(row)
    return rows


def _protocol(v: Validation) -> str:
    cal, m = v.calibrated, v.predictions_machine
    return (
        "Protocol. Calibration: " + (f"{cal.name} ({Path(cal.path).name}): {cal.source}" if cal else
                                     "no calibrated machine file") + ". Predictions: " +
        (f"{v.predictions_note}, made with {m.get('name')} (SHA-256 {str(m.get('sha256'))[:12]}); a prediction is "
         "blind when it was made before its run started" if m is not None else
         f"{v.predictions_note}: every prediction below is the report's own, made after the runs (not blind)") +
        f". Steady window: {STEADY_RULE}; " +
        (f"{len(v.short_runs)} run(s) have fewer than {MIN_STEADY.value} steady batches: {', '.join(v.short_runs)}"
         if v.short_runs else f"every run has at least {MIN_STEADY.value} steady batches") +
        ". Repeats: runs of one configuration are grouped; measured = the median of their times per batch, "
        "spread = (max - min) / median; an error within half the spread is within noise. Code: "
        f"{', '.join(v.commits)} (the manifests' perfmlp_git).")


def section_validation(a: Analysis, history: History | None = None) -> Section:
    s = Section(TITLE)
    v = analyse_validation(a)
    s.paragraphs.append(_protocol(v))
    if not v.configs:
        s.paragraphs.append("No GPU run outside a profiler: nothing to validate.")
        add_history(s, history)
        return s
    tg = a.study.targets
    s.paragraphs.append(f"Targets: {tg.model_median_error_pct:g}% median, {tg.model_worst_error_pct:g}% worst "
                        "(the study's), no sign bias (as many above as below, within what chance gives: a two-sided "
                        f"sign test below {SIGN_TEST_LEVEL.value:g} is called a bias), per p and per communication "
                        "mode; where the median spread is larger than the error, the error is within the run-to-run "
                        "noise and cannot be judged finer (both are shown).")
    s.paragraphs.append(judged_note(v, tg))
    s.tables.append(Table("validation_summary", "Model error against the median of the repeats, overall, per p, "
                          "per communication, execution and transfer mode: the calibrated (or blind) prediction, "
                          "then the datasheet-only model's (columns 'datasheet ...')", summary_table_rows(v.summary)))
    if v.intervals is not None:   # the blind predictions' 90% intervals (model_error.py)
        s.paragraphs.append("Intervals: " + v.intervals.verdict() + ".")
        if v.intervals.rows:
            s.tables.append(Table("validation_intervals", "Each judged configuration's blind 90% interval against "
                                  "the median of its repeats, and where each repeat falls in its predicted "
                                  "distribution (its quantile)", interval_table_rows(v.intervals)))
    for o in v.others:
        other_machine_words(s, o)
    note = host_clock_note([t.apart for t in v.terms], "configuration(s)", "are left out of the error per term")
    if note:
        s.paragraphs.append("Per term: " + note)
    s.tables.append(Table("validation_terms_summary", "Error per term (phase group), over the configurations "
                          "whose trace timed the group's work (on the GPU, or on the host clock where it blocks "
                          "the host)", list(v.per_term)))
    s.tables.append(Table("validation_runs", "Each configuration: repeats, spread, prediction and error",
                          config_rows(v)))
    s.tables.append(Table("validation_terms", "Each configuration, term by term (slowest rank, median over "
                          "the repeats; in a graph run with NCCL the collectives are inside the replay, so in "
                          "compute, measured and predicted; '-': measured on the host clock, not compared: the "
                          f"column '{HOST_CLOCK_COLUMN}')", term_rows(v)))
    if v.whatif:
        s.tables.append(Table("validation_whatif", "What-if from the reference-scheme run (pageable, mpi-staged, "
                              "eager, one GPU) of each size: perfmlp.whatif's prediction against the measurement",
                              list(v.whatif)))
    add_history(s, history)
    return s


def other_machine_words(s: Section, o: OtherMachine) -> None:
    """Another machine file's predictions (sweep --predict-also), apart from the main one's."""
    if o.note is not None:
        s.paragraphs.append(f"{o.file}: {o.note}.")
        return
    if not o.summary:
        s.paragraphs.append(f"{o.file} ({o.name}): no prediction of a judged configuration.")
        return
    al = o.summary[0].model
    s.paragraphs.append(
        f"Predicted with another machine file, {o.name} ({o.file}, SHA-256 {str(o.sha256)[:12]}): "
        f"{al.n} judged configuration(s), {o.blind} blind; median |error| {al.median_abs_pct:.1f}%, worst "
        f"{al.worst_abs_pct:.1f}%, signed median {al.signed_median_pct:+.1f}%; sign: "
        f"{sign_verdict(al.above, al.below)}.")
    s.tables.append(Table(f"validation_{Path(o.file).stem.replace('-', '_')}", f"Model error with {o.name} "
                          f"({o.file}), against the same medians of the repeats", summary_table_rows(o.summary)))


def _left_out(v: Validation) -> list[str]:
    """The configurations the error figures leave out, and why."""
    left: dict = {}
    for c in v.configs:
        if c.judged != "yes":
            left.setdefault(c.judged[4:], []).append(c)
    parts = []
    for why, cs in left.items():
        names = "; ".join(c.label for c in cs)
        if why == "host enqueue times":
            parts.append(f"{len(cs)} configuration(s) ({sum(c.repeats for c in cs)} runs) are left out of the error "
                         "figures: their batch lines are on the host clock (a GPU run traced without device timing) "
                         "and their epoch lines carry no synchronised steady time per batch (traces written before "
                         "the epoch line had it), so their time per batch is the host's enqueue time, not the GPU's "
                         f"(validation_runs.csv shows them, not judged): {names}")
        else:
            parts.append(f"left out ({why}): {names}")
    return parts


def _within(e: ErrorStats, tg) -> str:
    ok = e.median_abs_pct <= tg.model_median_error_pct and e.worst_abs_pct <= tg.model_worst_error_pct
    return "within" if ok else "outside"


def judged_note(v: Validation, tg) -> str:
    """What the error figures leave out and why, then the overall figures and the sign test, in words."""
    parts = _left_out(v)
    if not v.summary:
        return ". ".join(parts + ["No configuration is left to judge"]) + "."
    al: SelectionErrors = v.summary[0]
    m, ds = al.model, al.datasheet
    parts.append(f"Judged: {m.n} configuration(s); median |error| {m.median_abs_pct:.1f}%, worst "
                 f"{m.worst_abs_pct:.1f}% ({_within(m, tg)} the targets), against a median run-to-run spread of "
                 + (f"{al.median_spread_pct:.2f}%" if al.median_spread_pct is not None else "(no repeats)") +
                 f" ({al.resolution}); sign: {sign_verdict(m.above, m.below)}. The datasheet-only model: median "
                 f"|error| {ds.median_abs_pct:.1f}%, worst {ds.worst_abs_pct:.1f}%; sign: "
                 f"{sign_verdict(ds.above, ds.below)}")
    quiet = next((r for r in v.summary if r.name == quiet_label(v.quiet_pct)), None)
    if quiet:
        q = quiet.model
        parts.append(f"Where the repeats agree within {tg.model_median_error_pct:g}% ({q.n} configuration(s), "
                     f"the noise the targets need): median |error| {q.median_abs_pct:.1f}%, worst "
                     f"{q.worst_abs_pct:.1f}% ({_within(q, tg)} the targets); sign: {sign_verdict(q.above, q.below)}")
    biased = [r.name for r in v.summary[1:] if r.model.biased]
    if biased:
        parts.append(f"Sign bias within: {', '.join(biased)}")
    one_sided = [f"{r.name} (all {r.model.above or r.model.below} {'above' if r.model.above else 'below'})"
                 for r in v.summary[1:] if not r.model.biased and r.model.above + r.model.below > 1
                 and 0 in (r.model.above, r.model.below)]
    if one_sided:
        parts.append(f"Every error on one side, too few to test: {', '.join(one_sided)}")
    unresolved = [r.name for r in v.summary if r.resolution.startswith("spread larger")]
    if unresolved:
        parts.append(f"Where the spread is larger than the error ({', '.join(unresolved)}), the error is not "
                     "resolved by these repeats")
    return ". ".join(parts) + "."


# ---- every run, measured against predicted -------------------------------------------------

def section_runs(a: Analysis, labels: dict[str, str], bound: dict[str, str]) -> Section:
    """Every run by its short label (`labels`: run id -> label) and what bounds it (`bound`: run id -> text)."""
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


# ---- the blind-test history ----------------------------------------------------------------

def section_history(history: History | None) -> Section | None:
    """The blind-test history alone (a report of runs none of which ran on a GPU)."""
    if history is None:
        return None
    s = Section("The model's blind tests so far")
    add_history(s, history)
    return s


def add_history(s: Section, history: History | None) -> None:
    """The blind tests so far, per machine, and the worst configurations of each."""
    if history is None:
        return
    if not history:
        s.paragraphs.append(f"Blind-test history ({history.path}): the file holds no blind test.")
        return
    by_machine = history_by_machine(list(history.tests))
    words = [f"{h.machine}: {h.configurations} configuration(s) in {h.sweeps} sweep(s), "
             f"{h.first_date if h.first_date == h.last_date else h.first_date + ' to ' + h.last_date}, "
             f"median |error| {h.errors.median_abs_pct:.1f}%, worst {h.errors.worst_abs_pct:.1f}%, "
             f"signed median {h.errors.signed_median_pct:+.1f}%; sign: {sign_verdict(h.errors.above, h.errors.below)}"
             for h in by_machine]
    s.paragraphs.append(f"Blind-test history ({history.path}: every blind prediction so far beside its measurement, "
                        "the median of its repeats; error = predicted / measured - 1, within noise where |error| <= "
                        "spread / 2 with spread = max / min - 1 over the repeats). " + ". ".join(words) + ".")
    s.tables.append(Table("blind_tests_by_machine", "The model's blind tests so far, per machine kind",
                          [{"machine": h.machine, "configurations": h.configurations, "sweeps": h.sweeps,
                            # the commits by name, or how many where there are more than four
                            "commits": ", ".join(h.commits) if len(h.commits) <= 4 else f"{len(h.commits)} commits",
                            "first": h.first_date, "last": h.last_date,
                            "median spread %": h.median_spread_pct, **stats_cells(h.errors),
                            "resolution": h.resolution} for h in by_machine]))
    s.tables.append(Table("blind_tests_worst", f"The {WORST_PER_MACHINE} blind tests of each machine kind with the "
                          "largest |error|", [{"machine": t.machine, "sweep": t.sweep, "configuration": t.label,
                                               "commit": t.commit, "date": t.date, "repeats": t.repeats,
                                               "predicted ms": 1e3 * t.predicted_s, "measured ms": 1e3 * t.measured_s,
                                               "error %": t.error_pct, "spread %": 100 * t.spread}
                                              for t in worst_configurations(list(history.tests))]))
