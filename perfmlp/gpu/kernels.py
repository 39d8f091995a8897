"""perfmlp's CUDA kernels (kernels.cu), compiled once per process and
precision as a CuPy RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

_modules: dict = {}


def kernels(cupy, dtype):
    """The compiled module for float or double."""
    key = np.dtype(dtype).name
    if key not in _modules:
        ctype = {"float32": "float", "float64": "double"}[key]
        src = resources.files(__package__).joinpath("kernels.cu").read_text()
        _modules[key] = cupy.RawModule(code=f"#define T {ctype}\n" + src, options=("--std=c++14",))
    return _modules[key]
