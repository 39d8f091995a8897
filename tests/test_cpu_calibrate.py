"""The CPU calibration (perfmlp/calibrate/cpu*.py): what it times, the
shape of the file a quick run writes, and its refusals. Timings are not
asserted (the machine is shared): only that they exist and are positive."""
import sys

import numpy as np
import pytest
import yaml

from conftest import mpiexec, run_cmd
from perfmlp import names as N
from perfmlp.calibrate.cpu import QUICK, SOURCES, main
from perfmlp.blas import THREAD_ENV, cpu_cores, find_blas, thread_env
from perfmlp.calibrate.cpu_bench import TimedNetwork, step_piece, time_step
from perfmlp.calibrate.kernels import one_step
from perfmlp.mlp import Network, init_weights
from perfmlp.model.costs import kernel_name, kernel_shape, step_kernels
from perfmlp.model.machine import load_machine
from perfmlp.model.machine.fields import CPU_REQUIRED
from perfmlp.model.predict.cpu import predict_cpu

def _calibrate(tmp_path, procs=None, *flags):
    out = tmp_path / "cpu.yaml"
    cmd = [sys.executable, "-m", "perfmlp.calibrate.cpu", "--quick", "--out", str(out), *flags]
    return run_cmd([mpiexec(), "-n", str(procs), *cmd] if procs else cmd), out


def test_the_timed_kernels_are_the_ones_the_model_prices():
    # 784-16-10 on 8 samples: every kernel of the unfused step, once per step, by (name, shape)
    sizes, b = (784, 16, 10), 8
    res = time_step(sizes, N.FLOAT32, b, budget_s=0.01)   # under load, a step over five ms would get 2 repeats at 0.001
    want = {(kernel_name(k), kernel_shape(k)) for ks in step_kernels(sizes, b, None, 4, fuse_output=False).values()
            for k in ks}
    assert set(res["kernels"]) == want and all(s > 0 for s in res["kernels"].values())
    assert len(res["gemm_steps"]) == len(res["pass_steps"]) >= 3


def test_timing_the_kernels_does_not_change_the_step():
    sizes, b = (784, 16, 10), 8
    x, y = step_piece(sizes, N.FLOAT64, b)
    nets = []
    for cls in (Network, TimedNetwork):
        net = cls(np, sizes, N.FLOAT64, 0.1, 1e-4, b)
        net.set_params(init_weights(sizes, 0))
        net.fuse_output = False
        for _ in range(2):
            one_step(net, x, y)
        nets.append(net)
    assert np.allclose(nets[0].p.flat, nets[1].p.flat, rtol=1e-12, atol=0)


def test_the_blas_threads_are_read_and_set():
    blas = find_blas()
    if blas is None or not blas.setter:
        pytest.skip("no BLAS with a thread-count call in this NumPy")
    env = thread_env(1)
    assert all(env[v] == "1" for v in THREAD_ENV)
    # a child whose environment says 1, then set to 2 through the library's call
    code = ("from perfmlp.blas import find_blas; b = find_blas(); a = b.threads(); "
            "b.set_threads(2); print(a, b.threads())")
    r = run_cmd([sys.executable, "-c", code], env={v: env[v] for v in THREAD_ENV})
    assert r.stdout.split() == ["1", "2"], r.stderr


def test_a_quick_calibration_writes_a_machine_the_model_reads(tmp_path):
    r, out = _calibrate(tmp_path)
    assert r.returncode == 0, r.stderr
    m = yaml.safe_load(out.read_text())
    assert set(CPU_REQUIRED) <= set(m)   # one rank: no ring fit, which CPU_REQUIRED leaves out
    assert load_machine(str(out))["cores"] == cpu_cores()   # the loader reads what the calibration wrote
    assert m["backend"] == N.NUMPY and m["cores"] == cpu_cores()
    for k in ("peak_flops_per_s_float32", "peak_flops_per_s_float64", "mem_bw_bytes_per_s", "op_host_s"):
        assert m[k] > 0
    # every (precision, H, b) of the quick grid: 5 GEMMs and 6 passes, at 1 thread, one rank
    grid = 2 * len(QUICK["hidden"]) * len(QUICK["local"])
    assert len(m["gemm_flops_per_s"]) == 5 * grid and len(m["pass_bytes_per_s"]) == 6 * grid
    assert all(e["flops_per_s"] > 0 and e["threads"] == 1 and e["ranks"] == 1 for e in m["gemm_flops_per_s"])
    assert {e["procs"] for e in m["allreduce_s"]} == {1}
    assert {e["source"] for e in m["spread"]} <= set(SOURCES) and "blas" in {e["source"] for e in m["spread"]}
    p = predict_cpu(m, (784, QUICK["hidden"][0], 10), QUICK["local"][-1], procs=1, threads=1)
    assert p.total_s > 0 and p.detail["interval_s"] is not None


def test_two_ranks_measure_the_exchange_and_sharing(tmp_path):
    r, out = _calibrate(tmp_path, 2, "--precisions", N.FLOAT32)
    assert r.returncode == 0, r.stderr
    m = yaml.safe_load(out.read_text())
    assert {e["ranks"] for e in m["gemm_flops_per_s"]} == {1, 2} and m["calibrated_ranks"] == 2
    assert {e["procs"] for e in m["allreduce_s"]} == {1, 2}
    assert m["mpi_alpha_s"] >= 0 and m["mpi_bw_bytes_per_s"] > 0
    assert predict_cpu(m, (784, QUICK["hidden"][0], 10), 2 * QUICK["local"][0], procs=2, threads=1).total_s > 0


@pytest.mark.parametrize("flags, word", [(("--hidden", "0"), "--hidden"), (("--precisions", N.BF16), "--precisions"),
                                         (("--threads", "x"), "--threads")])
def test_bad_flags_are_one_line(tmp_path, capsys, flags, word):
    out = tmp_path / "cpu.yaml"
    assert main(["--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert word in err and len(err.strip().splitlines()) == 1 and not out.exists()
