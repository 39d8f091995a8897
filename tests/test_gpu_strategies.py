"""The strategies on GPUs (run on the GPU machine; skipped
without CuPy and two GPUs, or one for the one-rank cases): every strategy
equals one NumPy process, and the counters (bytes copied, handed to MPI and
NCCL, the collectives, FLOPs per phase) equal the model's per rank and
batch, with CUDA-event phases that add up. In graph mode (the shard step and
the parameter server's step as one CUDA graph per piece size) the
parameters are bit-identical to the eager step's and the counters per batch
are eager's.

On a 2-GPU machine, from the project root:

    python -m pytest -q tests/test_gpu_strategies.py
"""
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
one_gpu = pytest.mark.skipif(gpus() < 1, reason="needs CuPy and a CUDA GPU")


@pytest.mark.parametrize("procs", [2, 4])
@pytest.mark.parametrize("exec_mode", ["eager", "auto"])
def test_every_strategy_equals_one_numpy_process(procs, exec_mode):
    # tests/mpi_strategies.py with --backend cupy: model parallel and every hybrid grid of `procs` ranks
    # (2: 2x1 / 1x2; 4: 4x1, 2x2, 1x4) over NCCL and mpi-staged (pageable copies), ps-nccl; float64 to
    # 1e-12 and float32 to 1e-5 of the largest parameter. auto: the NCCL and ps-nccl strategies replayed
    # as CUDA graphs (many trainings, so many captures, in one process)
    if gpus() < procs:
        pytest.skip(f"needs CuPy and {procs} CUDA GPUs")
    r = run_cmd([mpiexec(), "-n", str(procs), sys.executable, str(ROOT / "tests" / "mpi_strategies.py"),
                 "--backend", "cupy", "--exec", exec_mode], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"OK {procs} ranks" in r.stdout


@two_gpus
@pytest.mark.parametrize("exec_mode", ["eager", "graph"])
@pytest.mark.parametrize("flags, transfer, comm", [
    (["--parallel", "model"], "resident", "nccl"),
    (["--parallel", "model"], "pinned", "mpi-staged"),
    (["--parallel", "hybrid", "--model-procs", "1"], "pageable", "mpi-staged"),   # data groups of 2, staged
    ([], "resident", "ps-nccl"),
])
def test_gpu_counters_equal_the_model(tmp_path, flags, transfer, comm, exec_mode):
    from perfmlp.model.strategies import rank_counts, step_phases
    from perfmlp.model.predict import graph_refusal
    from perfmlp.trace.reader import read_run
    parallel = flags[1] if flags else "data"
    if exec_mode == "graph" and graph_refusal("cupy", parallel, comm):
        pytest.skip(f"--parallel {parallel} --comm {comm} runs eagerly")
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--input-size", "64", "--hidden-sizes", "33",
                    "--n-train", "230", "--batch-size", "50", "--n-heldout", "40", "--epochs", "2",
                    "--batch-transfer", transfer, "--comm", comm, "--trace-dir", str(tmp_path), "--run-id", "g",
                    "--exec", exec_mode, "--trace-level", "phases", *flags, procs=2, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "held-out accuracy" in r.stdout  # rank 0 evaluated (a shard predicts with the gathered parameters)
    run = read_run(tmp_path / "g")
    assert run.complete and run.comm == comm and run.exec == exec_mode
    c = run.config
    for rank, rt in run.ranks.items():
        assert len(rt.batches) == 10  # 50 50 50 50 30, two epochs
        for b in rt.batches:
            want = rank_counts((64, 33, 10), b.samples, 2, rank, 4, c["parallel"], c["model_procs"], comm,
                               transfer)
            assert (b.bytes_h2d, b.bytes_d2h, b.bytes_mpi, b.bytes_nccl) == \
                (want.bytes_h2d, want.bytes_d2h, want.bytes_mpi, want.bytes_nccl), (rank, b.batch)
            assert [list(c) for c in b.collectives] == want.collective_list(comm)
            assert sum(b.flops.values()) == want.flops_total
            if exec_mode == "eager":
                assert {k: v for k, v in b.flops.items() if v} == {k: v for k, v in want.flops.items() if v}
            assert tuple(b.t_ms) == step_phases((64, 33, 10), 2, rank, c["parallel"], c["model_procs"], comm,
                                                   transfer, exec_mode)
            assert b.clock == "cuda-events"
            assert sum(s.ms for s in b.t_ms.values()) == pytest.approx(b.t_ms_total, rel=1e-3, abs=1e-3)


@two_gpus
def test_gpu_model_parallel_saves_the_whole_parameters_of_one_process(tmp_path):
    base = ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
            "--hidden-sizes", "33,17", "--learning-rate", "0.5", "--epochs", "2", "--precision", "float64",
            "--no-trace"]
    r = run_perfmlp(*base, "--backend", "numpy", "--save-params", str(tmp_path / "cpu"))
    assert r.returncode == 0, r.stderr
    for mode in ("eager", "graph"):
        r = run_perfmlp(*base, "--backend", "cupy", "--parallel", "model", "--comm", "nccl", "--batch-transfer",
                        "resident", "--exec", mode, "--save-params", str(tmp_path / mode), procs=2, timeout=180)
        assert r.returncode == 0, r.stderr
        a, b = np.load(tmp_path / "cpu" / "final.npz"), np.load(tmp_path / mode / "final.npz")
        assert (tmp_path / mode / "initial.npz").exists()
        for k in a.files:
            assert a[k].shape == b[k].shape and np.abs(a[k] - b[k]).max() < 1e-10, (mode, k)


# ---- graph mode: the same step, replayed ---------------------------------------------------------------

# float32, a short last batch (230 = 4 x 50 + 30: its own graph), shuffled every epoch (resident pieces
# copied into the graph's static inputs); hidden 33, 17, 9: layers row, col, row, col, so the shard step
# has every kind of model-group allreduce (forward at layer 2, the output's combine, backward at layer 3)
# and 33 and 9 units do not divide by 2 (shards of 17 and 16, 5 and 4)
def shard_job(comm="nccl", epochs=3):
    return ["--data", "synthetic", "--n-train", "230", "--batch-size", "50", "--input-size", "64",
            "--hidden-sizes", "33,17,9", "--learning-rate", "0.5", "--epochs", str(epochs), "--shuffle",
            "--n-heldout", "0", "--backend", "cupy", "--comm", comm]

GRAPH_CASES = [
    # (processes, flags, transfer)
    (1, ["--parallel", "model"], "resident"),                      # a model group of one: no collective
    (2, ["--parallel", "model"], "resident"),
    (2, ["--parallel", "model"], "pinned"),
    (2, ["--parallel", "model"], "pageable"),
    (2, ["--parallel", "hybrid", "--model-procs", "1"], "resident"),   # data groups of 2: the gradient allreduce
    (2, ["--comm", "ps-nccl"], "resident"),                         # reduce, update on rank 0, broadcast
]


def _final(tmp_path, name, *flags, procs=None):
    r = run_perfmlp(*flags, "--no-trace", "--save-params", str(tmp_path / name), procs=procs, timeout=180)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / name / "final.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("procs, flags, transfer", GRAPH_CASES)
def test_graph_shard_step_is_bit_identical_to_eager(tmp_path, procs, flags, transfer):
    if gpus() < procs:
        pytest.skip(f"needs CuPy and {procs} CUDA GPU(s)")
    job = (*shard_job(), "--batch-transfer", transfer, *flags)
    p = procs if procs > 1 else None
    eager = _final(tmp_path, "eager", *job, "--exec", "eager", procs=p)
    graph = _final(tmp_path, "graph", *job, "--exec", "graph", procs=p)
    for k in eager:
        assert np.array_equal(eager[k], graph[k]), k
    start = np.load(tmp_path / "eager" / "initial.npz")
    assert max(float(np.abs(eager[k] - start[k]).max()) for k in eager) > 1e-3  # it trained


@pytest.mark.parametrize("procs, flags, transfer", [c for c in GRAPH_CASES if c[2] != "pinned"])
def test_graph_shard_step_counts_what_eager_counts(tmp_path, procs, flags, transfer):
    # every batch of every rank: the same bytes copied and handed to NCCL, the same collectives in the
    # same order, the same FLOPs and operations; the graph adds only the resident piece's device copy into
    # its static inputs (bytes_d2d, 4 (64 + 10) b) and records one phase, `graph`, for the replay
    from perfmlp.model.strategies import step_phases
    from perfmlp.trace.reader import read_run
    if gpus() < procs:
        pytest.skip(f"needs CuPy and {procs} CUDA GPU(s)")
    p = procs if procs > 1 else None
    runs = {}
    for mode in ("eager", "graph"):
        r = run_perfmlp(*shard_job(epochs=2), "--batch-transfer", transfer, *flags, "--exec", mode,
                        "--trace-level", "phases",
                        "--trace-dir", str(tmp_path), "--run-id", mode, procs=p, timeout=180)
        assert r.returncode == 0, r.stderr
        runs[mode] = read_run(tmp_path / mode)
    eager, graph = runs["eager"], runs["graph"]
    assert graph.exec == "graph" and eager.exec == "eager" and graph.comm == eager.comm
    assert graph.exec == "graph"
    c = graph.config
    sizes = graph.layer_sizes
    for rank in range(procs):
        eb, gb = eager.ranks[rank].batches, graph.ranks[rank].batches
        assert len(eb) == len(gb) == 10  # 50 50 50 50 30, two epochs
        for e, g in zip(eb, gb):
            for key in ("samples", "local_samples", "bytes_h2d", "bytes_d2h", "bytes_mpi", "bytes_nccl",
                        "collectives"):
                assert getattr(e, key) == getattr(g, key), (rank, g.batch, key)
            assert sum(e.flops.values()) == sum(g.flops.values())
            assert sum(e.ops.values()) == sum(g.ops.values())
            assert e.bytes_d2d == 0
            assert g.bytes_d2d == (4 * (64 + 10) * g.local_samples if transfer == "resident" else 0)
            assert tuple(g.t_ms) == step_phases(sizes, procs, rank, c["parallel"], c["model_procs"], graph.comm,
                                                   transfer, "graph")
            assert sum(s.ms for s in g.t_ms.values()) == pytest.approx(g.t_ms_total, rel=1e-3, abs=1e-3)
        if procs == 2 and c["parallel"] == "model":
            # the shard step's combines are in every batch: forward layer 2, the output, backward layer 3
            assert [n for n, _ in gb[0].collectives] == ["ncclAllReduce"] * 3


@one_gpu
@pytest.mark.parametrize("comm, mode", [("nccl", "graph"), ("mpi-staged", "eager")])
def test_exec_auto_runs_the_shard_step_as_graphs_where_it_can(tmp_path, comm, mode):
    r = run_perfmlp(*shard_job(comm, epochs=1), "--parallel", "model",
                    "--trace-dir", str(tmp_path), "--run-id", "a", timeout=180)
    assert r.returncode == 0, r.stderr
    from perfmlp.trace.reader import read_run
    assert read_run(tmp_path / "a").exec == mode


# ---- every strategy in graph mode ends: the trainer's teardown on several GPUs ----------------------------

@pytest.mark.parametrize("procs, flags", [
    (2, ["--parallel", "model"]),
    (2, ["--parallel", "data"]),
    (4, ["--parallel", "model"]),
    (4, ["--parallel", "hybrid", "--model-procs", "2"]),
])
def test_graph_mode_strategies_run_to_their_end(procs, flags):
    # the sizes at which model and hybrid parallelism in graph mode printed their last epoch and never
    # ended: each NCCL communicator is now ended on every rank before MPI is (comm.close_communicators)
    if gpus() < procs:
        pytest.skip(f"needs CuPy and {procs} CUDA GPUs")
    r = run_perfmlp("--backend", "cupy", "--data", "synthetic", "--n-train", "19200", "--epochs", "2",
                    "--hidden-sizes", "512", "--batch-size", "3200", "--batch-transfer", "resident",
                    "--comm", "nccl", "--no-trace", "--exec", "graph", "--stall-limit", "60", *flags,
                    procs=procs, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done:" in r.stdout and "epoch 2/2" in r.stdout
