"""The house: no import circle in perfmlp/, the model imports nothing of the
trainer, and the phases the model counts are the ones the trace records."""
import ast
from pathlib import Path

import pytest

from perfmlp.model.predict import TRACE_LEVELS as MODEL_TRACE_LEVELS, traced_phases
from perfmlp.trace.format import TRACE_LEVELS, batch_phases

PKG = Path(__file__).resolve().parents[1] / "perfmlp"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """perfmlp modules imported anywhere in a file (inside functions too)."""
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
        out |= {n for n in names if n.startswith("perfmlp")}
    return out


def graph() -> dict[str, set[str]]:
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {t for t in imports_of(p) if t in mods and t != m} for m, p in mods.items()}


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in sorted(g[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t] if t in stack else [m, t]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])


def test_the_model_imports_nothing_of_the_trainer():
    for m, targets in graph().items():
        if m.startswith("perfmlp.model"):
            outside = {t for t in targets if not t.startswith("perfmlp.model") and t not in ("perfmlp", "perfmlp.checks")}
            assert not outside, f"{m} imports {outside}"
    for p in (PKG / "model").rglob("*.py"):
        text = p.read_text()
        for lib in ("cupy", "mpi4py", "matplotlib"):
            assert f"import {lib}" not in text, f"{p} imports {lib}"


def test_the_report_never_imports_the_trainer_or_cupy():
    trainer = {"perfmlp.train", "perfmlp.backend", "perfmlp.gpu", "perfmlp.comm", "perfmlp.batches", "perfmlp.mlp"}
    for m, targets in graph().items():
        if m.startswith("perfmlp.report"):
            assert not {t for t in targets if t.split(".")[:2] and ".".join(t.split(".")[:2]) in trainer}, m
    for p in (PKG / "report").rglob("*.py"):
        assert "import cupy" not in p.read_text(), p


@pytest.mark.parametrize("comm", ["mpi", "mpi-staged", "nccl"])
@pytest.mark.parametrize("transfer", ["pageable", "pinned", "resident"])
@pytest.mark.parametrize("exec_mode", ["eager", "graph"])
def test_the_models_tracer_events_are_the_traces_phases(comm, transfer, exec_mode):
    # one CUDA event at the end of each phase a batch records
    if exec_mode == "graph" and comm == "mpi":
        pytest.skip("graph mode is GPU only")
    assert traced_phases(comm, transfer, exec_mode) == len(batch_phases(comm, transfer, exec_mode))


def test_the_model_prices_every_trace_level_the_tracer_has():
    # the model owns its names (it imports nothing of the trace); they are the tracer's, in its order
    assert MODEL_TRACE_LEVELS == tuple(TRACE_LEVELS)
