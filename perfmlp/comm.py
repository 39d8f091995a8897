"""Communication behind one interface.

`World` is the process group: rank, size, a host allreduce, broadcast,
barrier and abort. `SingleWorld` is one process without MPI; `MPIWorld`
wraps mpi4py's COMM_WORLD.

A gradient reducer sums the flat gradient buffer across ranks in place,
`reduce(flat, phase, counts)`, timing each of its phases with `phase` and
adding the bytes it copies and hands to MPI or NCCL to `counts` (a
trace.format.Counts) where it issues them. `name` is the --comm value.
- `HostReducer` (`mpi`, NumPy backend): the buffer already lives on the
  host: one MPI_Allreduce.
- `StagedReducer` (`mpi-staged`, GPU, the reference scheme): one D2H copy,
  MPI_Allreduce on the host buffer, one H2D copy back; Open MPI on the GPU
  machine is not CUDA-aware, so device buffers never go to MPI.
- `NcclReducer` (`nccl`, GPU): a device-side allreduce through
  cupy.cuda.nccl.
`host_value(flat, i)` reads one element of the reduced buffer (the loss
slot) when that costs no synchronisation, else None; then
`epoch_loss_sum()` gives the epoch's sum once, at its end.
"""
from __future__ import annotations

import os
import sys
import time

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
        # let the launcher forward this rank's last line before MPI_Abort tears
        # the job down (seen lost under mpiexec on a loaded 2-core machine)
        time.sleep(0.2)
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


class HostReducer:
    """Gradients already on the host: one in-place MPI_Allreduce."""

    name = "mpi"

    def __init__(self, world):
        self.world = world

    def reduce(self, flat: np.ndarray, phase, counts) -> None:
        with phase("allreduce"):
            self.world.allreduce_sum(flat)
        if self.world.library != "none":
            counts.bytes_mpi += flat.nbytes
            counts.collectives.append(("MPI_Allreduce", int(flat.size)))

    def host_value(self, flat, index: int) -> float | None:
        return float(flat[index])


class StagedReducer:
    """The reference scheme: D2H of the one gradient buffer, MPI_Allreduce on
    the host copy, H2D back (through pageable or pinned host memory)."""

    name = "mpi-staged"

    def __init__(self, cupy, world, net, memory: str):
        self.cp, self.world, self.net = cupy, world, net
        n, dtype = net.g.flat.size, net.dtype
        if memory == "pinned":
            import cupyx
            self.host = cupyx.empty_pinned((n,), dtype)
        else:
            self.host = np.empty(n, dtype)

    def reduce(self, flat, phase, counts) -> None:
        stream = self.cp.cuda.get_current_stream()
        with phase("d2h"):
            flat.get(out=self.host, stream=stream)
            stream.synchronize()  # MPI reads the host buffer the GPU just wrote
        counts.bytes_d2h += flat.nbytes
        with phase("allreduce"):
            self.world.allreduce_sum(self.host)
        counts.bytes_mpi += self.host.nbytes
        counts.collectives.append(("MPI_Allreduce", int(self.host.size)))
        with phase("h2d_grad"):
            flat.set(self.host, stream=stream)
        counts.bytes_h2d += flat.nbytes

    def host_value(self, flat, index: int) -> float:
        return float(self.host[index])


class NcclReducer:
    """Device-side allreduce through cupy.cuda.nccl; the unique id is
    broadcast over MPI."""

    name = "nccl"

    def __init__(self, cupy, world, net):
        from cupy.cuda import nccl
        if not nccl.available:
            raise PerfmlpError("--comm nccl: CuPy was built without NCCL")
        self.nccl, self.net = nccl, net
        uid = nccl.get_unique_id() if world.rank == 0 else None
        uid = world.bcast(uid)
        self.comm = nccl.NcclCommunicator(world.size, uid, world.rank)
        self._dtype = nccl.NCCL_FLOAT32 if net.dtype == np.float32 else nccl.NCCL_FLOAT64
        self._stream_ptr = cupy.cuda.get_current_stream().ptr

    def reduce(self, flat, phase, counts) -> None:
        with phase("allreduce"):
            self.comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, self._dtype, self.nccl.NCCL_SUM,
                                self._stream_ptr)
        counts.bytes_nccl += flat.nbytes
        counts.collectives.append(("ncclAllReduce", int(flat.size)))

    def host_value(self, flat, index: int):
        return None  # reading it would synchronise the device every batch

    def epoch_loss_sum(self) -> float:
        return self.net.take_epoch_loss_sum()
