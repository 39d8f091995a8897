"""The grid of a strategy: p = p_data x p_model, each rank's place in it,
how each layer is split over a model group, and the shard a rank holds."""
from __future__ import annotations

from ..costs import piece
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
    """(forward, backward) allreduces over the model group, each (layer, elements),
    in the order the step issues them; the forward's last is the output's (the
    `combine` phase) when the output layer is col-split."""
    L = len(layer_sizes) - 1
    splits = layer_splits(L)
    fwd = [(l, layer_sizes[l] * b) for l in range(1, L + 1) if splits[l - 1] == "col"]
    bwd = [(l, layer_sizes[l - 1] * b) for l in range(L, 1, -1) if splits[l - 1] == "row"]
    return fwd, bwd
