"""perfmlp's CUDA kernels (kernels.cu), compiled once per process and
precision as a CuPy RawModule."""
from __future__ import annotations

from importlib import resources

import numpy as np

from ..model.costs import FUSED_OUTPUT_MAX_CLASSES, OUTPUT_GRAD_COLS

_modules: dict = {}

# Compile-time constants of kernels.cu, which the launches (network.py) use
# too: output_backward's rows a block (each thread takes them all, a column
# at a time), columns a block, and threads a block. Chosen on an H200 with
# benchmarks/output_backward_tune.py (benchmarks/results/h200-x2/fused/tune/:
# OB_ROWS = 2, OB_COLS = 1024 took 16.6 us for the pair at b = 3200, the
# shape used before, 4 x 512, 19.9 us).
LAUNCH = {"OB_ROWS": 2, "OB_COLS": OUTPUT_GRAD_COLS, "OB_THREADS": 256}


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
