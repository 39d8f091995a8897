"""NVTX ranges in the `perfmlp` domain, free when NVTX is absent or disabled.

`nvtx_range(name, payload=None)` works as a context manager and as a
decorator. With the PyPI `nvtx` package missing, NVTX_DISABLE set, or no
profiler attached (nvtx then hands out a dummy domain), push and pop are
no-ops.
"""
from __future__ import annotations

import contextlib
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
    _nvtx = None
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


class nvtx_range(contextlib.ContextDecorator):
    """with nvtx_range("forward", payload=k): ...  or  @nvtx_range("setup")"""

    def __init__(self, name: str, payload: int | None = None):
        self.name, self.payload = name, payload

    def __enter__(self):
        push(self.name, self.payload)
        return self

    def __exit__(self, *exc):
        pop()
        return False
