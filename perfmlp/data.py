"""Training data: MNIST IDX files (gzip or raw), the shipped test set, and a deterministic synthetic
MNIST-shaped source, held as uint8 pixels (N x D: a batch piece is one contiguous block) and integer
labels; `to_arrays` makes the trainer's float inputs (pixel / 255) and one-hot labels."""
from __future__ import annotations

import gzip
import math
import struct
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from . import names as N
from .errors import PerfmlpError

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# the share of the training files held out for validation (final project, section 2: "usually 10%")
VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class Dataset:
    images: np.ndarray   # uint8, N x D
    labels: np.ndarray   # uint8, N
    source: str          # one line: where the samples came from

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _open_idx(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise PerfmlpError(f"cannot read {path}: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:  # bad CRC or length, cut short, bad deflate data
            raise PerfmlpError(f"{path}: damaged gzip file ({e})") from None
    return raw


def read_idx(path: str | Path, expect_magic: int) -> np.ndarray:
    """The array in an IDX file: images as count x rows*cols, labels as count."""
    path = Path(path)
    raw = _open_idx(path)
    header_len = 16 if expect_magic == IMAGES_MAGIC else 8
    magic, count = struct.unpack(">II", raw[:8]) if len(raw) >= 8 else (expect_magic, 0)
    if magic != expect_magic:
        kind = "images" if expect_magic == IMAGES_MAGIC else "labels"
        raise PerfmlpError(f"{path}: wrong magic 0x{magic:08x} for MNIST {kind} (expected 0x{expect_magic:08x})")
    if len(raw) < header_len:
        raise PerfmlpError(f"{path}: truncated IDX file ({len(raw)} bytes, header needs {header_len})")
    if expect_magic == IMAGES_MAGIC:
        rows, cols = struct.unpack(">II", raw[8:16])
        shape = (count, rows * cols)
    else:
        shape = (count,)
    need = header_len + math.prod(shape)  # Python ints: a huge header cannot overflow
    if len(raw) < need:
        raise PerfmlpError(f"{path}: truncated IDX file ({len(raw)} bytes, header announces {need})")
    if len(raw) > need:
        raise PerfmlpError(f"{path}: {len(raw)} bytes, but its IDX header announces {need}")
    arr = np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(shape)
    if expect_magic == LABELS_MAGIC and arr.size and arr.max() > 9:
        raise PerfmlpError(f"{path}: label {int(arr.max())} out of range 0-9")
    return arr


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
        p = folder / name
        if p.exists() and not p.is_file():
            raise PerfmlpError(f"{p}: not a file")
        if p.is_file():
            return p
    return None


def read_mnist_pair(folder: Path, stems: tuple[str, str], label: str) -> Dataset | None:
    """The images and labels under `folder`, or None when neither file is there."""
    img, lab = _find(folder, stems[0]), _find(folder, stems[1])
    if img is None and lab is None:
        return None
    if img is None or lab is None:
        missing = stems[0] if img is None else stems[1]
        raise PerfmlpError(f"{folder}: {missing}(.gz) is missing")
    images, labels = read_idx(img, IMAGES_MAGIC), read_idx(lab, LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise PerfmlpError(f"{folder}: {images.shape[0]} images but {labels.shape[0]} labels")
    return Dataset(images, labels, f"{label} ({len(labels)} images from {folder})")


def shipped_test_set() -> Dataset:
    """The real 10,000-image MNIST test set that ships inside the package."""
    folder = Path(str(resources.files("perfmlp") / "mnist"))
    ds = read_mnist_pair(folder, TEST_FILES, "MNIST test set")
    if ds is None:  # pragma: no cover - a broken install
        raise PerfmlpError(f"the shipped MNIST test set is missing from {folder}")
    return ds


def synthetic(n: int, input_size: int = 784, num_classes: int = 10, seed: int = 0) -> Dataset:
    """MNIST-shaped uint8 samples, deterministic in (n, sizes, seed): a smooth prototype per class, shifted, noisy."""
    rng = np.random.default_rng(seed)
    side = int(round(np.sqrt(input_size)))
    square = side * side == input_size
    protos = rng.random((num_classes, input_size)) ** 3
    if square:  # smooth each prototype so that it looks like strokes, not noise
        p = protos.reshape(num_classes, side, side)
        for axis in (1, 2):
            p = (p + np.roll(p, 1, axis) + np.roll(p, -1, axis)) / 3
        protos = p.reshape(num_classes, input_size)
    protos = (protos / protos.max(axis=1, keepdims=True)).astype(np.float32)
    labels = rng.integers(0, num_classes, size=n).astype(np.uint8)
    x = protos[labels]
    if square:
        shifts = rng.integers(-2, 3, size=(n, 2))
        x = x.reshape(n, side, side)
        for s in range(-2, 3):  # vectorised per shift value
            for axis, col in ((1, 0), (2, 1)):
                sel = shifts[:, col] == s
                if s and sel.any():
                    x[sel] = np.roll(x[sel], s, axis=axis)
        x = x.reshape(n, input_size)
    x *= (255 * rng.uniform(0.6, 1.0, size=(n, 1))).astype(np.float32)
    x += rng.standard_normal(size=x.shape, dtype=np.float32) * np.float32(20)
    images = np.clip(x, 0, 255, out=x).astype(np.uint8)
    return Dataset(images, labels, f"synthetic ({n} samples, seed {seed})")


@dataclass(frozen=True)
class Split:
    train: Dataset
    heldout: Dataset
    note: str      # the one line the run prints about its data


def load(data: str, data_dir: str, n_train: int, n_heldout: int, input_size: int,
         num_classes: int, seed: int) -> Split:
    """Training and held-out samples: auto takes the MNIST training files in `data_dir`
    (_validation_split) if there, else the shipped test set (holding out its last `n_heldout`);
    mnist: the same, a missing folder an error; synthetic: generated."""
    if data == N.SYNTHETIC:
        # one draw, split: held-out samples share the training prototypes
        both = synthetic(n_train + n_heldout, input_size, num_classes, seed)
        train = Dataset(both.images[:n_train], both.labels[:n_train], both.source)
        held = Dataset(both.images[n_train:], both.labels[n_train:], "synthetic held-out")
        return Split(train, held, f"data: synthetic, {n_train} training and {n_heldout} held-out samples (seed {seed})")
    folder = Path(data_dir)
    if folder.exists() and not folder.is_dir():
        raise PerfmlpError(f"--data-dir {folder}: a file, not the folder of the MNIST files")
    if data == N.MNIST and not folder.is_dir():
        raise PerfmlpError(f"MNIST folder {folder} does not exist (run `python -m perfmlp.fetch --out {folder}`)")
    train_full = read_mnist_pair(folder, TRAIN_FILES, "MNIST training set") if folder.is_dir() else None
    if train_full is not None:
        _check(train_full, input_size, num_classes)
        return _validation_split(train_full, folder, n_train, n_heldout)
    if data == N.MNIST:
        raise PerfmlpError(f"{folder}: no MNIST training files (train-images-idx3-ubyte[.gz])")
    test = shipped_test_set()
    _check(test, input_size, num_classes)
    held_n = min(n_heldout, len(test) - 1)
    avail = len(test) - held_n
    n = min(n_train, avail)
    note = (f"data: no MNIST training files in {folder}; training on {n} of the shipped 10,000 real test "
            f"images, holding out the last {held_n}")
    if n < n_train:
        note += f" (n_train {n_train} cut to {n})"
    return Split(_take(test, 0, n), _take(test, len(test) - held_n, held_n), note)


def _validation_split(full: Dataset, folder: Path, n_train: int, n_heldout: int) -> Split:
    """Validating on the first `n_heldout` of the files' last VALIDATION_FRACTION (at least one sample),
    training on the first `n_train` of the rest; the test set is not touched."""
    n_val = max(1, int(round(len(full) * VALIDATION_FRACTION)))
    if n_val >= len(full):
        raise PerfmlpError(f"{folder}: {len(full)} training images leave none to train on "
                           f"after the validation split ({n_val})")
    avail = len(full) - n_val
    n = min(n_train, avail)
    held_n = min(n_heldout, n_val)
    note = (f"data: MNIST training set from {folder}, {n} training samples, validating on {held_n} "
            f"of its last {n_val} ({VALIDATION_FRACTION:.0%}); the test set is not used")
    if n < n_train:
        note += f" (n_train {n_train} cut to the {n} available)"
    return Split(_take(full, 0, n), _take(full, avail, held_n), note)


def _take(ds: Dataset, start: int, n: int) -> Dataset:
    return Dataset(ds.images[start:start + n], ds.labels[start:start + n], ds.source)


def _check(ds: Dataset, input_size: int, num_classes: int) -> None:
    if ds.images.shape[1] != input_size:
        raise PerfmlpError(f"input_size is {input_size} but the MNIST images have {ds.images.shape[1]} pixels")
    top = int(ds.labels.max()) if len(ds) else -1
    if top >= num_classes:
        raise PerfmlpError(f"num_classes is {num_classes} but the MNIST labels go up to {top} "
                           f"(MNIST has 10 classes: use --num-classes 10)")


def to_arrays(ds: Dataset, num_classes: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Inputs pixel / 255 (N x D) and one-hot labels (N x C) in `dtype`."""
    dtype = np.dtype(dtype)
    x = ds.images.astype(dtype) / dtype.type(255.0)
    y = np.zeros((len(ds), num_classes), dtype=dtype)
    y[np.arange(len(ds)), ds.labels] = 1
    return x, y
