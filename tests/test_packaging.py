"""What an installed perfmlp holds: the machine files reachable through the
package (importlib.resources, as after a non-editable `pip install .`), and
every package of the source tree listed in pyproject.toml."""
import importlib.metadata
from fnmatch import fnmatch
from importlib import resources

import pytest

from perfmlp.model.machine import MACHINES_PACKAGE, load_machine, machine_files

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_machine_files_are_reachable_through_the_package():
    try:
        importlib.metadata.distribution("perfmlp")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("perfmlp is not installed (a checkout on PYTHONPATH): the package mapping does not exist")
    shipped = sorted(p.name for p in resources.files(MACHINES_PACKAGE).iterdir() if p.name.endswith(".yaml"))
    assert shipped == sorted(p.name for p in (ROOT / "models").glob("*.yaml"))
    assert {"quadro-rtx-6000.yaml", "h100-sxm.yaml", "h200.yaml", "h200-calibrated.yaml"} <= set(shipped)
    assert [f.name for f in machine_files()] == shipped
    for f in machine_files():
        assert load_machine(f).source  # each one loads, read through the package


def test_pyproject_maps_models_into_the_package():
    st = _setuptools()
    assert st["package-dir"] == {MACHINES_PACKAGE: "models"}
    assert MACHINES_PACKAGE in st["packages"]
    assert "*.yaml" in st["package-data"][MACHINES_PACKAGE]


def test_pyproject_lists_every_package():
    """The packages are listed by name (the mapping rules out packages.find):
    a new folder of Python files under perfmlp/ must be added there."""
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "perfmlp").rglob("*")
             if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}
    found.add("perfmlp")
    assert found <= set(_setuptools()["packages"])


def test_pyproject_ships_every_data_file():
    """Every non-Python file under perfmlp/ (CUDA source, studies, the
    shipped digits) matches a package-data pattern of its package; a C
    source is an extension's, named in setup.py (its build, *.so, is not
    shipped as data)."""
    st = _setuptools()
    packages, data = set(st["packages"]), st["package-data"]
    extensions = (ROOT / "setup.py").read_text()
    missing = []
    for f in (ROOT / "perfmlp").rglob("*"):
        if not f.is_file() or f.suffix in (".py", ".pyc", ".so") or "__pycache__" in f.parts:
            continue
        if f.suffix == ".c":
            if f'"{f.relative_to(ROOT).as_posix()}"' not in extensions:
                missing.append(f"{f}: a C source no extension builds")
            continue
        parts = f.relative_to(ROOT).parts
        # the deepest listed package holding the file, and the file's path inside it
        depth = max(i for i in range(1, len(parts)) if ".".join(parts[:i]) in packages)
        package, inside = ".".join(parts[:depth]), "/".join(parts[depth:])
        if not any(fnmatch(inside, pattern) for pattern in data.get(package, [])):
            missing.append(f"{package}: {inside}")
    assert not missing


def test_a_source_checkout_without_install_finds_models(monkeypatch):
    # run from a checkout on PYTHONPATH (as on the GPU machine), perfmlp.machines
    # does not exist: the checkout's models/ folder is used
    from perfmlp.model.machine import files as machine

    def not_installed(name):
        raise ModuleNotFoundError(name)
    monkeypatch.setattr(machine.resources, "files", not_installed)
    names = [f.name for f in machine.machine_files()]
    assert "h200.yaml" in names and "quadro-rtx-6000.yaml" in names
    assert machine.load_machine("h200").peak_flops_per_s_float32 > 0
