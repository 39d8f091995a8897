"""Machine descriptions: `models/*.yaml` loaded into a frozen dataclass.

The files ship inside the package as `perfmlp.machines` (pyproject.toml maps
the top-level models/ folder there), so `--machine NAME` finds them after any
install; `--machine PATH` reads any file.

Every number carries its unit in its key. A file must say where its
numbers come from (`source:`). Unknown keys, missing required keys, rates
that are not positive (a peak of 0 would divide by zero), negative times and
non-numeric values are one-line errors naming the file and key.

- points.py: the measured tables' entries (one dataclass per kind);
- description.py: Machine and its look-ups (interpolation in those tables);
- entries.py: a file's values checked one by one;
- files.py: finding, reading and writing the files;
- cpu.py: a CPU file (`backend: numpy`) checked into a CpuMachine.
"""
from .cpu import CpuMachine
from .description import Machine
from .files import (DEFAULT_MACHINE, MACHINES_PACKAGE, MachineError, load_machine, machine_files, machine_from_mapping,
                    machine_to_yaml, resolve_machine_path)
from .points import (GemmRate, KernelTime, MODEL_ERROR_SOURCES, MODEL_SOURCES, PAGEABLE_MODEL_ERROR_SOURCES,
                     PAGEABLE_TRANSFERS, SPREAD_SOURCES)

__all__ = ["Machine", "CpuMachine", "DEFAULT_MACHINE", "MACHINES_PACKAGE", "MachineError", "load_machine",
           "machine_files", "machine_from_mapping", "machine_to_yaml", "resolve_machine_path", "GemmRate", "KernelTime",
           "MODEL_ERROR_SOURCES", "MODEL_SOURCES", "PAGEABLE_MODEL_ERROR_SOURCES", "PAGEABLE_TRANSFERS",
           "SPREAD_SOURCES"]
