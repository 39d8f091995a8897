"""The model's corrected bias, priced by a calibrated figure with the
microbenchmark that measures it: the eager step's launches after its
pageable batch copies (pageable_launch_factor); and the withdrawn terms,
which an older file may still hold and the model reads no more. CPU tests
of the model; GPU tests of the microbenchmarks (skipped without CuPy and a
GPU)."""
import copy
import functools

import pytest

from conftest import gpu, yaml_load
from perfmlp.model import predict_batch
from perfmlp.model.machine import MachineError, machine_from_mapping

CALIBRATED = "tests/data/h200-x2-calibrated.yaml"
SIZES = (784, 512, 10)


@functools.lru_cache(maxsize=1)
def _calibrated_data() -> dict:
    with open(CALIBRATED) as f:
        return yaml_load(f)


def calibrated(**extra):
    return machine_from_mapping({**copy.deepcopy(_calibrated_data()), **extra}, "x.yaml")


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
    assert set(out) == {"pageable_launch_factor"}
    factors = out["pageable_launch_factor"]
    assert [(e["hidden"], e["batch"]) for e in factors] == [(256, 400), (256, 3200)]
    assert all(0.5 < e["factor"] < 10 for e in factors)
    assert len(lines) == 1 and "pageable" in lines[0]
    calibrated(**out)   # it loads


@gpu
def test_the_calibration_records_spread_of_the_gpu_and_the_copies():
    import cupy as cp
    from perfmlp.calibrate.copies import host_copies
    from perfmlp.calibrate.gemm import step_network
    from perfmlp.calibrate.spread import gpu_rounds, spread_table
    from perfmlp.comm import SingleWorld
    spread = {"gpu": gpu_rounds(cp, *step_network(cp, SIZES, "float32", 800), rounds=4, calls=5)}
    host_copies(cp, SingleWorld(), {"h2d": [32_000, 2_508_800], "d2h": [32_000]}, lambda m: None, spread)
    assert len(spread["gpu"]) == 4 and len(spread["pageable_copy"]) == 3 * 3   # 3 rounds x 3 points
    table = spread_table(spread)
    assert {e["source"] for e in table} == {"gpu", "pageable_copy", "pinned_copy"}
    assert calibrated(spread=table).spread                     # it loads


@pytest.mark.parametrize("key, value", [
    ("host_cache_bytes", 4.1e-6), ("engine_switch_s", 4.1e-6), ("queued_gap_s", 1.3e-6),
    ("graph_node_extra_s", 0.5e-6), ("pinned_launch_factor", [{"hidden": 512, "batch": 800, "factor": 1.2}])])
def test_a_file_holding_a_withdrawn_figure_still_loads_and_predicts_as_without_it(key, value):
    old = calibrated(**{key: value})
    for transfer, exec_mode in (("pinned", "graph"), ("pinned", "eager"), ("resident", "graph")):
        assert predict(old, transfer, exec_mode, "mpi-staged").total_s == \
            predict(calibrated(), transfer, exec_mode, "mpi-staged").total_s
    with pytest.raises(MachineError, match="engine_switch_z"):
        calibrated(engine_switch_z=1e-6)   # an unknown key is still an error naming it
