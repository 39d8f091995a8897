"""Collectives priced on a cluster (`cluster.py`): ring, double binary tree,
hierarchical and in-switch (NVLS) all-reduce, the chain reduce and
broadcast, and the best of them for a group (docs/model.md tabulates and
derives the formulas).

Notation: n bytes, a group of g ranks, k of them in each of its N nodes (G
GPUs a node). B is a GPU's bandwidth into the node's fabric, S the group's
share of its nodes' network ports (nics x rate x k / G: a grid's other
groups use the same ports), both line rate x efficiency; `base` a
collective's latency, l_i and l_n a step's inside and across nodes. A term
that does not exist drops (no B for one rank a node, no S on one node).
Not modelled: the LL and LL128 protocols, the pipeline's ramp, NVLS across
nodes, congestion beyond the ports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .cluster import Cluster

ALGORITHMS = ("ring", "tree", "hierarchical", "switch")


@dataclass(frozen=True)
class Group:
    """The ranks of one collective: `size` of them, `per_node` in each node they use."""
    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return -(-self.size // self.per_node)


def group_of(cluster: Cluster, size: int, stride: int = 1) -> Group:
    """The group of `size` ranks r0, r0 + stride, ... on nodes filled in rank order."""
    G = cluster.gpus_per_node
    per_node = max(1, min(size, G // stride)) if stride <= G else 1
    return Group(size, per_node)


def _bandwidth(cluster: Cluster, group: Group) -> float:
    """min(B, S) of the group (module docstring); inf for a group of one rank."""
    bw = math.inf
    if group.per_node > 1:
        bw = cluster.intra.effective_bytes_per_s
    if group.nodes > 1:
        bw = min(bw, cluster.node_network_bytes_per_s() * group.per_node / cluster.gpus_per_node)
    return bw


def ring_s(cluster: Cluster, nbytes: float, group: Group) -> float:
    """base + (2(g-1) - 2(N-1)) l_i + 2(N-1) l_n + 2(g-1)/g n / min(B, S)."""
    g, N = group.size, group.nodes
    cross = 2 * (N - 1)
    lat = cluster.base_latency_s + (2 * (g - 1) - cross) * cluster.intra.latency_s + cross * cluster.inter.latency_s
    return lat + 2 * (g - 1) / g * nbytes / _bandwidth(cluster, group)


def tree_s(cluster: Cluster, nbytes: float, group: Group) -> float:
    """base + 2((k-1) l_i^tree + ceil(log2 N) l_n^tree) + 2n / min(B, S)."""
    k, N = group.per_node, group.nodes
    lat = cluster.base_latency_s + 2 * ((k - 1) * cluster.intra.tree_latency_s
                                        + math.ceil(math.log2(N)) * cluster.inter.tree_latency_s)
    return lat + 2 * nbytes / _bandwidth(cluster, group)


def hierarchical_s(cluster: Cluster, nbytes: float, group: Group) -> float | None:
    """3 base + 2(k-1) l_i + 2(k-1)/k n / B + 2(N-1) l_n + 2(N-1)/N n / S; None on one node or one rank a node."""
    k, N = group.per_node, group.nodes
    if k <= 1 or N <= 1:
        return None
    B = cluster.intra.effective_bytes_per_s
    S = cluster.node_network_bytes_per_s() * k / cluster.gpus_per_node
    inside = 2 * (k - 1) * cluster.intra.latency_s + 2 * (k - 1) / k * nbytes / B
    across = 2 * (N - 1) * cluster.inter.latency_s + 2 * (N - 1) / N * nbytes / S
    return 3 * cluster.base_latency_s + inside + across


def switch_s(cluster: Cluster, nbytes: float, group: Group) -> float | None:
    """l_switch + (1 + 1/g) n / (B e_switch); None where the switch cannot reduce (or spans nodes)."""
    if not cluster.switch_reduction or group.nodes > 1 or group.size <= 1:
        return None
    g = group.size
    return cluster.switch_latency_s + (1 + 1 / g) * nbytes / (cluster.intra.effective_bytes_per_s
                                                             * cluster.switch_efficiency)


_ALLREDUCE = {"ring": ring_s, "tree": tree_s, "hierarchical": hierarchical_s, "switch": switch_s}


def allreduce_s(cluster: Cluster, nbytes: float, group: Group, algorithm: str) -> float | None:
    """Seconds of one all-reduce by `algorithm`; 0 on one rank; None where it does not apply."""
    if algorithm not in _ALLREDUCE:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if group.size <= 1 or nbytes <= 0:
        return 0.0
    return _ALLREDUCE[algorithm](cluster, nbytes, group)


def allreduce_times(cluster: Cluster, nbytes: float, group: Group) -> dict[str, float]:
    """Every algorithm that applies to the group: name -> seconds."""
    out = {a: allreduce_s(cluster, nbytes, group, a) for a in ALGORITHMS}
    return {a: t for a, t in out.items() if t is not None}


def best_allreduce(cluster: Cluster, nbytes: float, group: Group) -> tuple[str, float]:
    """(algorithm, seconds) of the fastest all-reduce for the group (ties: ALGORITHMS' order)."""
    times = allreduce_times(cluster, nbytes, group)
    best = min(times, key=lambda a: (times[a], ALGORITHMS.index(a)))
    return best, times[best]


def chain_s(cluster: Cluster, nbytes: float, group: Group) -> float:
    """A pipelined chain's reduce or broadcast: base + (g-N) l_i + (N-1) l_n + n / min(B, S); 0 on one rank."""
    if group.size <= 1 or nbytes <= 0:
        return 0.0
    g, N = group.size, group.nodes
    lat = cluster.base_latency_s + (g - N) * cluster.intra.latency_s + (N - 1) * cluster.inter.latency_s
    return lat + nbytes / _bandwidth(cluster, group)


def bus_bytes_per_s(nbytes: float, procs: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: bytes / time x 2(p-1)/p."""
    return nbytes / seconds * 2 * (procs - 1) / procs
