"""Every threshold the report's verdicts and recommendations use, each with
its name, its value and where the value comes from: one place to read and
to change them (as HolisticTraceAnalysis keeps its in one constants module).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    meaning: str
    source: str


MIN_GAIN = Threshold(
    "min_gain", 0.05,
    "a change is recommended only where the what-if engine predicts it saves at least this fraction of the "
    "time per batch",
    "the model's median |error| over its blind tests, 6.6% over 638 configurations on four machine kinds "
    "(reports/BLIND-TESTS.md): a smaller predicted gain is inside the model's own error")

CO_BOUND = Threshold(
    "co_bound", 0.8,
    "a second part is named beside the one that bounds a configuration when it takes at least this fraction "
    "of the first one's time",
    "this report's convention: two parts within 20% of each other both have to shrink for a large gain")

MEASURED_AGREES = Threshold(
    "measured_agrees", 0.10,
    "a predicted gain agrees with the measured one when the two times (after the change) differ by less than "
    "this fraction",
    "the median spread of repeated runs of one configuration in the blind tests (7.2%, "
    "reports/BLIND-TESTS.md), rounded up: a smaller difference is noise between repeats")

COLLAPSE_ROWS = Threshold(
    "collapse_rows", 12,
    "a detail table longer than this many rows is collapsed in report.html (its full data is in its CSV)",
    "this report's convention: about a third of a 900-pixel screen")

MAP_ROWS = Threshold(
    "map_rows", 16,
    "the overview's verdict map shows at most this many rows of settings (the rest are in the configurations "
    "table)",
    "the overview's budget: the map, the headline figures and the recommendations on one 1280 x 900 screen")

MAP_COLUMNS = Threshold(
    "map_columns", 20,
    "the verdict map shows at most this many shapes (H, B, p) as columns",
    "the overview's budget, as map_rows")

TOP_RECOMMENDATIONS = Threshold(
    "top_recommendations", 6,
    "the overview lists this many changes, most predicted gain first (every one is in recommendations.csv)",
    "the overview's budget, as map_rows")

WITHIN_CLOSE = Threshold(
    "within_close", 5,
    "the model accuracy table counts the runs whose |error| is at most this many percent",
    "this report's convention: between the model's targets on GPU-paced steps, 3% median and 8% worst")

WITHIN_FAIR = Threshold(
    "within_fair", 15,
    "the model accuracy table counts the runs whose |error| is at most this many percent",
    "this report's convention: a prediction this far off names the wrong bound for the step")

STRATEGY_TIE = Threshold(
    "strategy_tie", 0.02,
    "two strategies whose predicted times are within this fraction of each other are called a tie",
    "the model's target median |error| on GPU-paced steps, 3%: a smaller margin does not rank them")

HOST_BOUND_SHARE = Threshold(
    "host_bound_share", 0.10,
    "a run whose GPU waits for host launches more than this share of a batch is called host-bound",
    "this report's convention: a tenth of the step idle on the GPU is more than its kernels' spread")

PUBLISHED_CLOSE = Threshold(
    "published_close", 0.25,
    "a prediction within this fraction of a published time accounts for it",
    "the spread of the published figures themselves (their GPU and kernel rates are unknowns)")

SIGN_TEST_LEVEL = Threshold(
    "sign_test_level", 0.05,
    "the model's errors are called biased when the two-sided sign test gives less than this",
    "the usual significance level of a two-sided test")

MIN_STEADY = Threshold(
    "min_steady", 20,
    "a run with fewer steady batches than this is named in the validation section",
    "this report's convention: a median over fewer batches moves with one slow batch")

MIN_TESTS = Threshold(
    "min_tests", 5,
    "an execution mode with fewer blind tests than this records no model error in a machine file",
    "this report's convention: the fewest ratios whose spread is more than one draw")

COVERAGE_TARGET = Threshold(
    "coverage_target", 0.90,
    "the 90% intervals should cover at least this fraction of the measured medians",
    "the model's target: a 90% interval covering at least 90% of the configurations")

GRAPH_HALF_WIDTH_TARGET = Threshold(
    "graph_half_width_target", 0.05,
    "the target half-width of a graph-mode step's interval",
    "the model's worst-case target on GPU-paced steps (8%) less the repeats' own spread")

PRISM_KS = Threshold(
    "prism_ks", 0.208,
    "the pooled Kolmogorov-Smirnov distance the intervals are set beside",
    "PRISM's pooled KS distance (arXiv 2510.15596)")

REPEATS_AGREE = Threshold(
    "repeats_agree", 0.10,
    "a configuration's repeats disagree when the slowest is more than this fraction slower than the fastest: "
    "the report flags it with their range, and its median is no firm figure",
    "the model's accuracy target on a CPU is set where repeats agree within 10%")

ALL = tuple(t for t in dict(globals()).values() if isinstance(t, Threshold))   # in the order above


def table() -> list[dict]:
    return [{"threshold": t.name, "value": t.value, "meaning": t.meaning, "source": t.source} for t in ALL]
