"""Machine descriptions: `models/*.yaml` loaded into a frozen dataclass.

The files ship inside the package as `perfmlp.machines` (pyproject.toml maps
models/ there), so `--machine NAME` finds them after any install; `--machine
PATH` reads any file. Every number carries its unit in its key, and a file
says where its numbers come from (`source:`); files.py checks every value.
"""
from .description import (MODEL_ERROR_SOURCES, MODEL_SOURCES, PAGEABLE_MODEL_ERROR_SOURCES, PAGEABLE_TRANSFERS,
                          SPREAD_SOURCES, Machine)
from .files import (DEFAULT_MACHINE, MACHINES_PACKAGE, CpuMachine, GemmRate, KernelTime, MachineError, load_machine,
                    machine_files, machine_from_mapping, machine_to_yaml, resolve_machine_path)

__all__ = ["Machine", "CpuMachine", "DEFAULT_MACHINE", "MACHINES_PACKAGE", "MachineError", "load_machine",
           "machine_files", "machine_from_mapping", "machine_to_yaml", "resolve_machine_path", "GemmRate", "KernelTime",
           "MODEL_ERROR_SOURCES", "MODEL_SOURCES", "PAGEABLE_MODEL_ERROR_SOURCES", "PAGEABLE_TRANSFERS",
           "SPREAD_SOURCES"]
