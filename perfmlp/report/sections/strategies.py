"""The partitioning strategies, where a run is not plain data parallelism:
which one the model says wins where (a map over H and B), measured against
predicted, the bytes each handed to collectives against the closed forms;
and the asynchronous parameter server's trade-off (analyses/psasync.py).
"""
from __future__ import annotations

import statistics

import numpy as np

from ...model.precision import precision as precision_of
from ...model.strategies import DEVICE_COMMS, best_strategy, closed_form_bytes, step_bytes
from ...trace.reader import Run
from ..analyses.psasync import async_row, curve, group_label, groups as groups_of, is_async, scheme, workers_of
from ..analysis import Analysis, RunSummary
from ..configurations import Configuration, configurations
from ..figures import STRATEGY_COLORS, encode, legend_below, log_axes, mark, subplots
from . import Figure, Section, Table
from ... import names as N
from ..thresholds import STRATEGY_TIE

S_COLORS = {0: "tab:blue", 1: "tab:orange", 2: "tab:green", 4: "tab:red"}   # ps-async: each staleness bound S


def _color(name: str) -> str:
    return STRATEGY_COLORS.get(name, STRATEGY_COLORS[N.HYBRID])   # every hybrid grid the hybrid's


def comm_bytes(a: Analysis, r: RunSummary) -> tuple[int | None, int | None]:
    """(counted in the trace, the model's) bytes the busiest rank handed to MPI and NCCL in a steady batch."""
    run = next((t for t in a.traces if t.run_id == r.run_id), None)
    if run is None:
        return None, None
    per = [c for c in (run.counters(rank) for rank in sorted(run.ranks)) if c]
    counted = max(c.bytes_mpi + c.bytes_nccl for c in per) if per else None
    model = step_bytes(run.layer_sizes, r.batch, r.procs, precision_of(r.precision).act_bytes, r.parallel,
                       r.model_procs, r.comm)["per_rank"]
    return counted, model


GROUP_SETTINGS = ("backend", "hidden", "batch", "procs", "precision", "transfer", "exec", "trace_level")


def group_key(c: Configuration) -> tuple:
    """What the strategies compared at one point share: every setting but the strategy and its exchange,
    and whether that exchange runs on the device (NCCL) or the host."""
    s = c.s
    return (*(s[k] for k in GROUP_SETTINGS), s["comm"] in DEVICE_COMMS)


def strategy_groups(a: Analysis) -> dict[tuple, dict[str, list]]:
    """group_key -> strategy -> its configurations (cuBLAS, judged, no overlap); one per strategy unless the
    set ran it with two exchanges of the same kind, and then every one is listed."""
    groups: dict = {}
    for c in configurations(a):
        if c.judged and c.s["gemm"] in (N.CUBLAS, None) and c.s["overlap"] in ("no overlap", None):
            groups.setdefault(group_key(c), {}).setdefault(c.s["strategy"], []).append(c)
    return groups


def section_strategies(a: Analysis) -> Section | None:
    if not any(r.strategy != N.DATA for r in a.runs):
        return None
    s = Section("Partitioning strategies: data, model, hybrid, parameter server")
    s.paragraphs.append(_pencil_and_paper(a))
    s.paragraphs.append(
        "Strategies are compared only where every other setting is the same (H, B, p, precision, batch transfer, "
        "execution mode, trace level, and an exchange on the device or on the host for all): each a configuration, "
        "the median of its repeats; the speed-up is over the one-GPU data-parallel configuration with the same "
        "settings.")
    groups = strategy_groups(a)
    one_gpu = {k[:3] + k[4:]: by["data"][0] for k, by in groups.items() if k[3] == 1 and N.DATA in by}
    rows, winners = [], []
    for key, by in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if key[3] == 1 or not any(n != N.DATA for n in by):   # one GPU, or data parallelism alone
            continue
        base = one_gpu.get(key[:3] + key[4:])
        rows += [strategy_row(a, c, name, base) for name, cs in sorted(by.items()) for c in cs]
        w = winner_row(by, base)
        if w:
            winners.append(w)
    s.tables.append(Table("strategy_runs", "Every strategy measured beside predicted (the report's primary machine "
                          "file), and the bytes each rank handed to collectives per step: counted in the trace "
                          "against the model's closed form", rows, hidden=("run",), tips={"configuration": "run"}))
    if winners:
        agree = sum(w["agree"] == "yes" for w in winners)
        s.paragraphs.append(f"The predicted winner is the measured one at {agree} of {len(winners)} measured points"
                            f"{'' if agree == len(winners) else ' (a tie is a predicted margin under 2%)'}.")
        s.tables.append(Table("strategy_winners", "Which strategy won at each measured point, measured and "
                              "predicted", winners))
    s.figures += map_figure(a, groups, winners)
    points = [r for r in rows if r["predicted ms"]]
    if points:
        s.figures.append(Figure("strategy_measured_vs_predicted", "Measured against predicted time per batch, "
                                "per strategy", measured_vs_predicted_by_strategy, dict(points=points)))
    return s


def _pencil_and_paper(a: Analysis) -> str:
    st = a.study
    D, H, C, B = st.layer_sizes + (st.batch_size,)
    sz = precision_of(st.precision).act_bytes
    P = max(r.procs for r in a.runs if r.strategy != N.DATA)   # the set's largest strategy run
    pen = {name: closed_form_bytes(D, H, C, B, P, sz, name) for name in ("data", "ps", "model")}
    return (f"Pencil and paper (docs/model.md), D={D}, H={H}, C={C}, B={B}, p={P}, {st.precision}: per step each rank "
            f"hands {pen['data']:,} bytes to the gradient allreduce with data parallelism (the whole gradient, "
            f"s(HD + H + CH + C + 1)), {pen['ps']:,} to the parameter server (reduce, then broadcast; {sz} fewer with "
            f"ps-nccl, which broadcasts no loss slot) and "
            f"{pen['model']:,} with model parallelism (the output's partial sums, s C B): "
            f"{pen['data'] / pen['model']:.1f}x fewer. Model parallelism wins on bytes while B < (HD + H + CH + C + 1) "
            f"/ C = {(H * D + H + C * H + C + 1) / C:,.0f} at H={H}; in time, the latencies and the redundant "
            f"whole-batch loss on every rank move the crossover (the map below).")


def strategy_row(a: Analysis, c: Configuration, name: str, base: Configuration | None) -> dict:
    r = c.representative
    counted, model = comm_bytes(a, r)
    return {"configuration": c.label, "H": r.hidden_label, "B": r.batch, "procs": r.procs, "strategy": name,
            "comm": r.comm, "transfer": r.transfer, "exec": r.exec, "trace level": r.trace_level,
            "runs": len(c.runs), "ms per batch": c.t_ms, "predicted ms": c.predicted_ms,
            "error %": r.error_pct(r.predicted) if r.predicted else None,
            "bytes to collectives per rank (counted)": counted, "bytes per rank (model)": model,
            "counted = model": counted == model, "speed-up over 1 GPU": base.t_ms / c.t_ms if base else None,
            "run": " ".join(x.run_id for x in c.runs)}


def winner_row(by: dict, base: Configuration | None) -> dict | None:
    """Which strategy won at one point, measured and predicted (a strategy run two ways: its fastest)."""
    best = {n: min(cs, key=lambda c: c.t_ms) for n, cs in by.items()}
    preds = {n: c.predicted_ms for n, c in best.items() if c.predicted_ms}
    if not preds:
        return None
    r = next(iter(best.values())).representative
    measured = min(best, key=lambda n: best[n].t_ms)
    order = sorted(preds, key=preds.get)
    margin = (preds[order[1]] / preds[order[0]] - 1) if len(order) > 1 else None
    tie = margin is not None and margin < STRATEGY_TIE.value
    return {"H": r.hidden_label, "B": r.batch, "procs": r.procs, "transfer": r.transfer, "exec": r.exec,
            "measured winner": measured, "predicted winner": order[0],
            "predicted margin %": 100 * margin if margin is not None else None,
            "agree": "yes" if measured == order[0] else ("tie predicted" if tie else "no"),
            "best speed-up over 1 GPU": (base.t_ms / best[measured].t_ms) if base else None}


def map_figure(a: Analysis, groups: dict, winners: list[dict]) -> list[Figure]:
    """The predicted best strategy over H and B at the set's usual p, transfer, exchange and execution mode,
    with the points measured at exactly those settings."""
    st = a.study
    keys = [k for k, by in groups.items() if k[3] > 1 and k[0] == N.CUPY and any(n != N.DATA for n in by)]
    if not keys:
        return []
    procs, prec, transfer, mode, device = (statistics.mode(k[i] for k in keys) for i in (3, 4, 5, 6, 8))
    mine = [k for k in keys if (k[3], k[4], k[5], k[6], k[8]) == (procs, prec, transfer, mode, device)]
    hs = sorted({int(k[1]) for k in mine if "x" not in str(k[1])})
    bs = sorted({k[2] for k in mine})
    meas = [{"H": int(w["H"]), "B": w["B"], "winner": w["measured winner"], "agree": w["agree"] != "no"}
            for w in winners if "x" not in w["H"] and (w["procs"], w["transfer"], w["exec"]) == (procs, transfer, mode)
            and (int(w["H"]) in hs and w["B"] in bs)]
    m, H, B = a.machines.primary, st.hidden_size, st.batch_size
    return [Figure(
        "strategy_map", f"Predicted best strategy over H and B, p={procs}, {transfer} data, "
        f"{'NCCL' if device else 'host MPI'}, {mode} execution ({m.name}); each measured point coloured by the "
        "strategy that won it, a red cross where the model predicted another", strategy_map,
        dict(machine=m, D=st.input_size, C=st.num_classes, procs=procs, precision=prec, transfer=transfer,
             device=device, exec_mode=mode, h_range=(min(hs + [H]) / 2, max(hs + [H]) * 2),
             b_range=(min(bs + [B]) / 2, max(bs + [B]) * 2), measured=meas))]


# ---- figures ----------------------------------------------------------------------------------

def strategy_map(machine, D, C, procs, precision, transfer, device, h_range, b_range, measured, n=18,
                 exec_mode=N.EAGER):
    """The predicted best strategy on a log grid of H and B, and the measured winners on it (`device`: NCCL,
    else MPI staged through the host; exec_mode graph: each strategy captured where its step can be)."""
    hs = np.unique(np.geomspace(*h_range, n).round().astype(int))
    bs = np.unique(np.geomspace(max(b_range[0], procs), b_range[1], n).round().astype(int))
    names: list[str] = []
    grid = np.zeros((len(bs), len(hs)), dtype=int)
    for j, h in enumerate(hs):
        for i, b in enumerate(bs):
            ranking = best_strategy(machine, (D, int(h), C), int(b), procs, precision, transfer, True,
                                    exec_mode=exec_mode, staged=not device)
            if not ranking:
                continue
            best = ranking[0][0]
            if len(ranking) > 1 and ranking[1][1].total_s < (1 + STRATEGY_TIE.value) * ranking[0][1].total_s:
                best = "tie"
            if best not in names:
                names.append(best)
            grid[i, j] = names.index(best)
    fig, ax = subplots(figsize=(6.4, 4.8))
    from matplotlib.colors import ListedColormap
    ax.pcolormesh(hs, bs, grid, cmap=ListedColormap([_color(x) for x in names]), shading="nearest", alpha=0.45,
                  vmin=-0.5, vmax=len(names) - 0.5)
    for pt in measured:
        ax.scatter(pt["H"], pt["B"], s=90, color=_color(pt["winner"]), edgecolors="black", zorder=3)
        if not pt["agree"]:
            ax.scatter(pt["H"], pt["B"], s=160, marker="x", color="red", zorder=4)
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=_color(x), edgecolor="gray", alpha=0.6,
                     label=f"{x} predicted fastest" if x != "tie"
                     else f"predicted within {100 * STRATEGY_TIE.value:g}%: a tie")
               for x in names]
    handles += [mark(f"measured: {w} fastest", color=_color(w), markersize=8, markeredgecolor="black")
                for w in dict.fromkeys(pt["winner"] for pt in measured)]
    if any(not pt["agree"] for pt in measured):
        handles.append(mark("measured winner not the predicted one", "x", "red", markersize=9))
    log_axes(ax, "hidden units H", "batch B (split or shared over the ranks)",
             f"Fastest strategy predicted, p={procs}, {exec_mode} execution")
    legend_below(ax, handles, ncol=2)
    return encode(fig)


def measured_vs_predicted_by_strategy(points):
    """points: strategy_row()s with a prediction."""
    fig, ax = subplots(figsize=(5.2, 5.0))
    for name in sorted({p["strategy"] for p in points}):
        xs = [p["predicted ms"] for p in points if p["strategy"] == name]
        ys = [p["ms per batch"] for p in points if p["strategy"] == name]
        ax.scatter(xs, ys, color=_color(name), label=name, edgecolors="black", zorder=3)
    lo = min(min(p["predicted ms"], p["ms per batch"]) for p in points) / 1.3
    hi = max(max(p["predicted ms"], p["ms per batch"]) for p in points) * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
    log_axes(ax, "predicted ms per batch", "measured ms per batch", "Measured against predicted time per batch, "
             "per strategy")
    legend_below(ax, ncol=3)
    return encode(fig)


# ---- the asynchronous parameter server ---------------------------------------------------------

def section_psasync(runs: list[Run]) -> Section | None:
    """The trade-off section, or None without a ps-async run."""
    groups = groups_of(runs)
    if not groups:
        return None
    s = Section("Asynchronous SGD: statistical against hardware efficiency")
    s.paragraphs.append(
        "ps-async: rank 0 applies each worker's gradient as it arrives; a piece of batch k is handed out only "
        "once every batch before k - S is applied, so S = 0 is synchronous SGD and a larger S lets the workers "
        "that are ahead go on without the slowest. Updates are counted in batches of B samples (W asynchronous "
        "updates make one); wall time is the epochs' own, evaluations left out.")
    rows = []
    for key, members in groups.items():
        s.paragraphs.append(_finding(key, members))
        for r in members:
            x, wall, acc = (curve(r) or [(None, None, None)])[-1]   # at the end of the last epoch
            rows.append({"group": group_label(key), "scheme": scheme(r), "run": r.run_id, "procs": r.procs,
                         "workers": workers_of(r), "final_accuracy": acc, "wall_s": wall,
                         "ms_per_batch": 1e3 * wall / x if x else None, **(async_row(r) if is_async(r) else {})})
    s.figures.append(Figure("psasync_tradeoff", "Held-out accuracy against updates (left) and wall time (right), "
                            "one row per group", tradeoff, {"groups": {group_label(k): [(scheme(r), curve(r))
                                                                         for r in m] for k, m in groups.items()}}))
    s.tables.append(Table("psasync", "Each run of the trade-off, and what its server measured", rows))
    return s


def _finding(key: tuple, members: list[Run]) -> str:
    ref = next((curve(r) for r in members if not is_async(r)), None)
    if not ref:
        return f"{group_label(key)}: no synchronous run of the same job on {key[1]} ranks to compare with."
    _, ref_wall, ref_acc = ref[-1]
    parts = [f"{scheme(r)} {100 * acc:.2f}% in {wall:.1f} s ({ref_wall / wall:.2f}x)"
             for r, (_, wall, acc) in ((r, curve(r)[-1]) for r in members if is_async(r) and curve(r))]
    return (f"{group_label(key)}: synchronous {100 * ref_acc:.2f}% held-out accuracy in {ref_wall:.1f} s; "
            + "; ".join(parts) + ".")


def tradeoff(groups: dict[str, list[tuple[str, list]]]):
    """groups: label -> [(scheme, [(updates, wall_s, accuracy), ...]), ...]."""
    fig, axes = subplots(len(groups), 2, figsize=(10, 3.6 * len(groups)), squeeze=False)
    for (label, series), (a1, a2) in zip(groups.items(), axes):
        for name, pts in series:
            if not pts:
                continue
            S = int(name.split("=")[1]) if "=" in name else None
            style = dict(color=S_COLORS.get(S, "tab:purple"), marker="o", ms=3, lw=1.2) if S is not None else \
                dict(color="black", marker="s", ms=3, lw=2)
            a1.plot([p[0] for p in pts], [100 * p[2] for p in pts], label=name, **style)
            a2.plot([p[1] for p in pts], [100 * p[2] for p in pts], label=name, **style)
        a1.set_xlabel("updates (batches of B samples)")
        a2.set_xlabel("wall time (s)")
        for a in (a1, a2):
            a.set_ylabel("held-out accuracy (%)")
            a.set_title(label, fontsize=9)
            a.grid(True, lw=0.3)
        a1.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return encode(fig)
