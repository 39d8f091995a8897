"""One registry from operation to cost: FLOPs and device-memory bytes as
formulas of shapes and element size (docs/model.md, "Counting rule").

A multiply-add is 2 FLOPs at any precision; add, subtract, multiply, divide,
max, exp and log 1 each; a reduction of n values n - 1; not counted: index
arithmetic, copies, casts, argmax, evaluation, loss scaling. Bytes: every
input read and output written once at its width (`Widths`); copies and
collectives count the buffer handed over (`batch_counts`). The trainer's
counters are these formulas applied to what it launches.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, NamedTuple

from .precision import precision as precision_of
from .. import names as N

OPS: dict[str, Callable[..., tuple[int, int]]] = {}


def register(name: str):
    """Register the cost formula of operation `name` (twice is an error)."""
    def deco(fn):
        if name in OPS:
            raise ValueError(f"operation {name!r} is already registered")
        OPS[name] = fn
        return fn
    return deco


class Widths(NamedTuple):
    """Bytes per element of the activations and the parameters; fp16's finite check before the update."""
    act: int
    param: int
    grad_check: bool = False


def as_widths(itemsize) -> Widths:
    return itemsize if isinstance(itemsize, Widths) else Widths(int(itemsize), int(itemsize))


def widths(precision) -> Widths:
    """The element widths of a precision (model/precision.py)."""
    p = precision_of(precision)
    return Widths(p.act_bytes, p.param_bytes, p.loss_scaling)


@lru_cache(maxsize=4096)
def op_cost(name: str, shape: tuple, itemsize) -> tuple[int, int]:
    """(FLOPs, bytes) of operation `name` at `shape`, elements of `itemsize` bytes (an int or Widths)."""
    try:
        fn = OPS[name]
    except KeyError:
        raise KeyError(f"no cost formula for operation {name!r}") from None
    return fn(*shape, w=as_widths(itemsize))


@register("gemm")
def _gemm(m, n, k, w):
    # C (m x n) = A (m x k) @ B (k x n): m*n dot products of length k
    return 2 * m * n * k, w.act * (m * k + k * n + m * n)


@register("bias_sigmoid")
def _bias_sigmoid(m, n, w):
    # a = 1 / (1 + exp(-(z + b))): add 1 + exp 1 + add 1 + div 1 per element
    return 4 * m * n, w.act * 2 * m * n + w.param * m


@register("bias_add")
def _bias_add(m, n, w):
    return m * n, w.act * 2 * m * n + w.param * m


@register("softmax_ce_grad")
def _softmax_ce_grad(c, b, w):
    # per column: max, subtract, exp, sum, divide (5c - 2); cross-entropy 2; delta (p - y) / B 2c;
    # then the sum of b column losses: b - 1
    return b * (5 * c - 2 + 2 + 2 * c) + (b - 1), w.act * 3 * c * b + w.param


@register("row_sum")
def _row_sum(m, n, w):
    # bias gradient: m sums of n values
    return m * (n - 1), w.act * m * n + w.param * m


@register("sigmoid_grad")
def _sigmoid_grad(m, n, w):
    # dz = da * a * (1 - a): subtract, two multiplies
    return 3 * m * n, w.act * 3 * m * n


@register("output_backward")
def _output_backward(c, h, b, w):
    # the fused output backward (c x h weights, b samples): the FLOPs of dW, db, da, dz and the layer below's
    # db; reads delta, a and the float32 W, writes dz and a partial sum of dW and both db per column block
    f = (_gemm(c, h, b, w)[0] + _row_sum(c, b, w)[0] + _gemm(h, b, c, w)[0] + _sigmoid_grad(h, b, w)[0]
         + _row_sum(h, b, w)[0])
    return f, w.act * (c * b + h * b + h * b) + w.param * (c * h + output_grad_splits(b) * output_grad_sums(c, h))


@register("partial_sums")
def _partial_sums(n, splits, w):
    # n sums of `splits` partials in a fixed order: not FLOPs (as a split-K reduction is not)
    return 0, w.param * n * (splits + 1)


@register("grad_check")
def _grad_check(n, w):
    # fp16's loss scaling: every gradient read once, tested finite (not counted)
    return 0, w.param * n


@register("update_weights")
def _update_weights(n, w):
    # w -= lr * (g + reg * w); in bf16 and fp16 the weights' 16-bit copy is written too
    return 4 * n, w.param * 3 * n + (w.act * n if w.act < w.param else 0)


@register("update_biases")
def _update_biases(n, w):
    # b -= lr * g
    return 2 * n, w.param * 3 * n


# ---- a whole step from shapes ---------------------------------------------------

def itemsize(precision: str) -> int:
    """Bytes per element of a precision's activations and batch."""
    return precision_of(precision).act_bytes


# Overlapped communication's bucket (PyTorch DDP's bucket_cap_mb): larger weight gradients go in row blocks.
DEFAULT_BUCKET_BYTES = 25 << 20


def row_blocks(rows: int, cols: int, itemsize: int, bucket_bytes: int | None) -> list[tuple[int, int]]:
    """The fewest [r0, r1) row blocks of at most `bucket_bytes` a weight gradient goes in (None: one)."""
    if not bucket_bytes:
        return [(0, rows)]
    per = max(1, bucket_bytes // (cols * itemsize))
    n = -(-rows // per)
    return [piece(rows, n, i) for i in range(n)]


# The output layer is too thin for a GEMM library: with at most this many classes the trainer runs its
# backward as `output_backward` (per block of OUTPUT_GRAD_COLS columns: dz and partial sums) and
# `partial_sums` (added in a fixed order, so every run gives the same result); gpu/kernels.py: LAUNCH.
FUSED_OUTPUT_MAX_CLASSES = 16
OUTPUT_GRAD_COLS = 256


def fused_output(layer_sizes) -> bool:
    """The output layer's backward runs as the fused pair (few classes, a hidden layer below)."""
    return len(layer_sizes) >= 3 and layer_sizes[-1] <= FUSED_OUTPUT_MAX_CLASSES


def output_grad_splits(b: int, cols: int = OUTPUT_GRAD_COLS) -> int:
    """Column blocks (partial sums) of the fused output backward on b samples."""
    return -(-b // cols)


def output_grad_sums(c: int, h: int) -> int:
    """The sums the fused output backward reduces: dW (c x h), db (c) and the layer below's (h)."""
    return c * h + h + c


def step_kernels(layer_sizes, b: int, bucket_bytes: int | None = None, itemsize=4, fuse_output: bool = True,
                 output_grad_cols: int = OUTPUT_GRAD_COLS) -> dict[str, list[tuple[tuple[str, tuple], ...]]]:
    """The kernels of one step on a piece of b samples, per phase, in launch
    order, each the tuple of (operation, shape) it computes (perfmlp/mlp.py
    launches exactly these). `bucket_bytes`: weight gradients in `row_blocks`;
    `fuse_output=False`: no fused output backward."""
    L = len(layer_sizes) - 1
    w = as_widths(itemsize)
    fuse = fuse_output and fused_output(layer_sizes)
    fwd, bwd = [], []
    for l in range(1, L + 1):
        n_out, n_in = layer_sizes[l], layer_sizes[l - 1]
        fwd += [(("gemm", (n_out, b, n_in)),), (("bias_sigmoid" if l < L else "bias_add", (n_out, b)),)]
    for l in range(L, 0, -1):
        n_out, n_in = layer_sizes[l], layer_sizes[l - 1]
        if l == L and fuse:
            bwd.append((("output_backward", (n_out, n_in, b)),))
            bwd.append((("partial_sums", (output_grad_sums(n_out, n_in), output_grad_splits(b, output_grad_cols))),))
            continue
        for r0, r1 in row_blocks(n_out, n_in, w.param, bucket_bytes):
            bwd.append((("gemm", (r1 - r0, n_in, b)),))      # dW = delta @ a^T (a row block of it)
        if l == L:
            bwd.append((("row_sum", (n_out, b)),))           # the output layer's db
        if l > 1:
            bwd.append((("gemm", (n_in, b, n_out)),))        # da = W^T @ delta (none for the input)
            # dz = da * a * (1 - a) and the layer below's db, in one kernel
            bwd.append((("sigmoid_grad", (n_in, b)), ("row_sum", (n_in, b))))
    n_w, n_b = n_weights(layer_sizes), sum(layer_sizes[1:])
    update = [(("update_weights", (n_w,)), ("update_biases", (n_b,)))]  # one pass over the flat buffer
    if w.grad_check:   # fp16: the gradients' finite check decides whether the update runs
        update.insert(0, (("grad_check", (n_w + n_b,)),))
    return {"forward": fwd, "loss": [(("softmax_ce_grad", (layer_sizes[-1], b)),)], "backward": bwd,
            "update": update}


# The trainer's own kernels (perfmlp/gpu/*.cu) by the operations each computes; every other kernel is a GEMM.
OWN_KERNELS = {("bias_sigmoid",): "bias_sigmoid", ("bias_add",): "bias_add",
               ("softmax_ce_grad",): "softmax_ce_grad", ("row_sum",): "row_sum",
               ("sigmoid_grad", "row_sum"): "sigmoid_grad_row_sum", ("output_backward",): "output_backward",
               ("partial_sums",): "partial_sums", ("update_weights", "update_biases"): "sgd_update",
               ("grad_check",): "grad_check"}


def kernel_name(kernel) -> str:
    """The name the trainer launches a step kernel under: "gemm", or one of OWN_KERNELS'."""
    ops = tuple(name for name, _ in kernel)
    return "gemm" if ops == ("gemm",) else OWN_KERNELS[ops]


def kernel_shape(kernel) -> tuple:
    """The shape a kernel's calibrated time (kernel_s) is keyed by: its first operation's."""
    return tuple(kernel[0][1])


def step_ops(layer_sizes, b: int, bucket_bytes: int | None = None,
             itemsize=4, fuse_output: bool = True) -> dict[str, list[tuple[str, tuple]]]:
    """The operations of one training step, per phase, in launch order."""
    return {phase: [op for kernel in kernels for op in kernel]
            for phase, kernels in step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output).items()}


def weight_grad_elements(layer_sizes, fuse_output: bool = True) -> int:
    """Elements the weight-gradient GEMMs of a step write (not the fused output layer's)."""
    fused = fuse_output and fused_output(layer_sizes)
    return n_weights(layer_sizes) - (layer_sizes[-1] * layer_sizes[-2] if fused else 0)


def n_weights(layer_sizes) -> int:
    return sum(a * b for a, b in zip(layer_sizes, layer_sizes[1:]))


def n_params(layer_sizes) -> int:
    return n_weights(layer_sizes) + sum(layer_sizes[1:])


LOSS_SLOTS = 1  # the gradient buffer also carries the rank's cross-entropy sum


def grad_buffer_bytes(layer_sizes, itemsize: int) -> int:
    return itemsize * (n_params(layer_sizes) + LOSS_SLOTS)


def piece(batch: int, procs: int, rank: int) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous piece of a batch: sizes differ by at most one."""
    q, r = divmod(batch, procs)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (1 if rank < r else 0)


def pieces(batch: int, procs: int) -> list[int]:
    """Sizes of the ranks' pieces of one batch."""
    return [hi - lo for lo, hi in (piece(batch, procs, r) for r in range(procs))]


@dataclass(frozen=True)
class BatchCounts:
    """Exact counts for one batch on one rank (piece of `b` samples)."""
    b: int
    flops: dict            # phase -> FLOPs
    mem_bytes: dict        # phase -> device-memory bytes
    operations: dict       # phase -> operations computed (priced one by one)
    kernels: dict          # phase -> kernels launched (a fused kernel computes several operations)
    bytes_h2d: int
    bytes_d2h: int
    bytes_mpi: int
    bytes_nccl: int
    bytes_d2d: int = 0     # resident data in graph mode: the piece copied into the graph's static inputs

    @property
    def flops_total(self) -> int:
        return sum(self.flops.values())

    @property
    def bytes_copied(self) -> int:
        return self.bytes_h2d + self.bytes_d2h


def batch_counts(layer_sizes, b: int, itemsize, comm: str = N.MPI_STAGED,
                 batch_transfer: str = N.PAGEABLE, bucket_bytes: int | None = None,
                 exec_mode: str = N.EAGER, fuse_output: bool = True, grad_width: int | None = None) -> BatchCounts:
    """Counts for one rank's piece of b samples. MPI and NCCL bytes count
    even on one process (the trainer hands the buffer over too); the batch
    is copied at the activation width, the gradients at the parameter width
    or `grad_width` (`--grad-precision`)."""
    w = as_widths(itemsize)
    flops, mem, ops, kern = {}, {}, {}, {}
    for phase, kernels in step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output).items():
        costs = [op_cost(name, shape, itemsize) for kernel in kernels for name, shape in kernel]
        flops[phase], mem[phase] = sum(f for f, _ in costs), sum(m for _, m in costs)
        ops[phase], kern[phase] = len(costs), len(kernels)
    # the weight-gradient GEMMs write float32 where their operands are 16 bits
    mem["backward"] += (w.param - w.act) * weight_grad_elements(layer_sizes, fuse_output)
    piece_bytes = w.act * b * (layer_sizes[0] + layer_sizes[-1])
    resident = batch_transfer == N.RESIDENT
    g = grad_buffer_bytes(layer_sizes, w.param)
    staged = comm == N.MPI_STAGED
    wire = grad_buffer_bytes(layer_sizes, grad_width) if grad_width else g
    return BatchCounts(
        b=b, flops=flops, mem_bytes=mem, operations=ops, kernels=kern,
        bytes_h2d=(0 if resident else piece_bytes) + (g if staged else 0),
        bytes_d2h=g if staged else 0,
        bytes_mpi=wire if comm in (N.MPI_STAGED, N.MPI) else 0,
        bytes_nccl=wire if comm == N.NCCL else 0,
        bytes_d2d=piece_bytes if resident and exec_mode == N.GRAPH else 0,
    )

