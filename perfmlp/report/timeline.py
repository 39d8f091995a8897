"""Where a batch's GPU time went, on every rank, from the activity records
(`--trace-level timeline|kernels`), as typed results (sections/timeline.py
words and draws them). Pure functions of records, tested on the CPU.

Every time is the length of a union of (start, end) intervals, never a sum
of records that may overlap (two streams, a copy under a kernel). Idle time
is named by the host's phase meanwhile: a collective (waiting for the other
ranks), a copy, else waiting for the host to launch.
"""
from __future__ import annotations

import pstats
import statistics
from collections import Counter
from dataclasses import astuple, dataclass, field, fields, replace
from pathlib import Path

from ..trace.activity import own_kernel_names
from ..trace.clocks import clock_quality_us, host_phases_ns, host_span_s, rank_segments, to_run_s
from ..trace.reader import Run
from .. import names as N
from .thresholds import HOST_BOUND_SHARE

COLLECTIVE_PHASES = (N.ALLREDUCE,)
COPY_PHASES = ("h2d", "d2h", N.H2D_GRAD)
BUSY_PARTS = ("compute", "exposed comm", "copies")
IDLE_PARTS = ("idle: host launch", "idle: copies", "idle: other ranks")
PARTS = (*BUSY_PARTS, *IDLE_PARTS)


# ---- intervals: (start, end) pairs; empty ones (end <= start) are dropped ----------------------

def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same points."""
    out: list[list[float]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals) -> float:
    return sum(e - s for s, e in union(intervals))


def subtract(a, b) -> list[tuple[float, float]]:
    """Points of a not in b."""
    out = []
    b = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def intersect(a, b) -> list[tuple[float, float]]:
    """Points of a in b."""
    return subtract(a, subtract(a, b))


# ---- one batch on one rank -----------------------------------------------------------------

@dataclass(frozen=True)
class Breakdown:
    """ms of a batch's GPU window on one rank in each of PARTS (they add up to the window), and all its comm."""
    compute: float
    exposed_comm: float
    copies: float
    idle_host_launch: float
    idle_copies: float
    idle_other_ranks: float
    comm: float
    window: float
    epoch: int = 0
    batch: int = 0

    @property
    def exposed_comm_share(self) -> float:
        return self.exposed_comm / self.window if self.window > 0 else 0.0

    def parts(self) -> dict[str, float]:
        """PARTS -> ms (the first six fields)."""
        return dict(zip(PARTS, astuple(self)))


def breakdown(records, window: tuple[float, float], host_phases: dict | None = None) -> Breakdown:
    """A batch's GPU window (start, end ns) split into PARTS (`host_phases`: phase -> (start, end) ns)."""
    by = {c: intersect([(r.start_ns, r.end_ns) for r in records if r.cat == c], [window])
          for c in ("compute", "comm", "copy", "graph")}
    compute = union(by["compute"] + by["graph"])
    idle = subtract([window], compute + by["comm"] + by["copy"])
    ranks = [span for phase, span in (host_phases or {}).items() if phase in COLLECTIVE_PHASES]
    copying = [span for phase, span in (host_phases or {}).items() if phase in COPY_PHASES]
    parts = (compute, subtract(by["comm"], compute), subtract(by["copy"], compute + by["comm"]),
             subtract(idle, ranks + copying), intersect(idle, copying), intersect(idle, ranks), by["comm"])
    return Breakdown(*(length(x) / 1e6 for x in parts), window=(window[1] - window[0]) / 1e6)


# ---- one batch across ranks ----------------------------------------------------------------

@dataclass(frozen=True)
class CollectiveWait:
    """One collective: the last rank to arrive, each rank's wait and transfer (rank -> ms), the arrivals' spread."""
    last_rank: int
    wait_ms: dict
    transfer_ms: dict
    spread_ms: float
    epoch: int = 0
    batch: int = 0


@dataclass(frozen=True)
class PathSegment:
    """A segment of the critical path: its length and the most removing it could gain (ms)."""
    segment: str
    rank: int
    ms: float
    gain_ceiling_ms: float


def collective_waits(arrivals: dict[int, tuple[float, float]], epoch: int = 0, batch: int = 0) -> CollectiveWait:
    """arrivals: rank -> (start, end) of its part of one collective (s, one time axis)."""
    last = max(arrivals, key=lambda r: arrivals[r][0])
    t_last = arrivals[last][0]
    return CollectiveWait(last, {r: (t_last - s) * 1e3 for r, (s, _) in arrivals.items()},
                          {r: max(0.0, e - t_last) * 1e3 for r, (_, e) in arrivals.items()},
                          (t_last - min(s for s, _ in arrivals.values())) * 1e3, epoch, batch)


def _segments(items, rank: int, ceiling_s: float | None) -> list[PathSegment]:
    """PathSegments of (name, start s, end s), each gaining at most `ceiling_s` (None: all of it)."""
    return [PathSegment(name, rank, (e - s) * 1e3, (e - s if ceiling_s is None else min(e - s, ceiling_s)) * 1e3)
            for name, s, e in items]


def critical_path(segments: dict[int, list[tuple[str, float, float]]]) -> list[PathSegment]:
    """The batch's critical path: the segments of the last rank to reach the allreduce before it, the
    allreduce from that arrival, then the segments of the rank that finished last, each with the most
    removing it could gain (the others still arrive). One rank, or no allreduce on some: the last rank's."""
    coll = {r: next((s for s in segs if s[0] == N.ALLREDUCE), None) for r, segs in segments.items()}
    if any(c is None for c in coll.values()) or len(segments) < 2:
        r = max(segments, key=lambda r: max(e for _, _, e in segments[r]))
        return _segments(segments[r], r, None)
    pre = {r: [s for s in segs if s[2] <= coll[r][1] + 1e-12 and s is not coll[r]] for r, segs in segments.items()}
    post = {r: [s for s in segs if s[1] >= coll[r][2] - 1e-12 and s is not coll[r]] for r, segs in segments.items()}
    last = max(coll, key=lambda r: coll[r][1])
    t_last = coll[last][1]
    slack = t_last - max(coll[r][1] for r in coll if r != last)  # how much earlier the last could arrive
    end_c = max(c[2] for c in coll.values())
    fin = max(post, key=lambda r: post[r][-1][2] if post[r] else end_c)
    ends = sorted((post[r][-1][2] if post[r] else coll[r][2]) for r in post)
    lead = ends[-1] - ends[-2]  # how much earlier the last rank could finish before another is last
    return [*_segments(pre[last], last, slack),
            PathSegment(f"{N.ALLREDUCE} after the last arrival", last, (end_c - t_last) * 1e3, (end_c - t_last) * 1e3),
            *_segments(post[fin], fin, lead)]


# ---- one batch's records against its counters ------------------------------------------------

COPY_DIRECTIONS = ("h2d", "d2h", "d2d")


@dataclass(frozen=True)
class CrossCheck:
    """One batch's records against its counters: per copy direction (records' bytes, counter), whether
    bytes and kernels agree (kernels None: not checkable), and where not (phase -> what -> (records, expected))."""
    h2d: tuple[int, int]
    d2h: tuple[int, int]
    d2d: tuple[int, int]
    bytes_ok: bool
    kernels_ok: bool | None
    kernel_mismatch: dict = field(default_factory=dict)
    library_kernels: int = 0
    nccl_kernels: int = 0
    collectives: int = 0


def _kernel_mismatch(recs, batch, own: frozenset, library_gemms: bool) -> tuple[dict, int]:
    """(phase -> {"own" | "library": (records, expected)}, library kernel records)."""
    graphs = {r.phase for r in recs if r.cat == N.GRAPH}
    seen_own = Counter(r.phase for r in recs if r.cat == N.COMPUTE and r.name in own)
    seen_lib = Counter(r.phase for r in recs if r.cat == N.COMPUTE and r.name not in own)
    launched = {p: n for p, n in (batch.kernels or {}).items() if p not in graphs}
    gemms = batch.gemms
    bad: dict = {}
    if gemms is not None:
        for p in sorted(set(launched) | {q for q in seen_own if q not in graphs}):
            calls = gemms.get(p, 0) if library_gemms else 0
            o, lib = seen_own.get(p, 0), seen_lib.get(p, 0)
            if o != launched.get(p, 0) - calls:
                bad[p] = {"own": (o, launched.get(p, 0) - calls)}
            if lib < calls:
                bad.setdefault(p, {})["library"] = (lib, calls)
    return bad, sum(seen_lib.values())


def cross_check(batch, own_kernels=None, library_gemms: bool = True, ranks: int = 2) -> CrossCheck:
    """A batch's records against its counters. Bytes: each copy direction's equal the batch line's, exactly.
    Kernels, per phase not replayed as one graph record: our own (`own_kernels`, default
    activity.own_kernel_names()) equal the launches less the library GEMM calls, exactly; each library
    GEMM call (`library_gemms`: the run's GEMM is cuBLAS) made at least one library kernel (split-K adds
    more); with `ranks` >= 2, each NCCL collective at least one NCCL kernel. Without the batch line's
    `gemms` the launches cannot be split: kernels_ok is None."""
    recs = batch.gpu or ()
    got = {k: sum(r.bytes for r in recs if r.copy == k) for k in COPY_DIRECTIONS}
    want = {k: getattr(batch, f"bytes_{k}") for k in COPY_DIRECTIONS}
    own = frozenset(own_kernel_names() if own_kernels is None else own_kernels)
    bad, library = _kernel_mismatch(recs, batch, own, library_gemms)
    nccl = sum(1 for r in recs if r.cat == "comm")
    colls = sum(1 for c in batch.collectives if str(c[0]).startswith(N.NCCL))
    if nccl < colls and ranks >= 2:
        bad[N.NCCL] = {"kernels": (nccl, colls)}
    return CrossCheck(*((got[k], want[k]) for k in COPY_DIRECTIONS), bytes_ok=got == want,
                      kernels_ok=not bad if batch.gemms is not None or bad else None, kernel_mismatch=bad,
                      library_kernels=library, nccl_kernels=nccl, collectives=colls)


def run_cross_checks(run: Run) -> list[tuple[int, CrossCheck]]:
    """(rank, cross_check()) of every steady batch with activity records, with the run's own kernel names."""
    lib = run.config.get("gemm", N.CUBLAS) == N.CUBLAS
    own = {r: rt.activity.own_kernels if rt.activity is not None else None for r, rt in run.ranks.items()}
    return [(r, cross_check(b, own[r], lib, run.procs)) for recs in run.steady_batches().values()
            for r, b in recs.items() if b.clock == N.CUPTI]


# ---- a run ---------------------------------------------------------------------------------

def run_breakdowns(run: Run) -> dict[int, list[Breakdown]]:
    """rank -> one breakdown per steady batch."""
    out: dict = {}
    for key, recs in sorted(run.steady_batches().items()):
        for r, b in recs.items():
            if b.clock != N.CUPTI:
                continue
            t0 = b.gpu_t0_ns
            bd = breakdown(b.gpu, (t0, t0 + b.t_ms_total * 1e6), host_phases_ns(b, run.ranks[r].clock))
            out.setdefault(r, []).append(replace(bd, epoch=key[0], batch=key[1]))
    return out


def _comm_span(b, clock) -> tuple[float, float] | None:
    """(start, end) s of a rank's collective: its NCCL kernels, else the host's allreduce phase."""
    if clock is None:
        return None
    comm = [r for r in b.gpu or () if r.cat == "comm"]
    if comm:
        s, e = min(r.start_ns for r in comm), max(r.end_ns for r in comm)
        return to_run_s(clock, s, True), to_run_s(clock, e, True)
    host = b.t_ms_host or b.t_ms
    if N.ALLREDUCE not in host:
        return None
    return host_span_s(clock, b, *host[N.ALLREDUCE])


def run_collectives(run: Run) -> list[CollectiveWait]:
    """collective_waits() of every steady batch with a collective on every rank (more than one)."""
    arrivals = ((key, {r: _comm_span(b, run.ranks[r].clock) for r, b in recs.items()})
                for key, recs in sorted(run.steady_batches().items()))
    return [collective_waits(arr, *key) for key, arr in arrivals if len(arr) > 1 and None not in arr.values()]


def representative(run: Run) -> tuple[int, int] | None:
    """The steady batch whose slowest rank's time is the median one."""
    items = sorted((max(run.batch_time_ms(b) for b in recs.values()), key)
                   for key, recs in run.steady_batches().items() if all(b.clock == N.CUPTI for b in recs.values()))
    return items[len(items) // 2][1] if items else None


@dataclass(frozen=True)
class RankMedians:
    """A rank's steady batches: each part's median (they need not add up), the median exposed-comm share."""
    rank: int
    batches: int
    median: Breakdown
    exposed_comm_share: float


def rank_medians(rank: int, bds: list[Breakdown]) -> RankMedians:
    med = Breakdown(**{f.name: statistics.median(getattr(b, f.name) for b in bds)
                       for f in fields(Breakdown) if f.name not in ("epoch", "batch")})
    return RankMedians(rank, len(bds), med, statistics.median(b.exposed_comm_share for b in bds))


@dataclass(frozen=True)
class HostFunction:
    """One function of a cProfile dump beside the run, by its own time."""
    profile: str
    function: str
    calls: int
    own_s: float
    cumulative_s: float


def top_functions(path: Path, column: int = 2) -> list[HostFunction]:
    """A cProfile dump's ten functions with the most own time (`column` 2) or cumulative time (3)."""
    items = sorted(pstats.Stats(str(path)).stats.items(), key=lambda kv: kv[1][column], reverse=True)[:10]
    return [HostFunction(path.name, f"{Path(k[0]).name}:{k[1]}({k[2]})", v[1], v[2], v[3]) for k, v in items]


def host_functions(run: Run) -> list[HostFunction]:
    """The top functions by own time in the cProfile dumps beside the run."""
    return [f for p in (sorted(Path(run.path).glob("rank-*.prof")) if run.path else []) for f in top_functions(p)]


@dataclass(frozen=True)
class Timeline:
    """A run's GPU timeline, analysed (clock error and drift in us; `orphans`: records outside any batch)."""
    run_id: str
    trace_level: str
    per_rank: dict[int, list[Breakdown]]
    medians: list[RankMedians]
    collectives: list[CollectiveWait]
    representative: tuple[int, int] | None
    critical_path: list[PathSegment]
    checks: list[tuple[int, CrossCheck]]
    clock_err_us: float | None
    drift_us: float | None
    orphans: int
    host_launch_share: float
    host_functions: list[HostFunction] = field(default_factory=list)

    @property
    def host_bound(self) -> bool:
        return self.host_launch_share > HOST_BOUND_SHARE.value


def analyse_timeline(run: Run) -> Timeline | None:
    """The run's GPU timeline (None without activity records)."""
    if not any(b.clock == N.CUPTI for rt in run.ranks.values() for b in rt.batches):
        return None
    per_rank = run_breakdowns(run)
    medians = [rank_medians(r, bds) for r, bds in sorted(per_rank.items())]
    err, drift = clock_quality_us(run.ranks.values())
    rep = representative(run)
    share = statistics.median(m.median.idle_host_launch / m.median.window for m in medians if m.median.window)
    segs = {r: rank_segments(b, run.ranks[r].clock) for r, b in run.steady_batches()[rep].items()
            if run.ranks[r].clock} if rep is not None else {}
    return Timeline(run.run_id, run.trace_level, per_rank, medians, run_collectives(run), rep,
                    critical_path(segs) if segs else [], run_cross_checks(run), err, drift,
                    sum(rt.activity.orphans for rt in run.ranks.values() if rt.activity), share,
                    host_functions(run) if share > HOST_BOUND_SHARE.value else [])
