"""One registry from operation to cost: FLOPs and device-memory bytes as
formulas of shapes and element size.

Counting rule
- A multiply-add is 2 FLOPs (one multiply, one add): a GEMM of an M x K by a
  K x N matrix is 2*M*N*K FLOPs.
- Each add, subtract, multiply, division, comparison (max), exp and log
  counts 1 FLOP. The sigmoid 1 / (1 + exp(-z)) is 3 (exp, add, division);
  negation is not counted.
- A reduction of n values (sum, max) is n - 1 FLOPs per output.
- Not counted: index arithmetic, copies, casts, argmax for accuracy, and
  the held-out evaluation (it is not part of a training step).
- Tensor cores (tf32, bf16, fp16: model/precision.py): a multiply-add is
  2 FLOPs at its precision, as on the FFMA units. Not counted: fp16's loss
  scaling (the finite check of the gradients and the unscaling multiply).
- Bytes are the fewest a kernel must move through device memory: every
  input read once, every output written once, at the width it has
  (`Widths`): activations, deltas, the batch and the GEMMs' operands at the
  activation width (16 bits in bf16 and fp16, whose GEMMs read a 16-bit
  copy of the weights that each update writes); weights, biases, gradients
  and partial sums at the parameter width (float32 there); the
  weight-gradient GEMMs write float32 (`batch_counts` adds those bytes).
  Copies count the bytes handed to cudaMemcpy and collectives the bytes of
  the buffer handed to MPI or NCCL (`batch_counts`).

The trainer records every operation it launches as (name, shape); its
counters are these same formulas applied to those shapes.
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
    """Bytes per element of the activations (deltas, the batch, the GEMMs'
    operands) and of the parameters (weights, biases, gradients); and
    whether the update is preceded by the gradients' finite check (fp16's
    loss scaling). An int w stands for Widths(w, w)."""
    act: int
    param: int
    grad_check: bool = False

    @property
    def weight_copy(self) -> bool:
        """The update also writes the weights' copy at the activation width."""
        return self.act < self.param


def as_widths(itemsize) -> Widths:
    return itemsize if isinstance(itemsize, Widths) else Widths(int(itemsize), int(itemsize))


def widths(precision) -> Widths:
    """The element widths of a precision (model/precision.py)."""
    p = precision_of(precision)
    return Widths(p.act_bytes, p.param_bytes, p.loss_scaling)


@lru_cache(maxsize=4096)
def op_cost(name: str, shape: tuple, itemsize) -> tuple[int, int]:
    """(FLOPs, bytes) of operation `name` at `shape` with elements of
    `itemsize` bytes (an int, or the Widths of a precision)."""
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
    # per column: max (c-1), subtract c, exp c, sum (c-1), divide c -> 5c - 2;
    # cross-entropy log(sum) - (z_y - max): 2; delta (p - y) * (1/B): 2c.
    # Then the sum of b column losses: b - 1.
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
    # the output layer's backward (c x h weights, b samples): dW = delta a^T,
    # db = the row sums of delta, da = W^T delta, dz = da * a * (1 - a) and
    # the layer below's db: the FLOPs of those five operations; reads delta, a
    # and W (the float32 weights: it runs on the FFMA units in every
    # precision), writes dz and one partial sum of dW, db and the layer
    # below's db per column block (output_grad_splits)
    f = (_gemm(c, h, b, w)[0] + _row_sum(c, b, w)[0] + _gemm(h, b, c, w)[0] + _sigmoid_grad(h, b, w)[0]
         + _row_sum(h, b, w)[0])
    return f, w.act * (c * b + h * b + h * b) + w.param * (c * h + output_grad_splits(b) * output_grad_sums(c, h))


@register("partial_sums")
def _partial_sums(n, splits, w):
    # n sums of `splits` partials each, in a fixed order: the work of splitting
    # a reduction over blocks, not counted as FLOPs (as a GEMM library's
    # split-K reduction is not); reads the partials, writes the n sums
    return 0, w.param * n * (splits + 1)


@register("grad_check")
def _grad_check(n, w):
    # fp16's loss scaling: every gradient read once, tested finite (not counted)
    return 0, w.param * n


@register("update_weights")
def _update_weights(n, w):
    # w -= lr * (g + reg * w): multiply, add, multiply, subtract; in bf16 and
    # fp16 the weights' 16-bit copy is written too
    return 4 * n, w.param * 3 * n + (w.act * n if w.weight_copy else 0)


@register("update_biases")
def _update_biases(n, w):
    # b -= lr * g
    return 2 * n, w.param * 3 * n


# ---- a whole step from shapes ---------------------------------------------------

def itemsize(precision: str) -> int:
    """Bytes per element of a precision's activations and batch (its
    parameters: widths(precision).param)."""
    return precision_of(precision).act_bytes


# Overlapped communication's bucket: a weight gradient larger than this is computed and reduced in row
# blocks of at most this size. 25 MiB, PyTorch DDP's bucket_cap_mb: each layer's gradient is one piece.
DEFAULT_BUCKET_BYTES = 25 << 20


def row_blocks(rows: int, cols: int, itemsize: int, bucket_bytes: int | None) -> list[tuple[int, int]]:
    """The [r0, r1) row blocks a rows x cols weight gradient is computed and
    reduced in when gradient communication overlaps the backward pass: the
    fewest blocks of at most `bucket_bytes` each (at least one row), sizes
    differing by at most one row. One block without buckets (None)."""
    if not bucket_bytes:
        return [(0, rows)]
    per = max(1, bucket_bytes // (cols * itemsize))
    n = -(-rows // per)
    return [piece(rows, n, i) for i in range(n)]


# The output layer (C rows: 10 for MNIST) is too thin for a GEMM library. With at most this many classes
# (one accumulator per class in registers) the trainer runs its backward as two kernels of its own instead
# of 2 GEMMs, a row sum and the sigmoid gradient: `output_backward` (per block of OUTPUT_GRAD_COLS columns:
# dz, and partial sums of dW, db and the layer below's db) and `partial_sums` (the partials added in a
# fixed order, so every run gives the same result). The column block is fixed (gpu/kernels.py: LAUNCH).
FUSED_OUTPUT_MAX_CLASSES = 16
OUTPUT_GRAD_COLS = 256


def fused_output(layer_sizes) -> bool:
    """Whether the output layer's backward runs as the fused pair: at most
    FUSED_OUTPUT_MAX_CLASSES classes and a hidden layer below it."""
    return len(layer_sizes) >= 3 and layer_sizes[-1] <= FUSED_OUTPUT_MAX_CLASSES


def output_grad_splits(b: int, cols: int = OUTPUT_GRAD_COLS) -> int:
    """Column blocks (partial sums) of the fused output backward on b
    samples, in blocks of `cols` (a run's trace records the block it launched)."""
    return -(-b // cols)


def output_grad_sums(c: int, h: int) -> int:
    """The sums the fused output backward reduces: dW (c x h), the layer
    below's db (h) and db (c)."""
    return c * h + h + c


def step_kernels(layer_sizes, b: int, bucket_bytes: int | None = None, itemsize=4, fuse_output: bool = True,
                 output_grad_cols: int = OUTPUT_GRAD_COLS) -> dict[str, list[tuple[tuple[str, tuple], ...]]]:
    """The kernels of one training step on a piece of b samples, per phase, in
    launch order (layer_sizes = D, H1, ..., C); each kernel is the tuple of
    operations it computes. With `bucket_bytes` (overlapped communication)
    each weight gradient is one GEMM per row block (`row_blocks`), but the
    fused output layer's is one piece. `fuse_output=False`: the output
    layer's backward as GEMMs and elementwise kernels even where
    `fused_output` allows the fused pair. perfmlp/mlp.py's Network launches
    exactly these (tested)."""
    L = len(layer_sizes) - 1
    w = as_widths(itemsize)
    fuse = fuse_output and fused_output(layer_sizes)
    fwd, bwd = [], []
    for l in range(1, L + 1):
        n_out, n_in = layer_sizes[l], layer_sizes[l - 1]
        fwd.append((("gemm", (n_out, b, n_in)),))
        fwd.append(((("bias_sigmoid" if l < L else "bias_add"), (n_out, b)),))
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
    return {
        "forward": fwd,
        "loss": [(("softmax_ce_grad", (layer_sizes[-1], b)),)],
        "backward": bwd,
        "update": update,
    }


# The trainer's own kernels (perfmlp/gpu/*.cu, launched by perfmlp/gpu/network.py
# under these names) by the operations each computes, as step_kernels lists
# them; every other kernel of the step is one GEMM ("gemm").
OWN_KERNELS = {("bias_sigmoid",): "bias_sigmoid", ("bias_add",): "bias_add",
               ("softmax_ce_grad",): "softmax_ce_grad", ("row_sum",): "row_sum",
               ("sigmoid_grad", "row_sum"): "sigmoid_grad_row_sum", ("output_backward",): "output_backward",
               ("partial_sums",): "partial_sums", ("update_weights", "update_biases"): "sgd_update",
               ("grad_check",): "grad_check"}


def kernel_name(kernel) -> str:
    """The name the trainer launches a step kernel (a tuple of (operation,
    shape)) under: "gemm", or one of OWN_KERNELS'."""
    ops = tuple(name for name, _ in kernel)
    return "gemm" if ops == ("gemm",) else OWN_KERNELS[ops]


def kernel_shape(kernel) -> tuple:
    """The shape a kernel's calibrated time is keyed by (the machine file's
    kernel_s): its first operation's, e.g. (C, H, b) for output_backward,
    (H, b) for bias_sigmoid, (weights,) for sgd_update."""
    return tuple(kernel[0][1])


def step_ops(layer_sizes, b: int, bucket_bytes: int | None = None,
             itemsize=4, fuse_output: bool = True) -> dict[str, list[tuple[str, tuple]]]:
    """The operations of one training step, per phase, in launch order."""
    return {phase: [op for kernel in kernels for op in kernel]
            for phase, kernels in step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output).items()}


def weight_grad_elements(layer_sizes, fuse_output: bool = True) -> int:
    """Elements the weight-gradient GEMMs of a step write (the fused output
    layer's backward writes partial sums instead)."""
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
    """Counts for one rank's piece of b samples.

    comm: `mpi-staged` (gradients D2H, MPI_Allreduce, H2D), `nccl`, or `mpi`
    (NumPy backend: the buffer is already on the host); MPI and NCCL bytes
    are counted even on one process, where the trainer hands the buffer to
    the collective too. batch_transfer: `pageable`/`pinned` copy X and Y
    each batch, `resident` none. bucket_bytes, fuse_output: as step_kernels.
    itemsize: an int, or a precision's Widths: the batch is copied at the
    activation width, the gradients at the parameter width, or `grad_width`
    bytes an element where given (`--grad-precision`).
    """
    w = as_widths(itemsize)
    flops, mem, ops, kern = {}, {}, {}, {}
    for phase, kernels in step_kernels(layer_sizes, b, bucket_bytes, itemsize, fuse_output).items():
        costs = [op_cost(name, shape, itemsize) for kernel in kernels for name, shape in kernel]
        flops[phase], mem[phase] = sum(f for f, _ in costs), sum(m for _, m in costs)
        ops[phase], kern[phase] = len(costs), len(kernels)
    # the weight-gradient GEMMs write float32 where their operands are 16 bits
    mem["backward"] += (w.param - w.act) * weight_grad_elements(layer_sizes, fuse_output)
    D, C = layer_sizes[0], layer_sizes[-1]
    piece_bytes = w.act * b * (D + C)
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

