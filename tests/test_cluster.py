"""Cluster files, the collectives priced on them, the published nccl-tests
figures they are set beside, and the strategies projected onto a cluster."""
import copy

import pytest

from perfmlp.model import load_machine, predict_batch
from perfmlp.model.cluster import (ClusterError, Group, allreduce_s, allreduce_times, best_allreduce,
                                   chain_s, cluster_files, cluster_from_mapping, group_of, load_cluster)
from perfmlp.model.nccl_tests import PUBLISHED, TOLERANCE, comparison, model_s
from perfmlp.model.projection import cluster_step, crossover, hybrid_grids, scaling, strategy_steps

SHIPPED = ("dgx-h100", "dgx-h200", "quadro-rtx-6000-edr")

# A toy cluster whose arithmetic is worked out in the tests: 2 GPUs a node,
# 10 GB/s inside, one 5 GB/s port a node, 1 us a step inside, 10 us across.
TOY = {"name": "toy", "machine": "h100-sxm", "gpus_per_node": 2, "nodes": 4, "base_latency_s": 0.0,
       "intra_node": {"kind": "nvswitch", "bytes_per_s": 10e9, "efficiency": 1.0, "latency_s": 1e-6,
                      "tree_latency_s": 2e-6, "switch_reduction": True, "switch_efficiency": 0.5,
                      "switch_latency_s": 3e-6},
       "inter_node": {"kind": "infiniband", "nics_per_node": 1, "bytes_per_s": 5e9, "efficiency": 1.0,
                      "latency_s": 10e-6, "tree_latency_s": 20e-6},
       "sources": {}}
for _k in ("machine", "gpus_per_node", "nodes", "base_latency_s"):
    TOY["sources"][_k] = "test"
for _side in ("intra_node", "inter_node"):
    for _k in TOY[_side]:
        if _k != "kind":
            TOY["sources"][f"{_side}.{_k}"] = "test"


def toy(**changes):
    data = copy.deepcopy(TOY)
    data.update(changes)
    return cluster_from_mapping(data, "toy.yaml")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_clusters_load_with_every_figure_sourced(name):
    c = load_cluster(name)
    assert c.max_procs >= 1024
    assert load_machine(c.machine).name          # its GPUs' machine file exists
    assert all(v.strip() for v in c.sources.values())
    assert name in {f.name.removesuffix(".yaml") for f in cluster_files()}


@pytest.mark.parametrize("change, words", [
    (lambda d: d["sources"].pop("intra_node.efficiency"), "no source for intra_node.efficiency"),
    (lambda d: d["intra_node"].update(efficiency=1.5), "efficiency must be at most 1"),
    (lambda d: d["inter_node"].update(latency_s=-1), "latency_s"),
    (lambda d: d.update(colour="blue"), "unknown key colour"),
    (lambda d: d["inter_node"].pop("nics_per_node"), "missing key nics_per_node"),
    (lambda d: d["sources"].update(speed="fast"), "speed is not a figure"),
    (lambda d: d["intra_node"].update(kind="carrier pigeon"), "kind must be one of"),
])
def test_bad_cluster_files_are_one_line_errors(change, words):
    data = copy.deepcopy(TOY)
    change(data)
    with pytest.raises(ClusterError) as e:
        cluster_from_mapping(data, "toy.yaml")
    assert words in str(e.value) and "toy.yaml" in str(e.value) and "\n" not in str(e.value)


def test_unknown_cluster_name_lists_the_shipped_ones():
    with pytest.raises(ClusterError, match="dgx-h100"):
        load_cluster("no-such-cluster")


def test_groups_fill_nodes_in_rank_order():
    c = toy()
    assert group_of(c, 2) == Group(2, 2)                 # one node
    assert group_of(c, 8).nodes == 4
    assert group_of(c, 4, stride=2) == Group(4, 1)      # a data group of a 4 x 2 grid: one rank a node


def test_ring_tree_hierarchical_switch_worked_out():
    c = toy()
    n = 1e6
    # 4 ranks on 2 nodes: 6 steps, 2 across: 4 x 1 + 2 x 10 = 24 us; min(10, 5 x 2/2) = 5 GB/s;
    # 2 x 3/4 x 1e6 / 5e9 = 300 us
    assert allreduce_s(c, n, group_of(c, 4), "ring") == pytest.approx(24e-6 + 300e-6)
    # tree: 2 x ((2-1) x 2 + log2(2) x 20) = 44 us; 2 x 1e6 / 5e9 = 400 us
    assert allreduce_s(c, n, group_of(c, 4), "tree") == pytest.approx(44e-6 + 400e-6)
    # hierarchical: inside 2 x 1 x 1 us + 2 x 1/2 x 1e6 / 10e9 = 102 us; across 2 x 1 x 10 us +
    # 2 x 1/2 x 1e6 / 5e9 = 220 us
    assert allreduce_s(c, n, group_of(c, 4), "hierarchical") == pytest.approx(102e-6 + 220e-6)
    # switch, 2 ranks in a node: 3 us + (1 + 1/2) x 1e6 / (10e9 x 0.5) = 303 us
    assert allreduce_s(c, n, group_of(c, 2), "switch") == pytest.approx(303e-6)
    assert allreduce_s(c, n, group_of(c, 4), "switch") is None      # the switch does not span nodes
    assert allreduce_s(c, n, group_of(c, 2), "hierarchical") is None
    assert allreduce_s(c, n, Group(1, 1), "ring") == 0.0
    # a pipelined chain over 4 ranks: (4 - 2) x 1 + 1 x 10 = 12 us, 1e6 / 5e9 = 200 us
    assert chain_s(c, n, group_of(c, 4)) == pytest.approx(212e-6)


def test_best_collective_by_size_and_scale():
    c = load_cluster("dgx-h100")
    assert best_allreduce(c, 1 << 30, group_of(c, 8))[0] == "switch"   # NVLink SHARP inside a node
    assert best_allreduce(c, 1.6e6, group_of(c, 1024))[0] == "tree"    # latency: log2 of 128 nodes
    assert best_allreduce(c, 1 << 32, group_of(c, 16))[0] == "ring"    # bandwidth on 2 nodes
    # hierarchical wins where the node's ports are much slower than its fabric (one port a node)
    one_port = toy(inter_node={**TOY["inter_node"], "bytes_per_s": 0.5e9})
    g = group_of(one_port, 4)
    assert best_allreduce(one_port, 64e6, g)[0] == "hierarchical"
    assert set(allreduce_times(one_port, 64e6, g)) == {"ring", "tree", "hierarchical"}


@pytest.mark.parametrize("p", PUBLISHED, ids=lambda p: f"{p.cluster}-{p.procs}-{p.nbytes}-{p.algorithm}")
def test_allreduce_beside_published_nccl_tests_figures(p):
    """Within 15% of each figure it should match; faster than the others,
    for the reasons their rows give (docs/model.md)."""
    algorithm, t = model_s(p)
    err = t / p.seconds - 1
    if p.expected:
        assert abs(err) <= TOLERANCE, f"{p.nbytes} B on {p.procs} GPUs ({p.url}): model {100 * err:+.1f}%"
    else:
        assert err < -TOLERANCE and p.why
    if p.busbw_gb_s is not None:   # a bus bandwidth as a time: bytes x 2(p-1)/p / busbw
        assert p.nbytes / p.seconds * 2 * (p.procs - 1) / p.procs == pytest.approx(p.busbw_gb_s * 1e9)


def test_comparison_table_rows():
    rows = comparison()
    assert len(rows) == len(PUBLISHED)
    assert all(r["within 15%"] == r["expected within"] for r in rows)
    assert all(r["source"].startswith("https://github.com/NVIDIA/") for r in rows)


def test_data_parallel_step_on_one_gpu_is_the_gpus_own_step():
    c = load_cluster("dgx-h100")
    m = load_machine(c.machine)
    st = cluster_step(c, m, (784, 512, 10), 3200, 1)
    assert st.comm_s == 0 and st.exchanges[0].ranks == 1
    assert st.total_s == pytest.approx(predict_batch(m, (784, 512, 10), 3200, 1, "float32", "nccl", "resident",
                                                     exec_mode="graph").total_s)


def test_strategies_exchange_what_their_closed_forms_say():
    c = load_cluster("dgx-h100")
    m = load_machine(c.machine)
    steps = strategy_steps(c, m, (784, 512, 10), 3200, 16)
    # data: the gradient buffer, 4 x (512 x 784 + 512 + 10 x 512 + 10 + 1) = 1,628,204 B over 16 ranks
    assert [(e.nbytes, e.ranks) for e in steps["data"].exchanges] == [(1628204, 16)]
    # model: the output's partial sums, 4 x 10 x 3200 = 128,000 B over 16 ranks
    assert [(e.nbytes, e.ranks) for e in steps["model"].exchanges] == [(128000, 16)]
    assert steps["hybrid"].grid[0] * steps["hybrid"].grid[1] == 16
    assert hybrid_grids((784, 4, 10), 64) == [2, 4]      # a shard needs a hidden unit a rank


def test_scaling_rows_and_crossover():
    c = load_cluster("dgx-h100")
    m = load_machine(c.machine)
    strong = scaling(c, m, (784, 512, 10), 3200, procs_list=(1, 8, 1024))
    assert {r["procs"] for r in strong} == {1, 8, 1024}
    assert not [r for r in strong if r["strategy"] == "model" and r["procs"] == 1024]   # 512 units < 1,024 ranks
    weak = scaling(c, m, (784, 512, 10), 800, weak=True, procs_list=(1, 64))
    assert {r["batch"] for r in weak} == {800, 51200}
    rows = crossover(c, m, [256, 4096], [800, 12800], [8, 256])
    for r in rows:
        times = {k: r[f"{k} ms"] for k in ("data", "model", "hybrid") if r[f"{k} ms"] is not None}
        assert r["winner"] == min(times, key=times.get)
    assert len({r["winner"] for r in rows}) > 1          # the winner changes over (p, H, B)


def test_report_section_projects_the_traces_gpu_with_its_measured_points():
    from synthetic import gpu_run
    from perfmlp.report.analysis import analyse
    from perfmlp.report.sections.cluster import measured_points, section_cluster
    from perfmlp.report.study import load_study
    runs = [gpu_run(exec_mode="graph", transfer="resident", comm="nccl", procs=p, batch=3200, run_id=f"g{p}",
                    phase_ms={"graph": t}) for p, t in ((1, 0.4), (2, 0.3))]
    runs.append(gpu_run(exec_mode="eager", transfer="pageable", comm="mpi-staged", run_id="eager"))   # not drawn
    a = analyse(runs, [], load_study(None))
    pts = measured_points(a, 512, 3200, weak=False)
    assert [p for p, _ in pts["data"]] == [1, 2] and set(pts) == {"data"}
    assert pts["data"][0][1] == pytest.approx(3200 / 0.4e-3)       # samples a second: B / (t_ms / 1e3)
    s = section_cluster(a)
    assert "DGX H200" in s.title                                   # the traces' GPU's cluster
    tables = {t.name: t for t in s.tables}
    assert {r["procs"] for r in tables["cluster_scaling"].rows} == {1, 8, 64, 256, 1024}
    assert {"H", "B", "p=1024"} <= set(tables["cluster_crossover"].rows[0])
    assert len(tables["allreduce_published"].rows) == len(PUBLISHED)
    panels = s.figures[0].args["panels"]                           # drawn by the report's own tests
    assert [name for name, _, _ in panels] == ["strong, B = 3200", "weak, 3200 a GPU"]
    assert panels[0][2] == pts and panels[1][2] == {"data": [pts["data"][0]]}   # weak: only p=1 has B = 3200 p


def test_model_command_projects_onto_a_cluster(capsys):
    import json
    from perfmlp.model.__main__ import main
    assert main(["--cluster", "dgx-h100", "--procs", "256"]) == 0
    out = capsys.readouterr().out
    assert "256 GPUs on 32 node(s) of 8" in out and all(s in out for s in ("data", "model", "hybrid"))
    assert main(["--cluster", "dgx-h100", "--procs", "8", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["schema"] == "perfmlp.model.cluster/1" and s["cluster"]["nodes"] == 1
    totals = [st["total_s"] for st in s["strategies"]]
    assert totals == sorted(totals)                                  # fastest first
    data = next(st for st in s["strategies"] if st["strategy"] == "data")
    ex = data["exchanges"][0]
    assert ex["algorithm"] == min(ex["algorithms_s"], key=ex["algorithms_s"].get) and "switch" in ex["algorithms_s"]
    for argv, words in ((["--cluster", "nope"], "no cluster named 'nope'"),
                        (["--cluster", "dgx-h100", "--procs", "2048", "--batch-size", "4096"], "more than the 1024")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1


def test_a_strategy_left_out_says_why(capsys):
    from perfmlp.model.__main__ import main
    # 256 GPUs, a batch of 100: data parallelism would give 156 GPUs no sample
    assert main(["--cluster", "dgx-h100", "--procs", "256", "--batch-size", "100"]) == 0
    out = capsys.readouterr().out
    gone = [line for line in out.splitlines() if line.startswith("data ")]
    assert gone == [f"{'data':<10}left out: 256 data pieces of a batch of 100: each needs a sample "
                    "(a batch of at least 256)"]
    left_out = {}
    steps = strategy_steps(load_cluster("dgx-h100"), load_machine("h100-sxm"), (784, 512, 10), 100, 256,
                           left_out=left_out)
    assert set(left_out) == {"data"} and "data" not in steps
    # with a batch of 25600 every strategy runs and none is left out
    left_out.clear()
    strategy_steps(load_cluster("dgx-h100"), load_machine("h100-sxm"), (784, 512, 10), 25600, 256,
                   left_out=left_out)
    assert left_out == {}
