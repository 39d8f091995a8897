"""Where the backend is assembled: the array module, the network, the batch
source, the gradient reducer, the execution mode (eager or CUDA graphs) and
the device synchronisation for one rank."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .batches import DeviceBatches, HostBatches
from .comm import HostReducer, NcclReducer, StagedReducer
from .config import Config
from .errors import PerfmlpError
from .mlp import Network
from .model.costs import pieces
from .model.predict import staging_memory


@dataclass(frozen=True)
class Backend:
    name: str                  # "numpy" or "cupy"
    xp: object                 # the array module
    net: Network
    batches: object            # batches.HostBatches or batches.DeviceBatches
    reducer: object            # one of comm's reducers
    sync: Callable[[], None]   # waits for the device's queued work (a no-op on the host)
    exec: str = "eager"        # "eager" or "graph"
    graph: object = None       # gpu.graph.GraphStep in graph mode
    stream: object = None      # the CuPy stream everything of the step is issued on (current once built)
    step: Callable | None = None           # the step when it is not train.step (perfmlp/partition.py)
    data_group: tuple[int, int] | None = None   # (ranks the batch is split over, this rank's piece) if not all


def resolve(cfg: Config) -> str:
    """The backend a configuration runs on ("auto": CuPy where a GPU is present)."""
    if cfg.backend != "auto":
        return cfg.backend
    from . import gpu
    return "cupy" if gpu.available() else "numpy"


def check_options(cfg: Config) -> str:
    """The backend the configuration runs on, after refusing the options
    that backend does not have (before anything is written)."""
    name = resolve(cfg)
    if (cfg.parallel != "data" or cfg.comm in ("ps", "ps-nccl")) and (cfg.exec == "graph" or cfg.overlap):
        what = f"--parallel {cfg.parallel}" if cfg.parallel != "data" else f"--comm {cfg.comm}"
        raise PerfmlpError(f"{what} runs eagerly: --exec graph and --overlap are for data parallelism "
                           "with an allreduce")
    if name == "numpy":
        gpu_only = [f"--{flag} {value}" for flag, value, host in (
            ("comm", cfg.comm, ("auto", "mpi", "ps")), ("batch-transfer", cfg.batch_transfer, ("pageable",)),
            ("gemm", cfg.gemm, ("cublas",))) if value not in host]
        if gpu_only:
            raise PerfmlpError(f"{', '.join(gpu_only)} needs the cupy backend (this run is on numpy)")
        if cfg.exec == "graph":
            raise PerfmlpError("--exec graph needs the cupy backend (this run is on numpy)")
        if cfg.overlap and cfg.comm not in ("auto", "mpi"):
            raise PerfmlpError(f"--overlap with --comm {cfg.comm}: on numpy the overlapped exchange is mpi")
    elif cfg.comm in ("mpi", "ps"):
        raise PerfmlpError(f"--comm {cfg.comm} reduces host buffers (the numpy backend); on the GPU use "
                           f"{'mpi-staged or nccl' if cfg.comm == 'mpi' else 'ps-nccl'}")
    elif cfg.overlap and cfg.comm != "nccl":
        raise PerfmlpError("--overlap on the GPU needs --comm nccl (the staged exchange needs the host "
                           "between the backward pass and the update)")
    return name


def exec_mode(cfg: Config, backend: str) -> str:
    """The execution mode that runs ("auto": CUDA graphs on the GPU)."""
    if cfg.exec != "auto":
        return cfg.exec
    return "graph" if backend == "cupy" else "eager"


def build(cfg: Config, world, xtrain: np.ndarray, ytrain: np.ndarray) -> Backend:
    name = check_options(cfg)
    if cfg.parallel != "data" or cfg.comm in ("ps", "ps-nccl"):
        from .partition import backend_parts
        return Backend(**backend_parts(cfg, world, xtrain, ytrain, name))
    if name == "cupy":
        return _build_cupy(cfg, world, xtrain, ytrain)
    net = Network(np, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size)
    reducer = HostReducer(world)
    _overlap(cfg, net, reducer)
    return Backend("numpy", np, net, HostBatches(xtrain, ytrain), reducer, lambda: None)


def _overlap(cfg: Config, net, reducer) -> None:
    if cfg.overlap:
        net.set_buckets(cfg.bucket_bytes)
        reducer.overlap(net)


def _build_cupy(cfg: Config, world, xtrain, ytrain) -> Backend:
    from .gpu import require_cupy
    from .gpu.network import GpuNetwork
    cupy = require_cupy()
    ndev = cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(world.rank % ndev).use()  # rank r on GPU r mod (GPUs on its node), before any stream
    # every kernel, copy and collective of the step on one stream of our own
    # (a CUDA graph cannot be captured on the legacy default stream)
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()
    max_local = max(pieces(cfg.batch_size, world.size))
    net = GpuNetwork(cupy, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size,
                     max_local, cfg.gemm)
    batches = DeviceBatches(cupy, xtrain, ytrain, cfg.batch_transfer, max_local)
    if cfg.comm == "nccl":
        reducer = NcclReducer(cupy, world, net)
    else:
        reducer = StagedReducer(cupy, world, net, staging_memory(cfg.batch_transfer))
    _overlap(cfg, net, reducer)
    mode = exec_mode(cfg, "cupy")
    graph = None
    if mode == "graph":
        from .gpu.graph import GraphStep
        graph = GraphStep(cupy, net, batches, reducer, stream)
    return Backend("cupy", cupy, net, batches, reducer, stream.synchronize, mode, graph, stream)
