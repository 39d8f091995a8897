"""The precisions a step can run in, and what each stores, multiplies and
reduces (one table for the trainer, the model and the report): float64 and
float32 throughout; tf32 float32 with the GEMMs on tensor cores; bf16 and
fp16 mixed (16-bit activations and batch, float32 master weights, gradients
and update; fp16 with loss scaling: perfmlp/mixed.py). Gradients are
reduced in 32 bits in every precision but float64.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from .. import names as N


@dataclass(frozen=True)
class Precision:
    name: str            # the --precision value
    storage: str         # NumPy name of the activations' and the batch's type
    master: str          # NumPy name of the weights', gradients' and update's type
    gemm: str            # the GEMM inputs' format: float64, float32 (FFMA), tf32, bf16, fp16
    loss_scaling: bool = False

    @property
    def act_bytes(self) -> int:
        return {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[self.storage]

    @property
    def param_bytes(self) -> int:
        return {"float64": 8, "float32": 4}[self.master]

    @property
    def mixed(self) -> bool:
        """16-bit storage beside float32 master weights (and their 16-bit copy)."""
        return self.act_bytes < self.param_bytes

    @property
    def tensor_cores(self) -> bool:
        return self.gemm in (N.TF32, N.BF16, N.FP16)


PRECISIONS = {p.name: p for p in (
    Precision(N.FLOAT32, "float32", "float32", "float32"),
    Precision(N.FLOAT64, "float64", "float64", "float64"),
    Precision(N.TF32, "float32", "float32", N.TF32),
    Precision(N.BF16, "bfloat16", "float32", N.BF16),
    Precision(N.FP16, "float16", "float32", N.FP16, loss_scaling=True),
)}
NAMES = N.PRECISIONS


def precision(name) -> Precision:
    """The table's entry for a --precision value (or a NumPy float32/float64 dtype, the names older code passes)."""
    if isinstance(name, Precision):
        return name
    try:
        return PRECISIONS[name if isinstance(name, str) else np.dtype(name).name]
    except (KeyError, TypeError):
        raise ValueError(f"precision must be one of {', '.join(NAMES)}, got {name!r}") from None
