"""The model against measured runs: the blind predictions a sweep writes
beside its traces (`predictions.json`; --predict-also: another machine
file's, `predictions-<name>.json`), whether each was blind (made no later
than its run started), the error figures the validation section and the
blind-test history share, and the blind 90% intervals (model/interval.py)
of the judged configurations against their measurements. A prediction
without an interval (no spread in its machine file) is unknown.

The blind-test history: a CSV given as `--blind-tests FILE` (never looked
for, so a report says which it read), a BlindTest per (sweep, configuration).
"""
from __future__ import annotations

import csv
import datetime as dt
import math
import statistics
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import PerfmlpError
from ..model.interval import coverage, ks_distance, pit
from ..safeio import read_json
from .. import names as N
from .thresholds import COVERAGE_TARGET, GRAPH_HALF_WIDTH_TARGET, PRISM_KS, SIGN_TEST_LEVEL

Z90 = statistics.NormalDist().inv_cdf(0.95)                  # a central 90% interval is +-Z90 sigma
HALF_NORMAL_MEDIAN = statistics.NormalDist().inv_cdf(0.75)   # the median of |z| for z standard normal
# The standard deviation of the median of n standard normal draws (n = 1, 2, 3, 4, 5): for two, their mean,
# 1/sqrt(2); from 3 on, from 10^6 draws each (numpy default_rng(0)); beyond 5, sqrt(pi / (2 n)).
MEDIAN_SD = {1: 1.0, 2: 0.7071, 3: 0.6696, 4: 0.5462, 5: 0.5353}


# ---- the blind predictions -------------------------------------------------------------------

def read_predictions(folder: Path | None, name: str = N.PREDICTIONS) -> tuple[dict | None, str]:
    """(the predictions file's content, one line about it)."""
    if folder is None:
        return None, "no trace folder"
    path = Path(folder) / name
    if not path.exists():
        return None, f"no {name} beside the traces"
    try:
        data = read_json(path.read_text())
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


def run_entries(preds: dict | None, runs, starts: dict) -> list[tuple[dict | None, str]]:
    """Each run's entry in a predictions file (None: none) and its blind_status (`starts`: run id -> start)."""
    got = (preds or {}).get("runs", {})
    return [(got.get(r.run_id), blind_status(got.get(r.run_id), starts.get(r.run_id))) for r in runs]


# ---- the error figures -----------------------------------------------------------------------

def sign_test_p(above: int, below: int) -> float:
    """Two-sided sign test: the chance that a fair coin splits above + below
    runs at least as unevenly as this (ties left out)."""
    n, k = above + below, min(above, below)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


@dataclass(frozen=True)
class ErrorStats:
    """Errors (%, predicted over measured less 1) of some configurations."""
    n: int
    median_abs_pct: float
    worst_abs_pct: float
    signed_median_pct: float
    above: int                  # predicted slower than measured
    below: int
    within_noise: int           # configurations whose error is within half their spread
    sign_p: float

    @property
    def biased(self) -> bool:
        return self.sign_p < SIGN_TEST_LEVEL.value


def error_stats(errors: list[float | None], within_noise: int = 0) -> ErrorStats | None:
    """The statistics of the errors given (None: no error, left out); None when there is none."""
    errs = [e for e in errors if e is not None]
    if not errs:
        return None
    above, below = sum(e > 0 for e in errs), sum(e < 0 for e in errs)
    return ErrorStats(len(errs), statistics.median(abs(e) for e in errs), max(abs(e) for e in errs),
                      statistics.median(errs), above, below, within_noise, sign_test_p(above, below))


def within_noise(err: float | None, spread: float | None) -> str:
    """"yes" where |error| is within half the run-to-run spread (both %), "no" where not, "-" unknown."""
    if spread is None or err is None:
        return "-"
    return "yes" if abs(err) <= spread / 2 else "no"


def resolution(median_abs_err: float, median_spread: float | None) -> str:
    """Whether the run-to-run spread lets the error be judged at this level."""
    if median_spread is None:
        return "no repeats: spread unknown"
    if median_abs_err <= median_spread / 2:
        return "spread larger than the error: not resolved"
    return "error larger than half the spread: resolved"


# ---- the blind intervals ------------------------------------------------------------------------

@dataclass(frozen=True)
class IntervalRow:
    label: str
    exec: str
    measured_ms: float
    lo_ms: float
    hi_ms: float
    covered: bool
    half_width: float
    pits: tuple


@dataclass(frozen=True)
class IntervalJudgement:
    rows: tuple               # IntervalRow, judged configurations with intervals
    unknown: int              # judged configurations whose blind predictions carry no interval
    coverage: float | None
    median_half_width: float | None
    graph_half_width: float | None
    ks: float | None
    repeats: int              # the pooled measurements
    graph_floor: float | None = None   # noise_floor of the graph-mode configurations, None under 3 with 2 runs
    graph_floor_configs: int = 0

    def verdict(self) -> str:
        if not self.rows:
            return (f"no judged configuration has a blind prediction with an interval ({self.unknown} without: "
                    "the machine file records no measured spread)")
        graph = "-" if self.graph_half_width is None else f"{100 * self.graph_half_width:.1f}%"
        unknown = f"; {self.unknown} configuration(s) without an interval" if self.unknown else ""
        floor = "" if self.graph_floor is None else (
            f"; the runs themselves set a floor: no 90% interval of a graph-mode configuration's measured median "
            f"can be narrower than +-{100 * self.graph_floor:.1f}%, however right the model (the run-to-run spread "
            f"of {self.graph_floor_configs} configurations run at least twice)")
        return (f"90% intervals of {len(self.rows)} configuration(s) cover {100 * self.coverage:.0f}% of their "
                f"measured medians (target at least {100 * COVERAGE_TARGET.value:.0f}%); median half-width "
                f"{100 * self.median_half_width:.1f}%, {graph} in graph mode (target at most "
                f"{100 * GRAPH_HALF_WIDTH_TARGET.value:.0f}%); pooled Kolmogorov-Smirnov distance of the "
                f"{self.repeats} repeats in their predicted distributions {100 * self.ks:.1f}% (PRISM, arXiv "
                f"2510.15596: {100 * PRISM_KS.value:.1f}%){unknown}{floor}")


def noise_floor(runs_ms: list[list[float]]) -> float | None:
    """The narrowest half-width of a 90% interval of a measured median; `runs_ms`: each configuration's run
    times in run order; None under three with two runs. A run's time is the configuration's (1 + e), e normal
    with spread sigma: the first two runs' (t1 - t2) / median has spread sigma sqrt(2), so sigma = median |d| /
    (0.6745 sqrt(2)); the median of n runs has spread sigma MEDIAN_SD[n], and no 90% interval of it can be
    narrower than +-1.645 sigma MEDIAN_SD[n], however right the model."""
    pairs = [rs for rs in runs_ms if len(rs) >= 2]
    if len(pairs) < 3:
        return None
    d = [abs(rs[0] - rs[1]) / statistics.median(rs[:2]) for rs in pairs]
    sigma = statistics.median(d) / (HALF_NORMAL_MEDIAN * math.sqrt(2))
    n = round(statistics.median(len(rs) for rs in pairs))
    return Z90 * sigma * MEDIAN_SD.get(n, math.sqrt(math.pi / (2 * n)))


def judge_intervals(groups: dict, judged_labels: set, preds: dict | None, starts: dict) -> IntervalJudgement | None:
    """The judged configurations' blind intervals against their measurements; None: no blind prediction."""
    rows, unknown = [], 0
    for c in sorted(groups.values(), key=lambda c: c.label):
        if c.label not in judged_labels:
            continue
        found = run_entries(preds, c.runs, starts)
        if any(st != "blind" for _, st in found):
            continue
        entries = [e for e, _ in found]
        if any(not e.get("interval_s") or not e.get("quantiles_s") for e in entries):
            unknown += 1
            continue
        lo, hi = entries[0]["interval_s"]
        pits = tuple(pit(e["quantiles_s"], r.t_ms * 1e-3, e.get("percentiles") or range(0, 101, 5))
                     for e, r in zip(entries, c.runs))
        rows.append(IntervalRow(c.label, c.key[7], c.t_ms, lo * 1e3, hi * 1e3, lo * 1e3 <= c.t_ms <= hi * 1e3,
                                (hi - lo) / (hi + lo), pits))
    if not rows and not unknown:
        return None
    if not rows:
        return IntervalJudgement((), unknown, None, None, None, None, 0)
    graph = [r.half_width for r in rows if r.exec == N.GRAPH]
    pooled = [u for r in rows for u in r.pits]
    graph_labels = {r.label for r in rows if r.exec == N.GRAPH}
    graph_runs = [[r.t_ms for r in c.runs] for c in groups.values() if c.label in graph_labels]
    return IntervalJudgement(tuple(rows), unknown, coverage((r.lo_ms, r.hi_ms, r.measured_ms) for r in rows),
                             statistics.median(r.half_width for r in rows),
                             statistics.median(graph) if graph else None, ks_distance(pooled), len(pooled),
                             noise_floor(graph_runs), sum(len(rs) >= 2 for rs in graph_runs))


def interval_table_rows(j: IntervalJudgement) -> list[dict]:
    return [{"configuration": r.label, "exec": r.exec, "measured ms (median)": r.measured_ms,
             "interval lo ms": r.lo_ms, "interval hi ms": r.hi_ms, "covered": "yes" if r.covered else "no",
             "half-width %": 100 * r.half_width, "repeats' quantiles": " ".join(f"{u:.2f}" for u in r.pits)}
            for r in j.rows]


# ---- the blind-test history ---------------------------------------------------------------------

INTS = ("batch_size", "procs", "repeats")
FLOATS = ("predicted_s", "measured_s", "measured_min_s", "measured_max_s", "spread")
WORST_PER_MACHINE = 3


@dataclass(frozen=True)
class BlindTest:
    """One configuration of one sweep: the blind prediction and the measurement."""
    machine: str
    commit: str
    date: str
    sweep: str
    run: str
    hidden_sizes: str
    batch_size: int
    procs: int
    batch_transfer: str
    comm: str
    exec: str
    parallel: str
    precision: str
    repeats: int
    predicted_s: float
    measured_s: float           # the median of the repeats
    measured_min_s: float
    measured_max_s: float
    spread: float               # max / min - 1

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_s / self.measured_s - 1)

    @property
    def within_noise(self) -> bool:
        return abs(self.error_pct) <= 100 * self.spread / 2

    @property
    def label(self) -> str:
        """The configuration in the report's words."""
        return (f"H={self.hidden_sizes} B={self.batch_size} p={self.procs} {self.precision} "
                f"{self.batch_transfer}/{self.comm} {self.exec}" + ("" if self.parallel == N.DATA else
                                                                     f" {self.parallel}"))


COLUMNS = tuple(f.name for f in fields(BlindTest))   # the history's, in its order


def _test(path: Path, line: int, row: dict) -> BlindTest:
    values = {}
    for k in COLUMNS:
        v = (row.get(k) or "").strip()
        try:
            values[k] = int(v) if k in INTS else float(v) if k in FLOATS else v
        except ValueError:
            raise PerfmlpError(f"{path}:{line}: {k} {v!r} is not a number") from None
        if k in INTS + ("predicted_s", "measured_s") and values[k] <= 0:
            raise PerfmlpError(f"{path}:{line}: {k} {v!r} must be positive")
        if not v and k in ("machine", "sweep", "run"):
            raise PerfmlpError(f"{path}:{line}: no {k}")
    if not values["measured_min_s"] <= values["measured_s"] <= values["measured_max_s"]:
        raise PerfmlpError(f"{path}:{line}: measured_s {values['measured_s']:g} is not between measured_min_s and "
                           "measured_max_s")
    return BlindTest(**values)


@dataclass(frozen=True)
class History:
    path: str
    tests: tuple

    def __len__(self) -> int:
        return len(self.tests)


def read_blind_tests(path: str | Path) -> History:
    """The history's rows; PerfmlpError naming the file, line and column where it cannot be read."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [k for k in COLUMNS if k not in (reader.fieldnames or [])]
            if missing:
                raise PerfmlpError(f"{path}: not a blind-test history (no column {missing[0]})")
            return History(str(path), tuple(_test(path, i, row) for i, row in enumerate(reader, 2)))
    except FileNotFoundError:
        raise PerfmlpError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise PerfmlpError(f"{path}: unreadable ({e.__class__.__name__})") from None


@dataclass(frozen=True)
class MachineHistory:
    """The blind tests on one machine kind ("all": every machine)."""
    machine: str
    configurations: int
    sweeps: int
    commits: tuple
    first_date: str
    last_date: str
    errors: ErrorStats
    median_spread_pct: float
    resolution: str


def _history(name: str, tests: list[BlindTest]) -> MachineHistory:
    spread = statistics.median(100 * t.spread for t in tests)
    errors = error_stats([t.error_pct for t in tests], sum(t.within_noise for t in tests))
    dates = sorted(t.date for t in tests)
    return MachineHistory(name, len(tests), len({t.sweep for t in tests}), tuple(sorted({t.commit for t in tests})),
                          dates[0], dates[-1], errors, spread, resolution(errors.median_abs_pct, spread))


def history_by_machine(tests: list[BlindTest]) -> list[MachineHistory]:
    """Per machine kind, by name, then every machine together (where more than one)."""
    machines = sorted({t.machine for t in tests})
    out = [_history(m, [t for t in tests if t.machine == m]) for m in machines]
    return out + [_history("all", tests)] if len(machines) > 1 else out


def worst_configurations(tests: list[BlindTest]) -> list[BlindTest]:
    """The WORST_PER_MACHINE tests of each machine with the largest |error|, worst first."""
    return [t for m in sorted({t.machine for t in tests}) for t in
            sorted((t for t in tests if t.machine == m), key=lambda t: -abs(t.error_pct))[:WORST_PER_MACHINE]]
