"""What a validation sweep's errors would have been with a table of the
machine file left out (the model's older formula for that term instead):
an ablation on the same measurements, not a blind test.

    python benchmarks/validate_ablation.py SWEEP.yaml CALIBRATED.yaml REPORT/validation_runs.csv TABLE [TABLE ...]

TABLE.COLUMN leaves one column of a table out (its default, not measured,
in every row), e.g. host_copy_s.ahead_s: pageable copies without their
staging ahead of the stream.

e.g. validate7 without the measured host copies:

    python benchmarks/validate_ablation.py sweeps/validate-x2f.yaml \\
      benchmarks/results/h200-x2/validate7/calibrated.yaml \\
      benchmarks/results/h200-x2/validate7/report/validation_runs.csv host_copy_s

Prints each configuration's error with the file as calibrated and without
the tables, then the median and worst |error| of each.
"""
from __future__ import annotations

import csv
import dataclasses
import sys
from statistics import median

import yaml

from perfmlp.errors import PerfmlpError
from perfmlp.model.machine import MachineError, load_machine
from perfmlp.sweep import expand, predict_run


def main(argv) -> int:
    if len(argv) < 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    sweep, cal, runs_csv, *tables = argv
    full = load_machine(cal)
    without = full
    for t in tables:
        table, _, column = t.partition(".")
        rows = getattr(full, table, None)
        columns = {f.name for f in dataclasses.fields(rows[0])} if isinstance(rows, tuple) and rows else set()
        if not isinstance(rows, tuple) or (column and rows and column not in columns):
            print(f"validate_ablation: {cal} has no table {t!r}", file=sys.stderr)
            return 2
        if column:   # the column back to its default (not measured) in every row
            default = {f.name: f.default for f in dataclasses.fields(rows[0])}
            keep = [f for f in ("blocks",) if column == "ahead_s"]   # ahead_s and blocks describe one measurement
            rows = tuple(dataclasses.replace(r, **{c: default[c] for c in (column, *keep)}) for r in rows)
        without = dataclasses.replace(without, **{table: rows if column else ()})
    with open(sweep) as f:
        runs = [r for r in expand(yaml.safe_load(f), sweep) if r.repeat <= 1]
    with open(runs_csv) as f:
        rows = list(csv.DictReader(f))
    errs = {"as calibrated": [], f"without {', '.join(tables)}": []}
    for run in runs:
        pred = predict_run(full, run)["total_s"] * 1e3
        match = [r for r in rows if abs(float(r["predicted ms"]) - pred) < 1e-9]
        if len(match) != 1:
            print(f"validate_ablation: {run.run_id}: no single row of {runs_csv} has its prediction", file=sys.stderr)
            return 1
        meas = float(match[0]["measured ms (median)"])
        e = [100 * (p / meas - 1) for p in (pred, predict_run(without, run)["total_s"] * 1e3)]
        for k, x in zip(errs, e):
            errs[k].append(abs(x))
        print(f"{match[0]['configuration']:60s} {e[0]:+7.1f}% {e[1]:+7.1f}%")
    for k, v in errs.items():
        print(f"{k}: median |error| {median(v):.1f}%, worst {max(v):.1f}% ({len(v)} configurations)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, PerfmlpError, MachineError, yaml.YAMLError) as e:
        print(f"validate_ablation: {e}", file=sys.stderr)
        sys.exit(1)
