"""A machine file describes itself: every field of Machine is declared once
(perfmlp/model/machine/fields.py), the loader's key lists and the
interval's scalars are read from that declaration, docs/model.md holds the
table it generates; and the shipped files have the shape and the physics
of a machine (positive rates, measured rates under the datasheet's
ceilings), whatever their values."""
from dataclasses import fields
from pathlib import Path

import pytest

from perfmlp.model.interval import SOURCES, _SCALARS, UNSCALED, interval
from perfmlp.model.machine import Machine, load_machine
from perfmlp.model.machine import files
from perfmlp.model.machine.fields import CPU_KEYS, FIELDS, GPU_KEYS, OPTIONAL, TABLES, markdown_table
from perfmlp.model.predict import predict_batch
from perfmlp.model.predict.cpu import SOURCE_TERMS as CPU_SOURCE_TERMS

from conftest import yaml_dump, yaml_load

ROOT = Path(__file__).resolve().parents[1]


def test_every_field_of_a_machine_is_declared_once():
    assert list(GPU_KEYS) == [f.name for f in fields(Machine)]
    # a CPU file: the shared figures and its own (backend, cores, BLAS, passes), never a GPU's copies
    assert {"backend", "cores", "pass_bytes_per_s", "mem_bw_bytes_per_s", "allreduce_s"} <= set(CPU_KEYS)
    assert not any(k.startswith(("h2d_", "d2h_", "nccl_")) for k in CPU_KEYS)
    for name, f in FIELDS.items():
        assert f.check in ("rate", "optional-rate", "time", "table", "word", "count"), name
        cpu_sources = (*CPU_SOURCE_TERMS, "step")   # a CPU file's draws (model/predict/cpu.py)
        assert f.spread is None or f.spread in (SOURCES if name in GPU_KEYS else cpu_sources), name
        assert f.doc and f.source, name


def test_the_loader_and_the_interval_read_the_declaration():
    assert files.TABLES is TABLES and files.OPTIONAL is OPTIONAL
    # a scalar's spread source moves it in a draw; one without a source is left as it is
    for name in GPU_KEYS:
        f = FIELDS[name]
        moved = [s for s, keys in _SCALARS.items() if name in keys]
        assert moved == ([f.spread] if f.spread and f.check != "table" else []), name
        assert (name in UNSCALED) == (f.spread is None), name
    # the required ones: a file without one is refused, naming it
    required = [k for k, f in FIELDS.items() if f.required and f.check != "word"]
    assert "peak_flops_per_s_float32" in required and "gemm_flops_per_s" not in required


def test_the_docs_hold_the_generated_machine_file_table():
    assert markdown_table() in (ROOT / "docs" / "model.md").read_text()


SHIPPED = sorted((ROOT / "models").glob("*calibrated*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: Path(p).name)
def test_a_shipped_calibration_has_the_shape_and_physics_of_a_machine(path):
    m = load_machine(str(path))
    sheet = load_machine("h200")   # the datasheet of the GPU the shipped calibrations name
    for name in GPU_KEYS:
        f, v = FIELDS[name], getattr(m, name)
        if f.check == "rate":
            assert v > 0, name
        elif f.check in ("time", "optional-rate"):
            assert v >= 0, name
    # no measured GEMM beats its format's ceiling (cuBLAS runs float64 on the FP64 tensor cores, whose
    # peak is the FFMA figure, so the float formats share the higher of the two)
    ffma = max(sheet.peak_flops_per_s("float32"), sheet.peak_flops_per_s("float64"))
    for g in m.gemm_flops_per_s:
        ceiling = ffma if g.precision in ("float32", "float64") else sheet.peak_flops_per_s(g.precision)
        assert 0 < g.flops_per_s <= 1.05 * ceiling, g
    assert 0 < m.mem_bw_bytes_per_s <= 1.05 * sheet.mem_bw_bytes_per_s
    assert all(0 < c.s for c in m.host_copy_s) and all(0 < k.s for k in m.kernel_s)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: Path(p).name)
def test_a_shipped_calibration_with_spread_predicts_with_an_interval(path):
    m = load_machine(str(path))
    if not m.spread:
        pytest.skip(f"{Path(path).name} records no measured spread (made before it was recorded)")
    for procs in (1, 2, 4):
        iv = interval(m, lambda mm: predict_batch(mm, (784, 512, 10), 3200, procs, "float32", "nccl", "resident",
                                                  exec_mode="graph"), draws=20)
        assert iv is not None and iv.lo_s < iv.hi_s


def test_the_shipped_cpu_file_loads_and_predicts_a_numpy_run_with_its_interval():
    from perfmlp.model.predict.cpu import predict_cpu
    m = load_machine("cpu-ci-2core")
    assert m.backend == "numpy" and m["cores"] == 2 and m.calibrated
    p = predict_cpu(m, (784, 512, 10), 100, procs=2)
    lo, hi = p.detail["interval_s"]
    assert 0 < lo <= p.total_s <= hi


@pytest.fixture(scope="module")
def cpu_file_data():
    """The shipped CPU file's mapping, read once."""
    return yaml_load((ROOT / "models" / "cpu-ci-2core.yaml").read_text())


@pytest.mark.parametrize("change, word", [({"cores": 0}, "cores"), ({"kernel_host_s": -1}, "kernel_host_s"),
                                          ({"pcie": 1}, "unknown key pcie"), ({"op_host_s": None}, "op_host_s")])
def test_a_bad_cpu_file_is_one_line_naming_the_key(tmp_path, cpu_file_data, change, word):
    from perfmlp.model.machine import MachineError
    data = {**cpu_file_data, **change}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_dump(data))
    with pytest.raises(MachineError, match=word) as e:
        load_machine(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_the_model_command_predicts_a_numpy_run_from_a_cpu_file(capsys):
    import json
    from perfmlp.model.__main__ import main
    assert main(["--machine", "cpu-ci-2core", "--procs", "2", "--threads", "1", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    p = s["prediction"]
    assert s["config"]["threads"] == 1 and s["machine"]["backend"] == "numpy"
    # the groups add up to the total, and the interval holds it
    assert sum(p["groups_s"].values()) == pytest.approx(p["total_s"])
    assert p["interval_s"][0] <= p["total_s"] <= p["interval_s"][1]
    # the ceilings: one rank's share of two cores' GEMM rate, memory, and the MPI exchange as the copy
    assert s["ceilings"]["copy_bytes_per_s"] > 0 and s["ceilings"]["peak_flops_per_s"] > 0
    assert main(["--machine", "cpu-ci-2core", "--precision", "bf16"]) == 2
    assert "float32 or float64" in capsys.readouterr().err
