"""The parameter server (`--comm ps` on NumPy, `ps-nccl` on the GPU): the
gradient buffer reduced to rank 0, updated there, parameters broadcast."""
from __future__ import annotations

import numpy as np

from .. import names as N
from ..comm import NcclGroup
from ..mlp import FlatParams
from ..model.costs import LOSS_SLOTS
from ..model.strategies import ROOT
from ..step import NonFiniteLoss, Parts, compute
from ..trace.records import Phase


class HostParamServer:
    """`ps` (NumPy): MPI_Reduce to rank 0, the update there, MPI_Bcast of the parameters with the loss
    slot (every rank sees a non-finite loss at once; rank 0 then skips the update)."""

    name = "ps"

    def __init__(self, world, net):
        self.group, self.net = world, net
        net.p = FlatParams(net.xp, net.p.layer_sizes, net.dtype, extra=LOSS_SLOTS)

    def exchange(self, phase, counts) -> None:
        g, p, grp = self.net.g, self.net.p, self.group
        with phase(Phase.REDUCE):
            grp.reduce_sum(g.flat, ROOT)
        self._count(counts, "MPI_Reduce", g.flat)
        if grp.rank == ROOT:
            p.extra[0] = g.extra[0]
            if np.isfinite(p.extra[0]):
                with phase(Phase.UPDATE):
                    self.net.update()
        with phase(Phase.BCAST):
            grp.bcast_buffer(p.flat, ROOT)
        self._count(counts, "MPI_Bcast", p.flat)

    def _count(self, counts, name: str, buf) -> None:
        if self.group.library != "none":
            counts.bytes_mpi += buf.nbytes
            counts.collectives.append((name, int(buf.size)))

    def host_value(self, flat, index: int) -> float:
        return float(self.net.p.extra[0])


class NcclParamServer(NcclGroup):
    """`ps-nccl` (GPU): ncclReduce, the update, ncclBroadcast; no synchronisation, so capturable. Rank
    0's update kernel sums the epoch's loss, broadcast once per epoch over host MPI."""

    name = N.PS_NCCL

    def __init__(self, cupy, world, net):
        super().__init__(cupy, world, net.dtype)
        self.group, self.net = world, net
        n = net.g.flat.size
        self._warm_up(n, lambda ptr: self._reduce(ptr, n), lambda ptr: self._bcast(ptr, net.p.n_params))

    def _reduce(self, ptr, n: int) -> None:
        self.comm.reduce(ptr, ptr, n, self._dtype, self.nccl.NCCL_SUM, ROOT, self._stream_ptr)

    def _bcast(self, ptr, n: int) -> None:
        self.comm.bcast(ptr, n, self._dtype, ROOT, self._stream_ptr)

    def exchange(self, phase, counts) -> None:
        g, p, root = self.net.g, self.net.p, self.group.rank == ROOT
        with phase(Phase.REDUCE):
            self._reduce(g.flat.data.ptr, g.flat.size)
            if not root:
                g.extra.fill(0)  # the loss was sent; the next batch's kernel adds into this slot
        counts.bytes_nccl += g.flat.nbytes
        counts.collectives.append(("ncclReduce", int(g.flat.size)))
        if root:
            with phase(Phase.UPDATE):
                self.net.update()
        with phase(Phase.BCAST):
            self._bcast(p.params.data.ptr, p.n_params)
        counts.bytes_nccl += p.params.nbytes
        counts.collectives.append(("ncclBroadcast", int(p.n_params)))

    def host_value(self, flat, index: int):
        return None

    def epoch_loss_sum(self) -> float:
        v = np.array([self.net.take_epoch_loss_sum() if self.group.rank == ROOT else 0.0])
        self.group.bcast_buffer(v, ROOT)
        return float(v[0])


def server_exchange(net, reducer, phase, counts) -> float | None:
    """The parameter server's exchange, which updates on rank 0."""
    reducer.exchange(phase, counts)
    ce = reducer.host_value(net.g.flat, net.g.n_params)
    if ce is not None and not np.isfinite(ce):
        raise NonFiniteLoss(ce)
    return ce


SERVER = Parts(compute, server_exchange)
