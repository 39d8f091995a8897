"""Eager or CUDA graphs: which steps a graph can hold, and the mode `auto`
runs, one rule for the trainer (perfmlp/backend.py) and the model."""
from __future__ import annotations
from ... import names as N


def graph_refusal(backend: str, parallel: str = "data", comm: str = N.NCCL) -> str | None:
    """Why a step cannot run as CUDA graphs (the trainer's one-line error
    for `--exec graph`), or None where it can. A graph needs the GPU, and
    every part of the step that it holds must run without the host:
    partitioned steps (model, hybrid) issue the model group's allreduces
    inside the forward and backward passes, so they need NCCL; data
    parallelism's staged exchange runs eagerly after a replay of forward to
    backward, and the parameter server's with ps-nccl is all NCCL."""
    if backend != N.CUPY:
        return f"--exec graph needs the cupy backend (this run is on {backend})"
    if parallel != N.DATA and comm != N.NCCL:
        return (f"--exec graph with --parallel {parallel} needs --comm nccl (with --comm {comm} the model "
                "group's allreduces need the host inside the step): use --comm nccl or --exec eager")
    return None


def resolve_comm(comm: str, backend: str) -> str:
    """The exchange that runs, for the trainer and a prediction made before
    a run alike: `auto` is mpi-staged on the GPU (cupy), mpi on NumPy."""
    if comm != "auto":
        return comm
    return "mpi" if backend == N.NUMPY else N.MPI_STAGED


def resolve_exec(exec_mode: str | None, backend: str = "cupy", parallel: str = "data", comm: str = N.NCCL) -> str:
    """The execution mode that runs, for the trainer (perfmlp/backend.py)
    and the model alike: `auto` is CUDA graphs wherever the step can be
    captured (graph_refusal: the cupy backend, and NCCL for a partitioned
    step), else eager. The model describes GPU runs, so `backend` defaults
    to cupy; the comm of host MPI (mpi, ps) is the NumPy backend's."""
    if exec_mode not in (None, "auto"):
        return exec_mode
    if comm in (N.MPI, N.PS):
        backend = "numpy"
    return "graph" if graph_refusal(backend, parallel, comm) is None else N.EAGER
