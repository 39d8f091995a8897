"""The model's error over a set of configurations, as numbers: median and
worst |error|, the signed median, the sign test for a bias, how many lie
within their run-to-run noise, and whether that noise lets the error be
judged at all. The validation section and the blind-test history share them."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from .thresholds import SIGN_TEST_LEVEL


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
    return "yes" if spread is not None and err is not None and abs(err) <= spread / 2 else \
        "no" if spread is not None and err is not None else "-"


def resolution(median_abs_err: float, median_spread: float | None) -> str:
    """Whether the run-to-run spread lets the error be judged at this level."""
    if median_spread is None:
        return "no repeats: spread unknown"
    if median_abs_err <= median_spread / 2:
        return "spread larger than the error: not resolved"
    return "error larger than half the spread: resolved"
