"""A rank file's lines: a record as one JSON line (with its `kind`), and a
line as its record, every field checked (trace/fields.py)."""
from __future__ import annotations

import json
from dataclasses import fields
from enum import Enum
from typing import Mapping

from ..safeio import read_json
from . import fields as F
from .records import LINE_RECORDS, read
from .updates import Update

KINDS = {**LINE_RECORDS, Update.KIND: Update}  # every kind of line a rank file may hold


def _plain(v):
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if getattr(v, "ARRAY", False):
        return [_plain(getattr(v, f.name)) for f in fields(v)]
    if hasattr(v, "__dataclass_fields__"):
        return as_json(v)
    return v


def as_json(rec) -> dict:
    """A record as its JSON object (with `kind` for a rank file's line)."""
    kind = {"kind": rec.KIND} if hasattr(rec, "KIND") else {}
    return {**kind, **{f.name: _plain(getattr(rec, f.name)) for f in fields(rec)}}


def line(rec) -> str:
    """A record as one line of a rank's file."""
    return json.dumps(as_json(rec), separators=(",", ":")) + "\n"


def parse(text: str):
    """One line of a rank's file as its record (F.Bad: what is wrong, by field)."""
    try:
        obj = read_json(text)   # deep nesting: an InputError, a ValueError
    except ValueError as e:
        raise F.Bad(f"not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise F.Bad(f"{F.shown(obj)}, not a JSON object")
    cls = KINDS.get(obj.get("kind"))
    if cls is None:
        raise F.Bad(f"{F.shown(obj.get('kind', F.MISSING))}, not a record kind ({', '.join(KINDS)})", "kind")
    return read(cls, obj)
