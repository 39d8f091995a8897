"""The house: what each part of perfmlp may import (allow-lists, imports
inside functions included, read with ast), no import circle between modules
or between the parts."""
import ast
import sys
from pathlib import Path

import pytest


PKG = Path(__file__).resolve().parents[1] / "perfmlp"

# ---- the parts and what each may import ----------------------------------------------------------
# A name stands for the module and everything under it ("perfmlp" alone is the package's __init__:
# its version). Every module of perfmlp belongs to exactly one part; a new one must be placed here.
BASE = ("perfmlp", "perfmlp.checks", "perfmlp.errors", "perfmlp.names",   # checks, the error type, the vocabulary,
        "perfmlp.safeio")                                                # safe I/O
MODEL = ("perfmlp.model",)                                        # pure: shapes and machine numbers
TRACE = ("perfmlp.trace",)                                        # the contract between a run and its report
CONFIG = ("perfmlp.config", "perfmlp.flags", "perfmlp.data", "perfmlp.params")                  # the configuration, the data sets
TRAINER = ("perfmlp.backend", "perfmlp.batches", "perfmlp.comm", "perfmlp.mlp", "perfmlp.step", "perfmlp.train",
           "perfmlp.mixed", "perfmlp.watchdog", "perfmlp.gpu", "perfmlp.strategies",
           "perfmlp.psasync", "perfmlp.faults", "perfmlp.startup", "perfmlp.slices")
HOST = ("perfmlp.blas",)                                          # the host's BLAS and cores (ctypes, /proc)
REPORT = ("perfmlp.report",)
# a package's command (python -m perfmlp.model) is a part of its own: it may read the configuration
COMMANDS = ("perfmlp.model.__main__",)
PARTS = {
    # part: (its modules, the perfmlp modules it may import, the libraries beyond the standard one it may import)
    "base": (BASE, BASE, ("yaml",)),
    "model": (MODEL, (*MODEL, "perfmlp", "perfmlp.checks", "perfmlp.names"), ("numpy", "yaml")),
    "host": (HOST, ("perfmlp",), ("numpy",)),
    "trace": (TRACE, (*TRACE, *BASE, *MODEL, *HOST), ("numpy", "cupy", "cupti", "nvtx")),
    "config": (CONFIG, (*CONFIG, *BASE, *MODEL, *TRACE), ("numpy", "yaml")),
    "trainer": (TRAINER, (*TRAINER, *CONFIG, *BASE, *MODEL, *TRACE, *HOST),
                ("numpy", "cupy", "cupyx", "mpi4py", "ml_dtypes")),
    # perfetto: the trace processor's RPC messages, for the check of the Chrome export (report/perfetto.py)
    "report": (REPORT, (*REPORT, *BASE, *MODEL, *TRACE), ("numpy", "matplotlib", "yaml", "perfetto")),
    # the commands over the parts
    "run": (("perfmlp.run", "perfmlp.__main__"), ("perfmlp.run", *TRAINER, *CONFIG, *BASE, *MODEL, *TRACE), ()),
    "calibrate": (("perfmlp.calibrate",), ("perfmlp.calibrate", *TRAINER, *CONFIG, *BASE, *MODEL, *TRACE, *HOST),
                  ("numpy", "cupy", "cupyx", "mpi4py", "yaml")),
    # the sweep: refuses in its first second what the trainer would (backend.check_options, a GPU present)
    "sweep": (("perfmlp.sweep",), ("perfmlp.sweep", *CONFIG, *BASE, *MODEL, *TRACE, *REPORT, "perfmlp.backend",
                                   "perfmlp.gpu", "perfmlp.startup", "perfmlp.run"), ("yaml", "mpi4py")),
    # mpi4py: which MPI launches the runs; startup: signals' words; run: its Signalled
    # the what-if command: the report's reading of a run, the trainer's refusals (backend.check_options)
    "whatif": (("perfmlp.whatif",), (*BASE, *CONFIG, *MODEL, *TRACE, *REPORT, "perfmlp.backend"), ("yaml",)),
    "fetch": (("perfmlp.fetch",), BASE, ()),
    "model_command": (COMMANDS, (*CONFIG, *BASE, *MODEL, *TRACE), ()),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path) -> tuple[set[str], set[str]]:
    """(perfmlp modules, other top-level packages) imported anywhere in a file, inside functions too."""
    me = module_name(path)
    return imports_in(path.read_text(), me if path.name == "__init__.py" else me.rsplit(".", 1)[0])


def imports_in(text: str, pkg: str) -> tuple[set[str], set[str]]:
    """imports_of for the source of a module of package `pkg`."""
    ours, libraries = set(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        ours |= {n for n in names if n.split(".")[0] == "perfmlp"}
        libraries |= {n.split(".")[0] for n in (names if isinstance(node, ast.Import) else names[:1])
                      if n.split(".")[0] != "perfmlp"}
    return ours, libraries - set(sys.stdlib_module_names)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {t for t in imports_of(p)[0] if t in mods and t != m} for m, p in mods.items()}


def within(name: str, names) -> bool:
    return any(name == n or (n != "perfmlp" and name.startswith(n + ".")) for n in names)


def part_of(module: str) -> str | None:
    if module in COMMANDS:
        return "model_command"
    found = [part for part, (mine, _, _) in PARTS.items() if within(module, mine)]
    assert len(found) <= 1, f"{module} is in several parts: {found}"
    return found[0] if found else None


def circle(g: dict[str, set[str]]) -> list[str] | None:
    """One import circle of a graph, or None."""
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in sorted(g.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = visit(t, stack + [t])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_every_module_is_in_one_part():
    lost = sorted(m for m in modules() if part_of(m) is None)
    assert not lost, f"modules in no part of tests/test_architecture.py PARTS: {lost}"


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_imports_only_what_it_may(part):
    mine, allowed, libraries = PARTS[part]
    known = modules()
    for m, path in known.items():
        if part_of(m) != part:
            continue
        ours, theirs = imports_of(path)
        wrong = sorted(t for t in ours if t in known and not within(t, allowed))   # modules, not names in them
        assert not wrong, f"{m} ({part}) imports {wrong}: not in its allow-list"
        extra = sorted(theirs - set(libraries))
        assert not extra, f"{m} ({part}) imports {extra}: not in its allow-list"


def test_the_rules_of_the_house_hold_in_the_lists():
    # the model imports nothing of the trainer, CuPy, mpi4py or matplotlib; the trainer never imports the
    # report; the report never imports CuPy (the lists above are what the tests hold)
    for lib in ("cupy", "cupyx", "mpi4py", "matplotlib"):
        assert lib not in PARTS["model"][2]
    assert not any(within(t, TRAINER + CONFIG) for t in PARTS["model"][1])
    assert not any(within(t, REPORT) for t in PARTS["trainer"][1])
    assert "cupy" not in PARTS["report"][2] and not any(within(t, TRAINER) for t in PARTS["report"][1])


def test_no_import_circle_between_modules():
    found = circle(graph())
    assert not found, "import circle: " + " -> ".join(found)


def test_no_import_circle_between_the_parts():
    # a circle through several modules of two parts (report -> a command -> report) is a circle too
    g = graph()
    unit = {m: m if m in COMMANDS else ".".join(m.split(".")[:2]) for m in g}    # perfmlp.report.x -> perfmlp.report
    units: dict[str, set[str]] = {}
    for m, targets in g.items():
        units.setdefault(unit[m], set()).update(unit[t] for t in targets if unit[t] != unit[m])
    found = circle(units)
    assert not found, "import circle between parts: " + " -> ".join(found)


def test_imports_inside_functions_count_and_a_circle_is_found():
    # the report's validation importing the what-if command inside a function, which imports the report:
    # the circle the lists and the circle tests must see
    ours, libraries = imports_in("import math\ndef f():\n    from ..whatif import what_if\n    import cupy\n",
                                 "perfmlp.report")
    assert "perfmlp.whatif" in ours and libraries == {"cupy"}
    assert not within("perfmlp.whatif", PARTS["report"][1])
    assert circle({"perfmlp.report": {"perfmlp.whatif"}, "perfmlp.whatif": {"perfmlp.report"}}) == [
        "perfmlp.report", "perfmlp.whatif", "perfmlp.report"]
    assert circle({"a": {"b"}, "b": set()}) is None


# ---- the report reads what ran, and prices through the model's public API ------------------------
COSTS = "perfmlp.model.costs"   # the model's FLOP and byte formulas: the trace records what the report needs of them


def costs_imports(ours: set[str]) -> list[str]:
    return sorted(n for n in ours if n == COSTS or n.startswith(COSTS + "."))


def test_no_report_module_imports_the_model_cost_functions():
    found = {m: costs_imports(imports_of(p)[0]) for m, p in modules().items() if within(m, REPORT)}
    found = {m: c for m, c in found.items() if c}
    assert not found, f"report modules importing {COSTS} (read the Shape records or the manifest's `ran`): {found}"


def test_the_cost_import_check_finds_one():
    # both spellings: the module itself, and a name imported from it
    assert costs_imports(imports_in("from ..model.costs import itemsize\n", "perfmlp.report")[0])
    assert costs_imports(imports_in("from ...model import costs\n", "perfmlp.report.sections")[0])
    assert not costs_imports(imports_in("from ..model.predict import predict_batch\n", "perfmlp.report")[0])
