"""Prediction intervals: the calibration's measured spread carried to a
distribution of the predicted time per batch.

A file's `spread` holds, per source of its figures (SOURCE_TERMS), repeats
over their median, and the model's own blind error per execution mode.
Monte Carlo, fixed seed: each draw scales every figure of a source by one
factor from its ratios (times multiplied, rates divided), predicts again and
scales the total by the model's error; the 90% interval is the 5th to 95th
percentile. No spread, no interval (said "unknown"). Judged over a blind
sweep by `coverage` and, as PRISM (arXiv 2510.15596), `ks_distance` of `pit`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .machine import MODEL_ERROR_SOURCES, MODEL_SOURCES, PAGEABLE_MODEL_ERROR_SOURCES, PAGEABLE_TRANSFERS, \
    SPREAD_SOURCES as SOURCES, Machine
from .machine.fields import FIELDS, GPU_KEYS
from .. import names as N

SOURCE_TERMS = {"host": ("launches", "graph_launch"),
                "pageable_copy": (N.H2D_BATCH, N.D2H_GRAD, N.H2D_GRAD),
                "pinned_copy": (N.H2D_BATCH, N.D2H_GRAD, N.H2D_GRAD),
                "gpu": ("gemm", "elementwise", "kernel_gaps", "tracing"),
                "collective": ("allreduce", "rank_wait"),
                **{m: () for m in MODEL_SOURCES}}
DRAWS = 200
SEED = 0
PERCENTILES = tuple(range(0, 101, 5))
LEVEL = (5, 95)            # the 90% interval's percentiles

# The machine's scalar figures each source scales (a rate divided, a time multiplied): machine/fields.py.
_SCALARS = {source: tuple(k for k in GPU_KEYS if FIELDS[k].spread == source and FIELDS[k].check != "table")
            for source in SOURCES}
# The machine's tables each source scales: (field, the point's figures, which points)
_TABLES = {
    "host": (("host_dispatch_s", ("launch_s", "trace_phase_s"), None), ("prefetch_s", ("s", "loop_s"), None)),
    "pageable_copy": (("host_copy_s", ("s", "ahead_s", "ahead_delay_s"), N.PAGEABLE),
                      ("copy_aggregate_bytes_per_s", ("bytes_per_s",), N.PAGEABLE)),
    "pinned_copy": (("host_copy_s", ("s",), N.PINNED), ("copy_aggregate_bytes_per_s", ("bytes_per_s",), N.PINNED)),
    "gpu": (("gemm_flops_per_s", ("flops_per_s",), None), ("kernel_s", ("s",), None), ("d2d_copy_s", ("s",), None)),
    "collective": (("allreduce_s", ("s",), None), ("collective_wait_s", ("s",), None)),
    **{m: () for m in MODEL_SOURCES},
}
# Fields no source scales: words and counts, ratios, and the spread itself.
UNSCALED = tuple(k for k, f in FIELDS.items() if f.spread is None)


@dataclass(frozen=True)
class Interval:
    """A prediction's distribution: the 90% interval, every fifth percentile, how it was drawn."""
    lo_s: float
    hi_s: float
    quantiles_s: tuple
    draws: int
    seed: int
    sources: tuple            # the sources whose spread was drawn
    unmeasured: tuple         # terms of this prediction (non-zero) whose source has no spread
    host_paced: bool = False  # the host paces the step: the interval is the run-to-run spread, not a point target

    @property
    def half_width(self) -> float:
        """Half the interval over its middle: 0.05 for +-5%."""
        return (self.hi_s - self.lo_s) / (self.hi_s + self.lo_s)

    def as_json(self) -> dict:
        return {"interval_s": [self.lo_s, self.hi_s], "quantiles_s": list(self.quantiles_s),
                "percentiles": list(PERCENTILES), "draws": self.draws, "seed": self.seed,
                "spread_sources": list(self.sources), "unmeasured_terms": list(self.unmeasured),
                "host_paced": self.host_paced}


def _scale(value, factor: float, rate: bool):
    return None if value is None else value / factor if rate else value * factor


def perturbed(machine: Machine, factors: dict[str, float]) -> Machine:
    """The machine with each source's figures scaled by its factor (rates, `_per_s`, divided)."""
    changes = {}
    for source, f in factors.items():
        if f == 1.0:
            continue
        for key in _SCALARS[source]:
            changes[key] = _scale(getattr(machine, key), f, "_per_s" in key)
        for key, attrs, memory in _TABLES[source]:
            rows = changes.get(key, getattr(machine, key))
            changes[key] = tuple(_with(r, {a: _scale(getattr(r, a), f, "_per_s" in a) for a in attrs})
                                 if memory is None or r.memory == memory else r for r in rows)
    if not changes:
        return machine
    new = dataclasses.replace(machine, **changes)
    new.__dict__["_picks"] = machine._picks   # the same rows, their figures scaled: the look-ups pick the same
    return new


def _with(point, values: dict):
    """A frozen point with some figures changed, without dataclasses.replace's __init__ (thousands a draw)."""
    new = object.__new__(type(point))
    new.__dict__.update(point.__dict__)
    new.__dict__.update(values)
    return new


def draw_factor(ratios: tuple, u: float) -> float:
    """The ratio at quantile u of the sorted ratios (linear, at u (n - 1))."""
    return float(np.interp(u * (len(ratios) - 1), range(len(ratios)), ratios))


def model_source(detail: dict, spread: dict) -> str | None:
    """The model-error source of a prediction's detail: its mode's, pageable where the batch is."""
    mode = detail.get("exec")
    pageable = PAGEABLE_MODEL_ERROR_SOURCES.get(mode)
    if detail.get("batch_transfer") in PAGEABLE_TRANSFERS and pageable in spread:
        return pageable
    return MODEL_ERROR_SOURCES.get(mode)


def interval(machine: Machine, predict: Callable[[Machine], object], draws: int = DRAWS,
             seed: int = SEED, spread: dict | None = None) -> Interval | None:
    """The distribution of `predict(machine).total_s` under `spread` (default the file's); None without."""
    spread = ({e.source: e.ratios for e in machine.spread} if spread is None
              else {k: tuple(sorted(v)) for k, v in spread.items()})
    if not spread:
        return None
    point = predict(machine)
    model = model_source(getattr(point, "detail", {}), spread)
    drawn = [s for s in SOURCES if s in spread and (s not in MODEL_SOURCES or s == model)]
    if not drawn:   # only the other execution mode's model error: nothing measured for this prediction
        return None
    rng = np.random.default_rng(seed)
    u = rng.random((draws, len(SOURCES)))
    totals = np.empty(draws)
    for d in range(draws):
        factors = {s: draw_factor(spread[s], u[d, i]) for i, s in enumerate(SOURCES) if s in drawn}
        scale = factors.pop(model, 1.0)
        totals[d] = predict(perturbed(machine, factors)).total_s * scale
    q = np.percentile(totals, PERCENTILES)
    lo, hi = np.percentile(totals, LEVEL)
    terms = getattr(point, "terms", {})
    unmeasured = tuple(t for s in SOURCES if s not in spread for t in SOURCE_TERMS[s] if terms.get(t, 0.0) > 0)
    return Interval(float(lo), float(hi), tuple(float(x) for x in q), draws, seed, tuple(drawn),
                    tuple(dict.fromkeys(unmeasured)), bool(getattr(point, "detail", {}).get("host_paced")))


def interval_json(iv: Interval | None) -> dict:
    """A prediction's JSON keys for its interval: `interval_s`, `distribution` and `interval_note`."""
    if iv is None:
        return {"interval_s": None, "distribution": None, "interval_note": interval_words(None)}
    d = iv.as_json()
    return {"interval_s": d.pop("interval_s"), "distribution": d, "interval_note": interval_words(iv)}


def interval_words(iv: Interval | None) -> str:
    """One line for a table: the interval, or why there is none."""
    if iv is None:
        return "90% interval: unknown (the machine file records no measured spread)"
    if iv.host_paced:
        return (f"host-paced: +-{100 * iv.half_width:.1f}% from one run to the next "
                f"({iv.lo_s * 1e6:.1f} - {iv.hi_s * 1e6:.1f} us, 90%, from the calibration's measured spread)")
    text = (f"90% interval: {iv.lo_s * 1e6:.1f} - {iv.hi_s * 1e6:.1f} us (+-{100 * iv.half_width:.1f}%; "
            f"{iv.draws} draws, seed {iv.seed}, spread of {', '.join(iv.sources)})")
    if iv.unmeasured:
        text += f"; no measured spread for {', '.join(iv.unmeasured)}"
    return text


# ---- judging intervals over a blind sweep --------------------------------------------------------

def pit(quantiles_s, t: float, percentiles=PERCENTILES) -> float:
    """F(t) of the distribution given by its quantiles (linear between; 0 below, 1 above)."""
    q = np.asarray(quantiles_s, dtype=float)
    p = np.asarray(percentiles, dtype=float) / 100
    if t <= q[0]:
        return 0.0
    if t >= q[-1]:
        return 1.0
    return float(np.interp(t, q, p))


def ks_distance(pits) -> float:
    """The KS distance of the values' empirical CDF from uniform on [0, 1]:
    max over sorted u_(i) of max(i/n - u_(i), u_(i) - (i-1)/n)."""
    u = np.sort(np.asarray(list(pits), dtype=float))
    n = len(u)
    if not n:
        raise ValueError("ks_distance of no values")
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))


def coverage(rows) -> float:
    """The fraction of (lo_s, hi_s, measured_s) rows whose measurement lies in [lo, hi]."""
    rows = list(rows)
    if not rows:
        raise ValueError("coverage of no rows")
    return sum(lo <= t <= hi for lo, hi, t in rows) / len(rows)
