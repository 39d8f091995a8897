"""The asynchronous parameter server's record (`--comm ps-async`): one `update` line per gradient
rank 0 applied; other runs write none. A gradient computed on piece `piece` of batch `batch`
missed `update - read` updates; its staleness (complete steps its parameters lacked) is at most
--staleness. `apply_ms` includes the gradient's copy to the GPU, `reply_ms` the parameters' copy out
and send. With the initial parameters, the data and the configuration, the update lines alone
determine the final parameters (perfmlp/psasync/replay.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from . import fields as F
from .records import _f

_count, _time = F.integer(0), F.number(0)


@dataclass(frozen=True, slots=True)
class Update:
    """`update` line: one gradient the asynchronous parameter server applied."""

    KIND: ClassVar[str] = "update"
    update: int = _f("the update's index, in the order the server applied them", _count)
    worker: int = _f("the rank that computed the gradient", _count)
    epoch: int = _f("what it was computed on: the epoch", _count)
    batch: int = _f("the batch", _count)
    piece: int = _f("the piece of the batch (costs.piece)", _count)
    read: int = _f("updates the parameters it was computed on held", _count)
    staleness: int = _f("complete steps those parameters lacked", _count)
    queue: int = _f("gradients waiting behind this one as it was applied", _count)
    blocked: int = _f("workers kept waiting by the staleness bound", _count)
    t_s: float = _f("when it was applied, seconds since the rank's trace started", _time)
    apply_ms: float = _f("the update's time", _time)
    reply_ms: float = _f("the replies it released", _time)

    def __post_init__(self):
        if self.read > self.update:
            raise F.Bad(f"{self.read}, after its own update {self.update}", "read")


FIELDS = tuple(f.name for f in dataclasses.fields(Update))


def update_record(**values) -> Update:
    """An update line's record; every field of FIELDS, no other."""
    if set(values) != set(FIELDS):
        raise ValueError(f"update record fields {sorted(set(values) ^ set(FIELDS))} missing or unknown")
    return Update(**values)
