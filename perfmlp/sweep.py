"""`python -m perfmlp.sweep FILE.yaml`: run a set of configurations, each
with its own process count through mpiexec, then make the report.

The file:

    name: q2_2                       # prefix of every run id
    config: ../configs/reference.yaml   # optional: the configuration every run
                                     #   starts from (relative to this file)
    base: {data: synthetic, epochs: 2}  # configuration keys for every run
    matrix:                          # the cartesian product of these lists
      hidden_sizes: [[512], [1024], [2048]]
      procs: [1, 2, 4]
    batch_per_proc: 3200             # optional: batch_size = batch_per_proc * procs
    runs: [{procs: 1, batch_transfer: pinned}]   # optional: more runs, each over base
    repeats: 3                       # optional: run each configuration this many times
    min_steady_batches: 20           # optional: n_train sized from the batch so that every run
                                     #   has at least this many steady batches (the trace
                                     #   reader's rule: the first WARMUP_BATCHES of each epoch are left out)
    min_steady_seconds: 2            # optional, with a prediction machine file: more epochs over the
                                     #   same samples until the steady batches last about this long
                                     #   by the prediction (lengthen)
    predict: h200-calibrated         # optional (or --predict): the machine file the blind
                                     #   predictions are made with, before the runs

A run's configuration is the defaults, then `config`, then `base`, then its
matrix entry or `runs` entry. The sweeps that reproduce the reference
questions name configs/reference.yaml, so they run the reference
hyperparameters whatever perfmlp.run's defaults are.

A run's id (sweep_run_id) is the sweep's name, the values a reader looks for
(H, B, procs, precision, transfer, comm, GEMM) and a hash of the whole
configuration and process count, so epochs, n_train, learning rate, data,
seed... count too: two runs that differ in anything but where their output
goes never share an id.

With `repeats`, run ids end in -r1, -r2, ... (the hash covers the repeat), so
the report can state the run-to-run spread of each configuration.

Blind predictions: with `predict` (or --predict MACHINE), before the first
run is launched the sweep writes `<trace-dir>/predictions.json`: for every
run it is about to launch, the model's predicted time per batch and terms,
with the time the prediction was made and the machine file's SHA-256. An
entry, once written, is never rewritten (a resumed sweep adds only runs it
had not predicted), so the report can check that every prediction it
judges was made before its run started. `--predict-also MACHINE` (any
number of times) writes the same for another machine file beside it, in
`predictions-<file name>.json` (e.g. another GPU's calibration carried here
by datasheet ratios, `python -m perfmlp.model.scaled`): the report shows
each such file's error apart from the main one's.

A trace folder is reused only when its manifest records the same
configuration and process count and the run completed on every rank
("already traced"). A folder of the same id holding another configuration
(made by hand with --run-id, or by another perfmlp version) is left alone
and that run is refused: it is a result of something else, which the sweep
neither reuses nor buries. A failed, timed-out or cut-off run is moved aside
to `<id>.failed-<n>` (nothing is lost) and run again. The sweep exits 1 if
any run failed or was refused, else 0.

The launcher is `mpiexec -n P` unless PERFMLP_MPIRUN names another
(e.g. "mpirun --allow-run-as-root --noprefix").
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import Config, from_mapping, load_yaml
from .errors import PerfmlpError
from .trace.format import WARMUP_BATCHES
from .trace.reader import TraceError, read_run

SWEEP_KEYS = {"name", "config", "base", "matrix", "runs", "batch_per_proc", "repeats", "min_steady_batches",
              "min_steady_seconds", "predict"}
PREDICTIONS = "predictions.json"
MORE_PREDICTIONS = "predictions-*.json"   # --predict-also: one per machine file
PREDICTIONS_SCHEMA = "perfmlp.predictions/1"
# Configuration keys that say where a run's output goes, not what it runs.
OUTPUT_ONLY = ("trace_dir", "run_id", "quiet", "save_params")
FAILED_SUFFIX = ".failed-"


@dataclass(frozen=True)
class SweepRun:
    run_id: str
    procs: int
    values: dict      # the configuration keys handed to perfmlp.run
    config: Config    # what they resolve to
    repeat: int = 0   # 1, 2, ... with `repeats`; 0 without


def run_identity(cfg: Config, procs: int) -> dict:
    """What a run computes and measures: its configuration without the
    output-only keys, and its process count."""
    ident = {k: v for k, v in cfg.to_dict().items() if k not in OUTPUT_ONLY}
    ident["procs"] = procs
    return ident


def sweep_run_id(name: str, cfg: Config, procs: int, repeat: int = 0) -> str:
    """The id of a sweep's run: readable fields, then a stable hash of the
    whole identity (so epochs, n_train, learning rate, data, seed... count)
    and of the repeat."""
    ident = run_identity(cfg, procs)
    if repeat:
        ident["repeat"] = repeat
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8]
    hs = "x".join(str(h) for h in cfg.hidden_sizes)
    par = "" if cfg.parallel == "data" else f"-{cfg.parallel}{cfg.model_procs or ''}"  # data: ids as before
    extra = (f"-{cfg.exec}" if cfg.exec != "auto" else "") + ("-overlap" if cfg.overlap else "") + \
        (f"-r{repeat}" if repeat else "")
    return (f"{name}-h{hs}-b{cfg.batch_size}-p{procs}{par}-{cfg.precision}-{cfg.batch_transfer}-{cfg.comm}-"
            f"{cfg.gemm}{extra}-{digest}")


def _count(spec: dict, key: str, where: str) -> int:
    v = spec.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise PerfmlpError(f"{where}: {key} must be a positive integer, got {v!r}")
    return v


def expand(spec: dict, where: str) -> list[SweepRun]:
    """Every run of a sweep file, each configuration checked."""
    unknown = sorted(set(spec) - SWEEP_KEYS)
    if unknown:
        raise PerfmlpError(f"{where}: unknown sweep key {unknown[0]} (known: {', '.join(sorted(SWEEP_KEYS))})")
    name = str(spec.get("name") or Path(where).stem)
    if not all(c.isalnum() or c in "-_." for c in name):
        raise PerfmlpError(f"{where}: name may hold only letters, digits, '-', '_' and '.', got {name!r}")
    start = {}
    if spec.get("config") is not None:
        if not isinstance(spec["config"], str):
            raise PerfmlpError(f"{where}: config must be the path of a configuration file")
        cfile = Path(where).parent / spec["config"]
        start = load_yaml(cfile)
        from_mapping(start, where=f"{cfile}: ", check=False)  # its own errors name it
    base = spec.get("base") or {}
    matrix = spec.get("matrix") or {}
    if not isinstance(base, dict) or not isinstance(matrix, dict):
        raise PerfmlpError(f"{where}: base and matrix must be mappings")
    for k, v in matrix.items():
        if not isinstance(v, list) or not v:
            raise PerfmlpError(f"{where}: matrix.{k} must be a non-empty list")
    combos = [dict(zip(matrix, vals)) for vals in itertools.product(*matrix.values())] if matrix else []
    extra = spec.get("runs") or []
    if not isinstance(extra, list) or not all(isinstance(r, dict) for r in extra):
        raise PerfmlpError(f"{where}: runs must be a list of mappings")
    repeats, min_steady = _count(spec, "repeats", where), _count(spec, "min_steady_batches", where)
    runs = []
    for combo in combos + extra:
        values = {**start, **base, **combo}
        procs = values.pop("procs", 1)
        if isinstance(procs, bool) or not isinstance(procs, int) or procs <= 0:
            raise PerfmlpError(f"{where}: procs must be a positive integer, got {procs!r}")
        if spec.get("batch_per_proc") and "batch_size" not in combo:
            values["batch_size"] = int(spec["batch_per_proc"]) * procs
        if min_steady and "n_train" not in combo:
            values["n_train"] = steady_n_train(from_mapping(values, where=f"{where}: ", check=False), min_steady)
        cfg = from_mapping(values, where=f"{where}: ")  # checked before anything runs
        for r in (range(1, repeats + 1) if repeats else (0,)):
            runs.append(SweepRun(sweep_run_id(name, cfg, procs, r), procs, values, cfg, r))
    runs.sort(key=lambda r: r.repeat)  # every configuration once, then again: drift spreads over all, and a
    ids = [r.run_id for r in runs]     # sweep cut short still covers every configuration
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PerfmlpError(f"{where}: two runs would share the id {dup[0]}")
    return runs


def steady_n_train(cfg: Config, min_steady: int) -> int:
    """Samples for at least `min_steady` steady batches over cfg.epochs epochs
    (WARMUP_BATCHES of each epoch are not steady)."""
    per_epoch = WARMUP_BATCHES + -(-min_steady // cfg.epochs)
    return cfg.batch_size * per_epoch


def lengthen(runs: list[SweepRun], machine_arg: str, seconds: float, name: str) -> list[SweepRun]:
    """Each run with as many epochs (at least its own) as its steady batches
    need to last `seconds` at the time per batch `machine_arg` predicts
    (predict_run); its samples, and so its host memory, stay as they are.
    Why: the host's copy speed drifts over seconds (one H100,
    benchmarks/results/h100/drift: a pageable copy's median over 10 calls
    moved 27-54% within 16 s), and 20 batches of 0.1-4 ms sample one
    moment of it. A run's id covers its epochs, so the ids follow the
    machine file's predictions."""
    from .model.machine import load_machine
    machine = load_machine(machine_arg)
    out = []
    for r in runs:
        c = r.config
        steady = max(-(-c.n_train // c.batch_size) - WARMUP_BATCHES, 1)
        per_batch = predict_run(machine, r)["total_s"]
        epochs = max(c.epochs, math.ceil(seconds / (per_batch * steady)))
        if epochs == c.epochs:
            out.append(r)
            continue
        values = {**r.values, "epochs": epochs}
        cfg = from_mapping(values, where=f"{name}: ")
        out.append(SweepRun(sweep_run_id(name, cfg, r.procs, r.repeat), r.procs, values, cfg, r.repeat))
    return out


# ---- blind predictions ---------------------------------------------------------

def resolved_comm(cfg: Config) -> str:
    """The exchange a run will use: `auto` is mpi-staged on a GPU, mpi on NumPy."""
    if cfg.comm != "auto":
        return cfg.comm
    return "mpi" if cfg.backend == "numpy" else "mpi-staged"


def predict_run(machine, run: SweepRun) -> dict:
    from .model.strategies import PS_COMMS, StrategyError, predict_strategy
    from .model.predict import predict_batch, resolve_exec
    from .trace.format import resolve_trace_level
    c = run.config
    comm = resolved_comm(c)
    # the execution mode the trainer will run (auto: graph where the step can be captured)
    mode = resolve_exec(c.exec, "numpy" if c.backend == "numpy" else "cupy", c.parallel, comm)
    # the level the tracer will run at (auto: the mode's default); a level that cannot run falls back at run
    # time (trace/writer.py attach), which no prediction made before the run can know
    level = resolve_trace_level(c.trace_level, mode) if c.trace else None
    if c.parallel != "data" or comm in PS_COMMS:
        try:
            pred = predict_strategy(machine, c.layer_sizes, c.batch_size, run.procs, c.precision, comm,
                                    c.batch_transfer, c.parallel, c.model_procs, level, exec_mode=mode)
        except StrategyError as e:  # what the run itself would refuse
            raise PerfmlpError(f"{run.run_id}: {e}") from None
    else:
        pred = predict_batch(machine, c.layer_sizes, c.batch_size, run.procs, c.precision, comm,
                             c.batch_transfer, level, exec_mode=mode, overlap=c.overlap,
                             bucket_bytes=c.bucket_bytes, gemm=c.gemm)
    return {"predicted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
            "total_s": pred.total_s, "terms_s": pred.terms, "groups_s": pred.groups(), "procs": run.procs,
            "repeat": run.repeat, "trace_level": pred.detail["trace_level"]}


def more_predictions_path(trace_dir: Path, machine_arg: str) -> Path:
    """Where --predict-also MACHINE's predictions go: predictions-<file name>.json."""
    stem = Path(str(machine_arg)).name.removesuffix(".yaml").removesuffix(".yml")
    return trace_dir / MORE_PREDICTIONS.replace("*", stem)


def write_predictions(path: Path, machine_arg: str, runs: list[SweepRun]) -> int:
    """Add the predictions of `runs` not yet in the file (never rewriting
    one); returns how many were added. A file made with another machine
    file is an error."""
    from .model.machine import load_machine, resolve_machine_path
    machine = load_machine(machine_arg)
    mpath = resolve_machine_path(machine_arg)
    sha = hashlib.sha256(mpath.read_bytes()).hexdigest()
    head = {"name": machine.name, "path": str(machine.path), "sha256": sha}
    data = {"schema": PREDICTIONS_SCHEMA, "machine": head, "runs": {}}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise PerfmlpError(f"{path}: unreadable ({e.__class__.__name__}); move it away") from None
        if not isinstance(data, dict) or data.get("schema") != PREDICTIONS_SCHEMA:
            raise PerfmlpError(f"{path}: not a perfmlp predictions file; move it away")
        if all(r.run_id in data["runs"] for r in runs):
            return 0
        if data.get("machine", {}).get("sha256") != sha:
            raise PerfmlpError(f"{path}: made with another machine file ({data.get('machine', {}).get('path')}); "
                               "use that one or another --trace-dir")
    new = [r for r in runs if r.run_id not in data["runs"]]
    for r in new:
        data["runs"][r.run_id] = predict_run(machine, r)
    if new:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    return len(new)


# ---- what is already on disk ---------------------------------------------------

def _first_difference(recorded: dict, wanted: dict) -> str:
    for k in sorted(set(recorded) | set(wanted)):
        if recorded.get(k) != wanted.get(k):
            return f"{k} {recorded.get(k)!r} there, {wanted.get(k)!r} here"
    return ""


def trace_state(folder: Path, run: SweepRun) -> tuple[str, str]:
    """("absent" | "complete" | "different" | "incomplete", one-line detail)."""
    if not folder.exists():
        return "absent", ""
    try:
        trace = read_run(folder)
    except TraceError as e:
        return "incomplete", str(e)
    recorded = {k: v for k, v in trace.config.items() if k not in OUTPUT_ONLY}
    recorded["procs"] = trace.procs
    diff = _first_difference(recorded, run_identity(run.config, run.procs))
    if diff:
        return "different", diff
    if not trace.complete:
        return "incomplete", trace.status
    if trace.problems:
        return "incomplete", trace.problems[0]
    return "complete", ""


def set_aside(folder: Path) -> Path:
    """Rename a failed run's folder to the first free `<id>.failed-<n>`."""
    n = 1
    while (aside := folder.with_name(f"{folder.name}{FAILED_SUFFIX}{n}")).exists():
        n += 1
    folder.rename(aside)
    return aside


# ---- running -------------------------------------------------------------------

def launch(cmd: list[str], timeout_s: float) -> tuple[bool, str]:
    """Run one job in a process group of its own; (ok, the last line of its
    stderr or why it was stopped)."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as e:
        return False, f"cannot start {cmd[0]}: {e.strerror}"
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_group(proc)
        return False, f"timed out after {timeout_s:g} s"
    if proc.returncode == 0:
        return True, ""
    return False, (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM to the job's whole group (mpiexec and its ranks, which then
    close their traces), SIGKILL to whatever is left of it after grace_s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()  # reap mpiexec, or the group never looks empty
            os.killpg(proc.pid, 0)  # raises once every member is gone
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()  # mpiexec is gone by now; its pipes close with proc


def calibration_sizes(runs: list[SweepRun]) -> tuple[list[int], list[int]]:
    """The hidden sizes and the per-rank batches (a data group's piece) the
    runs use: what `python -m perfmlp.calibrate --hidden --local-batch`
    should time for its GEMM rates and own kernels to cover them."""
    from .model.costs import pieces
    hidden, local = set(), set()
    for r in runs:
        c = r.config
        hidden.update(c.hidden_sizes)
        groups = {"data": r.procs, "model": 1}.get(c.parallel, max(r.procs // max(c.model_procs, 1), 1))
        local.add(max(pieces(c.batch_size, groups)))
    return sorted(hidden), sorted(local)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m perfmlp.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", metavar="FILE.yaml", help="the sweep file (see above)")
    ap.add_argument("--trace-dir", default="traces", metavar="DIR",
                    help="folder the runs' trace folders go under (default: traces)")
    ap.add_argument("--no-report", action="store_true",
                    help="do not make the report after the runs (default: make it)")
    ap.add_argument("--report-out", default=None, metavar="DIR",
                    help="folder for the report (default: reports/<name of the trace folder>)")
    ap.add_argument("--machine", default=None, metavar="NAME|FILE.yaml",
                    help="machine file for the report (default: the calibrated file for the traces' GPU)")
    ap.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                    help="seconds a run may take before it is stopped and counted as failed (default: 600)")
    ap.add_argument("--max-procs", type=int, default=None, metavar="P",
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


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    try:
        spec = load_yaml(a.file)
        runs = expand(spec, a.file)
    except PerfmlpError as e:
        print(f"perfmlp.sweep: error: {e}", file=sys.stderr)
        return 2
    if a.calibration_sizes:
        hidden, local = calibration_sizes(runs)
        print(",".join(map(str, hidden)), ",".join(map(str, local)))
        return 0
    machine_for_predictions = a.predict or spec.get("predict")
    if spec.get("min_steady_seconds") is not None:
        seconds = spec["min_steady_seconds"]
        try:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                raise PerfmlpError(f"{a.file}: min_steady_seconds must be a positive number of seconds, "
                                   f"got {seconds!r}")
            if not machine_for_predictions:
                raise PerfmlpError(f"{a.file}: min_steady_seconds needs a machine file to predict with "
                                   "(--predict or the sweep's predict)")
            runs = lengthen(runs, str(machine_for_predictions), float(seconds),
                            str(spec.get("name") or Path(a.file).stem))
        except (PerfmlpError, ValueError) as e:
            print(f"perfmlp.sweep: error: {e}", file=sys.stderr)
            return 2
    launcher = shlex.split(os.environ.get("PERFMLP_MPIRUN", "mpiexec"))
    trace_dir = Path(a.trace_dir)
    cfg_dir = trace_dir / ".sweep-configs"
    try:
        cfg_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"perfmlp.sweep: error: cannot create {cfg_dir}: {e.strerror}", file=sys.stderr)
        return 2
    targets = ([(trace_dir / PREDICTIONS, str(machine_for_predictions))] if machine_for_predictions else []) + \
        [(more_predictions_path(trace_dir, m), m) for m in a.predict_also]
    if targets:
        todo = [r for r in runs if not (a.max_procs and r.procs > a.max_procs)
                and trace_state(trace_dir / r.run_id, r)[0] != "complete"]
    for path, machine_arg in targets:
        try:
            n = write_predictions(path, machine_arg, todo)
        except (PerfmlpError, ValueError, OSError) as e:
            print(f"perfmlp.sweep: error: {e}", file=sys.stderr)
            return 2
        print(f"{n} blind prediction(s) written to {path} before the runs", flush=True)
    failed = 0
    for i, run in enumerate(runs, 1):
        head = f"[{i}/{len(runs)}] {run.run_id}:"
        if a.max_procs and run.procs > a.max_procs:
            print(f"{head} needs {run.procs} processes (--max-procs {a.max_procs}), skipped", flush=True)
            continue
        folder = trace_dir / run.run_id
        state, detail = trace_state(folder, run)
        if state == "complete":
            print(f"{head} already traced, skipped", flush=True)
            continue
        if state == "different":
            print(f"{head} REFUSED: {folder} holds a run of another configuration ({detail}); move it away",
                  flush=True)
            failed += 1
            continue
        cfile = cfg_dir / f"{run.run_id}.yaml"
        try:
            if state == "incomplete":
                aside = set_aside(folder)
                print(f"{head} the earlier run did not complete ({detail}); moved to {aside.name}", flush=True)
            cfile.write_text(yaml.safe_dump({**run.values, "trace_dir": str(trace_dir), "run_id": run.run_id,
                                             "quiet": True}))
        except OSError as e:
            print(f"{head} FAILED: {e.filename}: {e.strerror}", flush=True)
            failed += 1
            continue
        cmd = [*launcher, "-n", str(run.procs), sys.executable, "-m", "perfmlp.run", "--config", str(cfile)]
        ok, why = launch(cmd, a.timeout)
        print(f"{head} {'ok' if ok else 'FAILED: ' + why}", flush=True)
        failed += not ok
    if failed:
        print(f"perfmlp.sweep: {failed} of {len(runs)} runs failed or were refused", file=sys.stderr)
    if not a.no_report:
        from .report.__main__ import main as report_main
        rargs = [str(trace_dir)] + (["--out", a.report_out] if a.report_out else []) + \
                (["--machine", a.machine] if a.machine else [])
        report_main(rargs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
