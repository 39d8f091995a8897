"""Rooflines as closed forms of arithmetic intensity AI = FLOPs / bytes
(docs/model.md derives them; one ceiling per precision and memory level).

standard:   y = min(P, AI * BW)              ridge at AI = P / BW
modified:   y = AI / (AI / P + 1 / BW)       (time = FLOPs / P + bytes / BW: copies and compute
                                              serialised; P / 2 at the ridge, never above standard)
overlapped: the standard form at the copy bandwidth (prefetched copies beside the compute)
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
