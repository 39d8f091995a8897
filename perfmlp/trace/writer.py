"""Writing a run's trace (its format: perfmlp/trace/format.py).

Two tracers with one interface, which the training loop calls:
`attach(world, backend)` once the backend is built, `begin_batch`,
`phase(name)` (a context manager), `end_batch(loss, counts)`, `end_epoch`
and `close(status)`; `ops` is the list the network records its operations
into (None: nothing is recorded). `NullTracer` does nothing, at the cost of
an attribute lookup per hook; `Tracer` writes the trace.

What is timed depends on `--trace-level` (trace/format.py: TRACE_LEVELS;
`auto`, the default, is resolved in `attach` by the execution mode that
runs: format.default_trace_level):
`counters` times nothing but the batch on the host; `phases` times each
phase with CUDA events on the GPU (read when they have completed, never by
synchronising the device) or a monotonic clock on the CPU; `timeline` and
`kernels` time phases on the host clock and collect CUPTI activity
(trace/activity.py), written as `gpu` lines between epochs, from which the
reader measures the phases on the GPU. FLOPs per
phase are the model package's prices of the operations the network
recorded with their launched shapes; bytes are counted where the copies and
collectives are issued.

Host cost per batch, which an eager step (host-bound) pays in full: a phase
is a dict look-up, two perf_counter() reads and two appends (NVTX and CUPTI
pushes only where attached); a batch line is one %-format per phase list
(FLOPs priced once per distinct list of launched shapes) and one write(2),
no buffer flush.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

from ..errors import PerfmlpError
from ..model.costs import itemsize, op_cost
from . import activity as act
from . import nvtx as nv
from .format import (ACTIVITY_FIELDS, ACTIVITY_LEVELS, ACTIVITY_SCHEMA, MANIFEST, SCHEMA, default_trace_level,
                     rank_file)
from .manifest import finish_manifest, now_iso, record_machine, versions, write_json

# finished batches are written as one of these phases starts (the host is ahead of the GPU)
DRAIN_AT = ("backward", "graph")


class NullTracer:
    """No tracing: every hook is a no-op."""

    run_dir = None
    ops = None  # the network records nothing
    backend = None

    def attach(self, world, backend) -> None:
        self.backend = backend.name

    def phase(self, name: str):
        return contextlib.nullcontext()

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        pass

    def end_batch(self, loss, counts) -> None:
        pass

    def end_epoch(self, **values) -> None:
        pass

    def record(self, rec: dict) -> None:
        pass

    def close(self, status: str) -> None:
        pass

    def redirect_writes(self, path: str) -> None:
        pass


class Tracer:
    """Writes one rank's trace. `phase(name)` times and NVTX-marks a phase."""

    def __init__(self, run_dir: Path, rank: int, world, cfg):
        self.run_dir = run_dir
        self.rank, self.world, self.cfg = rank, world, cfg
        self.backend = None
        self.itemsize = itemsize(cfg.precision)
        self._f = open(run_dir / rank_file(rank), "w")
        self._fd = self._f.fileno()  # batch lines: one write(2) each, no buffer to flush (every other line flushes)
        self._write({"kind": "header", "schema": SCHEMA, "rank": rank, "size": world.size,
                     "start": now_iso(), "pid": os.getpid()})
        self.t_start_ns = time.perf_counter_ns()
        self.t_start = self.t_start_ns / 1e9  # perf_counter() seconds, on the same clock
        self.level = getattr(cfg, "trace_level", "auto")  # attach() resolves auto
        self._collector = None
        self._push = None           # the collector's push(ext id) while it runs, else None
        self._seq = 0               # batches begun (the external correlation ids' high bits)
        self._seq_batch: dict = {}  # seq -> (epoch, batch), until its records are written
        self._codes: dict = {}      # phase name -> code (1, 2, ...) in external correlation ids
        self._net = None
        self._kernels = _NoNet      # what counts kernel launches (the network, when it does)
        self._hooks = False         # NVTX or CUPTI ranges to push and pop at each phase
        self._t0 = 0.0              # the batch's start, perf_counter() seconds
        self._clock: dict = {}
        self.ops: list | None = []
        self._phases: list = []
        self._pending: list = []
        self._phase_ops: list = []
        self._counts_cache: dict = {}
        self._phase_objs = _Phases(self)
        self.phase = self._phase_objs.__getitem__  # phase(name): a dict look-up, no Python call per phase
        self._coll_cache: dict = {}
        self._batch_no = None
        self._last_event = None
        self._events = None
        self._closed = False

    # -- the hooks the training loop calls -----------------------------------------
    def attach(self, world, backend) -> None:
        """Record what the run sees (GPUs, library versions) in the manifest;
        on the GPU, time phases with CUDA events from here on (a pool reused
        batch after batch, recorded and read through the runtime directly, as
        the Event wrappers cost host time on every phase)."""
        self.backend = backend.name
        record_machine(self.run_dir, world, backend)
        self._net = getattr(backend, "net", None)
        self._kernels = self._net if self._net is not None else _NoNet
        asked, note, why = self.level, None, None
        if self.level == "auto":
            mode = getattr(backend, "exec", None) or "eager"
            self.level = default_trace_level(mode)
            why = f"auto: the default for --exec {mode} (trace.format.DEFAULT_TRACE_LEVEL)"
        if backend.name != "cupy" and self.level in ACTIVITY_LEVELS:
            self.level, note = "phases", "no GPU: phases on the host clock"
        elif self.level in ACTIVITY_LEVELS:
            self._collector, refused = act.collector_or_reason(self.level, nv.enabled())
            if self._collector is None:
                self.level, note = "phases", f"no GPU activity records: {refused}; phases from CUDA events"
            else:
                self._push = self._collector.push
                note = self._collector.note
        if backend.name == "cupy" and self.level == "phases":
            cupy = backend.xp
            self._cupy = cupy
            self._rt = cupy.cuda.runtime
            self._stream_ptr = cupy.cuda.get_current_stream().ptr
            self._events = []
        self._hooks = nv.enabled() or self._push is not None
        self._write_clock(world, "start")
        levels = world.allgather((self.level, note))
        if self.rank == 0:
            extra = {"trace_level": self.level, "trace_level_asked": asked}
            if why:
                extra["trace_level_why"] = why
            notes = [f"rank {r}: {n}" for r, (_, n) in enumerate(levels) if n]
            if len(notes) == len(levels) > 1 and len({n for _, n in levels}) == 1:
                notes = [f"every rank: {levels[0][1]}"]
            if notes:
                extra["trace_level_note"] = "; ".join(notes[:4]) + (" ..." if len(notes) > 4 else "")
            if len({lv for lv, _ in levels}) > 1:
                extra["trace_levels"] = [lv for lv, _ in levels]
            _update_manifest(self.run_dir, extra)
        if self._collector is not None:
            self._write({"kind": "activity", "schema": ACTIVITY_SCHEMA, "level": self.level,
                         "fields": list(ACTIVITY_FIELDS), "own_kernels": list(act.own_kernel_names())})

    def _write_clock(self, world, at: str) -> None:
        """A clock line: this rank's host clock against rank 0's (ping-pong
        at the start) and against CUPTI's, so that every record of every
        rank goes on one time axis (activity.to_run_s)."""
        if at == "start":
            off, err = act.measure_rank_clocks(world)
            r0 = world.bcast(self.t_start_ns if self.rank == 0 else None)
            self._clock = {"host_start_ns": self.t_start_ns, "rank0_minus_host_ns": off, "rank0_err_ns": err,
                           "rank0_start_ns": r0}
        line = {"kind": "clock", "at": at, **self._clock}
        if self._collector is not None:
            line["cupti_minus_host_ns"], line["cupti_err_ns"] = act.cupti_clock(self._collector.now_ns)
        self._write(line)

    def begin_batch(self, epoch: int, batch: int, samples: int, local: int) -> None:
        self._t0 = t0 = time.perf_counter()
        self._cur = {"kind": "batch", "epoch": epoch, "batch": batch, "samples": samples,
                     "local_samples": local, "t0_s": t0 - self.t_start}
        self._phases = []
        self._phase_ops = []
        self.ops.clear()  # the network appends to this list (given to it once)
        if self._hooks:
            nv.push("batch", batch)
            if self._push is not None:
                self._seq += 1
                self._seq_batch[self._seq] = (epoch, batch)
                self._push(act.ext_id(self._seq, 0))  # launches between phases belong to the batch
        if self._events is not None:
            # the batch starts where the previous one ended (same point in the
            # stream): one CUDA event fewer per batch; a new one after an epoch
            start = self._last_event if self._last_event is not None else self._event()
            self._cur_events = [start]
        self._batch_no = batch

    def end_batch(self, loss, counts) -> None:
        """`counts`: the batch's trace.format.Counts (read here, not kept)."""
        now = time.perf_counter()
        if self._hooks:
            nv.pop()
            if self._push is not None:
                self._collector.pop()
        rec = self._cur
        rec["loss"] = loss
        rec["counts"] = self._counts_json()
        rec["bytes"] = (counts.bytes_h2d, counts.bytes_d2h, counts.bytes_d2d, counts.bytes_mpi, counts.bytes_nccl)
        rec["collectives"] = self._collectives_json(counts.collectives)
        rec["wall_ms"] = (now - self._t0) * 1e3
        if self._events is None:
            t0 = self._t0
            rec["t_ms"] = [(n, (a - t0) * 1e3, (b - a) * 1e3) for n, a, b in self._phases]
            rec["clock"] = "host"
            self._write_batch(rec)
        else:
            # written later, when the next batch's backward phase starts: the
            # host then waits on the GPU anyway, so the writing costs no time
            self._pending.append((rec, self._cur_events, self._phases))
            self._last_event = self._cur_events[-1]

    def _collectives_json(self, coll: list) -> str:
        key = tuple(coll)
        j = self._coll_cache.get(key)
        if j is None:
            j = self._coll_cache[key] = json.dumps(coll, separators=(",", ":"))
        return j

    def _counts_json(self) -> str:
        """FLOPs and operations per phase as a JSON fragment, priced once per
        distinct list of launched shapes (the model's formulas, cached)."""
        key = (tuple(self.ops), tuple(self._phase_ops))
        frag = self._counts_cache.get(key)
        if frag is None:
            flops: dict = {}
            ops: dict = {}
            kernels: dict = {}
            gemms: dict = {}
            for name, i0, i1, k in self._phase_ops:
                flops[name] = flops.get(name, 0) + sum(op_cost(op, shape, self.itemsize)[0]
                                                       for op, shape in self.ops[i0:i1])
                if i1 > i0:
                    ops[name] = ops.get(name, 0) + i1 - i0
                if k:
                    kernels[name] = kernels.get(name, 0) + k
                g = sum(1 for op, _ in self.ops[i0:i1] if op == "gemm")  # one launch each (a library call on cuBLAS)
                if g:
                    gemms[name] = gemms.get(name, 0) + g
            frag = ('"flops":' + json.dumps(flops, separators=(",", ":")) +
                    ',"ops":' + json.dumps(ops, separators=(",", ":")))
            if self._net is not None:
                frag += (',"kernels":' + json.dumps(kernels, separators=(",", ":")) +
                         ',"gemms":' + json.dumps(gemms, separators=(",", ":")))
            self._counts_cache[key] = frag
        return frag

    def _write_batch(self, rec: dict) -> None:
        os.write(self._fd, batch_line(rec).encode())  # in the kernel's page cache at once: a killed run keeps it

    def end_epoch(self, **values) -> None:
        self._drain(block=True)
        self._drain_activity()
        self._last_event = None  # the held-out evaluation runs between epochs
        self._write({"kind": "epoch", **{k: _jsonable(v) for k, v in values.items()}})

    def record(self, rec: dict) -> None:
        """An optional line of another kind (trace/updates.py's `update`)."""
        self._write(rec)

    def close(self, status: str) -> None:
        """Write what is pending, the end line and (rank 0) the manifest's
        status. Each step is tried even when an earlier one failed; the first
        failure is raised at the end."""
        if self._closed:
            return
        self._closed = True
        first = None
        for what in (lambda: self._drain(block=True),
                     self._drain_activity,
                     self._stop_activity,
                     lambda: self._write({"kind": "end", "status": status, "end": now_iso()}),
                     self._f.close,
                     lambda: finish_manifest(self.run_dir, status) if self.rank == 0 else None):
            try:
                what()
            except Exception as e:  # a failed device, a full disk: keep what was written
                first = first or e
        if first is not None:
            raise first

    def redirect_writes(self, path: str) -> None:
        """From now on, write this rank's lines to `path` (fault tests)."""
        self._f = open(path, "w")
        self._fd = self._f.fileno()

    # -- internals ------------------------------------------------------------------
    def _drain_activity(self) -> None:
        """Write the CUPTI records of every batch begun so far, one `gpu` line
        per batch (between epochs and at the end: the device is idle)."""
        if self._collector is None:
            return
        by_batch, orphans = self._collector.drain(self._seq_batch, {c: p for p, c in self._codes.items()})
        self._seq_batch.clear()
        for (epoch, batch), recs in sorted(by_batch.items()):
            self._f.write(json.dumps({"kind": "gpu", "epoch": epoch, "batch": batch, "records": recs},
                                     separators=(",", ":")) + "\n")
        if orphans:
            self._write({"kind": "activity", "orphans": orphans})  # records launched outside any batch
        self._f.flush()

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
            rec, events, phases = self._pending[0]
            last = events[-1]
            if block:
                last.synchronize()
            elif not last.done:
                return
            self._pending.pop(0)
            el = self._rt.eventElapsedTime
            t0 = events[0].ptr
            offs = [0.0] + [el(t0, e.ptr) for e in events[1:]]
            rec["t_ms"] = [(name, offs[i0], offs[i1] - offs[i0]) for name, i0, i1 in phases]
            rec["t_ms_total"] = offs[-1]
            rec["clock"] = "cuda-events"
            self._write_batch(rec)
            # back to the pool, but for the last event: the next batch starts at it
            # (it goes back with that batch's events, as their first)
            self._events.extend(events[:-1])

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()


class _Phases(dict):
    """Phase name -> its context manager, made on first use (after attach,
    which decides how phases are timed)."""

    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __missing__(self, name: str):
        t = self.tracer
        p = self[name] = (_EventPhase if t._events is not None else _HostPhase)(t, name)
        return p


class _NoNet:
    kernels_launched = 0  # a backend without a network that counts its launches


class _HostPhase:
    """A phase timed on the host clock (the CPU; the GPU at the counters,
    timeline and kernels levels): two perf_counter() reads and two appends;
    the offsets are taken from them at end_batch. Pushes NVTX and CUPTI
    ranges only where a tool or a collector is attached."""

    __slots__ = ("t", "name", "t0", "i0", "k0", "code", "ops", "net")

    def __init__(self, tracer: Tracer, name: str):
        self.t, self.name, self.ops, self.net = tracer, name, tracer.ops, tracer._kernels
        self.code = tracer._codes.setdefault(name, len(tracer._codes) + 1)

    def __enter__(self):
        t = self.t
        if t._hooks:
            nv.push(self.name, t._batch_no)
            if t._push is not None:
                t._push((t._seq << act.PHASE_BITS) | self.code)
        self.i0 = len(self.ops)
        self.k0 = self.net.kernels_launched
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        now = time.perf_counter()
        t = self.t
        t._phases.append((self.name, self.t0, now))
        t._phase_ops.append((self.name, self.i0, len(self.ops), self.net.kernels_launched - self.k0))
        if t._hooks:
            if t._push is not None:
                t._collector.pop()
            nv.pop()
        return False


class _EventPhase:
    """A phase timed on the GPU by the CUDA events recorded between phases
    (the `phases` level on the GPU)."""

    __slots__ = ("t", "name", "e0", "i0", "k0", "ops", "net")

    def __init__(self, tracer: Tracer, name: str):
        self.t, self.name, self.ops, self.net = tracer, name, tracer.ops, tracer._kernels

    def __enter__(self):
        t = self.t
        if t._pending and self.name in DRAIN_AT:
            t._drain(block=False)
        if t._hooks:
            nv.push(self.name, t._batch_no)
        self.i0 = len(self.ops)
        self.k0 = self.net.kernels_launched
        self.e0 = len(t._cur_events) - 1  # this phase starts at the last recorded event
        return self

    def __exit__(self, *exc):
        t = self.t
        t._cur_events.append(t._event())
        t._phases.append((self.name, self.e0, len(t._cur_events) - 1))
        t._phase_ops.append((self.name, self.i0, len(self.ops), self.net.kernels_launched - self.k0))
        if t._hooks:
            nv.pop()
        return False


_LINE_HEAD = ('{"kind":"batch","epoch":%d,"batch":%d,"samples":%d,"local_samples":%d,"t0_s":%.6f,"loss":%s,%s,'
              '"bytes_h2d":%d,"bytes_d2h":%d,"bytes_d2d":%d,"bytes_mpi":%d,"bytes_nccl":%d,"collectives":%s,'
              '"wall_ms":%.6f,"t_ms":{')
_line_formats: dict = {}


def _line_format(phases: tuple, total: bool, clock: str) -> str:
    """The %-format of a batch line with these phases (made once per phase list)."""
    key = (phases, total, clock)
    f = _line_formats.get(key)
    if f is None:
        f = _line_formats[key] = (_LINE_HEAD + ",".join('"%s":[%%.6f,%%.6f]' % n for n in phases) + "}"
                                  + (',"t_ms_total":%.6f' if total else "") + ',"clock":"%s"}\n' % clock)
    return f


def batch_line(rec: dict) -> str:
    """One batch line, composed by hand with one %-format per phase list:
    json.dumps of the whole record costs more host time than the step's
    kernel launches. `rec["counts"]` is the FLOPs/ops JSON fragment,
    `rec["collectives"]` JSON, `rec["t_ms"]` a list of (phase, offset ms,
    duration ms)."""
    t = rec["t_ms"]
    total = "t_ms_total" in rec
    loss = "null" if rec["loss"] is None else repr(float(rec["loss"]))
    vals = [rec["epoch"], rec["batch"], rec["samples"], rec["local_samples"], rec["t0_s"], loss, rec["counts"],
            *rec["bytes"], rec["collectives"], rec["wall_ms"]]
    for p in t:
        vals += p[1:]
    if total:
        vals.append(rec["t_ms_total"])
    return _line_format(tuple([p[0] for p in t]), total, rec["clock"]) % tuple(vals)


def _update_manifest(run_dir: Path, extra: dict) -> None:
    path = run_dir / MANIFEST
    m = json.loads(path.read_text())
    m.update(extra)
    write_json(path, m)


def _jsonable(v):
    if isinstance(v, float) and v != v:
        return None
    return v


def new_run_id(cfg, world) -> str:
    if cfg.run_id:
        return cfg.run_id
    rid = None
    if world.rank == 0:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        h = "x".join(str(h) for h in cfg.hidden_sizes)
        rid = f"{stamp}-h{h}-b{cfg.batch_size}-p{world.size}-{os.getpid()}"
    return world.bcast(rid)


def make_tracer(cfg, world):
    """A Tracer writing under cfg.trace_dir, or the no-op tracer with --no-trace."""
    if not cfg.trace:
        return NullTracer()
    run_id = new_run_id(cfg, world)
    run_dir = Path(cfg.trace_dir) / run_id
    if world.rank == 0:
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise PerfmlpError(f"trace folder {run_dir} already exists (choose another --run-id)") from None
        except OSError as e:
            raise PerfmlpError(f"cannot create trace folder {run_dir}: {e.strerror}") from None
        manifest = {"schema": SCHEMA, "run_id": run_id, "config": cfg.to_dict(), "procs": world.size,
                    "mpi_library": world.library, "start": now_iso(), "end": None, "status": "running",
                    "versions": versions(), "argv": sys.argv,
                    "profiler_attached": nv.enabled(),  # an NVTX tool (Nsight Systems) was attached
                    "trace_level": cfg.trace_level}  # what ran: attach() rewrites it where it had to fall back
        write_json(run_dir / MANIFEST, manifest)
    world.barrier()
    return Tracer(run_dir, world.rank, world, cfg)



