"""The strategies projected onto a cluster (`cluster.py`): data, model and
hybrid parallelism on 1 to 1,024 GPUs, each exchange by its best collective
(`cluster.py`), strong and weak scaling, and which strategy wins where.

A step is rank 0's own step on its GPU (graph mode, resident data, one
process), then every collective its strategy calls, serialised. A model
group is consecutive ranks (inside a node while it fits); a hybrid data
group every p_model-th rank. The hybrid grid is the fastest power of two
p_model in [2, min(p/2, GPUs a node)] whose shard keeps a hidden unit a rank.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cluster import ALGORITHMS, Cluster, allreduce_times, chain_s, group_of
from .costs import itemsize as itemsize_of, pieces
from .machine import Machine
from .strategies import StrategyError, check_shard, grid, rank_collectives, shard_sizes
from .predict import predict_batch
from .. import names as N

STRATEGIES = ("data", "model", N.HYBRID)
PROCS = tuple(2 ** k for k in range(11))          # 1 .. 1,024 GPUs


@dataclass(frozen=True)
class Exchange:
    """One collective of a step, its fastest algorithm and every one that applies (name -> s)."""
    kind: str
    nbytes: int
    ranks: int
    algorithm: str
    s: float
    alternatives: tuple = ()


@dataclass(frozen=True)
class ClusterStep:
    """One strategy's step on a cluster: rank 0's compute and its exchanges."""
    strategy: str          # data, model, hybrid
    grid: tuple            # (p_data, p_model)
    procs: int
    batch: int
    compute_s: float
    exchanges: tuple

    @property
    def comm_s(self) -> float:
        return sum(e.s for e in self.exchanges)

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.total_s

    def collectives(self) -> str:
        """The exchanges in words: 'switch 1.6 MB x 8', one per collective."""
        return ", ".join(f"{e.kind} {e.algorithm} {e.nbytes / 1e6:.3g} MB over {e.ranks}"
                         for e in self.exchanges if e.ranks > 1) or "none"


def cluster_step(cluster: Cluster, machine: Machine, layer_sizes, batch: int, procs: int, parallel: str = "data",
                 model_procs: int = 0, precision: str = "float32") -> ClusterStep:
    """A strategy's predicted step on the cluster; a StrategyError where it cannot run."""
    if procs > cluster.max_procs:
        raise StrategyError(f"{procs} GPUs, more than the {cluster.max_procs} of {cluster.name}")
    p_data, p_model = grid(procs, parallel, model_procs)
    check_shard(layer_sizes, p_model)
    if p_data > batch:
        raise StrategyError(f"{p_data} data pieces of a batch of {batch}: each needs a sample "
                            f"(a batch of at least {p_data})")
    s = itemsize_of(precision)
    b = pieces(batch, p_data)[0]
    own = predict_batch(machine, shard_sizes(layer_sizes, p_model, 0), b, 1, precision, N.NCCL, N.RESIDENT,
                        exec_mode="graph")
    exchanges = []
    for c in rank_collectives(layer_sizes, batch, procs, 0, parallel, model_procs, N.NCCL):
        group = group_of(cluster, c.group, p_model if c.phase == N.ALLREDUCE else 1)   # a data group: every p_model-th
        n = s * c.elements
        if c.group <= 1:
            exchanges.append(Exchange(c.kind, n, c.group, "none", 0.0))
            continue
        times = allreduce_times(cluster, n, group) if c.kind == N.ALLREDUCE else {"chain": chain_s(cluster, n, group)}
        algorithm = min(times, key=lambda a: (times[a], ALGORITHMS.index(a) if a in ALGORITHMS else 0))
        exchanges.append(Exchange(c.kind, n, c.group, algorithm, times[algorithm], tuple(times.items())))
    return ClusterStep(parallel, (p_data, p_model), procs, batch, own.total_s, tuple(exchanges))


def hybrid_grids(layer_sizes, procs: int, per_node: int | None = None) -> list[int]:
    """The p_model a hybrid grid of `procs` can take: powers of two in [2, procs/2], at most `per_node`."""
    out, m = [], 2
    while m <= min(procs // 2, per_node or procs):
        try:
            check_shard(layer_sizes, m)
        except StrategyError:
            break
        out.append(m)
        m *= 2
    return out


def strategy_steps(cluster: Cluster, machine: Machine, layer_sizes, batch: int, procs: int,
                   precision: str = "float32", left_out: dict | None = None) -> dict[str, ClusterStep]:
    """Each strategy's step that can run (the fastest hybrid grid); `left_out` receives the others' why."""
    out, why = {}, {}
    grids = hybrid_grids(layer_sizes, procs, cluster.gpus_per_node)
    for parallel, m in [(N.DATA, 0), (N.MODEL, 0), *((N.HYBRID, m) for m in grids)]:
        try:
            st = cluster_step(cluster, machine, layer_sizes, batch, procs, parallel, m, precision)
        except StrategyError as e:
            why[parallel] = f"{e} (p_model = {m})" if m else str(e)
            continue
        if parallel not in out or st.total_s < out[parallel].total_s:   # the fastest hybrid grid
            out[parallel] = st
    if not grids:
        why[N.HYBRID] = (f"no grid of {procs} GPUs: p_model a power of two from 2 to min(p/2, "
                         f"{cluster.gpus_per_node} GPUs a node) whose shard keeps a hidden unit a rank")
    if left_out is not None:
        left_out.update({k: v for k, v in why.items() if k not in out})
    return out


def scaling(cluster: Cluster, machine: Machine, layer_sizes, batch: int, weak: bool = False,
            procs_list=PROCS, precision: str = "float32") -> list[dict]:
    """Rows of strong (the batch fixed) or weak scaling (`batch` a GPU), one per (p, strategy)."""
    rows, one = [], None
    for p in procs_list:
        if p > cluster.max_procs:
            break
        B = batch * p if weak else batch
        for name, st in strategy_steps(cluster, machine, layer_sizes, B, p, precision).items():
            if p == 1:
                one = one or st
            rows.append({"procs": p, "strategy": name, "grid": f"{st.grid[0]}x{st.grid[1]}", "batch": B,
                         "time_ms": 1e3 * st.total_s, "comm_ms": 1e3 * st.comm_s,
                         "samples_per_s": st.samples_per_s,
                         "speedup": st.samples_per_s / one.samples_per_s if one else None,
                         "collectives": st.collectives()})
    return rows


def crossover(cluster: Cluster, machine: Machine, hidden_sizes, batches, procs_list, input_size: int = 784,
              classes: int = 10, precision: str = "float32") -> list[dict]:
    """Which strategy is fastest at each (H, B, p), with each one's ms (None: cannot run)."""
    rows = []
    for H in hidden_sizes:
        for B in batches:
            for p in procs_list:
                steps = strategy_steps(cluster, machine, (input_size, H, classes), B, p, precision)
                if not steps:
                    continue
                win = min(steps, key=lambda k: steps[k].total_s)
                rows.append({"H": H, "B": B, "procs": p, "winner": win,
                             **{f"{k} ms": (1e3 * steps[k].total_s if k in steps else None) for k in STRATEGIES},
                             "hybrid grid": f"{steps[N.HYBRID].grid[0]}x{steps[N.HYBRID].grid[1]}"
                             if N.HYBRID in steps else None})
    return rows
