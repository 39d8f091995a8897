"""Writing a run's trace (its records: trace/records.py).

Two tracers with one interface, which the training loop calls: `attach(world, backend)` once the
backend is built, `begin_batch`, `phase(Phase.X)` (a context manager), `end_batch(loss, counts)`,
`end_epoch` and `close(status)`. `NullTracer` does nothing; `Tracer` writes the trace.

A batch's cost to the step is trace/fastpath.py's (one record stored into the mapped batch file). Only
the first batch of each piece size records what the network launched, prices it (trace/shapes.py)
and writes its `Shape` line."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import time
from pathlib import Path

from ..errors import PerfmlpError
from ..model.costs import widths
from .. import names as N
from . import activity as act
from .format import ACTIVITY_SCHEMA, default_trace_level
from .manifest import blas_seen, machine_seen, new_manifest, now_iso, versions, what_ran, write_manifest
from .fastpath import (NAN, NOOP, CFastPath, Event, Hooked, Recording, _now, fast_path, nvtx_enabled, nvtx_pop,
                       nvtx_push, phase_code_names, stamp_class)
from .shapes import ShapeBook
from .lines import line
from .records import ACTIVITY_FIELDS, SCHEMA, Activity, Clock, End, Epoch, GpuActivity, GpuRecord, Header, Phase
from .store import BatchFile, LineFile, WrittenBatchFile

_ns = time.perf_counter_ns  # the tracer's start; the batch records' stamps are fastpath._now, the same clock


class NullTracer:
    """No trace: every hook is a no-op (a phase is one C-level look-up, its hooks NOOP: no Python frame)."""

    ops = None
    run_dir = None
    phase = dict.fromkeys(Phase, type("Quiet", (), {"__enter__": NOOP, "__exit__": NOOP})()).__getitem__
    attach = begin_batch = end_batch = end_epoch = record = close = redirect_writes = NOOP  # any arguments


class _NoNet:
    kernels_launched = 0  # a backend without a network that counts its launches


class Tracer(ShapeBook):
    """Writes one rank's trace."""

    def __init__(self, run_dir: Path, rank: int, world, cfg, manifest=None, compiled: bool | None = None):
        self.run_dir, self.rank, self.world, self.cfg = run_dir, rank, world, cfg
        self.manifest = manifest  # rank 0's
        self.widths = widths(cfg.precision)   # the Shape's device-memory bytes
        self.level = cfg.trace_level  # attach() resolves auto
        self.t_start_ns = _ns()
        self._lines = LineFile(run_dir / f"rank-{rank}.jsonl")
        self._store = BatchFile(run_dir / f"rank-{rank}.batches", rank)
        self._count = 0              # batch records written once writes are redirected
        self._entries: list = []     # every Note made (their record sizes, to count the records at the end)
        self._written = None         # a WrittenBatchFile once writes are redirected
        self._header = False
        self.ops = None              # train.py gives it to the network; begin_batch sets the network's per batch
        self._ops: list = []         # what the network launched in a recording batch
        self._ran: list = []         # (phase, first op, end op, kernels) of a recording batch
        self._open = (0, 0)
        self._stamps: list = []      # this batch's phase stamps (host seconds, or CUDA events)
        self._shapes: dict = {}      # samples << 32 | local samples -> Note
        self._note = None            # the batch's Note
        # begin_batch and end_batch: the fast path's (trace/fastpath.py: C where built), which hands any
        # other batch to _begin_other and _end_other; it keeps the batch's ids and stamps, and the offset
        self._fp = fast_path(self._stamps, self._store.mm, self._store.start, self._store.limit,
                             self._begin_other, self._end_other, self._grow, compiled)
        self.begin_batch, self.end_batch = self._fp.begin_batch, self._fp.end_batch
        self.batch_hooks = "c" if CFastPath is not None and isinstance(self._fp, CFastPath) else "python"
        self._net = None
        self._kernels = _NoNet
        self._collector = self._push = None
        self._seq = 0                # batches begun (the external correlation ids' high bits)
        self._seq_batch: dict = {}   # seq -> (epoch, batch), until its GPU records are written
        self._hooks = False
        self._slow = False           # hooks, CUDA events or redirected writes: the general path
        self._batch_no = None
        self._events = None          # the CUDA event pool at the `phases` level on the GPU
        self._last_event = None
        self._pending: list = []
        self._clock: dict = {}
        self._closed = False
        self._phases: dict = {}      # phase -> its hook: the fast ones, or a recording batch's
        self.phase = self._phases.__getitem__   # phase(name): a C-level look-up; the same function all run long
        self._fast = self._recording = None

    # -- the hooks the training loop calls -----------------------------------------
    def attach(self, world, backend) -> None:
        """Resolve the level, write the header and clock lines and (rank 0) what ran to the manifest; a collective."""
        self._net = getattr(backend, "net", None)
        self._kernels = self._net if self._net is not None else _NoNet
        asked, note, why = self.level, None, None
        if self.level == N.AUTO:
            mode = getattr(backend, "exec", None) or N.EAGER
            self.level = default_trace_level(mode)
            why = f"auto: the default for --exec {mode} (names.DEFAULT_TRACE_LEVEL)"
        if backend.name != N.CUPY and self.level in N.ACTIVITY_LEVELS:
            self.level, note = N.PHASES_LEVEL, "no GPU: phases on the host clock"
        elif self.level in N.ACTIVITY_LEVELS:
            self._collector, refused = act.collector_or_reason(self.level, nvtx_enabled())
            if self._collector is None:
                self.level, note = N.PHASES_LEVEL, f"no GPU activity records: {refused}; phases from CUDA events"
            else:
                self._push, note = self._collector.push, self._collector.note
        if backend.name == N.CUPY and self.level == N.PHASES_LEVEL:
            self._cupy, self._rt = backend.xp, backend.xp.cuda.runtime
            self._stream_ptr = backend.xp.cuda.get_current_stream().ptr
            self._events = []
        self._hooks = nvtx_enabled() or self._push is not None
        self._slow = self._hooks or self._events is not None
        self._write_header()
        self._write_clock(world, "start")
        levels = world.allgather((self.level, note))
        machine = machine_seen(world, backend.name)
        blas = world.allgather(blas_seen())
        if self.rank == 0:
            self._record_what_ran(backend, machine, levels, asked, why, blas)
        if self._collector is not None:
            self._write(Activity(schema=ACTIVITY_SCHEMA, level=self.level, fields=ACTIVITY_FIELDS,
                                 own_kernels=act.own_kernel_names()))
        self._make_phases()

    def _record_what_ran(self, backend, machine, levels, asked, why, blas) -> None:
        notes = [f"rank {r}: {n}" for r, (_, n) in enumerate(levels) if n]
        if len(notes) == len(levels) > 1 and len({n for _, n in levels}) == 1:
            notes = [f"every rank: {levels[0][1]}"]
        ran = what_ran(self.cfg, backend, machine, {
            "trace_level": self.level, "trace_level_asked": asked, "trace_level_why": why,
            "trace_level_note": "; ".join(notes[:4]) + (" ..." if len(notes) > 4 else "") if notes else None,
            "trace_levels": tuple(lv for lv, _ in levels) if len({lv for lv, _ in levels}) > 1 else None,
            "batch_hooks": self.batch_hooks}, blas)
        self.manifest = dataclasses.replace(self.manifest, ran=ran, machine=machine, versions=versions(),
                                            mpi_library=self.world.library)
        write_manifest(self.run_dir, self.manifest)

    def _make_phases(self) -> None:
        stamp = stamp_class(self._stamps, compiled=self.batch_hooks == "c")
        fast, rec = {}, {}
        for p in Phase:
            hook = Event(self, p) if self._events is not None else stamp()
            if self._hooks:
                hook = Hooked(self, p, hook)
            fast[p], rec[p] = hook, Recording(self, p, hook)
        self._fast, self._recording = fast, rec
        self._phases.update(fast)

    def _write_header(self) -> None:
        if not self._header:
            self._header = True
            self._write(Header(schema=SCHEMA, rank=self.rank, size=self.world.size, start=now_iso(), pid=os.getpid(),
                               clock=N.CUDA_EVENTS if self._events is not None else N.HOST_CLOCK,
                               host_start_ns=self.t_start_ns))

    def _begin_other(self, epoch: int, batch: int, samples: int, local: int) -> None:
        """begin_batch's general path: a batch the fast path cannot take (a new piece size,
        after a general end, hooks, CUDA events or redirected writes)."""
        note = self._shapes.get(samples << 32 | local)
        if note is None:  # the first batch of this piece size: note what it launches
            note = self._recording_entry(samples, local)
        fp = self._fp
        fp.samples = fp.local = fp.nfast = -1  # this batch's end takes the general path unless set below
        if note is not self._note:
            self._use(note)
        fp.epoch = epoch
        fp.batch = batch
        self._stamps.clear()
        fp.t0 = _now()
        if self._slow:
            self._begin_slow(epoch, batch)
        elif note.coll is not None:  # a priced Shape: this batch's end, and its size's next batches, go fast
            fp.samples, fp.local, fp.nfast = samples, local, note.nstamps

    def _use(self, note) -> None:
        """Make `note` the batch's Note, and the Shape the fast path's records reference."""
        self._note = note
        if note.coll is not None:
            self._fp.set_shape(note.id, note.size, note.bytes, note.coll)

    def _begin_slow(self, epoch: int, batch: int) -> None:
        """The batch's NVTX range and CUPTI correlation id (hooks), and its first CUDA event."""
        if self._hooks:
            self._batch_no = batch
            nvtx_push("batch", batch)
            if self._push is not None:
                self._seq += 1
                self._seq_batch[self._seq] = (epoch, batch)
                self._push(act.ext_id(self._seq, 0))  # launches between phases belong to the batch
        if self._events is not None:
            # the batch starts at the previous one's last event (one event fewer a batch); a new one after an epoch
            self._stamps.append(self._last_event if self._last_event is not None else self._event())

    def _end_other(self, loss, counts) -> None:
        """end_batch's general path: hooks to close, CUDA events, redirected writes, or counts
        its Note does not hold (the next batch then takes begin_batch's general path)."""
        fp = self._fp
        fp.samples = fp.local = fp.nfast = -1
        if self._hooks:
            nvtx_pop()
            if self._push is not None:
                self._collector.pop()
        entry, stamps = self._note, self._stamps
        epoch, batch, t0, t1 = fp.epoch, fp.batch, fp.t0, fp.t1
        if (entry.coll != counts.collectives or len(stamps) != entry.nstamps
                or entry.bytes != counts.byte_counts()):
            entry = self._shape_for(entry, counts)
        loss = NAN if loss is None else loss
        if self._events is None:
            self._write_batch(entry, (entry.id, epoch, batch, loss, t0, t1, -1.0, *stamps, entry.size))
        else:
            # written as a later batch's backward phase starts, when the host waits on the GPU anyway
            self._pending.append((entry, epoch, batch, loss, t0, t1, stamps[:]))
            self._last_event = stamps[-1]

    def _write_batch(self, entry, values) -> None:
        if self._written is not None:
            self._written.append(entry.record, *values)
            self._count += 1
        else:
            fp = self._fp
            end = fp.pos + entry.size
            if end > fp.limit:
                self._grow(end)
            entry.record.pack_into(fp.mm, fp.pos, *values)
            fp.pos = end

    def _grow(self, need: int) -> None:
        """Make the batch file ready for `need` bytes (the fast path calls it too)."""
        self._fp.limit = self._store.ready_to(need)
        self._fp.mm = self._store.mm

    def end_epoch(self, **values) -> None:
        self._drain(block=True)
        self._drain_activity()
        self._last_event = None  # the held-out evaluation runs between epochs
        clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in values.items()}
        self._write(Epoch(**clean))

    def close(self, status: str) -> None:
        """Write what is pending, the end line and (rank 0) the manifest's status; every step is
        tried, and the first failure raised at the end."""
        if self._closed:
            return
        self._closed = True
        first = None
        for what in (lambda: self._drain(block=True),
                     self._drain_activity,
                     self._stop_activity,
                     self._write_header,
                     lambda: self._write(End(status=status, end=now_iso(), batches=self._records())),
                     lambda: self._store.close(self._fp.pos),
                     lambda: self._written.close() if self._written is not None else None,
                     self._lines.close,
                     lambda: self._finish_manifest(status)):
            try:
                what()
            except Exception as e:  # a failed device, a full disk: keep what was written
                first = first or e
        if first is not None:
            raise first

    def _finish_manifest(self, status: str) -> None:
        if self.rank == 0 and self.manifest is not None:
            self.manifest = dataclasses.replace(self.manifest, status=status, end=now_iso())
            write_manifest(self.run_dir, self.manifest)

    def redirect_writes(self, path: str) -> None:
        """From now on, write this rank's records to `path` (fault tests)."""
        self._lines.close()
        self._lines = LineFile(Path(path))
        self._written = WrittenBatchFile(Path(path))
        self._slow = True
        self._fp.samples = self._fp.local = self._fp.nfast = -1

    # -- the GPU side: clocks, CUDA events (read once completed, never by synchronising), CUPTI ----------
    def _write_clock(self, world, at: str) -> None:
        """This rank's host clock against rank 0's (ping-pong, at the start) and CUPTI's."""
        if at == "start":
            off, err = act.measure_rank_clocks(world)
            r0 = world.bcast(self.t_start_ns if self.rank == 0 else None)
            self._clock = {"host_start_ns": self.t_start_ns, "rank0_minus_host_ns": off, "rank0_err_ns": err,
                           "rank0_start_ns": r0}
        cupti = act.cupti_clock(self._collector.now_ns) if self._collector is not None else (None, None)
        self._write(Clock(at=at, **self._clock, cupti_minus_host_ns=cupti[0], cupti_err_ns=cupti[1]))

    def _drain_activity(self) -> None:
        """Write the CUPTI records of every batch begun so far, a `gpu` line per batch."""
        if self._collector is None:
            return
        by_batch, orphans = self._collector.drain(self._seq_batch, phase_code_names())
        self._seq_batch.clear()
        for (epoch, batch), recs in sorted(by_batch.items()):
            self._write(GpuActivity(epoch=epoch, batch=batch, records=tuple(GpuRecord(*r) for r in recs)))
        if orphans:
            self._write(Activity(orphans=orphans))  # records launched outside any batch

    def _stop_activity(self) -> None:
        if self._collector is not None:
            self._write_clock(None, "end")  # the CUPTI clock again: its drift over the run
            self._collector.stop()
            self._collector = self._push = None

    def _event(self):
        ev = self._events.pop() if self._events else self._cupy.cuda.Event()
        self._rt.eventRecord(ev.ptr, self._stream_ptr)
        return ev

    def _drain(self, block: bool) -> None:
        """Write the GPU batches whose events have completed (all if block)."""
        while self._pending:
            entry, epoch, batch, loss, t0, t1, events = self._pending[0]
            last = events[-1]
            if block:
                last.synchronize()
            elif not last.done:
                return
            self._pending.pop(0)
            el, start = self._rt.eventElapsedTime, events[0].ptr
            offs = [0.0] + [el(start, e.ptr) / 1e3 for e in events[1:]]  # s from the batch's first event
            self._write_batch(entry, (entry.id, epoch, batch, loss, t0, t1, offs[-1], *offs[:-1], entry.size))
            # back to the pool, but for the last event: the next batch starts at it
            self._events.extend(events[:-1])

    # -- internals ------------------------------------------------------------------
    def _write(self, rec) -> None:
        self._lines.write(line(rec))

    record = _write  # the hook for a record of an optional kind (trace/updates.py's Update)


def new_run_id(cfg, world) -> str:
    if cfg.run_id:
        return cfg.run_id
    rid = None
    if world.rank == 0:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        h = "x".join(str(h) for h in cfg.hidden_sizes)
        h = h if len(h) <= 64 else f"{len(cfg.hidden_sizes)}layers-{max(cfg.hidden_sizes)}"   # a name under 255
        rid = f"{stamp}-h{h}-b{cfg.batch_size}-p{world.size}-{os.getpid()}"
    return world.bcast(rid)


def make_tracer(cfg, world, compiled: bool | None = None):
    """A Tracer under cfg.trace_dir, or NullTracer with --no-trace; `compiled`: C batch hooks (None: where built)."""
    if not cfg.trace:
        return NullTracer()
    run_id = new_run_id(cfg, world)
    run_dir = Path(cfg.trace_dir) / run_id
    manifest = None
    if world.rank == 0:
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise PerfmlpError(f"trace folder {run_dir} already exists (choose another --run-id)") from None
        except OSError as e:
            raise PerfmlpError(f"cannot create trace folder {run_dir}: {e.strerror}") from None
        manifest = new_manifest(run_id, cfg, world, nvtx_enabled())
        write_manifest(run_dir, manifest)
    world.barrier()
    return Tracer(run_dir, world.rank, world, cfg, manifest, compiled)
