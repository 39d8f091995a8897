"""The one reader of the trace (`read_run`, `read_traces`): it returns records (trace/records.py)
and nothing else, every field checked. A damaged field ends the reading of its run with one line
naming the file, the line (or batch record) and the field (`TraceError`); a run cut off (killed,
a full disk) is read with every batch it finished and marked incomplete. Format-1 traces are read
through trace/upgrade.py; `Run.from_records` builds a run from in-memory records."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .. import names as N
from ..safeio import read_json
from . import fields as F
from . import upgrade
from .activity import gpu_phase_spans
from .format import MANIFEST, PACKED, WARMUP_BATCHES, rank_files, read_rank_bytes
from .clocks import host_phases_ns
from .fields import TraceError
from .lines import parse
from .updates import Update
from .steady import STEADY_RULE, epoch_ms, steady_window
from .store import decode_batches
from .records import (SCHEMA, Activity, Batch, Clock, End, Epoch, GpuActivity, Header, Manifest, Shape, Span,
                      read)

# the reader's interface (STEADY_RULE and WARMUP_BATCHES: the report's and the benchmarks')
__all__ = ["RankTrace", "Run", "TraceError", "STEADY_RULE", "WARMUP_BATCHES", "rank_trace", "read_run", "read_traces"]


@dataclass(frozen=True)
class RankTrace:
    rank: int
    header: Header | None = None
    shapes: Mapping = field(default_factory=dict)      # id -> Shape
    batches: tuple = ()                                 # Batch records, in order
    epochs: tuple = ()
    end: End | None = None
    clock: Clock | None = None          # at the start (activity.to_run_s)
    clock_end: Clock | None = None      # at the end (CUPTI's drift)
    activity: Activity | None = None    # what the gpu lines hold, orphans summed
    updates: tuple = ()                 # the asynchronous parameter server's Update records (rank 0)


@dataclass(frozen=True)
class Run:
    run_id: str
    manifest: Manifest
    ranks: Mapping            # rank -> RankTrace
    path: str = ""
    problems: tuple = ()
    config = property(attrgetter("manifest.config"))
    procs = property(attrgetter("manifest.procs"))
    ran = property(attrgetter("manifest.ran"))
    layer_sizes = property(attrgetter("manifest.layer_sizes"))
    # what ran (`run.comm` is `run.manifest.ran.comm`: resolved at run time, never worked out here)
    backend = property(attrgetter("manifest.ran.backend"))
    comm = property(attrgetter("manifest.ran.comm"))
    exec = property(attrgetter("manifest.ran.exec"))
    parallel = property(attrgetter("manifest.ran.parallel"))
    overlap = property(attrgetter("manifest.ran.overlap"))
    trace_level = property(attrgetter("manifest.ran.trace_level"))
    gpu = property(attrgetter("manifest.ran.gpu"))
    on_gpu = property(attrgetter("manifest.ran.on_gpu"))

    @property
    def complete(self) -> bool:
        return (self.manifest.status == "complete" and len(self.ranks) == self.procs
                and all(r.end is not None and r.end.status == "complete" for r in self.ranks.values()))

    @property
    def status(self) -> str:
        return "complete" if self.complete else f"incomplete ({self.manifest.status})"

    @property
    def profiled(self) -> bool:
        """Ran under a profiler: an NVTX tool was attached, or an Nsight Systems export sits beside it."""
        return self.manifest.profiler_attached or (
            bool(self.path) and any(p.suffix in (".sqlite", ".nsys-rep") for p in Path(self.path).iterdir()))

    # -- per batch ---------------------------------------------------------------------
    _steady = cached_property(lambda self: steady_window(self.ranks))
    _epoch_ms = cached_property(lambda self: epoch_ms(self.ranks))  # epoch -> synchronised ms per batch

    def steady_batches(self) -> dict[tuple[int, int], dict[int, Batch]]:
        """(epoch, batch) -> {rank: Batch} of the steady batches (STEADY_RULE)."""
        return self._steady

    def batch_time_ms(self, b: Batch) -> float:
        """A batch's time: on the GPU where the trace has it; on the host clock the epoch's
        synchronised wall time per steady batch, the figure the trainer prints (a GPU run's host time is
        the enqueue time, a CPU run's leaves out the time between batches); else the host time."""
        if b.t_ms_total:
            return b.t_ms_total
        return (b.clock == N.HOST_CLOCK and self._epoch_ms.get(b.epoch)) or b.wall_ms

    @cached_property
    def phase_clock(self) -> str:
        """The clock of the steady batches' phase times: cupti, cuda-events or host."""
        clocks = [b.clock for recs in self._steady.values() for b in recs.values()]
        return max(set(clocks), key=clocks.count) if clocks else "host"

    @property
    def host_enqueue_times(self) -> bool:
        """A GPU run some of whose steady batch times are the host's enqueue times (host-clock
        batches with no synchronised epoch time to stand in)."""
        return self.on_gpu and any(not b.t_ms_total and b.clock == N.HOST_CLOCK and not self._epoch_ms.get(b.epoch)
                   for recs in self._steady.values() for b in recs.values())

    def batch_times_ms(self) -> list[float]:
        """Time per batch of the job: the slowest rank's, per steady batch."""
        return [max(self.batch_time_ms(b) for b in recs.values()) for recs in self._steady.values()]

    def median_batch_ms(self) -> float | None:
        t = self.batch_times_ms()
        return statistics.median(t) if t else None

    def phase_ms(self, rank: int) -> dict:
        """Median duration of each phase on one rank over the steady batches."""
        acc: dict = {}
        for recs in self._steady.values():
            for name, span in recs[rank].t_ms.items():
                acc.setdefault(name, []).append(span.ms)
        return {k: statistics.median(v) for k, v in acc.items()}

    def counters(self, rank: int) -> Batch | None:
        """One steady full-size batch on `rank` (the first), whose shape holds its counts."""
        return next((recs[rank] for recs in self._steady.values() if recs[rank].samples == self.config["batch_size"]),
                    None)

    @classmethod
    def from_records(cls, manifest: Manifest, ranks: dict, run_id: str | None = None) -> "Run":
        """A Run from in-memory records: rank -> the records it would have written."""
        once = manifest.ran is None or manifest.ran.comm != N.PS_ASYNC
        rts = {r: _with_mem_bytes(rank_trace(r, [(rec, f"rank {r} record {i}") for i, rec in enumerate(recs)],
                                             once), manifest)
               for r, recs in ranks.items()}
        return cls(run_id or manifest.run_id, manifest, rts)


_MANY = {Batch: "batches", Epoch: "epochs", Update: "updates"}  # RankTrace's field of a kind of record
_ONE = {Header: "header", End: "end"}


def rank_trace(rank: int, recs: list, once: bool = True) -> RankTrace:
    """A rank's records (each with where it came from) put together: the batches in order, each
    once (`once`; a ps-async worker may compute several pieces of one batch), their phases measured
    on the GPU where the rank recorded GPU activity."""
    parts: dict = {"batches": [], "epochs": [], "shapes": {}, "updates": []}
    gpu: dict = {}
    seen: dict = {}
    for rec, where in recs:
        kind = type(rec)
        if kind is Batch:
            if once and rec.key in seen:
                raise TraceError(f"{where}: batch {rec.batch} of epoch {rec.epoch} recorded twice "
                                 f"(first at {seen[rec.key]})")
            seen[rec.key] = where
        if kind in _MANY:
            parts[_MANY[kind]].append(rec)
        elif kind in _ONE:
            parts[_ONE[kind]] = rec
        elif kind is Shape:
            parts["shapes"][rec.id] = rec
        elif kind is GpuActivity:
            gpu[(rec.epoch, rec.batch)] = rec.records
        elif kind is Clock:
            parts["clock_end" if rec.at == "end" else "clock"] = rec
        elif kind is Activity:
            act = parts.get("activity")
            parts["activity"] = rec if act is None else dataclasses.replace(
                act if act.schema else rec, orphans=act.orphans + rec.orphans)
    batches = _on_gpu(parts.pop("batches"), gpu, parts.get("clock")) if gpu else parts.pop("batches")
    return RankTrace(rank, batches=tuple(batches), epochs=tuple(parts.pop("epochs")),
                     updates=tuple(parts.pop("updates")), **parts)


def _on_gpu(batches: list, gpu: dict, clock: Clock | None) -> list:
    """Each batch's phases measured on the GPU from its activity records."""
    out, prev = [], None  # prev: (epoch, batch, GPU end ns) of the batch before
    for b in batches:
        recs = gpu.get(b.key)
        if not recs:
            out.append(b)
            prev = None
            continue
        after = prev[2] if prev and prev[:2] == (b.epoch, b.batch - 1) else None
        on_gpu = {r.phase for r in recs}  # the others launched nothing (a host MPI allreduce): the host's spans
        host_only = {p: (int(s), int(e)) for p, (s, e) in host_phases_ns(b, clock).items() if p not in on_gpu}
        spans, total, t0, end = gpu_phase_spans(recs, after, host_only)
        t_ms = MappingProxyType({p: Span(*s) for p, s in spans.items()})
        out.append(dataclasses.replace(b, t_ms_host=b.t_ms, t_ms=t_ms, t_ms_total=total, clock=N.CUPTI, gpu_t0_ns=t0,
                                       gpu=recs))
        prev = (b.epoch, b.batch, end)
    return out


# ---- from disk ----------------------------------------------------------------------------

def _bytes(path: Path) -> bytes:
    """A trace file's bytes; TraceError naming it."""
    try:
        return read_rank_bytes(path)
    except (OSError, EOFError) as e:
        msg = str(e)
        raise TraceError(msg if msg.startswith(str(path))
                         else f"{path}: unreadable ({type(e).__name__}: {e})") from None


def read_manifest(folder: Path) -> tuple[Manifest, int]:
    """The manifest and its format (1 or 2)."""
    mpath = folder / MANIFEST
    if not mpath.exists():
        raise TraceError(f"{folder}: no {MANIFEST}")
    try:
        obj = read_json(_bytes(mpath))   # deep nesting: an InputError, a ValueError
    except ValueError as e:
        raise TraceError(f"{mpath}: unreadable manifest (not JSON: {e})") from None
    schema = obj.get("schema") if isinstance(obj, dict) else None
    try:
        if schema == SCHEMA:
            return read(Manifest, obj), 2
        if schema == upgrade.SCHEMA_V1:
            return upgrade.manifest(obj), 1
    except F.Bad as e:
        raise TraceError(f"{mpath}: {e}") from None
    raise TraceError(f"{mpath}: not a perfmlp trace (schema {F.shown(schema if schema is not None else F.MISSING)})")


def _lines(path: Path, problems: list) -> list[tuple[int, str]]:
    """(line number, text) of a rank file's non-empty lines; a cut-off last line is left out and noted."""
    text = _bytes(path).decode("utf-8", errors="replace")
    out = [(i, s) for i, s in enumerate(text.split("\n"), 1) if s.strip()]
    if out and not text.endswith("\n"):
        i, last = out[-1]
        try:
            read_json(last)
        except ValueError:
            out.pop()
            problems.append(f"{path}:{i}: truncated last line (the run was cut off)")
    return out


def _rank_records(path: Path, batches_path: Path | None, fmt: int, problems: list) -> list:
    lines = _lines(path, problems)
    if fmt == 1:
        return upgrade.rank_records(lines, str(path))
    recs = []
    for i, text in lines:
        try:
            recs.append((parse(text), f"{path}:{i}"))
        except F.Bad as e:
            raise TraceError(f"{path}:{i}: {e}") from None
    header = recs[0][0] if recs else None
    if not isinstance(header, Header):
        raise TraceError(f"{path}:1: kind: the first line is not the header")
    shapes = {r.id: r for r, _ in recs if isinstance(r, Shape)}
    if batches_path is not None:
        recs += decode_batches(_bytes(batches_path), batches_path, shapes, header, problems)
    return recs


def read_run(folder: str | Path) -> Run:
    folder = Path(folder)
    manifest, fmt = read_manifest(folder)
    problems: list = []
    try:
        files = rank_files(folder)
        bfiles = rank_files(folder, ".batches")
    except ValueError as e:
        raise TraceError(str(e)) from None
    for rank, p in {**files, **bfiles}.items():
        if rank >= manifest.procs:
            raise TraceError(f"{p}: rank {rank}, but the run had {manifest.procs} process(es)")
    for rank in sorted(set(bfiles) - set(files)):   # the first, if any
        raise TraceError(f"{bfiles[rank]}: no rank-{rank}.jsonl beside it")
    ranks = {}
    for rank, p in files.items():
        recs = _rank_records(p, bfiles.get(rank), fmt, problems)
        header = next((r for r, _ in recs if isinstance(r, Header)), None)
        if header is not None and header.rank != rank:
            raise TraceError(f"{p}:1: rank: {header.rank}, but the file is rank {rank}'s")
        if header is not None and header.size != manifest.procs:
            raise TraceError(f"{p}:1: size: {header.size}, but the run had {manifest.procs} process(es)")
        if fmt == 2 and rank not in bfiles:
            raise TraceError(f"{p}: no rank-{rank}.batches beside it")
        rt = rank_trace(rank, recs, once=manifest.ran is None or manifest.ran.comm != N.PS_ASYNC)
        if fmt == 2 and rt.end is not None and rt.end.batches != len(rt.batches):
            raise TraceError(f"{bfiles[rank]}: {len(rt.batches)} batch records, but its end line says "
                             f"{rt.end.batches}")
        ranks[rank] = rt
    if not ranks:
        raise TraceError(f"{folder}: no rank-<r>.jsonl files")
    if manifest.ran is None and any(rt.batches for rt in ranks.values()):
        raise TraceError(f"{folder / MANIFEST}: ran: missing, but batches were recorded")
    if fmt == 1:
        first = next((rt.batches[0] for _, rt in sorted(ranks.items()) if rt.batches), None)
        manifest = upgrade.with_launch(manifest, first)
    ranks = {rank: _with_mem_bytes(rt, manifest) for rank, rt in ranks.items()}
    missing = sorted(set(range(manifest.procs)) - set(ranks))
    if missing:
        problems.append(f"{folder}: rank file(s) missing for rank {', '.join(map(str, missing))}")
    return Run(manifest.run_id, manifest, ranks, str(folder), tuple(problems))


def _with_mem_bytes(rt: RankTrace, m: Manifest) -> RankTrace:
    """The rank's Shapes (and its batches') with mem_bytes, filled where an older run lacks them."""
    if all(s.mem_bytes is not None for s in rt.shapes.values()):
        return rt
    shapes = {i: upgrade.with_mem_bytes(s, m) for i, s in rt.shapes.items()}
    batches = tuple(dataclasses.replace(b, shape=shapes.get(b.shape.id, b.shape)) for b in rt.batches)
    return dataclasses.replace(rt, shapes=MappingProxyType(shapes), batches=batches)


def read_traces(folder: str | Path) -> tuple[list[Run], list[str]]:
    """Every run under `folder` (any depth), and one line per skipped thing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError(f"{folder}: no such folder")
    runs, skipped = [], []
    dirs = sorted({p.parent for pattern in (MANIFEST, "rank-*.jsonl", "rank-*.jsonl" + PACKED)
                   for p in folder.rglob(pattern)})
    for d in dirs:
        try:
            run = read_run(d)
        except TraceError as e:
            skipped.append(str(e))
            continue
        skipped.extend(run.problems)
        # ps-async: no batch on rank 0, its updates instead
        if not run.steady_batches() and not any(rt.updates for rt in run.ranks.values()):
            skipped.append(f"{d}: no finished batch past the warm-up; not reported")
            continue
        runs.append(run)
    return runs, skipped
