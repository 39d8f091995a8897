"""The shared timing primitives (perfmlp/gpu/timing.py): the host-side
ones on any machine with a clock of the test's own, the GPU ones on the
GPU machine."""
import numpy as np
import pytest

from perfmlp.gpu import timing
from perfmlp.gpu.timing import Summary, per_call_s, rounds, spread, summary, wall_s

from conftest import gpu


class FakeClock:
    """time.perf_counter for the test: it moves only when told to."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def tick(self, s):
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", c)
    return c


def test_wall_time_of_one_call_is_what_the_call_took(clock):
    assert wall_s(lambda: clock.tick(0.25)) == 0.25


def test_per_call_time_starts_after_start_and_stops_after_end(clock):
    # start (a barrier: 100 s) is outside the clock; 4 calls of 1 s and an end (a synchronisation) of 2 s
    # inside it: (4 x 1 + 2) / 4 = 1.5 s a call
    t = per_call_s(lambda: clock.tick(1.0), 4, start=lambda: clock.tick(100.0), end=lambda: clock.tick(2.0))
    assert t == pytest.approx(1.5)
    assert per_call_s(lambda: clock.tick(1.0), 4) == pytest.approx(1.0)   # the host's time to issue them


def test_rounds_interleave_the_keys_and_drop_the_warm_up():
    calls = []

    def measure(key):
        def one():
            calls.append(key)
            return len(calls)   # the value: when it was taken
        return one
    out = rounds({"a": measure("a"), "b": measure("b")}, 2, per_round=2, warmup_rounds=1, warmup_calls=1)
    # round 0 (warm-up): a a b b; round 1: a (warm-up call) a a, b (warm-up call) b b; round 2: a a b b
    assert calls == list("aabb" + "aaabbb" + "aabb")
    assert out == {"a": [6, 7, 11, 12], "b": [9, 10, 13, 14]}


def test_rounds_without_warm_up_keep_every_value_in_round_order():
    values = iter(range(100))
    out = rounds({"x": lambda: next(values), "y": lambda: next(values)}, 3)
    assert out == {"x": [0, 2, 4], "y": [1, 3, 5]}   # value i of x and y from the same round


def test_a_summary_holds_the_median_the_range_and_the_spread():
    s = summary([1.2, 1.0, 1.1, 1.15])
    assert s == Summary(4, pytest.approx(1.125), 1.0, 1.2)   # the median of an even count: the middle two's mean
    assert s.spread == pytest.approx(0.2)                   # 1.2 / 1.0 - 1
    assert summary([3.0]).spread == 0.0
    assert spread(0.0, 0.0) == 0.0 and spread(0.0, 1.0) == float("inf")
    with pytest.raises(ValueError, match="no times"):
        summary([])


@gpu
def test_spin_kernel_runs_for_the_time_it_is_sized_for():
    import cupy as cp
    spin, _ = timing.spin_kernels(cp)
    cycles = timing.spin_cycles(cp, 2e-3)
    assert timing.spin_cycles_per_s(cp) > 1e8          # a GPU clock of at least 100 MHz
    t = timing.event_s(cp, lambda: spin((1,), (1,), (cycles,)))
    assert 1.5e-3 < t < 3e-3, t


@gpu
def test_queued_ahead_times_the_gpu_not_the_host():
    import cupy as cp
    _, empty = timing.spin_kernels(cp)
    gpu_s, host_s = timing.queued_ahead(cp, lambda: empty((1,), (1,), ()), 100)
    assert 0 < gpu_s < 20e-6 and 0 < host_s < 1e-3
    cycles = timing.spin_cycles(cp, 50e-6)
    spin, _ = timing.spin_kernels(cp)
    gpu_s, _ = timing.queued_ahead(cp, lambda: spin((1,), (1,), (cycles,)), 20)
    assert 40e-6 < gpu_s < 80e-6, gpu_s   # 20 spins of 50 us each, back to back


class _FakeCupy:
    """What queued_ahead asks of CuPy outside the measurement: the stream."""
    class cuda:
        @staticmethod
        def get_current_stream():
            return type("S", (), {"synchronize": lambda self: None})()


def test_queued_ahead_measures_again_behind_a_longer_spin_where_the_host_stalled(monkeypatch):
    spins = []

    def behind(cp, fn, calls, spin_s, reps):   # the host takes 3 ms to queue the calls the first time
        spins.append(spin_s)
        return [5e-6] * reps, (3e-3 if len(spins) == 1 else 10e-6) / calls
    monkeypatch.setattr(timing, "_behind_spin", behind)
    samples = []
    assert timing.queued_ahead(_FakeCupy, lambda: None, 4, spin_s=0.002, reps=3, samples=samples) == (5e-6, 2.5e-6)
    assert spins == [0.002, 0.008] and samples == [5e-6] * 3   # the stalled measurement is not kept
    # a host that stays slower than the spin each time is an error naming how slow
    monkeypatch.setattr(timing, "_behind_spin", lambda cp, fn, calls, spin_s, reps: ([5e-6], 1.0 / calls))
    with pytest.raises(RuntimeError, match=r"took 1000\.0 ms to queue 4 calls, longer than the 32 ms spin, 3 times"):
        timing.queued_ahead(_FakeCupy, lambda: None, 4, spin_s=0.002)


@gpu
def test_a_copy_is_timed_by_its_kind_of_memory():
    import cupy as cp
    import cupyx
    n = 8 << 20
    d = cp.empty(n, cp.uint8)
    pageable, pinned = np.ones(n, np.uint8), cupyx.empty_pinned(n, np.uint8)
    t_pageable = timing.copy_s(cp, lambda: d.set(pageable), False)
    t_pinned = timing.copy_s(cp, lambda: d.set(pinned), True)
    assert 0 < t_pinned < 0.05 and 0 < t_pageable < 0.5   # 8 MB: well over 160 MB/s either way
    times = timing.host_times(cp, lambda: d.set(pageable), reps=5)
    assert len(times) == 5 and all(t > 0 for t in times)
    assert len(timing.time_ms(cp, lambda: d.fill(0), warmup=1, reps=3)) == 3
