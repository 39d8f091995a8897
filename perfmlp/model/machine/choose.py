"""Choosing the machine files for a set of runs: the datasheet file that
describes the GPU they ran on, the calibrated file made on that GPU (if one
ships), and a file the user named in place of the one of its kind."""
from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import dataclass
from typing import Iterable

from .description import Machine
from .files import DEFAULT_MACHINE, CpuMachine, MachineError, load_machine, machine_files


@dataclass(frozen=True)
class Machines:
    datasheet: Machine
    calibrated: Machine | None
    cpu: CpuMachine | None = None   # the CPU file for runs on the NumPy backend (None: all ran on a GPU)

    @property
    def primary(self) -> Machine:
        """The machine to predict with: the calibrated one where there is one."""
        return self.calibrated or self.datasheet

    @property
    def primary_kind(self) -> str:
        return "calibrated" if self.calibrated else "datasheet"


def shipped_machines() -> list[Machine]:
    """Every shipped machine file that loads (a broken one is passed over)."""
    out = []
    for f in machine_files():
        with contextlib.suppress(MachineError):
            out.append(load_machine(f))   # parsed once per process (load_machine keeps what it read)
    return out


def nearest_cpu(cpus) -> CpuMachine | None:
    """Of CPU files, the one whose cores are nearest this machine's."""
    return min(cpus, key=lambda m: abs(m["cores"] - (os.cpu_count() or 1)), default=None)


def pick_machines(runs: Iterable, machine_arg: str | None) -> Machines:
    """The datasheet, calibrated and CPU files for `runs` (`run.gpu`); `machine_arg` replaces its kind's."""
    runs = list(runs)
    gpus = [r.gpu for r in runs if r.gpu]
    gpu = statistics.mode(gpus) if gpus else None
    files = shipped_machines()
    cpus = [m for m in files if isinstance(m, CpuMachine)]
    files = [m for m in files if not isinstance(m, CpuMachine)]
    datasheet = next((m for m in files if gpu and m.describes(gpu) and not m.calibrated), None) \
        or load_machine(DEFAULT_MACHINE)
    calibrated = next((m for m in files if gpu and m.name.startswith(gpu) and m.calibrated), None)
    cpu = nearest_cpu(cpus) if len(gpus) < len(runs) else None
    if machine_arg:
        given = load_machine(machine_arg)
        if isinstance(given, CpuMachine):
            cpu = given
        elif given.calibrated:
            calibrated = given
        else:
            datasheet = given
    return Machines(datasheet, calibrated, cpu)
