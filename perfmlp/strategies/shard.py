"""A shard of a model group: its step (Network's, with the model group's allreduces of activations in its
hooks, one class per communication mode), its reducer when its data group is one rank, and the step's
compute part."""
from __future__ import annotations

import numpy as np

from ..comm import NcclGroup, host_array, staged_allreduce
from ..mlp import Network, to_host
from ..model.costs import piece
from ..model.strategies import layer_splits
from ..step import Parts, compute, exchange, no_phase


class ShardStep:
    """Mixed in before Network (or GpuNetwork), set up by `setup_shard`: shard m's step, Network's
    with the model group's allreduces in its hooks (no kernel changed). Parameters come and go
    whole: `set_params` keeps this shard's part; `get_params` and `weight_penalty` (collectives)
    gather the whole, the latter keeping the copy `predict` uses."""

    full_sizes: tuple
    splits: tuple
    m: int = 0
    group = None               # the model group
    allreduce = None           # over the model group; None on a group of one
    counts = None              # the batch's trace.format.Counts (a graph capture's), set by shard_compute
    updates = 0
    step_counters = ("updates",)  # added to per replay in graph mode (gpu/graph.py)
    _eval = None

    @property
    def combines_output(self) -> bool:
        return self.allreduce is not None and self.splits[-1] == "col"

    def _preactivation_done(self, l: int, z) -> None:
        if l < len(self.p.W) - 1 and self.splits[l] == "col" and self.allreduce is not None:
            self.allreduce(z, self.counts)  # partial sums of the pre-activation, before its bias

    def _output_bias(self):
        # a col-split output is combined after the forward phase (combine_output): one rank adds the bias
        return self.p.b[-1] if self.m == 0 or not self.combines_output else self._zero_bias

    def combine_output(self) -> None:
        self.allreduce(self.acts[-1], self.counts)

    def _input_grad_done(self, l: int, da) -> None:
        if self.splits[l] == "row" and self.allreduce is not None:
            self.allreduce(da, self.counts)  # partial sums of the layer below's gradient

    def update(self) -> None:
        super().update()
        self.updates += 1

    # -- whole parameters in and out ----------------------------------------------------------
    def _cut(self, l: int) -> tuple[slice, slice]:
        """(rows, columns) of the whole W_l (0-based l) that this shard holds."""
        n_out, n_in = self.full_sizes[l + 1], self.full_sizes[l]
        p = self.group.size
        if self.splits[l] == "row":
            return slice(*piece(n_out, p, self.m)), slice(0, n_in)
        if self.splits[l] == "col":
            return slice(0, n_out), slice(*piece(n_in, p, self.m))
        return slice(0, n_out), slice(0, n_in)

    def set_params(self, weights, biases=None) -> None:
        cuts = [self._cut(l) for l in range(len(weights))]
        cut = (lambda a, *idx: np.ascontiguousarray(np.asarray(a)[idx]))  # a column block is strided: copy it
        Network.set_params(self, [cut(w, r, c) for w, (r, c) in zip(weights, cuts)],
                           [cut(bias, r) for bias, (r, _) in zip(biases, cuts)] if biases else None)

    def get_params(self) -> dict[str, np.ndarray]:
        mine = [(to_host(w), to_host(b)) for w, b in zip(self.p.W, self.p.b)]
        every = self.group.allgather(mine)
        out = {}
        for l in range(len(mine)):
            ws, bs = [e[l][0] for e in every], [e[l][1] for e in every]
            split = self.splits[l]
            out[f"W{l + 1}"] = np.concatenate(ws, axis=0) if split == "row" else \
                np.concatenate(ws, axis=1) if split == "col" else ws[0]
            out[f"b{l + 1}"] = np.concatenate(bs) if split == "row" else bs[0]
        return out

    def weight_penalty(self) -> float:
        full = self.get_params()
        self._eval = (full, self.updates)
        return 0.5 * self.reg * sum(float((full[f"W{l}"].astype(np.float64) ** 2).sum())
                                    for l in range(1, len(self.splits) + 1))

    def predict(self, x):
        if self._eval is None or self._eval[1] != self.updates:
            raise RuntimeError("a shard predicts with the parameters weight_penalty gathered; "
                               "they changed since")
        full, _ = self._eval
        net = Network(self.xp, self.full_sizes, self.dtype, self.lr, self.reg, self.global_batch)
        net.load_params(full)
        return net.predict(x)


class ShardNetwork(ShardStep, Network):
    """A shard on the host (NumPy)."""


def setup_shard(net, full_sizes, group, m: int, allreduce) -> None:
    net.full_sizes = tuple(full_sizes)
    net.splits = layer_splits(len(full_sizes) - 1)
    net.group, net.m, net.allreduce = group, m, allreduce
    net._zero_bias = net.xp.zeros(full_sizes[-1], dtype=net.dtype)


class LocalReducer:
    """No gradient exchange (a data group of one); `name`: the mode of the run's other collectives."""

    def __init__(self, name: str, net, on_host: bool):
        self.name, self.net, self.on_host = name, net, on_host

    def reduce(self, flat, phase, counts) -> None:
        pass

    def host_value(self, flat, index: int):
        return float(flat[index]) if self.on_host else None  # on the GPU reading it would synchronise

    def epoch_loss_sum(self) -> float:
        return self.net.take_epoch_loss_sum()


def shard_compute(net, x, y, phase, counts) -> None:
    """step.compute, the shard's hooks' allreduces counted into `counts`."""
    net.counts = counts
    compute(net, x, y, phase, counts)


SHARD = Parts(shard_compute, exchange)     # the data group's reducer (LocalReducer when it is one rank)


class HostAllreduce:
    """Host buffers (NumPy): one in-place MPI_Allreduce."""

    def __init__(self, group):
        self.group = group

    def __call__(self, a, counts) -> None:
        self.group.allreduce_sum(a)
        counts.bytes_mpi += a.nbytes
        counts.collectives.append(("MPI_Allreduce", int(a.size)))


class StagedAllreduce:
    """GPU buffers through one host buffer of the largest size (mpi-staged)."""

    def __init__(self, cupy, group, max_elements: int, dtype, memory: str):
        self.cp, self.group = cupy, group
        self.host = host_array(max_elements, dtype, memory)

    def __call__(self, a, counts) -> None:
        staged_allreduce(self.group, a, self.host, self.cp.cuda.get_current_stream(), no_phase, counts)


class NcclAllreduce(NcclGroup):
    """Device buffers: ncclAllReduce in place on the step's stream (no synchronisation), capturable."""

    def __init__(self, cupy, group, dtype, max_elements: int):
        super().__init__(cupy, group, dtype)
        self._warm_up(max_elements, lambda ptr: self._allreduce(ptr, max_elements))   # the largest activation

    def __call__(self, a, counts) -> None:
        self._allreduce(a.data.ptr, a.size)
        counts.bytes_nccl += a.nbytes
        counts.collectives.append(("ncclAllReduce", int(a.size)))
