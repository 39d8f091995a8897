"""Today's serial bound beside the overlapped one and the sliced schedule
(perfmlp/slices.py) at its fastest count, priced by model/predict/slices.py,
for each configuration the schedule applies to: data parallelism on several
GPUs with NCCL, no overlap, not fp16."""
from __future__ import annotations

from ...model.predict.slices import choose_slices, predict_sliced
from ..configurations import configurations
from ..recommend import slices_apply
from ... import names as N
from .table import Table

COLUMNS = ("configuration", "H", "B", "procs", "exec", "measured ms", "serial bound ms", "overlapped bound ms",
           "compute chain ms", "communication chain ms", "slices", "sliced ms", "FLOPs per GPU",
           "bytes all-reduced per GPU")


def overlap_bounds(a) -> Table:
    """One row per configuration the sliced schedule applies to (ms per batch, the primary machine's)."""
    m, rows = a.machines.primary, []
    for c in configurations(a):
        if not (c.gpu and c.judged and c.s["strategy"] == N.DATA and slices_apply(c.s)):
            continue
        r = c.representative
        how = dict(precision=r.precision, comm=r.comm, batch_transfer=r.transfer, exec_mode=r.exec, gemm=N.CUBLAS)
        k = choose_slices(m, r.layer_sizes, r.batch, r.procs, **how)
        p = predict_sliced(m, r.layer_sizes, r.batch, r.procs, k, **how)
        rows.append((c.label, r.hidden_label, r.batch, r.procs, r.exec, c.t_ms, p["today_s"] * 1e3,
                     p["overlapped_s"] * 1e3, p["compute_chain_s"] * 1e3, p["comm_chain_s"] * 1e3, k,
                     p["sliced_s"] * 1e3, r.flops_rank0, r.bytes_exchanged_rank0))
    return Table("overlap_bounds", COLUMNS, tuple(rows))
