"""Outputs that never replace an input, and inputs read within bounds.

Outputs: a path a command writes must be a regular file or a new name (not
a folder, a FIFO, a device node or a symbolic link, which a rename would
replace) and none of the files the command reads. Lines go out in one write
each, so that two ranks' lines are never glued.

Inputs: JSON nested deeper than MAX_DEPTH and YAML whose aliases expand to
more than MAX_YAML_NODES nodes are refused in one line, before Python's
recursion limit or the memory is reached; a message quotes at most
PREFIX_CHARS characters of any value.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

MAX_DEPTH = 100            # brackets or mappings, nested
MAX_YAML_NODES = 100_000   # nodes of a YAML document, its aliases expanded
PREFIX_CHARS = 60          # of a value, quoted in a message


class InputError(ValueError):
    """An input beyond the bounds (its message names what, not where: the caller adds the file)."""


def prefix(value, n: int = PREFIX_CHARS) -> str:
    """repr(value), cut to n characters with '...' where longer (it is not expanded first when huge)."""
    text = repr(value) if not isinstance(value, (list, dict, tuple)) or _small(value) else \
        f"a {type(value).__name__} of {len(value)} items"
    return text if len(text) <= n else text[:n] + "..."


def key(k) -> str:
    """A mapping's key for a message: a string as it is, anything else as prefix() shows it, both cut short."""
    text = k if isinstance(k, str) else prefix(k)
    return text if len(text) <= PREFIX_CHARS else text[:PREFIX_CHARS] + "..."


def _small(value, budget: int = 200) -> bool:
    stack, seen = [value], 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > budget:
            return False
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return True


def write_line(text: str, stream=None) -> None:
    """`text` and its newline in one write (never an error: a closed or full output is ignored)."""
    stream = stream or sys.stderr
    try:
        stream.flush()
        os.write(stream.fileno(), (text + "\n").encode(getattr(stream, "encoding", None) or "utf-8",
                                                         "backslashreplace"))
    except (OSError, ValueError, AttributeError):
        pass


def check_output(path: str | Path, inputs=(), what: str = "output") -> Path:
    """`path` if a command may write it: a regular file or a new name in an
    existing folder, and none of `inputs` (files or folders the command
    reads: their files are refused too). An InputError naming it otherwise."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(f"{what} {p}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{what} {p}: a symbolic link (name a new file or a regular one)")
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{what} {p}: a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {p}: not a regular file (a FIFO, socket or device is never written)")
    target = p.resolve()
    for source in inputs:
        s = Path(source).resolve()
        if target == s or s in target.parents:
            raise InputError(f"{what} {p}: it would write over {source}, which this command reads")
    return p


def read_json(text: str | bytes):
    """json.loads, with nesting too deep for Python's recursion an InputError, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError("JSON nested too deeply") from None


def load_yaml(text: str, loader_class):
    """The data of one YAML document read by `loader_class` (a SafeLoader),
    refusing nesting deeper than MAX_DEPTH and aliases that expand to more
    than MAX_YAML_NODES nodes (an InputError), before anything is built."""
    if _flow_depth(text) > MAX_DEPTH:   # before PyYAML's scanner, whose time grows with the square of it
        raise InputError(f"YAML nested deeper than {MAX_DEPTH} levels")
    loader = loader_class(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise InputError(f"YAML nested deeper than Python can read") from None
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _flow_depth(text: str) -> int:
    """The deepest nesting of [ and { outside quotes (a bound, not a parse)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    depth = deepest = 0
    quote = None
    for c in text:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _check_size(root) -> None:
    """Count the nodes with every alias expanded (each node's size once, by
    identity, so that a bomb is counted, not walked) and the nesting."""
    size: dict[int, int] = {}
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"YAML nested deeper than {MAX_DEPTH} levels")
        children = _children(node)
        if done:
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_YAML_NODES:
                raise InputError(f"YAML aliases expand to more than {MAX_YAML_NODES:,} values")
        elif id(node) not in size:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def _children(node) -> list:
    value = node.value
    if isinstance(value, list):
        return [c for item in value for c in (item if isinstance(item, tuple) else (item,))]
    return []
