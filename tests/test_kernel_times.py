"""The own kernels' measured time (machine files' kernel_s): parsing, the
interpolation rule, and predictions using it where a file has it and bytes
over bandwidth where it does not."""
import dataclasses

import pytest
import yaml

from perfmlp.model.costs import OWN_KERNELS, kernel_name, kernel_shape, op_cost, step_kernels
from perfmlp.model.machine import KernelTime, MachineError, load_machine, machine_from_mapping, machine_to_yaml
from perfmlp.model.predict import predict_batch
from perfmlp.model.scaled import scaled_values

H200_FIXTURE = str(__import__("pathlib").Path(__file__).parent / "data" / "h200-calibrated-fixture.yaml")  # values the tests work out

OB = "output_backward"


def mapping(kernel_s):
    """A datasheet machine file's keys with a kernel_s table."""
    m = load_machine("h200")
    d = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)
         if f.name not in ("path", "gemm_flops_per_s", "allreduce_s", "collective_wait_s", "kernel_s",
                           "device_names")}
    return {**d, "kernel_s": kernel_s}


def entry(kernel, shape, s, precision="float32"):
    return {"kernel": kernel, "shape": list(shape), "precision": precision, "s": s}


TABLE = [entry(OB, (10, 512, 1600), 10e-6), entry(OB, (10, 512, 3200), 16e-6), entry(OB, (10, 1024, 3200), 30e-6),
         entry("sgd_update", (1000,), 2e-6), entry("sgd_update", (3000,), 4e-6)]


def test_every_step_kernel_has_a_launch_name_and_a_shape():
    for sizes in ((784, 512, 10), (784, 1024, 1024, 10), (33, 17, 20)):   # 20 classes: never fused
        for fuse in (True, False):
            for kernels in step_kernels(sizes, 100, 1 << 12, fuse_output=fuse).values():
                for k in kernels:
                    assert kernel_name(k) in ("gemm", *OWN_KERNELS.values())
                    assert kernel_shape(k) == k[0][1]
    own = [kernel_name(k) for ks in step_kernels((784, 512, 10), 3200).values() for k in ks]
    assert own == ["gemm", "bias_sigmoid", "gemm", "bias_add", "softmax_ce_grad", OB, "partial_sums", "gemm",
                   "sgd_update"]
    assert kernel_shape(step_kernels((784, 512, 10), 3200)["update"][0]) == (784 * 512 + 512 * 10,)


def test_kernel_table_loads_and_round_trips_through_yaml():
    m = machine_from_mapping(mapping(TABLE), "x.yaml")
    assert m.kernel_s[0] == KernelTime(OB, (10, 512, 1600), "float32", 10e-6)
    text = machine_to_yaml(mapping(TABLE))     # as the calibration writes it
    assert machine_from_mapping(yaml.safe_load(text), "y.yaml").kernel_s == m.kernel_s


@pytest.mark.parametrize("table, words", [
    ([entry("gemm", (1, 2), 1e-6)], "x.yaml: kernel_s[0] kernel must be one of bias_sigmoid,"),
    ([entry(OB, (10, 512, 1600), 1e-6), {**entry(OB, (1,), 1e-6), "shape": []}],
     "x.yaml: kernel_s[1] shape must be a non-empty list of sizes, got []"),
    ([{**entry(OB, (1,), 1e-6), "shape": 3200}], "x.yaml: kernel_s[0] shape must be a non-empty list"),
    ([entry(OB, (10, 0, 3200), 1e-6)], "x.yaml: kernel_s[0] shape[1] must be positive, got 0"),
    ([entry(OB, (10, 512.5, 3200), 1e-6)], "x.yaml: kernel_s[0] shape[1] must be an integer, got 512.5"),
    ([entry(OB, (10, 512, 3200), 1e-6, "float16")], "x.yaml: kernel_s[0] precision must be one of float32, float64"),
    ([entry(OB, (10, 512, 3200), 0)], "x.yaml: kernel_s[0] s must be positive, got 0"),
    ([entry(OB, (10, 512, 3200), "slow")], "x.yaml: kernel_s[0] s must be a number, got 'slow'"),
    ([{"kernel": OB, "shape": [1], "precision": "float32"}], "x.yaml: kernel_s[0] needs exactly kernel, shape,"),
    (entry(OB, (1,), 1e-6), "x.yaml: kernel_s must be a list"),
    ([entry(OB, (10, 512, 3200), 1e-6), entry(OB, (10, 512, 3200), 2e-6)],
     "x.yaml: kernel_s[1] repeats kernel_s[0] (output_backward [10, 512, 3200] float32)"),
])
def test_bad_kernel_entries_are_one_line_errors(table, words):
    with pytest.raises(MachineError) as e:
        machine_from_mapping(mapping(table), "x.yaml")
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_interpolation_rule():
    m = machine_from_mapping(mapping(TABLE), "x.yaml")
    t = m.kernel_time_s
    assert t(OB, (10, 512, 3200), "float32") == 16e-6                           # a measured point
    assert t(OB, (10, 512, 2400), "float32") == pytest.approx(13e-6)            # 10 + (16 - 10) * 800 / 1600
    assert t(OB, (10, 512, 6400), "float32") == pytest.approx(32e-6)            # above: 16 x 6400 / 3200
    assert t(OB, (10, 512, 800), "float32") == 10e-6                            # below: held
    # the nearest measured h by ratio (h = 10 x H here): 700 is nearer 512 (x1.37) than 1024
    # (x1.46), 800 nearer 1024 (x1.28) than 512 (x1.56); no scaling in h
    assert t(OB, (10, 700, 3200), "float32") == 16e-6
    assert t(OB, (10, 800, 3200), "float32") == 30e-6
    assert t(OB, (10, 1024, 1600), "float32") == 30e-6                          # its only b: held below
    assert t(OB, (10, 2048, 6400), "float32") == pytest.approx(60e-6)           # and scaled above
    assert t("sgd_update", (2000,), "float32") == pytest.approx(3e-6)           # one size: linear in it
    # no point of that kernel, precision or number of sizes: None (priced by bytes / bandwidth)
    assert t("bias_add", (10, 3200), "float32") is None
    assert t(OB, (10, 512, 3200), "float64") is None
    assert t(OB, (512, 3200), "float32") is None


def own_bytes_s(machine, sizes, b, isz=4):
    """The step's own kernels priced by bytes over bandwidth (the rule without kernel_s)."""
    return sum(op_cost(op, shape, isz)[1] for ks in step_kernels(sizes, b, None, isz).values() for k in ks
               if kernel_name(k) != "gemm" for op, shape in k) / machine.mem_bw_bytes_per_s


GRAPH = dict(layer_sizes=(784, 512, 10), batch=3200, procs=1, comm="nccl", batch_transfer="resident",
             exec_mode="graph")


def test_a_measured_output_backward_is_used_in_the_prediction():
    old = dataclasses.replace(load_machine(H200_FIXTURE), kernel_s=())   # a file without the table
    assert old.kernel_time_s(OB, (10, 512, 3200), "float32") is None
    base = predict_batch(old, **GRAPH)
    # the own kernels at bytes / bandwidth, and the resident piece's device copy into the graph's
    # inputs (read + written: 2 x 4 B x 3200 x (784 + 10))
    staging_s = 2 * 4 * 3200 * (784 + 10) / old.mem_bw_bytes_per_s
    assert base.terms["elementwise"] == pytest.approx(own_bytes_s(old, (784, 512, 10), 3200) + staging_s)
    # the pair measured at 17 us on an H200, where its bytes over bandwidth take about 3 us
    ob_bytes_s = op_cost(OB, (10, 512, 3200), 4)[1] / old.mem_bw_bytes_per_s
    assert 2e-6 < ob_bytes_s < 4e-6
    cal = dataclasses.replace(old, kernel_s=(KernelTime(OB, (10, 512, 3200), "float32", 17e-6),))
    new = predict_batch(cal, **GRAPH)
    # graph mode, GPU-bound: the step is longer by exactly the measured time less the bytes' time
    assert new.terms["elementwise"] - base.terms["elementwise"] == pytest.approx(17e-6 - ob_bytes_s)
    assert new.total_s - base.total_s == pytest.approx(17e-6 - ob_bytes_s, rel=1e-6)
    # the table's other precision changes nothing
    f64 = dataclasses.replace(old, kernel_s=(KernelTime(OB, (10, 512, 3200), "float64", 17e-6),))
    assert predict_batch(f64, **GRAPH).total_s == base.total_s
    # a GPU-bound eager step grows the same way; an overlapped backward prices the kernel the same
    eager = {**GRAPH, "exec_mode": "eager", "batch_transfer": "pinned"}
    assert predict_batch(cal, **eager).terms["elementwise"] - predict_batch(old, **eager).terms["elementwise"] \
        == pytest.approx(17e-6 - ob_bytes_s)
    two = {**GRAPH, "procs": 2, "batch": 6400, "overlap": True}
    assert predict_batch(cal, **two).detail["gpu_compute_s"] - predict_batch(old, **two).detail["gpu_compute_s"] \
        == pytest.approx(17e-6 - ob_bytes_s)


def test_scaling_to_another_gpu_keeps_the_kernel_times():
    cal = dataclasses.replace(load_machine(H200_FIXTURE),
                              kernel_s=tuple(machine_from_mapping(mapping(TABLE), "x.yaml").kernel_s))
    v = scaled_values(cal, load_machine("h200"), load_machine("h100-sxm"))
    assert machine_from_mapping(v, "h100.yaml").kernel_s == cal.kernel_s
    assert "own kernels' times" in v["source"]
