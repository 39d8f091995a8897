"""The model's two corrected biases, each priced by a calibrated figure
with the microbenchmark that measures it: the eager step's launches after
its pageable batch copies (pageable_launch_factor) and the launch gap
inside a kernel's back-to-back time, taken off in a replayed graph
(queued_gap_s). CPU tests of the model; GPU tests of the microbenchmarks
(skipped without CuPy and a GPU)."""
import pytest
import yaml

from conftest import gpu
from perfmlp.model import predict_batch
from perfmlp.model.machine import MachineError, machine_from_mapping
from perfmlp.model.predict.compute import measured
from perfmlp.model.costs import step_kernels, widths

CALIBRATED = "tests/data/h200-x2-calibrated.yaml"
SIZES = (784, 512, 10)


def calibrated(**extra):
    with open(CALIBRATED) as f:
        data = yaml.safe_load(f)
    return machine_from_mapping({**data, **extra}, "x.yaml")


def predict(m, transfer, exec_mode, comm="nccl", sizes=SIZES, B=800):
    return predict_batch(m, sizes, B, 1, "float32", comm, transfer, None, exec_mode=exec_mode)


def test_launches_after_a_pageable_copy_are_slower_by_the_calibrated_factor():
    base = calibrated()
    slow = calibrated(pageable_launch_factor=[{"hidden": 512, "batch": 800, "factor": 1.3},
                                              {"hidden": 4096, "batch": 12800, "factor": 1.0}])
    assert slow.pageable_launch(512, 1000) == 1.3 and slow.pageable_launch(4000, 12000) == 1.0
    assert base.pageable_launch(512, 800) == 1.0                   # a file without it: as before
    a, b = predict(base, "pageable", "eager"), predict(slow, "pageable", "eager")
    # the host launches the step's operations 1.3 x slower: what the timeline adds grows, the GPU's terms do not
    assert b.detail["host_s"] > a.detail["host_s"] and b.terms["launches"] > a.terms["launches"]
    assert b.total_s > a.total_s and b.terms["gemm"] == a.terms["gemm"]
    for transfer, exec_mode in (("pinned", "eager"), ("resident", "eager"), ("pageable", "graph")):
        assert predict(slow, transfer, exec_mode).total_s == predict(base, transfer, exec_mode).total_s


def test_launches_after_pinned_or_prefetched_copies_are_slower_by_their_own_factor():
    base = calibrated()
    slow = calibrated(pinned_launch_factor=[{"hidden": 512, "batch": 800, "factor": 1.2}])
    assert slow.pinned_launch(512, 800) == 1.2 and base.pinned_launch(512, 800) == 1.0
    for transfer in ("pinned", "prefetch", "prefetch-pageable"):   # the prefetched copies come from pinned memory
        a, b = predict(base, transfer, "eager"), predict(slow, transfer, "eager")
        assert b.detail["host_s"] > a.detail["host_s"] and b.terms["gemm"] == a.terms["gemm"]
    for transfer, exec_mode in (("pageable", "eager"), ("resident", "eager"), ("pinned", "graph")):
        assert predict(slow, transfer, exec_mode).total_s == predict(base, transfer, exec_mode).total_s


def test_a_replayed_graph_takes_the_queued_gap_off_each_measured_kernel():
    base, gapped = calibrated(), calibrated(queued_gap_s=1e-6)
    a, b = predict(base, "resident", "graph"), predict(gapped, "resident", "graph")
    kernels = [k for ks in step_kernels(SIZES, 800, None, widths("float32")).values() for k in ks]
    n = sum(measured(base, k, "float32", "cublas") for k in kernels)
    assert 0 < n <= len(kernels)
    # each measured kernel 1 us shorter: gemm and elementwise together n us less, the gaps unchanged
    assert (a.terms["gemm"] + a.terms["elementwise"]) - (b.terms["gemm"] + b.terms["elementwise"]) == \
        pytest.approx(n * 1e-6)
    assert b.terms["kernel_gaps"] == a.terms["kernel_gaps"] and b.total_s < a.total_s
    assert predict(gapped, "resident", "eager").total_s == predict(base, "resident", "eager").total_s


def test_the_correction_weighs_most_where_kernels_are_short():
    m = calibrated(queued_gap_s=1.3e-6)   # about one H200's kernel_gap_s
    ratio = {H: predict(m, "resident", "graph", sizes=(784, H, 10)).total_s /
             predict(calibrated(), "resident", "graph", sizes=(784, H, 10)).total_s for H in (256, 2048)}
    assert ratio[256] < ratio[2048] < 1


@pytest.mark.parametrize("entry, words", [
    ({"source": "weather", "ratios": [1.0, 1.1]}, "source must be one of"),
    ({"source": "host", "ratios": [1.0]}, "at least 2"),
    ({"source": "host", "ratios": [1.0, -1.0]}, "ratios[1]"),
])
def test_bad_spread_entries_are_one_line_errors(entry, words):
    with pytest.raises(MachineError) as e:
        calibrated(spread=[entry])
    assert words in str(e.value) and "spread[0]" in str(e.value)


def test_a_spread_table_loads_sorted():
    m = calibrated(spread=[{"source": "host", "ratios": [1.2, 0.9, 1.0]}])
    assert m.spread[0].ratios == (0.9, 1.0, 1.2)
    with pytest.raises(MachineError, match="repeats"):
        calibrated(spread=[{"source": "host", "ratios": [1.0, 1.1]}, {"source": "host", "ratios": [1.0, 1.2]}])


# ---- the microbenchmarks, on the GPU ---------------------------------------------------------

@gpu
def test_copied_launch_factors_time_the_launches_after_the_copies():
    import cupy as cp
    from perfmlp.calibrate.host import copied_launch_factors
    lines = []
    out = copied_launch_factors(cp, [256], [400, 3200], lines.append, rounds=2, reps=5)
    assert set(out) == {"pageable_launch_factor", "pinned_launch_factor"}
    for factors in out.values():
        assert [(e["hidden"], e["batch"]) for e in factors] == [(256, 400), (256, 3200)]
        assert all(0.5 < e["factor"] < 10 for e in factors)
    assert len(lines) == 2 and "pageable" in lines[0] and "pinned" in lines[1]
    calibrated(**out)   # it loads


@gpu
def test_queued_gap_is_the_eager_gap_inside_a_kernels_time():
    import cupy as cp
    from perfmlp.calibrate.gemm import step_network
    from perfmlp.calibrate.kernels import kernel_gaps, queued_gap
    lines = []
    gaps = kernel_gaps(cp, lines.append)
    net, x, y = step_network(cp, SIZES, "float32", 400)
    res = queued_gap(cp, net, x, y, gaps["graph_kernel_gap_s"], lines.append, calls=20)
    # a gap is about a microsecond: more than the graph's own, not more than a few eager gaps
    assert gaps["graph_kernel_gap_s"] <= res["queued_gap_s"] < 5 * gaps["kernel_gap_s"] + 1e-6
    assert "launch gap inside" in lines[-1]


@gpu
def test_the_calibration_records_spread_of_the_gpu_and_the_copies():
    import cupy as cp
    from perfmlp.calibrate import host_copies
    from perfmlp.calibrate.gemm import step_network
    from perfmlp.calibrate.spread import gpu_rounds, spread_table
    from perfmlp.comm import SingleWorld
    spread = {"gpu": gpu_rounds(cp, *step_network(cp, SIZES, "float32", 800), rounds=4, calls=5)}
    host_copies(cp, SingleWorld(), {"h2d": [32_000, 2_508_800], "d2h": [32_000]}, lambda m: None, spread)
    assert len(spread["gpu"]) == 4 and len(spread["pageable_copy"]) == 3 * 3   # 3 rounds x 3 points
    table = spread_table(spread)
    assert {e["source"] for e in table} == {"gpu", "pageable_copy", "pinned_copy"}
    assert calibrated(spread=table).spread                     # it loads


def test_a_replayed_graph_adds_the_calibrated_node_extra_to_each_kernels_gap():
    base, extra = calibrated(), calibrated(graph_node_extra_s=0.5e-6)
    for transfer in ("resident", "pinned"):
        a, b = predict(base, transfer, "graph"), predict(extra, transfer, "graph")
        assert b.terms["kernel_gaps"] - a.terms["kernel_gaps"] == pytest.approx(a.detail["kernels"] * 0.5e-6)
        assert b.terms["gemm"] == a.terms["gemm"] and b.total_s > a.total_s
    for transfer in ("resident", "pageable"):   # eager steps: the host's launches set the gaps
        assert predict(extra, transfer, "eager").total_s == predict(base, transfer, "eager").total_s


@gpu
def test_graph_node_extra_prices_the_replayed_step_beyond_its_parts():
    import cupy as cp
    from perfmlp.calibrate.gemm import step_network, step_rates
    from perfmlp.calibrate.graphstep import graph_node_extra
    from perfmlp.calibrate.kernels import kernel_gaps, queued_gap
    lines = []
    res = step_rates(cp, [256], [800], ["float32"], lines.append)
    res.update(kernel_gaps(cp, lines.append))
    res.update(queued_gap(cp, *step_network(cp, (784, 256, 10), "float32", 800), res["graph_kernel_gap_s"],
                          lines.append, calls=20))
    m = calibrated(**res)
    got = graph_node_extra(cp, m, [256], [800], ["float32"], lines.append)
    # one step priced; what it adds is a few microseconds a kernel at most, never negative
    assert 0.0 <= got["graph_node_extra_s"] < 5e-6
    assert any(line.startswith("graph step float32 H=256 b=800") for line in lines)


@pytest.mark.parametrize("key", ["host_cache_bytes", "engine_switch_s"])
def test_a_file_holding_a_withdrawn_figure_still_loads_and_predicts_as_without_it(key):
    old = calibrated(**{key: 4.1e-6})
    assert predict(old, "pinned", "graph", "mpi-staged").total_s == predict(calibrated(), "pinned", "graph",
                                                                             "mpi-staged").total_s
    with pytest.raises(MachineError, match="engine_switch_z"):
        calibrated(engine_switch_z=1e-6)   # an unknown key is still an error naming it
