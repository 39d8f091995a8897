"""The blind predictions' intervals (model/interval.py; the sweep writes each
run's `interval_s` and `quantiles_s` before the run) against the measurements
of the configurations the validation judged, every repeat predicted blind:

- coverage: the fraction whose measured median lies inside its 90% interval;
- half-width: (hi - lo) / (hi + lo), the median over them, graph mode apart;
- the pooled Kolmogorov-Smirnov distance of each repeat's quantile in its
  predicted distribution (interval.pit) from the uniform distribution.
A prediction without an interval (no spread in its machine file) is unknown.

noise_floor: if a run's time is the configuration's times (1 + e), e normal
with spread sigma, the first two runs' d = (t1 - t2) / median has spread
sigma sqrt(2), so sigma = median |d| / (0.6745 sqrt(2)); the median of n runs
has spread sigma s_n (MEDIAN_SD), and no 90% interval of it can be narrower
than +-1.645 sigma s_n, however right the model.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..model.interval import coverage, ks_distance, pit
from .model_error import run_entries
from .. import names as N
from .thresholds import COVERAGE_TARGET, GRAPH_HALF_WIDTH_TARGET, PRISM_KS

Z90 = statistics.NormalDist().inv_cdf(0.95)                  # a central 90% interval is +-Z90 sigma
HALF_NORMAL_MEDIAN = statistics.NormalDist().inv_cdf(0.75)   # the median of |z| for z standard normal
# The standard deviation of the median of n standard normal draws (n = 1, 2, 3, 4, 5): for two, their mean,
# 1/sqrt(2); from 3 on, from 10^6 draws each (numpy default_rng(0)); beyond 5, sqrt(pi / (2 n)).
MEDIAN_SD = {1: 1.0, 2: 0.7071, 3: 0.6696, 4: 0.5462, 5: 0.5353}


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
    """The narrowest half-width of a 90% interval of a measured median (the module docstring):
    `runs_ms`, each configuration's run times in run order; None under three with two runs."""
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
