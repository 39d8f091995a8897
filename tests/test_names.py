"""The shared vocabulary is spelled once, in perfmlp/names.py.

Every other module of perfmlp/ imports the names. A name that is an
ordinary word too (data, model, graph, forward, float32, ...) is flagged
only where code tests a value against it (`x == "graph"`, `x in ("data",
...)`); a name that is nothing but a name (mpi-staged, pageable, bf16, ...)
is flagged wherever it stands alone as a string constant. Docstrings,
f-strings and messages are text, not names, and are never flagged.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfmlp import names as N

ROOT = Path(N.__file__).parent

# nothing but names: flagged as any standalone string constant
ONLY_NAMES = {N.MPI_STAGED, N.NCCL, N.PS_NCCL, N.PS_ASYNC, N.PS_ASYNC_NCCL, N.PAGEABLE, N.PINNED, N.RESIDENT,
              N.PREFETCH, N.PREFETCH_PAGEABLE, N.CUBLAS, N.NAIVE, N.TILED, N.REGBLOCK, N.TF32, N.BF16, N.FP16,
              N.EAGER, N.HYBRID, N.COUNTERS, N.UNTRACED, N.CUDA_EVENTS, N.CUPTI, N.H2D_BATCH, N.D2H_GRAD,
              N.H2D_GRAD, N.Phase.H2D_PARAMS.value, N.SYNTHETIC}
# ordinary words too: flagged where a value is compared with them
WORDS = ({*N.STRATEGIES, *N.COMMS, *N.TRANSFERS, *N.EXECS, *N.GEMM_KERNELS, *N.PRECISIONS, *N.TRACE_LEVELS,
          *N.BACKENDS, *N.DATA_SOURCES, *N.GROUPS, *(p.value for p in N.PHASES)} - ONLY_NAMES)

ROOMS = sorted({p.relative_to(ROOT).parts[0] if len(p.relative_to(ROOT).parts) > 1 else "."
                for p in ROOT.rglob("*.py")})


def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _compared(tree) -> set[int]:
    """ids of the string constants a comparison tests a value against."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                out |= {id(i) for i in items if isinstance(i, ast.Constant)}
    return out


def literal_names(path: Path) -> list[str]:
    """'file:line: "name"' for each vocabulary name spelled in the file."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    skip |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    compared = _compared(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        if node.value in ONLY_NAMES or (node.value in WORDS and id(node) in compared):
            out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}")
    return out


@pytest.mark.parametrize("room", ROOMS)
def test_no_name_is_spelled_outside_the_vocabulary(room):
    files = [ROOT / "__init__.py"] if room == "." else sorted((ROOT / room).rglob("*.py"))
    if room == ".":
        files = sorted(p for p in ROOT.glob("*.py") if p.name != "names.py")
    found = [hit for f in files for hit in literal_names(f)]
    assert not found, f"{len(found)} names spelled outside perfmlp/names.py:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_name(tmp_path):
    # the check itself can fail: a comparison with a word, and a bare name, are both found
    f = ROOT / "_scan_probe.py"
    try:
        f.write_text('"""doc: nccl"""\nx = 1\nif x == "graph": y = "pageable"\nmsg = f"{x} nccl"\n')
        hits = literal_names(f)
    finally:
        f.unlink()
    assert [h.split(": ", 1)[1] for h in hits] == ["'graph'", "'pageable'"] or \
        sorted(h.split(": ", 1)[1] for h in hits) == ["'graph'", "'pageable'"]


def test_batch_phases_follow_the_exchange_and_the_mode():
    P = N.Phase
    # eager staged exchange with copied batches: every phase of data parallelism
    assert N.batch_phases(N.MPI_STAGED, N.PAGEABLE, N.EAGER) == (
        P.H2D, P.FORWARD, P.LOSS, P.BACKWARD, P.D2H, P.ALLREDUCE, P.H2D_GRAD, P.UPDATE)
    # one replay holds everything with NCCL; resident data copies nothing
    assert N.batch_phases(N.NCCL, N.RESIDENT, N.GRAPH) == (P.GRAPH,)
    # pure model parallelism: a combine, no gradient exchange
    assert N.batch_phases(N.NCCL, N.RESIDENT, N.EAGER, combine=True, exchange=False) == (
        P.FORWARD, P.COMBINE, P.LOSS, P.BACKWARD, P.UPDATE)
    # a parameter server's worker: reduce and broadcast, no update of its own
    assert N.batch_phases(N.PS, N.PAGEABLE, N.EAGER, updates=False) == (
        P.H2D, P.FORWARD, P.LOSS, P.BACKWARD, P.REDUCE, P.BCAST)


def test_every_phase_has_a_group():
    assert set(N.PHASE_GROUP) == set(N.PHASES)
    assert set(N.PHASE_GROUP.values()) == set(N.GROUPS)


def test_no_function_shadows_the_vocabulary():
    # a local `N` (a matrix size, a sample count) in a module that imports the vocabulary as N hides it
    # from the whole function: N.CUBLAS before the local is assigned is an UnboundLocalError
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "N" for a in n.names)
                   for n in ast.walk(tree)):
            continue
        found += [f"{path.relative_to(ROOT.parent)}:{n.lineno}" for n in ast.walk(tree)
                  if (isinstance(n, ast.Name) and n.id == "N" and isinstance(n.ctx, ast.Store))
                  or (isinstance(n, ast.arg) and n.arg == "N")]
    assert not found, "N assigned where it names perfmlp.names: " + ", ".join(found)
