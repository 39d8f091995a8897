"""Model parallelism, the hybrid grid and the parameter server: the trainer
side of perfmlp/model/partition.py (which says what each strategy splits,
computes and exchanges; docs/model.md derives the bytes).

- `split_groups`: the p = p_data x p_model grid as two MPI communicators per
  rank (Comm.Split): its model group (the ranks sharing a piece of the
  batch, one shard each) and its data group (the ranks holding the same
  shard, one piece each).
- `ShardNetwork`: a network (NumPy, or the GPU's fused kernels) of the
  shard's sizes, whose forward and backward are Network's with an allreduce
  over the model group where a column-split layer's partial sums must be
  combined (the model package's `activation_collectives`); the kernels are
  Network's own, so the operations recorded are `step_ops(shard_sizes)`.
- Activation allreduces, one per communication mode: host MPI (NumPy),
  staged through the host (GPU, mpi-staged) or NCCL; each counts its bytes
  where it issues them, as comm.py's reducers do.
- The parameter server (`--comm ps` on NumPy, `ps-nccl` on the GPU): the
  gradient buffer reduced to rank 0, updated there, parameters broadcast.
- `SHARD` and `SERVER`: the training step's parts (perfmlp/step.py) with
  these exchanges and their trace phases (`combine`, `reduce`, `bcast`).
  The step is perfmlp/step.py's, eager or, with NCCL, replayed as one CUDA
  graph per piece size (perfmlp/gpu/graph.py), as data parallelism's is.

Collectives over a group of one rank are not called, so not counted.
"""
from __future__ import annotations

import numpy as np

from .batches import DeviceBatches, HostBatches
from .comm import HostReducer, NcclReducer, StagedReducer, new_nccl_communicator
from .errors import PerfmlpError
from .mlp import FlatParams, Network, _to_host
from .model.costs import LOSS_SLOTS, piece, pieces
from .model.partition import (PS_COMMS, ROOT, PartitionError, check_shard, coords, grid, layer_splits,
                              shard_sizes)
from .model.predict import staging_memory
from .step import NonFiniteLoss, Parts, compute, exchange


# ---- process groups ------------------------------------------------------------------------------

class LocalGroup:
    """A group of one process without MPI."""

    rank, size = 0, 1
    library = "none"

    def allreduce_sum(self, buf) -> None:
        pass

    def reduce_sum(self, buf, root: int = ROOT) -> None:
        pass

    def bcast_buffer(self, buf, root: int = ROOT) -> None:
        pass

    def bcast(self, obj, root: int = 0):
        return obj

    def allgather(self, obj):
        return [obj]


class Group:
    """An MPI communicator with MPIWorld's interface, plus the parameter
    server's rooted collectives on buffers."""

    def __init__(self, comm, library: str):
        from mpi4py import MPI
        self.MPI, self.comm, self.library = MPI, comm, library
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def allreduce_sum(self, buf) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def reduce_sum(self, buf, root: int = ROOT) -> None:
        if self.rank == root:
            self.comm.Reduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM, root=root)
        else:
            self.comm.Reduce(buf, None, op=self.MPI.SUM, root=root)

    def bcast_buffer(self, buf, root: int = ROOT) -> None:
        self.comm.Bcast(buf, root=root)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj):
        return self.comm.allgather(obj)


def world_group(world):
    return Group(world.comm, world.library) if hasattr(world, "comm") else LocalGroup()


def split_groups(world, p_model: int):
    """(data group, model group) of this rank: rank r sits at (d, m) =
    divmod(r, p_model); its model group is row d (ranks d*p_model .. +p_model-1,
    adjacent GPUs), its data group column m."""
    if not hasattr(world, "comm"):
        return LocalGroup(), LocalGroup()
    d, m = coords(world.rank, p_model)
    return (Group(world.comm.Split(color=m, key=d), world.library),
            Group(world.comm.Split(color=d, key=m), world.library))


# ---- allreduce of activations over the model group ---------------------------------------------

class HostAllreduce:
    """Host buffers (NumPy): one in-place MPI_Allreduce."""

    def __init__(self, group):
        self.group = group

    def __call__(self, a, counts) -> None:
        self.group.allreduce_sum(a)
        counts.bytes_mpi += a.nbytes
        counts.collectives.append(("MPI_Allreduce", int(a.size)))


class StagedAllreduce:
    """GPU buffers through the host (Open MPI is not CUDA-aware there): D2H,
    MPI_Allreduce, H2D, into one host buffer of the largest size."""

    def __init__(self, cupy, group, max_elements: int, dtype, memory: str):
        self.cp, self.group = cupy, group
        if memory == "pinned":
            import cupyx
            self.host = cupyx.empty_pinned((max_elements,), dtype)
        else:
            self.host = np.empty(max_elements, dtype)

    def __call__(self, a, counts) -> None:
        h = self.host[:a.size].reshape(a.shape)
        stream = self.cp.cuda.get_current_stream()
        a.get(out=h, stream=stream)
        stream.synchronize()  # MPI reads the host buffer the GPU just wrote
        counts.bytes_d2h += a.nbytes
        self.group.allreduce_sum(h)
        counts.bytes_mpi += h.nbytes
        counts.collectives.append(("MPI_Allreduce", int(a.size)))
        a.set(h, stream=stream)
        counts.bytes_h2d += a.nbytes


def nccl_communicator(group):
    """An NCCL communicator over an MPI group (comm.py's, made for this group)."""
    from cupy.cuda import nccl
    if not nccl.available:
        raise PerfmlpError("--comm nccl: CuPy was built without NCCL")
    return nccl, new_nccl_communicator(nccl, group)


def nccl_dtype(nccl, dtype):
    return nccl.NCCL_FLOAT32 if np.dtype(dtype) == np.float32 else nccl.NCCL_FLOAT64


class NcclAllreduce:
    """Device buffers: ncclAllReduce in place on the step's stream (no
    synchronisation); capturable into the step's CUDA graph."""

    def __init__(self, cupy, group, dtype, max_elements: int):
        self.nccl, self.comm = nccl_communicator(group)
        self._dtype = nccl_dtype(self.nccl, dtype)
        stream = cupy.cuda.get_current_stream()
        self._stream_ptr = stream.ptr
        # one allreduce of the largest activation outside any graph (as comm.NcclReducer's warm-up)
        scratch = cupy.zeros(max_elements, dtype)
        self.comm.allReduce(scratch.data.ptr, scratch.data.ptr, scratch.size, self._dtype, self.nccl.NCCL_SUM,
                            self._stream_ptr)
        stream.synchronize()

    def __call__(self, a, counts) -> None:
        self.comm.allReduce(a.data.ptr, a.data.ptr, a.size, self._dtype, self.nccl.NCCL_SUM, self._stream_ptr)
        counts.bytes_nccl += a.nbytes
        counts.collectives.append(("ncclAllReduce", int(a.size)))


# ---- the shard -----------------------------------------------------------------------------------

class ShardStep:
    """Mixed in before Network (or GpuNetwork): the step of shard m of a model
    group (`setup_shard` sets it up). forward and backward are Network's; its
    hooks insert the model group's allreduces (no kernel added or changed).

    Parameters come and go whole: `set_params` takes the whole network's and
    keeps this shard's part; `get_params` (a collective over the model group:
    every rank calls it, as the training loop does) gathers the whole.
    `weight_penalty` (once per epoch on every rank) gathers them too and keeps
    the copy that `predict` (rank 0 only) evaluates with."""

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
        # a col-split output is combined after the step's forward phase (combine_output),
        # so its bias is added by the group's first rank only
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
        mine = [(_to_host(w), _to_host(b)) for w, b in zip(self.p.W, self.p.b)]
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
        L = len(self.splits)
        net.set_params([full[f"W{l}"] for l in range(1, L + 1)], [full[f"b{l}"] for l in range(1, L + 1)])
        return net.predict(x)


class ShardNetwork(ShardStep, Network):
    """A shard on the host (NumPy)."""


def setup_shard(net, full_sizes, group, m: int, allreduce) -> None:
    net.full_sizes = tuple(full_sizes)
    net.splits = layer_splits(len(full_sizes) - 1)
    net.group, net.m, net.allreduce = group, m, allreduce
    net._zero_bias = net.xp.zeros(full_sizes[-1], dtype=net.dtype)


# ---- reducers the strategies add -------------------------------------------------------------

class LocalReducer:
    """No gradient exchange (a data group of one: pure model parallelism);
    `name` is the communication mode of the run's other collectives."""

    def __init__(self, name: str, net, on_host: bool):
        self.name, self.net, self.on_host = name, net, on_host

    def reduce(self, flat, phase, counts) -> None:
        pass

    def host_value(self, flat, index: int):
        return float(flat[index]) if self.on_host else None  # on the GPU reading it would synchronise

    def epoch_loss_sum(self) -> float:
        return self.net.take_epoch_loss_sum()


class HostParamServer:
    """`ps` (NumPy): MPI_Reduce of the gradient buffer to rank 0, the update
    there, MPI_Bcast of the parameters and the loss (the parameter buffer
    gets the loss slot, so that every rank sees a non-finite loss at once;
    rank 0 then skips the update, leaving the last finite parameters)."""

    name = "ps"

    def __init__(self, world, net):
        self.group, self.net = world_group(world), net
        net.p = FlatParams(net.xp, net.p.layer_sizes, net.dtype, extra=LOSS_SLOTS)

    def exchange(self, phase, counts) -> None:
        g, p, grp = self.net.g, self.net.p, self.group
        with phase("reduce"):
            grp.reduce_sum(g.flat, ROOT)
        self._count(counts, "MPI_Reduce", g.flat)
        if grp.rank == ROOT:
            p.extra[0] = g.extra[0]
            if np.isfinite(p.extra[0]):
                with phase("update"):
                    self.net.update()
        with phase("bcast"):
            grp.bcast_buffer(p.flat, ROOT)
        self._count(counts, "MPI_Bcast", p.flat)

    def _count(self, counts, name: str, buf) -> None:
        if self.group.library != "none":
            counts.bytes_mpi += buf.nbytes
            counts.collectives.append((name, int(buf.size)))

    def host_value(self, flat, index: int) -> float:
        return float(self.net.p.extra[0])


class NcclParamServer:
    """`ps-nccl` (GPU): ncclReduce of the gradient buffer to rank 0, the update
    there, ncclBroadcast of the parameters; no synchronisation, so the whole
    step captures into a CUDA graph (rank 0's with the update, the others'
    without). Only rank 0's update kernel moves the loss into the epoch's
    sum, which is broadcast once per epoch (8 bytes over host MPI, outside
    every batch's counters)."""

    name = "ps-nccl"

    def __init__(self, cupy, world, net):
        self.group, self.net = world_group(world), net
        self.nccl, self.comm = nccl_communicator(self.group)
        self._dtype = nccl_dtype(self.nccl, net.dtype)
        stream = cupy.cuda.get_current_stream()
        self._stream_ptr = stream.ptr
        # a reduce and a broadcast of the buffers' sizes outside any graph (as comm.NcclReducer's warm-up)
        scratch = cupy.zeros(net.g.flat.size, net.dtype)
        self.comm.reduce(scratch.data.ptr, scratch.data.ptr, scratch.size, self._dtype, self.nccl.NCCL_SUM, ROOT,
                         self._stream_ptr)
        self.comm.bcast(scratch.data.ptr, net.p.n_params, self._dtype, ROOT, self._stream_ptr)
        stream.synchronize()

    def exchange(self, phase, counts) -> None:
        g, p, root = self.net.g, self.net.p, self.group.rank == ROOT
        with phase("reduce"):
            self.comm.reduce(g.flat.data.ptr, g.flat.data.ptr, g.flat.size, self._dtype, self.nccl.NCCL_SUM, ROOT,
                             self._stream_ptr)
            if not root:
                g.extra.fill(0)  # the loss was sent; the next batch's kernel adds into this slot
        counts.bytes_nccl += g.flat.nbytes
        counts.collectives.append(("ncclReduce", int(g.flat.size)))
        if root:
            with phase("update"):
                self.net.update()
        with phase("bcast"):
            self.comm.bcast(p.params.data.ptr, p.n_params, self._dtype, ROOT, self._stream_ptr)
        counts.bytes_nccl += p.params.nbytes
        counts.collectives.append(("ncclBroadcast", int(p.n_params)))

    def host_value(self, flat, index: int):
        return None

    def epoch_loss_sum(self) -> float:
        v = np.array([self.net.take_epoch_loss_sum() if self.group.rank == ROOT else 0.0])
        self.group.bcast_buffer(v, ROOT)
        return float(v[0])


# ---- the steps' parts (perfmlp/step.py) ------------------------------------------------------

def shard_compute(net, x, y, phase, counts) -> None:
    """Forward, loss and backward of a shard: the model group's allreduces
    run inside forward and backward (the hooks count them into `counts`),
    and a column-split output is combined in its own phase after forward."""
    net.counts = counts
    with phase("forward"):
        net.forward(x)
    if net.combines_output:
        with phase("combine"):
            net.combine_output()
    with phase("loss"):
        net.loss(y)
    with phase("backward"):
        net.backward()


def server_exchange(net, reducer, phase, counts, nonfinite=NonFiniteLoss) -> float | None:
    """The parameter server's exchange, which updates on rank 0."""
    reducer.exchange(phase, counts)
    ce = reducer.host_value(net.g.flat, net.g.n_params)
    if ce is not None and not np.isfinite(ce):
        raise nonfinite(ce)
    return ce


SHARD = Parts(shard_compute, exchange)     # the data group's reducer (LocalReducer when it is one rank)
SERVER = Parts(compute, server_exchange)


# ---- assembly (backend.build calls this for every strategy but the plain allreduce) -------------

def backend_parts(cfg, world, xtrain, ytrain, name: str) -> dict:
    """The fields of backend.Backend for a run with --parallel model|hybrid or
    a parameter server; `name`: the backend that runs (numpy or cupy)."""
    try:
        p_data, p_model = grid(world.size, cfg.parallel, cfg.model_procs)
        check_shard(cfg.layer_sizes, p_model)
    except PartitionError as e:
        raise PerfmlpError(str(e)) from None
    comm = cfg.comm if cfg.comm != "auto" else ("mpi" if name == "numpy" else "mpi-staged")
    d, m = coords(world.rank, p_model)
    max_local = max(pieces(cfg.batch_size, p_data))
    args = (cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size)
    stream = None
    if name == "cupy":
        from .gpu import require_cupy, use_device
        from .gpu.network import GpuNetwork
        xp = require_cupy()
        stream = use_device(xp, world.rank)
        batches = DeviceBatches(xp, xtrain, ytrain, cfg.batch_transfer, max_local)
        sync = stream.synchronize
    else:
        xp, batches, sync = np, HostBatches(xtrain, ytrain), (lambda: None)
    if comm in PS_COMMS:
        net = GpuNetwork(xp, cfg.layer_sizes, *args, max_local, cfg.gemm) if name == "cupy" else \
            Network(np, cfg.layer_sizes, *args)
        server = NcclParamServer(xp, world, net) if comm == "ps-nccl" else HostParamServer(world, net)
        return dict(name=name, xp=xp, net=net, batches=batches, reducer=server, sync=sync, stream=stream,
                    parts=SERVER, data_group=(world.size, world.rank))
    data_group, model_group = split_groups(world, p_model)
    sizes = shard_sizes(cfg.layer_sizes, p_model, m)
    if name == "cupy":
        net = type("GpuShardNetwork", (ShardStep, GpuNetwork), {})(xp, sizes, *args, max_local, cfg.gemm)
    else:
        net = ShardNetwork(np, sizes, *args)
    allreduce = None
    if p_model > 1:
        if comm == "nccl":
            allreduce = NcclAllreduce(xp, model_group, net.dtype, max(cfg.layer_sizes[1:]) * max_local)
        elif comm == "mpi-staged":
            allreduce = StagedAllreduce(xp, model_group, max(cfg.layer_sizes[1:]) * max_local, net.dtype,
                                        staging_memory(cfg.batch_transfer))
        else:
            allreduce = HostAllreduce(model_group)
    setup_shard(net, cfg.layer_sizes, model_group, m, allreduce)
    if p_data == 1:
        reducer = LocalReducer(comm, net, on_host=name == "numpy")
    elif comm == "nccl":
        reducer = NcclReducer(xp, data_group, net)
    elif comm == "mpi-staged":
        reducer = StagedReducer(xp, data_group, net, staging_memory(cfg.batch_transfer))
    else:
        reducer = HostReducer(data_group)
    return dict(name=name, xp=xp, net=net, batches=batches, reducer=reducer, sync=sync, stream=stream,
                parts=SHARD, data_group=(p_data, d))
