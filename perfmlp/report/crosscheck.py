"""A batch's GPU activity records (`--trace-level timeline|kernels`) held
to its own counters: the bytes each copy moved and the kernels each phase
launched (cross_check), and every steady batch of a run (run_cross_checks)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..trace.activity import own_kernel_names
from ..trace.reader import Run
from .. import names as N

COPY_DIRECTIONS = ("h2d", "d2h", "d2d")


@dataclass(frozen=True)
class CrossCheck:
    """One batch's records against its counters: per copy direction
    (records' bytes, counter), whether the bytes agree, whether the kernels
    do (None: not checkable) and where they do not (phase -> what ->
    (records, expected))."""
    h2d: tuple[int, int]
    d2h: tuple[int, int]
    d2d: tuple[int, int]
    bytes_ok: bool
    kernels_ok: bool | None
    kernel_mismatch: dict = field(default_factory=dict)
    library_kernels: int = 0
    nccl_kernels: int = 0
    collectives: int = 0


def _kernel_mismatch(recs, batch, own: frozenset, library_gemms: bool) -> tuple[dict, int]:
    """(phase -> {"own" | "library": (records, expected)}, library kernel records)."""
    graphs = {r.phase for r in recs if r.cat == N.GRAPH}
    seen_own = Counter(r.phase for r in recs if r.cat == N.COMPUTE and r.name in own)
    seen_lib = Counter(r.phase for r in recs if r.cat == N.COMPUTE and r.name not in own)
    launched = {p: n for p, n in (batch.kernels or {}).items() if p not in graphs}
    gemms = batch.gemms
    bad: dict = {}
    if gemms is not None:
        for p in sorted(set(launched) | {q for q in seen_own if q not in graphs}):
            calls = gemms.get(p, 0) if library_gemms else 0
            o, lib = seen_own.get(p, 0), seen_lib.get(p, 0)
            if o != launched.get(p, 0) - calls:
                bad[p] = {"own": (o, launched.get(p, 0) - calls)}
            if lib < calls:
                bad.setdefault(p, {})["library"] = (lib, calls)
    return bad, sum(seen_lib.values())


def cross_check(batch, own_kernels=None, library_gemms: bool = True, ranks: int = 2) -> CrossCheck:
    """A batch's records against its counters.

    Bytes: memcpy bytes per direction equal bytes_h2d, bytes_d2h and
    bytes_d2d (0 where the batch line has none), to the byte.
    Kernels, per phase (a phase replayed as one graph record at the
    `timeline` level is not counted kernel by kernel):
    - our own kernels (`own_kernels`, default activity.own_kernel_names():
      the records whose name is one of them) equal the kernels the network
      launched less its library GEMM calls, exactly;
    - every library GEMM call (the batch line's `gemms`, when the run's GEMM
      is cuBLAS: `library_gemms`) made at least one library kernel: records
      >= calls, the extra ones the library's own (split-K reductions);
    - with more than one rank, every NCCL collective at least one NCCL
      kernel (one rank's collective may launch none).
    A batch line without `gemms` (traces written before it) cannot split
    its launches: kernels_ok is None there."""
    recs = batch.gpu or ()
    got = {k: sum(r.bytes for r in recs if r.copy == k) for k in COPY_DIRECTIONS}
    want = {k: getattr(batch, f"bytes_{k}") for k in COPY_DIRECTIONS}
    own = frozenset(own_kernel_names() if own_kernels is None else own_kernels)
    bad, library = _kernel_mismatch(recs, batch, own, library_gemms)
    nccl = sum(1 for r in recs if r.cat == "comm")
    colls = sum(1 for c in batch.collectives if str(c[0]).startswith(N.NCCL))
    if nccl < colls and ranks >= 2:
        bad[N.NCCL] = {"kernels": (nccl, colls)}
    return CrossCheck(*((got[k], want[k]) for k in COPY_DIRECTIONS), bytes_ok=got == want,
                      kernels_ok=not bad if batch.gemms is not None or bad else None, kernel_mismatch=bad,
                      library_kernels=library, nccl_kernels=nccl, collectives=colls)


def run_cross_checks(run: Run) -> list[tuple[int, CrossCheck]]:
    """(rank, cross_check()) of every steady batch with activity records,
    with the run's own kernel names (its activity line; the source's for
    traces written before it held them), its GEMM and its rank count."""
    lib = run.config.get("gemm", N.CUBLAS) == N.CUBLAS
    out = []
    for recs in run.steady_batches().values():
        for r, b in recs.items():
            if b.clock == N.CUPTI:
                act = run.ranks[r].activity
                own = act.own_kernels if act is not None else None
                out.append((r, cross_check(b, own, lib, run.procs)))
    return out
