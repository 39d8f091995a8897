"""The GEMMs: cuBLAS called directly, and the reference's own kernels (naive, tiled, register-blocked;
reference_gemm.cu), all as out = a @ b on 2-D arrays of any strides."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .. import names as N
from ..errors import PerfmlpError
from ..model.precision import precision as precision_of
from .kernels import kernels


def _elem_strides(a):
    s = a.itemsize
    return a.strides[0] // s, a.strides[1] // s


GEMMS = N.GEMM_KERNELS
# the reference's kernels: (function, output rows a block, block); each block covers 16 columns
REFERENCE_LAUNCH = {N.NAIVE: ("gemm_naive", 16, (16, 16)), N.TILED: ("gemm_tiled", 16, (16, 16)),
                    N.REGBLOCK: ("gemm_regblock", 64, (16, 4))}

# cuBLAS's enumerations (CUDA 13 library_types.h and cublas_api.h): cudaDataType_t by CuPy type (bfloat16
# is held as its uint16 bits: gpu/kernels.py device_dtype), cublasComputeType_t by tensor-core format
CUDA_TYPE = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2, np.dtype(np.uint16): 14}
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
COMPUTE = {N.TF32: CUBLAS_COMPUTE_32F_FAST_TF32, N.BF16: CUBLAS_COMPUTE_32F, N.FP16: CUBLAS_COMPUTE_32F}
CUBLAS_GEMM_DEFAULT = -1


class CublasGemm:
    """out = a @ b through cublas<S|D>gemm_v2 (ctypes, the libcublas CuPy loaded, so eager and graph modes run the
    same kernels) on a handle of our own bound to one stream, with its own workspace (cuBLAS captures into a graph
    only then): CuPy's wrappers refuse to run during a graph capture, and cupy.matmul's dispatch costs more host
    time than the launch at the trainer's sizes.

    Row-major C (M x N) is column-major C^T = B^T A^T: a C-ordered operand is passed as it lies (op N), an F-ordered
    one (a transposed view) with op T; other layouts fall back to cupy.matmul (never in the step). `precision` tf32,
    bf16 or fp16: cublasGemmEx with float32 accumulation, each operand's and the result's type from its array."""

    WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommended workspace for its newest GPUs

    def __init__(self, cupy, dtype, stream, precision=None):
        lib = _libcublas(cupy)
        self.cupy, self.stream = cupy, stream   # kept alive as long as the handle bound to it
        handle = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.handle = handle
        self.workspace = cupy.empty(self.WORKSPACE_BYTES, np.uint8)
        _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)), "cublasSetStream")
        _check(lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(self.workspace.data.ptr),
                                         ctypes.c_size_t(self.WORKSPACE_BYTES)), "cublasSetWorkspace")
        i, p = ctypes.c_int, ctypes.c_void_p
        self.compute = COMPUTE.get(precision_of(precision or dtype).gemm)
        if self.compute is None:
            self.fn = lib.cublasSgemm_v2 if np.dtype(dtype) == np.float32 else lib.cublasDgemm_v2
            self.fn.argtypes = [p, i, i, i, i, i, p, p, i, p, i, p, p, i]
        else:
            self.fn = lib.cublasGemmEx
            self.fn.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
            dtype = np.float32   # the scale type of CUBLAS_COMPUTE_32F*
        self.fn.restype = i
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
        n_cols = b.shape[1]
        if self.compute is None:
            st = self.fn(self.handle, opb[0], opa[0], n_cols, M, K, self.p_one, b.data.ptr, opb[1], a.data.ptr, opa[1],
                         self.p_zero, out.data.ptr, max(n_cols, 1))
        else:
            st = self.fn(self.handle, opb[0], opa[0], n_cols, M, K, self.p_one, b.data.ptr, CUDA_TYPE[b.dtype], opb[1],
                         a.data.ptr, CUDA_TYPE[a.dtype], opa[1], self.p_zero, out.data.ptr, CUDA_TYPE[out.dtype],
                         max(n_cols, 1), self.compute, CUBLAS_GEMM_DEFAULT)
        if st:
            _check(st, "cublasGemm")
        return out


@functools.cache
def _libcublas(cupy):
    """The libcublas CuPy loaded (found in this process's mapped files)."""
    cupy.cuda.device.get_cublas_handle()  # makes CuPy load it
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libcublas.so" in line and "/" in line}
    paths = sorted(p for p in paths if "libcublasLt" not in p)
    if not paths:
        raise PerfmlpError("cannot find the libcublas that CuPy loaded (in /proc/self/maps)")
    return ctypes.CDLL(paths[0])


def _check(status: int, what: str) -> None:
    if status:
        raise PerfmlpError(f"{what} failed: cuBLAS status {status}")


_cublas_gemms: dict = {}


def cublas_gemm(cupy, dtype, stream=None, precision=None) -> CublasGemm:
    """The CublasGemm of the current device, dtype, stream (default: the current one) and precision
    (default: the dtype's), one per process. It keeps its stream alive: the driver reuses a destroyed
    stream's address, so a cached handle must never outlive its stream."""
    if stream is None:
        stream = cupy.cuda.get_current_stream()
    name = precision_of(precision or dtype).name
    key = (cupy.cuda.Device().id, np.dtype(dtype).char, stream.ptr, name)
    g = _cublas_gemms.get(key)
    if g is None:
        g = _cublas_gemms[key] = CublasGemm(cupy, dtype, stream, name)
    return g


def gemm(cupy, kind: str, a, b, out=None, stream=None):
    """out = a @ b (2-D, any strides) with cuBLAS or a reference kernel on `stream` (default: current)."""
    if kind == N.CUBLAS:
        if out is None or not out.flags.c_contiguous:
            return cupy.matmul(a, b, out=out)
        return cublas_gemm(cupy, a.dtype, stream)(a, b, out)
    M, K = a.shape
    K2, n_cols = b.shape
    assert K == K2, (a.shape, b.shape)
    if out is None:
        out = cupy.empty((M, n_cols), dtype=a.dtype)
    assert out.flags.c_contiguous and out.shape == (M, n_cols)
    mod = kernels(cupy, a.dtype)
    sa0, sa1 = _elem_strides(a)
    sb0, sb1 = _elem_strides(b)
    args = (a, b, out, np.int32(M), np.int32(n_cols), np.int32(K),
            np.int64(sa0), np.int64(sa1), np.int64(sb0), np.int64(sb1))
    if kind not in REFERENCE_LAUNCH:
        raise PerfmlpError(f"unknown GEMM {kind!r} (one of {', '.join(GEMMS)})")
    name, rows, block = REFERENCE_LAUNCH[kind]
    mod.get_function(name)(((n_cols + 15) // 16, (M + rows - 1) // rows), block, args, stream=stream)
    return out
