"""Rooflines as closed forms of arithmetic intensity AI = FLOPs / bytes.

standard:  y = min(P, AI * BW)                     ridge at AI = P / BW
modified:  y = AI / (AI / P + 1 / BW)              (copies and compute serialised)
overlapped: the standard form at the copy bandwidth (copies on a stream of
           their own beside the compute, --batch-transfer prefetch:
           time = max(FLOPs / P, bytes / BW))

Several ceilings (as Nsight Compute's hierarchical roofline draws them):
one P per precision's GEMM units (Machine.ceilings: FFMA float32 and
float64, TF32, BF16 and FP16 tensor cores) and one BW per memory level (HBM
with AI = FLOPs per device-memory byte; PCIe with AI = FLOPs per copied
byte); a run sits under the P of the precision it ran in.

The modified form follows from time = FLOPs / P + bytes / BW: divide FLOPs
by that time and by bytes. It tends to P as AI grows, equals P / 2 at the
ridge AI = P / BW, and never exceeds the standard roofline
(docs/model.md derives it).
"""
from __future__ import annotations

import numpy as np


def standard_roofline(ai, peak_flops_per_s: float, bw_bytes_per_s: float):
    return np.minimum(peak_flops_per_s, np.asarray(ai, dtype=float) * bw_bytes_per_s)


def modified_roofline(ai, peak_flops_per_s: float, bw_bytes_per_s: float):
    return ai / (ai / peak_flops_per_s + 1.0 / bw_bytes_per_s)


overlapped_roofline = standard_roofline   # at the copy bandwidth (the module docstring)


def ridge_point(peak_flops_per_s: float, bw_bytes_per_s: float) -> float:
    return peak_flops_per_s / bw_bytes_per_s
