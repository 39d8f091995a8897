"""Process groups: the hybrid grid's two groups over comm.py's Group (an MPI
communicator) or LocalGroup (one process without MPI)."""
from __future__ import annotations

from ..comm import Group, SingleWorld as LocalGroup
from ..model.strategies import coords


def split_groups(world, p_model: int):
    """(data group, model group) of rank r at (d, m) = divmod(r, p_model): column m, row d (adjacent GPUs)."""
    if not hasattr(world, "comm"):
        return LocalGroup(), LocalGroup()
    d, m = coords(world.rank, p_model)
    return (Group(world.comm.Split(color=m, key=d), world.library),
            Group(world.comm.Split(color=d, key=m), world.library))
