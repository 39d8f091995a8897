"""Every committed blind row predicted again by the model as it is now.

Each row of reports/blind-tests.csv (machine, commit, sweep, configuration,
measured repeats) is predicted from its sweep's own calibration
(reports/calibrations/, the row's `calibration` column), with the 90%
interval where the file records a spread. Prints the median and worst
|error| over the GPU-paced configurations (the host's time under a quarter
of the predicted step), over the host-paced ones and over all, and the
intervals' coverage (the measured median inside the interval).

    python benchmarks/blind_repredict.py                         # the model of this checkout
    python benchmarks/blind_repredict.py --before /path/to/older/checkout
                                                                 # beside an older model, same rows

With --before the rows are also predicted by the perfmlp of that checkout
(run in a child process with it on PYTHONPATH) and the two are set side
by side. --json prints the per-row predictions instead of the table.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "reports" / "blind-tests.csv"
GPU_PACED_HOST = 0.25    # a step is GPU-paced where the host's time is under this fraction of it
INPUT, CLASSES = 784, 10


def predict_row(row: dict, machines: dict, draws: int) -> dict:
    """One row's prediction: total, whether the host paces it, its interval."""
    from perfmlp import names as N
    from perfmlp.model.interval import interval
    from perfmlp.model.machine import load_machine
    from perfmlp.model.predict import predict_batch
    path = str(ROOT / "reports" / "calibrations" / row["calibration"])
    if path not in machines:
        machines[path] = load_machine(path)
    m = machines[path]
    sizes = (INPUT, *(int(h) for h in row["hidden_sizes"].split("x")), CLASSES)

    def predict(mm):
        return predict_batch(mm, sizes, int(row["batch_size"]), int(row["procs"]), row["precision"], row["comm"],
                             row["batch_transfer"], N.COUNTERS, exec_mode=row["exec"])
    p = predict(m)
    iv = interval(m, predict, draws=draws) if draws else None
    host_s = p.detail.get("host_s", 0.0)
    paced = p.detail.get("host_paced", host_s >= GPU_PACED_HOST * p.total_s)   # older models: the same rule here
    return {"predicted_s": p.total_s, "host_s": host_s, "host_paced": paced,
            "interval_s": list(iv.as_json()["interval_s"]) if iv is not None else None}


def predict_all(rows: list[dict], draws: int) -> list[dict]:
    machines: dict = {}
    cache: dict = {}   # the repeats of a configuration share one prediction
    out = []
    for r in rows:
        key = (r["calibration"], r["hidden_sizes"], r["batch_size"], r["procs"], r["precision"], r["comm"],
               r["batch_transfer"], r["exec"])
        if key not in cache:
            cache[key] = predict_row(r, machines, draws)
        out.append(cache[key])
    return out


def before(checkout: str, draws: int) -> list[dict]:
    """The rows predicted by the perfmlp of another checkout."""
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    res = subprocess.run([sys.executable, __file__, "--json", "--draws", str(draws)], env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{checkout}: its model failed on the rows: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout)


def summary(rows: list[dict], preds: list[dict]) -> dict:
    """Median and worst |error| per pace, and the intervals' coverage."""
    err = [abs(p["predicted_s"] - float(r["measured_s"])) / float(r["measured_s"]) for r, p in zip(rows, preds)]
    out = {}
    for name, keep in (("gpu-paced", lambda p: not p["host_paced"]), ("host-paced", lambda p: p["host_paced"]),
                       ("all", lambda p: True)):
        e = [x for x, p in zip(err, preds) if keep(p)]
        out[name] = (len(e), statistics.median(e) if e else float("nan"), max(e) if e else float("nan"))
    for name, paced in (("coverage", None), ("coverage, host-paced", True), ("coverage, gpu-paced", False)):
        inside = [iv[0] <= float(r["measured_s"]) <= iv[1] for r, p in zip(rows, preds)
                  if (iv := p["interval_s"]) and paced in (None, p["host_paced"])]
        out[name] = (len(inside), sum(inside) / len(inside) if inside else float("nan"))
    return out


def table(columns: dict[str, dict]) -> str:
    names = list(columns)
    lines = ["| rows | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for pace in ("gpu-paced", "host-paced", "all"):
        cells = [f"{100 * s[pace][1]:.2f}% / {100 * s[pace][2]:.1f}% ({s[pace][0]})" for s in columns.values()]
        lines.append(f"| {pace}: median / worst \\|error\\| (rows) | " + " | ".join(cells) + " |")
    for name in ("coverage", "coverage, host-paced", "coverage, gpu-paced"):
        cells = [f"{100 * s[name][1]:.0f}% of {s[name][0]}" for s in columns.values()]
        lines.append(f"| 90% interval covers the measured median ({name.removeprefix('coverage').strip(', ') or 'all'}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", metavar="CHECKOUT", help="also predict the rows with the perfmlp of this checkout")
    ap.add_argument("--draws", type=int, default=200, help="Monte Carlo draws per interval (0: no intervals)")
    ap.add_argument("--json", action="store_true", help="print the per-row predictions as JSON")
    a = ap.parse_args(argv)
    with open(ROWS, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = sorted({r["sweep"] for r in rows if not r.get("calibration")})
    if missing:
        raise SystemExit(f"{ROWS}: rows without a calibration, sweeps {', '.join(missing)}")
    now = predict_all(rows, a.draws)
    if a.json:
        print(json.dumps(now))
        return 0
    columns = {}
    if a.before:
        columns[f"before ({a.before})"] = summary(rows, before(a.before, a.draws))
    columns["now"] = summary(rows, now)
    print(table(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
