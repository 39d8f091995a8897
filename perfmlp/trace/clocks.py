"""A rank's timestamps on the run's one time axis (seconds since rank 0's tracer started: host phase
spans, CUPTI activity spans) and how far the clocks can be trusted; the conversion is
activity.to_run_s."""
from __future__ import annotations

from .. import names as N
from .activity import to_run_s

__all__ = ["to_run_s", "host_span_s", "host_phase_spans_s", "host_phases_ns", "rank_segments", "clock_quality_us"]


def host_span_s(clock, batch, off_ms: float, dur_ms: float) -> tuple[float, float]:
    """(start, end) s on the run's axis of a host-timed span `off_ms` into the batch."""
    base = clock.host_start_ns + batch.t0_s * 1e9
    return to_run_s(clock, base + off_ms * 1e6, False), to_run_s(clock, base + (off_ms + dur_ms) * 1e6, False)


def host_phase_spans_s(batch, clock) -> list[tuple[str, float, float]]:
    """The host's phases of a batch as (phase, start s, end s) (its host times where the GPU timed it)."""
    return [(p, *host_span_s(clock, batch, off, d)) for p, (off, d) in (batch.t_ms_host or batch.t_ms).items()]


def host_phases_ns(batch, clock) -> dict:
    """The host's phase spans of a batch on the CUPTI clock (ns); {} without a CUPTI offset."""
    if clock is None or clock.cupti_minus_host_ns is None:
        return {}
    base = clock.host_start_ns + clock.cupti_minus_host_ns + batch.t0_s * 1e9
    return {p: (base + off * 1e6, base + (off + dur) * 1e6)
            for p, (off, dur) in (batch.t_ms_host or batch.t_ms).items()}


def rank_segments(batch, clock) -> list[tuple[str, float, float]]:
    """A batch's phases as (phase, start s, end s) on the run's axis: GPU spans where the GPU timed them, else host."""
    if batch.clock == N.CUPTI:
        t0 = batch.gpu_t0_ns
        return [(p, to_run_s(clock, t0 + off * 1e6, True), to_run_s(clock, t0 + (off + d) * 1e6, True))
                for p, (off, d) in batch.t_ms.items()]
    return [(p, *host_span_s(clock, batch, off, d)) for p, (off, d) in batch.t_ms.items()]


def clock_quality_us(ranks) -> tuple[float | None, float | None]:
    """(the ranks' alignment error, the largest CUPTI-against-host drift over the run), us, of `ranks` (rank traces)."""
    clocks = [rt.clock for rt in ranks if rt.clock]
    err = max((c.rank0_err_ns + (c.cupti_err_ns or 0)) / 1e3 for c in clocks) if clocks else None
    drift = [(rt.clock_end.cupti_minus_host_ns - rt.clock.cupti_minus_host_ns) / 1e3
             for rt in ranks if rt.clock_end and rt.clock and rt.clock.cupti_minus_host_ns
             is not None and rt.clock_end.cupti_minus_host_ns is not None]
    return err, (max(map(abs, drift)) if drift else None)
