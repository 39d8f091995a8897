"""The GEMMs: cuBLAS called directly, and the reference's own kernels
(naive, tiled, register-blocked; kernels.cu), all as out = a @ b on 2-D
arrays of any strides."""
from __future__ import annotations

import numpy as np

from ..config import CHOICES
from ..errors import PerfmlpError
from .kernels import kernels


def _elem_strides(a):
    s = a.itemsize
    return a.strides[0] // s, a.strides[1] // s


GEMMS = CHOICES["gemm"]


class CublasGemm:
    """out = a @ b through cublas<S|D>gemm directly: cupy.matmul's dispatch
    costs more host time than the launch itself at the trainer's sizes.

    Row-major C (M x N) is column-major C^T, so C^T = B^T A^T: a C-ordered
    operand is passed as it lies (op N), an F-ordered one (a transposed view)
    with op T. Other layouts fall back to cupy.matmul."""

    def __init__(self, cupy, dtype):
        try:
            from cupy_backends.cuda.libs import cublas
        except ImportError:  # pragma: no cover - older CuPy
            from cupy.cuda import cublas
        self.cupy = cupy
        self.fn = cublas.sgemm if np.dtype(dtype) == np.float32 else cublas.dgemm
        self.handle = cupy.cuda.device.get_cublas_handle()
        self._scalars = np.array([1.0, 0.0], dtype=dtype)  # alpha, beta (host pointer mode)
        self.p_one = self._scalars.ctypes.data
        self.p_zero = self.p_one + self._scalars.itemsize

    @staticmethod
    def _op(x):
        """(cuBLAS op, leading dimension) of a 2-D operand as it lies, or None."""
        if x.flags.c_contiguous:
            return 0, max(x.shape[1], 1)
        if x.flags.f_contiguous:
            return 1, max(x.shape[0], 1)
        return None

    def __call__(self, a, b, out):
        opa, opb = self._op(a), self._op(b)
        if opa is None or opb is None:
            return self.cupy.matmul(a, b, out=out)
        M, K = a.shape
        N = b.shape[1]
        self.fn(self.handle, opb[0], opa[0], N, M, K, self.p_one, b.data.ptr, opb[1], a.data.ptr, opa[1],
                self.p_zero, out.data.ptr, max(N, 1))
        return out


_cublas_gemms: dict = {}


def cublas_gemm(cupy, dtype) -> CublasGemm:
    """The CublasGemm of the current device and dtype (one per process)."""
    key = (cupy.cuda.Device().id, np.dtype(dtype).char)
    g = _cublas_gemms.get(key)
    if g is None:
        g = _cublas_gemms[key] = CublasGemm(cupy, dtype)
    return g


def gemm(cupy, kind: str, a, b, out=None):
    """out = a @ b (2-D, any strides) with cuBLAS or one of the reference's kernels."""
    if kind == "cublas":
        if out is None or not out.flags.c_contiguous:
            return cupy.matmul(a, b, out=out)
        return cublas_gemm(cupy, a.dtype)(a, b, out)
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, (a.shape, b.shape)
    if out is None:
        out = cupy.empty((M, N), dtype=a.dtype)
    assert out.flags.c_contiguous and out.shape == (M, N)
    mod = kernels(cupy, a.dtype)
    sa0, sa1 = _elem_strides(a)
    sb0, sb1 = _elem_strides(b)
    args = (a, b, out, np.int32(M), np.int32(N), np.int32(K),
            np.int64(sa0), np.int64(sa1), np.int64(sb0), np.int64(sb1))
    if kind == "naive":
        mod.get_function("gemm_naive")(((N + 15) // 16, (M + 15) // 16), (16, 16), args)
    elif kind == "tiled":
        mod.get_function("gemm_tiled")(((N + 15) // 16, (M + 15) // 16), (16, 16), args)
    elif kind == "regblock":
        mod.get_function("gemm_regblock")(((N + 15) // 16, (M + 63) // 64), (16, 4), args)
    else:
        raise PerfmlpError(f"unknown GEMM {kind!r} (one of {', '.join(GEMMS)})")
    return out
