"""Clusters: `models/clusters/*.yaml` loaded into a frozen dataclass
(docs/model.md, "Clusters", lists the keys: nodes of GPUs described by a
machine file, the link inside a node, the network between nodes, each
figure with its source; a bad one is a one-line error naming file and key),
and the collectives priced on them: ring, double binary tree, hierarchical
and in-switch (NVLS) all-reduce, the chain reduce and broadcast, the best
for a group (docs/model.md derives them).

Notation: n bytes, a group of g ranks, k in each of its N nodes (G GPUs a
node); B a GPU's bandwidth into the node's fabric, S the group's share of
its nodes' ports (nics x rate x k / G), both line rate x efficiency; `base`
a collective's latency, l_i and l_n a step's inside and across nodes. A
term that does not exist drops. Not modelled: the LL and LL128 protocols,
the pipeline's ramp, NVLS across nodes, congestion beyond the ports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from .machine.files import _count, _non_negative, _positive, find_file, machine_files, read_file

CLUSTERS_FOLDER = "clusters"          # under the machine files' package (models/clusters/)
INTRA_KINDS = ("nvswitch", "pcie")
INTER_KINDS = ("infiniband", "ethernet")


class ClusterError(ValueError):
    """A cluster file that cannot be used (message: one line, file and key)."""


@dataclass(frozen=True)
class Link:
    """A link: line rate a direction, the fraction a collective gets, latency a ring and a tree step."""
    kind: str
    bytes_per_s: float
    efficiency: float
    latency_s: float
    tree_latency_s: float

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bytes_per_s * self.efficiency


@dataclass(frozen=True)
class Cluster:
    name: str
    path: str
    machine: str                 # the GPUs' machine file (a shipped name or a path)
    gpus_per_node: int
    nodes: int
    base_latency_s: float
    intra: Link
    inter: Link
    nics_per_node: int
    switch_reduction: bool
    switch_efficiency: float     # 0 without switch_reduction
    switch_latency_s: float
    sources: dict

    @property
    def max_procs(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_network_bytes_per_s(self) -> float:
        """What one node moves into the network a direction: all its ports."""
        return self.nics_per_node * self.inter.effective_bytes_per_s


_TOP = ("name", "machine", "gpus_per_node", "nodes", "base_latency_s", "intra_node", "inter_node", "sources")
_LINK = ("kind", "bytes_per_s", "efficiency", "latency_s", "tree_latency_s")
_INTRA = (*_LINK, "switch_reduction")
_SWITCH = ("switch_efficiency", "switch_latency_s")
_INTER = (*_LINK, "nics_per_node")


def _keys(where: str, data, required: tuple, optional: tuple = ()) -> dict:
    if not isinstance(data, dict):
        raise ClusterError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise ClusterError(f"{where}: unknown key {unknown[0]}")
    for key in required:
        if data.get(key) is None:
            raise ClusterError(f"{where}: missing key {key}")
    return data


def _fraction(key: str, value) -> float:
    v = _positive(key, value)
    if v > 1:
        raise checks.CheckError(f"{key} must be at most 1, got {v}")
    return v


def _link(data: dict, kinds: tuple) -> Link:
    return Link(checks.choice("kind", data["kind"], kinds), _positive("bytes_per_s", data["bytes_per_s"]),
                _fraction("efficiency", data["efficiency"]), _non_negative("latency_s", data["latency_s"]),
                _non_negative("tree_latency_s", data["tree_latency_s"]))


def cluster_from_mapping(data, where: str) -> Cluster:
    """A Cluster from a file's mapping; one-line ClusterError naming `where` and the key."""
    top = _keys(where, data, _TOP)
    switch = isinstance(top["intra_node"], dict) and top["intra_node"].get("switch_reduction") is True
    intra = _keys(f"{where}: intra_node", top["intra_node"], _INTRA + (_SWITCH if switch else ()))
    inter = _keys(f"{where}: inter_node", top["inter_node"], _INTER)
    try:
        sources = top["sources"]
        if not isinstance(sources, dict):
            raise checks.CheckError("sources must map each figure to where it comes from")
        figures = [k for k in _TOP if k not in ("name", "sources", "intra_node", "inter_node")]
        figures += [f"intra_node.{k}" for k in intra if k != "kind"]
        figures += [f"inter_node.{k}" for k in inter if k != "kind"]
        for key in figures:
            if not isinstance(sources.get(key), str) or not sources[key].strip():
                raise checks.CheckError(f"sources: no source for {key}")
        extra = sorted(set(sources) - set(figures))
        if extra:
            raise checks.CheckError(f"sources: {extra[0]} is not a figure of this file")
        cluster = Cluster(
            name=checks.string("name", top["name"], non_empty=True), path=where,
            machine=checks.string("machine", top["machine"], non_empty=True),
            gpus_per_node=_count("gpus_per_node", top["gpus_per_node"]), nodes=_count("nodes", top["nodes"]),
            base_latency_s=_non_negative("base_latency_s", top["base_latency_s"]),
            intra=_link(intra, INTRA_KINDS), inter=_link(inter, INTER_KINDS),
            nics_per_node=_count("nics_per_node", inter["nics_per_node"]),
            switch_reduction=checks.boolean("switch_reduction", intra["switch_reduction"]),
            switch_efficiency=_fraction("switch_efficiency", intra["switch_efficiency"]) if switch else 0.0,
            switch_latency_s=_non_negative("switch_latency_s", intra["switch_latency_s"]) if switch else 0.0,
            sources=dict(sources))
    except checks.CheckError as e:
        raise ClusterError(f"{where}: {e}") from None
    return cluster


def cluster_files() -> list:
    """The cluster files shipped with the package (models/clusters/*.yaml), by name."""
    return machine_files(CLUSTERS_FOLDER)


def load_cluster(name_or_path: str | Path) -> Cluster:
    """The cluster in a file given by path, or shipped under a name (models/clusters/NAME.yaml)."""
    p = find_file(name_or_path, cluster_files, "cluster", ClusterError)
    return cluster_from_mapping(read_file(p, "cluster file", ClusterError), str(p))


# ---- collectives priced on a cluster ---------------------------------------------------------------

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

