"""The model tested blind, as typed results (sections/validation.py words them).

A configuration's repeats are grouped: its time is their median, its spread
(max - min) / median, and an error within half the spread is "within
noise". A prediction counts as blind only when it was made before its run
started (model_error.blind_status); runs without one are judged with the
report's own prediction, "not blind". Per term, the slowest rank's median
phase groups are compared with the model's terms summed into the same
groups only where the trace timed the group's work as the model means it
(trace.format.comparable_terms); the other measured groups are shown.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from .analysis import Analysis, error_pct, predicted_terms
from .model_error import (ErrorStats, error_stats, judge_intervals, read_predictions, resolution,
                          run_entries, within_noise)
from .whatif import what_if_run
from .. import names as N
from .thresholds import MIN_STEADY


@dataclass
class RepeatGroup:
    """The runs of one configuration (its repeats)."""
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


def repeat_groups(a: Analysis, runs=None) -> dict[tuple, RepeatGroup]:
    """The GPU runs (or `runs`: a CPU sweep's) outside a profiler, grouped by configuration."""
    groups: dict[tuple, RepeatGroup] = {}
    for r in a.gpu_runs if runs is None else runs:
        if r.profiled:
            continue
        key = (r.hidden, r.batch, r.procs, r.precision, r.transfer, r.comm, r.gemm, r.exec, r.overlap, r.bucket_bytes,
               r.cprofile)
        label = (f"H={r.hidden_label} B={r.batch} p={r.procs} {r.precision} {r.transfer}/{r.comm} {r.gemm} "
                 f"{r.exec}" + (" overlap" if r.overlap else "") + (" under cProfile" if r.cprofile else ""))
        groups.setdefault(key, RepeatGroup(key, [], label)).runs.append(r)
    return groups


@dataclass(frozen=True)
class ConfigError:
    """One configuration's prediction against the median of its repeats."""
    label: str
    repeats: int
    steady_min: int               # the fewest steady batches of a repeat
    measured_ms: float
    spread_pct: float | None
    predicted_ms: float | None
    prediction: str               # "blind", or why not (model_error.blind_status)
    error_pct: float | None
    within_noise: str
    datasheet_error_pct: float | None
    datasheet_within_noise: str
    p: int
    comm: str
    exec: str
    transfer: str
    judged: str                   # "yes", or "no: why"
    precision: str = "float32"


@dataclass(frozen=True)
class TermErrors:
    """One configuration by phase group (ms): the slowest rank's median over the repeats, the
    prediction, and the groups timed on the host clock (`apart`: shown, not compared)."""
    label: str
    measured: dict
    predicted: dict
    apart: tuple

    def shown(self) -> tuple[str, ...]:
        """The groups measured or predicted (GROUPS' order)."""
        return tuple(g for g in N.GROUPS if self.measured[g] or self.predicted.get(g))

    def compared(self) -> dict[str, tuple[float, float]]:
        """group -> (predicted, measured) of the groups shown and not apart."""
        return {g: (self.predicted.get(g, 0.0), self.measured[g]) for g in self.shown() if g not in self.apart}


@dataclass(frozen=True)
class SelectionErrors:
    """The error figures of the calibrated (or blind) and the datasheet prediction over a
    selection of judged configurations ("all", "p=2", "comm nccl", ...)."""
    name: str
    median_spread_pct: float | None
    model: ErrorStats
    resolution: str
    datasheet: ErrorStats | None


@dataclass(frozen=True)
class OtherMachine:
    """Another machine file's predictions of the judged configurations (sweep --predict-also):
    how many were blind, its error figures, or why it was not read (`note`)."""
    file: str
    name: str | None
    sha256: str | None
    blind: int = 0
    summary: tuple = ()
    note: str | None = None


@dataclass(frozen=True)
class Validation:
    calibrated: object                # the calibrated Machine, or None
    predictions_note: str
    predictions_machine: dict | None  # None: no predictions file
    short_runs: tuple
    commits: tuple
    configs: tuple                    # ConfigError, by label
    terms: tuple                      # TermErrors, the same order
    summary: tuple                    # SelectionErrors of the judged configurations
    per_term: tuple                   # rows: the error of each phase group over the configurations comparing it
    others: tuple                     # OtherMachine
    whatif: tuple                     # rows: what_if_rows
    quiet_pct: float                  # the spread below which a configuration's noise lets it be judged
    intervals: object = None          # model_error.IntervalJudgement of the blind intervals, or None


def repeat_prediction(c: RepeatGroup, preds: dict | None, starts: dict) -> tuple[float | None, dict, str]:
    """(predicted ms, group -> ms, status): the blind prediction where every repeat has one, else the report's."""
    found = run_entries(preds, c.runs, starts)
    if all(st == "blind" for _, st in found):
        p = found[0][0]
        return p["total_s"] * 1e3, {g: v * 1e3 for g, v in p.get("groups_s", {}).items()}, "blind"
    pred = c.runs[0].predicted
    return (pred.total_s * 1e3 if pred else None, predicted_terms(pred) if pred else {},
            next(st for _, st in found if st != "blind"))


def _judged(c: RepeatGroup, calibrated) -> str:
    """Whether a configuration's error counts, or why not."""
    gemm = c.runs[0].gemm
    return ("no: host enqueue times" if any(r.host_enqueue for r in c.runs) else
            "no: under cProfile" if c.runs[0].cprofile else
            "yes" if gemm == N.CUBLAS or (calibrated is not None and calibrated.has_gemm_kernel(gemm)) else
            "no: no rate for its GEMM kernel")


def config_error(c: RepeatGroup, preds: dict | None, starts: dict, calibrated) -> tuple[ConfigError, TermErrors]:
    pred_ms, pred_groups, status = repeat_prediction(c, preds, starts)
    spread, ref = c.spread_pct, c.runs[0]
    err = error_pct(pred_ms, c.t_ms) if pred_ms else None
    ds = error_pct(ref.datasheet.total_s * 1e3, c.t_ms) if ref.datasheet else None
    row = ConfigError(c.label, len(c.runs), min(r.batches for r in c.runs), c.t_ms, spread, pred_ms, status, err,
                      within_noise(err, spread), ds, within_noise(ds, spread), ref.procs, ref.comm, ref.exec,
                      ref.transfer, _judged(c, calibrated), ref.precision)
    meas = {g: statistics.median(r.measured_terms(r.slowest_rank)[g] for r in c.runs) for g in N.GROUPS}
    if ref.exec == N.GRAPH and ref.comm != N.MPI_STAGED:
        # one replay holds the NCCL collectives: the trace times them inside compute, so the
        # prediction is compared the same way
        inside = pred_groups.get(N.COMPUTE, 0.0) + pred_groups.get(N.ALLREDUCE, 0.0)
        pred_groups = {**pred_groups, N.COMPUTE: inside, N.ALLREDUCE: 0.0}
    left = {g for r in c.runs for g in r.incomparable_terms}   # some repeat timed it on the host clock
    return row, TermErrors(c.label, meas, pred_groups, tuple(g for g in N.GROUPS if g in left))


def quiet_label(quiet_pct: float) -> str:
    return f"spread < {quiet_pct:g}%"


def summary_rows(judged: list[ConfigError], quiet_pct: float | None = None) -> list[SelectionErrors]:
    """Error figures overall, per p, comm, exec and transfer mode, and per precision where more than
    one ran; with `quiet_pct`, also over the configurations whose spread is below it and the others."""
    selections = [("all", judged)]
    for key, name in (("p", "p="), ("comm", "comm "), ("exec", "exec "), ("transfer", "transfer "),
                      ("precision", "precision ")):
        values = sorted({getattr(r, key) for r in judged})
        if key != "precision" or len(values) > 1:
            selections += [(f"{name}{v}", [r for r in judged if getattr(r, key) == v]) for v in values]
    if quiet_pct is not None:
        quiet = [r for r in judged if r.spread_pct is not None and r.spread_pct < quiet_pct]
        selections += [(quiet_label(quiet_pct), quiet),
                       (f"spread >= {quiet_pct:g}%", [r for r in judged if r not in quiet])]
    out = []
    for name, sel in selections:
        cal = error_stats([r.error_pct for r in sel], sum(r.within_noise == "yes" for r in sel))
        if cal is None:
            continue
        noise = [r.spread_pct for r in sel if r.spread_pct is not None]
        spread = statistics.median(noise) if noise else None
        ds = error_stats([r.datasheet_error_pct for r in sel], sum(r.datasheet_within_noise == "yes" for r in sel))
        out.append(SelectionErrors(name, spread, cal, resolution(cal.median_abs_pct, spread), ds))
    return out


def per_term(terms: list[TermErrors]) -> list[dict]:
    """A row per phase group: its error over the configurations that compare it."""
    out = []
    for g in N.GROUPS:
        errs = [t.compared()[g] for t in terms if g in t.compared()]
        rel = [100 * (p / m - 1) for p, m in errs if m > 0]
        if errs:
            out.append({"term": g, "configurations": len(errs),
                        "median |error| ms": statistics.median(abs(p - m) for p, m in errs),
                        "median |error| %": statistics.median(abs(e) for e in rel) if rel else None,
                        "signed median %": statistics.median(rel) if rel else None})
    return out


def other_machine(path: Path, judged: list[ConfigError], groups: dict, starts: dict) -> OtherMachine:
    """Another machine file's predictions of the judged configurations, their error apart from the main one's."""
    preds, note = read_predictions(path.parent, path.name)
    if preds is None:
        return OtherMachine(path.name, None, None, note=note)
    by_label = {c.label: c for c in groups.values()}
    rows, blind = [], 0
    for j in judged:
        c = by_label[j.label]
        found = [(e, st) for e, st in run_entries(preds, c.runs, starts) if e]
        if not found:
            continue
        blind += len(found) == len(c.runs) and all(st == "blind" for _, st in found)
        err = error_pct(found[0][0]["total_s"] * 1e3, c.t_ms)
        rows.append(dataclasses.replace(j, error_pct=err, within_noise=within_noise(err, j.spread_pct),
                                        datasheet_error_pct=None, datasheet_within_noise="-"))
    m = preds.get("machine", {})
    return OtherMachine(path.name, m.get("name"), m.get("sha256"), blind, tuple(summary_rows(rows)))


def what_if_rows(a: Analysis, groups: dict) -> list[dict]:
    """A row per what-if from a size's one-GPU reference-scheme run to another measured configuration."""
    machine = a.machines.primary
    traces = {t.run_id: t for t in a.traces}
    out = []
    for key, c in sorted(groups.items(), key=lambda kv: kv[1].label):
        hidden, batch, procs, prec, transfer, comm, gemm, exec_mode, overlap, bucket, cprofile = key
        base_key = (hidden, batch, 1, prec, N.PAGEABLE, N.MPI_STAGED, gemm, N.EAGER, False, bucket, cprofile)
        if key == base_key or base_key not in groups:
            continue
        base = traces[groups[base_key].runs[0].run_id]
        sets = {"comm": comm, "batch_transfer": transfer, "exec": exec_mode, "overlap": overlap}
        try:
            w = what_if_run(base, machine, sets, procs)
        except ValueError:
            continue
        host = any(r.host_enqueue for r in groups[base_key].runs + c.runs)
        out.append({"from": groups[base_key].label, "to": c.label, "changed terms": ", ".join(w.changed_terms),
                    "what-if ms": w.total_ms, "measured ms": c.t_ms, "error %": error_pct(w.total_ms, c.t_ms),
                    "model alone ms": w.predicted_after.total_s * 1e3,
                    "judged": "no: host enqueue times" if host else "yes"})
    return out


def analyse_validation(a: Analysis) -> Validation:
    cal = a.machines.calibrated
    preds, pred_note = read_predictions(a.folder)
    starts = {t.run_id: t.manifest.start for t in a.traces}
    groups = repeat_groups(a)
    pairs = [config_error(c, preds, starts, cal) for c in sorted(groups.values(), key=lambda c: c.label)]
    configs = tuple(p[0] for p in pairs)
    judged = [c for c in configs if c.judged == "yes"]
    quiet = a.study.targets.model_median_error_pct
    others = sorted(Path(a.folder).glob(N.MORE_PREDICTIONS)) if configs and a.folder is not None else []
    return Validation(
        cal, pred_note, preds.get("machine", {}) if preds else None,
        tuple(r.run_id for r in a.gpu_runs if r.batches < MIN_STEADY.value),
        tuple(sorted({str(t.manifest.versions.get("perfmlp_git")) for t in a.traces})),
        configs, tuple(p[1] for p in pairs), tuple(summary_rows(judged, quiet)),
        tuple(per_term([p[1] for p in pairs])),
        tuple(other_machine(path, judged, groups, starts) for path in others),
        tuple(what_if_rows(a, groups)) if configs else (), quiet,
        judge_intervals(groups, {c.label for c in judged}, preds, starts))
