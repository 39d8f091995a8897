"""perfmlp's CUDA kernels (kernels.cu), compiled once per process and
precision as a CuPy RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

from ..model.costs import FUSED_OUTPUT_MAX_CLASSES

_modules: dict = {}

# Compile-time constants of kernels.cu, which the launches (network.py) use
# too: output_backward's rows a warp and threads a block (its columns a
# block, a launch argument, are the model's OUTPUT_GRAD_COLS). Chosen on an
# H200 with benchmarks/output_backward_v2.py (benchmarks/results/h200/obv2:
# one row a warp and 256 columns a block took 11.3, 7.6 and 6.4 us for the
# pair at b = 3200, 1600 and 800; 512 columns were faster at 3200, 10.6,
# but slower at the smaller pieces).
LAUNCH = {"OB_WROWS": 1, "OB_THREADS": 256}


def kernels(cupy, dtype, classes: int = FUSED_OUTPUT_MAX_CLASSES):
    """The compiled module for float or double; `classes`: the output
    layer's C, the fused output backward's accumulators per thread (MAXC:
    one register each, so compiled for the network's C)."""
    key = (np.dtype(dtype).name, classes)
    if key not in _modules:
        ctype = {"float32": "float", "float64": "double"}[key[0]]
        src = resources.files(__package__).joinpath("kernels.cu").read_text()
        defines = "".join(f"#define {k} {v}\n" for k, v in {"T": ctype, "MAXC": classes, **LAUNCH}.items())
        _modules[key] = cupy.RawModule(code=defines + src, options=("--std=c++14",))
    return _modules[key]
