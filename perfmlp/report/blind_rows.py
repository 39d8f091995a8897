"""One blind sweep's rows for the blind-test history (model_error.py's columns):

    python -m perfmlp.report.blind_rows TRACES --machine-kind KIND \\
        --machine calibrated.yaml >> reports/blind-tests.csv

TRACES holds the predictions.json `sweep --predict` wrote before the first
run. Runs are grouped and timed as the validation section does
(validation.repeat_groups); a configuration is a row when every repeat was
predicted blind. The commit is the runs' own (their manifests' perfmlp_git,
which must agree). Printed as CSV lines without the header; configurations
left out are named on stderr.
"""
from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

from ..errors import OneLineParser, PerfmlpError, cli, say
from ..model.machine import MachineError
from ..trace.reader import TraceError, read_traces
from .analysis import analyse
from .model_error import COLUMNS, read_predictions
from .study import load_study
from .validation import repeat_groups, repeat_prediction

_REPEAT = re.compile(r"-r\d+-[0-9a-f]+$")   # a sweep run id's repeat and hash (sweep.plan.sweep_run_id)


def blind_rows(folder: Path, machine_kind: str, machine: str) -> tuple[list[dict], list[str]]:
    """(the rows, the configurations left out, each with why)."""
    runs, skipped = read_traces(folder)
    if not runs:
        raise PerfmlpError(f"{folder}: no readable run")
    preds, why = read_predictions(folder)
    if preds is None:
        raise PerfmlpError(f"{folder}: {why} (python -m perfmlp.sweep --predict writes it)")
    starts = {r.run_id: r.manifest.start for r in runs}
    commits = {r.run_id: str((r.manifest.versions or {}).get("perfmlp_git") or "")[:7] for r in runs}
    rows, left = [], []
    a = analyse(runs, skipped, load_study(None), machine, folder)
    groups = repeat_groups(a, a.runs)   # a NumPy sweep tests the CPU model
    for g in sorted(groups.values(), key=lambda g: g.label):
        pred_ms, _, status = repeat_prediction(g, preds, starts)
        if status != "blind":   # the validation section's rule
            left.append(f"{g.label}: not every repeat has a prediction made before it started")
            continue
        commit = {commits[r.run_id] for r in g.runs}
        if len(commit) != 1 or not re.fullmatch(r"[0-9a-f]{7}", next(iter(commit))):
            raise PerfmlpError(f"{g.label}: its runs name no one commit ({', '.join(sorted(commit)) or 'none'})")
        t = sorted(r.t_ms / 1e3 for r in g.runs)
        first = g.runs[0]
        rows.append({"machine": machine_kind, "commit": commit.pop(), "date": starts[first.run_id][:10],
                     "sweep": f"{machine_kind}/{folder.name}", "run": _REPEAT.sub("", first.run_id),
                     "hidden_sizes": first.hidden_label, "batch_size": first.batch,
                     "procs": first.procs, "batch_transfer": first.transfer, "comm": first.comm, "exec": first.exec,
                     "parallel": first.parallel, "precision": first.precision, "repeats": len(t),
                     "predicted_s": f"{pred_ms / 1e3:.12g}", "measured_s": f"{statistics.median(t):.12g}",
                     "measured_min_s": f"{t[0]:.12g}", "measured_max_s": f"{t[-1]:.12g}",
                     "spread": f"{t[-1] / t[0] - 1:.6f}"})
    return rows, left


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.report.blind_rows", description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", metavar="TRACES", help="a blind sweep's trace folder, with its predictions.json")
    ap.add_argument("--machine-kind", required=True, help="the history's machine column (h100, h200-x2, ...)")
    ap.add_argument("--machine", required=True, metavar="FILE.yaml",
                    help="the calibrated machine file the sweep was predicted with (the report's other columns)")
    a = ap.parse_args(argv)
    try:
        rows, left = blind_rows(Path(a.traces), a.machine_kind, a.machine)
    except (TraceError, MachineError) as e:
        raise PerfmlpError(str(e)) from None
    for line in left:
        say(f"left out: {line}", file=sys.stderr)
    if not rows:
        raise PerfmlpError(f"{a.traces}: no configuration with blind predictions")
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report.blind_rows", main))
