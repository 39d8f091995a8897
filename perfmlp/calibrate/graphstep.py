"""graph_node_extra_s: the trainer's step replayed as one CUDA graph, beyond
the model's price of its parts, per kernel (docs/model.md: "A replayed
step's kernels")."""
from __future__ import annotations

from statistics import median

from ..config import Config
from ..gpu.timing import queued_ahead
from ..model.costs import widths
from ..model.predict.compute import step_compute
from .precision import precision_network
from .. import names as N


def graph_node_extra(cp, machine, hidden, local_batches, precisions, log, replays: int = 20) -> dict:
    """graph_node_extra_s: what a kernel of the trainer's step, replayed as
    one CUDA graph, takes beyond the model's price of it (its calibrated time
    less queued_gap_s, plus graph_kernel_gap_s): the step's compute part
    (forward, loss, backward, update) captured as the graph mode captures it,
    replayed back to back queued ahead, less graph_replay_gap_s, less the
    model's GEMM, kernel and gap terms for it from `machine` (this
    calibration's file without the figure), over its kernels; the median
    over the smallest and largest H and b in each precision, at least 0.
    What the separate timings miss: each kernel there reruns on the same
    data and after itself, while in the step it follows another kernel and
    finds its inputs where that one left them (sgd_update in bf16 at
    H = 2048: 8.06 us in the step on an H100, 6.01 calibrated)."""
    D, C = Config.input_size, Config.num_classes
    shapes = [(p, h, b) for p in precisions if p != N.FLOAT64
              for h in sorted({min(hidden), max(hidden)}) for b in sorted({min(local_batches), max(local_batches)})]
    per_node = []
    for prec, h, b in shapes:
        gs = cp.cuda.Stream(non_blocking=True)   # capturable: the network's kernels and GEMMs go to it
        with gs:
            net, x, y = precision_network(cp, (D, h, C), prec, b)
            net.forward(x.T); net.loss(y.T); net.backward(); net.update()   # modules loaded, handles made
            gs.synchronize()
            gs.begin_capture()
            net.forward(x.T); net.loss(y.T); net.backward(); net.update()
            graph = gs.end_capture()
            t = queued_ahead(cp, lambda g=graph: g.launch(stream=gs), replays)[0] - machine.graph_replay_gap_s
        gemm, other, _, n = step_compute(machine, (D, h, C), b, widths(prec), prec, N.CUBLAS, None, True,
                                         machine.graph_kernel_gap_s, machine.queued_gap_s)
        per_node.append((t - gemm - other - n * machine.graph_kernel_gap_s) / n)
        log(f"graph step {prec} H={h} b={b}: {t * 1e6:.1f} us GPU, the model's parts {(gemm + other) * 1e6:.1f} us "
            f"+ {n} x {machine.graph_kernel_gap_s * 1e6:.2f} us gap: {per_node[-1] * 1e6:+.2f} us a kernel")
    if not per_node:
        return {}
    res = {"graph_node_extra_s": max(0.0, median(per_node))}
    log(f"a graph step's kernel beyond its price: {res['graph_node_extra_s'] * 1e6:.2f} us "
        f"(median of {len(per_node)} steps, {min(per_node) * 1e6:+.2f} to {max(per_node) * 1e6:+.2f})")
    return res
