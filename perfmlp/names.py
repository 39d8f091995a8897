"""Every name the trainer, the trace, the model, the report and the CLIs share, defined once; this module
imports nothing of perfmlp, and nothing else spells these names (tests/test_names.py). Plain strings,
so that configurations, manifests, YAML and JSON hold them as they are; the phases are a str Enum (a
Phase compares, formats and serialises as its value)."""
from __future__ import annotations

from enum import Enum

AUTO = "auto"   # a choice resolved at run time (backend, comm, exec, trace level, data, slices)

# --- backends: the array library a run computes with
NUMPY = "numpy"
CUPY = "cupy"
BACKENDS = (NUMPY, CUPY)

# --- strategies (--parallel)
DATA = "data"            # data parallelism: every rank the whole network, its piece of the batch
MODEL = "model"          # model parallelism: every rank H/p hidden units, the whole batch
HYBRID = "hybrid"        # a p_data x p_model grid
STRATEGIES = (DATA, MODEL, HYBRID)

# --- exchanges (--comm)
MPI = "mpi"                        # MPI_Allreduce on host buffers (NumPy)
MPI_STAGED = "mpi-staged"          # GPU buffers through the host: D2H, MPI_Allreduce, H2D
NCCL = "nccl"                      # ncclAllReduce on device buffers
PS = "ps"                          # parameter server over host MPI: reduce to rank 0, update, broadcast
PS_NCCL = "ps-nccl"                # the same with NCCL
PS_ASYNC = "ps-async"              # asynchronous parameter server, bounded staleness
PS_ASYNC_NCCL = "ps-async-nccl"    # named only to be refused
COMMS = (MPI, MPI_STAGED, NCCL, PS, PS_NCCL, PS_ASYNC, PS_ASYNC_NCCL)
ALLREDUCE_COMMS = (MPI, MPI_STAGED, NCCL)      # data parallelism's all-reduce exchanges
PS_COMMS = (PS, PS_NCCL)                       # the synchronous parameter server
DEVICE_COMMS = (NCCL, PS_NCCL)                 # collectives on device buffers
HOST_COMMS = (MPI, PS)                         # the NumPy backend's exchanges
STAGED_COMMS = (MPI_STAGED,)                   # device buffers staged through the host each step
COLLECTIVE_LIBS = (MPI, NCCL)                  # who runs a collective (machine tables are keyed by these)

# --- batch transfers (--batch-transfer)
PAGEABLE = "pageable"                      # copied from pageable memory each batch (the reference's scheme)
PINNED = "pinned"                          # copied from page-locked memory each batch
RESIDENT = "resident"                      # uploaded once
PREFETCH = "prefetch"                      # the next batches copied from pinned memory on copy streams
PREFETCH_PAGEABLE = "prefetch-pageable"    # the same, staged from pageable memory by host threads
TRANSFERS = (PAGEABLE, PINNED, RESIDENT, PREFETCH, PREFETCH_PAGEABLE)
PREFETCH_TRANSFERS = (PREFETCH, PREFETCH_PAGEABLE)
PAGEABLE_SOURCES = (PAGEABLE, PREFETCH_PAGEABLE)     # batches read from pageable memory
COPY_MEMORIES = (PAGEABLE, PINNED)                   # host memory a copy runs from

# --- execution modes (--exec)
EAGER = "eager"        # kernel by kernel from the host
GRAPH = "graph"        # the step captured into CUDA graphs and replayed
EXECS = (EAGER, GRAPH)

# --- GEMM kernels (--gemm)
CUBLAS = "cublas"
NAIVE = "naive"
TILED = "tiled"
REGBLOCK = "regblock"
REFERENCE_KERNELS = (NAIVE, TILED, REGBLOCK)   # the reference's own kernels
GEMM_KERNELS = (CUBLAS, *REFERENCE_KERNELS)

# --- precisions (--precision) and the gradients' exchange (--grad-precision)
FLOAT32 = "float32"
FLOAT64 = "float64"
TF32 = "tf32"
BF16 = "bf16"
FP16 = "fp16"
PRECISIONS = (FLOAT32, FLOAT64, TF32, BF16, FP16)
HALF_PRECISIONS = (BF16, FP16)
GRAD_PRECISIONS = (FLOAT32, BF16, FP16)
# the 16-bit exchange's cast kernels (gpu/kernels.cu): the tracer files them with the exchange
WIRE_PACK, WIRE_UNPACK = "wire_pack", "wire_unpack"
EXCHANGE_KERNELS = (WIRE_PACK, WIRE_UNPACK)

# --- data sources (--data)
MNIST = "mnist"
SYNTHETIC = "synthetic"
DATA_SOURCES = (MNIST, SYNTHETIC)

# --- trace levels (--trace-level), cheapest first
COUNTERS = "counters"
PHASES_LEVEL = "phases"
TIMELINE = "timeline"
KERNELS = "kernels"
UNTRACED = "untraced"        # a run without the tracer, as the model's CLI and its JSON name it
TRACE_LEVELS = {
    COUNTERS: "FLOPs, bytes and collectives per batch (priced once per piece size), host times of the batch "
              "and its phases; no device timing",
    PHASES_LEVEL: "+ each phase's GPU time from CUDA events recorded between the phases (about 2 us of GPU time "
                  "each)",
    TIMELINE: "+ CUPTI activity records: every kernel launched outside a CUDA graph, every copy and memset, "
              "one record per graph launch; phase times from the records, no CUDA events",
    KERNELS: "+ one record per kernel inside CUDA graphs too (about 0.5 us of GPU time per graph kernel node)",
}
ACTIVITY_LEVELS = (TIMELINE, KERNELS)           # the levels that collect CUPTI activity records
# `--trace-level auto` per execution mode: the richest level under the tracer's overhead target
DEFAULT_TRACE_LEVEL = {GRAPH: COUNTERS, EAGER: COUNTERS}
TRACE_LEVEL_CHOICES = (AUTO, *TRACE_LEVELS)

# --- clocks a phase can be timed by
HOST_CLOCK = "host"
CUDA_EVENTS = "cuda-events"
CUPTI = "cupti"
CLOCKS = (HOST_CLOCK, CUDA_EVENTS, CUPTI)
GPU_CLOCKS = (CUDA_EVENTS, CUPTI)

# --- a run's status in its manifest
STATUSES = ("running", "complete", "failed", "terminated", "interrupted", "stalled")


class Phase(str, Enum):
    """The phases of a batch, in the order a batch goes through them."""

    H2D = "h2d"              # the batch piece copied to the device
    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"
    D2H = "d2h"              # the gradient buffer staged to the host (mpi-staged)
    ALLREDUCE = "allreduce"
    H2D_GRAD = "h2d_grad"    # the reduced gradients copied back (mpi-staged)
    UPDATE = "update"
    GRAPH = "graph"          # one CUDA-graph replay in place of the phases it holds
    COMBINE = "combine"      # model parallelism: the output's partial sums allreduced over the model group
    REDUCE = "reduce"        # the parameter server: gradients reduced to rank 0
    BCAST = "bcast"          # the parameter server: parameters broadcast from rank 0
    PUSH = "push"            # the asynchronous parameter server's worker: its gradient sent to the server
    PULL = "pull"            # waiting for the server's answer (its queue, its update, the staleness bound)
    PARAMS = "params"        # the parameters' message received
    H2D_PARAMS = "h2d_params"  # the parameters copied to the device

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


PHASES = tuple(Phase)

# --- the groups of a batch's time, in order: the model's terms sum into them, the phases are measured in them
H2D_BATCH = "h2d_batch"      # the batch's copy to the device
COMPUTE = "compute"          # GEMMs, elementwise kernels, launches, graph replays, the update
D2H_GRAD = "d2h_grad"        # the gradients staged to the host
ALLREDUCE = "allreduce"      # every collective and the wait for it
H2D_GRAD = "h2d_grad"        # the reduced gradients copied back
GROUPS = (H2D_BATCH, COMPUTE, D2H_GRAD, ALLREDUCE, H2D_GRAD)

PHASE_GROUP = {
    Phase.H2D: H2D_BATCH,
    Phase.FORWARD: COMPUTE,
    Phase.LOSS: COMPUTE,
    Phase.BACKWARD: COMPUTE,
    Phase.D2H: D2H_GRAD,
    Phase.ALLREDUCE: ALLREDUCE,
    Phase.H2D_GRAD: H2D_GRAD,
    Phase.UPDATE: COMPUTE,
    Phase.GRAPH: COMPUTE,          # a replay of forward, loss, backward (and the exchange and update with NCCL)
    Phase.COMBINE: ALLREDUCE,
    Phase.REDUCE: ALLREDUCE,
    Phase.BCAST: ALLREDUCE,
    Phase.PUSH: ALLREDUCE,
    Phase.PULL: ALLREDUCE,
    Phase.PARAMS: ALLREDUCE,
    Phase.H2D_PARAMS: H2D_GRAD,
}
EXCHANGE_PHASES = tuple(p for p, g in PHASE_GROUP.items() if g == ALLREDUCE)
NVTX_RANGES = (*(p.value for p in PHASES), "batch", "epoch")  # every NVTX range a run opens (domain "perfmlp")


def batch_phases(comm: str, batch_transfer: str, exec_mode: str = EAGER, *, combine: bool = False,
                 exchange: bool = True, updates: bool = True) -> tuple[Phase, ...]:
    """The phases one batch of one rank records, in order. `combine`: model parallelism's output combine; `exchange`:
    False for pure model parallelism; `updates`: False on a parameter server's worker. In graph mode `graph` stands for
    forward to backward, and the exchange and update too with a device exchange."""
    out = [] if batch_transfer in UNCOPIED_TRANSFERS else [Phase.H2D]
    if exec_mode == GRAPH:
        out.append(Phase.GRAPH)
        if comm in DEVICE_COMMS:
            return tuple(out)
    else:
        out.append(Phase.FORWARD)
        if combine:
            out.append(Phase.COMBINE)
        out += [Phase.LOSS, Phase.BACKWARD]
    if comm in PS_COMMS:
        out += [Phase.REDUCE, *([Phase.UPDATE] if updates else []), Phase.BCAST]
        return tuple(out)
    if exchange:
        out += [Phase.D2H, Phase.ALLREDUCE, Phase.H2D_GRAD] if comm in STAGED_COMMS else [Phase.ALLREDUCE]
    out.append(Phase.UPDATE)
    return tuple(out)

# --- copy directions between host and device (machine tables and calibration are keyed by these)
HOST_TO_DEVICE = "h2d"
DEVICE_TO_HOST = "d2h"
COPY_DIRECTIONS = (HOST_TO_DEVICE, DEVICE_TO_HOST)

# --- the NumPy backend's batches: read where they lie in host memory
IN_PLACE = "in-place"                          # no copy: a piece is a view of the host arrays
UNCOPIED_TRANSFERS = (RESIDENT, IN_PLACE)      # transfers whose batches record no h2d phase

# --- a blind sweep's predictions in its trace folder (the sweep writes them, the report reads them)
PREDICTIONS = "predictions.json"
MORE_PREDICTIONS = "predictions-*.json"        # --predict-also: one per further machine file
