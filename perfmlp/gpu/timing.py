"""CUDA-event timing for benchmarks and the calibration."""
from __future__ import annotations


def time_ms(cupy, fn, warmup: int = 5, reps: int = 30) -> list[float]:
    """Per-call device times (ms) of fn(), CUDA events around each call and
    no synchronisation between calls (so host-bound calls show their gaps);
    one synchronisation at the end."""
    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    evs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for a, b in evs:
        a.record()
        fn()
        b.record()
    evs[-1][1].synchronize()
    return [cupy.cuda.get_elapsed_time(a, b) for a, b in evs]
