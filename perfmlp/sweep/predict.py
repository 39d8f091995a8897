"""Blind predictions: the model's time per batch for every run a sweep is
about to launch, written before the first one starts and never rewritten."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from pathlib import Path

from .. import names as N
from ..config import from_mapping
from ..errors import PerfmlpError, write_atomic
from ..model.machine import CpuMachine
from ..trace.format import WARMUP_BATCHES
from .plan import SweepRun, sweep_run_id
from ..names import MORE_PREDICTIONS
from ..safeio import read_json

PREDICTIONS_SCHEMA = "perfmlp.predictions/1"


def predict_run(machine, run: SweepRun) -> dict:
    pred = run_prediction(machine, run)
    return {"predicted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
            "total_s": pred.total_s, "terms_s": pred.terms, "groups_s": pred.groups(), "procs": run.procs,
            "repeat": run.repeat, "trace_level": pred.detail["trace_level"]}


def run_interval(machine, run: SweepRun) -> dict:
    """The run's predicted distribution (perfmlp/model/interval.py): `interval_s` (the 90% interval), `quantiles_s` at
    `percentiles`; None where the machine file records no spread."""
    from ..model.interval import interval
    if isinstance(machine, CpuMachine):   # the CPU model draws its own (model/predict/cpu.py interval_s)
        lo_hi = run_prediction(machine, run).detail["interval_s"]
        return {"interval_s": list(lo_hi) if lo_hi else None, "quantiles_s": None}
    iv = interval(machine, lambda m: run_prediction(m, run))
    if iv is None:
        return {"interval_s": None, "quantiles_s": None}
    d = iv.as_json()
    return {k: d[k] for k in ("interval_s", "quantiles_s", "percentiles", "draws", "seed", "spread_sources")}


def run_prediction(machine, run: SweepRun):
    """The model's Prediction of a run as the trainer will run it."""
    from ..model.strategies import PS_COMMS, StrategyError, predict_strategy
    from ..model.predict import predict_batch, resolve_comm, resolve_exec
    from ..model.predict.cpu import predict_cpu
    from ..model.predict.slices import slice_count
    from ..trace.format import resolve_trace_level
    c = run.config
    comm = resolve_comm(c.comm, c.backend)   # the exchange the trainer will use
    # the execution mode the trainer will run (auto: graph where the step can be captured)
    mode = resolve_exec(c.exec, N.NUMPY if c.backend == N.NUMPY else N.CUPY, c.parallel, comm)
    # the tracer's level (auto: the mode's default); a fallback at run time (writer.attach) is not foreseen
    level = resolve_trace_level(c.trace_level, mode) if c.trace else None
    if isinstance(machine, CpuMachine):   # a NumPy run, each rank its share of the cores (run.py)
        if c.parallel != N.DATA or comm in PS_COMMS or c.slices != "1" or c.grad_precision != N.FLOAT32:
            raise PerfmlpError(f"{run.run_id}: the CPU model prices data parallelism with MPI's allreduce of "
                               "unsliced gradients in the master type (model/predict/cpu.py)")
        pred = predict_cpu(machine, c.layer_sizes, c.batch_size, run.procs, None, c.precision, traced=c.trace)
        pred.detail["trace_level"] = level or N.UNTRACED
        return pred
    if c.parallel != N.DATA or comm in PS_COMMS:
        try:
            return predict_strategy(machine, c.layer_sizes, c.batch_size, run.procs, c.precision, comm,
                                    c.batch_transfer, c.parallel, c.model_procs, level, exec_mode=mode)
        except StrategyError as e:  # what the run itself would refuse
            raise PerfmlpError(f"{run.run_id}: {e}") from None
    k = slice_count(c.slices, machine, c.layer_sizes, c.batch_size, run.procs, c.precision, c.grad_precision,
                    comm, c.batch_transfer, mode, c.gemm)
    return predict_batch(machine, c.layer_sizes, c.batch_size, run.procs, c.precision, comm, c.batch_transfer,
                         level, exec_mode=mode, overlap=c.overlap, bucket_bytes=c.bucket_bytes, gemm=c.gemm,
                         slices=k, grad_precision=c.grad_precision)


def more_predictions_path(trace_dir: Path, machine_arg: str) -> Path:
    """Where --predict-also MACHINE's predictions go: predictions-<file name>.json."""
    stem = Path(str(machine_arg)).name.removesuffix(".yaml").removesuffix(".yml")
    return trace_dir / MORE_PREDICTIONS.replace("*", stem)


def _existing(path: Path, sha: str, runs: list[SweepRun]) -> dict | None:
    """The predictions already in `path` (None if there is no file); an
    error for a file that is not one, or was made with another machine file."""
    if not path.exists():
        return None
    try:
        data = read_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PerfmlpError(f"{path}: unreadable ({e.__class__.__name__}); move it away") from None
    if not isinstance(data, dict) or data.get("schema") != PREDICTIONS_SCHEMA or \
            not isinstance(data.get("runs"), dict):
        raise PerfmlpError(f"{path}: not a perfmlp predictions file; move it away")
    if any(r.run_id not in data["runs"] for r in runs) and data.get("machine", {}).get("sha256") != sha:
        raise PerfmlpError(f"{path}: made with another machine file ({data.get('machine', {}).get('path')}); "
                           "use that one or another --trace-dir")
    return data


def write_predictions(path: Path, machine_arg: str, runs: list[SweepRun]) -> int:
    """Add the predictions of `runs` not yet in the file (never rewriting one), each with its 90% interval and quantiles
    (run_interval); returns how many were added. A file made with another machine file is an error."""
    from ..model.machine import load_machine, resolve_machine_path
    machine = load_machine(machine_arg)
    mpath = resolve_machine_path(machine_arg)
    sha = hashlib.sha256(mpath.read_bytes()).hexdigest()
    data = _existing(path, sha, runs) or {
        "schema": PREDICTIONS_SCHEMA, "machine": {"name": machine.name, "path": str(machine.path), "sha256": sha},
        "runs": {}}
    new = [r for r in runs if r.run_id not in data["runs"]]
    intervals: dict = {}   # a configuration's repeats share one distribution
    for r in new:
        key = (repr(r.config), r.procs)
        if key not in intervals:
            intervals[key] = run_interval(machine, r)
        data["runs"][r.run_id] = {**predict_run(machine, r), **intervals[key]}
    if new:
        write_atomic(path, json.dumps(data, indent=1))
    return len(new)


def lengthen(runs: list[SweepRun], machine_arg: str, seconds: float, name: str) -> list[SweepRun]:
    """Each run with the epochs (at least its own) its steady batches need to last `seconds` by `machine_arg`'s
    prediction, to sample the host's drifting copy speed more than once; samples (host memory) kept, id renewed."""
    from ..model.machine import load_machine
    machine = load_machine(machine_arg)
    out = []
    for r in runs:
        c = r.config
        steady = max(c.batches_per_epoch - WARMUP_BATCHES, 1)
        per_batch = predict_run(machine, r)["total_s"]
        epochs = max(c.epochs, math.ceil(seconds / (per_batch * steady)))
        if epochs == c.epochs:
            out.append(r)
            continue
        values = {**r.values, "epochs": epochs}
        cfg = from_mapping(values, where=f"{name}: ")
        out.append(SweepRun(sweep_run_id(name, cfg, r.procs, r.repeat), r.procs, values, cfg, r.repeat))
    return out
