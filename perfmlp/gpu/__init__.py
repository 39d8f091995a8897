"""The CuPy backend: CUDA kernels (*.cu, compiled by kernels.py), the GEMMs (gemm.py), the network on one
GPU (network.py), graphs, the prefetch pipeline, the sliced exchange and the shared timing primitives
(timing.py). Nothing here imports CuPy at import time: `require_cupy()` does, with a one-line error
when CuPy or a GPU is missing."""
from __future__ import annotations

from ..errors import PerfmlpError


def available() -> bool:
    """CuPy imports and sees at least one GPU."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def require_cupy():
    """The cupy module, or a one-line error saying what is missing."""
    try:
        import cupy
    except ImportError:
        raise PerfmlpError("--backend cupy: CuPy is not installed (pip install 'perfmlp[gpu]')") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        raise PerfmlpError(f"--backend cupy: no CUDA GPU ({type(e).__name__}: {e})") from None
    if n == 0:
        raise PerfmlpError("--backend cupy: no CUDA GPU found")
    return cupy


def use_device(cupy, rank: int):
    """Rank r on GPU r mod (GPUs on its node), and a non-blocking stream made current and returned (a CUDA
    graph cannot be captured on the legacy default stream); called before anything keeps the stream."""
    cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    stream.use()
    return stream
