"""Communication behind one interface.

`World` is the process group: rank, size, a host allreduce, broadcast,
barrier and abort. `SingleWorld` is one process without MPI; `MPIWorld`
wraps mpi4py's COMM_WORLD.

A gradient reducer sums the flat gradient buffer across ranks in place and
says which phases it went through:
- `HostReducer`: the buffer already lives on the host (NumPy backend):
  one MPI_Allreduce.
- `StagedReducer` (GPU, the reference scheme, `mpi-staged`): one D2H copy,
  MPI_Allreduce on the host buffer, one H2D copy back.
- `NcclReducer` (GPU, `nccl`): a device-side allreduce through cupy.cuda.nccl.
Each reducer counts the bytes it copies and hands to MPI or NCCL where it
issues them.
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

from .errors import PerfmlpError


class SingleWorld:
    """One process, no MPI."""

    rank, size = 0, 1
    library = "none"

    def allreduce_sum(self, buf: np.ndarray) -> None:
        pass  # the sum over one rank is the buffer itself

    def bcast(self, obj, root: int = 0):
        return obj

    def allgather(self, obj):
        return [obj]

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class MPIWorld:
    """COMM_WORLD through mpi4py."""

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.library = MPI.Get_library_version().replace("\0", "").strip().splitlines()[0].rstrip(", ")

    def allreduce_sum(self, buf: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


def make_world():
    """MPIWorld when mpi4py imports, else SingleWorld (then a launch under
    mpirun with several processes is an error, not P independent runs)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
            if int(os.environ.get(var, "1") or 1) > 1:
                raise PerfmlpError("launched under MPI with several processes but mpi4py is not installed "
                                   "(pip install mpi4py)") from None
        return SingleWorld()
    return MPIWorld()


def piece(batch: int, nprocs: int, rank: int) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous piece of a batch: sizes differ by at most one."""
    q, r = divmod(batch, nprocs)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (1 if rank < r else 0)


class Counts:
    """Bytes and elements issued by a reducer during one batch."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.bytes_d2h = self.bytes_h2d = self.bytes_mpi = self.bytes_nccl = 0
        self.collectives: list[tuple[str, int]] = []


_null_phase = contextlib.nullcontext


class HostReducer:
    """Gradients already on the host: one in-place MPI_Allreduce."""

    name = "mpi-host"

    def __init__(self, world):
        self.world = world
        self.counts = Counts()

    def reduce(self, flat: np.ndarray, phase=lambda name: _null_phase()) -> None:
        with phase("allreduce"):
            self.world.allreduce_sum(flat)
        if self.world.library != "none":
            self.counts.bytes_mpi += flat.nbytes
            self.counts.collectives.append(("MPI_Allreduce", int(flat.size)))

    def host_value(self, flat, index: int) -> float | None:
        return float(flat[index])
