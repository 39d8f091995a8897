"""Cluster descriptions: `models/clusters/*.yaml` loaded into a frozen
dataclass (docs/model.md, "Clusters", lists the keys).

Nodes of `gpus_per_node` GPUs (a machine file, `machine`), the link inside
a node (`intra_node`; `switch_reduction`: NVLink SHARP) and the network
between nodes (`inter_node`: `nics_per_node` ports, a non-blocking fat
tree), each with line rate, efficiency and latency a step. Every figure
names its source (`sources`); a missing source, an unknown, missing or bad
value is a one-line error naming the file and key.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import checks

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

    def nodes_for(self, procs: int) -> int:
        """Nodes a job of `procs` GPUs fills (one rank a GPU, nodes filled in turn)."""
        return -(-procs // self.gpus_per_node)

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
    v = checks.positive(key, checks.number(key, value))
    if v > 1:
        raise checks.CheckError(f"{key} must be at most 1, got {v}")
    return v


def _link(data: dict, kinds: tuple) -> Link:
    return Link(checks.choice("kind", data["kind"], kinds),
                checks.positive("bytes_per_s", checks.number("bytes_per_s", data["bytes_per_s"])),
                _fraction("efficiency", data["efficiency"]),
                checks.non_negative("latency_s", checks.number("latency_s", data["latency_s"])),
                checks.non_negative("tree_latency_s", checks.number("tree_latency_s", data["tree_latency_s"])))


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
            gpus_per_node=checks.positive("gpus_per_node", checks.integer("gpus_per_node", top["gpus_per_node"])),
            nodes=checks.positive("nodes", checks.integer("nodes", top["nodes"])),
            base_latency_s=checks.non_negative("base_latency_s", checks.number("base_latency_s", top["base_latency_s"])),
            intra=_link(intra, INTRA_KINDS), inter=_link(inter, INTER_KINDS),
            nics_per_node=checks.positive("nics_per_node", checks.integer("nics_per_node", inter["nics_per_node"])),
            switch_reduction=checks.boolean("switch_reduction", intra["switch_reduction"]),
            switch_efficiency=_fraction("switch_efficiency", intra["switch_efficiency"]) if switch else 0.0,
            switch_latency_s=checks.non_negative("switch_latency_s", checks.number(
                "switch_latency_s", intra["switch_latency_s"])) if switch else 0.0,
            sources=dict(sources))
    except checks.CheckError as e:
        raise ClusterError(f"{where}: {e}") from None
    return cluster


def cluster_files() -> list:
    """The cluster files shipped with the package (models/clusters/*.yaml), by name."""
    try:
        folder = resources.files("perfmlp.machines").joinpath(CLUSTERS_FOLDER)
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parents[2] / "models" / CLUSTERS_FOLDER
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


def load_cluster(name_or_path: str | Path) -> Cluster:
    """The cluster in a file given by path, or shipped under a name (models/clusters/NAME.yaml)."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        shipped = cluster_files()
        found = [f for f in shipped if f.name == f"{name_or_path}.yaml"]
        if not found:
            names = ", ".join(f.name.removesuffix(".yaml") for f in shipped) or "none"
            raise ClusterError(f"no cluster named {str(name_or_path)!r} (shipped: {names}; or give a .yaml file)")
        p = found[0]
    try:
        data = checks.read_yaml(p, "cluster file")
    except checks.CheckError as e:
        raise ClusterError(str(e)) from None
    return cluster_from_mapping(data, str(p))
