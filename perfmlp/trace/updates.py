"""The asynchronous parameter server's record: one `update` line per
gradient applied (`--comm ps-async`, written by rank 0, the server; an
optional kind: other runs write none, readers of other kinds skip it).

Fields, all numbers:
- update:    the update's index, 0, 1, ... in the order the server applied
             them (the order gradients arrived)
- worker:    the rank that computed the gradient
- epoch, batch, piece: what it was computed on: piece `piece` of the W
             pieces of batch `batch` of epoch `epoch` (costs.piece)
- read:      updates the parameters it was computed on held (the server's
             update count when it handed the piece out); `update - read`
             is the number of updates it missed (its delay)
- staleness: complete steps those parameters lacked, k - K (<= --staleness)
- queue:     gradients received and waiting behind this one as it was applied
- blocked:   workers kept waiting by the staleness bound once it was applied
- t_s:       when it was applied, seconds since the rank's trace started
- apply_ms:  the update's time (with the gradient's copy to the GPU there)
- reply_ms:  the replies it released (parameters copied out and sent)

With the initial parameters, the data and the configuration, the update
lines alone determine the final parameters (perfmlp/psasync/replay.py).
"""
from __future__ import annotations

KIND = "update"
INT_FIELDS = ("update", "worker", "epoch", "batch", "piece", "read", "staleness", "queue", "blocked")
TIME_FIELDS = ("t_s", "apply_ms", "reply_ms")
FIELDS = INT_FIELDS + TIME_FIELDS


def update_record(**values) -> dict:
    """An update line's record; every field of FIELDS, no other."""
    if set(values) != set(FIELDS):
        raise ValueError(f"update record fields {sorted(set(values) ^ set(FIELDS))} missing or unknown")
    return {"kind": KIND, **values}


def check_update(rec: dict) -> None:
    """ValueError naming the first field of an update line that is missing or wrong."""
    for k in INT_FIELDS:
        v = rec.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"update line: {k} is {v!r}, not a non-negative integer")
    for k in TIME_FIELDS:
        v = rec.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
            raise ValueError(f"update line: {k} is {v!r}, not a non-negative number")
    if rec["read"] > rec["update"]:
        raise ValueError(f"update line: read {rec['read']} after its own update {rec['update']}")
