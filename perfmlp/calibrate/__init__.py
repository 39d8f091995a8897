"""Measure the machine with microbenchmarks (the trainer's own kernels, copies and step, each at sizes
that isolate one cost; never a training run) and write a machine file, an empirical roofline:
`python -m perfmlp.calibrate --out models/NAME.yaml`, under `mpirun -n P` for what several ranks share;
what is not measured comes from --base. One module per kind of measurement (gemm, precision, kernels,
copies, pipeline, host, collectives, spread; cpu*.py: a CPU's), each timed with perfmlp.gpu.timing;
__main__.py orders them. Nothing here imports CuPy or mpi4py at import time."""
from pathlib import Path

from ..errors import write_atomic
from ..model.machine import machine_from_mapping, machine_to_yaml


def write_machine(values: dict, out: str, prog: str = "perfmlp.calibrate", check: bool = True) -> None:
    """The machine file `prog` measured, checked to load (`check`) and written atomically."""
    if check:
        machine_from_mapping(values, out)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, f"# Written by python -m {prog}; do not edit by hand.\n" + machine_to_yaml(values))
