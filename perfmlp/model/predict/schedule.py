"""The sliced first layer's two chains (perfmlp/slices.py runs the schedule,
batch.py prices it, slices.py chooses K): dW1 in K slices of hidden units,
each reduced as soon as written (the first with the rest of the gradients),
updated and its next forward GEMM run as soon as it lands.

    compute:  [upd_s + fwd_s when comm_s lands] x K, the middle, [bwd_s] x K, the rest's update
    comm:     [comm_s after bwd_s] x K

predict_batch's sliced step is today's less today's serial chain plus the
sliced one (schedule_change). Not modelled: GEMMs slowed by NCCL's kernels,
eager mode's extra launches.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ... import names as N
from ..costs import LOSS_SLOTS, n_weights, piece, pieces, step_kernels, widths
from .compute import kernel_s
from .exchange import comm_s

if TYPE_CHECKING:   # annotations only: the trainer imports this module, never a machine file
    from ..machine import Machine


def grad_bytes(precision: str, grad_precision: str) -> int:
    """Bytes per gradient element on the wire: 2 for bf16 and fp16, else the master type's."""
    return 2 if grad_precision in N.HALF_PRECISIONS else widths(precision).param


def slice_rows(hidden: int, k: int) -> list[tuple[int, int]]:
    """K contiguous row ranges of the hidden units, sizes differing by at most one."""
    return [piece(hidden, k, i) for i in range(k)]


def _parts(machine: Machine, layer_sizes, b: int, precision: str, gemm: str, gap: float, k: int) -> dict:
    """GPU seconds (gaps included) of the schedule's kernels: per slice, the middle, the rest's update."""
    isz = widths(precision)
    D, H = layer_sizes[0], layer_sizes[1]

    def t(*kernels):
        return sum(kernel_s(machine, kn, isz, precision, gemm) + gap for kn in kernels)
    kernels = step_kernels(layer_sizes, b, None, isz)
    middle = [kn for phase, ks in kernels.items() if phase != N.Phase.UPDATE for kn in ks]
    middle.remove((("gemm", (H, b, D)),))   # the first layer's forward and weight-gradient GEMMs
    middle.remove((("gemm", (H, D, b)),))
    middle += [kn for kn in kernels[N.Phase.UPDATE] if kn[0][0] == "grad_check"]
    n_w, n_b = n_weights(layer_sizes), sum(layer_sizes[1:])
    rows = pieces(H, k)[::-1]   # in the schedule's order: last rows first
    # slice 0 (the last rows) lands with the rest and is updated with it, in one kernel
    rest_update = (("update_weights", (n_w - H * D + rows[0] * D,)), ("update_biases", (n_b,)))
    return dict(
        fwd=[t((("gemm", (r, b, D)),)) for r in rows], bwd=[t((("gemm", (r, D, b)),)) for r in rows],
        # a slice's update: the update kernel on its rows' weights and no bias
        upd=[0.0] + [t((("update_weights", (r * D,)), ("update_biases", (0,)))) for r in rows[1:]],
        middle=t(*middle), upd_rest=t(rest_update),
        upd_all=t(*(kn for kn in kernels[N.Phase.UPDATE] if kn[0][0] != "grad_check")),
        rows=rows, rest_elems=n_w - H * D + n_b, loss_elems=LOSS_SLOTS, D=D)


def chain_s(parts: dict, comm, pipelined: bool, batches: int = 4) -> float:
    """Seconds per steady batch of the two chains, four batches played. `comm(elements)`: a
    collective's seconds. Slices go last rows first: the first is reduced with the rest."""
    rows, D = parts["rows"], parts["D"]
    rest = parts["rest_elems"] + parts["loss_elems"]
    if not pipelined:   # today's step: everything serial, one collective
        return (sum(parts["fwd"]) + parts["middle"] + sum(parts["bwd"])
                + comm(sum(rows) * D + rest) + parts["upd_all"])
    comm_slice = [comm(r * D + (rest if i == 0 else 0)) for i, r in enumerate(rows)]
    tc = tm = rest_end = 0.0
    ready = [0.0] * len(rows)
    ends = []
    for _ in range(batches):
        for s in range(len(rows)):
            tc = max(tc, ready[s]) + parts["upd"][s] + parts["fwd"][s]
        tc += parts["middle"]
        for s in range(len(rows)):
            tc += parts["bwd"][s]
            tm = max(tm, tc) + comm_slice[s]
            ready[s] = tm
            if s == 0:
                rest_end = tm
        tc = max(tc, rest_end) + parts["upd_rest"]
        ends.append(tc)
    return ends[-1] - ends[-2]


def schedule_change(machine: Machine, layer_sizes, b: int, procs: int, slices: int, precision: str,
                    grad_precision: str, comm: str, batch_transfer: str, gap: float, gemm: str) -> dict:
    """What the schedule changes in predict_batch's terms for a piece of b samples, and both chains."""
    def comm_fn(width):
        def seconds(n):
            t = sum(comm_s(machine, comm, n * width, procs, batch_transfer).values())
            if width != full:   # a 16-bit piece is rounded into its buffer and widened back: two passes
                t += 2 * gap + 2 * n * (full + width) / machine.mem_bw_bytes_per_s
            return t
        return seconds

    full = widths(precision).param
    today_parts = _parts(machine, layer_sizes, b, precision, gemm, gap, 1)
    parts = _parts(machine, layer_sizes, b, precision, gemm, gap, slices)
    today = chain_s(today_parts, comm_fn(full), False)
    sliced = chain_s(parts, comm_fn(grad_bytes(precision, grad_precision)), slices > 1)
    compute = _compute_s(parts, slices > 1) - _compute_s(today_parts, False)
    elems = sum(today_parts["rows"]) * today_parts["D"] + today_parts["rest_elems"] + today_parts["loss_elems"]
    return {"compute_s": compute, "exchange_s": sliced - today - compute, "chain_today_s": today,
            "chain_sliced_s": sliced, "compute_today_s": today - comm_fn(full)(elems),
            "comm_today_s": comm_fn(grad_bytes(precision, grad_precision))(elems)}


def _compute_s(parts: dict, pipelined: bool) -> float:
    """The compute chain alone: every kernel of the schedule, one after another."""
    upd = sum(parts["upd"]) + parts["upd_rest"] if pipelined else parts["upd_all"]
    return sum(parts["fwd"]) + parts["middle"] + sum(parts["bwd"]) + upd
