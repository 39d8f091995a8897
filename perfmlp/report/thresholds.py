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

ALL = (MIN_GAIN, CO_BOUND, MEASURED_AGREES, COLLAPSE_ROWS, MAP_ROWS, MAP_COLUMNS, TOP_RECOMMENDATIONS)


def table() -> list[dict]:
    """The thresholds as a table for the report."""
    return [{"threshold": t.name, "value": t.value, "meaning": t.meaning, "source": t.source} for t in ALL]
