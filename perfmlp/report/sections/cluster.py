"""The projection onto the shipped cluster of the traces' GPU (model/projection.py):
data, model and hybrid parallelism up to 1,024 GPUs, strong and weak scaling
with the measured points on the same axes, the fastest strategy over (p, H,
B), and the cluster's all-reduce beside published nccl-tests figures.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from ...model.cluster import ClusterError, cluster_files, load_cluster
from ...model.machine import MachineError, load_machine
from ...model.nccl_tests import comparison
from ...model.projection import PROCS, STRATEGIES, crossover, scaling
from ..analysis import Analysis
from ..figures import STRATEGY_COLORS, encode, subplots
from . import Figure, Section, Table
from ... import names as N

SHOWN_PROCS = (1, 8, 64, 256, 1024)          # the scaling table's rows (the figure has every power of two)
CROSSOVER_H, CROSSOVER_B, CROSSOVER_P = (256, 1024, 4096), (800, 3200, 12800), (8, 64, 256, 1024)


def cluster_for(a: Analysis):
    """(the shipped cluster of the report's datasheet GPU, the primary machine that prices its compute);
    (None, None) where no shipped cluster has this GPU."""
    for f in cluster_files():
        try:
            c = load_cluster(f)
            m = load_machine(c.machine)
        except (ClusterError, MachineError):
            continue
        if m.name == a.machines.datasheet.name:
            return c, a.machines.primary
    return None, None


def measured_points(a: Analysis, hidden: int, batch: int, weak: bool) -> dict[str, list[tuple[int, float]]]:
    """strategy -> [(p, samples/s)] of the runs the projection describes (float32, graph, resident, NCCL;
    `batch` fixed, or a GPU's when weak), the median of a configuration's repeats."""
    times: dict = {}
    for r in a.gpu_runs:
        if (r.profiled or r.comm != N.NCCL or r.transfer != N.RESIDENT or r.exec != N.GRAPH
                or r.precision != N.FLOAT32 or r.hidden != (hidden,) or r.parallel not in STRATEGIES
                or r.batch != (batch * r.procs if weak else batch)):
            continue
        times.setdefault((r.parallel, r.procs, r.batch), []).append(r.t_ms)
    out: dict = {}
    for (strategy, p, B), ts in sorted(times.items()):
        out.setdefault(strategy, []).append((p, B / (statistics.median(ts) * 1e-3)))
    return out


def scaling_figure(panels, title: str):
    """panels: [(panel title, rows of projection.scaling, measured_points)]."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator
    fig, axes = subplots(1, len(panels), figsize=(5.2 * len(panels), 4))
    for ax, (name, rows, measured) in zip(axes, panels):
        for strategy in STRATEGIES:
            pts = [(r["procs"], r["samples_per_s"]) for r in rows if r["strategy"] == strategy]
            if pts:
                ax.plot(*zip(*pts), "-", color=STRATEGY_COLORS[strategy], label=f"{strategy} (model)")
            if measured.get(strategy):
                ax.plot(*zip(*measured[strategy]), "o", color=STRATEGY_COLORS[strategy], mec="black",
                        label=f"{strategy} (measured)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # plain tick labels: the log axes' default mathtext labels are slow to lay out
        ax.set_xticks([p for p in PROCS if p <= max(r["procs"] for r in rows)])
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GPUs")
        ax.set_ylabel("samples per second")
        ax.set_title(name, fontsize=9)
        ax.grid(True, lw=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return encode(fig)


def _crossover_rows(rows: list[dict]) -> list[dict]:
    """One row per (H, B): the winner and its time at each p."""
    out: dict = {}
    for r in rows:
        row = out.setdefault((r["H"], r["B"]), {"H": r["H"], "B": r["B"]})
        ms = r[f"{r['winner']} ms"]
        grid = f" {r['hybrid grid']}" if r["winner"] == N.HYBRID else ""
        row[f"p={r['procs']}"] = f"{r['winner']}{grid} {ms:.3g} ms"
    return list(out.values())


def section_cluster(a: Analysis) -> Section | None:
    """The projection onto the traces' GPU's cluster; None without one."""
    if not a.gpu_runs:
        return None
    cluster, machine = cluster_for(a)
    if cluster is None:
        return None
    st = a.study
    strong = scaling(cluster, machine, st.layer_sizes, st.batch_size, procs_list=PROCS, precision=st.precision)
    weak = scaling(cluster, machine, st.layer_sizes, st.batch_size, weak=True, procs_list=PROCS, precision=st.precision)
    s = Section(f"Projection onto a cluster: {cluster.name}")
    s.paragraphs.append(
        f"Cluster file models/clusters/{Path(cluster.path).name}; compute priced with {machine.name} "
        f"({_shown(machine.path)}). A step is rank 0's own "
        f"step on its GPU (graph mode, resident data) plus every collective it calls, each by its fastest algorithm "
        f"(ring, double binary tree, hierarchical, in-switch reduction inside a node), serialised as the trainer "
        f"runs them; the hybrid grid is the fastest p_data x p_model. The all-reduce model is set beside published "
        f"nccl-tests figures below (docs/model.md says where and why it differs).")
    s.figures.append(Figure(
        "cluster_scaling", f"Strong scaling (B = {st.batch_size}) and weak scaling ({st.batch_size} a GPU), "
        f"{'-'.join(map(str, st.layer_sizes))}: the model's lines, the traces' runs (p <= 4) as points",
        scaling_figure, {"panels": [
            (f"strong, B = {st.batch_size}", strong, measured_points(a, st.hidden_size, st.batch_size, False)),
            (f"weak, {st.batch_size} a GPU", weak, measured_points(a, st.hidden_size, st.batch_size, True))],
            "title": cluster.name}))
    rows = [{"scaling": mode, **{k: r[k] for k in ("procs", "strategy", "grid", "batch", "time_ms", "comm_ms",
                                                    "speedup", "collectives")}}
            for mode, rs in (("strong", strong), ("weak", weak)) for r in rs if r["procs"] in SHOWN_PROCS]
    s.tables.append(Table("cluster_scaling", "Each strategy at its best collective: time per batch, its "
                                             "communication, speedup in samples per second over one GPU", rows))
    last = max((r for r in strong if r["procs"] == PROCS[-1]), key=lambda r: r["samples_per_s"], default=None)
    top = max(strong, key=lambda r: r["samples_per_s"])
    if last:
        s.paragraphs.append(
            f"Strong scaling, B = {st.batch_size}: the fastest anywhere is {top['strategy']} ({top['grid']}) on "
            f"{top['procs']} GPUs, {top['time_ms']:.3f} ms a batch, {top['speedup']:.2f} x one GPU; at "
            f"{last['procs']} GPUs the fastest is {last['strategy']} ({last['grid']}), {last['time_ms']:.3f} ms, "
            f"{last['speedup']:.2f} x one GPU, {last['comm_ms']:.3f} ms of it communication ({last['collectives']}).")
    cross = crossover(cluster, machine, CROSSOVER_H, CROSSOVER_B, CROSSOVER_P, st.input_size, st.num_classes,
                      st.precision)
    s.tables.append(Table("cluster_crossover", "The fastest strategy over (p, H, B) and its time per batch",
                          _crossover_rows(cross)))
    s.tables.append(Table("allreduce_published", "The cluster model's all-reduce beside published nccl-tests "
                                                  "figures (time; a bus bandwidth as bytes x 2(p-1)/p / busbw)",
                          comparison()))
    return s


def _shown(path) -> str:
    """A machine file's path as a reader can follow it: from the working folder where it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, TypeError):
        return str(path)
