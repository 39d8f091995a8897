"""perfmlp's CUDA kernels (kernels.cu, the fused output backward in output_backward.cu and the reference's
GEMMs in reference_gemm.cu), compiled once per process, precision and output-layer width as one CuPy
RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

from ..mixed import BACKOFF_FACTOR, GROWTH_FACTOR, GROWTH_INTERVAL
from ..model.costs import FUSED_OUTPUT_MAX_CLASSES
from ..model.precision import precision as precision_of

_modules: dict = {}

# Compile-time constants of the CUDA source the launches (network.py) use too: output_backward's rows a
# warp and threads a block (its columns a block, a launch argument, are the model's OUTPUT_GRAD_COLS)
LAUNCH = {"OB_WROWS": 2, "OB_THREADS": 256}
# the storage type's kind in kernels.cu (S_KIND): the master type itself, IEEE half, bfloat16
S_KIND = {"float32": 0, "float64": 0, "float16": 1, "bfloat16": 2}


SOURCES = ("kernels.cu", "output_backward.cu", "reference_gemm.cu")


def source() -> str:
    """The module's CUDA source: SOURCES in order."""
    return "\n".join(resources.files(__package__).joinpath(f).read_text() for f in SOURCES)


def device_dtype(precision) -> np.dtype:
    """The CuPy type of a precision's activations and batch: its storage type, bf16 as uint16 bits."""
    s = precision_of(precision).storage
    return np.dtype(np.uint16 if s == "bfloat16" else s)


def kernels(cupy, precision, classes: int = FUSED_OUTPUT_MAX_CLASSES):
    """The compiled module for a precision (or a float32/float64 dtype); `classes`: the output layer's C,
    the fused output backward's accumulators per thread (MAXC: one register each)."""
    p = precision_of(precision)
    key = (p.name, classes)
    if key not in _modules:
        t = {"float32": "float", "float64": "double"}[p.master]
        kind = S_KIND[p.storage]
        defines = {"T": t, "S": t if kind == 0 else "unsigned short", "S_KIND": kind, "MAXC": classes,
                   "WCOPY": int(p.mixed), "LOSS_SCALING": int(p.loss_scaling), "GROWTH_INTERVAL": GROWTH_INTERVAL,
                   "GROWTH_FACTOR": repr(GROWTH_FACTOR), "BACKOFF_FACTOR": repr(BACKOFF_FACTOR), **LAUNCH}
        _modules[key] = cupy.RawModule(code="".join(f"#define {k} {v}\n" for k, v in defines.items()) + source(),
                                       options=("--std=c++14",))
    return _modules[key]
