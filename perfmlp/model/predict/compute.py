"""The GPU time of the step's kernels: GEMMs at their rates, the trainer's own
kernels measured or at memory bandwidth, as measured in both execution modes;
each kernel then adds the mode's gap (the kernel_gaps term)."""
from __future__ import annotations

from ..costs import OUTPUT_GRAD_COLS, kernel_name, kernel_shape, op_cost, step_kernels
from ..machine import Machine


def kernel_s(machine: Machine, kernel, itemsize: int, precision: str, gemm: str) -> float:
    """GPU time of one kernel: a GEMM's FLOPs over its rate, else kernel_s or bytes over memory bandwidth."""
    name = kernel_name(kernel)
    if name == "gemm":
        (_, shape), = kernel
        return op_cost("gemm", shape, itemsize)[0] / machine.gemm_rate(*shape, precision, kernel=gemm)
    measured = machine.kernel_time_s(name, kernel_shape(kernel), precision)
    if measured is not None:
        return measured
    return sum(op_cost(op, shape, itemsize)[1] for op, shape in kernel) / machine.mem_bw_bytes_per_s


def step_compute(machine: Machine, layer_sizes, b: int, itemsize: int, precision: str, gemm: str, split,
                 fuse_output: bool, gap_s: float, output_grad_cols: int = OUTPUT_GRAD_COLS
                 ) -> tuple[float, float, dict[str, list[float]], int]:
    """(GEMM seconds, other kernels' seconds, phase -> each kernel's time with its gap, kernels);
    `split`: the weight gradients' GEMMs in row blocks of that many bytes (None: whole)."""
    gemm_s = other_s = 0.0
    phase_kernels: dict[str, list[float]] = {}
    for phase, kernels in step_kernels(layer_sizes, b, split, itemsize, fuse_output, output_grad_cols).items():
        phase_kernels[phase] = []
        for kernel in kernels:
            t = kernel_s(machine, kernel, itemsize, precision, gemm)
            if kernel_name(kernel) == "gemm":
                gemm_s += t
            else:
                other_s += t
            phase_kernels[phase].append(t + gap_s)
    return gemm_s, other_s, phase_kernels, sum(len(k) for k in phase_kernels.values())
