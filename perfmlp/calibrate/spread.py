"""The spread of the calibration's own repeated measurements, written to the
machine file as `spread` (the model's prediction intervals:
perfmlp/model/interval.py).

Each source of figures keeps the ratios of its repeated measurements to
their median, at the granularity a run's median time per batch varies
over (a round's median, not a single call's), pooled over that source's
points:

- host: the host's time per step of the eager and graph steps, every
  round of both dispatch measurements (first and last: the host's drift
  over the calibration is in it), each over the median of all of them
  (host.host_dispatch);
- pageable_copy, pinned_copy: each round's median of every copy point (3
  rounds of 8 calls, interleaved over all points: copies.host_copies);
- gpu: the step's GPU work queued ahead, one time a round (gpu_rounds);
- collective: host MPI's calls in groups of 5, each group's median, and
  NCCL's repeats queued ahead (collectives.collective_times).

Nothing here imports CuPy at import time.
"""
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
    """The machine file's `spread` entries: for each of `sources` with ratios,
    {source, ratios} (sorted, thinned to MAX_RATIOS evenly spaced order
    statistics, 4 decimals)."""
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
    """The step's GPU work (forward, loss, backward, update of `net` on x,
    y) queued ahead behind a spin kernel, `calls` steps a round, one GPU
    time a round: its ratios (timing.queued_ahead's repeats)."""
    from ..gpu.timing import queued_ahead

    def one_step():
        net.forward(x.T)
        net.loss(y.T)
        net.backward()
        net.update()
    times: list = []
    with net.stream:
        queued_ahead(cp, one_step, calls, reps=rounds, samples=times)
    return ratios(times)
