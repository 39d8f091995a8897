"""perfmlp's CUDA kernels (kernels.cu), compiled once per process and
precision as a CuPy RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

from ..model.costs import FUSED_OUTPUT_MAX_CLASSES, OUTPUT_GRAD_COLS

_modules: dict = {}

# Compile-time constants of kernels.cu, which the launches (network.py) use too:
# output_backward's warps per block (a row each) and columns per block, and
# the most classes it takes (one register each).
LAUNCH = {"MAXC": FUSED_OUTPUT_MAX_CLASSES, "OB_ROWS": 8, "OB_COLS": OUTPUT_GRAD_COLS}


def kernels(cupy, dtype):
    """The compiled module for float or double."""
    key = np.dtype(dtype).name
    if key not in _modules:
        ctype = {"float32": "float", "float64": "double"}[key]
        src = resources.files(__package__).joinpath("kernels.cu").read_text()
        defines = "".join(f"#define {k} {v}\n" for k, v in {"T": ctype, **LAUNCH}.items())
        _modules[key] = cupy.RawModule(code=defines + src, options=("--std=c++14",))
    return _modules[key]
