"""Outputs that never replace an input, and inputs read within bounds.

An output is a regular file or a new name (never a folder, FIFO, device or link, nor a file the command
reads); a folder of outputs is filled beside its target and renamed into place. JSON nested past
Python's recursion and YAML nested past MAX_DEPTH or whose aliases expand past MAX_YAML_NODES values
are refused in one line; a message quotes at most PREFIX_CHARS characters."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

from .errors import PerfmlpError

MAX_DEPTH = 100            # YAML brackets or mappings, nested
MAX_YAML_NODES = 100_000   # nodes of a YAML document, its aliases expanded
PREFIX_CHARS = 60          # of a value, quoted in a message


class InputError(PerfmlpError, ValueError):
    """An input beyond its bounds, or an output that would replace an input (a ValueError too)."""


def prefix(value, n: int = PREFIX_CHARS) -> str:
    """repr(value), cut to n characters with '...' where longer (it is not expanded first when huge)."""
    text = repr(value) if not isinstance(value, (list, dict, tuple)) or _small(value) else \
        f"a {type(value).__name__} of {len(value)} items"
    return text if len(text) <= n else text[:n] + "..."


def key(k) -> str:
    """A mapping's key for a message: a string as it is, anything else as prefix() shows it, both cut short."""
    if not isinstance(k, str):
        return prefix(k)
    return k if len(k) <= PREFIX_CHARS else k[:PREFIX_CHARS] + "..."


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


def write_line(text: str) -> None:
    """`text` and its newline in one write to stderr (never an error: a closed or full output is ignored)."""
    stream = sys.stderr
    with contextlib.suppress(OSError, ValueError, AttributeError):
        stream.flush()
        os.write(stream.fileno(), (text + "\n").encode(getattr(stream, "encoding", None) or "utf-8",
                                                         "backslashreplace"))


def check_output(path: str | Path, inputs=(), what: str = "output") -> Path:
    """`path` if a command may write it: a regular file or a new name, and neither one of `inputs`
    (files or folders the command reads) nor inside one; an InputError naming it otherwise."""
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
    _refuse_what_is_read(p, inputs, what, "")
    return p


def check_output_folder(path: str | Path, runs=(), what: str = "--out") -> Path:
    """`path` if a command may fill it: a folder or a new name (not a link or a file), neither one of
    the `runs` it reads nor inside one (a folder holding runs may be: replace_folder keeps them)."""
    p = Path(path)
    if p.is_symlink():
        raise InputError(f"{what} {p}: a symbolic link (name a folder or a new name)")
    if p.exists() and not p.is_dir():
        raise InputError(f"{what} {p}: a file, not a folder")
    _refuse_what_is_read(p, runs, what, "the run ")
    return p


def _refuse_what_is_read(p: Path, sources, what: str, kind: str) -> None:
    """An InputError where `p` is one of `sources` or lies inside one."""
    target = p.resolve()
    for source in sources:
        s = Path(source).resolve()
        if target == s or s in target.parents:
            raise InputError(f"{what} {p}: it would write over {kind}{source}, which this command reads")


def replace_folder(target: str | Path, fill, marker: str) -> None:
    """`fill(folder)` writes a new folder beside `target`, which then takes its place in two renames
    (a failure leaves `target` whole). A `target` holding anything must hold `marker`, a file an
    earlier fill wrote: a folder of other files is refused, never replaced."""
    given, target = target, Path(target).resolve()
    if target.is_dir() and any(target.iterdir()) and not (target / marker).is_file():
        raise InputError(f"{given}: holds files but no {marker} (name a new folder or an earlier one's)")
    target.parent.mkdir(parents=True, exist_ok=True)
    new = target.with_name(f".{target.name}.new-{os.getpid()}")
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    try:
        if target.is_dir():   # the previous files, times kept: what `fill` leaves unchanged stays unchanged
            shutil.copytree(target, new, symlinks=True)
        else:
            new.mkdir()
        fill(new)
        if target.is_dir():
            _keep_times(new, target)
        if target.exists():
            os.rename(target, old)
        os.rename(new, target)
    except BaseException:
        if old.exists() and not target.exists():
            os.rename(old, target)
        shutil.rmtree(new, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _keep_times(new: Path, target: Path) -> None:
    """A file `fill` wrote again with the same bytes keeps its time (a remade report changes only what changed)."""
    for f in new.iterdir():
        before = target / f.name
        if f.is_file() and not f.is_symlink() and before.is_file() and not before.is_symlink():
            st = before.stat()
            if st.st_size == f.stat().st_size and before.read_bytes() == f.read_bytes():
                os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def read_json(text: str | bytes):
    """json.loads, with nesting too deep for Python's recursion an InputError, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError("JSON nested too deeply") from None


def load_yaml(text: str, loader_class):
    """One YAML document read by `loader_class` (a SafeLoader); an InputError, before anything is
    built, for nesting past MAX_DEPTH or aliases expanding past MAX_YAML_NODES nodes."""
    if _flow_depth(text) > MAX_DEPTH:   # before PyYAML's scanner, whose time grows with the square of it
        raise InputError(f"YAML nested deeper than {MAX_DEPTH} levels")
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "&" in text:   # only an anchor lets an alias repeat a subtree: without one the text bounds the size
            _check_size(node)
        return loader.construct_document(node)
    except RecursionError:
        raise InputError("YAML nested deeper than Python can read") from None
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
    """Check the nesting and the node count, aliases expanded (each node sized once: a bomb is counted, not walked)."""
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
