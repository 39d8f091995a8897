"""The partitioning strategies on GPUs (run on the GPU machine; skipped
without CuPy and two GPUs): every strategy equals one NumPy process, and the
counters (bytes copied, handed to MPI and NCCL, the collectives, FLOPs per
phase) equal the model's per rank and batch, with CUDA-event phases that
add up."""
import sys

import numpy as np
import pytest

from conftest import ROOT, has_gpu, mpiexec, run_cmd, run_perfmlp


def gpus() -> int:
    if not has_gpu():
        return 0
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


two_gpus = pytest.mark.skipif(gpus() < 2, reason="needs CuPy and two CUDA GPUs")


@two_gpus
def test_every_strategy_on_two_gpus_equals_one_numpy_process():
    # tests/mpi_partition.py with --backend cupy: model parallel and hybrid 2x1 / 1x2 over NCCL and mpi-staged
    # (pageable copies), ps-nccl; float64 to 1e-12 and float32 to 1e-5 of the largest parameter
    r = run_cmd([mpiexec(), "-n", "2", sys.executable, str(ROOT / "tests" / "mpi_partition.py"), "--backend", "cupy"],
                timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK 2 ranks" in r.stdout


@two_gpus
@pytest.mark.parametrize("flags, transfer, comm", [
    (["--parallel", "model"], "resident", "nccl"),
    (["--parallel", "model"], "pinned", "mpi-staged"),
    (["--parallel", "hybrid", "--model-procs", "1"], "pageable", "mpi-staged"),   # data groups of 2, staged
    ([], "resident", "ps-nccl"),
])
def test_gpu_counters_equal_the_model(tmp_path, flags, transfer, comm):
    from perfmlp.model.partition import rank_counts, step_phases
    from perfmlp.trace.reader import read_run
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--input-size", "64", "--hidden-sizes", "33",
                    "--n-train", "230", "--batch-size", "50", "--n-heldout", "40", "--epochs", "2",
                    "--batch-transfer", transfer, "--comm", comm, "--trace-dir", str(tmp_path), "--run-id", "g",
                    *flags, procs=2, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "held-out accuracy" in r.stdout  # rank 0 evaluated (a shard predicts with the gathered parameters)
    run = read_run(tmp_path / "g")
    assert run.complete and run.comm == comm
    c = run.config
    for rank, rt in run.ranks.items():
        assert len(rt.batches) == 10  # 50 50 50 50 30, two epochs
        for b in rt.batches:
            want = rank_counts((64, 33, 10), b["samples"], 2, rank, 4, c["parallel"], c["model_procs"], comm,
                               transfer)
            assert (b["bytes_h2d"], b["bytes_d2h"], b["bytes_mpi"], b["bytes_nccl"]) == \
                (want.bytes_h2d, want.bytes_d2h, want.bytes_mpi, want.bytes_nccl), (rank, b["batch"])
            assert b["collectives"] == want.collective_list(comm)
            assert {k: v for k, v in b["flops"].items() if v} == {k: v for k, v in want.flops.items() if v}
            assert set(b["t_ms"]) == set(step_phases((64, 33, 10), 2, rank, c["parallel"], c["model_procs"], comm,
                                                     transfer))
            assert b["clock"] == "cuda-events"
            assert sum(d for _, d in b["t_ms"].values()) == pytest.approx(b["t_ms_total"], rel=1e-3, abs=1e-3)


@two_gpus
def test_gpu_model_parallel_saves_the_whole_parameters_of_one_process(tmp_path):
    base = ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
            "--hidden-sizes", "33,17", "--learning-rate", "0.5", "--epochs", "2", "--precision", "float64",
            "--no-trace"]
    r = run_perfmlp(*base, "--backend", "numpy", "--save-params", str(tmp_path / "cpu"))
    assert r.returncode == 0, r.stderr
    r = run_perfmlp(*base, "--backend", "cupy", "--parallel", "model", "--comm", "nccl", "--batch-transfer",
                    "resident", "--save-params", str(tmp_path / "gpu"), procs=2, timeout=180)
    assert r.returncode == 0, r.stderr
    a, b = np.load(tmp_path / "cpu" / "final.npz"), np.load(tmp_path / "gpu" / "final.npz")
    for name in ("initial.npz",):
        assert (tmp_path / "gpu" / name).exists()
    for k in a.files:
        assert a[k].shape == b[k].shape and np.abs(a[k] - b[k]).max() < 1e-10, k
