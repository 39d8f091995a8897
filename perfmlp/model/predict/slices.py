"""The price of the sliced first layer (perfmlp/slices.py) and the slice
count it is fastest at; `python -m perfmlp.model.predict.slices FILE`
prints the predicted gains at p = 2, 4, 8."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ... import names as N
from ..costs import pieces
from .batch import predict_batch
from .schedule import schedule_change

if TYPE_CHECKING:   # annotations only: the trainer imports this module, never a machine file
    from ..machine import Machine

SLICE_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16)   # the slice counts `auto` chooses among


def predict_sliced(machine: Machine, layer_sizes, batch: int, procs: int, slices: int, precision: str = N.FLOAT32,
                   grad_precision: str = N.FLOAT32, comm: str = N.NCCL, batch_transfer: str = N.RESIDENT,
                   exec_mode: str = N.GRAPH, gemm: str = N.CUBLAS) -> dict:
    """Seconds per batch of today's step and the sliced one, the gain and both steps' chains."""
    args = (machine, layer_sizes, batch, procs, precision, comm, batch_transfer, None, exec_mode)
    base = predict_batch(*args, gemm=gemm)
    new = predict_batch(*args, gemm=gemm, slices=slices, grad_precision=grad_precision)
    change = new.detail.get("schedule")   # the sliced step's own; today's step alone has none
    if change is None:
        gap = machine.graph_kernel_gap_s if new.detail["exec"] == N.GRAPH else machine.kernel_gap_s
        change = schedule_change(machine, layer_sizes, max(pieces(batch, procs)), procs, slices, precision,
                                 grad_precision, comm, batch_transfer, gap, gemm)
    # the two chains of today's step apart: no schedule overlaps them better than the longer of the two
    longer = max(change["compute_today_s"], change["comm_today_s"])
    return {"today_s": base.total_s, "sliced_s": new.total_s, "gain": base.total_s / new.total_s,
            "slices": slices, "chain_today_s": change["chain_today_s"], "chain_sliced_s": change["chain_sliced_s"],
            "compute_chain_s": change["compute_today_s"], "comm_chain_s": change["comm_today_s"],
            "overlapped_s": base.total_s - change["chain_today_s"] + longer}


def choose_slices(machine: Machine, layer_sizes, batch: int, procs: int, precision: str = N.FLOAT32,
                  grad_precision: str = N.FLOAT32, comm: str = N.NCCL, batch_transfer: str = N.RESIDENT,
                  exec_mode: str = N.GRAPH, gemm: str = N.CUBLAS) -> int:
    """The slice count of SLICE_CANDIDATES the model prices fastest; the smaller on a tie."""
    ks = [k for k in SLICE_CANDIDATES if k <= layer_sizes[1]]
    price = {k: predict_sliced(machine, layer_sizes, batch, procs, k, precision, grad_precision, comm,
                               batch_transfer, exec_mode, gemm)["sliced_s"] for k in ks}
    return min(ks, key=lambda k: (round(price[k], 12), k))


def slice_count(value, machine: Machine, layer_sizes, batch: int, procs: int, precision: str = N.FLOAT32,
                grad_precision: str = N.FLOAT32, comm: str = N.NCCL, batch_transfer: str = N.RESIDENT,
                exec_mode: str = N.GRAPH, gemm: str = N.CUBLAS) -> int:
    """`--slices` as a count: `auto` is choose_slices' on `machine`, else the number given."""
    if str(value) != N.AUTO:
        return int(value)
    return choose_slices(machine, layer_sizes, batch, procs, precision, grad_precision, comm, batch_transfer,
                         exec_mode, gemm)


def gain_table(machine: Machine, hidden: int = 512, per_gpu: int = 3200, procs=(2, 4, 8)) -> list[dict]:
    """The predicted gain per (p, batch, precision, gradient precision), K chosen by the model."""
    rows = []
    for p in procs:
        for batch, scaling in ((per_gpu, "split"), (per_gpu * p, "per GPU")):
            for prec in (N.FLOAT32, N.BF16):
                for grad in (N.FLOAT32, N.BF16):
                    layers = (784, hidden, 10)
                    k = choose_slices(machine, layers, batch, p, prec, grad)
                    r = predict_sliced(machine, layers, batch, p, k, prec, grad)
                    rows.append(dict(procs=p, batch=batch, scaling=scaling, precision=prec, grad_precision=grad,
                                     slices=k, today_us=1e6 * r["today_s"], sliced_us=1e6 * r["sliced_s"],
                                     gain=r["gain"]))
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| p | B | batch | precision | gradients | K | today (us) | sliced (us) | gain |", "|" + " --- |" * 9]
    for r in rows:
        lines.append(f"| {r['procs']} | {r['batch']} | {r['scaling']} | {r['precision']} | {r['grad_precision']} "
                     f"| {r['slices']} | {r['today_us']:.1f} | {r['sliced_us']:.1f} | {r['gain']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from ..machine import load_machine
    print(markdown(gain_table(load_machine(sys.argv[1] if len(sys.argv) > 1 else None))))
