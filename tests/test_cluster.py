"""Cluster files, the collectives priced on them, the published nccl-tests
figures they are set beside, and the strategies projected onto a cluster."""
import copy

import pytest

from perfmlp.model import load_machine, predict_batch
from perfmlp.model.cluster import ClusterError, cluster_files, cluster_from_mapping, load_cluster
from perfmlp.model.collectives import (allreduce_s, allreduce_times, best_allreduce, bus_bytes_per_s, chain_s,
                                       group_of, Group)
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


# Published nccl-tests figures (all_reduce_perf, float, sum), set beside the
# model (docs/model.md, "The all-reduce against published figures"):
# (cluster, GPUs, bytes, published us, algorithm the model prices, within 15%?)
NVLS_1 = "https://github.com/NVIDIA/nccl-tests/issues/290"
PUBLISHED = [
    # one node of 8 x H100, default algorithm (NVLink SHARP)
    ("dgx-h100", 8, 134217728, 613.3, "switch", False),     # 128 MB: below the pipeline's peak, model 18% fast
    ("dgx-h100", 8, 268435456, 1139.2, "switch", True),
    ("dgx-h100", 8, 536870912, 2175.8, "switch", True),
    ("dgx-h100", 8, 1073741824, 4038.8, "switch", True),
    ("dgx-h100", 8, 4294967296, 15870.0, "switch", True),
    # two nodes, 16 H100: the thread's user reports them below expectation
    ("dgx-h100", 16, 134217728, 1575.6, "best", False),
    ("dgx-h100", 16, 1073741824, 13435.0, "best", False),
    ("dgx-h100", 16, 1073741824, 22920.0, "ring", False),   # NCCL_ALGO=RING
]
# stated as bus bandwidth (GB/s), large messages: (cluster, GPUs, bytes, busbw, algorithm)
PUBLISHED_BUSBW = [
    ("dgx-h100", 8, 1 << 32, 370.0, "ring"),     # https://github.com/NVIDIA/nccl-tests/issues/212 (NCCL_ALGO=RING)
    ("dgx-h100", 8, 1 << 32, 480.0, "switch"),   # same thread: NVLink SHARP peak on 8 GPUs
    ("dgx-h200", 8, 1 << 32, 475.0, "switch"),   # https://github.com/NVIDIA/nccl-tests/issues/272
    ("dgx-h100", 8, 1 << 32, 330.0, "ring"),     # https://github.com/NVIDIA/nccl/issues/1221 NVLS off, 4-8 GB
    ("dgx-h100", 8, 1 << 32, 430.0, "switch"),   # same thread, NVLS on
    ("dgx-h100", 32, 1 << 32, 320.0, "best"),    # same thread, 4 nodes (8 x 400 Gb/s RoCE)
    ("dgx-h100", 32, 1 << 33, 320.0, "best"),
]


def _model_s(name, procs, nbytes, algorithm):
    c = load_cluster(name)
    g = group_of(c, procs)
    return best_allreduce(c, nbytes, g)[1] if algorithm == "best" else allreduce_s(c, nbytes, g, algorithm)


@pytest.mark.parametrize("name, procs, nbytes, us, algorithm, close", PUBLISHED)
def test_allreduce_beside_published_times(name, procs, nbytes, us, algorithm, close):
    err = _model_s(name, procs, nbytes, algorithm) * 1e6 / us - 1
    if close:
        assert abs(err) <= 0.15, f"{nbytes} B on {procs}: model {100 * err:+.1f}%"
    else:   # where the model is faster than what was measured, for the reasons docs/model.md gives
        assert err < -0.15


@pytest.mark.parametrize("name, procs, nbytes, busbw, algorithm", PUBLISHED_BUSBW)
def test_allreduce_beside_published_bus_bandwidth(name, procs, nbytes, busbw, algorithm):
    # as a time: the published bus bandwidth's, bytes x 2(p-1)/p / busbw, against the model's
    model_s = _model_s(name, procs, nbytes, algorithm)
    assert bus_bytes_per_s(nbytes, procs, model_s) / 1e9 > 0
    assert model_s == pytest.approx(nbytes * 2 * (procs - 1) / procs / (busbw * 1e9), rel=0.15)


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
