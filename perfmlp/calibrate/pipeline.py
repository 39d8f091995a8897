"""The input pipeline as the trainer runs it (perfmlp/gpu/prefetch.py): the trainer's own step at a
negligible hidden size, its batch prefetched from pinned memory or staged from a pageable source,
beside the same step with the batch resident (eager and graph), in the same rounds: the whole loop,
since the staging threads need the GIL the loop's thread holds while it runs Python. prefetch_s points
give the step (`s`) and the resident loop's own time (`loop_s`: Machine.prefetch_host_s); a piece's
bytes are what the pipeline moves, the step running in float32 with as many rows as hold them."""
from __future__ import annotations

from statistics import median

from ..config import Config
from ..gpu import timing
from .host import DISPATCH_SIZES, resident_step
from .. import names as N

PIECES = 6          # the pieces of each source, taken in order: the pipeline prefetches the next ones
ROW = 4 * (Config.input_size + Config.num_classes)   # a float32 sample's bytes, features and label
SOURCES = (N.RESIDENT, N.PREFETCH, N.PREFETCH_PAGEABLE)


def rows_for(piece_bytes: list[int]) -> list[int]:
    """The float32 rows (D + C values each) that hold each piece's bytes."""
    return sorted({max(1, round(n / ROW)) for n in piece_bytes})


def _loop(cp, stream, source: str, b: int, graph_mode: bool):
    """run(n): seconds per step of n trainer's steps on pieces of b rows from `source`, going on where the
    last call stopped (the pipeline prefetched the next pieces)."""
    from ..backend import _next_piece
    from ..gpu.graph import GraphStep
    from ..step import step
    from ..comm import SingleWorld
    from ..trace.format import Counts
    from ..trace.writer import NullTracer
    sizes = (Config.input_size, DISPATCH_SIZES[1], Config.num_classes)
    net, batches, reducer = resident_step(cp, sizes, b, SingleWorld(), PIECES, source,
                                          _next_piece(b, PIECES * b, 1, 0))
    graph = GraphStep(cp, net, batches, reducer, stream) if graph_mode else None
    phase, counts, k = NullTracer().phase, Counts(), [0]

    def one() -> None:
        lo = (k[0] % PIECES) * b
        k[0] += 1
        step(net, batches, reducer, lo, lo + b, phase, counts, graph)
        counts.reset()

    def run(n: int) -> float:
        return timing.per_call_s(one, n, start=stream.synchronize, end=stream.synchronize)

    run.close = getattr(batches, "close", lambda: None)
    return run


def prefetch_points(cp, piece_bytes: list[int], log, rounds: int = 3, steps: int = 20) -> list[dict]:
    """prefetch_s points: for each piece size, execution mode and prefetching source, the step's seconds
    per batch (`s`) and the resident step's (`loop_s`), medians over interleaved rounds after a warm-up."""
    from ..gpu import use_device
    stream = use_device(cp, cp.cuda.Device().id)
    points, words = [], []
    for b in rows_for(piece_bytes):
        loops = {(ex, src): _loop(cp, stream, src, b, ex == N.GRAPH) for ex in (N.EAGER, "graph") for src in SOURCES}
        try:
            ts = timing.rounds({key: (lambda f=f: f(steps)) for key, f in loops.items()}, rounds, warmup_rounds=1)
        finally:
            for f in loops.values():
                f.close()
        med = {key: float(median(v)) for key, v in ts.items()}
        for ex in (N.EAGER, "graph"):
            for src in SOURCES[1:]:
                points.append({"exec": ex, "source": src, "bytes": b * ROW, "s": med[(ex, src)],
                               "loop_s": med[(ex, N.RESIDENT)]})
            words.append(f"{b * ROW / 1e6:.2f} MB {ex} " + " / ".join(f"{med[(ex, s)] * 1e6:.0f}" for s in SOURCES))
    log("the step at a negligible size, resident / prefetch / prefetch-pageable (us per batch): " + ", ".join(words))
    return points
