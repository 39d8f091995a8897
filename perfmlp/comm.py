"""Communication behind one interface: the world (`SingleWorld`: one process without MPI; `Group`: an MPI
communicator; `MPIWorld`: COMM_WORLD) and the gradient reducers (`name`: the --comm value).

A reducer sums the flat gradient buffer across ranks in place, `reduce(flat, phase, counts)`, counting
the bytes it hands to MPI or NCCL where it issues them; `host_value(flat, i)` reads the loss slot where
that costs no device synchronisation, else None (then `epoch_loss_sum()`). The GPU's MPI is not
CUDA-aware: device buffers are staged through the host (`StagedReducer`). With `--overlap` the network
calls `grad_ready` as each gradient piece is written and the reducer starts its collective at once;
`reduce` then waits for what is in flight, so the `allreduce` phase is the communication the backward
pass did not hide."""
from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from . import names as N
from .errors import PerfmlpError
from .startup import launched_size
from .trace.records import Phase


class SingleWorld:
    """One process, no MPI (also a group of one, as strategies/build.py's split_groups makes): every sum and
    broadcast is the buffer itself, and nothing is waited for."""

    rank, size = 0, 1
    library = "none"

    def _nothing(self, *args, **kwargs) -> None:
        return None

    allreduce_sum = iallreduce_sum = waitall = reduce_sum = bcast_buffer = barrier = _nothing

    def bcast(self, obj, root: int = 0):
        return obj

    def allgather(self, obj):
        return [obj]

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Group:
    """An MPI communicator (COMM_WORLD or a part): sums, broadcasts and the parameter server's rooted collectives."""

    def __init__(self, comm, library: str):
        from mpi4py import MPI
        self.MPI, self.comm, self.library = MPI, comm, library
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def allreduce_sum(self, buf: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def iallreduce_sum(self, buf: np.ndarray):   # an in-place sum, ended by `waitall`
        return self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def waitall(self, requests) -> None:
        self.MPI.Request.Waitall(requests)

    def reduce_sum(self, buf, root: int = 0) -> None:
        if self.rank == root:
            self.comm.Reduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM, root=root)
        else:
            self.comm.Reduce(buf, None, op=self.MPI.SUM, root=root)

    def bcast_buffer(self, buf, root: int = 0) -> None:
        self.comm.Bcast(buf, root=root)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def barrier(self) -> None:
        self.comm.Barrier()


class MPIWorld(Group):
    def __init__(self):
        from mpi4py import MPI
        library = MPI.Get_library_version().replace("\0", "").strip().splitlines()[0].rstrip(", ")
        super().__init__(MPI.COMM_WORLD, library)

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        # let the launcher forward this rank's last line before MPI_Abort tears the job down (else it can be lost)
        time.sleep(0.2)
        self.comm.Abort(code)


def make_world():
    """MPIWorld when mpi4py imports, else SingleWorld (several processes without mpi4py: an error)."""
    try:
        import mpi4py
    except ImportError:
        mpi4py = None
    if mpi4py is not None:
        return MPIWorld()
    if launched_size() > 1:
        raise PerfmlpError("launched under MPI with several processes but mpi4py is not installed "
                           "(pip install mpi4py)")
    return SingleWorld()


class HostReducer:
    """Host gradients: one in-place MPI_Allreduce, or with overlap an MPI_Iallreduce per piece."""

    name = "mpi"

    def __init__(self, world):
        self.world = world
        self._flat = None
        self._started: list = []   # (request, elements) of the pieces in flight

    def overlap(self, net) -> None:
        self._flat = net.g.flat
        net.grad_ready = self._start

    def _start(self, lo: int, hi: int) -> None:
        self._started.append((self.world.iallreduce_sum(self._flat[lo:hi]), hi - lo))

    def reduce(self, flat: np.ndarray, phase, counts) -> None:
        with phase(Phase.ALLREDUCE):
            if self._flat is None:
                self.world.allreduce_sum(flat)
            else:
                self.world.waitall([r for r, _ in self._started])
        sent = [("MPI_Allreduce", int(flat.size))] if self._flat is None else \
            [("MPI_Iallreduce", n) for _, n in self._started]
        if self.world.library != "none":
            for name, n in sent:
                counts.bytes_mpi += n * flat.itemsize
                counts.collectives.append((name, n))
        self._started.clear()

    def host_value(self, flat, index: int) -> float | None:
        return float(flat[index])


def host_array(n: int, dtype, memory: str):
    """n elements of host memory: page-locked (cupyx) for N.PINNED, else a NumPy array."""
    if memory == N.PINNED:
        import cupyx
        return cupyx.empty_pinned((n,), dtype)
    return np.empty(n, dtype)


def staged_allreduce(world, a, host, stream, phase, counts) -> None:
    """Sum device array `a` over `world` through `host` (D2H, MPI_Allreduce, H2D), counting each copy."""
    h = host[:a.size].reshape(a.shape)
    with phase(Phase.D2H):
        a.get(out=h, stream=stream)
        stream.synchronize()  # MPI reads the host buffer the GPU just wrote
    counts.bytes_d2h += a.nbytes
    with phase(Phase.ALLREDUCE):
        world.allreduce_sum(h)
    counts.bytes_mpi += h.nbytes
    counts.collectives.append(("MPI_Allreduce", int(a.size)))
    with phase(Phase.H2D_GRAD):
        a.set(h, stream=stream)
    counts.bytes_h2d += a.nbytes


class StagedReducer:
    """The reference scheme: the gradient buffer staged through pageable or pinned host memory."""

    name = N.MPI_STAGED

    def __init__(self, cupy, world, net, memory: str):
        self.world = world
        self.stream = cupy.cuda.get_current_stream()  # the step's
        self.host = host_array(net.g.flat.size, net.dtype, memory)

    def reduce(self, flat, phase, counts) -> None:
        staged_allreduce(self.world, flat, self.host, self.stream, phase, counts)

    def host_value(self, flat, index: int) -> float:
        return float(self.host[index])


_communicators: dict = {}   # (world, device) -> the process's communicator over that world
_made: list = []            # every communicator this process made, ended together by close_communicators


def new_nccl_communicator(nccl, group):
    """An NCCL communicator over an MPI world or group (its unique id broadcast over it), on the current device."""
    # connect every peer now, not on a first collective that a CUDA graph captures
    os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
    uid = nccl.get_unique_id() if group.rank == 0 else None
    uid = group.bcast(uid)
    comm = nccl.NcclCommunicator(group.size, uid, group.rank)
    _made.append(comm)
    return comm


def close_communicators() -> None:
    """End this process's NCCL communicators before MPI ends, its device work done, with ncclCommAbort (no peer
    needed): ncclCommDestroy, a collective, run by the garbage collector when it likes, could deadlock the ranks."""
    if not _made:
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.Device().synchronize()   # the last step's collectives are done on this rank
    while _made:
        comm = _made.pop()
        with contextlib.suppress(Exception):  # already ended (destroy or abort): nothing to free
            comm.abort()
    _communicators.clear()


def _nccl_communicator(nccl, world, device: int):
    """The process's NCCL communicator over `world` on `device`, made once (a second can hang a later capture)."""
    key = (id(world), device)
    comm = _communicators.get(key)
    if comm is None:
        comm = _communicators[key] = new_nccl_communicator(nccl, world)
    return comm


class NcclGroup:
    """NCCL over an MPI group on the current device and stream: the module, a communicator (with
    `shared`, the process's one over that group), the element type of `dtype`."""

    def __init__(self, cupy, group, dtype, shared: bool = False):
        from cupy.cuda import nccl
        if not nccl.available:
            raise PerfmlpError("--comm nccl: CuPy was built without NCCL")
        self.cp, self.nccl, self.dtype = cupy, nccl, np.dtype(dtype)
        self.comm = _nccl_communicator(nccl, group, cupy.cuda.Device().id) if shared else \
            new_nccl_communicator(nccl, group)
        self._dtype = nccl.NCCL_FLOAT32 if self.dtype == np.float32 else nccl.NCCL_FLOAT64
        self._stream_ptr = cupy.cuda.get_current_stream().ptr

    def _allreduce(self, ptr, n: int, stream_ptr=None) -> None:
        self.comm.allReduce(ptr, ptr, n, self._dtype, self.nccl.NCCL_SUM,
                            self._stream_ptr if stream_ptr is None else stream_ptr)

    def _warm_up(self, n: int, *calls) -> None:
        """Each call(ptr) on n zeros outside any graph: what NCCL sets up on a size's first use is not captured."""
        scratch = self.cp.zeros(n, self.dtype)
        for call in calls:
            call(scratch.data.ptr)
        self.cp.cuda.get_current_stream().synchronize()


class NcclReducer(NcclGroup):
    """Device-side allreduce. With overlap, each gradient piece is reduced on a communication stream
    that waits (an event) for the GEMM that wrote it, and `reduce` makes the compute stream wait for
    the last: a fork and a join, both captured into a CUDA graph."""

    name = N.NCCL

    def __init__(self, cupy, world, net):
        super().__init__(cupy, world, net.dtype, shared=True)
        self.net = net
        self._comm_stream = None
        self._started: list = []   # elements of the pieces in flight
        n = net.g.flat.size
        self._warm_up(n, lambda ptr: self._allreduce(ptr, n))

    def overlap(self, net) -> None:
        cp = self.cp
        self._comm_stream = cp.cuda.Stream(non_blocking=True)
        self._comm_ptr = self._comm_stream.ptr
        self._rt = cp.cuda.runtime
        self._events: list = []
        self._done = cp.cuda.Event(disable_timing=True)
        self._base, self._isz = net.g.flat.data.ptr, net.dtype.itemsize
        net.grad_ready = self._start

    def _start(self, lo: int, hi: int) -> None:
        i = len(self._started)
        if i == len(self._events):
            self._events.append(self.cp.cuda.Event(disable_timing=True))
        ev = self._events[i].ptr
        self._rt.eventRecord(ev, self._stream_ptr)           # the piece is written ...
        self._rt.streamWaitEvent(self._comm_ptr, ev, 0)     # ... before its allreduce starts
        self._allreduce(self._base + lo * self._isz, hi - lo, self._comm_ptr)
        self._started.append(hi - lo)

    def reduce(self, flat, phase, counts) -> None:
        if self._comm_stream is None:
            with phase(Phase.ALLREDUCE):
                self._allreduce(flat.data.ptr, flat.size)
            counts.bytes_nccl += flat.nbytes
            counts.collectives.append(("ncclAllReduce", int(flat.size)))
            return
        with phase(Phase.ALLREDUCE):
            self._rt.eventRecord(self._done.ptr, self._comm_ptr)
            self._rt.streamWaitEvent(self._stream_ptr, self._done.ptr, 0)  # the update waits for the last piece
        for n in self._started:
            counts.bytes_nccl += n * flat.itemsize
            counts.collectives.append(("ncclAllReduce", n))
        self._started.clear()

    def host_value(self, flat, index: int):
        return None  # reading it would synchronise the device every batch

    def epoch_loss_sum(self) -> float:
        return self.net.take_epoch_loss_sum()
