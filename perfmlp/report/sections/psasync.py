"""The asynchronous parameter server's section: analyses/psasync.py's groups,
curves and server measurements put into words, a table and a figure."""
from __future__ import annotations

from ...trace.reader import Run
from ..analyses.psasync import async_row, curve, group_label, groups as groups_of, is_async, scheme, workers_of
from ..figures import encode, subplots
from . import Figure, Section, Table

S_COLORS = {0: "tab:blue", 1: "tab:orange", 2: "tab:green", 4: "tab:red"}


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
