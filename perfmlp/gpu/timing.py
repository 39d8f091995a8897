"""The timing primitives the calibration (perfmlp.calibrate) and the benchmarks share. GPU time is taken
between CUDA events (`time_ms`, `event_s`, and `queued_ahead`: calls queued behind a spin kernel, so
that the host's dispatch is not in it); host time by the wall clock (`wall_s`, `host_times`,
`per_call_s`); `copy_s` times a copy either way by its memory; `rounds` interleaves measurements so
that the host's drift over seconds falls on every key alike. Nothing here imports CuPy: a function
that needs it takes the module (`cp`)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median
from typing import Callable, Hashable, Mapping, Sequence, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


# ---- summaries ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """Repeated times of one thing."""
    n: int
    median: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        """max / min - 1: 0.1 when the slowest repeat took 10% longer than the fastest."""
        return spread(self.min, self.max)


def spread(lo: float, hi: float) -> float:
    """hi / lo - 1 (inf when lo is 0 and hi is not)."""
    if lo == hi:
        return 0.0
    return hi / lo - 1 if lo > 0 else float("inf")


def summary(times: Sequence[float]) -> Summary:
    if not times:
        raise ValueError("summary of no times")
    return Summary(len(times), float(median(times)), float(min(times)), float(max(times)))


# ---- host wall time -----------------------------------------------------------------------------

def wall_s(fn: Callable[[], object]) -> float:
    """Host wall seconds of one fn()."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_call_s(fn: Callable[[], object], calls: int, start: Callable[[], object] | None = None,
               end: Callable[[], object] | None = None) -> float:
    """Host wall seconds per call of `calls` fn() back to back, from after start() (a barrier, a
    synchronisation) to after end() (a device synchronisation; none: the host's time to issue them)."""
    if start is not None:
        start()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if end is not None:
        end()
    return (time.perf_counter() - t0) / calls


def rounds(measures: Mapping[K, Callable[[], float]], n: int, per_round: int = 1, warmup_rounds: int = 0,
           warmup_calls: int = 0) -> dict[K, list[float]]:
    """Interleaved measurements: `warmup_rounds` + n rounds, each calling every measure in turn, `per_round`
    times each; the warm-up rounds are dropped, and so are `warmup_calls` extra calls of each measure at
    the start of the first kept round. Each key's kept values in the order taken."""
    out: dict = {key: [] for key in measures}
    for r in range(warmup_rounds + n):
        extra = warmup_calls if r == warmup_rounds else 0
        for key, measure in measures.items():
            for i in range(extra + per_round):
                value = measure()
                if r >= warmup_rounds and i >= extra:
                    out[key].append(value)
    return out


# ---- GPU time -----------------------------------------------------------------------------------

def time_ms(cupy, fn, warmup: int = 5, reps: int = 30) -> list[float]:
    """Per-call device times (ms) of fn(), CUDA events around each call, no synchronisation between calls."""
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


def event_s(cp, fn, events=None) -> float:
    """GPU seconds of one fn() between two CUDA events on the current stream (synchronised); `events`: a pair."""
    a, b = events or (cp.cuda.Event(), cp.cuda.Event())
    a.record()
    fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3


def copy_s(cp, copy, pinned: bool, events=None) -> float:
    """Seconds of one host <-> device copy() on the current stream: a pinned one's GPU time, a pageable
    one's host wall time (it blocks the host); `events`: a pair to reuse."""
    t0 = time.perf_counter()
    gpu_s = event_s(cp, copy, events)
    return gpu_s if pinned else time.perf_counter() - t0


def host_times(cp, fn, reps: int, warmup: int = 3) -> list[float]:
    """Host wall seconds of each of `reps` fn(), each with the stream's synchronisation, after `warmup`."""
    s = cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    s.synchronize()
    return [wall_s(lambda: (fn(), s.synchronize())) for _ in range(reps)]


def queued_ahead(cp, fn, calls: int, spin_s: float = 0.02, reps: int = 5,
                 samples: list | None = None, tries: int = 3) -> tuple[float, float]:
    """(GPU seconds per call, host seconds per call) of `calls` back-to-back fn() queued behind a spin
    kernel, so that the events around them time the GPU alone (median of reps). Where the host took longer
    than 0.8 x spin_s to queue them (host time would leak into the GPU time) it is made again behind a spin
    four times as long, `tries` times at most, then an error. `samples` receives each rep's GPU seconds."""
    s = cp.cuda.get_current_stream()
    fn()
    s.synchronize()
    for _ in range(tries):
        gpu, h = _behind_spin(cp, fn, calls, spin_s, reps)
        if h * calls <= 0.8 * spin_s:
            if samples is not None:
                samples.extend(gpu)
            return median(gpu), h
        spin_s *= 4
    raise RuntimeError(f"the host took {h * calls * 1e3:.1f} ms to queue {calls} calls, longer than the "
                       f"{spin_s / 4 * 1e3:.0f} ms spin, {tries} times: the GPU time would include host time")


def _behind_spin(cp, fn, calls: int, spin_s: float, reps: int) -> tuple[list, float]:
    """Each rep's GPU seconds per call of `calls` fn() behind a spin of spin_s; the host's median per call."""
    spin, _ = spin_kernels(cp)
    cycles = spin_cycles(cp, spin_s)
    gpu, host = [], []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        spin((1,), (1,), (cycles,))
        a.record()
        host.append(per_call_s(fn, calls))
        b.record()
        b.synchronize()
        gpu.append(cp.cuda.get_elapsed_time(a, b) * 1e-3 / calls)
    return gpu, median(host)


# ---- the spin kernel ----------------------------------------------------------------------------

SPIN_SRC = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void empty() { }
"""
_spin_modules: dict = {}
_cycles_per_s: dict = {}


def spin_kernels(cp):
    """(spin(cycles), empty()) RawKernels: a thread spinning for `cycles` of clock64(), and one doing nothing."""
    key = cp.cuda.Device().id
    if key not in _spin_modules:
        mod = cp.RawModule(code=SPIN_SRC)
        _spin_modules[key] = (mod.get_function("spin"), mod.get_function("empty"))
    return _spin_modules[key]


def spin_cycles_per_s(cp) -> float:
    """clock64() cycles per second of this device, from a timed spin (CUDA 13 has no clock rate property)."""
    key = cp.cuda.Device().id
    if key not in _cycles_per_s:
        spin, _ = spin_kernels(cp)
        n = np.int64(20_000_000)
        spin((1,), (1,), (np.int64(1000),))
        _cycles_per_s[key] = float(n) / event_s(cp, lambda: spin((1,), (1,), (n,)))
    return _cycles_per_s[key]


def spin_cycles(cp, seconds: float) -> np.int64:
    """The spin kernel's argument for about `seconds` of GPU time."""
    return np.int64(seconds * spin_cycles_per_s(cp))
