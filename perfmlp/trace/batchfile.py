"""`rank-<r>.batches` (records.BatchLayout) decoded into Batch records, every field checked: a
damaged record ends the reading with one line naming the file, the record and the field."""
from __future__ import annotations

import math
from types import MappingProxyType

from .fields import TraceError
from .records import Batch, BatchLayout, Header, Span


def decode_batches(data: bytes, path, shapes: dict, header: Header, problems: list) -> list:
    """The Batch records of a rank's batch file, each with where it came from, up to the first unwritten."""
    L = BatchLayout
    if len(data) < L.FILE.size:
        raise TraceError(f"{path}: {len(data)} bytes, shorter than its header")
    magic, version, rank = L.FILE.unpack_from(data, 0)
    if magic != L.MAGIC or version != L.VERSION:
        raise TraceError(f"{path}: not a perfmlp batch file (magic {magic!r}, version {version})")
    if rank != header.rank:
        raise TraceError(f"{path}: rank {rank}, but its rank-{header.rank}.jsonl header says {header.rank}")
    out, pos, k = [], L.FILE.size, 0
    while pos + 4 <= len(data):
        shape_id = L.HEAD.unpack_from(data, pos)[0]
        if shape_id == 0:
            break  # the unwritten rest of a killed run's preallocated file
        where = f"{path}: batch record {k} (byte {pos})"
        shape = shapes.get(shape_id)
        if shape is None:
            raise TraceError(f"{where}: shape: {shape_id}, no shape line with that id")
        rec = L.record(len(shape.phases))
        vals = rec.unpack_from(data, pos) if pos + rec.size <= len(data) else None
        if vals is None or vals[-1] != rec.size:
            if not any(data[pos + rec.size:pos + rec.size + 64]):  # the last one: cut off as it was written
                problems.append(f"{where}: cut off as it was written (the run was killed)")
                break
            raise TraceError(f"{where}: size: {vals[-1] if vals else 'past the end'}, not {rec.size}")
        _, epoch, batch, loss, t0, t1, total, *stamps = vals[:-1]
        out.append((_batch(where, shape, header, epoch, batch, loss, t0, t1, total, stamps), where))
        pos += rec.size
        k += 1
    return out


def _batch(where, shape, header, epoch, batch, loss, t0, t1, total, stamps) -> Batch:
    for name, v in (("epoch", epoch), ("batch", batch)):
        if v < 0:
            raise TraceError(f"{where}: {name}: {v}, not an integer >= 0")
    if not t1 >= t0:  # NaN too
        raise TraceError(f"{where}: wall_ms: ends before it starts")
    if math.isinf(loss):
        raise TraceError(f"{where}: loss: {loss}, not a finite number")
    host = header.clock == "host"
    origin = t0 if host else 0.0
    ends = (*stamps[1:], t1 if host else total)
    t_ms: dict = {}
    for p, s, e in zip(shape.phases, stamps, ends):
        if not e >= s:
            raise TraceError(f"{where}: t_ms.{p}: ends before it starts")
        span = Span((s - origin) * 1e3, (e - s) * 1e3)
        prev = t_ms.get(p)  # a phase twice in a batch: from its first start, both durations
        t_ms[p] = span if prev is None else Span(prev.offset_ms, prev.ms + span.ms)
    return Batch(epoch=epoch, batch=batch, shape=shape, t0_s=t0 - header.host_start_ns / 1e9,
                 wall_ms=(t1 - t0) * 1e3, loss=None if loss != loss else loss, clock=header.clock,
                 t_ms=MappingProxyType(t_ms), t_ms_total=None if total < 0 else total * 1e3)
