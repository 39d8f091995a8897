"""Where the backend is assembled for one rank: the array module, the network, the batch source, the
gradient reducer, the strategy's step, the execution mode (eager or CUDA graphs) and the device
synchronisation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import names as N
from . import psasync
from .config import Config
from .errors import PerfmlpError
from .mlp import Network
from .model.costs import piece, pieces
from .model.precision import precision as precision_of
from .model.predict import graph_refusal, resolve_comm, resolve_exec
from .step import DATA, Parts
from .strategies.build import allreduce_reducer, backend_parts, device, network


@dataclass(frozen=True)
class Backend:
    name: str                  # "numpy" or "cupy"
    xp: object                 # the array module
    net: Network
    batches: object            # batches.HostBatches or batches.DeviceBatches
    reducer: object            # one of comm's reducers (or perfmlp/strategies')
    sync: Callable[[], None]   # waits for the device's queued work (a no-op on the host)
    exec: str = N.EAGER        # N.EXECS
    graph: object = None       # gpu.graph.GraphStep in graph mode
    stream: object = None      # the CuPy stream everything of the step is issued on (current once built)
    parts: Parts = DATA        # the strategy's step (perfmlp/step.py; the others: perfmlp/strategies)
    data_group: tuple[int, int] | None = None   # (ranks the batch is split over, this rank's piece) if not all


def resolve(cfg: Config) -> str:
    """The backend a configuration runs on ("auto": CuPy where a GPU is present)."""
    if cfg.backend != N.AUTO:
        return cfg.backend
    from . import gpu
    return N.CUPY if gpu.available() else N.NUMPY


def partitioned(cfg: Config) -> bool:
    """A strategy other than data parallelism with an allreduce (perfmlp/strategies)."""
    return cfg.parallel != N.DATA or cfg.comm in N.PS_COMMS


def check_options(cfg: Config) -> str:
    """The backend the configuration runs on, after refusing the options it does not have."""
    name = resolve(cfg)
    why = psasync.refusal(cfg)
    if why:
        raise PerfmlpError(why)
    prec = precision_of(cfg.precision)
    if partitioned(cfg) or cfg.comm == psasync.COMM:
        ps = cfg.comm == psasync.COMM   # the options data parallelism with an allreduce has, refused
        what = f"--parallel {cfg.parallel}" if cfg.parallel != N.DATA else f"--comm {cfg.comm}"
        for flag, asked, why in (
                ("--overlap", cfg.overlap, ")"),
                (f"--precision {cfg.precision}", prec.mixed, "): the server's update does not rewrite the 16-bit "
                 "weight copy" if ps else "): there every rank's update rewrites its 16-bit weight copy"),
                (f"--batch-transfer {cfg.batch_transfer}", cfg.batch_transfer in N.PREFETCH_TRANSFERS,
                 ", whose worker takes its next piece only from the server's answer)" if ps else ")")):
            if asked:
                raise PerfmlpError(f"{flag} is for data parallelism with an allreduce (this run: {what}{why}")
    if name == N.CUPY and prec.tensor_cores and cfg.gemm != N.CUBLAS:
        raise PerfmlpError(f"--precision {cfg.precision} runs its GEMMs on tensor cores through cuBLAS: "
                           f"use --gemm cublas, not --gemm {cfg.gemm}")
    if name == N.NUMPY:
        gpu_only = [f"--{flag} {value}" for flag, value, host in (
            ("comm", cfg.comm, (N.AUTO, *N.HOST_COMMS, N.PS_ASYNC)),
            ("batch-transfer", cfg.batch_transfer, (N.PAGEABLE,)), ("gemm", cfg.gemm, (N.CUBLAS,)))
            if value not in host]
        if gpu_only:
            raise PerfmlpError(f"{', '.join(gpu_only)} needs the cupy backend (this run is on numpy)")
        if cfg.overlap and cfg.comm not in (N.AUTO, N.MPI):
            raise PerfmlpError(f"--overlap with --comm {cfg.comm}: on numpy the overlapped exchange is mpi")
    elif cfg.comm in N.HOST_COMMS:
        instead = f"{N.MPI_STAGED} or {N.NCCL}" if cfg.comm == N.MPI else N.PS_NCCL
        raise PerfmlpError(f"--comm {cfg.comm} reduces host buffers (the numpy backend); on the GPU use {instead}")
    elif cfg.overlap and cfg.comm != N.NCCL:
        raise PerfmlpError("--overlap on the GPU needs --comm nccl (the staged exchange needs the host "
                           "between the backward pass and the update)")
    if cfg.exec == N.GRAPH:
        why = graph_refusal(name, cfg.parallel, cfg.comm)
        if why:
            raise PerfmlpError(why)
    from . import slices
    slices.check(cfg, name, partitioned(cfg) or cfg.comm == N.PS_ASYNC)
    return name


def exec_mode(cfg: Config, backend: str) -> str:
    """The execution mode that runs (the model's resolve_exec: auto is graph where capturable)."""
    return resolve_exec(cfg.exec, backend, cfg.parallel, cfg.comm)


def build(cfg: Config, world, xtrain: np.ndarray, ytrain: np.ndarray) -> Backend:
    name = check_options(cfg)
    if cfg.comm == psasync.COMM:
        from .psasync.loop import backend_fields
        return Backend(**backend_fields(cfg, world, xtrain, ytrain, name), exec=N.EAGER)
    if partitioned(cfg):
        fields = backend_parts(cfg, world, xtrain, ytrain, name)
    else:
        max_local = max(pieces(cfg.batch_size, world.size))
        xp, batches, sync, stream = device(cfg, world, xtrain, ytrain, name, max_local,
                                           next_piece=_next_piece(cfg.batch_size, len(xtrain), world.size,
                                                                  world.rank))
        net = network(cfg, xp, name, max_local)
        reducer = allreduce_reducer(cfg, resolve_comm(cfg.comm, name), xp, net, world)
        if cfg.overlap:
            net.set_buckets(cfg.bucket_bytes)
            reducer.overlap(net)
        fields = dict(name=name, xp=xp, net=net, batches=batches, reducer=reducer, sync=sync, stream=stream)
    mode = exec_mode(cfg, name)
    if mode == N.GRAPH:
        from .gpu.graph import GraphStep
        fields["graph"] = GraphStep(fields["xp"], fields["net"], fields["batches"], fields["reducer"],
                                    fields["stream"], fields.get("parts", DATA))
    from .slices import wire
    return wire(cfg, world, Backend(**fields, exec=mode))


def _next_piece(B: int, n_train: int, procs: int, rank: int):
    """f(lo, hi): this rank's piece of the batch after the one whose piece is [lo, hi) (after the last:
    the next epoch's first), for the prefetching source."""
    def f(lo: int, hi: int) -> tuple[int, int]:
        start = (lo // B + 1) * B
        if start >= n_train:
            start = 0
        a, b = piece(min(B, n_train - start), procs, rank)
        return start + a, start + b
    return f
