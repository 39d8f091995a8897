"""One-off: the eighth and ninth precision sweeps' intervals remade from
their committed calibrations under other rules for the spread drawn (not
blind: the rules are judged on the sweeps they are chosen after).

    python benchmarks/diagnostics/interval_variants.py

Rules: `both` (as the sweeps ran: the calibration's spread of each source
and the model's error from every earlier blind test of the machine kind),
`cal` (the calibration's spread alone), `model` (the model's error alone),
and `model`/`both` with the error of the last N earlier sweeps only, or
of the configurations whose repeats agreed within 3% only (`quiet`: the
model's own error without the run-to-run noise, which the calibration's
spread is then left to carry).
Prints coverage of the measured medians, the median half-width (all, graph
mode) and the pooled Kolmogorov-Smirnov distance of each repeat's PIT.
"""
import re
from pathlib import Path

import numpy as np

from perfmlp.model.interval import coverage, interval, ks_distance, pit, spread_of
from perfmlp.model.machine import MODEL_SOURCES, load_machine
from perfmlp.model.predict import predict_batch
from perfmlp.report.blind_spread import model_error_ratios
from perfmlp.report.blind_tests import read_blind_tests

ROOT = Path(__file__).resolve().parents[2]
TESTS = read_blind_tests(str(ROOT / "reports/blind-tests.csv")).tests


def number(sweep: str) -> int:
    m = re.fullmatch(r"h100/validate-precision(\d*)", sweep)
    return int(m.group(1) or 1) if m else 0


def judge(n: int, rule: str, recent: int | None, quiet: bool = False):
    m = load_machine(str(ROOT / f"reports/h100/benchmarks/validate-precision{n}/calibrated.yaml"))
    cal = {k: v for k, v in spread_of(m).items() if k not in MODEL_SOURCES}
    prior = [t for t in TESTS if t.machine == "h100" and number(t.sweep) < n]
    if recent:
        last = sorted({t.sweep for t in prior if number(t.sweep)}, key=number)[-recent:]
        prior = [t for t in prior if t.sweep in last]
    if quiet:
        prior = [t for t in prior if t.repeats > 1 and t.measured_max_s / t.measured_min_s - 1 < 0.03]
    spread = {"cal": cal, "model": model_error_ratios(prior, "h100"),
              "both": {**cal, **model_error_ratios(prior, "h100")}}[rule]
    cov, pits, half, graph = [], [], [], []
    for t in (t for t in TESTS if number(t.sweep) == n):
        iv = interval(m, lambda mm: predict_batch(mm, (784, int(t.hidden_sizes), 10), t.batch_size, 1, t.precision,
                                                  t.comm, t.batch_transfer, "counters", t.exec), spread=spread)
        cov.append((iv.lo_s, iv.hi_s, t.measured_s))
        pits += [pit(iv.quantiles_s, v) for v in ((t.measured_min_s, t.measured_max_s) if t.repeats > 1
                                                  else (t.measured_s,))]
        half.append(iv.half_width)
        if t.exec == "graph":
            graph.append(iv.half_width)
    return coverage(cov), np.median(half), np.median(graph), ks_distance(pits)


for n in (8, 9):
    for rule, recent, quiet in (("both", None, False), ("cal", None, False), ("model", None, False),
                                ("model", 2, False), ("both", 2, False), ("model", 3, False),
                                ("both", None, True), ("model", None, True)):
        c, h, g, ks = judge(n, rule, recent, quiet)
        print(f"validate-precision{n} {rule:5} last {recent or 'all'}{' quiet' if quiet else ''}: covers {c:.0%}, "
              f"half-width {h:.1%}, graph {g:.1%}, KS {ks:.1%}")
