"""Checks of one field of a trace record as read from disk: a checker takes the raw value (MISSING
where the key is absent) and returns it converted, or raises `Bad` saying what is wrong; the
reader adds the file, line and field (`rank-0.jsonl:7: t_ms.forward: 'abc', not [offset ms,
duration ms]`). A record class lists its fields' checkers in their metadata (trace/records.py)."""
from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, Callable

MISSING = object()
Checker = Callable[[Any], Any]


class TraceError(ValueError):
    """A run folder that cannot be read: one line naming the file, line and field."""


class Bad(ValueError):
    """A field that is not what the format says: `field` (dotted path) and why."""

    def __init__(self, why: str, field: str = ""):
        super().__init__(why)
        self.why, self.field = why, field

    def at(self, name: str) -> "Bad":
        """The same problem one level up: `name.field`."""
        return Bad(self.why, f"{name}.{self.field}" if self.field else name)

    def __str__(self) -> str:
        return f"{self.field}: {self.why}" if self.field else self.why


def shown(v: Any) -> str:
    """A value as a message shows it: repr, cut to 40 characters."""
    if v is MISSING:
        return "missing"
    s = "NaN" if isinstance(v, float) and math.isnan(v) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _bad(v: Any, want: str) -> Bad:
    return Bad("missing" if v is MISSING else f"{shown(v)}, {want}")


def _checker(test: Callable[[Any], bool], want: str, convert: Callable | None = None) -> Checker:
    """A checker: the value (converted by `convert`) where `test` passes it, else Bad saying `want`."""
    def check(v):
        if not test(v):
            raise _bad(v, want)
        return v if convert is None else convert(v)
    return check


def integer(lo: int | None = 0) -> Checker:
    """An integer (not a bool), at least `lo` (None: any)."""
    return _checker(lambda v: isinstance(v, int) and not isinstance(v, bool) and (lo is None or v >= lo),
                    "not an integer" if lo is None else f"not an integer >= {lo}")


def number(lo: float | None = None) -> Checker:
    """A finite number (an integer is taken as a float), at least `lo`."""
    return _checker(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    and (lo is None or v >= lo), "not a finite number" + ("" if lo is None else f" >= {lo:g}"), float)


def choice(*names: str) -> Checker:
    return _checker(names.__contains__, "not one of " + ", ".join(names))


string = _checker(lambda v: isinstance(v, str), "not a string")
boolean = _checker(lambda v: isinstance(v, bool), "not true or false")
mapping = _checker(lambda v: isinstance(v, dict), "not an object", MappingProxyType)  # a JSON object, read-only
string_list = _checker(lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "not a list of strings",
                       tuple)


def optional(inner: Checker, default=None, null: bool = True) -> Checker:
    """`inner`, or `default` where the key is absent or (`null`) the value null."""
    def check(v):
        return default if v is MISSING or (null and v is None) else inner(v)
    return check


def _at(name, check: Checker, v):
    """check(v), its Bad one level down (`name`)."""
    try:
        return check(v)
    except Bad as e:
        raise e.at(str(name)) from None


def list_of(inner: Checker) -> Checker:
    def check(v):
        if not isinstance(v, list):
            raise _bad(v, "not a list")
        return tuple(_at(i, inner, x) for i, x in enumerate(v))
    return check


def keyed(key: Checker, value: Checker) -> Checker:
    """A JSON object whose keys pass `key` (converted) and values `value`, read-only."""
    def check(v):
        if not isinstance(v, dict):
            raise _bad(v, "not an object")
        out = {}
        for k, x in v.items():
            try:
                kk = key(k)
            except Bad as e:
                raise Bad(f"key {e.why}") from None
            out[kk] = _at(k, value, x)
        return MappingProxyType(out)
    return check


def pair(first: Checker, second: Checker, want: str) -> Checker:
    """A two-element list, as a tuple."""
    def check(v):
        if not isinstance(v, list) or len(v) != 2:
            raise _bad(v, f"not {want}")
        try:
            return first(v[0]), second(v[1])
        except Bad:
            raise _bad(v, f"not {want}") from None
    return check


def checked(checks: dict, obj: dict) -> dict:
    """key -> its checker's value of `obj[key]` (MISSING where absent); Bad names the key."""
    return {key: _at(key, check, obj.get(key, MISSING)) for key, check in checks.items()}


def fields_of(cls, obj: Any, skip: tuple = ()) -> dict:
    """The checked values of the dataclass `cls`'s fields (their metadata's `check`) in the JSON object `obj`."""
    if not isinstance(obj, dict):
        raise _bad(obj, "not a JSON object")
    return checked({f.name: f.metadata["check"] for f in dataclasses.fields(cls)
                    if f.name not in skip and f.metadata.get("check")}, obj)
