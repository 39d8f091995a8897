"""Choosing the machine files for a set of runs: the datasheet file that
describes the GPU they ran on, the calibrated file made on that GPU (if one
ships), and a file the user named in place of the one of its kind."""
from __future__ import annotations

import contextlib
import os
import re
import statistics
from dataclasses import dataclass
from typing import Iterable

from .description import Machine
from .files import DEFAULT_MACHINE, CpuMachine, MachineError, load_machine, machine_files

_CPU_LINE = re.compile(r"^backend:\s*['\"]?numpy['\"]?\s*(#.*)?$", re.MULTILINE)   # a CPU file's top-level key


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


def shipped_machines(cpu: bool) -> list[Machine]:
    """Every shipped machine file of one kind (`cpu`: CPU files, else GPU ones) that loads (a broken one is
    passed over); a file's kind is read from its `backend:` line, so the other kind's are never parsed."""
    out = []
    for f in machine_files():
        with contextlib.suppress(MachineError, OSError, UnicodeDecodeError):
            if (_CPU_LINE.search(f.read_text(encoding="utf-8")) is not None) == cpu:
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
    given = load_machine(machine_arg) if machine_arg else None
    files = shipped_machines(cpu=False) if gpu else []
    datasheet = next((m for m in files if m.describes(gpu) and not m.calibrated), None) \
        or load_machine(DEFAULT_MACHINE)
    calibrated = next((m for m in files if m.name.startswith(gpu) and m.calibrated), None)
    numpy_runs = len(gpus) < len(runs) and not isinstance(given, CpuMachine)
    cpu = nearest_cpu(shipped_machines(cpu=True)) if numpy_runs else None
    if given is not None:
        if isinstance(given, CpuMachine):
            cpu = given
        elif given.calibrated:
            calibrated = given
        else:
            datasheet = given
    return Machines(datasheet, calibrated, cpu)
