"""Measure the machine with microbenchmarks (the trainer's own kernels,
copies and step, each at sizes that isolate one cost; never a training run)
and write a machine file, an empirical roofline:
`python -m perfmlp.calibrate --out models/NAME.yaml`, under `mpirun -n P` for
what several ranks share; what is not measured comes from --base. One module
per kind of measurement (gemm, precision, kernels, copies, pipeline, host,
collectives, spread; cpu*.py: a CPU's), each timed with perfmlp.gpu.timing;
__main__.py orders them. Nothing here imports CuPy or mpi4py at import time.
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
    """The machine file `prog` measured, checked to load (`check`) and written atomically."""
    if check:
        machine_from_mapping(values, out)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, f"# Written by python -m {prog}; do not edit by hand.\n" + machine_to_yaml(values))
