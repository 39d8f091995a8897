"""The calibration's host-side parts on any machine: the ring fit, the
rotating copy slices, the machine file it writes, its command line without
a GPU. The measurements themselves run on the GPU machine (tests/test_gpu.py,
tests/test_timing.py)."""
import subprocess
import sys

import pytest

from perfmlp.calibrate.collectives import ring_fit
from perfmlp.calibrate.__main__ import machine_values, write_machine
from perfmlp.calibrate.copies import rotating_offsets
from perfmlp.model.machine import load_machine

from conftest import ROOT, has_gpu


def ring(p, n, alpha, bw, steps):
    """The ring allreduce's time: steps x alpha + 2 (p - 1) / p x n / bw."""
    return steps * alpha + 2 * (p - 1) / p * n / bw


def test_the_ring_fit_recovers_alpha_and_bandwidth_from_its_own_model():
    alpha, bw = 5e-6, 40e9
    # MPI: 2 (p - 1) latency steps; pageable points (here 3x slower) are left out of the fit
    pts = [(p, n, ring(p, n, alpha, bw, 2 * (p - 1)), "pinned") for p in (2, 4) for n in (1024, 1 << 20, 16 << 20)]
    pts += [(2, n, 3 * ring(2, n, alpha, bw, 2), "pageable") for n in (1024, 1 << 20)]
    assert ring_fit(pts, alpha_steps=True) == (pytest.approx(alpha), pytest.approx(bw))
    # NCCL: one latency term whatever p
    pts = [(p, n, ring(p, n, alpha, bw, 1), "device") for p in (2, 4) for n in (4096, 4 << 20)]
    assert ring_fit(pts, alpha_steps=False) == (pytest.approx(alpha), pytest.approx(bw))


def test_copies_read_a_new_slice_each_call_cycling_through_the_array():
    offset = rotating_offsets(10, 3)   # 3 slices of 3 fit in 10: 0, 3, 6, then from the start
    assert [offset() for _ in range(7)] == [0, 3, 6, 0, 3, 6, 0]


def test_the_machine_file_takes_what_was_measured_and_the_rest_from_its_base(tmp_path):
    base = load_machine("h200")
    res = {"peak_flops_per_s_float32": 4e13, "launch_overhead_s": 3e-6, "kernel_gap_s": 1e-6,
           "kernel_s": [{"kernel": "bias_sigmoid", "shape": [512, 800], "precision": "float32", "s": 4e-6}],
           "host_copy_s": []}
    values = machine_values(res, base, None, "NVIDIA H200", 1)
    out = tmp_path / "sub" / "cal.yaml"
    write_machine(values, str(out))
    assert [p.name for p in out.parent.iterdir()] == ["cal.yaml"]   # no temporary file left
    assert out.read_text().startswith("# Written by python -m perfmlp.calibrate")
    m = load_machine(out)
    assert m.name == "NVIDIA H200 (calibrated)" and m.calibrated is False   # no GEMM table: not calibrated
    assert m.peak_flops_per_s_float32 == 4e13 and m.launch_overhead_s == 3e-6 and m.kernel_gap_s == 1e-6
    assert m.mem_bw_bytes_per_s == base.mem_bw_bytes_per_s                 # not measured: the base's
    assert len(m.kernel_s) == 1 and m.gpus == base.gpus
    # the source line names what was measured (scalars, then the tables that hold something) and the base
    assert "kernel_gap_s, launch_overhead_s, peak_flops_per_s_float32, kernel_s;" in m.source
    assert "host_copy_s" not in m.source and "the rest from h200.yaml" in m.source


def test_without_a_gpu_the_command_calibrates_the_cpu(tmp_path):
    if has_gpu():
        pytest.skip("a GPU is present")
    out = tmp_path / "cal.yaml"
    r = subprocess.run([sys.executable, "-m", "perfmlp.calibrate", "--out", str(out), "--quick"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    m = load_machine(str(out))
    assert m.backend == "numpy" and m["cores"] >= 1 and m["gemm_flops_per_s"]
    # a GPU-only flag: one line, nothing written
    bad = tmp_path / "bad.yaml"
    r = subprocess.run([sys.executable, "-m", "perfmlp.calibrate", "--out", str(bad), "--gemm-kernels", "naive"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and not bad.exists()
    assert r.stderr.startswith("perfmlp.calibrate: error: ") and len(r.stderr.strip().splitlines()) == 1
    shipped = ROOT / "models" / "cpu-ci-2core.yaml"
    r = subprocess.run([sys.executable, "-m", "perfmlp.calibrate", "--out", str(shipped), "--gemm-only"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "--gemm-only: a GPU's" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_slices_rows_are_timed_and_merged_in_place_of_the_same_shape():
    from perfmlp.calibrate.__main__ import merged, with_slices
    assert with_slices([512, 1024]) == [128, 256, 512, 1024]
    old = {"source": "measured", "gemm_flops_per_s": [
        {"m": 512, "n": 800, "k": 784, "precision": "float32", "flops_per_s": 1.0},
        {"m": 512, "n": 800, "k": 784, "precision": "bf16", "flops_per_s": 2.0}],
        "kernel_s": [{"kernel": "sgd_update", "shape": [10], "precision": "float32", "s": 1e-6}]}
    new = {"gemm_flops_per_s": [{"m": 512, "n": 800, "k": 784, "precision": "float32", "flops_per_s": 3.0},
                                {"m": 256, "n": 800, "k": 784, "precision": "float32", "flops_per_s": 4.0}],
           "kernel_s": [{"kernel": "sgd_update", "shape": [20], "precision": "float32", "s": 2e-6}]}
    out = merged(old, new, "GPU X", [512])
    rates = {(e["m"], e["precision"]): e["flops_per_s"] for e in out["gemm_flops_per_s"]}
    assert rates == {(512, "float32"): 3.0, (512, "bf16"): 2.0, (256, "float32"): 4.0}
    assert len(out["kernel_s"]) == 2 and old["gemm_flops_per_s"][0]["flops_per_s"] == 1.0   # the old left whole
    assert out["source"].startswith("measured; ") and "H = 128, 256, 512" in out["source"] and "GPU X" in out["source"]

