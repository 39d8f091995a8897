"""The precisions a step can run in, and what each stores, multiplies and
reduces (pure: the trainer, the model and the report read the same table).

- float64, float32: everything in that type; the products on the FFMA
  (or FP64) units.
- tf32: float32 storage, master weights and update; the GEMMs on tensor
  cores with their inputs rounded to TF32 (10 mantissa bits) and float32
  accumulation (cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32).
- bf16, fp16 (mixed precision): master weights, gradients and the update
  in float32; activations, deltas and the batch in 16 bits; the GEMMs on
  tensor cores from 16-bit inputs (the activations and a 16-bit copy of the
  weights, rewritten by each update) with float32 accumulation
  (CUBLAS_COMPUTE_32F); elementwise kernels read and write 16 bits and
  compute in float32. fp16 adds dynamic loss scaling (its range is too
  narrow for small gradients): perfmlp/mixed.py.

Gradients are reduced in 32 bits in every precision but float64: the
weight-gradient GEMMs write float32 straight into the gradient buffer, and
that buffer is what the allreduce (MPI or NCCL) and the staged copies move.

Counting rule for the tensor cores: a multiply-add is 2 FLOPs at its
precision, as on the FFMA units (costs.py); a machine's ceiling for a
precision is its dense tensor-core peak (Machine.peak_flops_per_s).
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
    """The table's entry for a --precision value (or a NumPy float32/float64
    dtype, the names older code passes)."""
    if isinstance(name, Precision):
        return name
    try:
        return PRECISIONS[name if isinstance(name, str) else np.dtype(name).name]
    except (KeyError, TypeError):
        raise ValueError(f"precision must be one of {', '.join(NAMES)}, got {name!r}") from None
