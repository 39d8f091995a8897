"""Reading machine files: shipped ones by name, any by path, each checked
into a Machine (one-line MachineError naming the file and key); and the
YAML text the calibration writes."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ... import checks
from .cpu import CpuMachine, cpu_machine_from_mapping, is_cpu_file
from .description import Machine, MachineError
from .entries import check_scalars, check_tables

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

MACHINES_PACKAGE = "perfmlp.machines"
DEFAULT_MACHINE = "quadro-rtx-6000"


def machine_from_mapping(data, where: str) -> Machine | CpuMachine:
    """The Machine a mapping of keys describes (`where`: the file, for
    messages); a CpuMachine for a CPU file (`backend: numpy`)."""
    try:
        if is_cpu_file(data):
            return cpu_machine_from_mapping(data, where)
        return Machine(path=where, **check_scalars(data), **check_tables(data))
    except checks.CheckError as e:
        raise MachineError(f"{where}: {e}") from None


def machine_files() -> list[Traversable]:
    """The machine files shipped with the package (models/*.yaml), by name;
    in a source checkout (this package beside a models/ folder), that
    checkout's models/, whichever checkout an editable install points at."""
    folder = Path(__file__).resolve().parents[3] / "models"
    if not (folder / "__init__.py").is_file():
        try:
            folder = resources.files(MACHINES_PACKAGE)
        except ModuleNotFoundError:
            raise MachineError(f"the package {MACHINES_PACKAGE} (the machine files) is not installed: "
                               "run `pip install -e .` again in the project") from None
    return sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


def resolve_machine_path(name_or_path) -> Path | Traversable:
    """A file as given (a path ending in .yaml/.yml or that exists, or one of
    machine_files()), else the shipped machine file `<name>.yaml`."""
    if name_or_path is None:
        name_or_path = DEFAULT_MACHINE
    if not isinstance(name_or_path, (str, Path)):
        return name_or_path  # a Traversable from machine_files()
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    shipped = machine_files()
    for f in shipped:
        if f.name == f"{name_or_path}.yaml":
            return f
    names = ", ".join(f.name.removesuffix(".yaml") for f in shipped)
    raise MachineError(f"no machine named {str(name_or_path)!r} (shipped: {names}; or give a .yaml file)")


def load_machine(name_or_path=None) -> Machine | CpuMachine:
    """The machine in a file given by path, or shipped under a name (default: DEFAULT_MACHINE)."""
    path = resolve_machine_path(name_or_path)
    try:
        data = checks.read_yaml(path, "machine file")
    except checks.CheckError as e:
        raise MachineError(str(e)) from None
    return machine_from_mapping(data, str(path))


def machine_to_yaml(values: dict) -> str:
    """YAML text for a mapping of machine keys (used by the calibration)."""
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=120)
