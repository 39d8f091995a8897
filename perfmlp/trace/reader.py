"""The one reader of the trace format (docs/trace-format.md), plus a
constructor from in-memory records for tests.

`read_traces(folder)` reads every run under a folder and returns the runs it
could read and one line per thing it skipped; `read_run(folder)` reads one.
A run whose manifest or rank files lack their end (a killed run) is read
with every finished batch and marked incomplete; a malformed line is
reported by file and line and skipped.

Where a rank wrote GPU activity (`gpu` lines, `--trace-level timeline` or
`kernels`), each of its batches gets `gpu` (the records as dicts), its phases
measured on the GPU from them (`t_ms`, `t_ms_total`, `clock: "cupti"`) and
the host's phase times kept as `t_ms_host`.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .activity import as_dicts, gpu_phase_spans
from .format import (ACTIVITY_SCHEMA, BATCH_KEYS, MANIFEST, PACKED, SCHEMA, WARMUP_BATCHES, rank_files,
                     read_rank_text)
from .updates import KIND as UPDATE, check_update

STEADY_RULE = (f"the first {WARMUP_BATCHES} batches of every epoch are left out (the run's first compiles "
               "kernels, allocates and captures a CUDA graph, the next two still carried one-off costs of up to "
               "40x a steady batch; later epochs start after the held-out evaluation, with the tracer's event "
               "chain restarted), as perfmlp.train's own synchronised steady window does (trace.format."
               "WARMUP_BATCHES), and so are batches some rank did not finish; a run whose epochs hold no other "
               "batch keeps every batch but the run's first")


class TraceError(ValueError):
    """A run folder that cannot be read at all (one-line message)."""


@dataclass
class RankTrace:
    rank: int
    batches: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    end: dict | None = None
    clock: dict | None = None          # the clock line written at the start (activity.to_run_s)
    clock_end: dict | None = None      # and at the end (CUPTI's drift)
    activity: dict = field(default_factory=dict)   # the activity lines, merged (orphans summed)
    gpu: dict = field(default_factory=dict)        # (epoch, batch) -> the gpu line's records
    updates: list[dict] = field(default_factory=list)  # the parameter server's update lines (trace/updates.py)

    def finish(self) -> None:
        """Measure each batch's phases on the GPU from its activity records."""
        if not self.gpu:
            return
        prev = None  # (epoch, batch, GPU end ns) of the batch before
        for b in self.batches:
            recs = self.gpu.get((b["epoch"], b["batch"]))
            if not recs or "gpu" in b:
                prev = None
                continue
            b["gpu"] = recs = as_dicts(recs)
            after = prev[2] if prev and prev[:2] == (b["epoch"], b["batch"] - 1) else None
            spans, total, t0, end = gpu_phase_spans(recs, after, self._host_only(b, recs))
            b["t_ms_host"], b["t_ms"], b["t_ms_total"], b["clock"] = b["t_ms"], spans, total, "cupti"
            b["gpu_t0_ns"] = t0  # the batch's GPU start on the CUPTI clock (t_ms's origin)
            prev = (b["epoch"], b["batch"], end)

    def _host_only(self, b: dict, recs: list[dict]) -> dict:
        """Phases that launched nothing on the GPU (a host MPI allreduce), as
        CUPTI-clock spans from the host's phase times."""
        c = self.clock
        if not c or c.get("cupti_minus_host_ns") is None:
            return {}
        on_gpu = {r["phase"] for r in recs}
        base = c["host_start_ns"] + c["cupti_minus_host_ns"] + b["t0_s"] * 1e9
        return {p: (int(base + off * 1e6), int(base + (off + dur) * 1e6))
                for p, (off, dur) in b["t_ms"].items() if p not in on_gpu}


@dataclass
class Run:
    run_id: str
    manifest: dict
    ranks: dict[int, RankTrace]
    path: str = ""
    problems: list[str] = field(default_factory=list)

    # -- what the manifest says ----------------------------------------------------
    @property
    def config(self) -> dict:
        return self.manifest.get("config", {})

    @property
    def procs(self) -> int:
        return int(self.manifest.get("procs", len(self.ranks)))

    @property
    def complete(self) -> bool:
        return (self.manifest.get("status") == "complete" and len(self.ranks) == self.procs
                and all(r.end is not None and r.end.get("status") == "complete" for r in self.ranks.values()))

    @property
    def status(self) -> str:
        return "complete" if self.complete else f"incomplete ({self.manifest.get('status', '?')})"

    @property
    def profiled(self) -> bool:
        """Ran under a profiler (its times include the profiler's cost): the
        manifest says an NVTX tool was attached, or an Nsight Systems export
        sits beside the trace."""
        if self.manifest.get("profiler_attached"):
            return True
        return bool(self.path) and any(p.suffix in (".sqlite", ".nsys-rep") for p in Path(self.path).iterdir())

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        c = self.config
        return (c["input_size"], *c["hidden_sizes"], c["num_classes"])

    @property
    def comm(self) -> str:
        """The gradient exchange that ran, named as `run --comm` names it."""
        if self.manifest.get("comm"):
            return self.manifest["comm"]
        c = self.config.get("comm", "auto")
        if c not in ("auto", "mpi-host"):  # traces made before the manifest said which ran
            return c
        return "mpi-staged" if self.manifest.get("backend") == "cupy" else "mpi"

    @property
    def exec(self) -> str:
        """The execution mode that ran: eager or graph (traces made before
        graph mode existed ran eagerly)."""
        return self.manifest.get("exec") or "eager"

    @property
    def overlap(self) -> bool:
        return bool(self.config.get("overlap", False))

    @property
    def gpu(self) -> str | None:
        nodes = (self.manifest.get("machine") or {}).get("nodes") or {}
        names = {n.get("gpu") for n in nodes.values() if n.get("gpu")}
        return sorted(names)[0] if names else None

    # -- per batch ---------------------------------------------------------------------
    def steady_batches(self) -> dict[tuple[int, int], dict[int, dict]]:
        """(epoch, batch) -> {rank: record} of the steady batches (STEADY_RULE)."""
        every: dict = {}
        for r, rt in self.ranks.items():
            for b in rt.batches:
                every.setdefault((b["epoch"], b["batch"]), {})[r] = b
        done = {k: v for k, v in every.items() if len(v) == len(self.ranks)}
        steady = {k: v for k, v in done.items() if k[1] >= WARMUP_BATCHES}
        if steady:
            return steady
        return {k: v for k, v in done.items() if k != (0, 0)}

    def batch_time_ms(self, rec: dict) -> float:
        """A batch's time: on the GPU (CUDA events or CUPTI records) where the
        trace has it. On the host clock a GPU run's batch time is the host's
        enqueue time, not the GPU's (nothing waits for the device each batch):
        there the epoch's synchronised steady time per batch stands in for
        each of its batches. Traces written before the epoch line had it
        keep the host time (their whole-epoch time includes the first
        batch's warm-up, so it cannot stand in)."""
        t = rec.get("t_ms_total")
        if t:
            return t
        if rec.get("clock") == "host" and self.on_gpu:
            ep = self._epoch_ms.get(rec["epoch"])
            if ep:
                return ep
        return rec["wall_ms"]

    @property
    def on_gpu(self) -> bool:
        return self.config.get("backend") == "cupy" or bool(self.gpu)

    @property
    def phase_clock(self) -> str:
        """The clock of the steady batches' phase times: cupti, cuda-events,
        or host (older traces, without the key: host)."""
        clocks = [rec.get("clock", "host") for recs in self.steady_batches().values() for rec in recs.values()]
        return max(set(clocks), key=clocks.count) if clocks else "host"

    @property
    def host_enqueue_times(self) -> bool:
        """A GPU run some of whose steady batch times are the host's enqueue
        times: host-clock batch lines and no synchronised steady time on
        their epoch's line to stand in (traces written before the epoch line
        carried it). Its time per batch measures the host, not the GPU."""
        if not self.on_gpu:
            return False
        return any(not rec.get("t_ms_total") and rec.get("clock") == "host" and not self._epoch_ms.get(rec["epoch"])
                   for recs in self.steady_batches().values() for rec in recs.values())

    @property
    def _epoch_ms(self) -> dict[int, float]:
        """epoch -> its synchronised steady ms per batch, the slowest rank's."""
        if "_epoch_ms_cache" in self.__dict__:
            return self.__dict__["_epoch_ms_cache"]
        out: dict = {}
        self.__dict__["_epoch_ms_cache"] = out
        for rt in self.ranks.values():
            for e in rt.epochs:
                v = e.get("steady_ms_per_batch")
                if v:
                    out[e["epoch"]] = max(out.get(e["epoch"], 0.0), v)
        return out

    def batch_times_ms(self) -> list[float]:
        """Time per batch of the job: the slowest rank's, per steady batch."""
        return [max(self.batch_time_ms(rec) for rec in recs.values()) for recs in self.steady_batches().values()]

    def median_batch_ms(self) -> float | None:
        t = self.batch_times_ms()
        return statistics.median(t) if t else None

    def phase_ms(self, rank: int) -> dict[str, float]:
        """Median duration of each phase on one rank over the steady batches."""
        acc: dict[str, list] = {}
        for recs in self.steady_batches().values():
            for name, (_, dur) in recs[rank]["t_ms"].items():
                acc.setdefault(name, []).append(dur)
        return {k: statistics.median(v) for k, v in acc.items()}

    def counters(self, rank: int) -> dict:
        """FLOPs and bytes of one steady full-size batch on `rank` (the first one)."""
        for recs in self.steady_batches().values():
            rec = recs[rank]
            if rec["samples"] == self.config.get("batch_size"):
                return rec
        return {}

    @classmethod
    def from_records(cls, manifest: dict, ranks: dict[int, list[dict]], run_id: str | None = None) -> "Run":
        """A Run from in-memory records (the lines a run would write)."""
        rts = {}
        for r, recs in ranks.items():
            rt = RankTrace(r)
            for rec in recs:
                _take(rt, rec)
            rt.finish()
            rts[r] = rt
        return cls(run_id or manifest.get("run_id", "run"), manifest, rts)


def _take(rt: RankTrace, rec: dict) -> None:
    kind = rec.get("kind")
    if kind == "batch":
        rt.batches.append(rec)
    elif kind == "epoch":
        rt.epochs.append(rec)
    elif kind == "end":
        rt.end = rec
    elif kind == "gpu":
        rt.gpu[(rec["epoch"], rec["batch"])] = rec["records"]
    elif kind == "clock":
        if rec.get("at") == "end":
            rt.clock_end = rec
        else:
            rt.clock = rec
    elif kind == UPDATE:
        rt.updates.append(rec)
    elif kind == "activity":
        orphans = rt.activity.get("orphans", 0) + rec.get("orphans", 0)
        rt.activity.update(rec)
        rt.activity["orphans"] = orphans


def parse_line(line: str) -> dict:
    """One line of a rank file as a record, or ValueError saying what is wrong."""
    rec = json.loads(line)
    if not isinstance(rec, dict) or "kind" not in rec:
        raise ValueError("no kind")
    if rec["kind"] == "header" and rec.get("schema") != SCHEMA:
        raise ValueError(f"schema {rec.get('schema')!r}")
    if rec["kind"] == "activity" and rec.get("schema", ACTIVITY_SCHEMA) != ACTIVITY_SCHEMA:
        raise ValueError(f"activity schema {rec.get('schema')!r}")
    if rec["kind"] == UPDATE:
        check_update(rec)
    if rec["kind"] == "batch":
        missing = [k for k in BATCH_KEYS if k not in rec]
        if missing:
            raise ValueError(f"batch line without {missing[0]}")
    return rec


def read_run(folder: str | Path) -> Run:
    folder = Path(folder)
    mpath = folder / MANIFEST
    try:
        manifest = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise TraceError(f"{folder}: no {MANIFEST}") from None
    except (OSError, ValueError) as e:
        raise TraceError(f"{mpath}: unreadable manifest ({e.__class__.__name__})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise TraceError(f"{mpath}: not a perfmlp trace (schema {manifest.get('schema') if isinstance(manifest, dict) else '?'!r})")
    if not isinstance(manifest.get("config"), dict):
        raise TraceError(f"{mpath}: manifest has no configuration")
    run = Run(manifest.get("run_id", folder.name), manifest, {}, str(folder))
    try:
        files = rank_files(folder)
    except ValueError as e:
        raise TraceError(str(e)) from None
    for rank, p in files.items():
        rt = RankTrace(rank)
        try:
            lines = read_rank_text(p).split("\n")
        except (OSError, EOFError) as e:
            raise TraceError(f"{p}: unreadable ({e.__class__.__name__}: {e})") from None
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = parse_line(line)
            except ValueError as e:
                last = i == len(lines) or (i == len(lines) - 1 and not lines[-1])
                what = "truncated last line (the run was cut off)" if last else f"malformed line ({e})"
                run.problems.append(f"{p}:{i}: {what}")
                continue
            _take(rt, rec)
        rt.finish()
        run.ranks[rank] = rt
    if not run.ranks:
        raise TraceError(f"{folder}: no rank-<r>.jsonl files")
    missing = sorted(set(range(run.procs)) - set(run.ranks))
    if missing:
        run.problems.append(f"{folder}: rank file(s) missing for rank {', '.join(map(str, missing))}")
    return run


def read_traces(folder: str | Path) -> tuple[list[Run], list[str]]:
    """Every run under `folder` (any depth), and one line per skipped thing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError(f"{folder}: no such folder")
    runs, skipped = [], []
    dirs = sorted({p.parent for p in folder.rglob(MANIFEST)} | {p.parent for p in folder.rglob("rank-*.jsonl")}
                  | {p.parent for p in folder.rglob("rank-*.jsonl" + PACKED)})
    for d in dirs:
        try:
            run = read_run(d)
        except TraceError as e:
            skipped.append(str(e))
            continue
        skipped.extend(run.problems)
        if not run.steady_batches() and not any(rt.updates for rt in run.ranks.values()):  # ps-async: no batch on rank 0
            skipped.append(f"{d}: no finished batch past the warm-up; not reported")
            continue
        runs.append(run)
    return runs, skipped
