"""The model against measured runs: the blind predictions a sweep writes
beside its traces (sweep --predict: `predictions.json`; --predict-also:
another machine file's, `predictions-<name>.json`), whether each was blind
(made no later than its run started), and the error figures over a set of
configurations that the validation section and the blind-test history share:
median and worst |error|, the signed median, the sign test for a bias, how
many lie within their run-to-run noise, and whether that noise lets the
error be judged at all."""
from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..names import MORE_PREDICTIONS, PREDICTIONS
from ..safeio import read_json
from .thresholds import SIGN_TEST_LEVEL



# ---- the blind predictions -------------------------------------------------------------------

def read_predictions(folder: Path | None, name: str = PREDICTIONS) -> tuple[dict | None, str]:
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


def more_predictions(folder: Path | None) -> list[Path]:
    """Other machine files' predictions beside the traces, by name."""
    return sorted(Path(folder).glob(MORE_PREDICTIONS)) if folder is not None else []


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
