"""The network on one GPU: the Network's step (perfmlp/mlp.py) with each kernel a fused CUDA kernel
(kernels.cu) or a GEMM (gemm.py): forward 2 GEMMs, bias+sigmoid and bias add; the loss (softmax,
cross-entropy and output delta, summed into the gradient buffer's loss slot); the fused output backward
and the hidden weight gradient's GEMM; one update of every parameter (`fuse_output` off: the output
backward as 2 GEMMs, a row sum and the sigmoid derivative). Buffers are made for the largest piece and
sliced; kernel arguments are made once and cached (their construction costs about a launch).
Activations are in the precision's storage type (device_dtype), parameters and gradients in the master
type; bf16 and fp16 GEMMs read a 16-bit weight copy (`wcopy`); fp16's loss scale lives on the device
(`ls`), so the step stays one CUDA graph."""
from __future__ import annotations

import functools

import numpy as np

from .. import names as N
from ..mixed import INIT_SCALE
from ..mlp import Network
from ..model.costs import OUTPUT_GRAD_COLS, OWN_KERNELS, fused_output, output_grad_splits, output_grad_sums
from .gemm import cublas_gemm, gemm
from .kernels import LAUNCH, device_dtype, kernels

_BLOCK = 256
CHECK_BLOCKS_PER_SM = 4


def _grid(n):
    return ((n + _BLOCK - 1) // _BLOCK,), (_BLOCK,)


def check_grid(cupy, n):
    """grad_check's grid: at most CHECK_BLOCKS_PER_SM blocks an SM, striding over n (kernels.cu says why)."""
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    return (min((n + _BLOCK - 1) // _BLOCK, CHECK_BLOCKS_PER_SM * sms),)


class GpuNetwork(Network):

    def __init__(self, cupy, layer_sizes, precision, lr, reg, global_batch, max_local: int, gemm_kind: str):
        super().__init__(cupy, layer_sizes, precision, lr, reg, global_batch)
        self.cp = cupy
        prec, dtype, act = self.precision, self.dtype, self.act_dtype
        mod = kernels(cupy, prec, layer_sizes[-1]) if fused_output(layer_sizes) else kernels(cupy, prec)
        self.k = {n: mod.get_function(n) for n in (*OWN_KERNELS.values(), "to_storage")}
        self.gemm_kind = gemm_kind
        # every kernel of the step names this stream (never "the current", which graph capture and callers change)
        self.stream = cupy.cuda.get_current_stream()
        self._cublas = cublas_gemm(cupy, dtype, self.stream, prec.name) if gemm_kind == N.CUBLAS else None
        self._views: dict = {}
        self._ints: dict = {}   # launch shapes and argument tuples, made once
        self.T = self.dtype.type
        # scalar kernel arguments, each value made once
        self._i32, self._i64 = functools.cache(np.int32), functools.cache(np.int64)
        self._scale = functools.cache(lambda batch, T=self.T: T(1.0 / batch))
        self.ce_acc = cupy.zeros(1, dtype=dtype)
        L = len(layer_sizes) - 1
        # pre-activations/activations z and deltas d per layer (n_l x max_local)
        self._bufs = {"z": [cupy.empty((layer_sizes[l + 1], max_local), act) for l in range(L)],
                      "d": [cupy.empty((layer_sizes[l + 1], max_local), act) for l in range(L)]}
        # bf16, fp16: the weights' 16-bit copy the GEMMs read (the update rewrites it)
        self.wcopy = cupy.empty(self.p.n_weights, act) if prec.mixed else None
        self._wviews, off = [], 0
        for w in self.p.W if self.wcopy is not None else ():
            self._wviews.append(self.wcopy[off:off + w.size].reshape(w.shape))
            off += w.size
        # the loss scale {scale, the update's multiplier} and {overflow, blocks done, good steps, skipped}
        self.ls = cupy.asarray(np.array([INIT_SCALE, 1.0], dtype))
        self.ls_state = cupy.zeros(4, np.int32)
        # the fused output backward's partial sums, one set per column block
        self._partials = cupy.empty(output_grad_splits(max_local) * output_grad_sums(layer_sizes[-1], layer_sizes[-2]),
                                    dtype) if L >= 2 else None

    def storage_type(self):
        return device_dtype(self.precision)   # bf16: its uint16 bits

    def gemm_weight(self, l: int):
        return self._wviews[l] if self.wcopy is not None else self.p.W[l]

    def set_params(self, weights, biases=None) -> None:
        super().set_params(weights, biases)
        if self.wcopy is not None:
            n = self.p.n_weights
            self._launch("to_storage", *_grid(n), (self.p.weights, self.wcopy, np.int64(n)))

    def loss_scale(self) -> tuple[float, int]:
        """(the loss scale now, steps skipped for an overflow): fp16's device state, synchronised."""
        return float(self.ls[0].get(stream=self.stream)), int(self.ls_state[3].get(stream=self.stream))

    capture: list | None = None  # when a list: (a, b, out) of every GEMM, for timing them alone
    # when a list: (name, relaunch) of every own kernel launched, relaunch() launching it again
    # with the same grid, block, arguments and stream, for timing them alone (perfmlp/calibrate/kernels.py)
    capture_kernels: list | None = None

    def buffer(self, kind: str, layer: int, b: int):
        """A C-contiguous rows x b view on the front of a rows x max buffer (made once per size)."""
        key = (kind, layer, b)
        v = self._views.get(key)
        if v is None:
            buf = self._bufs[kind][layer]
            v = self._views[key] = buf.ravel()[: buf.shape[0] * b].reshape(buf.shape[0], b)
        return v

    # -- the kernels ----------------------------------------------------------------------
    def _launch(self, name, grid, block, args):
        fn, s = self.k[name], self.stream
        fn(grid, block, args, stream=s)
        if self.capture_kernels is not None:
            self.capture_kernels.append((name, lambda: fn(grid, block, args, stream=s)))

    def gemm_again(self, a, b, out):
        """One of the step's GEMMs (as net.capture recorded it) again, with the step's handle on the step's
        stream whatever stream is current: what perfmlp/calibrate/ times."""
        if self._cublas is not None and out is not None:
            return self._cublas(a, b, out)
        return gemm(self.cp, self.gemm_kind, a, b, out=out, stream=self.stream)

    def _gemm(self, a, b, out):
        if self.capture is not None:
            self.capture.append((a, b, out))
        return self.gemm_again(a, b, out)

    def _bias_sigmoid(self, z, bias):
        n = z.size
        g, blk = _grid(-(-n // (16 // z.itemsize)))   # a thread takes 16 bytes (kernels.cu: VEC)
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
                                                 self._scale(self.global_batch), self.ls))
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
            wcopy = self.wcopy if self.wcopy is not None else p.flat   # (not written without a copy)
            args = self._ints["update"] = (_grid(n), (p.flat, g.flat, np.int64(n), np.int64(p.n_weights),
                                                      self.T(self.lr), self.T(self.reg), g.extra, self.ce_acc,
                                                      wcopy, self.ls), (g.flat, np.int64(n), self.ls, self.ls_state),
                                           check_grid(self.cp, n))
        (grid, blk), a, check, cgrid = args
        if self.scaler is not None:   # fp16: the gradients' finite check sets the update's multiplier
            self._launch("grad_check", cgrid, blk, check)
        self._launch("sgd_update", grid, blk, a)

    def sgd_range(self, lo: int, hi: int, n_weights: int, with_loss: bool) -> None:
        """The update on flat elements [lo, hi), the first n_weights weights (a piece of gpu/sliced.py);
        `with_loss`: the piece ends with the loss slot, else a zero of its own. Not with fp16's loss scaling."""
        key = ("range", lo, hi)
        args = self._ints.get(key)
        if args is None:
            p, g, n = self.p, self.g, hi - lo
            slot = g.extra if with_loss else self.cp.zeros(1, self.dtype)
            wcopy = self.wcopy[lo:lo + n_weights] if self.wcopy is not None else p.flat[lo:hi]
            args = self._ints[key] = (_grid(n), (p.flat[lo:hi], g.flat[lo:hi], np.int64(n), np.int64(n_weights),
                                                  self.T(self.lr), self.T(self.reg), slot, self.ce_acc, wcopy,
                                                  self.ls))
        (grid, blk), a = args
        self._launch("sgd_update", grid, blk, a)

    def take_epoch_loss_sum(self) -> float:
        v = float(self.ce_acc.get(stream=self.stream)[0])  # waits for the step's stream, once per epoch
        self.cp.cuda.runtime.memsetAsync(self.ce_acc.data.ptr, 0, self.ce_acc.nbytes, self.stream.ptr)
        return v
