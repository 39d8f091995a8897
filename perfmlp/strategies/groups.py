"""Process groups: one process without MPI, an MPI communicator with the
parameter server's rooted collectives, and the hybrid grid's two groups."""
from __future__ import annotations

from ..model.strategies import ROOT, coords

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
