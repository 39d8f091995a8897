"""Where each microsecond of a batch went, on every rank: the analyses of
the GPU activity records (`--trace-level timeline|kernels`,
trace/activity.py), each returning typed results; the report's section
(sections/timeline.py) only puts them into words and figures.

Every time is a length of a union of intervals (intervals.py), never a sum
of records that may overlap (two streams, a copy under a kernel). Per batch
and rank (breakdown):
- busy: the union of all records, split with compute first, then
  communication not under compute (exposed communication), then copies
  under neither; a whole CUDA-graph launch (`timeline` level) counts as
  compute, as its kernels are not seen one by one;
- idle: the batch's GPU span less busy, each gap named by what the host was
  doing meanwhile (its phase times on the CUPTI clock): a collective
  (waiting for the other ranks), a copy phase (waiting for copies), else
  waiting for the host to launch (launch gaps).
Per collective, across ranks on the run's one time axis (collective_waits):
when each rank's communication started, the last arrival, each rank's wait
for it, the transfer after it, and which rank was last. The batch's
critical path across ranks (critical_path) and, for each segment on it, the
most its removal could gain (the ceiling: the other ranks still arrive).
Pure functions of records (tested with synthetic records on the CPU).
"""
from __future__ import annotations

import pstats
import statistics
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..trace.clocks import clock_quality_us, host_phases_ns, host_span_s, rank_segments, to_run_s
from ..trace.reader import Run
from .crosscheck import CrossCheck, run_cross_checks
from .intervals import clip, intersect, length, subtract, union
from .. import names as N
from .thresholds import HOST_BOUND_SHARE

COLLECTIVE_PHASES = ("allreduce",)
COPY_PHASES = ("h2d", "d2h", N.H2D_GRAD)
BUSY_PARTS = ("compute", "exposed comm", "copies")
IDLE_PARTS = ("idle: host launch", "idle: copies", "idle: other ranks")
PARTS = (*BUSY_PARTS, *IDLE_PARTS)


# ---- one batch on one rank -----------------------------------------------------------------

@dataclass(frozen=True)
class Breakdown:
    """ms of a batch's GPU window on one rank in each part (PARTS, in that
    order; they add up to the window), and all of its communication."""
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
        """PARTS -> ms."""
        return dict(zip(PARTS, (self.compute, self.exposed_comm, self.copies, self.idle_host_launch,
                                self.idle_copies, self.idle_other_ranks)))


def breakdown(records, window: tuple[float, float], host_phases: dict | None = None) -> Breakdown:
    """A batch's GPU window [start, end] (ns) split into BUSY_PARTS
    (exclusive, in that priority) and IDLE_PARTS (the idle time while the
    host was in a collective phase, in a copy phase, or else: `host_phases`
    phase -> (start, end) ns on the same clock)."""
    lo, hi = window
    by = {c: clip([(r.start_ns, r.end_ns) for r in records if r.cat == c], lo, hi)
          for c in ("compute", "comm", "copy", "graph")}
    compute = union(by["compute"] + by["graph"])
    exposed = subtract(by["comm"], compute)
    copies = subtract(by["copy"], compute + by["comm"])
    idle = subtract([(lo, hi)], union(compute + by["comm"] + by["copy"]))
    ranks = [span for phase, span in (host_phases or {}).items() if phase in COLLECTIVE_PHASES]
    copying = [span for phase, span in (host_phases or {}).items() if phase in COPY_PHASES]
    return Breakdown(compute=length(compute) / 1e6, exposed_comm=length(exposed) / 1e6,
                     copies=length(copies) / 1e6,
                     idle_host_launch=length(subtract(idle, ranks + copying)) / 1e6,
                     idle_copies=length(intersect(idle, copying)) / 1e6,
                     idle_other_ranks=length(intersect(idle, ranks)) / 1e6,
                     comm=length(by["comm"]) / 1e6, window=(hi - lo) / 1e6)


# ---- one batch across ranks ----------------------------------------------------------------

@dataclass(frozen=True)
class CollectiveWait:
    """One collective across ranks: the last rank to arrive, each rank's
    wait for it and its transfer after it (rank -> ms), and the spread of
    the arrivals (ms)."""
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


def critical_path(segments: dict[int, list[tuple[str, float, float]]],
                  collective: str = "allreduce") -> list[PathSegment]:
    """The batch's critical path across ranks: the last rank to reach the
    collective, its segments before it, the collective from that arrival,
    then the segments of the rank that finished last; each with the ceiling
    of what removing it could gain. One rank (or no collective on some
    rank): the segments of the rank that finished last, in order."""
    coll = {r: next((s for s in segs if s[0] == collective), None) for r, segs in segments.items()}
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
            PathSegment(f"{collective} after the last arrival", last, (end_c - t_last) * 1e3, (end_c - t_last) * 1e3),
            *_segments(post[fin], fin, lead)]


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
    """(start, end) s of a rank's collective in a batch: its NCCL kernels,
    else the host's allreduce phase (a host MPI collective)."""
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
    rows = []
    for key, recs in sorted(run.steady_batches().items()):
        arr = {}
        for r, b in recs.items():
            clock = run.ranks[r].clock
            span = _comm_span(b, clock) if clock is not None else None
            if span is None:
                break
            arr[r] = span
        if len(arr) == len(recs) and len(arr) > 1:
            rows.append(collective_waits(arr, *key))
    return rows


def representative(run: Run) -> tuple[int, int] | None:
    """The steady batch whose slowest rank's time is the median one."""
    items = [(max(run.batch_time_ms(b) for b in recs.values()), key)
             for key, recs in run.steady_batches().items() if all(b.clock == N.CUPTI for b in recs.values())]
    if not items:
        return None
    items.sort()
    return items[len(items) // 2][1]


@dataclass(frozen=True)
class RankMedians:
    """A rank's steady batches: each part's median (the medians need not add
    up to the window's), and the median of the batches' exposed-communication shares."""
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


def top_functions(path: Path, column: int = 2, top: int = 10) -> list[HostFunction]:
    """A cProfile dump's `top` functions by own time (`column` 2) or cumulative time (3)."""
    items = sorted(pstats.Stats(str(path)).stats.items(), key=lambda kv: kv[1][column], reverse=True)[:top]
    return [HostFunction(path.name, f"{Path(k[0]).name}:{k[1]}({k[2]})", v[1], v[2], v[3]) for k, v in items]


def host_functions(run: Run) -> list[HostFunction]:
    """The top functions by own time in the cProfile dumps beside the run."""
    return [f for p in (sorted(Path(run.path).glob("rank-*.prof")) if run.path else []) for f in top_functions(p)]


@dataclass(frozen=True)
class Timeline:
    """A run's GPU timeline, analysed: per rank its steady batches'
    breakdowns and their medians, the collectives' waits, the median
    batch's critical path, the records' cross-checks, the clocks' error and
    drift (us), the records launched outside any batch, and whether the GPU
    waited for host launches more than HOST_BOUND_SHARE of a batch."""
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
