"""The GPU timeline (trace/activity.py, report/timeline.py) on the CPU:
interval arithmetic, attribution, clocks, the per-batch analyses and the
cross-check on synthetic CUPTI records, and the writer -> reader -> report
and Chrome export path with a stand-in collector. The collection itself
needs a GPU and cupti-python (benchmarks/gpu_timeline.sh runs it)."""
import json
import sys

import pytest

from perfmlp import names as N

from perfmlp.report import build_from_runs
from perfmlp.report.timeline import cross_check as batch_cross_check
from perfmlp.report.timeline import (PARTS, breakdown, collective_waits, critical_path, intersect, length,
                                     run_breakdowns, run_collectives, subtract, union)
from perfmlp.trace import activity as act
from perfmlp.trace import records as R
from perfmlp.trace import writer as writer_mod
from perfmlp.trace.chrome import STREAM0, chrome_events, tid
from perfmlp.names import DEFAULT_TRACE_LEVEL
from perfmlp.trace.format import Counts
from perfmlp.trace.reader import read_run
from perfmlp.trace.records import ACTIVITY_FIELDS

from conftest import ROOT, gpu, run_perfmlp
from synthetic import gpu_records, write_run


def batch_of(b: dict) -> R.Batch:
    """A trace Batch with a batch line's counters (`b`: its keys) and GPU records."""
    shape = R.Shape(id=1, samples=1, local_samples=1, phases=(), flops={}, ops={}, kernels=b.get("kernels"),
                    gemms=b.get("gemms"), bytes_h2d=b.get("bytes_h2d", 0), bytes_d2h=b.get("bytes_d2h", 0),
                    bytes_d2d=b.get("bytes_d2d", 0), bytes_mpi=0, bytes_nccl=0,
                    collectives=tuple(tuple(c) for c in b.get("collectives", ())))
    return R.Batch(epoch=0, batch=0, shape=shape, t0_s=0.0, wall_ms=0.0, clock="cupti", t_ms={}, gpu=tuple(b["gpu"]))


def cross_check(b, *args, **kw):
    return batch_cross_check(b if isinstance(b, R.Batch) else batch_of(b), *args, **kw)


# ---- interval arithmetic -------------------------------------------------------------------

def test_union_merges_overlaps_and_never_sums_them():
    # [0,4] and [2,6] overlap: union [0,6] is 6 long, not 4 + 4 = 8; [8,9] apart; empty dropped
    assert union([(2, 6), (0, 4), (8, 9), (5, 5)]) == [(0, 6), (8, 9)]
    assert length([(0, 4), (2, 6), (8, 9)]) == 7
    assert length([(0, 10), (1, 2), (3, 4)]) == 10  # nested intervals add nothing


def test_intersect_and_subtract():
    a, b = [(0, 10)], [(2, 3), (5, 12)]
    assert intersect(a, b) == [(2, 3), (5, 10)]
    assert subtract(a, b) == [(0, 2), (3, 5)]
    # |a| = |a and b| + |a - b|: 10 = (1 + 5) + (2 + 2)
    assert length(intersect(a, b)) + length(subtract(a, b)) == length(a)


# ---- one batch -----------------------------------------------------------------------------

def rec(cat, phase, s, e, stream=7, nbytes=0, copy=None, name=None, api=None):
    return R.GpuRecord(cat=cat, phase=phase, start_ns=s, end_ns=e, stream=stream, bytes=nbytes, copy=copy, name=name,
                       api_ns=api, corr=0)


def test_breakdown_adds_up_to_the_window_from_unions():
    recs = [rec("compute", "backward", 0, 10_000_000),           # 0-10 ms
            rec("comm", "allreduce", 8_000_000, 14_000_000, 9),   # 8-14: 2 ms under compute, 4 exposed
            rec("copy", "d2h", 13_000_000, 16_000_000, nbytes=4, copy="d2h"),  # 13-14 under comm: 2 ms copies
            rec("compute", "update", 22_000_000, 30_000_000)]     # 22-30
    host = {"allreduce": (15_000_000, 20_000_000), "update": (20_000_000, 30_000_000)}
    bd = breakdown(recs, (0, 30_000_000), host)
    # compute 10 + 8 = 18; exposed comm 10-14 = 4; copies 14-16 = 2
    assert (bd.compute, bd.exposed_comm, bd.copies) == (18.0, 4.0, 2.0)
    # idle 16-20: host in allreduce -> other ranks 4; 20-22: host in update -> host launch 2
    assert (bd.idle_other_ranks, bd.idle_host_launch, bd.idle_copies) == (4.0, 2.0, 0.0)
    assert tuple(bd.parts()) == PARTS and sum(bd.parts().values()) == bd.window == 30.0
    assert bd.comm == 6.0 and bd.exposed_comm_share == pytest.approx(4 / 30)


def test_records_are_attributed_to_the_batch_and_phase_that_launched_them():
    ext = {11: act.ext_id(1, 2), 12: act.ext_id(1, 3), 13: act.ext_id(2, 2), 14: act.ext_id(9, 1)}
    gpu = [("kernel", 11, 100, 200, 7, 0, 0, "_Z4gemm"),
           ("kernel", 12, 250, 400, 9, 0, 0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
           ("memcpy", 13, 50, 60, 7, 64, 2, None),
           ("kernel", 14, 1, 2, 7, 0, 0, "x"),      # seq 9: no such batch
           ("kernel", 99, 1, 2, 7, 0, 0, "eval")]   # launched outside any phase (no external id)
    out, orphans = act.attribute(gpu, ext, {11: 90}, {1: (0, 5), 2: (0, 6)},
                                 {1: "forward", 2: "backward", 3: "allreduce"})
    assert orphans == 2
    r0, r1 = (dict(zip(ACTIVITY_FIELDS, r)) for r in out[(0, 5)])
    assert (r0["cat"], r0["phase"], r0["api_ns"]) == ("compute", "backward", 90)
    assert (r1["cat"], r1["phase"], r1["stream"]) == ("comm", "allreduce", 9)
    (c,) = [dict(zip(ACTIVITY_FIELDS, r)) for r in out[(0, 6)]]
    assert (c["cat"], c["copy"], c["bytes"]) == ("copy", "d2h", 64)


def test_the_16bit_exchanges_casts_count_as_communication():
    # named apart from the weights' to_storage cast, which is compute
    assert [act.classify("kernel", n) for n in (*N.EXCHANGE_KERNELS, "to_storage", "ncclDevKernel_x")] == [
        "comm", "comm", "compute", "comm"]


def test_gpu_phase_spans_follow_the_cuda_event_convention():
    recs = [rec("compute", "forward", 1_000_000, 2_000_000), rec("compute", "forward", 2_500_000, 3_000_000),
            rec("compute", "backward", 3_000_000, 5_000_000), rec("compute", "update", 9_000_000, 10_000_000)]
    # the previous batch ended at 0.5 ms, before this one's first record: the batch starts there
    spans, total, t0, end = act.gpu_phase_spans(recs, 500_000, {"allreduce": (5_000_000, 8_000_000)})
    assert t0 == 500_000 and end == 10_000_000 and total == 9.5
    # forward 0.5-3 ms, backward 3-5, allreduce (host only) 5-8, update 8-10: offsets from 0.5 ms
    assert spans == {"forward": (0.0, 2.5), "backward": (2.5, 2.0), "allreduce": (4.5, 3.0), "update": (7.5, 2.0)}
    # a previous batch still running (another stream) when this one starts: from the first record
    assert act.gpu_phase_spans(recs, 1_500_000)[2] == 1_000_000


def test_cross_check_compares_bytes_and_kernel_counts():
    b = {"bytes_h2d": 128, "bytes_d2h": 64, "kernels": {"forward": 2, "backward": 1}, "gemms": {},
         "collectives": [["x", 1]],
         "gpu": [rec("copy", "h2d", 0, 1, nbytes=100, copy="h2d"), rec("copy", "h2d", 1, 2, nbytes=28, copy="h2d"),
                 rec("copy", "d2h", 2, 3, nbytes=64, copy="d2h"), rec("compute", "forward", 3, 4, name="bias_add"),
                 rec("compute", "forward", 4, 5, name="row_sum"), rec("compute", "backward", 5, 6, name="row_sum")]}
    c = cross_check(b)
    assert c.bytes_ok and c.kernels_ok and c.h2d == (128, 128)  # 100 + 28 = 128
    b["bytes_d2h"] = 65
    b["kernels"]["backward"] = 3
    c = cross_check(b)
    assert not c.bytes_ok and c.kernel_mismatch == {"backward": {"own": (1, 3)}}
    # a phase replayed as one CUDA graph is not counted kernel by kernel
    b["gpu"].append(rec("graph", "backward", 6, 7))
    assert cross_check(b).kernels_ok


def test_cross_check_counts_d2d_copies_against_bytes_d2d():
    b = {"bytes_h2d": 0, "bytes_d2h": 0, "kernels": {}, "gemms": {}, "collectives": [],
         "gpu": [rec("copy", "h2d", 0, 1, nbytes=40, copy="d2d"), rec("copy", "h2d", 1, 2, nbytes=24, copy="d2d")]}
    # a batch line without bytes_d2d (before the counter existed) expects none: 40 + 24 = 64 is a mismatch
    c = cross_check(b)
    assert c.d2d == (64, 0) and not c.bytes_ok
    b["bytes_d2d"] = 64
    assert cross_check(b).bytes_ok


def graph_batch(library_names, own_names, nccl=1):
    """A graph-mode batch launching forward + loss + backward + update: 11
    kernels of which 5 cuBLAS GEMM calls, and one NCCL allreduce."""
    recs = [rec("compute", "graph", i, i + 1, name=n) for i, n in enumerate([*library_names, *own_names])]
    recs += [rec("comm", "graph", 100 + i, 101 + i, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL") for i in range(nccl)]
    return {"bytes_h2d": 0, "bytes_d2h": 0, "kernels": {"graph": 11}, "gemms": {"graph": 5},
            "collectives": [["ncclAllReduce", 407051]], "gpu": recs}


OWN6 = ["bias_sigmoid", "bias_add", "softmax_ce_grad", "row_sum", "sigmoid_grad_row_sum", "sgd_update"]
GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_execute_kernel__5x_cublas"


def test_a_library_gemm_may_launch_more_than_one_kernel():
    # 5 GEMM calls, one of them split-K (a GEMM kernel and the reduction): 6 library records;
    # 11 launched - 5 GEMM calls = 6 own kernels, all there
    b = graph_batch([GEMM] * 4 + [GEMM, "_ZN8cublasLt19splitKreduce_kernelILi32E"], OWN6)
    c = cross_check(b)
    assert c.kernels_ok and c.library_kernels == 6 and c.nccl_kernels == c.collectives == 1


def test_a_missing_own_kernel_or_library_gemm_fails():
    c = cross_check(graph_batch([GEMM] * 6, OWN6[:-1]))  # sgd_update missing: 5 own, 6 expected
    assert c.kernels_ok is False and c.kernel_mismatch == {"graph": {"own": (5, 6)}}
    # one own kernel too many cannot hide among the library's: the names tell them apart
    c = cross_check(graph_batch([GEMM] * 4, OWN6 + ["row_sum"]))
    assert c.kernel_mismatch == {"graph": {"own": (7, 6), "library": (4, 5)}}
    # an NCCL collective without an NCCL kernel fails with two ranks, not with one
    assert cross_check(graph_batch([GEMM] * 5, OWN6, nccl=0)).kernel_mismatch == {"nccl": {"kernels": (0, 1)}}
    assert cross_check(graph_batch([GEMM] * 5, OWN6, nccl=0), ranks=1).kernels_ok


def test_reference_gemm_kernels_are_our_own():
    # --gemm tiled: the 5 GEMMs are gemm_tiled, ours; 11 own kernels, no library call expected
    b = graph_batch([], ["gemm_tiled"] * 5 + OWN6)
    assert cross_check(b, library_gemms=False).kernels_ok
    assert cross_check(b).kernel_mismatch == {"graph": {"own": (11, 6), "library": (0, 5)}}


def test_own_kernel_names_come_from_the_kernel_source():
    names = act.own_kernel_names()
    assert set(OWN6) <= set(names) and "gemm_tiled" in names
    assert not any("cublas" in n or "nccl" in n for n in names)
    # a kernel declared with __launch_bounds__ is named by its name, not the attribute's
    assert {"output_backward", "partial_sums"} <= set(names) and not any("launch_bounds" in n for n in names)


def test_cross_check_without_gemms_is_not_a_verdict():
    b = graph_batch([GEMM] * 5, OWN6)
    del b["gemms"]
    assert cross_check(b).kernels_ok is None


# ---- clocks and ranks ----------------------------------------------------------------------

def test_clock_offset_takes_the_tightest_bracket():
    # B = A + 1000; the second sample brackets b within 10 ns, the first within 400
    samples = [(0, 1100, 400), (5000, 6005, 5010)]
    assert act.clock_offset(samples) == (1000, 5)


def test_to_run_s_puts_ranks_on_rank_zeros_axis():
    # rank 1's host clock runs 2 s behind rank 0's; its CUPTI clock is 7 s ahead of its host clock
    c1 = R.Clock(at="start", host_start_ns=10 * 10**9, rank0_minus_host_ns=2 * 10**9, rank0_err_ns=0,
                 rank0_start_ns=11 * 10**9, cupti_minus_host_ns=7 * 10**9)
    # host 10 s on rank 1 = 12 s on rank 0 = 1 s after rank 0 started
    assert act.to_run_s(c1, 10 * 10**9, False) == 1.0
    # CUPTI 17.5 s on rank 1 = host 10.5 s = 1.5 s on the run axis
    assert act.to_run_s(c1, 17_500_000_000, True) == 1.5


def test_collective_waits_name_the_last_rank():
    w = collective_waits({0: (1.000, 1.010), 1: (1.004, 1.010), 2: (1.001, 1.010)})
    assert w.last_rank == 1
    assert w.wait_ms[0] == pytest.approx(4.0) and w.wait_ms[1] == 0.0
    assert w.transfer_ms[0] == pytest.approx(6.0) and w.spread_ms == pytest.approx(4.0)


def test_critical_path_and_gain_ceilings():
    segs = {0: [("forward", 0.000, 0.003), ("backward", 0.003, 0.006), ("allreduce", 0.006, 0.010),
                ("update", 0.010, 0.011)],
            1: [("forward", 0.000, 0.002), ("backward", 0.002, 0.004), ("allreduce", 0.004, 0.010),
                ("update", 0.010, 0.0115)]}
    path = {(p.segment, p.rank): p for p in critical_path(segs)}
    # rank 0 arrives last (6 ms against 4 ms): shortening its forward (3 ms) gains at most 2 ms
    assert path[("forward", 0)].ms == pytest.approx(3.0)
    assert path[("forward", 0)].gain_ceiling_ms == pytest.approx(2.0)
    assert path[("allreduce after the last arrival", 0)].ms == pytest.approx(4.0)
    # rank 1 finishes last (11.5 ms against 11): its 1.5 ms update can gain at most 0.5 ms
    assert path[("update", 1)].gain_ceiling_ms == pytest.approx(0.5)


# ---- writer -> reader -> report, with a stand-in collector ----------------------------------

class FakeCollector:
    """Records one launch per kernel the fake network launches, correlated
    with the external id on top of the stack, as CUPTI would."""

    note = None

    def __init__(self):
        self.stack, self.gpu, self.ext, self.api, self.t, self.corr = [], [], {}, {}, 1_000_000, 0

    def push(self, ext):
        self.stack.append(ext)

    def pop(self):
        return self.stack.pop()

    def now_ns(self):
        return 5_000_000_000  # CUPTI's clock: the host's + 5 s - host start

    def launch(self, kind, dur_ns, nbytes=0, copy_kind=0, name="k", stream=7):
        self.corr += 1
        self.ext[self.corr] = self.stack[-1]
        self.api[self.corr] = self.t - 500
        self.gpu.append((kind, self.corr, self.t, self.t + dur_ns, stream, nbytes, copy_kind, name))
        self.t += dur_ns + 1000

    def drain(self, batches, phase_names):
        out = act.attribute(self.gpu, self.ext, self.api, batches, phase_names)
        self.gpu, self.ext, self.api = [], {}, {}
        return out

    def stop(self):
        pass


class FakeWorld:
    rank, size, library = 0, 1, "none"

    def barrier(self):
        pass

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]


class FakeNet:
    kernels_launched = 0
    ops = None         # the tracer hands a list here in the batches it records
    fuse_output = True


class FakeReducer:
    name = "nccl"


class FakeBackend:
    name = "cupy"
    exec = "eager"

    def __init__(self):
        self.net = FakeNet()
        self.reducer = FakeReducer()


def traced_run(tmp_path, monkeypatch, batches=6):
    from perfmlp.config import from_mapping
    fake = FakeCollector()
    monkeypatch.setattr(act, "collector_or_reason", lambda level, nvtx_tool: (fake, None))
    monkeypatch.setattr(writer_mod, "machine_seen", lambda *a: {"nodes": {}})
    cfg = from_mapping({"trace_dir": str(tmp_path), "run_id": "fake", "batch_size": 10, "n_train": 40,
                        "backend": "cupy", "trace_level": "timeline"})
    world = FakeWorld()
    tr = writer_mod.make_tracer(cfg, world)
    be = FakeBackend()
    tr.attach(world, be)
    counts = Counts()
    for k in range(batches):
        tr.begin_batch(0, k, 10, 10)
        with tr.phase("h2d"):
            fake.launch("memcpy", 2000, nbytes=3000, copy_kind=1)
            counts.bytes_h2d += 3000
        with tr.phase("forward"):  # 2 cuBLAS GEMMs and 2 of our kernels, recorded as the network records them
            for op, shape, name in (("gemm", (3, 10, 4), GEMM), ("bias_sigmoid", (3, 10), "bias_sigmoid"),
                                    ("gemm", (2, 10, 3), GEMM), ("bias_add", (2, 10), "bias_add")):
                if be.net.ops is not None:  # as the network records what it launches
                    be.net.ops.append((op, shape))
                be.net.kernels_launched += 1
                fake.launch("kernel", 10_000, name=name)
        with tr.phase("allreduce"):
            fake.launch("kernel", 20_000, name="ncclDevKernel_AllReduce", stream=9)
            counts.bytes_nccl += 96
            counts.collectives.append(("ncclAllReduce", 24))
        with tr.phase("update"):
            be.net.kernels_launched += 1
            fake.launch("kernel", 5000, name="sgd_update")
        tr.end_batch(None, counts)
        counts.reset()
    tr.end_epoch(epoch=0, loss=1.0, accuracy=0.5, seconds=1.0)
    tr.close("complete")
    return read_run(tmp_path / "fake")


def test_writer_reader_round_trip_of_gpu_records(tmp_path, monkeypatch):
    run = traced_run(tmp_path, monkeypatch)
    assert run.manifest.ran.trace_level == "timeline" and run.manifest.ran.trace_level_note is None
    rt = run.ranks[0]
    assert rt.activity.schema == "perfmlp.activity/1" and rt.clock.cupti_minus_host_ns is not None
    b = rt.batches[1]
    assert b.clock == "cupti" and b.kernels == {"forward": 4, "update": 1} and b.gemms == {"forward": 2}
    assert len(b.gpu) == 1 + 4 + 1 + 1
    # h2d 2 us, forward 4 x 10 us + 3 gaps of 1 us, ...: the GPU spans, not the host's
    off, dur = b.t_ms["forward"]
    assert dur == pytest.approx((1000 + 4 * 10_000 + 3 * 1000) / 1e6)
    assert set(b.t_ms_host) == {"h2d", "forward", "allreduce", "update"}
    c = cross_check(b, rt.activity.own_kernels)
    assert c.bytes_ok and c.kernels_ok and c.nccl_kernels == c.collectives == 1
    assert c.library_kernels == 2
    bd = run_breakdowns(run)[0]
    assert len(bd) == 3  # 6 batches less the 3 warm-up ones
    # one batch: 2 + 40 + 20 + 5 = 67 us busy, gaps of 1 us between records (and the one before the batch)
    assert bd[0].compute + bd[0].exposed_comm + bd[0].copies == pytest.approx(0.067)
    assert run_collectives(run) == []  # one rank: nobody to wait for


def test_report_and_chrome_export_show_the_timeline(tmp_path, monkeypatch, drawing_only):
    import dataclasses
    drawing_only("timeline_fake", "breakdown_fake")
    run = traced_run(tmp_path, monkeypatch)
    m = run.manifest
    run = dataclasses.replace(run, manifest=dataclasses.replace(
        m, machine={"nodes": {"h": {"gpu": "NVIDIA H200", "gpu_count": 1, "ranks": [0]}}},
        config={**m.config, "hidden_sizes": [512]}, ran=dataclasses.replace(m.ran, gpu="NVIDIA H200")))
    out = build_from_runs([run], [], tmp_path / "rep")
    md = (out / "report.md").read_text()
    assert "GPU timeline: fake" in md
    assert (out / "timeline_fake.png").stat().st_size > 1000 and (out / "breakdown_fake.svg").stat().st_size > 1000
    assert "memcpy bytes equal the counters in 3" in md and "kernel records match the launches in 3" in md
    ev = chrome_events(run)
    copies = [e for e in ev if e.get("cat") == "copy"]
    assert len(copies) == 6 and all(e["args"]["bytes"] == 3000 for e in copies)
    # two streams (7: compute and copies, 9: NCCL) on their own tracks
    assert {e["tid"] for e in ev if e.get("cat") in ("compute", "comm", "copy")} == {tid(0, STREAM0),
                                                                                   tid(0, STREAM0 + 1)}
    json.dumps(ev)


# ---- falling back -----------------------------------------------------------------------------

def test_a_profiler_owning_cupti_is_detected():
    assert act.profiler_owning_cupti({"NSYS_PROFILING_SESSION_ID": "3"}) == "NSYS_PROFILING_SESSION_ID"
    assert act.profiler_owning_cupti({"PATH": "/usr/bin"}) is None


def test_collector_says_why_it_cannot_start(monkeypatch):
    # a profiler's environment: refused before cupti is even imported, on any machine
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nsys/libToolsInjection64.so")
    c, why = act.collector_or_reason("timeline")
    assert c is None and why == "a profiler owns CUPTI (CUDA_INJECTION64_PATH is set)"
    monkeypatch.delenv("CUDA_INJECTION64_PATH")
    assert act.collector_or_reason("timeline", nvtx_tool=True)[1] == "a profiler owns CUPTI (an NVTX tool is attached)"
    for v in act.PROFILER_ENV:
        monkeypatch.delenv(v, raising=False)
    # no cupti-python, whether or not this machine has it (None in sys.modules: the import fails)
    monkeypatch.setitem(sys.modules, "cupti", None)
    c, why = act.collector_or_reason("timeline")
    assert c is None and why.startswith("cupti-python is not installed (")


OVERHEAD = ROOT / "tests" / "data" / "trace-overhead.json"  # the table the default levels were chosen from


def test_the_default_level_of_each_mode_is_the_richest_the_overhead_table_shows_under_target():
    from perfmlp.config import Config, HELP
    from perfmlp.names import DEFAULT_TRACE_LEVEL, TRACE_LEVELS
    from perfmlp.trace.format import OVERHEAD_TARGET, default_trace_level
    assert Config().trace_level == "auto"
    assert default_trace_level("something else") == default_trace_level("eager")  # runs eagerly
    assert set(DEFAULT_TRACE_LEVEL.values()) <= set(TRACE_LEVELS)
    assert ", ".join(f"{m} -> {lv}" for m, lv in DEFAULT_TRACE_LEVEL.items()) in HELP["trace_level"]
    table = json.loads(OVERHEAD.read_text())["runs"]
    under: dict = {}  # exec mode -> levels under the target at every p measured
    for d in table:
        ok = {r["variant"] for r in d["rows"] if r["variant"] != "untraced"
              and r["level_ran"] == r["variant"] and r["overhead_pct_median"] < 100 * OVERHEAD_TARGET}
        under[d["exec"]] = under.get(d["exec"], ok) & ok
    assert {d["procs"] for d in table} == {1, 2} and set(under) == {"eager", "graph"}
    for mode, levels in under.items():
        richest = [lv for lv in TRACE_LEVELS if lv in levels][-1:] or [next(iter(TRACE_LEVELS))]
        assert DEFAULT_TRACE_LEVEL[mode] == richest[0], (mode, levels)


def test_auto_resolves_at_attach_and_the_manifest_says_why(tmp_path, monkeypatch):
    from perfmlp.config import from_mapping
    monkeypatch.setattr(writer_mod, "machine_seen", lambda *a: {"nodes": {}})
    for mode in ("eager", "graph"):
        want = DEFAULT_TRACE_LEVEL[mode]
        fake = FakeCollector()
        monkeypatch.setattr(act, "collector_or_reason", lambda level, nvtx_tool: (fake, None))
        cfg = from_mapping({"trace_dir": str(tmp_path), "run_id": mode, "backend": "cupy"})
        be = FakeBackend()
        be.exec = mode
        tr = writer_mod.make_tracer(cfg, FakeWorld())
        tr.attach(FakeWorld(), be)
        tr.close("complete")
        m = read_run(tmp_path / mode).manifest.ran
        assert (m.trace_level, m.trace_level_asked) == (want, "auto")
        assert m.trace_level_why == f"auto: the default for --exec {mode} (names.DEFAULT_TRACE_LEVEL)"


@pytest.mark.parametrize("level,used", [("timeline", "phases"), ("counters", "counters"), ("auto", "counters")])
def test_cpu_runs_say_which_level_ran(tmp_path, level, used):
    r = run_perfmlp("--backend", "numpy", "--data", "synthetic", "--input-size", "4", "--hidden-size", "3",
                    "--num-classes", "2", "--n-train", "10", "--batch-size", "5", "--epochs", "1",
                    "--trace-dir", str(tmp_path), "--run-id", "lv", "--trace-level", level)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "lv")
    ran = run.manifest.ran
    assert ran.trace_level == used and ran.trace_level_asked == level
    assert ("no GPU" in (ran.trace_level_note or "")) == (level not in (used, "auto"))
    # auto on numpy: the eager default, and the manifest says so
    assert (ran.trace_level_why is not None) == (level == "auto")
    assert run.ranks[0].clock.rank0_minus_host_ns == 0 and not any(b.gpu for b in run.ranks[0].batches)


def _has_cupti():
    try:
        from cupti import cupti  # noqa: F401
        return True
    except ImportError:
        return False


@gpu
@pytest.mark.skipif(not _has_cupti(), reason="needs cupti-python (.gpu-kit/cupti)")
@pytest.mark.parametrize("transfer,comm", [("pageable", "mpi-staged"), ("resident", "nccl")])
def test_cupti_records_match_the_counters_on_the_gpu(tmp_path, transfer, comm):
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--n-train", "1200", "--batch-size", "300",
                    "--epochs", "2", "--batch-transfer", transfer, "--comm", comm, "--trace-level", "kernels",
                    "--trace-dir", str(tmp_path), "--run-id", "g", timeout=300)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "g")
    assert run.manifest.ran.trace_level == "kernels", run.manifest.ran.trace_level_note
    batches = run.ranks[0].batches
    assert len(batches) == 8 and all(b.clock == "cupti" for b in batches)
    own = run.ranks[0].activity.own_kernels
    for b in batches:
        c = cross_check(b, own, ranks=1)
        assert c.bytes_ok, (b.batch, c)
        assert c.kernels_ok, (b.batch, c.kernel_mismatch, [g.name for g in b.gpu])
    assert run_breakdowns(run)[0][0].compute > 0


# ---- benchmarks/timeline_check.py: nsys's records joined to batches -----------------------------

def fake_nsys_db(path, pid, n_batches, node_level=True):
    """An nsys SQLite export, the tables timeline_check reads: one process,
    a `batch` NVTX range per batch holding one cudaGraphLaunch (corr 10 + k)
    whose graph ran two kernel nodes (0-10 us and 5-20 us: a union of 20 us)
    and a 64-byte D2D copy node; graph-level tracing instead records the
    launch whole (GRAPH_TRACE)."""
    import sqlite3
    from perfmlp.trace.nsys import PID_SHIFT
    gpid = 7 * PID_SHIFT
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE PROCESSES (globalPid INT, pid INT);
        CREATE TABLE StringIds (id INT, value TEXT);
        CREATE TABLE NVTX_EVENTS (text TEXT, textId INT, start INT, end INT, globalTid INT, domainId INT,
                                  int64Value INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (correlationId INT, start INT, globalTid INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, correlationId INT, globalPid INT, graphNodeId INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, correlationId INT, globalPid INT, bytes INT,
                                                 copyKind INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INT, end INT, correlationId INT, globalPid INT);""")
    con.execute("INSERT INTO PROCESSES VALUES (?, ?)", (gpid, pid))
    con.execute("INSERT INTO NVTX_EVENTS VALUES ('perfmlp', NULL, 0, NULL, ?, 1, NULL)", (gpid + 1,))
    for k in range(n_batches):
        lo, corr = 1_000_000 * (k + 1), 10 + k
        con.execute("INSERT INTO NVTX_EVENTS VALUES ('batch', NULL, ?, ?, ?, 1, ?)", (lo, lo + 500_000, gpid + 1, k))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?)", (corr, lo + 100, gpid + 1))
        g0 = lo + 200_000
        if node_level:
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, 1)", (g0, g0 + 10_000, corr, gpid))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, 2)",
                        (g0 + 5_000, g0 + 20_000, corr, gpid))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, 64, 8)", (g0, g0 + 1, corr, gpid))
        else:
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?)", (g0, g0 + 20_000, corr, gpid))
    con.commit()
    con.close()


@pytest.mark.parametrize("node_level", [True, False])
def test_timeline_check_joins_graph_node_kernels_by_the_launch(tmp_path, monkeypatch, node_level):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import timeline_check as tc
    run = traced_run(tmp_path, monkeypatch, 4)  # 4 batches of 4 x 10 us + 5 us + 20 us NCCL kernels, 3000 B H2D each
    pid = json.loads((tmp_path / "fake" / "rank-0.jsonl").read_text().splitlines()[0])["pid"]
    fake_nsys_db(tmp_path / "n.sqlite", pid, 4, node_level)
    theirs, notes = tc.nsys_batches(tmp_path / "n.sqlite", run)
    rows = theirs[0]
    assert sorted(rows) == [(0, k) for k in range(4)] and not notes
    (row,) = tc.compare(tc.ours(run), theirs)
    if node_level:
        # each batch: kernels 0-10 and 5-20 us -> a union of 0.020 ms, not 0.025; 64 B D2D, no H2D
        assert rows[(0, 1)]["kernel_ms"] == pytest.approx(0.020) and rows[(0, 1)]["d2d"] == 64
        assert row["nsys_graph_node_kernels"] == 8 and row["nsys_kernel_busy_ms"] == pytest.approx(0.020)
        # ours: 4 x 10 + 20 + 5 = 65 us busy: 0.065 / 0.020 - 1 = +225%, far outside 2%
        assert row["diff_pct"] == pytest.approx(225.0) and not row["busy_within_target"]
    else:
        assert row["nsys_whole_graphs"] == 4 and row["nsys_kernel_busy_ms"] is None and row["diff_pct"] is None
    # bytes: ours 3000 B H2D a batch against nsys's 0 (or 64 B D2D): none exact; ours equal our counters
    assert row["bytes_exact_vs_nsys"] == "0/4" and row["cupti_bytes_exact_vs_counters"] == "4/4"
    assert row["first_bytes_mismatch"].startswith("(0, 0): CUPTI {'h2d': 3000")


def overlapped_kernels_run(folder):
    """A run traced at the kernels level on 4 ranks, 6 batches: on stream 7 three
    GEMM kernels and one of ours, 10 us apart; on stream 9 two NCCL kernels
    (the overlapped exchange), started after the first GEMM in even batches and
    after the second in odd ones, so that launch order across streams changes
    from batch to batch."""
    manifest, ranks = gpu_records(exec_mode="graph", transfer="resident", comm="nccl", clock="cupti", procs=4,
                                  batches=6, trace_level="kernels")
    names = [GEMM, GEMM, GEMM, "sgd_update"]
    for r, recs in ranks.items():
        gpu = []
        for k in range(6):
            t0 = 1_000_000 * (k + 1)
            rows = [["compute", "graph", t0 + 10_000 * i, t0 + 10_000 * i + 8_000, 7, 0, None, n, None, 0]
                    for i, n in enumerate(names)]
            first = t0 + 5_000 + 10_000 * (k % 2)
            rows += [["comm", "graph", first + 3_000 * j, first + 3_000 * j + 2_000, 9, 0, None,
                      f"ncclDevKernel_AllReduce_{j}", None, 0] for j in range(2)]
            gpu.append({"kind": "gpu", "epoch": 0, "batch": k, "records": rows})
        recs[-2:-2] = gpu  # before the epoch and end lines, as the writer drains them between epochs
    return write_run(folder, (manifest, ranks))


def test_kernel_breakdown_numbers_each_streams_kernels_once(tmp_path):
    # the overlapped exchange's NCCL kernels run on a stream of their own and interleave with the GEMMs
    # differently from batch to batch: numbered per stream, every row of a rank's table is one kernel
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from kernel_breakdown import breakdown
    lines = breakdown(overlapped_kernels_run(tmp_path))
    tables, cur = [], None
    for line in lines:
        if line.startswith("rank "):
            cur = []
            tables.append(cur)
        elif cur is not None and line.startswith("| ") and not line.startswith(("| #", "| ---")):
            cur.append([c.strip() for c in line.strip("|").split("|")])
    assert len(tables) == 4
    for rows in tables:
        assert len(rows) == 6   # 4 kernels on the step's stream, 2 on the communication stream
        numbers = [r[0] for r in rows]
        assert len(numbers) == len(set(numbers))
        nccl = [r for r in rows if r[1] == "NCCL"]
        assert nccl and all(r[0].startswith("1.") for r in nccl)          # the communication stream
        assert all(r[0].startswith("0.") for r in rows if r[1] != "NCCL")  # the step's stream
