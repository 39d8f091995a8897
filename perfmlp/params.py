"""Parameter files: `--save-params DIR` (initial.npz, final.npz and, when the loss stops being finite,
at-failure.npz) and `--resume FILE.npz`.

A file is written whole or not at all; nothing of an earlier run is overwritten, and a run holds an
exclusive lock on its folder. A resumed file is read without pickle, each array's header checked before
its data is read (a small file declaring a huge array is refused, not loaded)."""
from __future__ import annotations

import fcntl
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .errors import PerfmlpError, RunFailure, write_atomic

INITIAL, FINAL, AT_FAILURE = "initial.npz", "final.npz", "at-failure.npz"
PARAM_FILES = (INITIAL, FINAL, AT_FAILURE)
LOCK = ".perfmlp.lock"
_held: list = []   # the open lock files: the lock lasts as long as the process


def check_folder(folder: str) -> None:
    """--save-params must be a writable folder holding no earlier run's parameters."""
    if not folder:
        return
    d = Path(folder)
    if d.exists() and not d.is_dir():
        raise PerfmlpError(f"--save-params {d}: not a folder")
    old = [n for n in PARAM_FILES if (d / n).exists()]
    if old:
        raise PerfmlpError(f"--save-params {d}: already holds {', '.join(old)} of an earlier run "
                           f"(choose a new folder; nothing is overwritten)")
    probe = d if d.exists() else next((p for p in d.parents if p.exists()), Path("."))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PerfmlpError(f"--save-params {d}: {probe} is not writable")


def claim_folder(folder: str) -> None:
    """Hold --save-params DIR for this run (one rank): an exclusive lock for the process's life, then check again."""
    if not folder:
        return
    d = Path(folder)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise PerfmlpError(f"--save-params {d}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise PerfmlpError(f"--save-params {d}: in use by another run (choose a new folder; nothing is "
                           "overwritten)") from None
    _held.append(fd)
    check_folder(folder)


def save(path: Path, params: dict[str, np.ndarray]) -> None:
    """The parameters as an .npz file, written whole or not at all (a RunFailure on a full disk)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFailure(f"cannot create {path.parent}: {e.strerror}") from None
    write_atomic(path, lambda f: np.savez(f, **params))


def load_resume(path: str, layer_sizes) -> dict[str, np.ndarray]:
    """The parameters in an .npz file for a network of `layer_sizes`; else a PerfmlpError naming the array."""
    p = Path(path)
    if not p.exists():
        raise PerfmlpError(f"--resume: no such file {path}")
    if p.is_dir():
        raise PerfmlpError(f"--resume: {path} is a folder, not an .npz file")
    if not p.is_file():
        raise PerfmlpError(f"--resume: {path} is not a regular file")
    try:
        with open(p, "rb") as f:
            if f.read(2) != b"PK":   # a zip's signature: an .npy array, text, anything else
                raise PerfmlpError(f"--resume: {path} is not a readable .npz file (not an .npz archive)")
        shapes = {k: v for l in range(1, len(layer_sizes))   # W{l}: (out, in) and b{l}: (out,)
                  for k, v in ((f"W{l}", (layer_sizes[l], layer_sizes[l - 1])), (f"b{l}", (layer_sizes[l],)))}
        with zipfile.ZipFile(p) as z:
            return _read_members(z, path, shapes)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
        raise PerfmlpError(f"--resume: {path} is not a readable .npz file ({type(e).__name__}: {e})") from None


def _read_members(z: zipfile.ZipFile, path: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    members = {n.removesuffix(".npy"): n for n in z.namelist()}
    missing = [n for n in shapes if n not in members]
    if missing:
        raise PerfmlpError(f"--resume: {path} has no array {missing[0]}")
    extra = sorted(set(members) - set(shapes))
    if extra:
        raise PerfmlpError(f"--resume: {path} has arrays this network lacks: {', '.join(extra)}")
    params = {}
    for name, shape in shapes.items():
        with z.open(members[name]) as f:   # the header first: nothing is allocated for a wrong shape
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            got, _, dtype = read_header(f)
        if got != shape:
            raise PerfmlpError(f"--resume: {path}: {name} has shape {got}, the network needs {shape}")
        if not np.issubdtype(dtype, np.floating):
            raise PerfmlpError(f"--resume: {path}: {name} holds {dtype} values, not floating-point numbers")
        with z.open(members[name]) as f:
            a = np.lib.format.read_array(f, allow_pickle=False)
        if not np.isfinite(a).all():
            raise PerfmlpError(f"--resume: {path}: {name} is not all finite numbers")
        params[name] = a
    return params
