import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from perfmlp.model.costs import batch_counts, grad_buffer_bytes, pieces
from perfmlp.trace.reader import read_run, read_traces

from conftest import ROOT, run_perfmlp
from synthetic import gpu_records, write_run

TINY = ["--backend", "numpy", "--data", "synthetic", "--input-size", "4", "--hidden-size", "3", "--num-classes", "2",
        "--n-train", "13", "--batch-size", "5", "--epochs", "1", "--learning-rate", "1e-4"]


def test_counters_match_hand_counts(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "tiny")
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "tiny")
    assert run.complete and [b["samples"] for b in run.ranks[0].batches] == [5, 5, 3]
    b0 = run.ranks[0].batches[0]
    # forward, b=5: W1 (3x4) @ X (4x5): 2*3*5*4 = 120; bias+sigmoid 4*3*5 = 60;
    #               W2 (2x3) @ A1 (3x5): 2*2*5*3 = 60; bias 2*5 = 10  -> 250
    assert b0["flops"]["forward"] == 250
    # backward: dW2 2*2*3*5 = 60, db2 2*4 = 8, dA1 2*3*5*2 = 60, sigmoid' 3*3*5 = 45,
    #           dW1 2*3*4*5 = 120, db1 3*4 = 12 -> 305
    assert b0["flops"]["backward"] == 305
    # update: 4 * (12 + 6) + 2 * (3 + 2) = 82
    assert b0["flops"]["update"] == 82
    # gradient buffer: 12 + 3 + 6 + 2 params + 1 loss slot = 24 float32 = 96 bytes, to MPI
    assert b0["bytes_mpi"] == 96 and b0["collectives"] == [["MPI_Allreduce", 24]]
    assert b0["bytes_h2d"] == b0["bytes_d2h"] == 0  # NumPy: nothing crosses PCIe


def test_counters_match_the_model_on_three_ranks(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "p3", procs=3)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "p3")
    assert run.complete and sorted(run.ranks) == [0, 1, 2]
    sizes = (4, 3, 2)
    for rank, rt in run.ranks.items():
        for b in rt.batches:
            local = pieces(b["samples"], 3)[rank]
            assert b["local_samples"] == local
            want = batch_counts(sizes, local, 4, "mpi", "resident")
            for phase in ("forward", "loss", "backward", "update"):
                assert b["flops"][phase] == want.flops[phase], (rank, b["batch"], phase)
            assert b["bytes_mpi"] == grad_buffer_bytes(sizes, 4)


def test_killed_run_is_read_and_marked_incomplete(tmp_path):
    args = [sys.executable, "-m", "perfmlp.run", "--data", "synthetic", "--input-size", "200", "--hidden-size",
            "300", "--n-train", "4000", "--batch-size", "10", "--epochs", "50", "--trace-dir", str(tmp_path),
            "--run-id", "killed"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    f = tmp_path / "killed" / "rank-0.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not f.exists() or f.read_text().count('"kind":"batch"') < 5):
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    run = read_run(tmp_path / "killed")
    assert not run.complete and "incomplete" in run.status
    assert len(run.ranks[0].batches) >= 5
    runs, skipped = read_traces(tmp_path)
    assert [r.run_id for r in runs] == ["killed"]


def test_malformed_lines_are_reported_by_file_and_line(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "m")
    assert r.returncode == 0
    f = tmp_path / "m" / "rank-0.jsonl"
    lines = f.read_text().splitlines()
    lines[2] = "{not json"
    lines.insert(3, '{"kind": "batch", "epoch": 0}')
    f.write_text("\n".join(lines) + "\n")
    run = read_run(tmp_path / "m")
    assert any(p.startswith(f"{f}:3: malformed line") for p in run.problems)
    assert any(p.startswith(f"{f}:4: malformed line (batch line without batch)") for p in run.problems)
    assert len(run.ranks[0].batches) == 2


def test_chrome_export_has_one_event_per_range(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "c")
    assert r.returncode == 0
    out = tmp_path / "c.json"
    r = subprocess.run([sys.executable, "-m", "perfmlp.trace.chrome", str(tmp_path / "c"), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    run = read_run(tmp_path / "c")
    ranges = sum(1 + len(b["t_ms"]) for b in run.ranks[0].batches)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == ranges == 3 * (1 + 6)  # 3 batches, each a batch range and 6 phases (NumPy: no copies)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)


def test_no_trace_writes_nothing(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--no-trace")
    assert r.returncode == 0 and not any(tmp_path.iterdir())


def test_cprofile_writes_rank_profiles(tmp_path):
    import pstats
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "prof", "--cprofile")
    assert r.returncode == 0, r.stderr
    st = pstats.Stats(str(tmp_path / "prof" / "rank-0.prof"))
    assert any(fn[2] == "_train" for fn in st.stats)


def test_nvtx_range_is_free_without_a_profiler():
    from perfmlp.trace.nvtx import enabled, nvtx_range

    @nvtx_range("decorated")
    def f(x):
        return x + 1
    with nvtx_range("forward", payload=3):
        assert f(1) == 2
    assert enabled() is False


def test_a_batch_line_round_trips_through_the_reader():
    from perfmlp.trace.format import BATCH_KEYS
    from perfmlp.trace.reader import parse_line
    from perfmlp.trace.writer import batch_line
    rec = {"epoch": 1, "batch": 7, "samples": 3200, "local_samples": 1600, "t0_s": 0.25, "loss": 2.5,
           "counts": '"flops":{"forward":100,"update":8},"ops":{"forward":4,"update":2}',
           "bytes": (10, 20, 40, 30, 0), "collectives": '[["MPI_Allreduce",24]]', "wall_ms": 1.5,
           "t_ms": [("forward", 0.0, 0.75), ("update", 0.75, 0.25)], "t_ms_total": 1.0, "clock": "cuda-events"}
    line = batch_line(rec)
    assert line.endswith("\n") and line.count("\n") == 1
    back = parse_line(line)
    assert set(BATCH_KEYS) <= set(back)
    assert (back["epoch"], back["batch"], back["samples"], back["local_samples"]) == (1, 7, 3200, 1600)
    assert back["flops"] == {"forward": 100, "update": 8} and back["ops"] == {"forward": 4, "update": 2}
    assert (back["bytes_h2d"], back["bytes_d2h"], back["bytes_d2d"], back["bytes_mpi"], back["bytes_nccl"]) == (
        10, 20, 40, 30, 0)
    assert back["collectives"] == [["MPI_Allreduce", 24]]
    assert back["t_ms"] == {"forward": [0.0, 0.75], "update": [0.75, 0.25]} and back["t_ms_total"] == 1.0
    assert back["loss"] == 2.5 and back["clock"] == "cuda-events"
    with pytest.raises(ValueError, match="without bytes_nccl"):
        parse_line(line.replace('"bytes_nccl"', '"other"'))


def test_chrome_export_to_an_unwritable_path_is_one_line(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "c")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "no-such-folder" / "run.json"
    r = subprocess.run([sys.executable, "-m", "perfmlp.trace.chrome", str(tmp_path / "c"), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.trace.chrome: error: cannot write {out}: No such file or directory"


def test_a_gpu_runs_host_clock_batches_take_the_epochs_synchronised_time():
    """Host-clock batch lines of a GPU run hold the host's enqueue time; the
    epoch's synchronised steady time per batch stands in for them."""
    from perfmlp.trace.reader import Run

    def run(backend, epoch_line, steady=True):
        manifest = {"schema": "perfmlp.trace/1", "run_id": "r", "procs": 2, "status": "complete",
                    "config": {"backend": backend, "batch_size": 100}}
        ranks = {}
        for r in range(2):
            recs = [{"kind": "header", "schema": "perfmlp.trace/1", "rank": r, "pid": 1}]
            for k in range(3):
                recs.append({"kind": "batch", "epoch": 0, "batch": k, "samples": 100, "local_samples": 50,
                             "t0_s": 0.0, "flops": {}, "bytes_h2d": 0, "bytes_d2h": 0, "bytes_mpi": 0,
                             "bytes_nccl": 0, "t_ms": {"forward": [0.0, 0.01]}, "wall_ms": 0.02, "clock": "host"})
            if epoch_line:
                recs.append({"kind": "epoch", "epoch": 0, "seconds": 0.003 + 0.003 * r,
                             **({"steady_ms_per_batch": 0.2 + 0.1 * r} if steady else {})})
            ranks[r] = recs
        return Run.from_records(manifest, ranks)

    assert run("cupy", True).batch_times_ms() == pytest.approx([0.3, 0.3])  # the slowest rank's epoch time
    assert run("cupy", True, steady=False).batch_times_ms() == pytest.approx([0.02, 0.02])  # older: what they hold
    assert run("numpy", True).batch_times_ms() == pytest.approx([0.02, 0.02])  # the CPU's host time is its time
    # the report leaves out of its error figures the GPU runs whose times are still the host's
    assert run("cupy", True, steady=False).host_enqueue_times and run("cupy", False).host_enqueue_times
    assert not run("cupy", True).host_enqueue_times and not run("numpy", False).host_enqueue_times


def test_a_packed_trace_set_reads_and_reports_as_the_plain_one(tmp_path):
    from perfmlp.trace.pack import main as pack
    run_dir = write_run(tmp_path / "set", gpu_records(procs=2, batches=6, run_id="staged-p2"))
    plain = read_run(run_dir)
    report = [sys.executable, "-m", "perfmlp.report", str(tmp_path / "set")]
    r1 = subprocess.run([*report, "--out", str(tmp_path / "r")], capture_output=True, text=True, cwd=ROOT)
    assert r1.returncode == 0, r1.stderr
    md1 = (tmp_path / "r" / "report.md").read_text()
    assert pack([str(tmp_path / "set")]) == 0
    assert not list(run_dir.glob("rank-*.jsonl")) and len(list(run_dir.glob("rank-*.jsonl.gz"))) == 2
    assert pack([str(tmp_path / "set")]) == 0     # again: nothing left to pack, nothing lost
    packed = read_run(run_dir)
    assert sorted(packed.ranks) == sorted(plain.ranks) == [0, 1]
    for rank in plain.ranks:
        assert packed.ranks[rank].batches == plain.ranks[rank].batches
        assert packed.ranks[rank].epochs == plain.ranks[rank].epochs
    assert [run.run_id for run in read_traces(tmp_path / "set")[0]] == [plain.run_id]
    shutil.rmtree(tmp_path / "r")
    r2 = subprocess.run([*report, "--out", str(tmp_path / "r")], capture_output=True, text=True, cwd=ROOT)
    assert r2.returncode == 0, r2.stderr
    assert (tmp_path / "r" / "report.md").read_text() == md1


def test_a_rank_both_packed_and_plain_or_a_damaged_pack_is_one_line(tmp_path):
    from perfmlp.trace.pack import main as pack
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--run-id", "z", procs=2)
    assert r.returncode == 0, r.stderr
    run_dir = tmp_path / "z"
    plain0 = (run_dir / "rank-0.jsonl").read_bytes()
    assert pack([str(run_dir)]) == 0
    (run_dir / "rank-0.jsonl").write_bytes(plain0)      # rank 0 now in both forms
    report = [sys.executable, "-m", "perfmlp.report", str(run_dir), "--out", str(tmp_path / "r")]
    with pytest.raises(Exception, match="both packed and plain"):
        read_run(run_dir)
    (run_dir / "rank-0.jsonl").unlink()
    packed1 = (run_dir / "rank-1.jsonl.gz").read_bytes()
    assert packed1[10:10 + len("rank-1.jsonl\0")] == b"rank-1.jsonl\0"   # gunzip -N restores the right name
    deflate = gzip.compress(b"{}\n" * 100)                  # a 10-byte header, then the deflate data
    for damage in (b"\x1f\x8b\x08\x00 not gzip after all",   # header cut short: EOFError
                   deflate[:10] + b"\xff" * 8 + deflate[18:]):  # invalid deflate block: zlib.error
        (run_dir / "rank-1.jsonl.gz").write_bytes(damage)
        with pytest.raises(Exception, match="rank-1.jsonl.gz: unreadable"):
            read_run(run_dir)
        r = subprocess.run(report, capture_output=True, text=True, cwd=ROOT)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        # the report's way: a line per run it skipped (naming the file), then its one-line error
        lines = r.stderr.strip().splitlines()
        assert "rank-1.jsonl.gz: unreadable" in lines[0] and lines[-1].startswith("perfmlp.report: error")


@pytest.mark.parametrize("n_train, warmup", [(13, 2), (40, 3)])  # 3 and 8 batches of 5
def test_the_epochs_steady_window_leaves_out_the_warm_up_batches(tmp_path, n_train, warmup):
    # trace.format.WARMUP_BATCHES (3) before the synchronised window starts; a 3-batch epoch keeps its last
    from perfmlp.trace.format import WARMUP_BATCHES
    args = [a if a != "13" else str(n_train) for a in TINY]
    r = run_perfmlp(*args, "--trace-dir", str(tmp_path), "--run-id", "w")
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "w")
    (epoch,) = run.ranks[0].epochs
    batches = len(run.ranks[0].batches)
    assert epoch["warmup_batches"] == warmup == min(WARMUP_BATCHES, batches - 1)
    assert 0 < epoch["steady_ms_per_batch"] * (batches - warmup) <= epoch["seconds"] * 1e3
    # the reader: batches 3.. of the epoch; a run with none past them keeps all but its first
    want = list(range(WARMUP_BATCHES, batches)) if batches > WARMUP_BATCHES else list(range(1, batches))
    assert sorted(k[1] for k in run.steady_batches()) == want
