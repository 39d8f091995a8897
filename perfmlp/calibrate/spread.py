"""The spread of the calibration's own repeated measurements, written to the machine file as `spread`
(the prediction intervals: model/interval.py): each source keeps the ratios of its repeats to their
median, at the granularity a run's median time per batch varies over (a round's median, not one
call's), pooled over its points. Sources: host (the eager and graph steps' rounds in both dispatch
measurements), pageable_copy and pinned_copy, gpu (the step's GPU work queued ahead), collective (host
MPI's calls' medians in groups of ROUND_MEDIANS, NCCL's repeats). Imports no CuPy."""
from __future__ import annotations

from statistics import median

from ..model.interval import SOURCES

MAX_RATIOS = 64        # order statistics kept a source (evenly spaced ranks of the pooled ratios)
ROUND_MEDIANS = 5      # host MPI calls a group, its median one ratio


def ratios(values) -> list[float]:
    """Each value over the values' median (none where the median is 0)."""
    values = [float(v) for v in values]
    m = median(values) if values else 0.0
    return [v / m for v in values] if m > 0 else []


def chunk_medians(values, size: int) -> list[float]:
    """The medians of consecutive chunks of `size` values (a last, shorter one dropped)."""
    return [median(values[i:i + size]) for i in range(0, len(values) - size + 1, size)]


def spread_table(collected: dict, sources=SOURCES) -> list[dict]:
    """The machine file's `spread` entries {source, ratios} of `sources` with ratios (sorted, thinned to
    MAX_RATIOS evenly spaced order statistics, 4 decimals)."""
    out = []
    for source in sources:
        pooled = sorted(r for r in collected.get(source, ()) if r > 0)
        if len(pooled) < 2:
            continue
        if len(pooled) > MAX_RATIOS:
            step = (len(pooled) - 1) / (MAX_RATIOS - 1)
            pooled = [pooled[round(i * step)] for i in range(MAX_RATIOS)]
        out.append({"source": source, "ratios": [round(r, 4) for r in pooled]})
    return out


def spread_words(table: list[dict]) -> str:
    """A log line: each source's 5th-95th percentile ratio."""
    def q(rs, f):
        return rs[min(len(rs) - 1, round(f * (len(rs) - 1)))]
    return "measured spread (ratio to the median, 5th-95th percentile): " + ", ".join(
        f"{e['source']} {q(e['ratios'], 0.05):.3f}-{q(e['ratios'], 0.95):.3f} (n={len(e['ratios'])})"
        for e in table) if table else "measured spread: none"


def gpu_rounds(cp, net, x, y, rounds: int = 8, calls: int = 10) -> list[float]:
    """The ratios of the step's GPU work (`net` on x, y) queued ahead, `calls` steps a round."""
    from ..gpu.timing import queued_ahead
    from .kernels import one_step
    times: list = []
    with net.stream:
        queued_ahead(cp, lambda: one_step(net, x.T, y.T), calls, reps=rounds, samples=times)
    return ratios(times)
