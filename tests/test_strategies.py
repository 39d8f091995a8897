"""The strategies: model parallelism, the hybrid grid and the
parameter server. Equal to one process (tests/mpi_strategies.py on 1-4
ranks), their trace counters equal to the model's closed forms to the
byte, the pencil-and-paper bytes, predictions and crossover, bad input."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from perfmlp.model.costs import op_cost, step_ops
from perfmlp.model.machine import load_machine
from perfmlp.model.strategies import (StrategyError, Strategy, best_strategy, closed_form_bytes, crossover_batch,
                                     grid, layer_splits, predict_strategy, rank_counts, shard_sizes, step_bytes,
                                     step_phases)
from perfmlp.model.predict import TERMS, predict_batch, ring_allreduce_s
from perfmlp.names import TRACE_LEVELS
from perfmlp.trace.reader import read_run

from conftest import ROOT, each_rank_count, refusal_line, run_perfmlp

H200_FIXTURE = str(__import__("pathlib").Path(__file__).parent / "data" / "h200-calibrated-fixture.yaml")  # values the tests work out


# ---- the model: shards, bytes, closed forms --------------------------------------------------------

def test_layer_splits_alternate_and_the_output_is_never_row_split():
    assert layer_splits(1) == ("rep",)                 # no hidden layer: nothing to split
    assert layer_splits(2) == ("row", "col")           # D-H-C: W1 by rows, W2 by columns
    assert layer_splits(3) == ("row", "col", "rep")    # C rows are too few to split: replicated
    assert layer_splits(4) == ("row", "col", "row", "col")


def test_shards_split_hidden_units_by_the_piece_rule():
    # H = 7 over 2: pieces 4 and 3 (the first ranks get the extra unit)
    assert [shard_sizes((20, 7, 5), 2, m) for m in range(2)] == [(20, 4, 5), (20, 3, 5)]
    # 20-7-5-6-3 over 3: row layers 1 and 3 split (7: 3 2 2; 6: 2 2 2), col layers keep their units
    assert [shard_sizes((20, 7, 5, 6, 3), 3, m) for m in range(3)] == [(20, 3, 5, 2, 3), (20, 2, 5, 2, 3),
                                                                      (20, 2, 5, 2, 3)]


def test_grid():
    assert grid(4, "data") == (4, 1) and grid(4, "model") == (1, 4) and grid(4, "hybrid", 2) == (2, 2)
    with pytest.raises(StrategyError, match="needs model_procs"):
        grid(4, "hybrid")
    with pytest.raises(StrategyError, match=r"model_procs \(3\) must divide the 4 ranks"):
        grid(4, "hybrid", 3)


def test_tiny_model_parallel_step_by_hand():
    # D=4, H=3, C=2, B=5 over 2 ranks, fp32. Shards: rank 0 has 2 hidden units, rank 1 one.
    r0 = rank_counts((4, 3, 2), 5, 2, 0, 4, "model", 0, "mpi")
    # forward, rank 0: W1 (2x4) @ X (4x5): 2*2*5*4 = 80; bias+sigmoid 4*2*5 = 40;
    #   W2 (2x2) @ A1 (2x5): 2*2*5*2 = 40; bias add 2*5 = 10 -> 170
    assert r0.flops["forward"] == 170
    # the combine: the output's partial sums, C x B = 2 * 5 = 10 floats = 40 bytes; nothing else
    assert r0.bytes_mpi == 40 and r0.collective_list("mpi") == [["MPI_Allreduce", 10]]
    # data parallel: the gradient buffer 12 + 3 + 6 + 2 + 1 loss slot = 24 floats = 96 bytes
    d0 = rank_counts((4, 3, 2), 5, 2, 0, 4, "data", 0, "mpi")
    assert d0.bytes_mpi == 96 and d0.b == 3
    # parameter server (host): reduce 24 floats, broadcast 23 parameters + the loss = 24 -> 192 bytes;
    # only rank 0 updates
    ps0, ps1 = (rank_counts((4, 3, 2), 5, 2, r, 4, "data", 0, "ps") for r in (0, 1))
    assert ps0.bytes_mpi == ps1.bytes_mpi == 192
    assert "update" in ps0.flops and "update" not in ps1.flops
    assert ps0.collective_list("ps") == [["MPI_Reduce", 24], ["MPI_Bcast", 24]]
    assert rank_counts((4, 3, 2), 5, 2, 0, 4, "data", 0, "ps-nccl").collective_list("ps-nccl") == \
        [["ncclReduce", 24], ["ncclBroadcast", 23]]


def test_shard_flops_are_the_shards_network():
    # a shard is a plain network of its sizes: the model prices the same operations
    c = rank_counts((784, 512, 10), 3200, 4, 1, 4, "hybrid", 2, "nccl")
    ops = step_ops((784, 256, 10), 1600)
    assert c.flops_total == sum(op_cost(n, s, 4)[0] for phase in ops.values() for n, s in phase)


@pytest.mark.parametrize("H, B, p, strategy, p_model", [
    (512, 3200, 2, "data", 1), (512, 3200, 2, "model", 2), (513, 3201, 3, "model", 3), (512, 3200, 2, "ps", 1),
    (1000, 999, 4, "hybrid", 2), (7, 10, 4, "hybrid", 2), (2048, 12800, 8, "hybrid", 4), (9, 9, 1, "model", 1)])
def test_closed_forms_equal_the_counts(H, B, p, strategy, p_model):
    parallel = "data" if strategy == "ps" else strategy
    comm = "ps" if strategy == "ps" else "mpi"
    want = rank_counts((784, H, 10), B, p, 0, 4, parallel, p_model if strategy == "hybrid" else 0, comm).bytes_mpi
    assert closed_form_bytes(784, H, 10, B, p, 4, strategy, p_model) == want


def test_the_reference_shapes_model_parallel_moves_12x_fewer_bytes():
    # D=784, H=512, C=10, B=3200, p=2, fp32. Data: the gradient buffer, 4 * (512*784 + 512 + 10*512 + 10 + 1)
    # = 1,628,204 bytes per rank; model: the logits' partial sums, 4 * 10 * 3200 = 128,000: 12.7x fewer
    data = step_bytes((784, 512, 10), 3200, 2, 4, "data", 0, "nccl")
    model = step_bytes((784, 512, 10), 3200, 2, 4, "model", 0, "nccl")
    assert data["per_rank"] == 1_628_204 and model["per_rank"] == 128_000
    assert data["per_rank"] / model["per_rank"] >= 10
    # deeper: 784-1024-1024-10 (row, col, rep): the combine of layer 2's 1024 x B, no backward collective
    deep = rank_counts((784, 1024, 1024, 10), 100, 2, 0, 4, "model", 0, "nccl")
    assert deep.collective_list("nccl") == [["ncclAllReduce", 1024 * 100]]
    # four layers (row, col, row, col): forward combines layers 2 and 4, backward layer 3's dA2
    deep = rank_counts((784, 64, 32, 48, 10), 100, 2, 0, 4, "model", 0, "nccl")
    assert deep.collective_list("nccl") == [["ncclAllReduce", 32 * 100], ["ncclAllReduce", 10 * 100],
                                            ["ncclAllReduce", 32 * 100]]


@pytest.mark.parametrize("comm", ["mpi", "mpi-staged", "nccl"])
@pytest.mark.parametrize("transfer", ["pageable", "resident"])
def test_data_parallel_phases_are_the_trace_formats(comm, transfer):
    from perfmlp.names import PHASES, batch_phases
    assert step_phases((784, 512, 10), 2, 0, "data", 0, comm, transfer) == batch_phases(comm, transfer)
    for parallel, mp, cm in (("model", 0, comm), ("hybrid", 2, comm), ("data", 0, "ps-nccl")):
        for rank in range(4):
            assert set(step_phases((784, 512, 10), 4, rank, parallel, mp, cm, transfer)) <= set(PHASES)


# ---- the model: predicted time and crossover --------------------------------------------------------

def test_predictions_use_predict_py_terms():
    m = load_machine(H200_FIXTURE)
    sizes = (784, 512, 10)
    data = predict_strategy(m, sizes, 3200, 2, comm="nccl", batch_transfer="resident")
    assert data == predict_batch(m, sizes, 3200, 2, "float32", "nccl", "resident")
    for kw in (dict(parallel="model"), dict(comm="ps-nccl"), dict(parallel="model", comm="mpi-staged"),
               dict(parallel="hybrid", model_procs=2)):
        pr = predict_strategy(m, sizes, 3200, 4, **{"comm": "nccl", "batch_transfer": "resident", **kw})
        assert set(pr.terms) == set(TERMS) and math.isclose(sum(pr.terms.values()), pr.total_s)
    model = predict_strategy(m, sizes, 3200, 2, parallel="model")
    # one ring allreduce of the 128,000-byte logits over 2 GPUs
    assert math.isclose(model.terms["allreduce"], ring_allreduce_s(128_000, 2, m.nccl_alpha_s, m.nccl_bw_bytes_per_s,
                                                                   steps_alpha=False))
    # the server on 2 GPUs: reduce + broadcast, each alpha + n / bw, n = 4 * 407,051 and 4 * 407,050
    ps = predict_strategy(m, sizes, 3200, 2, comm="ps-nccl")
    assert math.isclose(ps.terms["allreduce"], 2 * m.nccl_alpha_s + 4 * (407_051 + 407_050) / m.nccl_bw_bytes_per_s)
    assert ps.terms["allreduce"] > data.terms["allreduce"]  # twice the bytes through one link at p=2


def test_the_crossover_is_where_the_logits_outweigh_the_gradients():
    # Pencil and paper: with equal compute and one NCCL latency each, model parallelism's allreduce (C x B
    # floats) costs more than data parallelism's (N_theta + 1 floats) once B > (N_theta + 1) / C:
    # (512*784 + 512 + 5120 + 10 + 1) / 10 = 40,705 at H=512. The model's crossover (compute-bound
    # datasheet H200, so launches hide) lands within 25% of that (the loss runs on the whole batch on
    # every rank in model parallelism: slightly more elementwise time, so earlier).
    m = load_machine("h200")
    b = crossover_batch(m, (784, 512, 10), 2, Strategy("model", 0, "nccl"), Strategy("data", 0, "nccl"),
                        lo=4096, hi=1 << 18)
    assert b is not None and 0.75 * 40_705 <= b <= 1.25 * 40_705, b
    ranking = best_strategy(m, (784, 8192, 10), 3200, 2)
    assert ranking[0][0] == "model" and [n for n, _ in ranking][-1] == "ps"


# ---- execution modes: the shard step as one CUDA graph --------------------------------------------

def host_bound_machine(**extra):
    """GPU work negligible (1e18 FLOP/s and B/s), 10 us of host per launch, a graph launch 4 us."""
    from perfmlp.model.machine import machine_from_mapping
    values = {"name": "toy", "source": "test", "peak_flops_per_s_float32": 1e18, "peak_flops_per_s_float64": 1e18,
              "mem_bw_bytes_per_s": 1e18, "h2d_pageable_bytes_per_s": 1e9, "h2d_pinned_bytes_per_s": 1e10,
              "d2h_pageable_bytes_per_s": 1e9, "d2h_pinned_bytes_per_s": 1e10, "copy_latency_s": 0.0,
              "launch_overhead_s": 10e-6, "mpi_alpha_s": 1e-6, "mpi_bw_bytes_per_s": 1e9, "nccl_alpha_s": 1e-6,
              "nccl_bw_bytes_per_s": 1e11, "graph_launch_s": 4e-6, "graph_kernel_gap_s": 0.5e-6,
              "kernel_gap_s": 1e-6, **extra}
    return machine_from_mapping(values, "toy.yaml")


def test_graph_prediction_of_a_host_bound_shard_has_no_launches():
    m = host_bound_machine()
    sizes = (784, 512, 10)
    kw = dict(comm="nccl", batch_transfer="resident", parallel="model")
    eager = predict_strategy(m, sizes, 100, 2, **kw)
    graph = predict_strategy(m, sizes, 100, 2, **kw, exec_mode="graph")
    # eager: 9 kernels at 10 us of host each, hardly hidden by 1.4 us of allreduce (below)
    assert eager.terms["launches"] > 80e-6 and eager.terms["graph_launch"] == 0
    # graph: one replay (4 us of host) after the piece's two copies into the graph's static inputs (10 us
    # each), less the GPU time of the replay: 9 kernels' gaps (0.5 us each) and the allreduce inside it
    # (the logits, 10 x 100 floats: alpha + 2 (p-1)/p n / bw = 1 us + 4000 / 1e11 s)
    allreduce = 1e-6 + 4000 / 1e11
    assert graph.terms["allreduce"] == pytest.approx(allreduce) == eager.terms["allreduce"]
    assert graph.terms["launches"] == 0 and graph.detail["exec"] == "graph"
    assert graph.detail["kernels"] == 9 and graph.terms["kernel_gaps"] == pytest.approx(9 * 0.5e-6)
    assert graph.terms["graph_launch"] == pytest.approx(24e-6 - 4.5e-6 - allreduce, abs=1e-9)  # GPU work ~0
    assert graph.total_s < eager.total_s / 3
    assert set(graph.terms) == set(TERMS) and math.isclose(sum(graph.terms.values()), graph.total_s)


def test_graph_prediction_at_the_issues_point():
    # H=512 on 2 x H200 (calibrated): at B=400 the eager shard step is host-bound (its launches exceed
    # the GPU work); a replay is one launch, hidden behind the GPU time
    m = load_machine(H200_FIXTURE)
    sizes = (784, 512, 10)
    kw = dict(comm="nccl", batch_transfer="resident", parallel="model")
    eager = predict_strategy(m, sizes, 400, 2, **kw)
    graph = predict_strategy(m, sizes, 400, 2, **kw, exec_mode="graph")
    assert eager.terms["launches"] > 0 and graph.terms["launches"] == 0
    assert graph.total_s < eager.total_s
    # the same GEMMs and collectives; the graph adds the resident piece's copy into its static inputs:
    # 2 (D + C) b s bytes of memory traffic, 2 * 794 * 400 * 4 over the bandwidth
    assert graph.terms["gemm"] == eager.terms["gemm"] and graph.terms["allreduce"] == eager.terms["allreduce"]
    assert math.isclose(graph.terms["elementwise"] - eager.terms["elementwise"],
                        2 * 794 * 400 * 4 / m.mem_bw_bytes_per_s)
    # auto predicts what the trainer runs: graph with NCCL, eager with the staged exchange
    assert predict_strategy(m, sizes, 400, 2, **kw, exec_mode="auto") == graph
    staged = dict(kw, comm="mpi-staged")
    assert predict_strategy(m, sizes, 800, 2, **staged, exec_mode="auto") == predict_strategy(m, sizes, 800, 2,
                                                                                              **staged)
    with pytest.raises(StrategyError, match="--exec graph with --parallel model needs --comm nccl"):
        predict_strategy(m, sizes, 800, 2, **staged, exec_mode="graph")


def test_one_rank_of_model_parallelism_in_graph_mode_is_the_data_parallel_graph_step():
    # a model group of one holds the whole network and calls no collective: the same replay as data
    # parallelism on one GPU (whose allreduce over one rank costs nothing)
    m = load_machine(H200_FIXTURE)
    for transfer in ("resident", "pinned", "pageable"):
        for level in (None, *TRACE_LEVELS):
            one = predict_strategy(m, (784, 512, 10), 3200, 1, "float32", "nccl", transfer, "model",
                                   trace_level=level, exec_mode="graph")
            data = predict_batch(m, (784, 512, 10), 3200, 1, "float32", "nccl", transfer, trace_level=level,
                                 exec_mode="graph")
            assert one.total_s == pytest.approx(data.total_s, rel=1e-12), (transfer, level)


def test_graph_prediction_of_the_server_and_the_grid():
    m = load_machine(H200_FIXTURE)
    sizes = (784, 512, 10)
    for kw in (dict(comm="ps-nccl"), dict(parallel="hybrid", model_procs=2)):
        eager = predict_strategy(m, sizes, 3200, 4, **{"comm": "nccl", "batch_transfer": "resident", **kw})
        graph = predict_strategy(m, sizes, 3200, 4, **{"comm": "nccl", "batch_transfer": "resident", **kw},
                                 exec_mode="graph", trace_level="phases")
        assert graph.terms["launches"] == 0 and graph.terms["allreduce"] == eager.terms["allreduce"]
        assert graph.terms["tracing"] == m.trace_event_s  # one CUDA event: the replay's
    ranking = best_strategy(m, sizes, 3200, 2, exec_mode="graph")
    assert {p.detail.get("exec") for _, p in ranking} == {"graph"}


@pytest.mark.parametrize("transfer", ["pageable", "pinned", "resident"])
def test_graph_mode_phases(transfer):
    from perfmlp.names import batch_phases
    h2d = [] if transfer == "resident" else ["h2d"]
    for comm in ("mpi-staged", "nccl"):
        assert step_phases((784, 512, 10), 2, 0, "data", 0, comm, transfer, "graph") == \
            batch_phases(comm, transfer, "graph")
    # the whole step in one replay: the combines and the exchanges are inside it
    for parallel, mp, comm in (("model", 0, "nccl"), ("hybrid", 2, "nccl"), ("data", 0, "ps-nccl")):
        for rank in range(4):
            assert step_phases((784, 512, 10), 4, rank, parallel, mp, comm, transfer, "graph") == \
                tuple(h2d + ["graph"])
            assert step_phases((784, 512, 10), 4, rank, parallel, mp, comm, transfer, "auto") == \
                tuple(h2d + ["graph"])
    assert "combine" in step_phases((784, 512, 10), 2, 0, "model", 0, "mpi-staged", transfer, "auto")


def test_the_trainer_and_the_model_resolve_exec_alike():
    # one rule (perfmlp/model/predict.py: resolve_exec, graph_refusal): where `auto` runs eagerly,
    # `--exec graph` is refused, and where it runs graphs, `--exec graph` is accepted
    from perfmlp.backend import check_options, exec_mode
    from perfmlp.config import from_mapping
    from perfmlp.errors import PerfmlpError
    from perfmlp.model.predict import resolve_exec
    seen = set()
    for backend in ("numpy", "cupy"):
        for parallel in ("data", "model", "hybrid"):
            for comm in ("auto", "mpi", "mpi-staged", "nccl", "ps", "ps-nccl"):
                base = dict(backend=backend, parallel=parallel, comm=comm, model_procs=1 if parallel == "hybrid" else 0)
                try:
                    cfg = from_mapping(base)
                    name = check_options(cfg)
                except PerfmlpError:
                    continue  # refused whatever the execution mode
                mode = exec_mode(cfg, name)
                assert mode == resolve_exec("auto", backend, parallel, comm)
                refused = None
                try:
                    check_options(from_mapping({**base, "exec": "graph"}))
                except PerfmlpError as e:
                    refused = str(e)
                assert (refused is None) == (mode == "graph"), (base, refused)
                assert exec_mode(from_mapping({**base, "exec": "eager"}), name) == "eager"
                seen.add((backend, parallel, comm, mode))
    assert ("cupy", "model", "nccl", "graph") in seen and ("cupy", "hybrid", "nccl", "graph") in seen
    assert ("cupy", "data", "ps-nccl", "graph") in seen and ("cupy", "data", "mpi-staged", "graph") in seen
    assert ("cupy", "model", "mpi-staged", "eager") in seen and ("cupy", "model", "auto", "eager") in seen
    assert ("numpy", "model", "mpi", "eager") in seen


GRAPH_AND_OVERLAP = [
    (["--backend", "cupy", "--parallel", "model", "--comm", "mpi-staged", "--exec", "graph"],
     "--exec graph with --parallel model needs --comm nccl (with --comm mpi-staged the model group's "
     "allreduces need the host inside the step): use --comm nccl or --exec eager"),
    (["--backend", "cupy", "--parallel", "hybrid", "--model-procs", "1", "--exec", "graph"],
     "--exec graph with --parallel hybrid needs --comm nccl (with --comm auto the model group's "
     "allreduces need the host inside the step): use --comm nccl or --exec eager"),
    (["--backend", "numpy", "--parallel", "model", "--exec", "graph"],
     "--exec graph needs the cupy backend (this run is on numpy)"),
    (["--backend", "cupy", "--parallel", "model", "--comm", "nccl", "--overlap"],
     "--overlap is for data parallelism with an allreduce (this run: --parallel model)"),
    (["--backend", "cupy", "--comm", "ps-nccl", "--exec", "graph", "--overlap"],
     "--overlap is for data parallelism with an allreduce (this run: --comm ps-nccl)"),
]


@pytest.mark.parametrize("args, message", GRAPH_AND_OVERLAP)
def test_graph_and_overlap_refusals_are_one_line_before_anything_is_written(tmp_path, args, message):
    # checked before CuPy is imported: no GPU needed
    line = refusal_line("--data", "synthetic", "--input-size", "10", "--n-train", "40", "--batch-size", "10",
                        "--trace-dir", tmp_path, *args, process=args == GRAPH_AND_OVERLAP[0][0])
    assert line == f"perfmlp.run: error: {message}"
    assert not any(tmp_path.iterdir())


def test_model_cli_predicts_the_graph_step():
    base = [sys.executable, "-m", "perfmlp.model", "--json", "--machine", "h200-calibrated", "--parallel", "model",
            "--procs", "2", "--comm", "nccl", "--batch-transfer", "resident"]
    r = subprocess.run(base + ["--exec", "auto"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["config"]["exec"] == "graph" and s["prediction"]["terms_s"]["launches"] == 0
    assert [x["phases"] for x in s["ranks"]] == [["graph"], ["graph"]]
    r = subprocess.run(base[:-4] + ["--comm", "mpi-staged", "--exec", "graph"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs --comm nccl" in r.stderr


def test_sweep_predicts_a_partitioned_run_as_it_will_run():
    from perfmlp.config import from_mapping
    from perfmlp.sweep import SweepRun, predict_run
    m = load_machine(H200_FIXTURE)
    for comm, mode in (("nccl", "graph"), ("mpi-staged", "eager")):
        cfg = from_mapping(dict(backend="cupy", parallel="model", comm=comm, batch_transfer="resident",
                                hidden_sizes=[512], batch_size=3200, trace=False))
        run = SweepRun(run_id="r", procs=2, values={}, config=cfg)
        want = predict_strategy(m, cfg.layer_sizes, 3200, 2, "float32", comm, "resident", "model", exec_mode=mode)
        assert predict_run(m, run)["total_s"] == want.total_s


# ---- the trainer: equal to one process --------------------------------------------------------------

def test_every_strategy_equals_one_process():
    each_rank_count("mpi_strategies.py", (1, 2, 3, 4))


# ---- the trainer's counters are the model's, to the byte ---------------------------------------------

TRACED = [
    # (procs, flags, hidden): H not divisible by the model group, a short last batch (N=23)
    (2, ["--parallel", "model"], [7]),
    (4, ["--parallel", "hybrid", "--model-procs", "2"], [7, 5, 6]),   # row col row col: backward combines
    (3, ["--comm", "ps"], [7]),
    (3, ["--parallel", "model"], [7, 5]),                             # row col rep
]


@pytest.mark.parametrize("procs, flags, hidden", TRACED)
def test_counters_equal_the_model(tmp_path, procs, flags, hidden):
    r = run_perfmlp("--backend", "numpy", "--data", "synthetic", "--input-size", "12", "--hidden-sizes",
                    ",".join(map(str, hidden)), "--n-train", "23", "--batch-size", "6", "--epochs", "2",
                    "--trace-dir", str(tmp_path), "--run-id", "t", *flags, procs=procs, timeout=120)
    assert r.returncode == 0, r.stderr
    run = read_run(tmp_path / "t")
    assert run.complete and sorted(run.ranks) == list(range(procs))
    c = run.config
    sizes = run.layer_sizes
    assert run.comm == ("ps" if "ps" in flags else "mpi")
    seen = 0
    for rank, rt in run.ranks.items():
        assert len(rt.batches) == 8  # 6 6 6 5, two epochs
        for b in rt.batches:
            want = rank_counts(sizes, b.samples, procs, rank, 4, c["parallel"], c["model_procs"], run.comm,
                               "resident")  # NumPy copies nothing to a device
            assert b.local_samples == want.b
            assert (b.bytes_h2d, b.bytes_d2h, b.bytes_mpi, b.bytes_nccl) == \
                (want.bytes_h2d, want.bytes_d2h, want.bytes_mpi, want.bytes_nccl), (rank, b.batch)
            assert [list(c) for c in b.collectives] == want.collective_list(run.comm)
            assert {k: v for k, v in b.flops.items() if v} == {k: v for k, v in want.flops.items() if v}
            # NumPy copies nothing, so records no h2d phase, as a resident run
            assert set(b.t_ms) == set(step_phases(sizes, procs, rank, c["parallel"], c["model_procs"], run.comm,
                                                     "resident"))
            seen += 1
    assert seen == 8 * procs


def test_model_parallel_learns_and_saves_whole_parameters(tmp_path):
    r = run_perfmlp("--backend", "numpy", "--hidden-size", "65", "--batch-size", "50", "--learning-rate", "0.5",
                    "--epochs", "2", "--no-trace", "--parallel", "model", "--save-params", str(tmp_path / "p"),
                    procs=2, timeout=300)
    assert r.returncode == 0, r.stderr
    acc = float(r.stdout.split("final held-out accuracy ")[1].split()[0].rstrip(","))
    assert acc >= 0.85, r.stdout  # real digits; chance is 0.10
    saved = np.load(tmp_path / "p" / "final.npz", allow_pickle=False)
    assert saved["W1"].shape == (65, 784) and saved["W2"].shape == (10, 65) and saved["b1"].shape == (65,)


# ---- bad input: one line, exit 2 ---------------------------------------------------------------------

BAD_STRATEGIES = [
    (None, ["--parallel", "hybrid"], "parallel hybrid needs model_procs"),
    (None, ["--model-procs", "2"], "model_procs (2) is for parallel hybrid, not parallel data"),
    (None, ["--parallel", "model", "--comm", "ps"], "comm ps (the parameter server) is data parallelism's"),
    (None, ["--comm", "ps-nccl"], "--comm ps-nccl needs the cupy backend"),
    (None, ["--parallel", "sideways"], "invalid choice: 'sideways'"),
    (3, ["--parallel", "hybrid", "--model-procs", "2"], "model_procs (2) must divide the 3 ranks"),
    (3, ["--parallel", "model", "--hidden-size", "2"], "hidden layer 1 has 2 units, fewer than the 3 ranks"),
]


@pytest.mark.parametrize("procs, args, words", BAD_STRATEGIES)
def test_bad_strategies_are_one_line(procs, args, words):
    base = ["--backend", "numpy", "--data", "synthetic", "--input-size", "10", "--n-train", "40", "--batch-size",
            "10", "--no-trace"]
    # one case as the command on one process and one on three ranks, the others in this process
    line = refusal_line(*base, *args, procs=procs, process=args in (BAD_STRATEGIES[0][1], BAD_STRATEGIES[-1][1]))
    assert line.count("\n") == 0 and words in line, line


def test_model_cli_takes_the_strategy(tmp_path):
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--json", "--parallel", "model", "--procs", "2",
                        "--hidden-size", "513", "--comm", "nccl", "--batch-transfer", "resident", "--batch-size", "3200"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["schema"] == "perfmlp.model.strategy/1" and s["config"]["grid"] == [1, 2]
    assert [x["sizes"] for x in s["ranks"]] == [[784, 257, 10], [784, 256, 10]]
    assert s["bytes_per_step"] == {"per_rank": 128_000, "job": 256_000}
    assert {x["strategy"] for x in s["strategies"]} == {"data", "ps", "model"}
    r = subprocess.run([sys.executable, "-m", "perfmlp.model", "--parallel", "hybrid", "--procs", "4"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs model_procs" in r.stderr


# ---- the report ------------------------------------------------------------------------------------

def fake_gpu_run(H, B, procs, parallel, comm, t_ms, model_procs=0):
    """A GPU run as its trace would hold it: counters from the model, 4 batches (the first a warm-up)."""
    from perfmlp.trace.reader import Run
    from perfmlp.trace.upgrade import format1
    sizes = (784, H, 10)
    cfg = {"input_size": 784, "hidden_sizes": [H], "num_classes": 10, "batch_size": B, "n_train": 4 * B,
           "precision": "float32", "batch_transfer": "resident", "comm": comm, "gemm": "cublas",
           "parallel": parallel, "model_procs": model_procs}
    rid = f"h{H}-b{B}-p{procs}-{parallel}-{comm}"
    manifest = {"schema": "perfmlp.trace/1", "run_id": rid, "config": cfg, "procs": procs, "status": "complete",
                "backend": "cupy", "comm": comm,
                "machine": {"nodes": {"h": {"gpu": "NVIDIA H200", "gpu_count": 2, "ranks": list(range(procs))}}}}
    ranks = {}
    for r in range(procs):
        c = rank_counts(sizes, B, procs, r, 4, parallel, model_procs, comm, "resident")
        recs = []
        for k in range(4):
            recs.append({"kind": "batch", "epoch": 0, "batch": k, "samples": B, "local_samples": c.b, "t0_s": 0.0,
                         "flops": c.flops, "bytes_h2d": 0, "bytes_d2h": 0, "bytes_mpi": c.bytes_mpi,
                         "bytes_nccl": c.bytes_nccl, "t_ms": {"forward": [0.0, 0.8 * t_ms],
                                                              "combine": [0.8 * t_ms, 0.2 * t_ms]},
                         "t_ms_total": 50.0 if k == 0 else t_ms, "wall_ms": t_ms, "clock": "cuda-events"})
        recs.append({"kind": "end", "status": "complete"})
        ranks[r] = recs
    return Run.from_records(*format1(manifest, ranks))  # format-1 objects, through the upgrader


def test_report_maps_the_strategies_and_checks_the_bytes(tmp_path, drawing_only):
    import csv
    from perfmlp.report import build_from_runs
    drawing_only("strategy_map", "strategy_measured_vs_predicted")
    runs = [fake_gpu_run(512, 3200, 1, "data", "nccl", 0.22),
            fake_gpu_run(512, 3200, 2, "data", "nccl", 0.17), fake_gpu_run(512, 3200, 2, "model", "nccl", 0.12),
            fake_gpu_run(512, 3200, 2, "data", "ps-nccl", 0.20),
            fake_gpu_run(8192, 800, 2, "data", "nccl", 0.60), fake_gpu_run(8192, 800, 2, "model", "nccl", 0.41)]
    out = build_from_runs(runs, [], tmp_path / "rep")
    rows = list(csv.DictReader(open(out / "strategy_runs.csv")))
    assert len(rows) == 5 and all(r["counted = model"] == "True" for r in rows)
    by = {(r["H"], r["strategy"]): r for r in rows}
    assert int(by[("512", "data")]["bytes to collectives per rank (counted)"]) == 1_628_204
    assert int(by[("512", "model")]["bytes to collectives per rank (counted)"]) == 128_000
    # strong scaling with the better strategy: 0.22 / 0.12 ms
    assert float(by[("512", "model")]["speed-up over 1 GPU"]) == pytest.approx(0.22 / 0.12)
    win = {r["H"]: r for r in csv.DictReader(open(out / "strategy_winners.csv"))}
    assert win["512"]["measured winner"] == "model" and win["8192"]["measured winner"] == "model"
    assert win["512"]["agree"] in ("yes", "no", "tie predicted")
    for fig in ("strategy_map", "strategy_measured_vs_predicted"):
        assert (out / f"{fig}.png").stat().st_size > 1000
    # the partitioned runs stay out of the data-parallel sections (Question 2.1 takes p=2 nccl data: 0.17)
    md = (out / "report.md").read_text()
    assert "Partitioning strategies" in md
    util = list(csv.DictReader(open(out / "q2_1_utilisation.csv")))
    assert util[1]["perfmlp, resident + NCCL, eager: ms"] == "0.17"
