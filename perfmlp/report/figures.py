"""The report's figures (matplotlib, Agg). Each drawing function returns the
figure as {"png": bytes, "svg": bytes}; the renderer writes them.

The bytes are reproducible: no date or software version in the metadata and
a fixed salt for the SVG's clip-path ids, so a regenerated report leaves an
unchanged figure's files as they were. matplotlib is imported when a figure
is drawn (`require` checks for it up front).
"""
from __future__ import annotations

import io

import numpy as np

from ..errors import PerfmlpError
from ..model.roofline import modified_roofline, standard_roofline
from ..trace.format import PHASES

MARKERS = {1: "o", 2: "s", 4: "^", 8: "D"}
H_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:brown")   # over the study's H list
PHASE_COLORS = dict(zip(PHASES, ("tab:red", "tab:blue", "tab:cyan", "tab:green", "tab:pink", "tab:purple",
                                 "tab:orange", "tab:olive", "tab:gray", "tab:brown", "gold", "black")))
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
_SVG_SALT = "perfmlp.report"


def require() -> None:
    """A one-line error naming the extra to install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PerfmlpError("the report draws its figures with matplotlib, which is not installed: "
                           "pip install 'perfmlp[report]'") from None


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def encode(fig) -> dict[str, bytes]:
    import matplotlib
    out = {}
    with matplotlib.rc_context({"svg.hashsalt": _SVG_SALT}):
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=130 if ext == "png" else None, bbox_inches="tight",
                        metadata=_METADATA[ext])
            out[ext] = buf.getvalue()
    _plt().close(fig)
    return out


def roofline(points, peak, bws: dict, kind: str, title: str, model: str, h_list=()):
    """points: dicts with ai, measured, predicted (FLOP/s per GPU), H, procs.
    bws: label -> bytes/s. kind: 'modified' or 'standard'. model: which
    machine file predicted ('calibrated' or 'datasheet')."""
    plt = _plt()
    colors = dict(zip(h_list, H_COLORS))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ais = [p["ai"] for p in points] or [100.0]
    lo, hi = min(ais) / 4, max(max(ais) * 8, max(peak / bw for bw in bws.values()) * 4)
    x = np.logspace(np.log10(lo), np.log10(hi), 300)
    styles = ["-", "--", ":", "-."]
    for (label, bw), ls in zip(bws.items(), styles):
        y = modified_roofline(x, peak, bw) if kind == "modified" else standard_roofline(x, peak, bw)
        ax.plot(x, y, ls, color="black", lw=1.2, label=f"{kind} roofline, {label} {bw / 1e9:.1f} GB/s")
        ridge = peak / bw
        ax.axvline(ridge, color="grey", lw=0.6, ls=ls)
        ax.annotate(f"ridge {ridge:.0f}", (ridge, peak * 0.03), rotation=90, fontsize=7, color="grey")
    ax.axhline(peak, color="tab:red", lw=0.8)
    ax.annotate(f"peak {peak / 1e12:.1f} TFLOP/s", (lo * 1.1, peak * 1.08), fontsize=8, color="tab:red")
    seen = set()
    for p in points:
        c = colors.get(p["H"], "tab:purple")
        m = MARKERS.get(p["procs"], "x")
        lab = f"H={p['H']}, p={p['procs']}"
        ax.scatter([p["ai"]], [p["measured"]], color=c, marker=m, s=40, zorder=3,
                   label=(lab + " measured") if lab not in seen else None)
        if p.get("predicted"):
            ax.scatter([p["ai"]], [p["predicted"]], facecolors="none", edgecolors=c, marker=m, s=70, zorder=3)
            ax.plot([p["ai"], p["ai"]], [p["measured"], p["predicted"]], color=c, lw=0.6, alpha=0.6)
        seen.add(lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per cudaMemcpy byte)")
    ax.set_ylabel("FLOP/s per GPU")
    ax.set_title(title + f"\nfilled: measured, hollow: predicted ({model} model)", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    return encode(fig)


def scaling(groups, title: str, ticks=(1, 2, 4)):
    """groups: label -> list of (procs, time_ms, efficiency)."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, pts in groups.items():
        pts = sorted(pts)
        a1.plot([p for p, _, _ in pts], [t for _, t, _ in pts], "o-", label=label)
        a2.plot([p for p, _, _ in pts], [100 * e for _, _, e in pts], "o-", label=label)
    for a in (a1, a2):
        a.set_xlabel("processes (GPUs)")
        a.set_xticks(list(ticks))
        a.grid(True, lw=0.3)
    a1.set_ylabel("time per batch (ms)")
    a1.set_yscale("log")
    a2.set_ylabel("efficiency (%)")
    a2.axhline(100, color="grey", lw=0.6)
    a1.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return encode(fig)


def phases(runs_phases, title: str):
    """runs_phases: list of (run label, {rank: {phase: ms}})."""
    plt = _plt()
    rows = [(f"{lab} r{r}", ph) for lab, per in runs_phases for r, ph in sorted(per.items())]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.2))
    for i, (lab, ph) in enumerate(rows):
        left = 0.0
        for name_, c in PHASE_COLORS.items():
            v = ph.get(name_, 0.0)
            if v:
                ax.barh(i, v, left=left, color=c, label=name_ if i == 0 or name_ not in rows[0][1] else None)
                left += v
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("median time per batch (ms)")
    ax.set_title(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, ncol=4, loc="lower right")
    return encode(fig)


def measured_vs_predicted(rows, series: dict[str, str]):
    """rows: dicts with measured_ms and one key per series; series: key ->
    label (each machine file's prediction: calibrated, datasheet)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    m = np.array([r["measured_ms"] for r in rows])
    for (key, label), mk in zip(series.items(), ("o", "x")):
        v = np.array([r[key] or np.nan for r in rows])
        ax.scatter(m, v, marker=mk, label=label, s=25)
    lo, hi = m.min() / 2, m.max() * 2
    x = np.array([lo, hi])
    ax.plot(x, x, color="black", lw=0.8)
    ax.fill_between(x, x * 0.95, x * 1.05, color="grey", alpha=0.2, label="±5%")
    ax.plot(x, x * 0.85, ":", color="grey", lw=0.6)
    ax.plot(x, x * 1.15, ":", color="grey", lw=0.6, label="±15%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time per batch (ms)")
    ax.set_ylabel("predicted time per batch (ms)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    return encode(fig)


CEILING_COLORS = {"float64": "tab:gray", "float32": "tab:blue", "tf32": "tab:green", "bf16": "tab:red",
                  "fp16": "tab:orange"}


def ceilings_roofline(points, ceilings: dict, bws: dict, title: str):
    """A roofline of several ceilings, as Nsight Compute draws its
    hierarchical one: a horizontal line per precision's GEMM units
    (`ceilings`: format -> FLOP/s; equal ones share a line), a slanted one
    per memory level (`bws`: label -> bytes/s; for PCIe also the modified,
    serialised, bound under the ceilings the points ran at, dotted); points:
    dicts with precision (its GEMM format), measured (FLOP/s per GPU),
    ai_hbm and ai_pcie (FLOPs per device-memory / copied byte; None: not
    drawn). A point's colour is its precision's ceiling's."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ais = [p[k] for p in points for k in ("ai_hbm", "ai_pcie") if p.get(k)] or [1.0, 1e4]
    top = max(ceilings.values())
    lo, hi = min(ais) / 4, max(max(ais) * 8, max(top / bw for bw in bws.values()) * 2)
    x = np.logspace(np.log10(lo), np.log10(hi), 300)
    drawn = {}
    for fmt, peak in sorted(ceilings.items(), key=lambda kv: kv[1]):
        drawn.setdefault(peak, []).append(fmt)
    for peak, fmts in drawn.items():
        c = CEILING_COLORS.get(fmts[0], "black")
        names = "/".join(f.upper() if f in ("tf32", "bf16", "fp16") else f"FFMA {f}" for f in fmts)
        ax.axhline(peak, color=c, lw=0.9)
        ax.annotate(f"{names} {peak / 1e12:.1f} TFLOP/s", (lo * 1.1, peak * 1.08), fontsize=7, color=c)
    for (label, bw), ls in zip(bws.items(), ("-", "--", "-.")):
        ax.plot(x, np.minimum(x * bw, top), ls, color="black", lw=1.0, label=f"{label} {bw / 1e9:.0f} GB/s")
    pcie = [bw for label, bw in bws.items() if label.startswith("PCIe")]
    for fmt in dict.fromkeys(p["precision"] for p in points):
        if pcie and fmt in ceilings:
            ax.plot(x, modified_roofline(x, ceilings[fmt], pcie[0]), ":", color=CEILING_COLORS.get(fmt, "black"),
                    lw=1.0, label=f"{fmt}: copies serialised (modified)")
    seen = set()
    for p in points:
        c = CEILING_COLORS.get(p["precision"], "black")
        for key, m, level in (("ai_hbm", "s", "HBM"), ("ai_pcie", "o", "PCIe")):
            if p.get(key):
                lab = f"{p['precision']}, AI per {level} byte"
                ax.scatter([p[key]], [p["measured"]], color=c, marker=m, s=30, zorder=3,
                           label=lab if lab not in seen else None)
                seen.add(lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the memory level)")
    ax.set_ylabel("FLOP/s per GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=6, loc="lower right")
    return encode(fig)
