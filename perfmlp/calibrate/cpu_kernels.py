"""The NumPy step's kernels timed where the trainer runs them: inside whole
steps of perfmlp.mlp.Network, each kernel's NumPy work timed around its call,
so a kernel meets the caches the step before it left. The output backward
runs unfused (the kernels costs.step_kernels(..., fuse_output=False) prices).
time_step gives each kernel's seconds; the trainer's own Python per kernel
(a timed step's wall time less its kernels', over its kernels); the plain,
untimed step's seconds; the per-step sums of the GEMMs and of the passes."""
from __future__ import annotations

import time
from statistics import median

import numpy as np

from ..gpu.timing import wall_s
from ..mlp import Network, init_weights
from ..model.costs import kernel_name, kernel_shape

# the Network's array-work methods, each timed around its call
_WORK = ("_gemm", "_bias_sigmoid", "_bias_add", "_softmax_ce_grad", "_row_sum", "_sigmoid_grad_row_sum",
         "_sgd_update")
GEMM = "gemm"   # the cost registry's name of a GEMM, as operation and as kernel


class TimedNetwork(Network):
    """A NumPy Network whose kernels' array work is timed: `times` maps (kernel name, shape) to seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fuse_output = False
        self.ops = []
        self.times: dict[tuple, list[float]] = {}
        self._mark = 0
        for name in _WORK:
            setattr(self, name, self._timed(getattr(self, name)))

    def _timed(self, work):
        def call(*args):
            kernel = tuple(self.ops[self._mark:])
            self._mark = len(self.ops)
            t0 = time.perf_counter()
            out = work(*args)
            dt = time.perf_counter() - t0
            self.times.setdefault((kernel_name(kernel), kernel_shape(kernel)), []).append(dt)
            return out
        return call

    def clear(self) -> None:
        self.ops.clear()
        self._mark = 0


def step_piece(sizes, precision, b, seed: int = 0):
    """A random piece of b samples (D x b, its one-hot labels C x b) in the precision's type."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(precision)
    x = rng.random((sizes[0], b)).astype(dtype)
    y = np.zeros((sizes[-1], b), dtype=dtype)
    y[np.arange(b) % sizes[-1], np.arange(b)] = 1
    return x, y


def _net(cls, sizes, precision, b):
    net = cls(np, sizes, precision, 0.1, 1e-4, b)
    net.set_params(init_weights(sizes, 0))
    net.fuse_output = False
    return net


def one_step(net, x, y) -> None:
    """One step of a Network (NumPy or GPU) on the piece x, y (features by samples)."""
    net.forward(x)
    net.loss(y)
    net.backward()
    net.update()


def reps_for(step_s: float, budget_s: float, lo: int = 3, hi: int = 30) -> int:
    """Steps to time within about budget_s, lo to hi; a step over ten budgets gets lo - 1."""
    if step_s > 10 * budget_s:
        return max(2, lo - 1)
    return int(min(hi, max(lo, budget_s // max(step_s, 1e-9))))


def time_step(sizes, precision, b, budget_s: float, start=None) -> dict:
    """{"kernels": {(name, shape): median seconds}, "step_s", "host_s", and each step's "plain_steps",
    "gemm_steps", "pass_steps"} on a piece of b samples; `start` (a barrier) before each timed block."""
    x, y = step_piece(sizes, precision, b)
    start = start or (lambda: None)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        plain = _net(Network, sizes, precision, b)
        reps = reps_for(wall_s(lambda: one_step(plain, x, y)), budget_s / 2)   # warm-up, and the step's size
        start()
        plain_s = [wall_s(lambda: one_step(plain, x, y)) for _ in range(reps)]
        net = _net(TimedNetwork, sizes, precision, b)
        one_step(net, x, y)
        net.times.clear()
        start()
        gemm_steps, pass_steps, excess = [], [], []
        for _ in range(reps):
            net.clear()
            before = {k: len(v) for k, v in net.times.items()}
            t0 = time.perf_counter()
            one_step(net, x, y)
            wall = time.perf_counter() - t0
            new = {k: v[before.get(k, 0):] for k, v in net.times.items()}
            gemm_steps.append(sum(sum(v) for k, v in new.items() if k[0] == GEMM))
            pass_steps.append(sum(sum(v) for k, v in new.items() if k[0] != GEMM))
            excess.append((wall - gemm_steps[-1] - pass_steps[-1]) / sum(len(v) for v in new.values()))
    return {"kernels": {k: float(median(v)) for k, v in net.times.items()}, "step_s": float(median(plain_s)),
            "plain_steps": plain_s, "gemm_steps": gemm_steps, "pass_steps": pass_steps,
            "host_s": float(median(excess))}
