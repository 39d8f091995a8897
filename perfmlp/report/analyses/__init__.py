"""The report's analyses: each a pure function from the read runs (an
`Analysis`) to a `Table` with named columns, which the sections put into
words, Markdown, HTML, CSV and figures. From Python (docs/report.md):
`load("traces/")`, or `Analyses.from_runs(runs)` for runs made in memory;
each method returns a fresh Table, `.analysis` the summary behind them.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import PerfmlpError
from ...trace.reader import read_traces
from ..analysis import Analysis, analyse
from ..study import load_study
from .accuracy import host_paced_spread, in_q2_2, judged_for_model, limit_text, model_accuracy, runs, terms
from .scaling import STRONG, WEAK, imbalance, overlap_bounds, scaling, scaling_groups
from .table import Table
from ..configurations import configurations as configurations_of

__all__ = ["Analyses", "Table", "load", "runs", "configurations", "scaling", "scaling_groups", "imbalance",
           "overlap_bounds", "terms",
           "model_accuracy", "host_paced_spread", "limit_text", "judged_for_model", "in_q2_2", "STRONG", "WEAK"]


def configurations(a: Analysis) -> Table:
    """Repeats merged: one row per configuration, its settings, the median time per batch over its repeats,
    their fastest and slowest, and the run that stands for it."""
    return Table.from_records("configurations", (
        {"configuration": c.label, **c.s, "ms per batch": c.t_ms, "repeats": len(c.runs),
         "fastest ms": min(r.t_ms for r in c.runs), "slowest ms": max(r.t_ms for r in c.runs), "judged": c.judged,
         "predicted ms": c.predicted_ms, "representative": c.representative.run_id} for c in configurations_of(a)))


def _method(analysis):
    """An analysis as a method of Analyses: the function on its summary."""
    def method(self) -> Table:
        return analysis(self.analysis)
    method.__name__, method.__doc__ = analysis.__name__, analysis.__doc__
    return method


class Analyses:
    """Every analysis of one set of runs, each method returning a Table."""

    def __init__(self, analysis: Analysis):
        self.analysis = analysis

    @classmethod
    def from_runs(cls, runs, machine: str | None = None, study: str | Path | None = None) -> "Analyses":
        """From runs already read (trace.reader.read_traces or Run.from_records)."""
        return cls(analyse(list(runs), [], load_study(study), machine))

    runs, configurations, scaling, imbalance, overlap_bounds, terms, model_accuracy = map(
        _method, (runs, configurations, scaling, imbalance, overlap_bounds, terms, model_accuracy))


def load(folder: str | Path, machine: str | None = None, study: str | Path | None = None) -> Analyses:
    """Every readable run under `folder` (unreadable ones are listed in `.analysis.skipped`)."""
    folder = Path(folder)
    found, skipped = read_traces(folder)
    if not found:
        raise PerfmlpError(f"{folder}: no readable run" + (f" ({len(skipped)} skipped)" if skipped else ""))
    return Analyses(analyse(found, skipped, load_study(study), machine, folder))
