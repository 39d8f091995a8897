"""The model group's allreduce of activations, one per communication mode,
each counting its bytes where it issues them, as comm.py's reducers do."""
from __future__ import annotations

from ..comm import NcclGroup, host_array, staged_allreduce
from ..step import no_phase


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
