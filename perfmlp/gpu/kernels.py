"""perfmlp's CUDA kernels (kernels.cu), compiled once per process and
precision as a CuPy RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

from ..model.costs import FUSED_OUTPUT_MAX_CLASSES

_modules: dict = {}

# Compile-time constants of kernels.cu, which the launches (network.py) use too.
# output_linear: blocks of 32 columns x OL_SLICES slices of the hidden units;
# output_backward: blocks of OB_THREADS threads over OB_ROWS rows, OB_UNROLL
# columns a thread a step; MAXC: the most classes (one register each).
LAUNCH = {"MAXC": FUSED_OUTPUT_MAX_CLASSES, "OL_SLICES": 8, "OB_ROWS": 4, "OB_THREADS": 512, "OB_UNROLL": 2}


def kernels(cupy, dtype):
    """The compiled module for float or double."""
    key = np.dtype(dtype).name
    if key not in _modules:
        ctype = {"float32": "float", "float64": "double"}[key]
        src = resources.files(__package__).joinpath("kernels.cu").read_text()
        defines = "".join(f"#define {k} {v}\n" for k, v in {"T": ctype, **LAUNCH}.items())
        _modules[key] = cupy.RawModule(code=defines + src, options=("--std=c++14",))
    return _modules[key]
