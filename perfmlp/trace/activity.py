"""The GPU timeline of a rank: CUPTI activity records collected in-process (`cupti-python`,
imported only when a Collector starts), attributed to the batch and phase that launched them,
and the clocks that put every rank on one time axis. Attribution needs no clocks: the tracer
pushes an external correlation id (`ext_id(seq, phase code)`) around each phase, CUPTI ties the
API calls made meanwhile to it, and each GPU record carries its launching call's correlation id.
CUPTI's thread only turns records into tuples; the join and the writing happen between epochs."""
from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
from importlib import resources

from .. import names as N
from .format import COPY_KINDS

PHASE_BITS = 6  # ext id = seq << PHASE_BITS | phase code (code 0: the batch itself, between phases)
BUFFER_BYTES = 8 << 20  # CUPTI buffers: large enough that a run's records are not dropped
PROFILER_ENV = ("NSYS_PROFILING_SESSION_ID", "NSYS_TARGET_STD_REDIRECT_ACTIVE", "CUDA_INJECTION64_PATH")


def ext_id(seq: int, code: int) -> int:
    return (seq << PHASE_BITS) | code


def profiler_owning_cupti(environ=os.environ) -> str | None:
    """The variable that shows a profiler injected itself into CUDA (and so owns CUPTI), or None."""
    return next((v for v in PROFILER_ENV if environ.get(v)), None)


@functools.cache
def own_kernel_names() -> tuple[str, ...]:
    """The `__global__` functions of perfmlp/gpu's *.cu files; every other kernel of a step is cuBLAS's or NCCL's."""
    gpu = resources.files("perfmlp.gpu")
    src = "\n".join(f.read_text() for f in gpu.iterdir() if f.name.endswith(".cu"))
    return tuple(sorted(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(", src)))


# ---- records -> a rank's timeline (pure) ------------------------------------------------

def classify(kind: str, name: str | None) -> str:
    """A GPU record's category: comm (NCCL kernels, the 16-bit exchange's casts), copy (copies,
    memsets), graph (a whole graph launch), else compute (older traces file the casts as compute)."""
    if kind in ("memcpy", "memset"):
        return "copy"
    if kind == N.GRAPH:       # a whole CUDA-graph launch
        return N.GRAPH
    return "comm" if name and (N.NCCL in name.lower() or name in N.EXCHANGE_KERNELS) else "compute"


def attribute(gpu: list[tuple], ext_of: dict, api_of: dict, batches: dict, phase_names: dict
              ) -> tuple[dict, int]:
    """GPU records -> ({(epoch, batch): [ACTIVITY_FIELDS arrays]}, records no batch launched). `gpu`: (kind, corr,
    start, end, stream, bytes, copy_kind, name) tuples; `ext_of`: correlation id -> external id; `api_of`: correlation
    id -> the launching call's host start (ns); `batches`: seq -> (epoch, batch); `phase_names`: code -> name."""
    out: dict = {}
    orphans = 0
    for kind, corr, start, end, stream, nbytes, ck, name in gpu:
        ext = ext_of.get(corr)
        where = None if ext is None else batches.get(ext >> PHASE_BITS)
        if where is None:
            orphans += 1
            continue
        code = ext & ((1 << PHASE_BITS) - 1)
        rec = [classify(kind, name), phase_names.get(code, "batch"), start, end, stream, nbytes,
               COPY_KINDS.get(ck, "other") if kind == "memcpy" else (kind if kind == "memset" else None),
               name, api_of.get(corr), corr]
        out.setdefault(where, []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r[2])
    return out, orphans


def gpu_phase_spans(records, prev_end_ns: int | None = None, host_only: dict | None = None
                    ) -> tuple[dict, float, int, int]:
    """A batch's phases measured on the GPU, as CUDA events would: each phase runs from the end of the GPU work before
    it (for the first: the previous batch's end `prev_end_ns` where that comes before this batch's first record, else
    that record's start) to its last record's end. `host_only`: phase -> (start, end) CUPTI ns of phases that launched
    nothing (a host allreduce). Returns ({phase: (offset ms, duration ms)}, total ms, start ns, end ns)."""
    ends: dict = {}
    for r in records:
        ends[r.phase] = max(ends.get(r.phase, 0), r.end_ns)
    first = min(r.start_ns for r in records)
    for p, (_, end) in (host_only or {}).items():
        ends.setdefault(p, end)
    order = sorted(ends, key=lambda p: ends[p])
    t0 = prev_end_ns if prev_end_ns is not None and prev_end_ns <= first else first
    spans, cur = {}, t0
    for p in order:
        spans[p] = ((cur - t0) / 1e6, (ends[p] - cur) / 1e6)
        cur = ends[p]
    return spans, (cur - t0) / 1e6, t0, cur


# ---- clocks (pure) ----------------------------------------------------------------------

def clock_offset(samples: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(B - A ns, uncertainty) from samples (a_before, b, a_after): the tightest bracket, at its midpoint."""
    a0, b, a1 = min(samples, key=lambda s: s[2] - s[0])
    return b - (a0 + a1) // 2, (a1 - a0 + 1) // 2


def to_run_s(clock: dict, t_ns: int, cupti: bool) -> float:
    """A rank's timestamp (`cupti`: on CUPTI's clock, else perf_counter_ns) as seconds since rank 0's
    tracer started; `clock`: the rank's Clock record."""
    host = t_ns - clock.cupti_minus_host_ns if cupti else t_ns
    return (host + clock.rank0_minus_host_ns - clock.rank0_start_ns) / 1e9


def measure_rank_clocks(world, rounds: int = 20) -> tuple[int, int]:
    """(rank 0's perf_counter_ns - ours, uncertainty ns) by MPI ping-pong; (0, 0) on rank 0 or alone. A collective."""
    comm = getattr(world, "comm", None)
    if world.size == 1 or comm is None:
        return 0, 0
    world.barrier()
    if world.rank == 0:
        for peer in range(1, world.size):
            for _ in range(rounds):
                comm.recv(source=peer, tag=71)
                comm.send(time.perf_counter_ns(), dest=peer, tag=72)
        return 0, 0
    got = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        comm.send(t0, dest=0, tag=71)
        peer = comm.recv(source=0, tag=72)
        got.append((t0, peer, time.perf_counter_ns()))
    return clock_offset(got)


# ---- collection (GPU) -------------------------------------------------------------------

class CollectorUnavailable(RuntimeError):
    """CUPTI cannot collect here (one line: why)."""


_registered = None  # the Collector CUPTI's buffer callbacks deliver to (registered once per process)


class Collector:
    """CUPTI activity for one rank: `push(ext)` / `pop()` bracket a phase; `drain` returns the records."""

    def __init__(self, level: str):
        global _registered
        who = profiler_owning_cupti()
        if who:
            raise CollectorUnavailable(f"a profiler owns CUPTI ({who} is set)")
        try:
            from cupti import cupti
        except ImportError as e:
            raise CollectorUnavailable(f"cupti-python is not installed ({e})") from None
        self.cupti = cupti
        K = cupti.ActivityKind
        self._k = {int(K.CONCURRENT_KERNEL): "kernel", int(K.MEMCPY): "memcpy", int(K.MEMSET): "memset",
                   int(K.GRAPH_TRACE): "graph"}
        self._k_ext, self._k_rt, self._k_drv = int(K.EXTERNAL_CORRELATION), int(K.RUNTIME), int(K.DRIVER)
        self.kinds = [K.EXTERNAL_CORRELATION, K.RUNTIME, K.DRIVER, K.CONCURRENT_KERNEL, K.MEMCPY, K.MEMSET]
        self.note = None
        self._lock = threading.Lock()
        self._gpu, self._ext, self._api = [], {}, {}  # take() fills them, drain() empties them
        self.enabled = []
        try:
            if _registered is None:
                cupti.activity_register_callbacks(_requested, _completed)
            _registered = self
            for k in self.kinds:
                cupti.activity_enable(k)
                self.enabled.append(k)
            if level == N.TIMELINE:  # a replayed graph: one record, its kernels none
                try:
                    cupti.activity_enable(K.GRAPH_TRACE)
                    self.enabled.append(K.GRAPH_TRACE)
                except Exception as e:
                    self.note = f"GRAPH_TRACE refused ({e}): graph kernels recorded one by one"
        except Exception as e:  # cupti.cuptiError: another subscriber, an unsupported device or driver
            self.stop()
            raise CollectorUnavailable(f"CUPTI refused ({type(e).__name__}: {e})") from None
        kind = cupti.ExternalCorrelationKind.CUSTOM0
        self.push = functools.partial(cupti.activity_push_external_correlation_id, kind)  # push(ext)
        self.pop = functools.partial(cupti.activity_pop_external_correlation_id, kind)    # pop()

    def now_ns(self) -> int:
        return self.cupti.get_timestamp()

    def take(self, activities) -> None:
        """CUPTI's thread: records -> tuples (nothing else happens here)."""
        gpu, ext, api = [], {}, {}
        k, k_ext, k_rt, k_drv = self._k, self._k_ext, self._k_rt, self._k_drv
        for a in activities:
            kind = a.kind
            what = k.get(kind)
            if what is not None:  # (bytes, copy kind, name) by kind
                tail = ((0, 0, a.name) if what == "kernel" else (a.bytes, a.copy_kind, None) if what == "memcpy"
                        else (a.bytes, 0, None) if what == "memset" else (0, 0, f"graph {a.graph_id}"))
                gpu.append((what, a.correlation_id, a.start, a.end, a.stream_id, *tail))
            elif kind == k_ext:
                ext[a.correlation_id] = a.external_id
            elif kind == k_rt or kind == k_drv:
                api[a.correlation_id] = a.start
        with self._lock:
            self._gpu.extend(gpu)
            self._ext.update(ext)
            self._api.update(api)

    def drain(self, batches: dict, phase_names: dict) -> tuple[dict, int]:
        """Flush CUPTI (call it with the device idle) and return attribute()'s records; clears them."""
        self.cupti.activity_flush_all(1)
        with self._lock:
            gpu, ext, api = self._gpu, self._ext, self._api
            self._gpu, self._ext, self._api = [], {}, {}
        return attribute(gpu, ext, api, batches, phase_names)

    def stop(self) -> None:
        for k in self.enabled:
            with contextlib.suppress(Exception):
                self.cupti.activity_disable(k)
        self.enabled = []


def _requested():
    return BUFFER_BYTES, 0


def _completed(activities) -> None:
    c = _registered
    if c is not None:
        c.take(activities)


def collector_or_reason(level: str, nvtx_tool: bool = False) -> tuple[Collector | None, str | None]:
    """A started Collector, or None and why not (`nvtx_tool`: a profiler, which owns CUPTI)."""
    if nvtx_tool:
        return None, "a profiler owns CUPTI (an NVTX tool is attached)"
    try:
        return Collector(level), None
    except CollectorUnavailable as e:
        return None, str(e)


def cupti_clock(now_ns) -> tuple[int, int]:
    """(CUPTI's clock - perf_counter_ns, uncertainty ns), from 20 brackets."""
    return clock_offset([(time.perf_counter_ns(), now_ns(), time.perf_counter_ns()) for _ in range(20)])
