"""The GPU side of a rank's tracer (a mixin of writer.Tracer): its clocks, the CUDA events of the
`phases` level, read once completed (never by synchronising the device), and the CUPTI activity
of `timeline` and `kernels`, written as `gpu` lines between epochs and at the end."""
from __future__ import annotations

from . import activity as act
from . import nvtx as nv
from .phases import phase_code_names
from .records import Activity, Clock, GpuActivity, GpuRecord


class GpuSide:
    def _begin_hooks(self, epoch: int, batch: int) -> None:
        self._batch_no = batch
        nv.push("batch", batch)
        if self._push is not None:
            self._seq += 1
            self._seq_batch[self._seq] = (epoch, batch)
            self._push(act.ext_id(self._seq, 0))  # launches between phases belong to the batch

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
