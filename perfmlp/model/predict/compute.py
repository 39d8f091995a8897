"""The GPU time of the step's parts: its kernels (GEMMs at their rates, the
trainer's own kernels measured or at memory bandwidth, as measured in both
execution modes, each then adding the mode's gap: the kernel_gaps term), and
the batch's copies (a pageable copy's staging ahead of the stream, the
prefetching pipeline's own time)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..costs import OUTPUT_GRAD_COLS, kernel_name, kernel_shape, op_cost, step_kernels
from ... import names as N

if TYPE_CHECKING:   # annotations only: the trainer imports these modules, never a machine file
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
    """(GEMM seconds, other kernels' seconds, phase -> each kernel's seconds with its gap, kernels)."""
    timed = {phase: [(kernel_name(k) == "gemm", kernel_s(machine, k, itemsize, precision, gemm)) for k in ks]
             for phase, ks in step_kernels(layer_sizes, b, split, itemsize, fuse_output, output_grad_cols).items()}
    every = [kt for ks in timed.values() for kt in ks]   # (a GEMM?, seconds) in launch order
    return (sum((t for is_gemm, t in every if is_gemm), 0.0), sum((t for is_gemm, t in every if not is_gemm), 0.0),
            {phase: [t + gap_s for _, t in ks] for phase, ks in timed.items()}, len(every))


# The loop thread's host calls per batch that order the input pipeline (perfmlp/gpu/prefetch.py).
PREFETCH_CALLS = {N.PREFETCH: 6, N.PREFETCH_PAGEABLE: 4}


def prefetch_s(machine: Machine, batch_transfer: str, copies: list[float], nbytes: int,
               exec_mode: str = N.EAGER) -> float:
    """The prefetching pipeline's own time per batch: its copies or its threads' staging, the slower."""
    if batch_transfer != N.PREFETCH_PAGEABLE:
        return sum(copies)
    pace = machine.prefetch_pace(exec_mode, batch_transfer, nbytes)
    return max(sum(copies), pace if pace is not None else nbytes / machine.stage_bw())


def batch_copies(machine: Machine, layer_sizes, b: int, act_bytes: int, batch_transfer: str,
                 procs: int, exec_mode: str = N.EAGER) -> tuple[list[float], list[tuple], float | None]:
    """(each batch copy's seconds, pageable ones' staging ahead, the prefetching pipeline's time or None)."""
    if batch_transfer == N.RESIDENT:
        return [], [], None
    mem = N.PAGEABLE if batch_transfer == N.PAGEABLE else N.PINNED
    sizes = [act_bytes * b * n for n in (layer_sizes[0], layer_sizes[-1])]
    copies = [machine.copy_s("h2d", mem, n, sharing=procs) for n in sizes]
    if batch_transfer in N.PREFETCH_TRANSFERS:   # on a copy stream, beside the step: priced after the timeline
        return [], [], prefetch_s(machine, batch_transfer, copies, sum(sizes), exec_mode)
    ahead = []
    if mem == N.PAGEABLE:
        for n in sizes:
            a, blocks = machine.pageable_ahead(n, sharing=procs)
            ahead.append((a, blocks, machine.pageable_ahead_delay(n, sharing=procs) if blocks else None))
    return copies, ahead, None
