"""The input pipeline's host side (perfmlp/gpu/prefetch.py's Pipeline) on
HostSlots: no GPU. What the trainer's loop hands the step, the order of the
calls that keep a slot from being overwritten while a step reads it, the
chunks, and faults. The same pipeline on CUDA: tests/test_gpu_precision.py."""
import threading

import numpy as np
import pytest

from perfmlp.errors import RunFailure
from perfmlp.gpu.prefetch import LOOKAHEAD, Pipeline

N, B, D, C = 230, 50, 7, 3   # 5 batches an epoch: 50 50 50 50 30


class Source:
    """DeviceBatches' pageable part: xh, yh, reordered from the first order."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.x0 = rng.random((N, D)).astype(np.float32)
        self.y0 = rng.random((N, C)).astype(np.float32)
        self.xh, self.yh = self.x0, self.y0

    def reorder(self, order):
        self.xh, self.yh = self.x0[order], self.y0[order]


class HostSlots:
    """CudaSlots' interface in host memory, nothing asynchronous: a copy is np.copyto at once.
    `copy_rows` may be replaced to inject a fault."""

    def __init__(self, n: int, xdtype, ydtype, D: int, C: int, slots: int = LOOKAHEAD + 1):
        self.slots = slots
        self.xd = [np.zeros((n, D), xdtype) for _ in range(slots)]
        self.yd = [np.zeros((n, C), ydtype) for _ in range(slots)]
        self.xs = [np.zeros((n, D), xdtype) for _ in range(slots)]
        self.ys = [np.zeros((n, C), ydtype) for _ in range(slots)]
        self.calls: list = []   # (what, slot) of the loop thread's calls, in order

    def bind_thread(self) -> None:
        pass

    def staging(self, slot: int, part: int):
        return (self.xs, self.ys)[part][slot]

    def copying(self, slot: int) -> bool:
        return False

    def wait_copied(self, slot: int) -> None:
        pass

    def wait_consumed(self, slot: int) -> None:
        self.calls.append(("wait_consumed", slot))

    def copy_rows(self, slot: int, part: int, r0: int, host) -> None:
        np.copyto((self.xd, self.yd)[part][slot][r0:r0 + len(host)], host)

    def ready(self, slot: int) -> None:
        self.calls.append(("ready", slot))

    def release(self, slot: int) -> None:
        self.calls.append(("release", slot))

    def sync(self) -> None:
        self.calls.append(("sync", None))


def next_piece(lo, hi):
    start = (lo // B + 1) * B
    start = 0 if start >= N else start
    return start, min(start + B, N)


def pipeline(src, staged=True, lookahead=2, threads=3, min_chunk_bytes=0, dev=None):
    dev = dev or HostSlots(B, np.float32, np.float32, D, C, lookahead + 1)
    return Pipeline(dev, src, next_piece, staged, threads, lookahead, min_chunk_bytes=min_chunk_bytes)


def epochs(pipe, src, n=3, shuffle_at=(2,)):
    """Every piece handed out, against the source's rows, over n epochs."""
    rng = np.random.default_rng(1)
    for epoch in range(n):
        if epoch in shuffle_at:
            pipe.reset()   # as DeviceBatches.reorder: what was prefetched reads the old order
            src.reorder(rng.permutation(N))
        for lo in range(0, N, B):
            hi = min(lo + B, N)
            s = pipe.get(lo, hi)
            assert np.array_equal(pipe.dev.xd[s][:hi - lo], src.xh[lo:hi]), (epoch, lo)
            assert np.array_equal(pipe.dev.yd[s][:hi - lo], src.yh[lo:hi]), (epoch, lo)


@pytest.mark.parametrize("staged", [True, False])
@pytest.mark.parametrize("lookahead", [1, 2])
def test_each_piece_is_the_sources_rows_over_epochs_a_shuffle_and_the_short_last_batch(staged, lookahead):
    src = Source()
    pipe = pipeline(src, staged, lookahead)
    try:
        epochs(pipe, src)
        if staged:   # 15 pieces taken (3 epochs of 5), each staged once: 3 * 230 rows of (7 + 3) * 4 bytes
            assert pipe.staged_pieces == 15 and pipe.staged_bytes == 3 * N * (D + C) * 4
            assert pipe.stage_s > 0
    finally:
        pipe.close()


def test_a_slot_is_started_again_only_once_the_step_that_read_it_was_queued():
    # each slot goes free -> started (its copy stream waits for `consumed`) -> handed out
    # (`ready`: the compute stream waits for `copied`) -> released (`consumed` recorded) -> free
    src = Source()
    pipe = pipeline(src, lookahead=2)
    try:
        epochs(pipe, src)
    finally:
        pipe.close()
    # a reset drops the pieces started (`sync`: their copies are done), not the one held
    state = {s: "free" for s in range(3)}
    step = {"wait_consumed": ("free", "started"), "ready": ("started", "held"), "release": ("held", "free")}
    for what, slot in pipe.dev.calls:
        if what == "sync":
            state = {s: "free" if v == "started" else v for s, v in state.items()}
            continue
        before, after = step[what]
        assert state[slot] == before, (what, slot, state)
        state[slot] = after
    held = [what for what, _ in pipe.dev.calls].count("ready")
    assert held == 15   # one hand-over per piece taken


def test_pieces_are_queued_ahead_and_a_piece_asked_out_of_turn_is_staged_then():
    src = Source()
    pipe = pipeline(src, lookahead=2)
    try:
        pipe.get(0, 50)
        assert [(p.lo, p.hi) for p in pipe.ahead] == [(50, 100), (100, 150)]
        s = pipe.get(200, 230)   # not the next piece: what was ahead is dropped
        assert np.array_equal(pipe.dev.xd[s][:30], src.xh[200:230])
        assert [(p.lo, p.hi) for p in pipe.ahead] == [(0, 50), (50, 100)]   # the next epoch's first
    finally:
        pipe.close()


def test_settle_waits_for_the_pieces_ahead_and_keeps_them():
    src = Source()
    pipe = pipeline(src, lookahead=2)
    try:
        pipe.get(0, 50)
        pipe.settle()
        assert all(t.done() for p in pipe.ahead for t in p.tasks) and len(pipe.ahead) == 2
        syncs = pipe.dev.calls.count(("sync", None))
        s = pipe.get(50, 100)   # the piece kept: handed out without a reset (which would sync)
        assert pipe.dev.calls.count(("sync", None)) == syncs
        assert np.array_equal(pipe.dev.xd[s][:50], src.xh[50:100])
    finally:
        pipe.close()


@pytest.mark.parametrize("threads, min_chunk_bytes, want", [
    (3, 0, [(0, 16), (16, 33), (33, 50)]),   # 50 rows over 3 tasks: cuts at 50 * 1 // 3 = 16, 50 * 2 // 3 = 33
    (3, 600, [(0, 25), (25, 50)]),           # 50 samples of 7 * 4 bytes = 1400 bytes: 2 chunks of at least 600
    (3, 1 << 18, [(0, 50)]),                 # under the least chunk: one task
])
def test_a_pieces_samples_are_cut_into_contiguous_chunks(threads, min_chunk_bytes, want):
    pipe = pipeline(Source(), threads=threads, min_chunk_bytes=min_chunk_bytes)
    try:
        assert pipe._chunks(50) == want
    finally:
        pipe.close()


def _in_thread(fn):
    """fn's exception, or None; fails if fn is still running after 20 s (a hang)."""
    out = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as e:   # noqa: BLE001 - handed to the test
            out.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the pipeline hung"
    return out[0]


def failing(slot_that_fails, error):
    """HostSlots whose copies into one slot raise: the first epoch's pieces
    take slots 0, 1, 2, 0, 1 in turn, so slot 2 fails piece 100..150 first."""
    dev = HostSlots(B, np.float32, np.float32, D, C)
    copy = dev.copy_rows

    def copy_rows(slot, *rows):
        if slot == slot_that_fails:
            raise error
        copy(slot, *rows)
    dev.copy_rows = copy_rows
    return dev


def test_a_staging_tasks_failure_is_one_run_failure_naming_the_rows_and_nothing_hangs():
    pipe = pipeline(Source(), dev=failing(2, OSError("device lost")))

    def take():
        for lo in range(0, N, B):
            pipe.get(lo, min(lo + B, N))
    e = _in_thread(take)
    assert isinstance(e, RunFailure)
    assert str(e) == "staging samples 100..150 into pinned memory failed (OSError: device lost)"
    assert not pipe.ahead   # the pieces queued behind it ended and were dropped
    assert _in_thread(pipe.close) is None


def test_a_failure_in_a_dropped_piece_is_raised_when_it_is_dropped():
    pipe = pipeline(Source(), dev=failing(2, ValueError("bad rows")))
    pipe.get(0, 50)   # 50..100 and 100..150 queued; 100..150 fails
    e = _in_thread(lambda: pipe.get(200, 230))   # out of turn: what was ahead is dropped
    assert isinstance(e, RunFailure) and str(e).startswith("staging samples 100..150 ")
    assert _in_thread(pipe.close) is None


def test_too_few_slots_for_the_lookahead_is_refused():
    with pytest.raises(ValueError, match="3 slots for a lookahead of 3"):
        Pipeline(HostSlots(B, np.float32, np.float32, D, C, 3), Source(), next_piece, True, 2, 3)


def test_close_ends_the_staging_threads_after_the_pieces_ahead():
    import threading
    src = Source()
    pipe = pipeline(src, threads=3)
    pipe.get(0, B)                        # pieces queued ahead, staged by the pool's threads
    assert any(t.name.startswith("perfmlp-stage") for t in threading.enumerate())
    pipe.close()
    assert not pipe.ahead
    assert not [t for t in threading.enumerate() if t.name.startswith("perfmlp-stage") and t.is_alive()]
