"""The model's host terms as calibrated: the host's time per launched
operation with p ranks launching at once (host_dispatch_s), host MPI
through the staged buffer's memory (allreduce_s memory) and the GPU's time
per graph replay (graph_replay_gap_s)."""
import dataclasses
import math
import re
from pathlib import Path

import pytest

from perfmlp.model.machine import MachineError, load_machine, machine_from_mapping
from perfmlp.model.predict import predict_batch
from perfmlp.model.scaled import scaled_values


def _values(**extra):
    m = load_machine("quadro-rtx-6000")
    d = {k: getattr(m, k) for k in m.__dataclass_fields__
         if k not in ("path", "gemm_flops_per_s", "date", "traced_launch_overhead_s")}
    d.update(launch_overhead_s=10e-6, trace_phase_host_s=3e-6, **extra)
    return d


DISPATCH = [{"procs": 2, "launch_s": 20e-6, "trace_phase_s": 5e-6},
            {"procs": 4, "launch_s": 16e-6, "trace_phase_s": 4e-6}]


def test_launch_time_per_process_count():
    m = machine_from_mapping(_values(host_dispatch_s=DISPATCH), "x.yaml")
    assert m.launch_s(1) == 10e-6 and m.trace_host_s(1) == 3e-6          # one rank alone
    assert m.launch_s(2) == 20e-6 and m.trace_host_s(4) == 4e-6          # measured points
    assert m.launch_s(3) == pytest.approx(18e-6)                          # linear between 2 and 4
    assert m.launch_s(8) == 16e-6                                         # the last beyond it
    plain = machine_from_mapping(_values(), "x.yaml")
    assert plain.launch_s(4) == 10e-6 and plain.trace_host_s(4) == 3e-6   # no table: alone


@pytest.mark.parametrize("entry, words", [
    ({"procs": 2, "launch_s": 0, "trace_phase_s": 1e-6}, "host_dispatch_s[0] launch_s must be positive"),
    ({"procs": 2, "launch_s": 1e-5}, "host_dispatch_s[0] needs exactly procs, launch_s, trace_phase_s"),
])
def test_a_bad_dispatch_point_is_one_line(entry, words):
    with pytest.raises(MachineError, match=re.escape(words)):
        machine_from_mapping(_values(host_dispatch_s=[entry]), "x.yaml")


def test_an_eager_host_bound_step_pays_the_launch_time_of_its_process_count():
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode="eager", trace_level="counters")
    fast_nccl = dict(nccl_alpha_s=1e-6, nccl_bw_bytes_per_s=1e12)   # so that the host is the bound
    slow = machine_from_mapping(_values(host_dispatch_s=DISPATCH, **fast_nccl), "x.yaml")
    plain = machine_from_mapping(_values(**fast_nccl), "x.yaml")
    at4 = [predict_batch(m, (784, 512, 10), 3200, 4, **kw) for m in (plain, slow)]
    # host time per step: kernels + the collective call at the launch time, 5 phases of the tracer
    ops = at4[0].detail["host_s"] - 5 * 3e-6
    assert at4[1].detail["host_s"] == pytest.approx(ops * 16e-6 / 10e-6 + 5 * 4e-6)
    assert at4[1].total_s > at4[0].total_s
    at1 = [predict_batch(m, (784, 512, 10), 3200, 1, **kw) for m in (plain, slow)]
    assert at1[0] == dataclasses.replace(at1[1], machine=at1[0].machine)   # one rank: the table plays no part


def _with_mpi_points(memories):
    pts = [{"comm": "mpi", "procs": 2, "bytes": n, "s": s * (2 if mem == "pageable" else 1), "memory": mem}
           for mem in memories for n, s in ((10**5, 1e-4), (10**7, 1e-2))]
    return machine_from_mapping(_values(allreduce_s=pts), "x.yaml")


def test_host_mpi_through_the_staged_buffers_memory():
    both, pinned_only = _with_mpi_points(("pinned", "pageable")), _with_mpi_points(("pinned",))
    args = ((784, 512, 10), 3200, 2)
    ar = {t: predict_batch(both, *args, comm="mpi-staged", batch_transfer=t).terms["allreduce"]
          for t in ("pageable", "pinned", "resident")}
    assert ar["pageable"] == pytest.approx(2 * ar["pinned"]) and ar["pinned"] == ar["resident"]
    # a file with pinned points only prices every staging memory by them
    assert predict_batch(pinned_only, *args, comm="mpi-staged", batch_transfer="pageable").terms["allreduce"] \
        == pytest.approx(ar["pinned"])
    with pytest.raises(MachineError, match=r"allreduce_s\[0\] memory must be one of pinned, pageable"):
        machine_from_mapping(_values(allreduce_s=[{"comm": "mpi", "procs": 2, "bytes": 8, "s": 1e-6,
                                                   "memory": "managed"}]), "x.yaml")


def test_host_mpi_on_one_rank_is_priced_by_its_measured_call():
    """One process still calls MPI_Allreduce in place: with one-rank points
    the staged step pays it (log-log between sizes, the nearest beyond
    them); a file without them prices 0, as before."""
    pts = [{"comm": "mpi", "procs": 1, "bytes": n, "s": s, "memory": "pinned"}
           for n, s in ((10**6, 4e-6), (10**8, 16e-6))]
    one, plain = machine_from_mapping(_values(allreduce_s=pts), "x.yaml"), machine_from_mapping(_values(), "x.yaml")
    H = 512   # gradients: 4 bytes x (784 x 512 + 512 + 512 x 10 + 10) = 1,628,200 bytes
    nbytes = 4 * (784 * H + H + H * 10 + 10)
    at = {m: predict_batch(m, (784, H, 10), 3200, 1, comm="mpi-staged", batch_transfer="pinned") for m in (one, plain)}
    # log-log between 1e6 and 1e8 bytes: 4 us x 4 ** log100(n / 1e6)
    assert at[one].terms["allreduce"] == pytest.approx(4e-6 * 4 ** (math.log(nbytes / 1e6) / math.log(100)))
    assert at[plain].terms["allreduce"] == 0.0
    assert at[one].total_s > at[plain].total_s
    tiny = predict_batch(one, (784, 4, 10), 3200, 1, comm="mpi-staged", batch_transfer="pinned")
    assert tiny.terms["allreduce"] == 4e-6                                        # below the table: its first point
    nccl = predict_batch(one, (784, H, 10), 3200, 1, comm="nccl", batch_transfer="pinned")
    assert nccl.terms["allreduce"] == 0.0                                         # no NCCL point on one rank


def test_prefetched_pieces_share_the_link_with_the_staged_gradients():
    """With the gradients staged, their copy back and the prefetched pieces'
    copies take the same host-to-device link: a pipeline-bound step takes
    their sum, not the pipeline alone."""
    m = machine_from_mapping(_values(), "x.yaml")
    kw = dict(batch_transfer="prefetch", exec_mode="graph")
    staged = predict_batch(m, (784, 512, 10), 12800, 1, comm="mpi-staged", **kw)
    pipe = staged.detail["prefetch_s"]
    rest = staged.total_s - staged.terms["h2d_batch"]
    assert staged.total_s == pytest.approx(max(pipe, rest))
    assert pipe == pytest.approx(predict_batch(m, (784, 512, 10), 12800, 1, comm="nccl", **kw).detail["prefetch_s"]
                                 + staged.terms["h2d_grad"])


def test_a_graph_replay_costs_its_gap_on_the_gpu():
    base = machine_from_mapping(_values(), "x.yaml")
    gap = dataclasses.replace(base, graph_replay_gap_s=3e-6)
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode="graph")
    a, b = (predict_batch(m, (784, 512, 10), 3200, 1, **kw) for m in (base, gap))
    assert b.total_s - a.total_s == pytest.approx(3e-6)   # GPU-bound: the replay gap adds in full
    assert b.terms["graph_launch"] - a.terms["graph_launch"] == pytest.approx(3e-6)
    eager = [predict_batch(m, (784, 512, 10), 3200, 1, comm="nccl", batch_transfer="resident") for m in (base, gap)]
    assert eager[0].total_s == eager[1].total_s


def test_a_calibration_carried_to_another_gpu_keeps_the_host_terms():
    cal = machine_from_mapping(_values(host_dispatch_s=DISPATCH, allreduce_s=[
        {"comm": "mpi", "procs": 2, "bytes": 8, "s": 1e-6, "memory": "pageable"}]), "x.yaml")
    v = scaled_values(cal, load_machine("h200"), load_machine("h100-sxm"))
    assert v["host_dispatch_s"] == DISPATCH   # the host's, as measured
    assert v["allreduce_s"][0]["memory"] == "pageable"
    assert machine_from_mapping(v, "y.yaml").launch_s(4) == 16e-6


D2D = [{"bytes": 32_000, "s": 1.3e-6}, {"bytes": 2_508_800, "s": 4.3e-6}, {"bytes": 10_035_200, "s": 6.0e-6}]


def test_a_device_copy_costs_its_measured_time():
    m = machine_from_mapping(_values(d2d_copy_s=D2D), "x.yaml")
    assert m.device_copy_s(2_508_800) == pytest.approx(4.3e-6)            # a measured point
    assert m.device_copy_s(1_000) == pytest.approx(1.3e-6)                 # below the smallest: its time
    mid = (2_508_800 + 10_035_200) // 2
    assert m.device_copy_s(mid) == pytest.approx(5.15e-6, rel=1e-3)        # linear between points
    beyond = m.device_copy_s(20_070_400)                                    # the rest read + written at mem bw
    assert beyond == pytest.approx(6.0e-6 + 2 * 10_035_200 / m.mem_bw_bytes_per_s)
    plain = machine_from_mapping(_values(), "x.yaml")
    assert plain.device_copy_s(10_035_200) == pytest.approx(2 * 10_035_200 / plain.mem_bw_bytes_per_s)


def test_a_graph_step_with_resident_data_pays_its_static_copies():
    plain = machine_from_mapping(_values(), "x.yaml")
    copies = machine_from_mapping(_values(d2d_copy_s=D2D), "x.yaml")
    kw = dict(comm="nccl", batch_transfer="resident", exec_mode="graph")
    a, b = (predict_batch(m, (784, 512, 10), 3200, 4, **kw) for m in (plain, copies))
    # b = 800 a rank: X's piece 2,508,800 B, Y's 32,000 B
    want = 4.3e-6 + 1.3e-6 - sum(2 * 4 * 800 * n / plain.mem_bw_bytes_per_s for n in (784, 10))
    assert b.terms["elementwise"] - a.terms["elementwise"] == pytest.approx(want)
    eager = [predict_batch(m, (784, 512, 10), 3200, 4, comm="nccl", batch_transfer="resident") for m in (plain, copies)]
    assert eager[0].total_s == eager[1].total_s   # an eager step reads the resident rows in place


SHARED = [{"procs": 2, "direction": "h2d", "memory": "pinned", "bytes_per_s": 60e9},
          {"procs": 4, "direction": "h2d", "memory": "pinned", "bytes_per_s": 160e9}]


def test_copies_of_several_ranks_share_the_aggregate_of_their_count():
    own = dict(h2d_pinned_bytes_per_s=50e9)
    m = machine_from_mapping(_values(copy_aggregate_bytes_per_s=SHARED, **own), "x.yaml")
    assert m.shared_copy_bw("h2d", "pinned", 1) == 50e9
    assert m.shared_copy_bw("h2d", "pinned", 2) == pytest.approx(30e9)    # two ranks share 60 GB/s
    assert m.shared_copy_bw("h2d", "pinned", 4) == pytest.approx(40e9)    # four share 160
    assert m.shared_copy_bw("h2d", "pinned", 3) == pytest.approx(110e9 / 3)   # aggregate linear in p
    assert m.shared_copy_bw("h2d", "pinned", 8) == pytest.approx(20e9)    # the last aggregate beyond
    assert m.shared_copy_bw("d2h", "pinned", 4) == m.copy_bw("d2h", "pinned")   # no point of that kind
    old = machine_from_mapping(_values(h2d_pinned_aggregate_bytes_per_s=120e9, **own), "x.yaml")
    assert old.shared_copy_bw("h2d", "pinned", 2) == 50e9 and old.shared_copy_bw("h2d", "pinned", 4) == 30e9


@pytest.mark.parametrize("key, entry, words", [
    ("copy_aggregate_bytes_per_s", {"procs": 2, "direction": "d2d", "memory": "pinned", "bytes_per_s": 1e9},
     "copy_aggregate_bytes_per_s[0] direction must be one of"),
    ("copy_aggregate_bytes_per_s", {"procs": 2, "direction": "h2d", "memory": "pinned"},
     "copy_aggregate_bytes_per_s[0] needs exactly procs, direction, memory, bytes_per_s"),
    ("d2d_copy_s", {"bytes": 0, "s": 1e-6}, "d2d_copy_s[0] bytes must be positive"),
])
def test_a_bad_copy_point_is_one_line(key, entry, words):
    with pytest.raises(MachineError, match=re.escape(words)):
        machine_from_mapping(_values(**{key: [entry]}), "x.yaml")


def test_carried_to_another_gpu_copies_scale_by_their_datasheet_ratios():
    cal = machine_from_mapping(_values(copy_aggregate_bytes_per_s=SHARED, d2d_copy_s=D2D), "x.yaml")
    h200, h100 = load_machine("h200"), load_machine("h100-sxm")
    v = scaled_values(cal, h200, h100)
    pcie = h100.h2d_pinned_bytes_per_s / h200.h2d_pinned_bytes_per_s
    assert [p["bytes_per_s"] for p in v["copy_aggregate_bytes_per_s"]] == pytest.approx([60e9 * pcie, 160e9 * pcie])
    mem = h100.mem_bw_bytes_per_s / h200.mem_bw_bytes_per_s
    moved = 2 * 10_035_200 / cal.mem_bw_bytes_per_s
    assert v["d2d_copy_s"][2]["s"] == pytest.approx(max(6.0e-6 - moved, 0) + moved / mem)
    small = 2 * 32_000 / cal.mem_bw_bytes_per_s   # a small copy: mostly its fixed cost, kept as measured
    assert machine_from_mapping(v, "y.yaml").device_copy_s(32_000) == pytest.approx(1.3e-6 - small + small / mem)


HOST = [{"procs": 1, "direction": "h2d", "memory": "pageable", "bytes": n, "s": s}
        for n, s in ((1_254_400, 200e-6), (5_017_600, 650e-6), (10_035_200, 1250e-6))] + \
       [{"procs": 2, "direction": "h2d", "memory": "pageable", "bytes": n, "s": s}
        for n, s in ((1_254_400, 250e-6), (1_628_204, 290e-6), (6_512_684, 950e-6), (10_035_200, 1400e-6))] + \
       [{"procs": 2, "direction": "h2d", "memory": "pageable", "bytes": n, "s": s, "buffer": "reduced"}
        for n, s in ((1_628_204, 120e-6), (6_512_684, 560e-6))]


def test_a_host_copy_costs_its_measured_time_at_its_rank_count():
    m = machine_from_mapping(_values(host_copy_s=HOST, h2d_pageable_bytes_per_s=8e9,
                                     copy_aggregate_bytes_per_s=[{"procs": 2, "direction": "h2d",
                                                                  "memory": "pageable", "bytes_per_s": 14e9}]),
                             "x.yaml")
    assert m.copy_s("h2d", "pageable", 5_017_600) == pytest.approx(650e-6)                # alone, measured
    assert m.copy_s("h2d", "pageable", 5_017_600, sharing=2) == pytest.approx(
        290e-6 + (950e-6 - 290e-6) * (5_017_600 - 1_628_204) / (6_512_684 - 1_628_204))  # two ranks, between
    assert m.copy_s("h2d", "pageable", 100_000, sharing=2) == pytest.approx(250e-6)       # the smallest's, below
    assert m.copy_s("h2d", "pageable", 20_070_400, sharing=2) == pytest.approx(
        1400e-6 + 10_035_200 / 7e9)                                                      # beyond: the shared rate
    # the staged gradient's copy back from the buffer MPI just reduced; at a count without such points, rotating
    assert m.copy_s("h2d", "pageable", 6_512_684, sharing=2, buffer="reduced") == pytest.approx(560e-6)
    assert m.copy_s("h2d", "pageable", 5_017_600, buffer="reduced") == pytest.approx(650e-6)
    # no points of a kind or count: latency + bytes over the (shared) bandwidth, as before
    lat = m.h2d_pinned_latency_s or m.copy_latency_s
    assert m.copy_s("h2d", "pinned", 10**6, sharing=4) == pytest.approx(lat + 10**6 / m.shared_copy_bw("h2d", "pinned", 4))


def test_the_staged_exchange_copies_back_from_the_reduced_buffer_at_p_above_one():
    m = machine_from_mapping(_values(host_copy_s=HOST), "x.yaml")
    grad = 1_628_204   # H = 512, float32: (784 x 512 + 512 + 512 x 10 + 10 + 1) x 4
    two = predict_batch(m, (784, 512, 10), 3200, 2, comm="mpi-staged", batch_transfer="pageable")
    assert two.terms["h2d_grad"] == pytest.approx(120e-6)
    assert two.terms["h2d_batch"] == pytest.approx(m.copy_s("h2d", "pageable", 4 * 1600 * 784, sharing=2)
                                                   + m.copy_s("h2d", "pageable", 4 * 1600 * 10, sharing=2))
    one = predict_batch(m, (784, 512, 10), 3200, 1, comm="mpi-staged", batch_transfer="pageable")
    assert one.terms["h2d_grad"] == pytest.approx(m.copy_s("h2d", "pageable", grad))   # no MPI at p = 1


@pytest.mark.parametrize("entry, words", [
    ({"procs": 2, "direction": "h2d", "memory": "pageable", "bytes": 8, "s": 1e-6, "buffer": "stale"},
     "host_copy_s[0] buffer must be one of rotating, reduced, cached"),
    ({"procs": 2, "direction": "h2d", "memory": "pageable", "bytes": 8}, "host_copy_s[0] needs exactly"),
])
def test_a_bad_host_copy_point_is_one_line(entry, words):
    with pytest.raises(MachineError, match=re.escape(words)):
        machine_from_mapping(_values(host_copy_s=[entry]), "x.yaml")
    with pytest.raises(MachineError, match=re.escape("host_copy_s[1] repeats host_copy_s[0] (1 h2d pinned")):
        machine_from_mapping(_values(host_copy_s=[HOST[0] | {"memory": "pinned"}] * 2), "x.yaml")


def test_carried_to_another_gpu_a_host_copy_keeps_its_latency():
    cal = machine_from_mapping(_values(host_copy_s=HOST), "x.yaml")
    h200, h100 = load_machine("h200"), load_machine("h100-sxm")
    v = scaled_values(cal, h200, h100)
    r = h100.h2d_pageable_bytes_per_s / h200.h2d_pageable_bytes_per_s
    lat = cal.h2d_pageable_latency_s or cal.copy_latency_s
    assert [p["s"] for p in v["host_copy_s"]] == pytest.approx([lat + (p["s"] - lat) / r for p in HOST])
    assert [p["buffer"] for p in v["host_copy_s"]][-1] == "reduced"
    machine_from_mapping(v, "y.yaml")


def test_the_calibration_takes_the_mean_of_its_two_dispatch_draws():
    from perfmlp.calibrate.host import mean_dispatch
    a = {"launch_overhead_s": 10e-6, "trace_phase_host_s": 4e-6, "graph_step_host_s": 50e-6,
         "static_copy_host_s": 5e-6, "pinned_copy_host_s": 20e-6, "host_dispatch_s": DISPATCH}
    b = {"launch_overhead_s": 14e-6, "trace_phase_host_s": 2e-6, "graph_step_host_s": 70e-6,
         "static_copy_host_s": 7e-6, "pinned_copy_host_s": 30e-6,
         "host_dispatch_s": [{**d, "launch_s": 2 * d["launch_s"]} for d in DISPATCH]}
    m = mean_dispatch(a, b)
    assert m["launch_overhead_s"] == pytest.approx(12e-6) and m["trace_phase_host_s"] == pytest.approx(3e-6)
    assert m["graph_step_host_s"] == pytest.approx(60e-6)
    assert m["static_copy_host_s"] == pytest.approx(6e-6) and m["pinned_copy_host_s"] == pytest.approx(25e-6)
    assert [d["launch_s"] for d in m["host_dispatch_s"]] == pytest.approx([30e-6, 24e-6])
    assert [d["procs"] for d in m["host_dispatch_s"]] == [2, 4]
    assert mean_dispatch({}, {}) == {}   # ranks other than 0


AHEAD = [{"procs": 2, "direction": "h2d", "memory": "pageable", "bytes": n, "s": s, "ahead_s": a, "blocks": b}
         for n, s, a, b in ((16_000, 30e-6, 25e-6, False), (1_254_400, 250e-6, 200e-6, False),
                            (10_035_200, 1400e-6, 300e-6, True))]


def test_a_pageable_copy_stages_ahead_as_measured_at_its_size():
    m = machine_from_mapping(_values(host_copy_s=AHEAD), "x.yaml")
    assert m.pageable_ahead(1_254_400, sharing=2) == (pytest.approx(200e-6), False)
    mid = 200e-6 + 100e-6 * (5_000_000 - 1_254_400) / (10_035_200 - 1_254_400)
    assert m.pageable_ahead(5_000_000, sharing=2) == (pytest.approx(mid), True)          # blocks: the next point's
    assert m.pageable_ahead(20_070_400, sharing=2) == (pytest.approx(300e-6), True)      # beyond: the largest's
    assert m.pageable_ahead(8_000, sharing=2) == (pytest.approx(25e-6), False)
    assert m.pageable_ahead(1_254_400) == (0.0, True)   # no such points at one rank: the copy waits for the stream


def test_staging_ahead_hides_a_pageable_copy_behind_the_replay_before_it():
    # H = 512, B = 800 on 2 ranks in graph mode: the 1.25 MB piece is staged while the last replay runs
    base = _values(host_copy_s=[{k: v for k, v in p.items() if k not in ("ahead_s", "blocks")} for p in AHEAD],
                   graph_launch_s=5e-6)
    args = dict(comm="nccl", batch_transfer="pageable", exec_mode="graph")
    serial = predict_batch(machine_from_mapping(base, "x.yaml"), (784, 4096, 10), 800, 2, **args)
    staged = predict_batch(machine_from_mapping({**base, "host_copy_s": AHEAD}, "x.yaml"), (784, 4096, 10), 800, 2,
                           **args)
    assert serial.detail["h2d_hidden_s"] == 0.0
    hidden = staged.detail["h2d_hidden_s"]
    assert hidden > 200e-6   # the piece's staging, and the launches that no longer wait for it
    # off the copies: what the host staged ahead (200 + 25); the rest off the graph launch
    assert staged.terms["h2d_batch"] == pytest.approx(serial.terms["h2d_batch"] - 225e-6)
    assert staged.terms["graph_launch"] == pytest.approx(serial.terms["graph_launch"] - (hidden - 225e-6))
    assert staged.total_s == pytest.approx(serial.total_s - hidden)
    # a 10 MB piece (B = 6400) is not staged whole: it waits for the stream with all of it, as without the points
    big = [predict_batch(machine_from_mapping(v, "x.yaml"), (784, 4096, 10), 6400, 2, **args)
           for v in (base, {**base, "host_copy_s": AHEAD})]
    assert big[1].detail["h2d_hidden_s"] <= 25e-6   # at most Y's 32 KB, staged whole
    assert big[1].total_s == pytest.approx(big[0].total_s - big[1].detail["h2d_hidden_s"])
    # resident data has no copy to stage
    res = predict_batch(machine_from_mapping({**base, "host_copy_s": AHEAD}, "x.yaml"), (784, 4096, 10), 800, 2,
                        comm="nccl", batch_transfer="resident", exec_mode="graph")
    assert res.detail["h2d_hidden_s"] == 0.0


def _delayed(delay_s):
    """AHEAD with the blocking 10 MB point's delay."""
    return [p | {"ahead_delay_s": delay_s} if p["blocks"] else p for p in AHEAD]


def test_a_blocking_copy_has_its_delay_as_measured_at_its_size():
    m = machine_from_mapping(_values(host_copy_s=_delayed(80e-6)), "x.yaml")
    assert m.pageable_ahead_delay(10_035_200, sharing=2) == pytest.approx(80e-6)
    assert m.pageable_ahead_delay(5_000_000, sharing=2) == pytest.approx(80e-6)   # the one point's, nearest
    assert m.pageable_ahead_delay(10_035_200) is None                              # no point at one rank
    assert machine_from_mapping(_values(host_copy_s=AHEAD), "x.yaml").pageable_ahead_delay(10_035_200, 2) is None


def test_a_copy_staged_in_part_hides_the_replay_before_it_less_its_delay():
    # H = 4096, B = 6400 on 2 ranks in graph mode: the 10 MB piece stages 300 us while the last replay runs
    args = dict(comm="nccl", batch_transfer="pageable", exec_mode="graph")
    m = {d: machine_from_mapping(_values(host_copy_s=_delayed(d) if d is not None else AHEAD, graph_launch_s=5e-6),
                                 "x.yaml") for d in (None, 0.0, 100e-6, 1.0)}
    p = {d: predict_batch(m[d], (784, 4096, 10), 6400, 2, **args) for d in m}
    replay = p[None].terms["gemm"] + p[None].terms["elementwise"]
    assert replay > 400e-6   # more queued than the 300 us staged ahead and the delay together
    y = p[None].detail["h2d_hidden_s"]                  # without a delay measured: Y's 32 KB only
    assert p[0.0].detail["h2d_hidden_s"] == pytest.approx(y + 300e-6)
    assert p[100e-6].detail["h2d_hidden_s"] == pytest.approx(y + 300e-6)   # 100 us of delay: still 300 queued
    assert p[1.0].detail["h2d_hidden_s"] == pytest.approx(y)               # a delay longer than the replay
    assert p[0.0].terms["h2d_batch"] == pytest.approx(p[None].terms["h2d_batch"] - 300e-6)
    assert p[0.0].total_s == pytest.approx(p[None].total_s - 300e-6)


@pytest.mark.parametrize("extra, words", [
    ({"memory": "pinned", "ahead_s": 1e-6}, "ahead_s and blocks are for pageable h2d copies, not pinned h2d"),
    ({"blocks": "yes", "ahead_s": 1e-6}, "blocks must be true or false, got 'yes'"),
    ({"ahead_s": -1e-6}, "ahead_s must not be negative, got -1e-06"),
    ({"ahead_delay_s": 1e-6}, "ahead_delay_s is for a copy that blocks, with its ahead_s"),
    ({"ahead_s": 1e-6, "blocks": True, "ahead_delay_s": -1e-6}, "ahead_delay_s must not be negative, got -1e-06"),
])
def test_a_bad_staging_point_is_one_line(extra, words):
    with pytest.raises(MachineError, match=re.escape(f"host_copy_s[0] {words}")):
        machine_from_mapping(_values(host_copy_s=[AHEAD[0] | extra]), "x.yaml")


def test_carried_to_another_gpu_the_staging_ahead_stays_as_measured():
    v = scaled_values(machine_from_mapping(_values(host_copy_s=AHEAD), "x.yaml"), load_machine("h200"),
                      load_machine("h100-sxm"))
    assert [(p["ahead_s"], p["blocks"]) for p in v["host_copy_s"]] == [(p["ahead_s"], p["blocks"]) for p in AHEAD]
    assert machine_from_mapping(v, "y.yaml").pageable_ahead(1_254_400, sharing=2)[0] == pytest.approx(200e-6)
    w = scaled_values(machine_from_mapping(_values(host_copy_s=_delayed(80e-6)), "x.yaml"), load_machine("h200"),
                      load_machine("h100-sxm"))
    assert machine_from_mapping(w, "y.yaml").pageable_ahead_delay(10_035_200, sharing=2) == pytest.approx(80e-6)


PREFETCH_PTS = [{"exec": "graph", "source": "prefetch", "bytes": 635_200, "s": 40e-6, "loop_s": 30e-6},
                {"exec": "graph", "source": "prefetch", "bytes": 5_081_600, "s": 220e-6, "loop_s": 30e-6},
                {"exec": "graph", "source": "prefetch-pageable", "bytes": 635_200, "s": 280e-6, "loop_s": 30e-6},
                {"exec": "graph", "source": "prefetch-pageable", "bytes": 5_081_600, "s": 1000e-6, "loop_s": 30e-6}]


def test_the_input_pipeline_runs_at_the_pace_calibrated_beside_the_loop():
    m = machine_from_mapping(_values(prefetch_s=PREFETCH_PTS), "x.yaml")
    # linear in bytes between the points, the smallest's below, in proportion beyond the largest
    assert m.prefetch_pace("graph", "prefetch-pageable", 2 * 635_200) == pytest.approx(280e-6 + 720e-6 * 635_200 /
                                                                                      (5_081_600 - 635_200))
    assert m.prefetch_pace("graph", "prefetch-pageable", 1000) == pytest.approx(280e-6)
    assert m.prefetch_pace("graph", "prefetch-pageable", 2 * 5_081_600) == pytest.approx(2000e-6)
    assert m.prefetch_pace("eager", "prefetch-pageable", 635_200) is None
    # the loop's calls: the smallest pinned point's step less the resident loop's
    assert m.prefetch_host_s("graph") == pytest.approx(10e-6) and m.prefetch_host_s("eager") is None
    sizes = (784, 512, 10)
    staged = predict_batch(m, sizes, 400, 1, "fp16", "nccl", "prefetch-pageable", None, exec_mode="graph")
    assert staged.detail["prefetch_s"] == pytest.approx(280e-6)   # 400 x 794 x 2 = 635,200 bytes
    assert staged.total_s == pytest.approx(280e-6)                # the pipeline is the longer: it sets the pace
    eager = predict_batch(m, sizes, 400, 1, "fp16", "nccl", "prefetch-pageable", None, exec_mode="eager")
    copies = m.copy_s("h2d", "pinned", 2 * 400 * 784) + m.copy_s("h2d", "pinned", 2 * 400 * 10)
    assert eager.detail["prefetch_s"] == pytest.approx(max(copies, 635_200 / m.stage_bw()))   # no eager points
    # from pinned memory the copies set the pipeline's time, and the loop pays its calls as measured
    plain = machine_from_mapping(_values(), "x.yaml")
    pinned, before = (predict_batch(x, sizes, 400, 1, "fp16", "nccl", "prefetch", None, exec_mode="graph")
                      for x in (m, plain))
    assert pinned.detail["host_s"] == pytest.approx(before.detail["host_s"] - 6 * plain.launch_overhead_s + 10e-6)


@pytest.mark.parametrize("entry, words", [
    ({"exec": "graph", "source": "pinned", "bytes": 8, "s": 1e-6, "loop_s": 1e-6}, "prefetch_s[0] source must be"),
    ({"exec": "graph", "source": "prefetch", "bytes": 8, "s": 1e-6}, "prefetch_s[0] needs exactly"),
])
def test_a_bad_prefetch_point_is_one_line(entry, words):
    with pytest.raises(MachineError, match=re.escape(words)):
        machine_from_mapping(_values(prefetch_s=[entry]), "x.yaml")


def test_the_pipeline_is_calibrated_at_the_pieces_bytes_in_float32_rows():
    from perfmlp.calibrate.pipeline import rows_for
    # a bf16 piece of 400 samples holds the bytes of 200 float32 rows; sizes repeated once
    assert rows_for([2 * 400 * 794, 4 * 400 * 794, 4 * 200 * 794, 2 * 1600 * 794]) == [200, 400, 800]


def test_a_file_with_the_retired_warm_source_copies_loads_and_predicts_as_without_them():
    path = Path(__file__).resolve().parents[1] / "reports/h100/benchmarks/validate-precision3/calibrated.yaml"
    m = load_machine(str(path))
    assert any(p.buffer == "cached" for p in m.host_copy_s)
    plain = dataclasses.replace(m, host_copy_s=tuple(p for p in m.host_copy_s if p.buffer != "cached"))
    for transfer in ("pageable", "prefetch-pageable"):
        a, b = (predict_batch(x, (784, 512, 10), 400, 1, "bf16", "nccl", transfer, None, exec_mode="graph")
                for x in (m, plain))
        assert a.total_s == b.total_s


def test_a_batch_copys_call_costs_the_host_what_the_calibration_measured_for_its_kind():
    from perfmlp.model.predict.timeline import copy_call_host_s
    plain = machine_from_mapping(_values(), "x.yaml")
    m = machine_from_mapping(_values(static_copy_host_s=6e-6, pinned_copy_host_s=30e-6, graph_launch_s=4e-6,
                                     graph_step_host_s=100e-6), "x.yaml")
    assert copy_call_host_s(plain, "resident", 17e-6) == copy_call_host_s(plain, "pinned", 17e-6) == 17e-6
    assert copy_call_host_s(m, "resident", 17e-6) == 6e-6 and copy_call_host_s(m, "pinned", 17e-6) == 30e-6
    # a pageable copy's calibrated time is the call's whole wall time: no launch on top of it
    assert copy_call_host_s(plain, "pageable", 17e-6) == 17e-6
    staged = machine_from_mapping(_values(host_copy_s=AHEAD[:1]), "x.yaml")
    assert copy_call_host_s(staged, "pageable", 17e-6) == 0.0
    # the graph loop: the step's host less its two static copies as measured and the launch
    from perfmlp.model.predict import graph_loop_host_s
    assert graph_loop_host_s(m) == pytest.approx(100e-6 - 2 * 6e-6 - 4e-6)
    # a host-bound pinned step pays its two copy calls as measured: 2 x 13 us more than at 17 us
    kw = dict(layer_sizes=(784, 16, 10), batch=16, procs=1, comm="nccl", batch_transfer="pinned", exec_mode="eager")
    a = predict_batch(machine_from_mapping(_values(pinned_copy_host_s=17e-6), "x.yaml"), **kw).total_s
    b = predict_batch(machine_from_mapping(_values(pinned_copy_host_s=30e-6), "x.yaml"), **kw).total_s
    assert b - a == pytest.approx(2 * 13e-6, rel=1e-6)


def test_a_prefetched_graph_step_adds_back_the_static_copies_the_calibrations_resident_loop_made():
    from perfmlp.model.predict.timeline import prefetch_calls_s
    from perfmlp.model.predict import Step
    pts = [{"exec": "graph", "source": "prefetch", "bytes": 1000, "s": 60e-6, "loop_s": 40e-6}]
    without = machine_from_mapping(_values(prefetch_s=pts), "x.yaml")
    m = machine_from_mapping(_values(prefetch_s=pts, static_copy_host_s=6e-6), "x.yaml")

    def calls(machine, transfer, graph=True):
        return prefetch_calls_s(machine, Step(machine, {}, [], transfer, "nccl", {}, graph, 1e-5, 0.0, 0.0, False))
    assert calls(without, "prefetch") == pytest.approx(20e-6) and calls(m, "prefetch") == pytest.approx(32e-6)
    assert calls(m, "prefetch-pageable") == pytest.approx(32e-6 * 4 / 6)
