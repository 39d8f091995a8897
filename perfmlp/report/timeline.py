"""Where each microsecond of a batch went, on every rank: the report's
analyses of the GPU activity records (`--trace-level timeline|kernels`,
trace/activity.py), its figures and its section.

Every time is a length of a union of intervals, never a sum of records that
may overlap (two streams, a copy under a kernel). Per batch and rank:
- busy: the union of all records, split with compute first, then
  communication not under compute (exposed communication), then copies
  under neither; a whole CUDA-graph launch (`timeline` level) counts as
  compute, as its kernels are not seen one by one;
- idle: the batch's GPU span less busy, each gap named by what the host was
  doing meanwhile (its phase times on the CUPTI clock): a collective
  (waiting for the other ranks), a copy phase (waiting for copies), else
  waiting for the host to launch (launch gaps);
- per collective, across ranks on the run's one time axis: when each rank's
  communication started, the last arrival, each rank's wait for it, the
  transfer after it, and which rank was last;
- the batch's critical path across ranks and, for each segment on it, the
  most its removal could gain (the ceiling: the other ranks still arrive).
Pure functions of records (tested with synthetic records on the CPU).
"""
from __future__ import annotations

import pstats
import statistics
from pathlib import Path

from ..trace.activity import own_kernel_names, to_run_s
from ..trace.reader import Run
from .sections import Figure, Section, Table

COLLECTIVE_PHASES = ("allreduce",)
COPY_PHASES = ("h2d", "d2h", "h2d_grad")
BUSY_PARTS = ("compute", "exposed comm", "copies")
IDLE_PARTS = ("idle: host launch", "idle: copies", "idle: other ranks")
CAT_COLORS = {"compute": "tab:blue", "comm": "tab:purple", "copy": "tab:orange", "graph": "tab:cyan"}
HOST_BOUND_SHARE = 0.10  # a run whose GPU waits for host launches this share of a batch is host-bound


# ---- interval arithmetic -------------------------------------------------------------------

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


def intersect(a, b) -> list[tuple[float, float]]:
    a, b = union(a), union(b)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


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


def clip(intervals, lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


# ---- one batch on one rank -----------------------------------------------------------------

def breakdown(records: list[dict], window: tuple[float, float], host_phases: dict | None = None) -> dict:
    """ms of a batch's GPU window [start, end] (ns) in each part: BUSY_PARTS
    (exclusive, in that priority) and IDLE_PARTS (the idle time while the
    host was in a collective phase, in a copy phase, or else: `host_phases`
    phase -> (start, end) ns on the same clock); the parts add up to the
    window. Also 'comm' (all of it) and 'exposed comm share' (of the window)."""
    lo, hi = window
    by = {c: clip([(r["start_ns"], r["end_ns"]) for r in records if r["cat"] == c], lo, hi)
          for c in ("compute", "comm", "copy", "graph")}
    compute = union(by["compute"] + by["graph"])
    exposed = subtract(by["comm"], compute)
    copies = subtract(by["copy"], compute + by["comm"])
    busy = union(compute + by["comm"] + by["copy"])
    out = {"compute": length(compute) / 1e6, "exposed comm": length(exposed) / 1e6, "copies": length(copies) / 1e6}
    idle = subtract([(lo, hi)], busy)
    waits = {"idle: other ranks": [], "idle: copies": []}
    for phase, span in (host_phases or {}).items():
        if phase in COLLECTIVE_PHASES:
            waits["idle: other ranks"].append(span)
        elif phase in COPY_PHASES:
            waits["idle: copies"].append(span)
    for part, spans in waits.items():
        out[part] = length(intersect(idle, spans)) / 1e6
    out["idle: host launch"] = length(subtract(idle, waits["idle: other ranks"] + waits["idle: copies"])) / 1e6
    out["comm"] = length(by["comm"]) / 1e6
    out["window"] = (hi - lo) / 1e6
    out["exposed comm share"] = out["exposed comm"] / out["window"] if hi > lo else 0.0
    return out


def host_phases_ns(batch: dict, clock: dict | None) -> dict:
    """The host's phase spans of a batch on the CUPTI clock (ns)."""
    if not clock or clock.get("cupti_minus_host_ns") is None:
        return {}
    base = clock["host_start_ns"] + clock["cupti_minus_host_ns"] + batch["t0_s"] * 1e9
    return {p: (base + off * 1e6, base + (off + dur) * 1e6)
            for p, (off, dur) in batch.get("t_ms_host", batch["t_ms"]).items()}


def cross_check(batch: dict, own_kernels=None, library_gemms: bool = True, ranks: int = 2) -> dict:
    """A batch's records against its counters.

    Bytes: memcpy bytes per direction equal bytes_h2d, bytes_d2h and
    bytes_d2d (0 where the batch line has none), to the byte.
    Kernels, per phase (a phase replayed as one graph record at the
    `timeline` level is not counted kernel by kernel):
    - our own kernels (`own_kernels`, default activity.own_kernel_names():
      the records whose name is one of them) equal the kernels the network
      launched less its library GEMM calls, exactly;
    - every library GEMM call (the batch line's `gemms`, when the run's GEMM
      is cuBLAS: `library_gemms`) made at least one library kernel: records
      >= calls, the extra ones the library's own (split-K reductions);
    - with more than one rank, every NCCL collective at least one NCCL
      kernel (one rank's collective may launch none).
    A batch line without `gemms` (traces written before it) cannot split
    its launches: kernels_ok is None there."""
    recs = batch.get("gpu") or []
    got = {k: sum(r["bytes"] for r in recs if r["copy"] == k) for k in ("h2d", "d2h", "d2d")}
    want = {k: batch.get(f"bytes_{k}", 0) for k in got}
    own = frozenset(own_kernel_names() if own_kernels is None else own_kernels)
    graphs = {r["phase"] for r in recs if r["cat"] == "graph"}
    seen_own: dict = {}
    seen_lib: dict = {}
    for r in recs:
        if r["cat"] == "compute":
            d = seen_own if r["name"] in own else seen_lib
            d[r["phase"]] = d.get(r["phase"], 0) + 1
    launched = {p: n for p, n in (batch.get("kernels") or {}).items() if p not in graphs}
    gemms = batch.get("gemms")
    bad: dict = {}
    if gemms is not None:
        for p in sorted(set(launched) | {q for q in seen_own if q not in graphs}):
            calls = gemms.get(p, 0) if library_gemms else 0
            o, lib = seen_own.get(p, 0), seen_lib.get(p, 0)
            if o != launched.get(p, 0) - calls:
                bad[p] = {"own": (o, launched.get(p, 0) - calls)}
            if lib < calls:
                bad.setdefault(p, {})["library"] = (lib, calls)
    nccl = sum(1 for r in recs if r["cat"] == "comm")
    colls = sum(1 for c in batch.get("collectives") or [] if str(c[0]).startswith("nccl"))
    comm_ok = nccl >= colls or ranks < 2
    if not comm_ok:
        bad["nccl"] = {"kernels": (nccl, colls)}
    return {**{k: (got[k], want[k]) for k in got}, "bytes_ok": got == want,
            "kernels_ok": not bad if gemms is not None or bad else None, "kernel_mismatch": bad,
            "library_kernels": sum(seen_lib.values()), "nccl_kernels": nccl, "collectives": colls}


def run_cross_checks(run: Run) -> list[tuple[int, dict]]:
    """(rank, cross_check()) of every steady batch with activity records,
    with the run's own kernel names (its activity line; the source's for
    traces written before it held them), its GEMM and its rank count."""
    lib = run.config.get("gemm", "cublas") == "cublas"
    out = []
    for recs in run.steady_batches().values():
        for r, b in recs.items():
            if b.get("clock") == "cupti":
                own = run.ranks[r].activity.get("own_kernels")
                out.append((r, cross_check(b, own, lib, run.procs)))
    return out


# ---- one batch across ranks ----------------------------------------------------------------

def rank_segments(batch: dict, clock: dict) -> list[tuple[str, float, float]]:
    """A rank's phases of one batch as (phase, start s, end s) on the run's
    time axis: GPU spans where measured on the GPU, else host spans."""
    if batch.get("clock") == "cupti":
        t0 = batch["gpu_t0_ns"]
        return [(p, to_run_s(clock, t0 + off * 1e6, True), to_run_s(clock, t0 + (off + d) * 1e6, True))
                for p, (off, d) in batch["t_ms"].items()]
    base = clock["host_start_ns"] + batch["t0_s"] * 1e9
    return [(p, to_run_s(clock, base + off * 1e6, False), to_run_s(clock, base + (off + d) * 1e6, False))
            for p, (off, d) in batch["t_ms"].items()]


def collective_waits(arrivals: dict[int, tuple[float, float]]) -> dict:
    """arrivals: rank -> (start, end) of its part of one collective (s, one
    time axis). The last rank to arrive, each rank's wait for it, and the
    transfer after it (ms)."""
    last = max(arrivals, key=lambda r: arrivals[r][0])
    t_last = arrivals[last][0]
    return {"last_rank": last, "wait_ms": {r: (t_last - s) * 1e3 for r, (s, _) in arrivals.items()},
            "transfer_ms": {r: max(0.0, e - t_last) * 1e3 for r, (_, e) in arrivals.items()},
            "spread_ms": (t_last - min(s for s, _ in arrivals.values())) * 1e3}


def critical_path(segments: dict[int, list[tuple[str, float, float]]], collective: str = "allreduce") -> list[dict]:
    """The batch's critical path across ranks: the last rank to reach the
    collective, its segments before it, the collective from that arrival,
    then the segments of the rank that finished last; each with the ceiling
    of what removing it could gain (s -> ms). One rank: its segments in order."""
    pre: dict = {}
    coll: dict = {}
    post: dict = {}
    for r, segs in segments.items():
        c = next((s for s in segs if s[0] == collective), None)
        coll[r] = c
        pre[r] = [s for s in segs if c is None or s[2] <= c[1] + 1e-12 and s is not c]
        post[r] = [s for s in segs if c is not None and s[1] >= c[2] - 1e-12 and s is not c]
    out = []
    if all(c is not None for c in coll.values()) and len(segments) > 1:
        last = max(coll, key=lambda r: coll[r][1])
        others = max((coll[r][1] for r in coll if r != last), default=coll[last][1])
        slack = coll[last][1] - others  # how much earlier the last rank could arrive before another is last
        for name, s, e in pre[last]:
            out.append({"segment": name, "rank": last, "ms": (e - s) * 1e3, "gain ceiling ms": min(e - s, slack) * 1e3})
        t_last = coll[last][1]
        end_c = max(coll[r][2] for r in coll)
        out.append({"segment": f"{collective} after the last arrival", "rank": last, "ms": (end_c - t_last) * 1e3,
                    "gain ceiling ms": (end_c - t_last) * 1e3})
        fin = max(post, key=lambda r: post[r][-1][2] if post[r] else end_c)
        ends = sorted((post[r][-1][2] if post[r] else coll[r][2]) for r in post)
        lead = ends[-1] - ends[-2]  # how much earlier the last rank could finish before another is last
        for name, s, e in post[fin]:
            out.append({"segment": name, "rank": fin, "ms": (e - s) * 1e3, "gain ceiling ms": min(e - s, lead) * 1e3})
        return out
    r = max(segments, key=lambda r: max(e for _, _, e in segments[r]))
    for name, s, e in segments[r]:
        out.append({"segment": name, "rank": r, "ms": (e - s) * 1e3, "gain ceiling ms": (e - s) * 1e3})
    return out


# ---- a run ---------------------------------------------------------------------------------

def has_timeline(run: Run) -> bool:
    return any(b.get("clock") == "cupti" for rt in run.ranks.values() for b in rt.batches)


def run_breakdowns(run: Run) -> dict[int, list[dict]]:
    """rank -> one breakdown per steady batch (with epoch and batch)."""
    out: dict = {}
    for key, recs in sorted(run.steady_batches().items()):
        for r, b in recs.items():
            if b.get("clock") != "cupti":
                continue
            t0 = b["gpu_t0_ns"]
            bd = breakdown(b["gpu"], (t0, t0 + b["t_ms_total"] * 1e6), host_phases_ns(b, run.ranks[r].clock))
            out.setdefault(r, []).append({"epoch": key[0], "batch": key[1], **bd})
    return out


def run_collectives(run: Run) -> list[dict]:
    """Per steady batch with a collective on every rank: collective_waits()."""
    rows = []
    for key, recs in sorted(run.steady_batches().items()):
        arr = {}
        for r, b in recs.items():
            clock = run.ranks[r].clock
            if clock is None:
                break
            seg = next((s for s in _comm_span(b, clock)), None)
            if seg is None:
                break
            arr[r] = seg
        if len(arr) == len(recs) and len(arr) > 1:
            rows.append({"epoch": key[0], "batch": key[1], **collective_waits(arr)})
    return rows


def _comm_span(b: dict, clock: dict):
    """(start, end) s of a rank's collective in a batch: its NCCL kernels, else
    the host's allreduce phase (a host MPI collective)."""
    comm = [r for r in b.get("gpu") or [] if r["cat"] == "comm"]
    if comm:
        s, e = min(r["start_ns"] for r in comm), max(r["end_ns"] for r in comm)
        yield to_run_s(clock, s, True), to_run_s(clock, e, True)
        return
    host = b.get("t_ms_host", b["t_ms"])
    if "allreduce" in host:
        off, d = host["allreduce"]
        base = clock["host_start_ns"] + b["t0_s"] * 1e9
        yield to_run_s(clock, base + off * 1e6, False), to_run_s(clock, base + (off + d) * 1e6, False)


def representative(run: Run) -> tuple[int, int] | None:
    """The steady batch whose slowest rank's time is the median one."""
    items = [(max(run.batch_time_ms(b) for b in recs.values()), key)
             for key, recs in run.steady_batches().items() if all(b.get("clock") == "cupti" for b in recs.values())]
    if not items:
        return None
    items.sort()
    return items[len(items) // 2][1]


def _median_rows(per_rank: dict[int, list[dict]]) -> list[dict]:
    rows = []
    for r, bds in sorted(per_rank.items()):
        row = {"rank": r, "batches": len(bds)}
        for k in ("window", *BUSY_PARTS, *IDLE_PARTS, "comm"):
            row[f"{k} ms"] = statistics.median(b[k] for b in bds)
        row["exposed comm share"] = statistics.median(b["exposed comm share"] for b in bds)
        rows.append(row)
    return rows


def host_functions(run: Run, top: int = 10) -> list[dict]:
    """The top functions by own time in the cProfile dumps beside the run."""
    rows = []
    for p in sorted(Path(run.path).glob("rank-*.prof")) if run.path else []:
        st = pstats.Stats(str(p))
        items = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
        rows += [{"profile": p.name, "function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "calls": v[1],
                  "own s": v[2], "cumulative s": v[3]} for k, v in items]
    return rows


def section_timeline(runs) -> list[Section]:
    """One section per run that has GPU activity records (none without)."""
    out = []
    for run in runs:
        if not has_timeline(run):
            continue
        s = Section(f"GPU timeline: {run.run_id}")
        per_rank = run_breakdowns(run)
        rows = _median_rows(per_rank)
        orphans = sum(rt.activity.get("orphans", 0) for rt in run.ranks.values())
        clocks = [rt.clock for rt in run.ranks.values() if rt.clock]
        err_us = max((c.get("rank0_err_ns", 0) + (c.get("cupti_err_ns") or 0)) / 1e3 for c in clocks) if clocks else None
        drift = [(rt.clock_end["cupti_minus_host_ns"] - rt.clock["cupti_minus_host_ns"]) / 1e3
                 for rt in run.ranks.values() if rt.clock_end and rt.clock and rt.clock.get("cupti_minus_host_ns")
                 is not None and rt.clock_end.get("cupti_minus_host_ns") is not None]
        s.paragraphs.append(
            f"CUPTI activity records ({run.manifest.get('trace_level', '?')} level), attributed to batch and phase "
            f"by the external correlation id of the launching call. Medians over {len(next(iter(per_rank.values()), []))} "
            "steady batches of interval unions: busy = compute, then exposed communication (not under compute), then "
            "copies under neither; idle = the rest of the batch's GPU span, named by what the host was doing. "
            f"Ranks on one time axis to within {err_us:.1f} us (ping-pong with rank 0 plus CUPTI-to-host bracket)."
            if err_us is not None else "No clock line: ranks not aligned.")
        if drift:
            s.paragraphs.append(f"CUPTI clock against the host clock over the run: drift {max(map(abs, drift)):.1f} us.")
        if orphans:
            s.paragraphs.append(f"{orphans} records were launched outside any batch (held-out evaluation, setup) "
                                "and are left out.")
        s.tables.append(Table(f"timeline_{run.run_id}", "Where a batch's GPU time went (median ms per rank)", rows))
        coll = run_collectives(run)
        if coll:
            lasts: dict = {}
            for c in coll:
                lasts[c["last_rank"]] = lasts.get(c["last_rank"], 0) + 1
            crow = []
            for r in sorted(run.ranks):
                crow.append({"rank": r, "last to arrive (batches)": lasts.get(r, 0),
                             "median wait for the last rank ms": statistics.median(c["wait_ms"][r] for c in coll),
                             "median transfer after it ms": statistics.median(c["transfer_ms"][r] for c in coll)})
            s.tables.append(Table(f"collectives_{run.run_id}", f"Each allreduce ({len(coll)} batches): waiting for "
                                  "the last rank against the transfer itself", crow))
        rep = representative(run)
        if rep is not None:
            recs = run.steady_batches()[rep]
            segs = {r: rank_segments(b, run.ranks[r].clock) for r, b in recs.items() if run.ranks[r].clock}
            if segs:
                s.tables.append(Table(f"critical_path_{run.run_id}", f"Critical path of batch {rep[1]} (epoch "
                                      f"{rep[0]}, the median one) and the most removing each segment could gain",
                                      critical_path(segs)))
            s.figures.append(Figure(f"timeline_{run.run_id}", f"Batch {rep[1]} of epoch {rep[0]} (the median "
                                    "one): host phases and GPU records of every rank on one time axis",
                                    draw_batch, {"run_batch": _batch_tracks(run, rep)}))
        s.figures.append(Figure(f"breakdown_{run.run_id}", "Where each steady batch's GPU time went, per rank",
                                draw_breakdown, {"per_rank": per_rank}))
        checks = run_cross_checks(run)
        bad_bytes = [r for r, c in checks if not c["bytes_ok"]]
        bad_k = [(r, c["kernel_mismatch"]) for r, c in checks if c["kernels_ok"] is False]
        unchecked = sum(1 for _, c in checks if c["kernels_ok"] is None)
        s.paragraphs.append(
            f"Cross-check over {len(checks)} batch records: memcpy bytes equal the counters in "
            f"{len(checks) - len(bad_bytes)}; kernel records match the launches in "
            f"{len(checks) - len(bad_k) - unchecked} (our own kernels exactly, at least one library kernel per "
            "cuBLAS GEMM call and one NCCL kernel per collective)"
            + (f", {unchecked} not checked (batch lines without `gemms`)" if unchecked else "")
            + (f"; first mismatch, rank {bad_k[0][0]}: phase -> (records, expected) {bad_k[0][1]}" if bad_k else "")
            + ".")
        idle_host = statistics.median(r["idle: host launch ms"] / r["window ms"] for r in rows if r["window ms"])
        if idle_host > HOST_BOUND_SHARE:
            fn = host_functions(run)
            s.paragraphs.append(f"The GPU waits for host launches {100 * idle_host:.0f}% of a batch: host-bound. "
                                + ("The top Python functions by own time (cProfile, --cprofile):" if fn else
                                   "Run with --cprofile to name the host's functions."))
            if fn:
                s.tables.append(Table(f"host_{run.run_id}", "Where the host was (cProfile, own time)", fn))
        out.append(s)
    return out


# ---- figures -------------------------------------------------------------------------------

def _batch_tracks(run: Run, key) -> list[tuple[str, list[tuple[str, str, float, float]]]]:
    """(track label, [(label, colour, start ms, end ms)]) for one batch, every
    rank, on the run's time axis from the batch's earliest start."""
    tracks = []
    for r, b in sorted(run.steady_batches()[key].items()):
        clock = run.ranks[r].clock
        if clock is None:
            continue
        base = clock["host_start_ns"] + b["t0_s"] * 1e9
        host = [(p, "tab:gray", to_run_s(clock, base + o * 1e6, False), to_run_s(clock, base + (o + d) * 1e6, False))
                for p, (o, d) in b.get("t_ms_host", b["t_ms"]).items()]
        gpu = [(g["phase"], CAT_COLORS[g["cat"]], to_run_s(clock, g["start_ns"], True), to_run_s(clock, g["end_ns"], True))
               for g in b.get("gpu") or []]
        tracks += [(f"rank {r} host", host), (f"rank {r} GPU", gpu)]
    t0 = min((s for _, items in tracks for _, _, s, _ in items), default=0.0)
    return [(lab, [(n, c, (s - t0) * 1e3, (e - t0) * 1e3) for n, c, s, e in items]) for lab, items in tracks]


def draw_batch(run_batch):
    from .figures import _plt, encode
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(run_batch) + 1.2))
    for i, (_, items) in enumerate(run_batch):
        for name, colour, s, e in items:
            ax.barh(i, max(e - s, 1e-4), left=s, color=colour, edgecolor="black", linewidth=0.3, height=0.7)
            if e - s > 0.02 * max((x[3] for _, it in run_batch for x in it), default=1.0):
                ax.text((s + e) / 2, i, name, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(run_batch)))
    ax.set_yticklabels([lab for lab, _ in run_batch], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the batch's first start (run time axis)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*CAT_COLORS.values(), "tab:gray")]
    ax.legend(handles, [*CAT_COLORS, "host phase"], fontsize=7, ncol=5, loc="lower right")
    return encode(fig)


def draw_breakdown(per_rank):
    from .figures import _plt, encode
    plt = _plt()
    parts = (*BUSY_PARTS, *IDLE_PARTS)
    colours = ("tab:blue", "tab:purple", "tab:orange", "tab:red", "tab:olive", "tab:gray")
    fig, axes = plt.subplots(len(per_rank), 1, figsize=(9, 2.2 * len(per_rank) + 0.6), squeeze=False)
    for ax, (r, bds) in zip(axes[:, 0], sorted(per_rank.items())):
        x = range(len(bds))
        bottom = [0.0] * len(bds)
        for part, c in zip(parts, colours):
            v = [b[part] for b in bds]
            ax.bar(x, v, bottom=bottom, color=c, width=1.0, label=part)
            bottom = [a + b for a, b in zip(bottom, v)]
        ax.set_ylabel(f"rank {r}: ms", fontsize=8)
    axes[-1, 0].set_xlabel("steady batch")
    axes[0, 0].legend(fontsize=7, ncol=3, loc="upper right")
    return encode(fig)
