"""Measure the machine it runs on with microbenchmarks (the trainer's own
kernels, copies and step, each at sizes that isolate one cost; never a
training run) and write a machine file (an empirical roofline):
`python -m perfmlp.calibrate --out models/NAME.yaml`, under
`mpirun -n P` for what several ranks share. What is not measured is taken
from --base, and the file's source line says so.

One module per kind of measurement, each timed with the primitives of
perfmlp.gpu.timing (GPU time between CUDA events, calls queued behind a
spin kernel; host wall time; interleaved rounds):

- gemm.py: the large-GEMM rate (the file's peak) and the trainer's own
  GEMMs at its shapes and layouts (gemm_flops_per_s);
- kernels.py: the step's own kernels (kernel_s), the GPU's gaps between
  kernels and graph replays, a CUDA event's cost;
- copies.py: device bandwidth, device-to-device copies into a graph's
  static inputs, host <-> device bandwidth and the trainer's own copies by
  1, 2 and P ranks at once (host_copy_s), pageable copies behind a busy
  stream;
- pipeline.py: the trainer's step beside its input pipeline (prefetch_s),
  at a size whose GPU work is negligible;
- host.py: the host's time per launched operation and per traced phase,
  alone and with 2 and P ranks launching at once, the graph step's host
  time, the eager step's host time by size and its launches after
  pageable batch copies;
- collectives.py: MPI and NCCL allreduce (allreduce_s and the ring fit),
  the wait for the slowest rank, the staged exchange's own wait;
- __main__.py: the command line, the order of the measurements, the file.

Nothing here imports CuPy or mpi4py at import time.
"""
from pathlib import Path

from ..errors import write_atomic
from ..model.machine import machine_from_mapping, machine_to_yaml
from .collectives import ring_fit, staged_parts, staged_wait
from .copies import host_copies, pageable_ahead, static_copies
from .gemm import step_network
from .host import dispatch_size_factors, host_dispatch, mean_dispatch
from .kernels import own_kernel_times

__all__ = ["dispatch_size_factors", "host_copies", "host_dispatch", "mean_dispatch", "own_kernel_times",
           "pageable_ahead", "ring_fit", "staged_parts", "staged_wait", "static_copies", "step_network",
           "write_machine"]


def write_machine(values: dict, out: str, prog: str = "perfmlp.calibrate", check: bool = True) -> None:
    """The machine file `prog` measured, checked to load (`check`) and written whole (a temporary name,
    renamed)."""
    if check:
        machine_from_mapping(values, out)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, f"# Written by python -m {prog}; do not edit by hand.\n" + machine_to_yaml(values))
