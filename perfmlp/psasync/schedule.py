"""Which piece of which batch a worker computes next, and when: the
stale-synchronous rule of the asynchronous parameter server (pure: no MPI).

Global step k is batch k of the run, cut into W pieces as a data-parallel
run on W ranks cuts it (costs.piece). A step is *complete* once all W of
its gradients are applied; K counts the unbroken prefix of complete steps.
Pieces are handed out in order, (0, 0), (0, 1), ..., (1, 0), ..., to
whichever worker asks next, a piece of step k only once K >= k - S. So its
gradient is computed on parameters holding every update of steps < k - S
(staleness k - K <= S), and with S = 0 exactly on the parameters after
step k - 1: synchronous SGD.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    step: int    # global step: epoch * batches_per_epoch + batch
    index: int   # which of the step's W pieces


class Schedule:
    """The pieces of `steps` steps of `workers` pieces each, under staleness S."""

    def __init__(self, steps: int, workers: int, staleness: int):
        if steps < 0 or workers < 1 or staleness < 0:
            raise ValueError(f"steps {steps}, workers {workers}, staleness {staleness}")
        self.steps, self.workers, self.staleness = steps, workers, staleness
        self.next = 0                      # flat index step * W + index of the next piece to hand out
        self.complete = 0                  # K: steps 0..K-1 all applied
        self._applied = [0] * steps        # pieces applied per step

    @property
    def exhausted(self) -> bool:
        """Every piece has been handed out."""
        return self.next >= self.steps * self.workers

    def ready(self) -> bool:
        """The next piece may be handed out now (the staleness bound holds)."""
        return not self.exhausted and self.next // self.workers - self.staleness <= self.complete

    def hand_out(self) -> Piece:
        if not self.ready():
            raise RuntimeError("no piece may be handed out now")
        p = Piece(*divmod(self.next, self.workers))
        self.next += 1
        return p

    def staleness_of(self, piece: Piece) -> int:
        """Complete steps the piece's parameters lack at this moment (k - K)."""
        return max(0, piece.step - self.complete)

    def applied(self, piece: Piece) -> range:
        """Record the piece's gradient as applied; the steps it completed."""
        self._applied[piece.step] += 1
        if self._applied[piece.step] > self.workers:
            raise RuntimeError(f"step {piece.step}: more than {self.workers} pieces applied")
        start = self.complete
        while self.complete < self.steps and self._applied[self.complete] == self.workers:
            self.complete += 1
        return range(start, self.complete)

    def first_of_step(self, piece: Piece) -> bool:
        """Whether no other piece of its step has been applied yet (the
        step's regularisation term goes with this one)."""
        return self._applied[piece.step] == 0
