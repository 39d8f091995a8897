"""The steady window of a run's batches and its time per batch: the trainer's definition
(format.warmup_batches, as each epoch line records it), applied to what the ranks wrote."""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from .format import WARMUP_BATCHES, warmup_batches

STEADY_RULE = (f"the first {WARMUP_BATCHES} batches of every epoch of more than {WARMUP_BATCHES} are left out "
               "(the run's first compiles kernels, allocates and captures a CUDA graph, the next two still carry "
               "one-off costs; later epochs start after the held-out evaluation), a shorter epoch is kept whole "
               "(trace.format.warmup_batches, as the trainer's epoch lines record it in `warmup_batches`), and "
               "batches some rank did not finish are left out; a batch timed on the host clock takes its epoch's "
               "synchronised wall time per batch over that window, the figure the trainer prints")


def steady_window(ranks: Mapping) -> dict:
    """(epoch, batch) -> {rank: Batch} of the steady batches (STEADY_RULE); `ranks`: rank -> RankTrace."""
    every: dict = {}
    for r, rt in ranks.items():
        for b in rt.batches:
            every.setdefault(b.key, {})[r] = b
    warmup = {e: warmup_batches(n) for e, n in Counter(e for e, _ in every).items()}
    for rt in ranks.values():
        for ep in rt.epochs:
            if ep.warmup_batches is not None and ep.epoch in warmup:
                warmup[ep.epoch] = ep.warmup_batches   # what the trainer left out
    return {k: v for k, v in every.items() if len(v) == len(ranks) and k[1] >= warmup[k[0]]}


def epoch_ms(ranks: Mapping) -> dict[int, float]:
    """epoch -> synchronised wall ms per batch, the slowest rank's: over the steady window, else the whole epoch."""
    out: dict = {}
    for rt in ranks.values():
        nbatches: dict = {}
        for b in rt.batches:
            nbatches[b.epoch] = max(nbatches.get(b.epoch, 0), b.batch + 1)
        for e in rt.epochs:
            ms = e.steady_ms_per_batch
            if not ms and e.seconds and nbatches.get(e.epoch):
                ms = 1e3 * e.seconds / nbatches[e.epoch]
            if ms:
                out[e.epoch] = max(out.get(e.epoch, 0.0), ms)
    return out
