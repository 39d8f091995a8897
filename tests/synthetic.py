"""Synthetic GPU traces for the tests: the records a run writes (manifest,
header, batch, epoch and end lines, docs/trace-format.md), with phase times
given or taken from the model's prediction, in memory (`as_run`, through
Run.from_records) or as a run folder on disk (`write_run`), so that no test
reads the committed results.

A batch's phases are those names.batch_phases names for its modes,
laid end to end; the batch's time is their sum plus `other_ms` (an eager
run's host time between phases). On the host clock (trace level counters) a
batch line has no `t_ms_total` and the epoch line's synchronised time per
batch (`steady_ms`, unless None) stands in for it.
"""
from __future__ import annotations

import json
from pathlib import Path

from perfmlp.model.costs import batch_counts
from perfmlp.model.predict import predict_batch
from perfmlp.names import PHASE_GROUP, batch_phases
from perfmlp.trace.reader import Run
from perfmlp.trace.upgrade import SCHEMA_V1 as SCHEMA, format1  # format-1 records, read through the upgrader

GPU = "NVIDIA H200"


def level_of(clock: str) -> str:
    """The trace level a batch clock comes from: counters on the host clock, else phases."""
    return "counters" if clock == "host" else "phases"


def model_phase_ms(machine, hidden=(512,), batch=3200, procs=1, transfer="pageable", comm="mpi-staged",
                   exec_mode="eager", trace_level="phases", precision="float32") -> tuple[dict, object]:
    """(phase -> ms, the prediction): the model's groups spread evenly over
    the phases that measure them; a group no phase of these modes records
    (the collective inside a graph replay with NCCL) goes into compute."""
    pred = predict_batch(machine, (784, *hidden, 10), batch, procs, precision, comm, transfer, trace_level,
                         exec_mode=exec_mode)
    phases = batch_phases(comm, transfer, exec_mode)
    out = dict.fromkeys(phases, 0.0)
    for group, s in pred.groups().items():
        mine = [p for p in phases if PHASE_GROUP[p] == group] or [p for p in phases if PHASE_GROUP[p] == "compute"]
        for p in mine:
            out[p] += 1e3 * s / len(mine)
    return out, pred


def gpu_records(exec_mode="eager", transfer="pageable", comm="mpi-staged", clock="cuda-events", procs=1,
                hidden=(512,), batch=3200, run_id=None, phase_ms=None, other_ms=0.0, batches=4, steady_ms=1.0,
                start=None, trace_level=None, precision="float32", gemm="cublas") -> tuple[dict, dict]:
    """(manifest, rank -> records) of a GPU run: `batches` batches in one
    epoch on every rank, each phase `phase_ms[phase]` ms (0.1 ms where not given)."""
    phases = batch_phases(comm, transfer, exec_mode)
    ms = {p: (phase_ms or {}).get(p, 0.1) for p in phases}
    total = sum(ms.values()) + other_ms
    level = trace_level or level_of(clock)
    cfg = {"input_size": 784, "hidden_sizes": list(hidden), "num_classes": 10, "batch_size": batch,
           "n_train": batches * batch, "epochs": 1, "precision": precision, "batch_transfer": transfer,
           "comm": comm, "gemm": gemm, "exec": exec_mode, "backend": "cupy"}
    name = run_id or f"{exec_mode}-{transfer}-{comm}-{clock}-p{procs}"
    manifest = {"schema": SCHEMA, "run_id": name, "config": cfg, "procs": procs, "status": "complete",
                "backend": "cupy", "comm": comm, "exec": exec_mode, "trace_level": level,
                "machine": {"nodes": {"h": {"gpu": GPU, "gpu_count": 4, "ranks": list(range(procs))}}}}
    if start:
        manifest["start"] = start
    c = batch_counts((784, *hidden, 10), batch // procs, 4 if precision == "float32" else 8, comm, transfer,
                     exec_mode=exec_mode)
    ranks = {}
    for r in range(procs):
        recs = [{"kind": "header", "schema": SCHEMA, "rank": r, "size": procs, "pid": 1000 + r}]
        for k in range(batches):
            t, spans = 0.0, {}
            for p in phases:
                spans[p] = [t, ms[p]]
                t += ms[p]
            rec = {"kind": "batch", "epoch": 0, "batch": k, "samples": batch, "local_samples": batch // procs,
                   "t0_s": k * total * 1e-3, "flops": dict(c.flops), "bytes_h2d": c.bytes_h2d,
                   "bytes_d2h": c.bytes_d2h, "bytes_mpi": c.bytes_mpi, "bytes_nccl": c.bytes_nccl,
                   "wall_ms": total, "t_ms": spans, "clock": clock}
            if clock != "host":
                rec["t_ms_total"] = total
            recs.append(rec)
        epoch = {"kind": "epoch", "epoch": 0}
        if steady_ms is not None:
            epoch["steady_ms_per_batch"] = steady_ms
        recs += [epoch, {"kind": "end", "status": "complete"}]
        ranks[r] = recs
    return manifest, ranks


def as_run(records: tuple[dict, dict]) -> Run:
    return Run.from_records(*format1(*records))


def gpu_run(**kw) -> Run:
    """gpu_records(**kw) as a Run read from memory."""
    return as_run(gpu_records(**kw))


def write_run(folder: Path, records: tuple[dict, dict]) -> Path:
    """The run as the tracer lays it out: <folder>/<run id>/manifest.json
    and rank-<r>.jsonl. Returns the run's folder."""
    manifest, ranks = records
    d = Path(folder) / manifest["run_id"]
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(manifest))
    for r, recs in ranks.items():
        (d / f"rank-{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return d


def prediction_entry(pred, predicted_at: str) -> dict:
    """A predictions.json entry (perfmlp.sweep.write_predictions' fields the report reads)."""
    return {"total_s": pred.total_s, "groups_s": pred.groups(), "predicted_at": predicted_at}


def write_predictions(folder: Path, entries: dict, name: str = "predictions.json",
                      machine: dict | None = None) -> Path:
    from perfmlp.sweep import PREDICTIONS_SCHEMA
    path = Path(folder) / name
    path.write_text(json.dumps({"schema": PREDICTIONS_SCHEMA, "machine": machine or {}, "runs": entries}))
    return path


def drive_tracer(tmp_path: Path, name: str, plan, compiled: bool | None, epoch: int = 0, loss_every: int = 2):
    """A real Tracer (NumPy backend, a tiny network) driven by hand through
    `plan`, (piece size, phases, MPI bytes) per batch, into tmp_path/name;
    batch k has the loss k / 2 where k % loss_every, else none. `compiled`:
    the batch hooks (make_tracer's). Returns the closed tracer."""
    import numpy as np
    from perfmlp.backend import build
    from perfmlp.comm import SingleWorld
    from perfmlp.config import from_mapping
    from perfmlp.trace.format import Counts
    from perfmlp.trace.writer import make_tracer
    cfg = from_mapping(dict(batch_size=4, n_train=8, input_size=4, hidden_sizes=[3], num_classes=2, backend="numpy",
                            trace_dir=str(tmp_path), run_id=name, quiet=True))
    world = SingleWorld()
    be = build(cfg, world, np.zeros((8, 4), np.float32), np.eye(2, dtype=np.float32)[[0, 1] * 4])
    tracer = make_tracer(cfg, world, compiled=compiled)
    tracer.attach(world, be)
    counts = Counts()
    for k, (samples, phases, nbytes) in enumerate(plan):
        tracer.begin_batch(epoch, k, samples, samples)
        for p in phases:
            with tracer.phase(p):
                pass
        counts.bytes_mpi = nbytes
        counts.collectives.append(("MPI_Allreduce", nbytes // 4))
        tracer.end_batch(k / 2 if k % loss_every else None, counts)
        counts.reset()
    tracer.close("complete")
    return tracer
