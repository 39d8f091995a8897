"""Where a rank's piece of a batch comes from: `get(lo, hi, phase, counts)` gives x (D x b) and y (C x b),
transposed views of the row-per-sample arrays, and counts the bytes it copied.

`HostBatches` (NumPy): views, no copy. `DeviceBatches` (CuPy): copied each batch from pageable or
pinned memory, resident, or prefetched on copy streams (perfmlp/gpu/prefetch.py); `static` gives the
piece in the same device buffers every batch, as a CUDA graph needs."""
from __future__ import annotations

import numpy as np

from . import names as N
from .mixed import device_view
from .trace.records import Phase


def host_memory(mode: str) -> str | None:
    """The host memory (N.COPY_MEMORIES) a transfer mode reads its pieces from; None: resident."""
    if mode == N.RESIDENT:
        return None
    return N.PAGEABLE if mode in N.PAGEABLE_SOURCES else N.PINNED


class HostBatches:
    transfer = N.IN_PLACE   # nothing copied, so no h2d phase (N.batch_phases)

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x0, self.y0 = x, y
        self.x, self.y = x, y

    def reorder(self, order: np.ndarray) -> None:
        self.x, self.y = self.x0[order], self.y0[order]

    def get(self, lo: int, hi: int, phase, counts):
        return self.x[lo:hi].T, self.y[lo:hi].T


class DeviceBatches:
    def __init__(self, cupy, x, y, mode: str, max_local: int, next_piece=None):
        self.cp, self.mode, self.max_local = cupy, mode, max_local
        self._static: dict = {}  # piece size -> the static buffers' views (resident data in graph mode)
        self.stream = cupy.cuda.get_current_stream()
        x, y = device_view(x), device_view(y)   # bf16: its bits
        self._set_host(x, y)
        self.prefetcher = None
        if mode in N.PREFETCH_TRANSFERS:
            from .gpu.prefetch import Prefetcher
            self.prefetcher = Prefetcher(cupy, self, next_piece, staged=host_memory(mode) == N.PAGEABLE)
        elif mode != N.RESIDENT:
            self.xd = cupy.empty((max_local, x.shape[1]), x.dtype)
            self.yd = cupy.empty((max_local, y.shape[1]), y.dtype)

    def _set_host(self, x, y):
        """The samples in their first order (x0, y0: every epoch's order permutes it) and the arrays the
        pieces are read from (xh, yh on the host; xr, yr resident)."""
        memory = host_memory(self.mode)
        if memory == N.PINNED:
            import cupyx
            self.x0, self.y0 = x, y
            self.xh = cupyx.empty_pinned(x.shape, x.dtype)
            self.yh = cupyx.empty_pinned(y.shape, y.dtype)
            self.xh[...] = x
            self.yh[...] = y
        elif memory == N.PAGEABLE:
            self.x0, self.y0 = x, y
            self.xh, self.yh = np.ascontiguousarray(x), np.ascontiguousarray(y)
        else:
            self.x0, self.y0 = self.cp.asarray(x), self.cp.asarray(y)
            self.xr, self.yr = self.x0, self.y0

    def reorder(self, order: np.ndarray) -> None:
        """Epoch order `order` of the first order (not of the last epoch's)."""
        if self.mode == N.RESIDENT:
            idx = self.cp.asarray(order)
            self.xr, self.yr = self.x0[idx], self.y0[idx]
            return
        if self.prefetcher is not None:
            self.prefetcher.reset()   # the copies in flight read the old order
        if host_memory(self.mode) == N.PINNED:   # into the same pinned buffers,
            if self.prefetcher is None:                        # once no copy reads them (reset waited
                self.stream.synchronize()                      # for the prefetching copies)
            # mode "clip": an order is a permutation, and "raise" would buffer the whole output first
            np.take(self.x0, order, axis=0, out=self.xh, mode="clip")
            np.take(self.y0, order, axis=0, out=self.yh, mode="clip")
        else:
            self.xh, self.yh = self.x0[order], self.y0[order]

    def close(self) -> None:
        """The prefetching pipeline's threads ended (no-op without one)."""
        if self.prefetcher is not None:
            self.prefetcher.close()

    def static(self, lo: int, hi: int, counts):
        """Piece [lo, hi) of resident data copied (device to device) into the static buffers; x, y as `get`."""
        if self.mode != N.RESIDENT:
            raise RuntimeError("static(): only resident data; copied pieces already land in static buffers")
        b = hi - lo
        views = self._static.get(b)
        if views is None:  # made once per piece size: array views cost host time comparable to a launch
            if not self._static:
                self.xd = self.cp.empty((self.max_local, self.xr.shape[1]), self.xr.dtype)
                self.yd = self.cp.empty((self.max_local, self.yr.shape[1]), self.yr.dtype)
            xd, yd = self.xd[:b], self.yd[:b]
            views = self._static[b] = (xd, yd, xd.T, yd.T, xd.nbytes + yd.nbytes)
        xd, yd, xt, yt, nbytes = views
        rt = self.cp.cuda.runtime
        for dst, src in ((xd, self.xr), (yd, self.yr)):  # rows lo..hi of the (reordered) resident arrays
            row = src.strides[0]
            rt.memcpyAsync(dst.data.ptr, src.data.ptr + lo * row, b * row, rt.memcpyDeviceToDevice, self.stream.ptr)
        counts.bytes_d2d += nbytes
        return xt, yt

    def get(self, lo: int, hi: int, phase, counts):
        if self.mode == N.RESIDENT:
            return self.xr[lo:hi].T, self.yr[lo:hi].T  # no copy, so no h2d phase (and no CUDA event)
        b = hi - lo
        with phase(Phase.H2D):
            if self.prefetcher is not None:   # copied ahead: the compute stream waits for it (and the next starts)
                return self.prefetcher.get(lo, hi, counts)
            xd, yd = self.xd[:b], self.yd[:b]
            # on the step's stream, after the previous step's kernels (from pageable memory blocking the host)
            xd.set(self.xh[lo:hi], stream=self.stream)
            yd.set(self.yh[lo:hi], stream=self.stream)
            counts.bytes_h2d += xd.nbytes + yd.nbytes
            return xd.T, yd.T  # views: the kernels read the rows as they lie
