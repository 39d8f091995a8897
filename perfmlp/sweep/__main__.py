"""The sweep's command line: `python -m perfmlp.sweep FILE.yaml` (the file's
format and what the sweep promises: perfmlp/sweep/__init__.py)."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import yaml

from ..errors import (OneLineParser, PerfmlpError, add_machine, cli, positive_int_arg, safe_stdio, say, seconds_arg,
                      write_atomic)
from ..config import load_yaml
from .plan import calibration_sizes, check_runnable_here, expand, min_steady_seconds, sweep_name
from ..names import PREDICTIONS
from .predict import lengthen, more_predictions_path, write_predictions
from .run import SWEEP_DIR, find_launcher, launch, lock, remove_failed, trace_state
from ..run import Signalled
from ..startup import SIGNALS


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m perfmlp.sweep", description=sys.modules[__package__].__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", metavar="FILE.yaml", help="the sweep file (see above)")
    ap.add_argument("--trace-dir", default="traces", metavar="DIR",
                    help="folder the runs' trace folders go under (default: traces)")
    ap.add_argument("--no-report", action="store_true",
                    help="do not make the report after the runs (default: make it)")
    ap.add_argument("--report-out", default=None, metavar="DIR",
                    help="folder for the report (default: reports/<name of the trace folder>)")
    ap.add_argument("--no-figures", dest="draw", action="store_false",
                    help="the report's words and tables only: no figure drawn, no matplotlib needed "
                         "(default: with its figures)")
    add_machine(ap, "the report's: the calibrated file for the traces' GPU")
    ap.add_argument("--timeout", type=seconds_arg, default=600, metavar="SECONDS",
                    help="seconds a run may take before it is stopped and counted as failed (default: 600)")
    ap.add_argument("--max-procs", type=positive_int_arg("must be a positive number of processes, got {}"),
                    default=None, metavar="P",
                    help="skip the runs that need more than P processes (default: run them all)")
    ap.add_argument("--predict", default=None, metavar="NAME|FILE.yaml",
                    help="write the blind predictions with this machine file before the runs "
                         "(default: the sweep file's `predict`, else none)")
    ap.add_argument("--predict-also", action="append", default=[], metavar="NAME|FILE.yaml",
                    help="also write blind predictions with this machine file, to predictions-<file name>.json; "
                         "repeatable (default: none)")
    ap.add_argument("--calibration-sizes", action="store_true",
                    help="print the hidden sizes and per-rank batches the runs use, as perfmlp.calibrate's "
                         "--hidden and --local-batch values, and run nothing (default: run the sweep)")
    return ap


def _on_signal(signum, frame):
    raise Signalled(signum)


class _Sweep:
    """What one invocation runs, and how far it got."""

    def __init__(self, a, runs, predict: str | None):
        self.a, self.runs = a, runs
        self.trace_dir = Path(a.trace_dir)
        self.own = self.trace_dir / SWEEP_DIR
        self.current = None   # the run whose job is in flight
        self.failed = 0
        self.predict = predict   # the machine file of the blind predictions

    def wanted(self, run) -> bool:
        return not (self.a.max_procs and run.procs > self.a.max_procs)


def main(argv=None) -> int:
    safe_stdio()
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    sweep = None
    try:
        sweep = _prepare(_parser().parse_args(argv))
        return _main(sweep) if sweep is not None else 0
    except PerfmlpError as e:
        say(f"perfmlp.sweep: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        ended = ""
        if sweep is not None and sweep.current:  # launch() has ended its job's process group
            remove_failed(sweep.trace_dir / sweep.current)
            ended = f"; the job of {sweep.current} was ended (its output: {sweep.own / sweep.current}.out)"
        say(f"perfmlp.sweep: {SIGNALS[signum][0]}{ended}", file=sys.stderr)
        return 128 + signum


def _prepare(a) -> _Sweep | None:
    """The runs, checked, lengthened and runnable here (None: nothing to run)."""
    spec = load_yaml(a.file)   # a regular UTF-8 file, YAML keys unique; expand checks its keys
    runs = expand(spec, a.file)
    if a.calibration_sizes:
        hidden, local = calibration_sizes(runs)
        say(",".join(map(str, hidden)), ",".join(map(str, local)))
        return None
    machine = a.predict or spec.get("predict")
    seconds = min_steady_seconds(spec, a.file, machine)
    if seconds is not None:
        try:
            runs = lengthen(runs, str(machine), seconds, sweep_name(spec, a.file))
        except ValueError as e:  # the model's refusal of a machine file (MachineError)
            raise PerfmlpError(str(e)) from None
    sweep = _Sweep(a, runs, str(machine) if machine else None)
    check_runnable_here([r for r in runs if sweep.wanted(r)], a.file)
    return sweep


def _main(sweep: _Sweep) -> int:
    launcher = find_launcher()
    held = lock(sweep.trace_dir)
    try:
        _predict(sweep)
        for i, run in enumerate(sweep.runs, 1):
            _run_one(sweep, launcher, run, f"[{i}/{len(sweep.runs)}] {run.run_id}:")
    finally:
        held.close()
    if sweep.failed:
        say(f"perfmlp.sweep: {sweep.failed} of {len(sweep.runs)} runs failed or were refused", file=sys.stderr)
    status = 1 if sweep.failed else 0
    if not sweep.a.no_report:
        from ..report.__main__ import main as report_main
        a = sweep.a
        rc = report_main([str(sweep.trace_dir)] + (["--out", a.report_out] if a.report_out else []) +
                         (["--machine", a.machine] if a.machine else []) + ([] if a.draw else ["--no-figures"]))
        status = status or rc
    return status


def _predict(sweep: _Sweep) -> None:
    """The blind predictions, written before the first run starts."""
    targets = ([(sweep.trace_dir / PREDICTIONS, sweep.predict)] if sweep.predict else []) + \
        [(more_predictions_path(sweep.trace_dir, m), m) for m in sweep.a.predict_also]
    if not targets:
        return
    todo = [r for r in sweep.runs if sweep.wanted(r) and trace_state(sweep.trace_dir / r.run_id, r)[0] != "complete"]
    for path, machine_arg in targets:
        try:
            n = write_predictions(path, machine_arg, todo)
        except ValueError as e:  # the model's refusal of a machine file (MachineError)
            raise PerfmlpError(str(e)) from None
        say(f"{n} blind prediction(s) written to {path} before the runs")


def _run_one(sweep: _Sweep, launcher: list[str], run, head: str) -> None:
    if not sweep.wanted(run):
        say(f"{head} needs {run.procs} processes (--max-procs {sweep.a.max_procs}), skipped")
        return
    folder = sweep.trace_dir / run.run_id
    state, detail = trace_state(folder, run)
    if state == "complete":
        say(f"{head} already traced, skipped")
        return
    if state == "different":
        say(f"{head} REFUSED: {folder} holds a run of another configuration ({detail}); move it away")
        sweep.failed += 1
        return
    if state == "incomplete":
        remove_failed(folder)
        say(f"{head} the earlier run did not complete ({detail}); its trace folder was removed")
    cfile, out = sweep.own / f"{run.run_id}.yaml", sweep.own / f"{run.run_id}.out"
    write_atomic(cfile, yaml.safe_dump({**run.values, "trace_dir": str(sweep.trace_dir), "run_id": run.run_id,
                                        "quiet": True}))
    cmd = [*launcher, "-n", str(run.procs), sys.executable, "-m", "perfmlp.run", "--config", str(cfile)]
    sweep.current = run.run_id
    ok, why = launch(cmd, sweep.a.timeout, out)
    sweep.current = None
    if not ok:
        for old, new in remove_failed(folder, sweep.own / f"{run.run_id}.at-failure.npz").items():
            why = why.replace(old, new)   # the line names the parameters where they are kept
        sweep.failed += 1
    say(f"{head} ok" if ok else f"{head} FAILED: {why} (its output: {out})")


if __name__ == "__main__":
    sys.exit(cli("perfmlp.sweep", main))
