"""Typed conversions for values read from YAML files and command-line flags (standard library only): each
returns the value converted or raises a one-line `CheckError` naming it ("batch_size must be an
integer, got 2.5"). A string float() reads is a number too: PyYAML reads `1e-3` as a string."""
from __future__ import annotations

import contextlib
import math
import os
import stat
from typing import Any, Iterable


class CheckError(ValueError):
    """A value of the wrong kind or out of range (one-line message)."""


def number(name: str, value: Any) -> float:
    """A finite float from an int, a float or a string that spells one."""
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError
        converted = float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise CheckError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(converted):
        raise CheckError(f"{name} must be finite, got {value!r}")
    return converted


def integer(name: str, value: Any) -> int:
    """An int, from an int or a whole number written any way (`3200`, `6e4`, `1_000`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value.strip())
    with contextlib.suppress(CheckError):   # a bool, a fraction, not a number: the one error below
        if not isinstance(value, bool) and (converted := number(name, value)).is_integer():
            return int(converted)
    raise CheckError(f"{name} must be an integer, got {value!r}")


def positive(name: str, value: int | float) -> int | float:
    if value <= 0:
        raise CheckError(f"{name} must be positive, got {value!r}")
    return value


def non_negative(name: str, value: int | float) -> int | float:
    if value < 0:
        raise CheckError(f"{name} must not be negative, got {value!r}")
    return value


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise CheckError(f"{name} must be true or false, got {value!r}")
    return value


def string(name: str, value: Any, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise CheckError(f"{name} must be a string, got {value!r}")
    if non_empty and not value.strip():
        raise CheckError(f"{name} must be a non-empty string")
    return value


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    options = tuple(options)
    if value not in options:
        raise CheckError(f"{name} must be one of {', '.join(options)}, got {value!r}")
    return value


def _unique_key_loader():
    """yaml.SafeLoader (libyaml's where present) refusing a key written twice (PyYAML keeps the last)."""
    import yaml

    class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: construct_mapping's own error follows
                    break
                if duplicate:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


class _DuplicateKey(Exception):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


def load_yaml_text(text: str, source) -> Any:
    """The data in YAML `text` (safe loading, every key once); a CheckError naming `source` otherwise."""
    import yaml

    from . import safeio
    try:
        return safeio.load_yaml(text, _unique_key_loader())  # a SafeLoader: no Python objects; bounded
    except safeio.InputError as e:
        raise CheckError(f"{source}: {e}") from None
    except _DuplicateKey as e:
        raise CheckError(f"{source}: key {e.key!r} appears twice (again at line {e.line})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise CheckError(f"{source}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")) from None


def read_text(source, what: str) -> str:
    """The UTF-8 text of a regular file (a path or a shipped Traversable; a FIFO, device or folder is
    refused before it is opened); a CheckError naming it otherwise."""
    if isinstance(source, str):
        from pathlib import Path
        source = Path(source)
    if isinstance(source, os.PathLike):
        try:
            mode = os.stat(source).st_mode
        except OSError as e:
            raise CheckError(f"cannot read {what} {source}: {e.strerror}") from None
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise CheckError(f"{what} {source}: {kind}")
    try:
        if str(getattr(source, "name", source)).endswith(".gz"):   # a committed file kept small
            return _gunzip(source.read_bytes(), source).decode("utf-8")
        return source.read_text(encoding="utf-8")
    except OSError as e:
        raise CheckError(f"cannot read {what} {source}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CheckError(f"{source}: not a UTF-8 text file") from None


MAX_GUNZIPPED = 64 << 20   # a text file read from a .gz: larger is refused, not read whole


def _gunzip(data: bytes, source) -> bytes:
    import zlib
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, MAX_GUNZIPPED + 1)
    except zlib.error as e:
        raise CheckError(f"{source}: not a readable .gz ({e})") from None
    if len(out) > MAX_GUNZIPPED:
        raise CheckError(f"{source}: more than {MAX_GUNZIPPED >> 20} MB once unpacked")
    return out


def read_yaml(source, what: str) -> Any:
    """The data in a YAML file (a path or a shipped Traversable; `what`: its kind)."""
    return load_yaml_text(read_text(source, what), source)
