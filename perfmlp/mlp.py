"""The network math, generic over the array module (NumPy or CuPy).

Samples are columns: X is D x b, W_l is n_l x n_{l-1}. Hidden layers are sigmoid, the output softmax;
J = (1/B) sum_i CE_i + (lambda/2) sum_l ||W_l||^2. Parameters and gradients each live in one flat buffer
[W_1..W_L, b_1..b_L] (the update is two elementwise passes whatever the depth); the gradient buffer's
extra slot holds the rank's cross-entropy sum, reduced with it.

The step is written once, in `Network`, as kernel calls: each records its operations (name, launched
shape: what the model prices) into `ops` when that is a list, then runs `_<kernel>`, the only part a
backend overrides (gpu/network.py); the model's `step_kernels` lists the same (tested). `dtype` is the
master type, `act_dtype` the activations' (perfmlp/mixed.py)."""
from __future__ import annotations

from itertools import accumulate

import numpy as np

from .mixed import LossScale, gemm_operand, storage_dtype
from .model.costs import LOSS_SLOTS, fused_output, output_grad_splits, output_grad_sums, row_blocks
from .model.precision import precision as precision_of
from .params import load_resume


class FlatParams:
    """Views W[l], b[l] into one contiguous buffer `flat` (plus `extra` slots)."""

    def __init__(self, xp, layer_sizes, dtype, extra: int = 0):
        self.layer_sizes = tuple(layer_sizes)
        shapes = [(m, n) for n, m in zip(layer_sizes, layer_sizes[1:])]
        sizes = [m * n for m, n in shapes] + [m for m, _ in shapes]   # every W_l, then every b_l
        self.n_weights = sum(sizes[:len(shapes)])
        self.n_biases = sum(layer_sizes[1:])
        self.n_params = self.n_weights + self.n_biases
        self.flat = xp.zeros(self.n_params + extra, dtype=dtype)
        views = [self.flat[end - k:end] for k, end in zip(sizes, accumulate(sizes))]
        self.W = [v.reshape(shape) for v, shape in zip(views, shapes)]
        self.b = views[len(shapes):]
        self.weights = self.flat[:self.n_weights]
        self.biases = self.flat[self.n_weights:self.n_params]
        self.params = self.flat[:self.n_params]
        self.extra = self.flat[self.n_params:]


def init_weights(layer_sizes, seed: int) -> list[np.ndarray]:
    """Host float64 initial weights, W_l ~ N(0, 1/n_{l-1}), alike on every backend and rank."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((layer_sizes[i + 1], layer_sizes[i])) / np.sqrt(layer_sizes[i])
            for i in range(len(layer_sizes) - 1)]


def start_params(net, cfg) -> None:
    """A run's first parameters (cfg: a Config): --resume's file, else the seed's weights (biases zero)."""
    if cfg.resume:
        net.load_params(load_resume(cfg.resume, cfg.layer_sizes))
    else:
        net.set_params(init_weights(cfg.layer_sizes, cfg.seed))


def sigmoid(xp, z):
    return 1 / (1 + xp.exp(-z))


class Network:
    """Forward (x: D x b), loss (y: C x b one-hot; delta (P - Y) / B), backward and update
    (w <- w - lr (g + reg w), b <- b - lr g) on flat buffers, for any array module."""

    combines_output = False   # a model group's column-split output (strategies/shard.py's property)

    def __init__(self, xp, layer_sizes, precision, lr: float, reg: float, global_batch: int):
        self.xp = xp
        self.precision = precision_of(precision)   # a --precision name (or a float32/float64 dtype)
        self.dtype = np.dtype(self.precision.master)
        self.act_dtype = self.storage_type()
        self._operand = gemm_operand(self.precision)   # None: the products in the operands' own type
        self.scaler = LossScale() if self.precision.loss_scaling else None
        self.p = FlatParams(xp, layer_sizes, self.dtype)
        self.g = FlatParams(xp, layer_sizes, self.dtype, extra=LOSS_SLOTS)
        self.lr, self.reg = lr, reg
        self.global_batch = global_batch
        self.acts: list = []
        self.delta = None
        self.ops: list | None = None   # (name, shape) of every operation computed, when a list
        self.kernels_launched = 0      # kernels launched (a fused kernel computes several operations)
        self._update_ops = (("update_weights", (self.p.n_weights,)), ("update_biases", (self.p.n_biases,)))
        self._check_op = ("grad_check", (self.p.n_params,))   # fp16: the update's finite check
        # the output layer's backward as the fused pair where the model's rule allows it
        self.fuse_output = fused_output(layer_sizes)
        # overlap: grad_ready(lo, hi) is called once the backward pass has written flat elements [lo, hi)
        self.grad_ready = None
        self.set_buckets(None)
        # A sliced schedule's first-layer forward, f(x, out) -> z (perfmlp/slices.py); None: one GEMM.
        self.first_forward = None

    def set_buckets(self, bucket_bytes: int | None) -> None:
        """Row blocks (and their flat offsets) of each weight gradient."""
        sizes = self.p.layer_sizes
        self._blocks, off = [], 0
        for l in range(len(sizes) - 1):
            n_out, n_in = sizes[l + 1], sizes[l]
            self._blocks.append([(r0, r1, off + r0 * n_in, off + r1 * n_in)
                                 for r0, r1 in row_blocks(n_out, n_in, self.dtype.itemsize, bucket_bytes)])
            off += n_out * n_in

    def set_first_rows(self, rows) -> None:
        """The first layer's weight gradient in row slices [(r0, r1), ...], grad_ready after each."""
        n_in = self.p.layer_sizes[0]
        self._blocks[0] = [(r0, r1, r0 * n_in, r1 * n_in) for r0, r1 in rows]

    def set_params(self, weights, biases=None) -> None:
        for l, w in enumerate(weights):
            self.p.W[l][...] = self.xp.asarray(w, dtype=self.dtype)
        for l, bias in enumerate(biases or []):
            self.p.b[l][...] = self.xp.asarray(bias, dtype=self.dtype)

    def load_params(self, params: dict) -> None:
        """set_params from a mapping W1, b1, W2, b2, ... (get_params's)."""
        L = range(1, len(self.p.layer_sizes))
        self.set_params([params[f"W{l}"] for l in L], [params[f"b{l}"] for l in L])

    def get_params(self) -> dict[str, np.ndarray]:
        """Host copies: W1, b1, W2, b2, ..."""
        return {f"{k}{l}": to_host(a) for l, (w, b) in enumerate(zip(self.p.W, self.p.b), start=1)
                for k, a in (("W", w), ("b", b))}

    # -- the step: the same sequence of kernels on every backend -------------------
    def forward(self, x) -> None:
        L = len(self.p.W)
        b = x.shape[1]
        a = x
        self.acts = [x]
        for l in range(L):
            if l == 0 and self.first_forward is not None:
                z = self.first_forward(a, self.buffer("z", l, b))
            else:
                z = self.gemm(self.gemm_weight(l), a, out=self.buffer("z", l, b))
            if l < L - 1:
                self._preactivation_done(l, z)
                a = self.bias_sigmoid(z, self.p.b[l])
            else:
                a = self.bias_add(z, self._output_bias())  # logits
            self.acts.append(a)

    def loss(self, y) -> None:
        z = self.acts[-1]
        self.delta = self.softmax_ce_grad(z, y, self.buffer("d", len(self.p.W) - 1, z.shape[1]))

    def backward(self) -> None:
        L = len(self.p.W)
        d = self.delta
        b = d.shape[1]
        ready = self.grad_ready
        for l in range(L - 1, -1, -1):
            blocks = self._blocks[l]
            if l == L - 1 and self.fuse_output:
                # dW, db, W^T delta, the sigmoid gradient and the layer below's db in one pass
                # (no _input_grad_done: a sharded output layer is never row-split)
                d = self.output_backward(self.p.W[l], d, self.acts[l], self.g.W[l], self.g.b[l],
                                         self.buffer("d", l - 1, b), self.g.b[l - 1])
                if ready is not None:
                    for _, _, lo, hi in blocks:
                        ready(lo, hi)
                    if l == 1:
                        ready(self.p.n_weights, self.g.flat.size)  # every bias and the loss slot are written
                continue
            for r0, r1, lo, hi in blocks:                                   # dW = delta a^T (in row blocks)
                if len(blocks) == 1:   # no slice views: each costs host time on CuPy, in the eager step's hot path
                    self.gemm(d, self.acts[l], out=self.g.W[l], trans_b=True)
                else:
                    self.gemm(d[r0:r1], self.acts[l], out=self.g.W[l][r0:r1], trans_b=True)
                if ready is not None:
                    ready(lo, hi)
            if l == L - 1:
                self.row_sum(d, self.g.b[l])                                # the output layer's db
            if l > 0:
                da = self.gemm(self.gemm_weight(l), d, out=self.buffer("d", l - 1, b), trans_a=True)
                self._input_grad_done(l, da)
                d = self.sigmoid_grad_row_sum(da, self.acts[l], self.g.b[l - 1])  # dz and the layer's db
            if ready is not None and l == min(1, L - 1):
                ready(self.p.n_weights, self.g.flat.size)  # every bias and the loss slot are written

    def storage_type(self):
        """The activations' and deltas' array type."""
        return storage_dtype(self.precision)

    def gemm_weight(self, l: int):
        """Layer l's weights as its GEMMs read them (the GPU's 16-bit precisions: a copy)."""
        return self.p.W[l]

    # hooks for a sharded network (perfmlp/strategies/shard.py): no-ops here
    def _preactivation_done(self, l: int, z) -> None:
        """Hidden layer l's z = W a is computed, before its bias."""

    def _input_grad_done(self, l: int, da) -> None:
        """W_l^T delta (the gradient of layer l's input) is computed."""

    def _output_bias(self):
        return self.p.b[-1]

    def update(self) -> None:
        if self.scaler is not None:
            self._record(self._check_op)
        self._record(*self._update_ops)
        self._sgd_update()

    # -- kernels: record what each computes, then compute it --------------------------
    def _record(self, *ops) -> None:
        if self.ops is not None:
            self.ops.extend(ops)
            self.kernels_launched += 1

    def gemm(self, a, b, out=None, trans_a=False, trans_b=False):
        """out = op(a) @ op(b), recorded as an (M, N, K) GEMM."""
        aa = a.T if trans_a else a
        bb = b.T if trans_b else b
        self._record(("gemm", (aa.shape[0], bb.shape[1], aa.shape[1])))
        return self._gemm(aa, bb, out)

    def bias_sigmoid(self, z, bias):
        self._record(("bias_sigmoid", z.shape))
        return self._bias_sigmoid(z, bias)

    def bias_add(self, z, bias):
        self._record(("bias_add", z.shape))
        return self._bias_add(z, bias)

    def output_backward(self, w, d, a, gw, gb, out, gb_below):
        """The output layer's backward in two kernels (partial sums per column block, their sum):
        gw = d a^T, gb = rows of d summed, `out` = dz = (w^T d) a (1 - a), gb_below = rows of dz summed."""
        C, H, b = w.shape[0], w.shape[1], d.shape[1]
        self._record(("output_backward", (C, H, b)))
        self._record(("partial_sums", (output_grad_sums(C, H), output_grad_splits(b))))
        return self._output_backward(w, d, a, gw, gb, out, gb_below)

    def softmax_ce_grad(self, z, y, out):
        """Softmax, the cross-entropy sum into the loss slot, delta = (P - Y) / B."""
        self._record(("softmax_ce_grad", z.shape))
        return self._softmax_ce_grad(z, y, out)

    def row_sum(self, d, out):
        self._record(("row_sum", d.shape))
        return self._row_sum(d, out)

    def sigmoid_grad_row_sum(self, da, a, db):
        """dz = da * a * (1 - a), and db = the row sums of dz."""
        self._record(("sigmoid_grad", a.shape), ("row_sum", a.shape))
        return self._sigmoid_grad_row_sum(da, a, db)

    # -- the NumPy (array-generic) implementations ------------------------------------
    def buffer(self, kind: str, layer: int, b: int):   # a preallocated output for a kernel, or None
        return None

    def _f(self, x):   # x in the master type (the kernels' arithmetic)
        return x.astype(self.dtype, copy=False)

    def _act(self, x):   # x stored at the activation width
        return x.astype(self.act_dtype, copy=False)

    def _gemm(self, a, b, out):
        if self._operand is None:
            return self.xp.matmul(a, b, out=out)
        r = self.xp.matmul(self._operand(a), self._operand(b))   # float32 products and accumulation
        if out is None:
            return self._act(r)
        out[...] = r
        return out

    def _bias_sigmoid(self, z, bias):
        return self._act(sigmoid(self.xp, self._f(z) + bias[:, None]))

    def _bias_add(self, z, bias):
        return self._act(self._f(z) + bias[:, None])

    def _output_backward(self, w, d, a, gw, gb, out, gb_below):
        # the GPU's fused kernel: float32 (FFMA) products of the stored values, the float32 weights
        df = self._f(d)
        self.xp.matmul(df, self._f(a).T, out=gw)
        self.xp.sum(df, axis=1, out=gb)
        return self._sigmoid_grad_row_sum(self.xp.matmul(w.T, df, out=out), a, gb_below)

    def _softmax_ce_grad(self, z, y, out):
        # stable: log sum exp(z - max) - (z_y - max)
        xp = self.xp
        zf = self._f(z)
        zs = zf - zf.max(axis=0, keepdims=True)
        e = xp.exp(zs)
        s = e.sum(axis=0, keepdims=True)
        ce = xp.log(s[0]) - (zs * y).sum(axis=0)
        self.g.extra[0] = ce.sum()
        scale = 1.0 / self.global_batch * (self.scaler.scale if self.scaler is not None else 1.0)
        return self._act((e / s - y) * self.dtype.type(scale))

    def _row_sum(self, d, out):
        return self.xp.sum(self._f(d), axis=1, out=out)

    def _sigmoid_grad_row_sum(self, da, a, db):
        af = self._f(a)
        dz = self._f(da) * af * (1 - af)
        self.xp.sum(dz, axis=1, out=db)
        return self._act(dz)

    def _sgd_update(self) -> None:
        p, g, T = self.p, self.g, self.dtype.type
        if self.scaler is None:
            self.sgd_weights(0, p.n_weights)
            self.sgd_biases()
            return
        inv = self.scaler.unscale(bool(self.xp.isfinite(g.params).all()))   # 0: an overflow, skip the step
        if inv:
            p.weights -= T(self.lr) * (g.weights * T(inv) + T(self.reg) * p.weights)
            p.biases -= T(self.lr) * (g.biases * T(inv))

    def sgd_weights(self, lo: int, hi: int) -> None:
        """p <- p - lr * (g + reg * p) on the flat weight elements [lo, hi) (NumPy; unscaled gradients)."""
        p, g, T = self.p.flat[lo:hi], self.g.flat[lo:hi], self.dtype.type
        p -= T(self.lr) * (g + T(self.reg) * p)

    def sgd_biases(self) -> None:
        """p <- p - lr * g on every bias (NumPy; unscaled gradients)."""
        self.p.biases -= self.dtype.type(self.lr) * self.g.biases

    # -- outside the step ------------------------------------------------------------------
    def weight_penalty(self) -> float:
        """(lambda/2) sum ||W||^2 on the current weights (host scalar)."""
        w = self.p.weights
        return 0.5 * self.reg * float((w.astype(np.float64) ** 2).sum())

    def predict(self, x):
        """Class indices for the columns of x (no recording, no state kept)."""
        xp, a = self.xp, x
        for l in range(len(self.p.W)):
            z = self.p.W[l] @ a + self.p.b[l][:, None]
            a = sigmoid(xp, z) if l < len(self.p.W) - 1 else z
        return a.argmax(axis=0)

    def accuracy(self, x, labels: np.ndarray) -> float:
        """The share of the columns of x that `predict` gives their label."""
        return float((to_host(self.predict(x)) == labels).mean())


def to_host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.array(a, copy=True)
