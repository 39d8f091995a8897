"""The model group's allreduce of activations, one per communication
mode: host MPI (NumPy), staged through the host (GPU, mpi-staged) or NCCL;
each counts its bytes where it issues them, as comm.py's reducers do."""
from __future__ import annotations

import numpy as np

from .. import names as N
from ..comm import new_nccl_communicator
from ..errors import PerfmlpError

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
        if memory == N.PINNED:
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
