"""The network on one GPU: the Network's step (perfmlp/mlp.py) with each
kernel a fused CUDA kernel (kernels.cu) or a GEMM (gemm.py).

A step launches 9 kernels for the 784-H-10 network: forward 4 (2 GEMMs,
bias+sigmoid, bias add), loss 1 (softmax + cross-entropy + output delta,
the loss summed into the gradient buffer's slot), backward 3 (the output
layer's fused backward: per block of columns dz and partial sums of its
weight and bias gradients and of the hidden bias gradient, then those
partials added in order; the hidden weight gradient's GEMM), update 1
(weights and biases in one pass, which also moves the loss slot into the
epoch's running sum and clears it). With `fuse_output` off the output
layer's backward is 2 GEMMs, a row sum and the sigmoid derivative with the
hidden bias gradient (11 kernels).

Buffers are allocated once for the largest piece and sliced for a shorter
one; kernel arguments (scalars, views) are made once and cached, as their
construction costs host time comparable to a launch.
"""
from __future__ import annotations

import numpy as np

from ..mlp import Network
from ..model.costs import OUTPUT_GRAD_COLS, OWN_KERNELS, fused_output, output_grad_splits, output_grad_sums
from .gemm import cublas_gemm, gemm
from .kernels import LAUNCH, kernels

_BLOCK = 256


def _grid(n):
    return ((n + _BLOCK - 1) // _BLOCK,), (_BLOCK,)


class GpuNetwork(Network):

    def __init__(self, cupy, layer_sizes, dtype, lr, reg, global_batch, max_local: int, gemm_kind: str):
        super().__init__(cupy, layer_sizes, dtype, lr, reg, global_batch)
        self.cp = cupy
        mod = kernels(cupy, dtype, layer_sizes[-1]) if fused_output(layer_sizes) else kernels(cupy, dtype)
        self.k = {n: mod.get_function(n) for n in OWN_KERNELS.values()}
        self.gemm_kind = gemm_kind
        # every kernel of the step goes to this stream, named at each launch
        # (never "the current stream", which CUDA-graph capture and callers change)
        self.stream = cupy.cuda.get_current_stream()
        self._cublas = cublas_gemm(cupy, dtype, self.stream.ptr) if gemm_kind == "cublas" else None
        self._views: dict = {}
        self._ints: dict = {}
        self.T = self.dtype.type
        self.ce_acc = cupy.zeros(1, dtype=dtype)
        L = len(layer_sizes) - 1
        # pre-activations/activations z and deltas d per layer (n_l x max_local)
        self._bufs = {"z": [cupy.empty((layer_sizes[l + 1], max_local), dtype) for l in range(L)],
                      "d": [cupy.empty((layer_sizes[l + 1], max_local), dtype) for l in range(L)]}
        # the fused output backward's partial sums, one set per column block
        self._partials = cupy.empty(output_grad_splits(max_local) * output_grad_sums(layer_sizes[-1], layer_sizes[-2]),
                                    dtype) if L >= 2 else None

    capture: list | None = None  # when a list: (a, b, out) of every GEMM, for timing them alone
    # when a list: (name, relaunch) of every own kernel launched, relaunch() launching it again
    # with the same grid, block, arguments and stream, for timing them alone (perfmlp/calibrate/kernels.py)
    capture_kernels: list | None = None

    def buffer(self, kind: str, layer: int, b: int):
        """A C-contiguous rows x b array on the front of a rows x max buffer
        (made once per buffer and piece size)."""
        key = (kind, layer, b)
        v = self._views.get(key)
        if v is None:
            buf = self._bufs[kind][layer]
            v = self._views[key] = buf.ravel()[: buf.shape[0] * b].reshape(buf.shape[0], b)
        return v

    def _i32(self, v):
        r = self._ints.get(("i", v))
        if r is None:
            r = self._ints[("i", v)] = np.int32(v)
        return r

    def _i64(self, v):
        r = self._ints.get(("l", v))
        if r is None:
            r = self._ints[("l", v)] = np.int64(v)
        return r

    def _scale(self, batch):
        r = self._ints.get(("s", batch))
        if r is None:
            r = self._ints[("s", batch)] = self.T(1.0 / batch)
        return r

    # -- the kernels ----------------------------------------------------------------------
    def _launch(self, name, grid, block, args):
        fn, s = self.k[name], self.stream
        fn(grid, block, args, stream=s)
        if self.capture_kernels is not None:
            self.capture_kernels.append((name, lambda: fn(grid, block, args, stream=s)))

    def _gemm(self, a, b, out):
        if self.capture is not None:
            self.capture.append((a, b, out))
        if self._cublas is not None and out is not None:
            return self._cublas(a, b, out)
        return gemm(self.cp, self.gemm_kind, a, b, out=out, stream=self.stream)

    def _bias_sigmoid(self, z, bias):
        n = z.size
        g, blk = _grid(n)
        self._launch("bias_sigmoid", g, blk, (z, bias, self._i64(n), self._i32(z.shape[1])))
        return z

    def _bias_add(self, z, bias):
        n = z.size
        g, blk = _grid(n)
        self._launch("bias_add", g, blk, (z, bias, self._i64(n), self._i32(z.shape[1])))
        return z

    def _output_backward(self, w, d, a, gw, gb, out, gb_below):
        C, H = w.shape
        b = d.shape[1]
        shape = self._ints.get(("ob", C, H, b))
        if shape is None:
            splits, threads = output_grad_splits(b), LAUNCH["OB_THREADS"]
            rows = LAUNCH["OB_WROWS"] * threads // 32
            shape = self._ints[("ob", C, H, b)] = (
                ((H + rows - 1) // rows + 1, splits), (threads,), *_grid(output_grad_sums(C, H)),
                np.int32(C), np.int32(H), np.int32(b), np.int32(OUTPUT_GRAD_COLS), np.int32(splits))
        grid, block, sgrid, sblock, c, h, cols, bcols, splits = shape
        self._launch("output_backward", grid, block, (w, d, a, out, self._partials, c, h, cols, bcols))
        self._launch("partial_sums", sgrid, sblock, (self._partials, splits, c, h, gw, gb_below, gb))
        return out

    def _softmax_ce_grad(self, z, y, out):
        """y: the C x b transposed view of the b x C one-hot rows."""
        assert y.T.flags.c_contiguous, "labels must be the transposed view of b x C rows"
        C, b = z.shape
        g, blk = _grid(b)
        self._launch("softmax_ce_grad", g, blk, (z, y, out, self.g.extra, self._i32(C), self._i32(b),
                                                 self._scale(self.global_batch)))
        return out

    def _row_sum(self, d, out):
        self._launch("row_sum", (d.shape[0],), (_BLOCK,), (d, out, self._i32(d.shape[1])))
        return out

    def _sigmoid_grad_row_sum(self, da, a, db):
        self._launch("sigmoid_grad_row_sum", (a.shape[0],), (_BLOCK,), (da, a, db, self._i32(a.shape[1])))
        return da  # dz, in place

    def _sgd_update(self) -> None:
        args = self._ints.get("update")
        if args is None:
            p, g = self.p, self.g
            n = p.n_params
            args = self._ints["update"] = (_grid(n), (p.flat, g.flat, np.int64(n), np.int64(p.n_weights),
                                                      self.T(self.lr), self.T(self.reg), g.extra, self.ce_acc))
        (grid, blk), a = args
        self._launch("sgd_update", grid, blk, a)

    def take_epoch_loss_sum(self) -> float:
        v = float(self.ce_acc.get(stream=self.stream)[0])  # waits for the step's stream, once per epoch
        self.cp.cuda.runtime.memsetAsync(self.ce_acc.data.ptr, 0, self.ce_acc.nbytes, self.stream.ptr)
        return v
