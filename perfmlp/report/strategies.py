"""The strategies in the report: which strategy the model says
wins where (a map over H and B), the measured runs on it, measured against
predicted per strategy, the bytes each strategy handed to collectives
(counted, against the model's closed forms), and strong scaling with the
better strategy. Present only when the traces hold a run that is not plain
data parallelism (perfmlp/strategies); pure, like sections.py.
"""
from __future__ import annotations

import statistics

import numpy as np

from ..model.costs import itemsize
from ..model.strategies import DEVICE_COMMS, best_strategy, closed_form_bytes, step_bytes
from .analysis import Analysis, RunSummary
from .figures import _plt, encode
from .sections import Figure, Section, Table

STRATEGY_COLORS = {"data": "tab:blue", "ps": "tab:gray", "model": "tab:orange", "tie": "white"}  # hybrids: green
TIE = 0.02   # predicted times within 2% of each other: the model calls it a tie


def _color(name: str) -> str:
    return STRATEGY_COLORS.get(name, "tab:green")


def comm_bytes(a: Analysis, r: RunSummary) -> tuple[int | None, int | None]:
    """Bytes the busiest rank handed to MPI and NCCL in one steady full batch:
    (counted in the trace, the model's)."""
    run = next((t for t in a.traces if t.run_id == r.run_id), None)
    if run is None:
        return None, None
    per = [c for c in (run.counters(rank) for rank in sorted(run.ranks)) if c]
    counted = max(c.get("bytes_mpi", 0) + c.get("bytes_nccl", 0) for c in per) if per else None
    model = step_bytes(run.layer_sizes, r.batch, r.procs, itemsize(r.precision), r.parallel, r.model_procs,
                       r.comm)["per_rank"]
    return counted, model


def _key(r: RunSummary) -> tuple:
    return (r.hidden, r.batch, r.procs, r.precision, r.transfer)


def section_strategies(a: Analysis) -> Section | None:
    if not any(r.strategy != "data" for r in a.runs):
        return None
    s = Section("Partitioning strategies: data, model, hybrid, parameter server")
    s.paragraphs.append(_pencil_and_paper(a))
    groups: dict = {}
    for r in a.runs:
        if not r.profiled and r.gemm == "cublas":
            groups.setdefault(_key(r), {}).setdefault(r.strategy, r)
    rows, winners, points = _measured(a, groups)
    s.tables.append(Table("partition_runs", "Every strategy measured beside predicted (the report's primary machine "
                          "file), and the bytes each rank handed to collectives per step: counted in the trace "
                          "against the model's closed form", rows))
    if winners:
        agree = sum(w["agree"] == "yes" for w in winners)
        s.paragraphs.append(f"The predicted winner is the measured one at {agree} of {len(winners)} measured points"
                            f"{'' if agree == len(winners) else ' (a tie is a predicted margin under 2%)'}.")
        s.tables.append(Table("partition_winners", "Which strategy won at each measured point, measured and "
                              "predicted", winners))
    figure = _map_figure(a, groups, winners)
    if figure:
        s.figures.append(figure)
    if points:
        s.figures.append(Figure("partition_measured_vs_predicted", "Measured against predicted time per batch, "
                                "per strategy", measured_vs_predicted_by_strategy, dict(points=points)))
    return s


def _pencil_and_paper(a: Analysis) -> str:
    st = a.study
    D, H, C, B = st.input_size, st.hidden_size, 10, st.batch_size
    sz = itemsize(st.precision)
    P = max(r.procs for r in a.runs if r.strategy != "data")   # the set's largest strategy run
    pen = {name: closed_form_bytes(D, H, C, B, P, sz, name) for name in ("data", "ps", "model")}
    return (f"Pencil and paper (docs/model.md), D={D}, H={H}, C={C}, B={B}, p={P}, {st.precision}: per step each rank "
            f"hands {pen['data']:,} bytes to the gradient allreduce with data parallelism (the whole gradient, "
            f"s(HD + H + CH + C + 1)), {pen['ps']:,} to the parameter server (reduce, then broadcast; {sz} fewer with "
            f"ps-nccl, which broadcasts no loss slot) and "
            f"{pen['model']:,} with model parallelism (the output's partial sums, s C B): "
            f"{pen['data'] / pen['model']:.1f}x fewer. Model parallelism wins on bytes while B < (HD + H + CH + C + 1) "
            f"/ C = {(H * D + H + C * H + C + 1) / C:,.0f} at H={H}; in time, the latencies and the redundant "
            f"whole-batch loss on every rank move the crossover (the map below).")


def _measured(a: Analysis, groups: dict) -> tuple[list, list, list]:
    """(a row per measured strategy run, a row per measured point with its
    measured and predicted winner, measured-against-predicted points)."""
    one_gpu = {(k[0], k[1], k[3], k[4]): g["data"] for k, g in groups.items() if k[2] == 1 and "data" in g}
    rows, winners, points = [], [], []
    for key, by in sorted(groups.items()):
        hidden, batch, procs, prec, transfer = key
        if procs == 1 or not any(n != "data" for n in by):
            continue
        base = one_gpu.get((hidden, batch, prec, transfer))
        for name, r in sorted(by.items()):
            counted, model = comm_bytes(a, r)
            pred = r.predicted
            rows.append({"H": r.hidden_label, "B": batch, "procs": procs, "strategy": name, "comm": r.comm,
                         "transfer": transfer, "exec": r.exec, "ms per batch": r.t_ms,
                         "predicted ms": pred.total_s * 1e3 if pred else None,
                         "error %": r.error_pct(pred), "bytes to collectives per rank (counted)": counted,
                         "bytes per rank (model)": model, "counted = model": counted == model,
                         "speed-up over 1 GPU": base.t_ms / r.t_ms if base else None, "run": r.run_id})
            if pred:
                points.append({"strategy": name, "measured_ms": r.t_ms, "predicted_ms": pred.total_s * 1e3})
        winner = _winner(key, by, base)
        if winner:
            winners.append(winner)
    return rows, winners, points


def _winner(key: tuple, by: dict, base) -> dict | None:
    """The measured and the predicted winner at one measured point."""
    hidden, batch, procs, _, transfer = key
    measured = min(by.items(), key=lambda kv: kv[1].t_ms)[0]
    preds = {n: r.predicted.total_s for n, r in by.items() if r.predicted}
    if not preds:
        return None
    order = sorted(preds, key=preds.get)
    margin = (preds[order[1]] / preds[order[0]] - 1) if len(order) > 1 else None
    tie = margin is not None and margin < TIE
    return {"H": "x".join(map(str, hidden)), "B": batch, "procs": procs, "transfer": transfer,
            "measured winner": measured, "predicted winner": order[0],
            "predicted margin %": 100 * margin if margin is not None else None,
            "agree": "yes" if measured == order[0] else ("tie predicted" if tie else "no"),
            "best speed-up over 1 GPU": (base.t_ms / by[measured].t_ms) if base else None}


def _map_figure(a: Analysis, groups: dict, winners: list) -> Figure | None:
    """The predicted-best map at the measured GPU points' most common setting."""
    gpu_groups = [k for k, by in groups.items() if k[2] > 1 and any(r.gpu for r in by.values())]
    if not gpu_groups:
        return None
    st = a.study
    D, H, C, B = st.input_size, st.hidden_size, 10, st.batch_size
    procs = statistics.mode(k[2] for k in gpu_groups)
    transfer = statistics.mode(k[4] for k in gpu_groups)
    prec = statistics.mode(k[3] for k in gpu_groups)
    device = statistics.mode(r.comm in DEVICE_COMMS for k in gpu_groups for r in groups[k].values())
    mode = statistics.mode(r.exec for k in gpu_groups for r in groups[k].values())
    hs = sorted({k[0][0] for k in gpu_groups if len(k[0]) == 1})
    bs = sorted({k[1] for k in gpu_groups})
    meas = [{"H": k[0][0], "B": k[1], "winner": w["measured winner"], "agree": w["agree"] != "no"}
            for k in gpu_groups if len(k[0]) == 1 and k[2] == procs
            for w in winners if (w["H"], w["B"], w["procs"]) == (str(k[0][0]), k[1], k[2])]
    m = a.machines.primary
    return Figure(
        "partition_map", f"Predicted best strategy over H and B, p={procs}, {transfer} data, "
        f"{'NCCL' if device else 'host MPI'}, {mode} execution ({m.name}); measured points: the measured "
        "winner, a red cross where the model disagreed", strategy_map,
        dict(machine=m, D=D, C=C, procs=procs, precision=prec, transfer=transfer, device=device, exec_mode=mode,
             h_range=(min(hs + [H]) / 2, max(hs + [H]) * 2), b_range=(min(bs + [B]) / 2, max(bs + [B]) * 2),
             measured=meas))


# ---- figures ----------------------------------------------------------------------------------

def strategy_map(machine, D, C, procs, precision, transfer, device, h_range, b_range, measured, n=25,
                 exec_mode="eager"):
    """The predicted best strategy on a log grid of H and B, and the measured winners on it
    (GPU runs: `device` NCCL, else MPI staged through the host; exec_mode graph: each strategy
    in graph mode where its step can be captured)."""
    plt = _plt()
    hs = np.unique(np.geomspace(*h_range, n).round().astype(int))
    bs = np.unique(np.geomspace(max(b_range[0], procs), b_range[1], n).round().astype(int))
    names: list[str] = []
    grid = np.zeros((len(bs), len(hs)), dtype=int)
    for j, h in enumerate(hs):
        for i, b in enumerate(bs):
            # on GPUs: NCCL, else host MPI through the host (mpi-staged)
            ranking = best_strategy(machine, (D, int(h), C), int(b), procs, precision, transfer, True,
                                    exec_mode=exec_mode, staged=not device)
            if not ranking:
                continue
            best = ranking[0][0]
            if len(ranking) > 1 and ranking[1][1].total_s < (1 + TIE) * ranking[0][1].total_s:
                best = "tie"
            if best not in names:
                names.append(best)
            grid[i, j] = names.index(best)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    from matplotlib.colors import ListedColormap
    ax.pcolormesh(hs, bs, grid, cmap=ListedColormap([_color(x) for x in names]), shading="nearest", alpha=0.45,
                  vmin=-0.5, vmax=len(names) - 0.5)
    for pt in measured:
        ax.scatter(pt["H"], pt["B"], s=90, color=_color(pt["winner"]), edgecolors="black", zorder=3)
        if not pt["agree"]:
            ax.scatter(pt["H"], pt["B"], s=160, marker="x", color="red", zorder=4)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=_color(x), edgecolor="gray", alpha=0.6,
                             label=f"{x} predicted best" if x != "tie" else f"within {100 * TIE:g}%: a tie")
                       for x in names], loc="upper left", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("hidden units H")
    ax.set_ylabel("batch B (split or shared over the ranks)")
    ax.set_title(f"Fastest strategy predicted, p={procs}")
    return encode(fig)


def measured_vs_predicted_by_strategy(points):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    for name in sorted({p["strategy"] for p in points}):
        xs = [p["predicted_ms"] for p in points if p["strategy"] == name]
        ys = [p["measured_ms"] for p in points if p["strategy"] == name]
        ax.scatter(xs, ys, color=_color(name), label=name, edgecolors="black", zorder=3)
    lo = min(min(p["predicted_ms"], p["measured_ms"]) for p in points) / 1.3
    hi = max(max(p["predicted_ms"], p["measured_ms"]) for p in points) * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted ms per batch")
    ax.set_ylabel("measured ms per batch")
    ax.legend(fontsize=8)
    return encode(fig)
