"""Mixed-precision numerics on the host: the 16-bit storage types, TF32 rounding and dynamic loss scaling
(what each precision stores and multiplies: perfmlp/model/precision.py).

On NumPy the step computes what the GPU's does, so CPU tests check the arithmetic: bfloat16 through
`ml_dtypes`, GEMM operands rounded as the tensor cores take them (`gemm_operand`), float32 accumulation
and elementwise work on values rounded back to 16 bits.

Dynamic loss scaling (fp16), as PyTorch's GradScaler's defaults: the loss is scaled by S (2^16 at
first) and the gradients by 1/S in the update; a step whose reduced gradients hold an inf or a NaN is
skipped and S halved; after GROWTH_INTERVAL finite steps in a row S doubles (gpu/kernels.cu alike)."""
from __future__ import annotations

import numpy as np

from . import names as N
from .errors import PerfmlpError
from .model.precision import Precision, precision as precision_of

try:   # bfloat16 on NumPy; the GPU path needs none (it holds bfloat16 as uint16 bits: to_storage)
    import ml_dtypes
except ImportError:
    ml_dtypes = None

INIT_SCALE = 2.0 ** 16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000


def storage_dtype(precision) -> np.dtype:
    """The NumPy type of a precision's activations and batch (bfloat16: ml_dtypes', needed)."""
    p = precision_of(precision)
    if p.storage != "bfloat16":
        return np.dtype(p.storage)
    if ml_dtypes is None:
        raise PerfmlpError(f"--precision {p.name} on NumPy needs ml_dtypes (pip install ml_dtypes)")
    return np.dtype(ml_dtypes.bfloat16)


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float values as bfloat16's bits (uint16), rounded to nearest even, as kernels.cu's st()."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32)
    bits = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits)


def narrow(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """a as a 16-bit type, rounded to nearest even as astype does. float16's subnormals are rounded here
    first: NumPy converts an inexact one in a slow scalar path, and small gradients are mostly such."""
    if dtype != np.float16:
        return a.astype(dtype)
    tiny = np.abs(a) < 2.0 ** -14     # under float16's smallest normal: multiples of 2**-24 there
    return np.where(tiny, np.rint(a * 2.0 ** 24) * 2.0 ** -24, a).astype(np.float16)


def to_storage(a: np.ndarray, precision) -> np.ndarray:
    """a in the precision's storage type on the host (bfloat16 without ml_dtypes: its bits)."""
    p = precision_of(precision)
    if p.storage == "bfloat16" and ml_dtypes is None:
        return bf16_bits(a)
    return a.astype(storage_dtype(p), copy=False)


def device_view(a: np.ndarray) -> np.ndarray:
    """A host array as CuPy can take it: bfloat16 as its uint16 bits (CuPy has no bfloat16)."""
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def from_device(a: np.ndarray, precision) -> np.ndarray:
    """A storage-type array copied from the GPU as float32 values (bfloat16's bits widened)."""
    if a.dtype == np.uint16 and precision_of(precision).storage == "bfloat16":
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a.astype(np.float32)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32's 10 mantissa bits (nearest even), as a TF32 tensor core takes them."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x0FFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), r, x).astype(np.float32, copy=False)


def gemm_operand(p: Precision):
    """f(x): a GEMM operand as float32, as the precision's products take it (None: in its own type)."""
    if p.gemm == N.TF32:
        return round_tf32
    if p.mixed:   # (the type looked up when a product runs: NumPy's networks only)
        return lambda x: x.astype(storage_dtype(p), copy=False).astype(np.float32)
    return None


class LossScale:
    """The dynamic loss scale's state on the host (the rule: module docstring)."""

    def __init__(self, scale: float = INIT_SCALE):
        self.scale = scale
        self.good = 0        # finite steps since the scale last changed
        self.skipped = 0     # steps skipped for an overflow, in all

    def unscale(self, finite: bool) -> float:
        """The update's gradient multiplier, 1 / the scale (0: skip the step); sets the next scale."""
        if not finite:
            self.scale *= BACKOFF_FACTOR
            self.good = 0
            self.skipped += 1
            return 0.0
        inv = 1.0 / self.scale
        self.good += 1
        if self.good == GROWTH_INTERVAL:
            self.scale *= GROWTH_FACTOR
            self.good = 0
        return inv
