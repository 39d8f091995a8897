"""The grid of a strategy (p = p_data x p_model, each rank's place, how each
layer is split over a model group, a rank's shard), and what one rank
computes, copies and hands to collectives per step (the trace's counters, to
the byte), with the closed forms for one hidden layer."""
from __future__ import annotations

from dataclasses import dataclass

from ..costs import LOSS_SLOTS, batch_counts, n_params, piece, pieces
from ... import names as N

PS_COMMS = N.PS_COMMS
DEVICE_COMMS = N.DEVICE_COMMS
ROOT = 0                               # the parameter server's rank


class StrategyError(ValueError):
    """A grid or strategy that cannot run (one-line message naming the value)."""


def grid(procs: int, parallel: str, model_procs: int = 0) -> tuple[int, int]:
    """(p_data, p_model) of a run on `procs` ranks."""
    if parallel == N.DATA:
        return procs, 1
    if parallel == N.MODEL:
        return 1, procs
    if parallel != N.HYBRID:
        raise StrategyError(f"parallel must be one of {', '.join(N.STRATEGIES)}, got {parallel!r}")
    if model_procs <= 0:
        raise StrategyError("parallel hybrid needs model_procs, the ranks of each model group (p = p_data x p_model)")
    if procs % model_procs:
        raise StrategyError(f"model_procs ({model_procs}) must divide the {procs} ranks (p = p_data x p_model)")
    return procs // model_procs, model_procs


def coords(rank: int, p_model: int) -> tuple[int, int]:
    """(d, m): rank's data group index (its piece of the batch) and its shard."""
    return divmod(rank, p_model)


def layer_splits(n_layers: int) -> tuple[str, ...]:
    """How layer l = 1..L is split over a model group: row, col, rep."""
    out = ["row" if l % 2 else "col" for l in range(1, n_layers + 1)]
    if out[-1] == "row":
        out[-1] = "rep"
    return tuple(out)


def shard_sizes(layer_sizes, p_model: int, m: int) -> tuple[int, ...]:
    """Layer sizes of shard m: a row layer's units split by `piece`."""
    sizes = list(layer_sizes)
    for l, split in enumerate(layer_splits(len(layer_sizes) - 1), start=1):
        if split == "row":
            lo, hi = piece(layer_sizes[l], p_model, m)
            sizes[l] = hi - lo
    return tuple(sizes)


def check_shard(layer_sizes, p_model: int) -> None:
    """Every shard owns at least one unit of every row-split layer."""
    for l, split in enumerate(layer_splits(len(layer_sizes) - 1), start=1):
        if split == "row" and layer_sizes[l] < p_model:
            raise StrategyError(f"hidden layer {l} has {layer_sizes[l]} units, fewer than the {p_model} ranks "
                                 f"of a model group")


def activation_collectives(layer_sizes, b: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(forward, backward) allreduces over the model group, each (layer, elements), in issue order."""
    L = len(layer_sizes) - 1
    splits = layer_splits(L)
    fwd = [(l, layer_sizes[l] * b) for l in range(1, L + 1) if splits[l - 1] == "col"]
    bwd = [(l, layer_sizes[l - 1] * b) for l in range(L, 1, -1) if splits[l - 1] == "row"]
    return fwd, bwd


_NAMES = {("allreduce", False): "MPI_Allreduce", ("allreduce", True): "ncclAllReduce",
          ("reduce", False): "MPI_Reduce", ("reduce", True): "ncclReduce",
          ("bcast", False): "MPI_Bcast", ("bcast", True): "ncclBroadcast"}


@dataclass(frozen=True)
class Collective:
    kind: str         # allreduce, reduce, bcast
    elements: int
    group: int        # ranks taking part
    phase: str        # the trace phase it runs in

    def name(self, comm: str) -> str:
        return _NAMES[(self.kind, comm in DEVICE_COMMS)]


@dataclass(frozen=True)
class RankCounts:
    """One rank's step: shard, piece, FLOPs per phase, and the bytes it copies and hands to MPI / NCCL."""

    rank: int
    b: int                      # samples this rank computes on
    sizes: tuple[int, ...]      # the network it runs (a shard, or the whole one)
    flops: dict                 # phase -> FLOPs
    collectives: tuple[Collective, ...]
    bytes_h2d: int
    bytes_d2h: int
    bytes_mpi: int
    bytes_nccl: int
    kernels: int                # kernels launched (a host launch each, eager)

    @property
    def flops_total(self) -> int:
        return sum(self.flops.values())

    @property
    def bytes_comm(self) -> int:
        return self.bytes_mpi + self.bytes_nccl

    def collective_list(self, comm: str) -> list[list]:
        """As the trace's `collectives`: [[name, elements], ...]."""
        return [[c.name(comm), c.elements] for c in self.collectives]


def _place(layer_sizes, batch: int, procs: int, rank: int, parallel: str, model_procs: int):
    """(p_data, p_model, the rank's samples, its shard's layer sizes)."""
    p_data, p_model = grid(procs, parallel, model_procs)
    d, m = coords(rank, p_model)
    return p_data, p_model, pieces(batch, p_data)[d], shard_sizes(layer_sizes, p_model, m)


def rank_collectives(layer_sizes, batch: int, procs: int, rank: int, parallel: str = "data",
                     model_procs: int = 0, comm: str = N.NCCL) -> tuple[Collective, ...]:
    p_data, p_model, b, sizes = _place(layer_sizes, batch, procs, rank, parallel, model_procs)
    out = []
    if p_model > 1:
        fwd, bwd = activation_collectives(layer_sizes, b)
        L = len(layer_sizes) - 1
        out += [Collective("allreduce", n, p_model, "combine" if l == L else "forward") for l, n in fwd]
        out += [Collective("allreduce", n, p_model, "backward") for _, n in bwd]
    g = n_params(sizes) + LOSS_SLOTS
    if comm in PS_COMMS:
        if p_model > 1:
            raise StrategyError(f"--comm {comm} (the parameter server) is data parallelism's exchange")
        out.append(Collective("reduce", g, procs, "reduce"))
        # the host version broadcasts the loss slot too, so every rank sees a non-finite loss at once
        out.append(Collective("bcast", n_params(sizes) + (LOSS_SLOTS if comm == N.PS else 0), procs, "bcast"))
    elif p_data > 1 or parallel == N.DATA:
        # data parallelism hands the buffer to the collective even on one process (model/predict's rule)
        out.append(Collective("allreduce", g, p_data, "allreduce"))
    return tuple(out)


def rank_counts(layer_sizes, batch: int, procs: int, rank: int, itemsize: int, parallel: str = "data",
                model_procs: int = 0, comm: str = N.NCCL, batch_transfer: str = N.RESIDENT) -> RankCounts:
    """What rank `rank` computes, copies and communicates in one step (the trace's counters)."""
    _, _, b, sizes = _place(layer_sizes, batch, procs, rank, parallel, model_procs)
    base = batch_counts(sizes, b, itemsize, N.NCCL, batch_transfer)  # compute and the batch copy only
    flops = dict(base.flops)
    kernels = sum(base.kernels.values())
    if comm in PS_COMMS and rank != ROOT:
        kernels -= base.kernels["update"]
        del flops["update"]  # only the server updates
    colls = rank_collectives(layer_sizes, batch, procs, rank, parallel, model_procs, comm)
    nbytes = itemsize * sum(c.elements for c in colls)
    staged = comm == N.MPI_STAGED
    return RankCounts(rank=rank, b=b, sizes=sizes, flops=flops, collectives=colls,
                      bytes_h2d=base.bytes_h2d + (nbytes if staged else 0), bytes_d2h=nbytes if staged else 0,
                      bytes_mpi=0 if comm in DEVICE_COMMS else nbytes, bytes_nccl=nbytes if comm in DEVICE_COMMS else 0,
                      kernels=kernels)


def step_bytes(layer_sizes, batch: int, procs: int, itemsize: int, parallel: str = "data", model_procs: int = 0,
               comm: str = N.NCCL) -> dict:
    """Bytes handed to collectives in one step: the most of any rank, and the job's."""
    per = [rank_counts(layer_sizes, batch, procs, r, itemsize, parallel, model_procs, comm).bytes_comm
           for r in range(procs)]
    return {"per_rank": max(per), "job": sum(per)}


# ---- closed forms for one hidden layer (docs/model.md; tested equal to rank_counts) -----------

def closed_form_bytes(D: int, H: int, C: int, B: int, p: int, s: int, strategy: str, p_model: int = 1) -> int:
    """Bytes one rank (rank 0) hands to collectives per step, network D-H-C, fp size s."""
    n_theta = H * D + H + C * H + C
    if strategy == N.DATA:
        return s * (n_theta + 1)
    if strategy == N.PS:
        return 2 * s * (n_theta + 1)
    if strategy == N.MODEL:
        return s * C * B if p > 1 else 0
    if strategy == N.HYBRID:
        p_data = p // p_model
        b = -(-B // p_data)
        h = -(-H // p_model)
        shard = h * D + h + C * h + C
        return (s * C * b if p_model > 1 else 0) + (s * (shard + 1) if p_data > 1 else 0)
    raise StrategyError(f"no closed form for strategy {strategy!r}")
