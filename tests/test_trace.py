"""The trace (format 2): what a run writes, read back as records; damaged
traces end in one line naming the file, line and field (exit 2); format-1
traces read through the upgrader; the Chrome export is what Perfetto
imports whole."""
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
from perfmlp.report.__main__ import main as report_main
from perfmlp.trace.chrome import main as chrome_main
from perfmlp.trace.reader import TraceError, read_run, read_traces

from conftest import ROOT, built_once, in_process, run_perfmlp

TINY = ["--backend", "numpy", "--data", "synthetic", "--input-size", "4", "--hidden-size", "3", "--num-classes", "2",
        "--n-train", "13", "--batch-size", "5", "--epochs", "1", "--learning-rate", "1e-4"]
FORMAT1 = ROOT / "tests" / "data" / "format1" / "format1-p2"


def tiny_run(tmp_path, run_id="t", *extra, procs=None):
    r = run_perfmlp(*TINY, *extra, "--trace-dir", str(tmp_path), "--run-id", run_id, procs=procs)
    assert r.returncode == 0, r.stderr
    return tmp_path / run_id


@pytest.fixture(scope="session")
def one_rank(request, tmp_path_factory):
    """A tiny run on one process, made once (conftest's `built_once`) for the tests that read it or change a copy."""
    return built_once(request, tmp_path_factory, "one-rank", tiny_run) / "t"


@pytest.fixture(scope="session")
def two_ranks(request, tmp_path_factory):
    """A tiny run on two ranks, made once for the tests that read it or change a copy of it."""
    return built_once(request, tmp_path_factory, "two-ranks", lambda d: tiny_run(d, "z", procs=2)) / "z"


@pytest.fixture(scope="session")
def three_ranks(request, tmp_path_factory):
    """A tiny run on three ranks, made once for the tests that read it."""
    return built_once(request, tmp_path_factory, "three-ranks", lambda d: tiny_run(d, "p3", procs=3)) / "p3"


def copy_run(run_dir, where):
    """A copy of the run folder `run_dir` in the folder `where`, for a test to change."""
    return shutil.copytree(run_dir, where / run_dir.name)


def test_counters_match_hand_counts(one_rank):
    run = read_run(one_rank)
    assert run.complete and [b.samples for b in run.ranks[0].batches] == [5, 5, 3]
    b0 = run.ranks[0].batches[0]
    # forward, b=5: W1 (3x4) @ X (4x5): 2*3*5*4 = 120; bias+sigmoid 4*3*5 = 60;
    #               W2 (2x3) @ A1 (3x5): 2*2*5*3 = 60; bias 2*5 = 10  -> 250
    assert b0.flops["forward"] == 250
    # backward: dW2 2*2*3*5 = 60, db2 2*4 = 8, dA1 2*3*5*2 = 60, sigmoid' 3*3*5 = 45,
    #           dW1 2*3*4*5 = 120, db1 3*4 = 12 -> 305
    assert b0.flops["backward"] == 305
    # update: 4 * (12 + 6) + 2 * (3 + 2) = 82
    assert b0.flops["update"] == 82
    # gradient buffer: 12 + 3 + 6 + 2 params + 1 loss slot = 24 float32 = 96 bytes, to MPI
    assert b0.bytes_mpi == 96 and b0.collectives == (("MPI_Allreduce", 24),)
    assert b0.bytes_h2d == b0.bytes_d2h == 0  # NumPy: nothing crosses PCIe
    # the launch shapes as launched: the first GEMM is W1 (3x4) @ X (4x5)
    assert b0.shape.launches["forward"][0] == ("gemm", (3, 5, 4))
    # one shape per piece size, referenced by every batch of that size
    shapes = run.ranks[0].shapes
    assert sorted(s.local_samples for s in shapes.values()) == [3, 5]
    assert run.ranks[0].batches[0].shape is run.ranks[0].batches[1].shape


def test_counters_match_the_model_on_three_ranks(three_ranks):
    run = read_run(three_ranks)
    assert run.complete and sorted(run.ranks) == [0, 1, 2]
    sizes = (4, 3, 2)
    for rank, rt in run.ranks.items():
        for b in rt.batches:
            local = pieces(b.samples, 3)[rank]
            assert b.local_samples == local
            want = batch_counts(sizes, local, 4, "mpi", "resident")
            for phase in ("forward", "loss", "backward", "update"):
                assert b.flops[phase] == want.flops[phase], (rank, b.batch, phase)
            assert b.bytes_mpi == grad_buffer_bytes(sizes, 4)


def test_what_ran_is_in_the_manifest(one_rank):
    run = read_run(one_rank)
    ran = run.manifest.ran
    assert (ran.backend, ran.comm, ran.exec, ran.parallel, ran.trace_level) == ("numpy", "mpi", "eager", "data",
                                                                                "counters")
    assert ran.trace_level_asked == "auto" and ran.output_grad_cols >= 1 and ran.fuse_output
    assert (run.comm, run.exec, run.trace_level, run.on_gpu) == ("mpi", "eager", "counters", False)


def _batches_read(folder):
    try:
        return len(read_run(folder).ranks[0].batches)
    except (TraceError, KeyError):
        return 0


def test_killed_run_keeps_every_finished_batch(tmp_path):
    # SIGKILL: no handler runs, no file is closed; the batch records are in the mapped file's pages
    args = [sys.executable, "-m", "perfmlp.run", "--data", "synthetic", "--input-size", "200", "--hidden-size",
            "300", "--n-train", "4000", "--batch-size", "10", "--epochs", "50", "--trace-dir", str(tmp_path),
            "--run-id", "killed"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _batches_read(tmp_path / "killed") < 5:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    run = read_run(tmp_path / "killed")
    assert not run.complete and "incomplete" in run.status
    kept = [b.batch for b in run.ranks[0].batches]
    assert len(kept) >= 5 and kept == list(range(len(kept)))
    assert (tmp_path / "killed" / "rank-0.batches").stat().st_size > 16  # the preallocated file, not cut yet
    runs, skipped = read_traces(tmp_path)
    assert [r.run_id for r in runs] == ["killed"]


def test_a_batch_cut_off_as_it_was_written_is_left_out_and_noted(tmp_path, one_rank):
    folder = copy_run(one_rank, tmp_path)
    path = folder / "rank-0.batches"
    data = bytearray(path.read_bytes())
    data[-4:] = b"\0\0\0\0"  # the last record's size, stored last: not there yet
    path.write_bytes(bytes(data) + b"\0" * 4096)  # and the preallocated rest
    (folder / "rank-0.jsonl").write_text("\n".join(
        line for line in (folder / "rank-0.jsonl").read_text().splitlines() if '"kind":"end"' not in line) + "\n")
    run = read_run(folder)
    assert [b.batch for b in run.ranks[0].batches] == [0, 1]
    assert any("cut off as it was written" in p for p in run.problems)


def _driven_run(tmp_path, monkeypatch, plan):
    """A Tracer driven by hand on a clock that reads 1.0, 2.0, ... s: `plan`
    is (piece size, phases, MPI bytes) per batch; odd batches have a loss.
    Returns the run read back, the batches end_batch's general path took
    and the tracer."""
    from itertools import count
    from perfmlp.trace import fastpath as fastpath_mod, writer as writer_mod
    from synthetic import drive_tracer
    ticks = count(1.0)
    for mod in (writer_mod, fastpath_mod):
        monkeypatch.setattr(mod, "_now", lambda: next(ticks))
    general, end_other = [], writer_mod.Tracer._end_other
    monkeypatch.setattr(writer_mod.Tracer, "_end_other", lambda t, *a: general.append(t._fp.batch) or end_other(t, *a))
    tracer = drive_tracer(tmp_path, "driven", plan, compiled=False)  # the Python batch hooks read the clock above
    return read_run(tmp_path / "driven"), general, tracer


def test_every_batch_reads_back_as_stamped_through_size_count_and_phase_changes(tmp_path, monkeypatch):
    from perfmlp.trace.records import Phase as P
    four, two = (P.H2D, P.FORWARD, P.BACKWARD, P.UPDATE), (P.FORWARD, P.UPDATE)
    plan = [(4, four, 96), (4, four, 96), (4, four, 96),   # the size's first batch is priced, then the fast path
            (2, four, 96), (4, four, 96),                  # another size, and back
            (4, four, 104),                                # other counts: a Shape of their own
            (4, two, 96),                                  # other phases: a Shape without phases
            (4, four, 96), (4, four, 96)]                  # priced again, then the fast path
    run, general, _ = _driven_run(tmp_path, monkeypatch, plan)
    assert general == [0, 3, 5, 6, 7]  # the rest took the fast path
    batches = run.ranks[0].batches
    assert [(b.batch, b.samples, b.bytes_mpi) for b in batches] == [(k, s, n) for k, (s, _, n) in enumerate(plan)]
    assert [b.loss for b in batches] == [None if k % 2 == 0 else k / 2 for k in range(len(plan))]
    # one clock read at the start, one per phase, one at the end, 1 s apart:
    # phase i starts i s after the batch, and every phase lasts 1 s
    for b, (_, phases, _) in zip(batches, plan):
        assert b.wall_ms == (len(phases) + 1) * 1e3
        want = {} if phases == two else {p: (i * 1e3, 1e3) for i, p in enumerate(phases, 1)}
        assert {p: tuple(s) for p, s in b.t_ms.items()} == want
    shape = [b.shape.id for b in batches]
    assert shape[0] == shape[1] == shape[2] == shape[4] and len(set(shape)) == 5  # 4, 2, 104 B, no phases, 4 again
    assert shape[7] == shape[8] and batches[7].shape.phases == four and batches[6].shape.phases == ()


@pytest.mark.parametrize("advice", [23, -1])  # MADV_POPULATE_WRITE; -1: a kernel without it
def test_batches_past_the_faulted_in_pages_and_the_first_reservation_read_back(tmp_path, monkeypatch, advice):
    from perfmlp.trace import store
    from perfmlp.trace.records import Phase as P
    monkeypatch.setattr(store, "FIRST_BYTES", 2 * 4096)
    monkeypatch.setattr(store, "POPULATE_BYTES", 4096)
    monkeypatch.setattr(store, "MADV_POPULATE_WRITE", advice)
    plan = [(4, (P.FORWARD, P.UPDATE), 96)] * 300  # 300 records of 64 bytes: 19,200 bytes
    run, general, tracer = _driven_run(tmp_path, monkeypatch, plan)
    assert general == [0] and (advice == 23 or not tracer._store._populate)
    assert [b.batch for b in run.ranks[0].batches] == list(range(300))
    assert all(b.t_ms[P.UPDATE] == (2e3, 1e3) for b in run.ranks[0].batches)
    assert (tmp_path / "driven" / "rank-0.batches").stat().st_size == 16 + 300 * 64  # cut to what was written


def test_a_malformed_line_is_one_line_naming_file_line_and_field(tmp_path, one_rank):
    folder = copy_run(one_rank, tmp_path)
    f = folder / "rank-0.jsonl"
    lines = f.read_text().splitlines()
    lines[2] = lines[2].replace('"local_samples":5', '"local_samples":"five"')
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as e:
        read_run(folder)
    assert str(e.value) == f"{f}:3: local_samples: 'five', not an integer >= 1"
    lines[2] = "{not json"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"rank-0.jsonl:3: not JSON"):
        read_run(folder)


def test_no_trace_writes_nothing(tmp_path):
    r = run_perfmlp(*TINY, "--trace-dir", str(tmp_path), "--no-trace")
    assert r.returncode == 0 and not any(tmp_path.iterdir())


def test_cprofile_writes_rank_profiles(tmp_path):
    import pstats
    folder = tiny_run(tmp_path, "prof", "--cprofile")
    st = pstats.Stats(str(folder / "rank-0.prof"))
    assert any(fn[2] == "_train" for fn in st.stats)


def test_nvtx_ranges_are_free_without_a_profiler():
    from perfmlp.trace.fastpath import nvtx_enabled, nvtx_pop, nvtx_push
    nvtx_push("forward", 3)
    nvtx_pop()
    assert nvtx_enabled() is False


def test_every_line_record_round_trips():
    from perfmlp.trace import lines as L
    from perfmlp.trace import records as R
    recs = [R.Header(schema=R.SCHEMA, rank=1, size=2, start="s", pid=7, clock="host", host_start_ns=5),
            R.Clock(at="start", host_start_ns=5, rank0_minus_host_ns=-3, rank0_err_ns=1, rank0_start_ns=2),
            R.Shape(id=1, samples=10, local_samples=5, phases=(R.Phase.FORWARD, R.Phase.UPDATE),
                    flops={R.Phase.FORWARD: 100}, ops={R.Phase.FORWARD: 2}, kernels=None, gemms=None,
                    launches={R.Phase.FORWARD: (("gemm", (3, 5, 4)),)}, bytes_h2d=1, bytes_d2h=2, bytes_d2d=3,
                    bytes_mpi=4, bytes_nccl=0, collectives=(("MPI_Allreduce", 24),)),
            R.Epoch(epoch=0, loss=0.5, accuracy=None, seconds=1.0, steady_ms_per_batch=None, warmup_batches=2),
            R.GpuActivity(epoch=0, batch=3, records=(R.GpuRecord("copy", R.Phase.UPDATE, 1, 2, 7, 64, "h2d", None,
                                                                 None, 9),)),
            R.Activity(orphans=3), R.End(status="complete", end="e", batches=4)]
    for rec in recs:
        back = L.parse(L.line(rec))
        assert L.as_json(back) == L.as_json(rec) and type(back) is type(rec)
    assert L.parse(L.line(recs[2])).phases == (R.Phase.FORWARD, R.Phase.UPDATE)


def test_a_gpu_runs_host_clock_batches_take_the_epochs_synchronised_time():
    """Host-clock batch lines of a GPU run hold the host's enqueue time; the
    epoch's synchronised steady time per batch stands in for them."""
    import dataclasses
    from perfmlp.trace import records as R
    from perfmlp.trace.reader import Run
    base = json.loads((FORMAT1 / "manifest.json").read_text())
    manifest = R.read(R.Manifest, {**base, "schema": R.SCHEMA, "ran": None})

    def run(backend, epoch_line, steady=True):
        ran = R.Ran(backend=backend, comm="nccl", exec="eager", parallel="data", model_procs=0,
                    batch_transfer="resident", overlap=False, bucket_bytes=1, gemm="cublas", output_grad_cols=256,
                    fuse_output=True, trace_level="counters", trace_level_asked="auto")
        m = dataclasses.replace(manifest, ran=ran, procs=2)
        shape = R.Shape(id=1, samples=100, local_samples=50, phases=(R.Phase.FORWARD,), flops={}, ops={},
                        bytes_h2d=0, bytes_d2h=0, bytes_d2d=0, bytes_mpi=0, bytes_nccl=0, collectives=())
        ranks = {}
        for r in range(2):
            recs = [shape] + [R.Batch(epoch=0, batch=k, shape=shape, t0_s=0.0, wall_ms=0.02, loss=None, clock="host",
                                      t_ms={R.Phase.FORWARD: R.Span(0.0, 0.01)}) for k in range(3)]
            if epoch_line:
                recs.append(R.Epoch(epoch=0, seconds=0.003 + 0.003 * r,
                                    steady_ms_per_batch=0.2 + 0.1 * r if steady else None))
            ranks[r] = recs
        return Run.from_records(m, ranks)

    # 3 batches: too short an epoch for a warm-up, so all 3 are timed (trace.format.warmup_batches)
    assert run("cupy", True).batch_times_ms() == pytest.approx([0.3] * 3)  # the slowest rank's epoch time
    # no steady figure: the whole epoch's, the slowest rank's 6 ms over 3 batches
    assert run("cupy", True, steady=False).batch_times_ms() == pytest.approx([2.0] * 3)
    # on the CPU too the epoch's synchronised window is the time, the figure the trainer prints
    assert run("numpy", True).batch_times_ms() == pytest.approx([0.3] * 3)
    assert run("numpy", False).batch_times_ms() == pytest.approx([0.02] * 3)  # no epoch line: what they hold
    assert not run("cupy", True, steady=False).host_enqueue_times and run("cupy", False).host_enqueue_times
    assert not run("cupy", True).host_enqueue_times and not run("numpy", False).host_enqueue_times


def test_a_packed_run_reads_as_the_plain_one(tmp_path, two_ranks):
    from perfmlp.trace.pack import main as pack
    folder = copy_run(two_ranks, tmp_path / "set")
    plain = read_run(folder)
    assert pack([str(tmp_path / "set")]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "rank-0.batches.gz", "rank-0.jsonl.gz",
                                                        "rank-1.batches.gz", "rank-1.jsonl.gz"]
    assert pack([str(tmp_path / "set")]) == 0     # again: nothing left to pack, nothing lost
    packed = read_run(folder)
    for rank in plain.ranks:
        assert packed.ranks[rank].batches == plain.ranks[rank].batches
        assert packed.ranks[rank].epochs == plain.ranks[rank].epochs


def test_a_rank_both_packed_and_plain_or_a_damaged_pack_is_one_line(tmp_path, two_ranks):
    from perfmlp.trace.pack import main as pack
    run_dir = copy_run(two_ranks, tmp_path)
    plain0 = (run_dir / "rank-0.jsonl").read_bytes()
    assert pack([str(run_dir)]) == 0
    (run_dir / "rank-0.jsonl").write_bytes(plain0)      # rank 0 now in both forms
    report = [run_dir, "--out", tmp_path / "r"]
    with pytest.raises(TraceError, match="both packed and plain"):
        read_run(run_dir)
    (run_dir / "rank-0.jsonl").unlink()
    packed1 = (run_dir / "rank-1.jsonl.gz").read_bytes()
    assert packed1[10:10 + len("rank-1.jsonl\0")] == b"rank-1.jsonl\0"   # gunzip -N restores the right name
    deflate = gzip.compress(b"{}\n" * 100)                  # a 10-byte header, then the deflate data
    for damage in (b"\x1f\x8b\x08\x00 not gzip after all",   # header cut short: EOFError
                   deflate[:10] + b"\xff" * 8 + deflate[18:]):  # invalid deflate block: zlib.error
        (run_dir / "rank-1.jsonl.gz").write_bytes(damage)
        with pytest.raises(TraceError, match="rank-1.jsonl.gz: unreadable"):
            read_run(run_dir)
        r = in_process(report_main, report)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert "rank-1.jsonl.gz: unreadable" in lines[0] and lines[-1].startswith("perfmlp.report: error")


@pytest.mark.parametrize("n_train, warmup", [(13, 0), (40, 3)])  # 3 and 8 batches of 5
def test_the_epochs_steady_window_leaves_out_the_warm_up_batches(tmp_path, n_train, warmup):
    # an epoch of no more batches than the warm-up is timed whole (trace/format.py warmup_batches)
    from perfmlp.trace.format import warmup_batches
    args = [a if a != "13" else str(n_train) for a in TINY]
    r = run_perfmlp(*args, "--trace-dir", str(tmp_path), "--run-id", "w")
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "w")
    (epoch,) = run.ranks[0].epochs
    batches = len(run.ranks[0].batches)
    assert epoch.warmup_batches == warmup == warmup_batches(batches)
    if warmup:
        assert 0 < epoch.steady_ms_per_batch * (batches - warmup) <= epoch.seconds * 1e3
    else:
        assert epoch.steady_ms_per_batch is None
    # the reader's window is the one the trainer's epoch line says it timed
    assert sorted(k[1] for k in run.steady_batches()) == list(range(epoch.warmup_batches, batches))


# ---- format 1, read through the upgrader -----------------------------------------------------

def test_a_format1_run_reads_as_records(tmp_path):
    run = read_run(FORMAT1)
    assert run.complete and sorted(run.ranks) == [0, 1] and run.manifest.schema == "perfmlp.trace/1"
    ran = run.manifest.ran  # worked out once, by the upgrader, from what format 1 wrote
    assert (ran.backend, ran.comm, ran.exec, ran.trace_level, ran.output_grad_cols, ran.fuse_output) == (
        "numpy", "mpi", "eager", "counters", 256, True)
    b = run.ranks[1].batches[0]
    # 26 samples in batches of 6 on 2 ranks: pieces of 3; the last batch (2 samples) pieces of 1
    assert [x.local_samples for x in run.ranks[1].batches[:5]] == [3, 3, 3, 3, 1]
    assert b.flops["forward"] == batch_counts((4, 3, 2), 3, 4, "mpi", "resident").flops["forward"]
    assert len(run.ranks[0].shapes) == 2 and b.shape.launches is None  # format 1 kept no launch shapes
    assert set(b.t_ms) == {"h2d", "forward", "loss", "backward", "allreduce", "update"}
    r = subprocess.run([sys.executable, "-m", "perfmlp.report", str(FORMAT1.parent), "--out", str(tmp_path / "r"),
                        "--no-figures"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("key, value, rule", [
    ("comm", None, "mpi"),                      # no record of the exchange: the configuration's auto on NumPy
    ("exec", None, "eager"),                    # made before graph mode
    ("trace_level", None, "phases"),            # made before trace levels: every phase was timed
    ("perfmlp_git", "05bac0a", 1024),           # the fused backward's column block by the commit that ran
])
def test_the_upgrader_works_out_what_format1_left_unsaid(tmp_path, key, value, rule):
    folder = tmp_path / "r"
    shutil.copytree(FORMAT1, folder)
    m = json.loads((folder / "manifest.json").read_text())
    if key == "perfmlp_git":
        m["versions"][key] = value
    else:
        m.pop(key)
    (folder / "manifest.json").write_text(json.dumps(m))
    ran = read_run(folder).manifest.ran
    got = {"comm": ran.comm, "exec": ran.exec, "trace_level": ran.trace_level, "perfmlp_git": ran.output_grad_cols}
    assert got[key] == rule


def _damaged(tmp_path, what):
    """The format-1 fixture with one damage; returns (folder, the file, its line or None)."""
    folder = tmp_path / "damaged"
    shutil.copytree(FORMAT1, folder)
    man, r0, r1 = folder / "manifest.json", folder / "rank-0.jsonl", folder / "rank-1.jsonl"
    m = json.loads(man.read_text())
    lines = r0.read_text().splitlines()
    batch = next(i for i, s in enumerate(lines) if '"kind":"batch"' in s)
    rec = json.loads(lines[batch])

    def set_batch(**kv):
        lines[batch] = json.dumps({**rec, **kv})
        r0.write_text("\n".join(lines) + "\n")
        return r0, batch + 1
    if what in ("procs string", "procs null"):
        m["procs"] = "two" if what == "procs string" else None
        man.write_text(json.dumps(m))
        return folder, man, None
    if what == "no hidden_sizes":
        del m["config"]["hidden_sizes"]
        man.write_text(json.dumps(m))
        return folder, man, None
    if what == "t_ms 5":
        return (folder, *set_batch(t_ms=5))
    if what == "epoch [0]":
        return (folder, *set_batch(epoch=[0]))
    if what == "wall_ms slow":
        return (folder, *set_batch(wall_ms="slow"))
    if what == "t_ms abc":
        return (folder, *set_batch(t_ms={"forward": "abc"}))
    if what == "t0_s null":
        return (folder, *set_batch(t0_s=None))
    if what == "NaN wall_ms":
        lines[batch] = lines[batch].replace(f'"wall_ms":{json.dumps(rec["wall_ms"])}', '"wall_ms":NaN')
        r0.write_text("\n".join(lines) + "\n")
        return folder, r0, batch + 1
    if what == "negative flops":
        return (folder, *set_batch(flops={**rec["flops"], "forward": -6}))
    if what == "gpu line without a batch":
        lines.insert(batch, '{"kind": "gpu", "records": []}')
        r0.write_text("\n".join(lines) + "\n")
        return folder, r0, batch + 1
    if what == "batch lines three times":
        lines[batch + 1:batch + 1] = [lines[batch], lines[batch]]
        r0.write_text("\n".join(lines) + "\n")
        return folder, r0, batch + 2
    if what == "rank 1 a copy of rank 0":
        shutil.copy(r0, r1)
        return folder, r1, 1
    if what == "stray rank-x.jsonl":
        (folder / "rank-x.jsonl").write_text("")
        return folder, folder / "rank-x.jsonl", None
    if what == "a link to /dev/zero":
        r1.unlink()
        r1.symlink_to("/dev/zero")
        return folder, r1, None
    raise AssertionError(what)


DAMAGES = {
    "procs string": "procs: 'two', not an integer >= 1",
    "procs null": "procs: None, not an integer >= 1",
    "no hidden_sizes": "config.hidden_sizes: missing",
    "t_ms 5": "t_ms: 5, not an object",
    "epoch [0]": "epoch: [0], not an integer >= 0",
    "wall_ms slow": "wall_ms: 'slow', not a finite number >= 0",
    "t_ms abc": "t_ms.forward: 'abc', not [offset ms, duration ms]",
    "t0_s null": "t0_s: None, not a finite number",
    "NaN wall_ms": "wall_ms: NaN, not a finite number >= 0",
    "negative flops": "flops.forward: -6, not an integer >= 0",
    "gpu line without a batch": "epoch: missing",
    "batch lines three times": "batch 0 of epoch 0 recorded twice",
    "rank 1 a copy of rank 0": "rank: 0, but the file is rank 1's",
    "stray rank-x.jsonl": "not a rank file (rank-<number>.jsonl)",
    "a link to /dev/zero": "not a regular file",
}


@pytest.mark.parametrize("what", DAMAGES)
def test_a_damaged_trace_is_one_line_naming_file_line_and_field(tmp_path, what):
    folder, path, line = _damaged(tmp_path, what)
    where = f"{path}:{line}: " if line else f"{path}: "
    with pytest.raises(TraceError) as e:
        read_run(folder)
    assert str(e.value).startswith(where) and DAMAGES[what] in str(e.value), str(e.value)
    args = [str(folder), "-o", str(tmp_path / "c.json")]
    if what == "a link to /dev/zero":   # a process of its own, whose read could run forever
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "perfmlp.trace.chrome", *args], capture_output=True, text=True,
                           cwd=ROOT, timeout=60)
        assert time.monotonic() - t0 < 30
    else:
        r = in_process(chrome_main, args)
    assert r.returncode == 2 and r.stderr == f"perfmlp.trace.chrome: error: {e.value}\n"
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("what, words", [
    ("unknown shape", "shape: 9, no shape line with that id"),
    ("batches of another rank", "rank 0, but its rank-1.jsonl header says 1"),
    ("no batch file", "no rank-1.batches beside it"),
    ("procs string", "manifest.json: procs: 'two', not an integer >= 1"),
    ("record count", "batch records, but its end line says"),
])
def test_a_damaged_format2_trace_is_one_line(tmp_path, two_ranks, what, words):
    folder = copy_run(two_ranks, tmp_path)
    b1 = folder / "rank-1.batches"
    if what == "unknown shape":
        data = bytearray(b1.read_bytes())
        data[16:20] = (9).to_bytes(4, "little")   # the first record's shape id
        b1.write_bytes(bytes(data))
    elif what == "batches of another rank":
        shutil.copy(folder / "rank-0.batches", b1)
    elif what == "no batch file":
        b1.unlink()
    elif what == "procs string":
        m = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps({**m, "procs": "two"}))
    elif what == "record count":
        (folder / "rank-1.jsonl").write_text((folder / "rank-1.jsonl").read_text().replace('"batches":3', '"batches":4'))
    with pytest.raises(TraceError, match=words):
        read_run(folder)


# ---- the Chrome / Perfetto export ------------------------------------------------------------

def check_chrome(doc: dict) -> list:
    """The constraints Perfetto's importer needs: no thread id 0, every
    track's id its own in the file, no slice partly overlapping another on
    its track (nesting is allowed) on the nanosecond grid it stores times
    on. Returns the X events."""
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert all(e["tid"] != 0 for e in xs + names) and all(e["pid"] != 0 for e in doc["traceEvents"])
    owner = {}
    for e in names:
        assert owner.setdefault(e["tid"], e["pid"]) == e["pid"], "a thread id in two processes"
    assert len({(e["pid"], e["tid"]) for e in names}) == len(names), "a track named twice"
    assert {(e["pid"], e["tid"]) for e in xs} <= {(e["pid"], e["tid"]) for e in names}
    tracks: dict = {}
    for e in xs:
        ts_ns = round(e["ts"] * 1e3)
        tracks.setdefault((e["pid"], e["tid"]), []).append((ts_ns, ts_ns + round(e["dur"] * 1e3)))
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ = []
        for s, t in spans:
            while open_ and open_[-1] <= s:
                open_.pop()
            assert not open_ or t <= open_[-1], f"slice [{s}, {t}] partly overlaps one ending at {open_[-1]}"
            open_.append(t)
    return xs


def test_the_chrome_export_keeps_every_track_apart(tmp_path, three_ranks):
    folder = three_ranks
    out = tmp_path / "c.json"
    r = subprocess.run([sys.executable, "-m", "perfmlp.trace.chrome", str(folder), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    xs = check_chrome(json.loads(out.read_text()))
    run = read_run(folder)
    assert len(xs) == sum(1 + len(b.t_ms) for rt in run.ranks.values() for b in rt.batches) == 3 * 3 * (1 + 5)  # a batch and its 5 phases (no h2d on NumPy)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_overlapping_slices_are_cut_where_the_next_starts():
    from perfmlp.trace.chrome import one_after_another
    ev = [{"ts": 10.0, "dur": 5.2, "args": {}}, {"ts": 0.0, "dur": 10.0000001, "args": {}}, {"ts": 15.0, "dur": 1.0,
                                                                                           "args": {}}]
    out = one_after_another(ev)
    assert [(e["ts"], e["dur"]) for e in out] == [(0.0, 10.0), (10.0, 5.0), (15.0, 1.0)]
    assert out[1]["args"]["measured_us"] == 5.2
    check_chrome({"traceEvents": [{**e, "ph": "X", "pid": 1, "tid": 1} for e in out]
                  + [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}]})


def test_the_chrome_export_to_an_unwritable_path_is_one_line_and_leaves_nothing(tmp_path):
    folder = tiny_run(tmp_path, "c")
    out = tmp_path / "no-such-folder" / "run.json"
    r = subprocess.run([sys.executable, "-m", "perfmlp.trace.chrome", str(folder), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfmlp.trace.chrome: error: cannot write {out}: No such file or directory"
    # a full disk: the previous export stays whole, no temporary file is left
    good = tmp_path / "good.json"
    good.write_text("previous")
    r = subprocess.run([sys.executable, "-c", "import sys, builtins, perfmlp.trace.chrome as c, perfmlp.errors as m\n"
                        "real = open\n"
                        "class Full:\n"
                        "    def __init__(s, f): s.f = f\n"
                        "    def __enter__(s): return s\n"
                        "    def __exit__(s, *a): s.f.close()\n"
                        "    def write(s, t): raise OSError(28, 'No space left on device')\n"
                        "    def flush(s): pass\n"
                        "    def close(s): s.f.close()\n"
                        "m.open = lambda p, *a, **k: Full(real(p, *a, **k))  # the atomic write's\n"
                        f"sys.exit(c.main([{str(folder)!r}, '-o', {str(good)!r}]))"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.strip() == (
        f"perfmlp.trace.chrome: error: cannot write {good}: No space left on device")
    assert good.read_text() == "previous" and sorted(p.name for p in tmp_path.iterdir()) == ["c", "good.json"]


def test_a_manifest_that_cannot_be_written_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    import builtins
    from perfmlp import errors
    from perfmlp.trace import manifest
    real = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, text):
            raise OSError(28, "No space left on device")
    monkeypatch.setattr(errors, "open", lambda p, *a, **k: Full(real(p, *a, **k)), raising=False)
    with pytest.raises(OSError) as e:
        manifest.write_json(tmp_path / "manifest.json", {"a": 1})
    assert str(e.value) == f"[Errno 28] No space left on device: '{tmp_path / 'manifest.json'}'"
    assert list(tmp_path.iterdir()) == []


def test_the_format_page_is_made_from_the_records():
    import dataclasses
    from perfmlp.trace import docs, records
    page = (ROOT / "docs" / "trace-format.md").read_text()
    assert page == docs.render(), "docs/trace-format.md is stale: python -m perfmlp.trace.docs"
    for cls in (records.Manifest, records.Ran, records.Shape, records.Batch, records.Epoch, records.GpuRecord):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` | {f.metadata['doc']} |" in page
    assert all(f"| `{p.value}` |" in page for p in records.Phase)
