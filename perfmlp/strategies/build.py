"""What backend.build assembles a rank's backend from: `device` (array module, batch source, stream) and
`network`, for every strategy, and `backend_parts`, the fields for every strategy but data parallelism
with an allreduce."""
from __future__ import annotations

import numpy as np

from .. import names as N
from ..batches import DeviceBatches, HostBatches
from ..comm import Group, HostReducer, NcclReducer, SingleWorld, StagedReducer
from ..config import check_strategy
from ..mlp import Network
from ..model.costs import pieces
from ..model.predict import resolve_comm, staging_memory
from ..model.strategies import coords, shard_sizes
from .server import SERVER, HostParamServer, NcclParamServer
from .shard import (SHARD, HostAllreduce, LocalReducer, NcclAllreduce, ShardNetwork, ShardStep, StagedAllreduce,
                    setup_shard)


def split_groups(world, d: int, m: int):
    """(data group, model group) of the rank at (d, m) of the hybrid grid: column m, row d (adjacent GPUs)."""
    if not hasattr(world, "comm"):
        return SingleWorld(), SingleWorld()
    return (Group(world.comm.Split(color=m, key=d), world.library),
            Group(world.comm.Split(color=d, key=m), world.library))


def backend_parts(cfg, world, xtrain, ytrain, name: str) -> dict:
    """Backend's fields for --parallel model|hybrid or a parameter server; `name`: numpy or cupy."""
    p_data, p_model = check_strategy(cfg, world.size)
    comm = resolve_comm(cfg.comm, name)
    d, m = coords(world.rank, p_model)
    max_local = max(pieces(cfg.batch_size, p_data))
    xp, batches, sync, stream = device(cfg, world, xtrain, ytrain, name, max_local)
    fields = dict(name=name, xp=xp, batches=batches, sync=sync, stream=stream)
    if comm in N.PS_COMMS:
        net = network(cfg, xp, name, max_local)
        server = NcclParamServer(xp, world, net) if comm == N.PS_NCCL else HostParamServer(world, net)
        return dict(fields, net=net, reducer=server, parts=SERVER, data_group=(world.size, world.rank))
    data_group, model_group = split_groups(world, d, m)
    sizes = shard_sizes(cfg.layer_sizes, p_model, m)
    if name == N.CUPY:
        from ..gpu.network import GpuNetwork
        net = type("GpuShardNetwork", (ShardStep, GpuNetwork), {})(xp, sizes, *_args(cfg), max_local, cfg.gemm)
    else:
        net = ShardNetwork(np, sizes, *_args(cfg))
    allreduce = _activation_allreduce(cfg, comm, xp, net, model_group, max_local) if p_model > 1 else None
    setup_shard(net, cfg.layer_sizes, model_group, m, allreduce)
    reducer = (LocalReducer(comm, net, on_host=name == N.NUMPY) if p_data == 1   # no exchange on a group of one
               else allreduce_reducer(cfg, comm, xp, net, data_group))
    return dict(fields, net=net, reducer=reducer, parts=SHARD, data_group=(p_data, d))


def device(cfg, world, xtrain, ytrain, name: str, max_local: int, batches: bool = True, next_piece=None) -> tuple:
    """(array module, batch source or None without `batches`, synchronisation, stream) of this rank;
    `next_piece`: for a prefetching source (batches.DeviceBatches)."""
    if name != N.CUPY:
        return np, HostBatches(xtrain, ytrain) if batches else None, (lambda: None), None
    from ..gpu import require_cupy, use_device
    xp = require_cupy()
    stream = use_device(xp, world.rank)
    source = DeviceBatches(xp, xtrain, ytrain, cfg.batch_transfer, max_local, next_piece) if batches else None
    return xp, source, stream.synchronize, stream


def _args(cfg) -> tuple:
    return cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size


def network(cfg, xp, name: str, max_local: int):
    """The whole network on this rank's backend (`max_local`: the largest batch piece it computes)."""
    if name == N.CUPY:
        from ..gpu.network import GpuNetwork
        return GpuNetwork(xp, cfg.layer_sizes, *_args(cfg), max_local, cfg.gemm)
    return Network(np, cfg.layer_sizes, *_args(cfg))


def _activation_allreduce(cfg, comm: str, xp, net, model_group, max_local: int):
    """The model group's allreduce of activations for this communication mode."""
    largest = max(cfg.layer_sizes[1:]) * max_local
    if comm == N.NCCL:
        return NcclAllreduce(xp, model_group, net.dtype, largest)
    if comm == N.MPI_STAGED:
        return StagedAllreduce(xp, model_group, largest, net.dtype, staging_memory(cfg.batch_transfer))
    return HostAllreduce(model_group)


def allreduce_reducer(cfg, comm: str, xp, net, group):
    """The gradient allreduce over `group` for the resolved `comm` (resolve_comm)."""
    if comm == N.NCCL:
        return NcclReducer(xp, group, net)
    if comm == N.MPI_STAGED:
        return StagedReducer(xp, group, net, staging_memory(cfg.batch_transfer))
    return HostReducer(group)
