"""Measure the machine it runs on with microbenchmarks (the trainer's own
kernels, copies and step, each at sizes that isolate one cost; never a
training run) and write a machine file (an empirical roofline):
`python -m perfmlp.calibrate --out models/NAME.yaml`, under `mpirun -n P`
for what several ranks share; what is not measured comes from --base, as
the file's source line says. One module per kind of measurement, each
timed with perfmlp.gpu.timing's primitives:

- gemm.py, precision.py: the large-GEMM rates and the trainer's GEMMs;
- kernels.py: the step's own kernels, the GPU's gaps between kernels;
- copies.py: device and host <-> device copies, by 1, 2 and P ranks;
- pipeline.py: the trainer's step beside its input pipeline;
- host.py: the host's time per launch and per traced phase;
- collectives.py: MPI and NCCL allreduce, the waits for the slowest rank;
- spread.py: the measurements' spread (the prediction intervals);
- cpu.py and cpu_*.py: a CPU's calibration;
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
