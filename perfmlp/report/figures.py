"""The report's figures (matplotlib, Agg), and the drawing helpers the
sections' own figures share. Each drawing function returns the figure as
{"png": bytes, "svg": bytes}: reproducible bytes (no date or version in the
metadata, a fixed salt for the SVG's ids), so a regenerated report leaves
an unchanged figure's files as they were. matplotlib is imported only when
a figure is drawn (`require` checks for it up front).
"""
from __future__ import annotations

import io
import math

import numpy as np

from ..errors import PerfmlpError
from ..model.roofline import modified_roofline, standard_roofline
from .. import names as N

MARKERS = {1: "o", 2: "s", 4: "^", 8: "D"}                 # process count
H_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:brown")   # over the study's H list
TRANSFER_MARKERS = {N.PAGEABLE: "o", N.PREFETCH_PAGEABLE: "v", N.PINNED: "s", N.PREFETCH: "D", N.RESIDENT: "^"}
TRANSFER_STYLES = {N.PAGEABLE: "-", N.PINNED: "--", N.RESIDENT: ":"}
STRATEGY_COLORS = {N.DATA: "tab:blue", N.PS: "tab:gray", N.MODEL: "tab:orange", N.HYBRID: "tab:green", "tie": "white"}
# what bounds a configuration (report/verdicts.py CATEGORIES): the overview's colours, in HTML too (render.py)
CATEGORY_COLORS = {"GEMMs": "#4c72b0", "elementwise kernels": "#64b5cd", "launches and host": "#8172b2",
                   "copies": "#dd8452", "communication": "#55a868", "waiting for a rank": "#c44e52",
                   "compute (NumPy)": "#937860"}
PHASE_COLORS = dict(zip(N.PHASES, ("tab:red", "tab:blue", "tab:cyan", "tab:green", "tab:pink", "tab:purple",
                                 "tab:orange", "tab:olive", "tab:gray", "tab:brown", "gold", "black",
                                 "navy", "teal", "maroon", "lime")))
_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
_SVG_SALT = "perfmlp.report"
_PNG_DPI = 130


def require() -> None:
    """A one-line error naming the extra to install when matplotlib is missing."""
    try:
        _plt()
    except ImportError:
        raise PerfmlpError("the report draws its figures with matplotlib, which is not installed: "
                           "pip install 'perfmlp[report]'") from None


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def subplots(*args, **kw):
    """plt.subplots on the Agg backend: (figure, axes)."""
    return _plt().subplots(*args, **kw)


def encode(fig) -> dict[str, bytes]:
    import matplotlib
    out = {}
    # the tight bounding box is found once, at the PNG's resolution, and both formats are saved to it: a save
    # asked for "tight" draws the whole figure once more per format, where measuring the artists' extents
    # lays out only what it measures. SVG text stays text (the reader's sans-serif), not a path per glyph:
    # far fewer bytes
    with matplotlib.rc_context({"svg.hashsalt": _SVG_SALT, "svg.fonttype": "none"}):
        fig.set_dpi(_PNG_DPI)
        bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=_PNG_DPI if ext == "png" else None, bbox_inches=bbox,
                        metadata=_METADATA[ext])
            out[ext] = buf.getvalue()
    _plt().close(fig)
    return out


def plain_log(ax, axis: str = "both", unit: str = "") -> None:
    """Log axes labelled 1, 10, 100, 1k, 10k, ... (no mathtext: quicker to draw, as clear)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def label(v, _pos=None):
        for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= size:
                return f"{v / size:g}{suffix}{unit}"
        return f"{v:g}{unit}"
    for a in {"x": (ax.xaxis,), "y": (ax.yaxis,), "both": (ax.xaxis, ax.yaxis)}[axis]:
        a.set_major_locator(LogLocator(base=10))
        a.set_major_formatter(FuncFormatter(label))
        a.set_minor_formatter(NullFormatter())


def legend_below(ax, handles=None, labels=None, ncol: int = 3, fontsize: float = 7, **kw):
    """A legend under the axes, where it hides no data (`labels`: the handles' own by default)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    elif labels is None:
        labels = [h.get_label() for h in handles]
    # anchored to the axes' bottom edge and pushed down by a fixed number of font sizes, clear of the
    # tick labels and the axis label whatever the axes' height
    kw.setdefault("borderaxespad", 4.2)
    return ax.legend(handles, labels, fontsize=fontsize, ncol=ncol, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                     frameon=False, **kw)


def _roof_lines(ax, lo: float, hi: float, points: int, peak, bws: dict, kind: str):
    """Each copy bandwidth's roofline over `points` log-spaced AIs from lo to hi, and the peak."""
    x = np.logspace(np.log10(lo), np.log10(hi), points)
    for label, bw in bws.items():
        y = modified_roofline(x, peak, bw) if kind == "modified" else standard_roofline(x, peak, bw)
        ax.plot(x, y, TRANSFER_STYLES.get(label, "-."), color="black", lw=1.1,
                label=f"{kind} roofline, {label} copies ({bw / 1e9:.1f} GB/s)")
    ax.axhline(peak, color="tab:red", lw=0.8, label=f"peak {peak / 1e12:.1f} TFLOP/s")


def mark(label: str, marker: str = "o", color: str = "grey", **kw):
    """A legend handle: a marker alone (no line)."""
    from matplotlib.lines import Line2D
    return Line2D([], [], marker=marker, color=color, ls="", label=label, **kw)


def swatches(ax, colors: dict, ncol: int) -> None:
    """legend_below of a colour swatch per label (`colors`: label -> colour)."""
    from matplotlib.patches import Rectangle
    legend_below(ax, [Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], list(colors), ncol=ncol)


def log_axes(ax, xlabel: str, ylabel: str, title: str, yunit: str = "", size=None, grid: bool = False) -> None:
    """Both axes log and labelled plainly (plain_log; `yunit` after the y ticks); `size`: the labels' points
    and the title's one more (default: the title at 10)."""
    ax.set(xscale="log", yscale="log")
    plain_log(ax, "x")
    plain_log(ax, "y", yunit)
    ax.set_xlabel(xlabel, fontsize=size)
    ax.set_ylabel(ylabel, fontsize=size)
    ax.set_title(title, fontsize=size + 1 if size else 10)
    if grid:
        ax.grid(True, which="major", lw=0.3, alpha=0.5)


def lanes(ax, labels: list, xlabel: str, title: str, size: float = 7, titlesize: float = 10, xsize=None) -> None:
    """A horizontal bar chart's lanes: one per label (`size` points), the first at the top."""
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=size)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel, fontsize=xsize)
    ax.set_title(title, fontsize=titlesize)


def roofline(points, peak, bws: dict, kind: str, title: str, model: str, h_list=()):
    """points: dicts with ai, measured, predicted (FLOP/s per GPU), H, procs, transfer; bws: label -> bytes/s;
    kind: 'modified' or 'standard'; model: the machine file that predicted. Colour: H; marker: p; each point
    pays its transfer mode's line (pageable and pinned copy the same bytes: one x)."""
    colors = dict(zip(h_list, H_COLORS))
    fig, ax = subplots(figsize=(7.5, 5.6))
    ais = [p["ai"] for p in points] or [100.0]
    lo, hi = min(ais) / 4, max(max(ais) * 8, max(peak / bw for bw in bws.values()) * 4)
    _roof_lines(ax, lo, hi, 300, peak, bws, kind)
    for label, bw in bws.items():
        ax.axvline(peak / bw, color="grey", lw=0.6, ls=TRANSFER_STYLES.get(label, "-."),
                   label=f"ridge point, {label} copies (AI {peak / bw:,.0f})")
    for p in points:
        c, m = colors.get(p["H"], "tab:purple"), MARKERS.get(p["procs"], "x")
        filled = p.get("transfer") != N.PAGEABLE
        ax.scatter([p["ai"]], [p["measured"]], marker=m, s=45, zorder=3, edgecolors=c, linewidths=1.2,
                   facecolors=c if filled else "white")
        if p.get("predicted"):
            ax.scatter([p["ai"]], [p["predicted"]], marker="_", color=c, s=90, zorder=3)
            ax.plot([p["ai"], p["ai"]], [p["measured"], p["predicted"]], color=c, lw=0.6, alpha=0.6)
    handles, _ = ax.get_legend_handles_labels()
    handles += [mark(f"H={h}", color=colors.get(h, "tab:purple")) for h in h_list]
    handles += [mark(f"p={procs}", MARKERS.get(procs, "x")) for procs in sorted({p["procs"] for p in points})]
    handles += [mark("pageable (hollow)", mfc="white"), mark("pinned or resident (filled)"),
                mark(f"predicted ({model} model)", "_", ms=10)]
    log_axes(ax, "arithmetic intensity (FLOP per byte copied between host and device)", "FLOP/s per GPU", title,
             "FLOP/s", grid=True)
    legend_below(ax, handles, ncol=3)
    return encode(fig)


def overview_roofline(points, peak, bws: dict, title: str):
    """Every configuration on the modified roofline, coloured by what bounds it (points: dicts with ai,
    flops per GPU, category, transfer); those that copy nothing (ai inf) in a band at the right."""
    from matplotlib.patches import Patch
    fig, ax = subplots(figsize=(6.4, 3.9))
    finite = [p["ai"] for p in points if math.isfinite(p["ai"])]
    ridge = max(peak / bw for bw in bws.values())
    lo = min(finite + [ridge / 30]) / 3
    hi = max(finite + [ridge]) * 6
    _roof_lines(ax, lo, hi, 200, peak, bws, "modified")
    band = hi * 3
    ax.axvspan(hi * 1.6, hi * 6, color="0.92", zorder=0)
    ax.annotate("no host-device\ncopies", (band, peak * 1.15), ha="center", fontsize=7, color="0.3")
    for p in points:
        ai = p["ai"] if math.isfinite(p["ai"]) else band
        ax.scatter([ai], [p["flops"]], marker=TRANSFER_MARKERS.get(p["transfer"], "o"), s=36, zorder=3,
                   color=CATEGORY_COLORS.get(p["category"], "black"), edgecolors="black", linewidths=0.4)
    log_axes(ax, "FLOP per byte copied between host and device", "FLOP/s per GPU", title, size=8, grid=True)
    ax.set_xlim(lo, hi * 6)
    ax.set_ylim(min([p["flops"] for p in points] + [peak / 100]) / 2, peak * 2)
    ax.tick_params(labelsize=7)
    handles, _ = ax.get_legend_handles_labels()
    cats = list(dict.fromkeys(p["category"] for p in points))
    handles += [Patch(color=CATEGORY_COLORS.get(c, "black"), label=f"bound by {c}") for c in cats]
    handles += [mark(f"{t} data", TRANSFER_MARKERS.get(t, "o")) for t in dict.fromkeys(p["transfer"] for p in points)]
    legend_below(ax, handles, fontsize=6.5, borderaxespad=4.5, columnspacing=1.0, handletextpad=0.4)
    return encode(fig)


def time_split(rows, title: str):
    """Where each configuration's time per batch goes. rows: (label, [(category, ms)])."""
    fig, ax = subplots(figsize=(6.2, 0.34 * len(rows) + 1.6))
    seen = []
    for i, (_, parts) in enumerate(rows):
        left = 0.0
        for cat, ms in parts:
            ax.barh(i, ms, left=left, color=CATEGORY_COLORS.get(cat, "black"), height=0.7,
                    label=None if cat in seen else cat)
            seen.append(cat)
            left += ms
    lanes(ax, [lab for lab, _ in rows], "ms per batch", title, titlesize=9, xsize=8)
    ax.set_xlim(0, max(sum(ms for _, ms in parts) for _, parts in rows) * 1.05)
    legend_below(ax, ncol=3)
    return encode(fig)


def scaling(groups, title: str, ticks=(1, 2, 4)):
    """groups: label -> list of (procs, time_ms, efficiency). Each mode its own colour and marker."""
    fig, (a1, a2) = subplots(1, 2, figsize=(10, 4.4))
    markers = ("o", "s", "^", "D", "v", "P", "X")
    for i, (label, pts) in enumerate(groups.items()):
        pts = sorted(pts)
        m = markers[i % len(markers)]
        a1.plot([p for p, _, _ in pts], [t for _, t, _ in pts], marker=m, label=label)
        a2.plot([p for p, _, _ in pts], [100 * e for _, _, e in pts], marker=m, label=label)
    for a in (a1, a2):
        a.set_xlabel("processes (GPUs)")
        a.set_xticks(list(ticks))
        a.grid(True, lw=0.3)
    a1.set_ylabel("time per batch (ms)")
    a1.set_yscale("log")
    plain_log(a1, "y")
    a1.set_title("time per batch", fontsize=9)
    a2.set_ylabel("efficiency (%)")
    a2.set_title("efficiency", fontsize=9)
    a2.axhline(100, color="grey", lw=0.6)
    a2.set_ylim(0, max(110, max(100 * e for pts in groups.values() for _, _, e in pts) * 1.1))
    handles, labels = a1.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=min(4, len(labels)), loc="lower center", frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08 + 0.04 * (len(labels) // 5), 1, 1))
    return encode(fig)


def phases(runs_phases, title: str):
    """runs_phases: list of (run label, {rank: {phase: ms}}): each rank's median phase times, stacked."""
    rows = [(f"{lab}, rank {r}", ph) for lab, per in runs_phases for r, ph in sorted(per.items())]
    fig, ax = subplots(figsize=(9, 0.32 * len(rows) + 1.8))
    used = [n for n in PHASE_COLORS if any(ph.get(n) for _, ph in rows)]
    for i, (lab, ph) in enumerate(rows):
        left = 0.0
        for name_ in used:
            v = ph.get(name_, 0.0)
            if v:
                ax.barh(i, v, left=left, color=PHASE_COLORS[name_])
                left += v
    lanes(ax, [r[0] for r in rows], "median time per batch (ms)", title)
    swatches(ax, {n: PHASE_COLORS[n] for n in used}, ncol=min(6, len(used)))
    return encode(fig)


def measured_vs_predicted(rows, series: dict[str, str], title: str = "Predicted against measured time per batch"):
    """rows: dicts with measured_ms and one key per series; series: key -> label (each machine file's)."""
    fig, ax = subplots(figsize=(5.5, 5.4))
    m = np.array([r["measured_ms"] for r in rows])
    for (key, label), mk in zip(series.items(), ("o", "x")):
        v = np.array([r[key] or np.nan for r in rows])
        ax.scatter(m, v, marker=mk, label=f"{label} machine file", s=25)
    lo, hi = m.min() / 2, m.max() * 2
    x = np.array([lo, hi])
    ax.plot(x, x, color="black", lw=0.8, label="predicted = measured")
    ax.fill_between(x, x * 0.95, x * 1.05, color="grey", alpha=0.2, label="within ±5%")
    ax.plot(x, x * 0.85, ":", color="grey", lw=0.6)
    ax.plot(x, x * 1.15, ":", color="grey", lw=0.6, label="±15%")
    log_axes(ax, "measured time per batch (ms)", "predicted time per batch (ms)", title, grid=True)
    legend_below(ax, ncol=2)
    return encode(fig)


def host_batch(tracks, title: str):
    """One batch's phases per rank on the host clock. tracks: (lane, [(phase, start ms, end ms)])."""
    fig, ax = subplots(figsize=(9, 0.5 * len(tracks) + 1.6))
    used = []
    for i, (_, items) in enumerate(tracks):
        for name_, s, e in items:
            ax.barh(i, max(e - s, 1e-4), left=s, color=PHASE_COLORS.get(name_, "black"), edgecolor="black",
                    linewidth=0.3, height=0.6)
            if name_ not in used:
                used.append(name_)
    lanes(ax, [lane for lane, _ in tracks], "ms from the rank's batch start", title, size=8)
    swatches(ax, {n: PHASE_COLORS.get(n, "black") for n in used}, ncol=min(6, len(used)))
    return encode(fig)


CEILING_COLORS = {"float64": "tab:gray", "float32": "tab:blue", N.TF32: "tab:green", N.BF16: "tab:red",
                  N.FP16: "tab:orange"}


def ceilings_roofline(points, ceilings: dict, bws: dict, title: str, levels=("HBM", "PCIe"), units="FFMA",
                      per="GPU"):
    """A hierarchical roofline, as Nsight Compute draws it: a line per precision's GEMM ceiling (`ceilings`:
    format -> FLOP/s), a slanted one per memory level (`bws`: label -> bytes/s; the copy level's modified
    bound dotted); points: dicts with precision, measured FLOP/s, ai_hbm and ai_pcie (None: not drawn)."""
    fig, ax = subplots(figsize=(7.5, 5))
    ais = [p[k] for p in points for k in ("ai_hbm", "ai_pcie") if p.get(k)] or [1.0, 1e4]
    top = max(ceilings.values())
    lo, hi = min(ais) / 4, max(max(ais) * 8, max(top / bw for bw in bws.values()) * 2)
    x = np.logspace(np.log10(lo), np.log10(hi), 300)
    drawn = {}
    for fmt, peak in sorted(ceilings.items(), key=lambda kv: kv[1]):
        drawn.setdefault(peak, []).append(fmt)
    for peak, fmts in drawn.items():
        c = CEILING_COLORS.get(fmts[0], "black")
        names = "/".join(f.upper() if f in (N.TF32, N.BF16, N.FP16) else f"{units} {f}" for f in fmts)
        ax.axhline(peak, color=c, lw=0.9)
        ax.annotate(f"{names} {peak / 1e12:.1f} TFLOP/s", (lo * 1.1, peak * 1.08), fontsize=7, color=c)
    for (label, bw), ls in zip(bws.items(), ("-", "--", "-.")):
        ax.plot(x, np.minimum(x * bw, top), ls, color="black", lw=1.0, label=f"{label} {bw / 1e9:.0f} GB/s")
    pcie = [bw for label, bw in bws.items() if label.startswith(levels[1])]
    for fmt in dict.fromkeys(p["precision"] for p in points):
        if pcie and fmt in ceilings:
            ax.plot(x, modified_roofline(x, ceilings[fmt], pcie[0]), ":", color=CEILING_COLORS.get(fmt, "black"),
                    lw=1.0, label=f"{fmt}: copies serialised (modified)")
    seen = set()
    for p in points:
        c = CEILING_COLORS.get(p["precision"], "black")
        for key, m, level in (("ai_hbm", "s", levels[0]), ("ai_pcie", "o", levels[1])):
            if p.get(key):
                lab = f"{p['precision']}, AI per {level} byte"
                ax.scatter([p[key]], [p["measured"]], color=c, marker=m, s=30, zorder=3,
                           label=lab if lab not in seen else None)
                seen.add(lab)
    log_axes(ax, "arithmetic intensity (FLOP per byte of the memory level)", f"FLOP/s per {per}", title, grid=True)
    legend_below(ax, ncol=2)
    return encode(fig)
