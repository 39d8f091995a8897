"""NVTX ranges in the `perfmlp` domain: push and pop are no-ops without the `nvtx` package, with
NVTX_DISABLE set, or with no profiler attached (nvtx then hands out a dummy domain)."""
from __future__ import annotations

import os

from ..names import NVTX_RANGES

DOMAIN = "perfmlp"

try:
    if os.environ.get("NVTX_DISABLE"):
        raise ImportError
    import nvtx as _nvtx
    _domain = _nvtx.get_domain(DOMAIN)
    _ENABLED = type(_domain).__name__ != "DummyDomain"
except ImportError:
    _ENABLED = False


def enabled() -> bool:
    return _ENABLED


def push(name: str, payload: int | None = None) -> None:
    if _ENABLED:
        cat = name if name in NVTX_RANGES else None
        _domain.push_range(_domain.get_event_attributes(message=name, category=cat, payload=payload))


def pop() -> None:
    if _ENABLED:
        _domain.pop_range()

