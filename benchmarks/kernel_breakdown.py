"""Where a step's GPU time goes, kernel by kernel, from runs traced at
`--trace-level kernels` (every kernel of a CUDA graph a record): per run and
rank, the median over steady batches (perfmlp.trace.reader's rule) of each
kernel's duration, in launch order (per stream, numbered stream.launch,
where the overlapped exchange runs NCCL on a stream of its own), grouped as GEMM (cuBLAS/CUTLASS
kernels, their split-K reductions included), perfmlp's own kernels, NCCL,
copies; the batch's GPU span (first start to last end) and the idle time
inside it (the span minus the union of the records).

    python benchmarks/kernel_breakdown.py traces/run-a traces/run-b --out breakdown.md

CUPTI instruments each graph kernel node at this level (about 0.5 us a node),
so the span here is a little longer than an untraced replay.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.report.timeline import length  # noqa: E402
from perfmlp.trace.activity import own_kernel_names  # noqa: E402
from perfmlp.trace.reader import read_run  # noqa: E402

def group(rec, own: frozenset) -> str:
    """copy, NCCL, perfmlp's own kernels (the names the trace's activity
    line lists), or GEMM: every other kernel is a library's (cuBLAS's
    sgemm/cutlass/xmma kernels, cuBLASLt's nvjet ones, their split-K reductions)."""
    if rec.cat == "copy":
        return "copy"
    if rec.cat == "comm":
        return "NCCL"
    return "perfmlp kernels" if (rec.name or "") in own else "GEMM"


def short(name: str | None) -> str:
    n = name or "?"
    for key in ("sgemm_", "gemm_", "splitKreduce", "ncclDevKernel_"):
        if key in n:
            i = n.index(key)
            return n[i:i + 48]
    return n[:48]


def breakdown(run_dir: Path) -> list[str]:
    run = read_run(run_dir)
    cfg = run.config
    lines = [f"## {run_dir.name}", "",
             f"{'-'.join(map(str, run.layer_sizes[1:-1]))} hidden, B={cfg['batch_size']} over p={run.procs}, "
             f"{cfg['batch_transfer']}, {cfg['comm']}, exec {run.exec}, overlap {run.overlap}, "
             f"trace level {run.trace_level}", ""]
    steady = run.steady_batches()
    for rank in sorted(run.ranks):
        act = run.ranks[rank].activity
        own = frozenset((act.own_kernels if act is not None else None) or own_kernel_names())
        per_kernel: dict = {}
        groups: dict = {}
        spans, idle = [], []
        for by_rank in steady.values():
            b = by_rank.get(rank)
            recs = sorted(b.gpu or (), key=lambda r: r.start_ns) if b else []
            if not recs:
                continue
            # numbered in launch order on each stream (the overlapped exchange's NCCL kernels run on
            # a stream of their own, interleaved differently with the GEMMs from batch to batch)
            streams = sorted({r.stream for r in recs}, key=lambda s: (s is None, s or 0))
            first = {s: next(r.start_ns for r in recs if r.stream == s) for s in streams}
            order = {s: k for k, s in enumerate(sorted(streams, key=first.get))}
            seen: dict = {}
            for r in recs:
                s = order[r.stream]
                i = seen[s] = seen.get(s, -1) + 1
                per_kernel.setdefault(((s, i), group(r, own), short(r.name or r.copy)), []).append(
                    (r.end_ns - r.start_ns) / 1e3)
            tot: dict = {}
            for r in recs:
                g = group(r, own)
                tot[g] = tot.get(g, 0.0) + (r.end_ns - r.start_ns) / 1e3
            for g, v in tot.items():
                groups.setdefault(g, []).append(v)
            span = (recs[-1].end_ns - recs[0].start_ns) / 1e3
            spans.append(span)
            idle.append(span - length([(r.start_ns, r.end_ns) for r in recs]) / 1e3)
        if not spans:
            lines.append(f"rank {rank}: no kernel records in steady batches")
            continue
        med = statistics.median
        lines += [f"rank {rank}: {len(spans)} steady batches; GPU span {med(spans):.1f} us, idle inside it "
                  f"{med(idle):.1f} us; " + ", ".join(f"{g} {med(v):.1f} us" for g, v in sorted(groups.items())),
                  "", "| # | group | kernel | median us |", "| --- | --- | --- | --- |"]
        multi = any(s for (s, _), _, _ in per_kernel)
        for ((s, i), g, name), v in sorted(per_kernel.items()):
            if len(v) >= len(spans) // 2:  # the kernels of (nearly) every batch, in launch order per stream
                lines.append(f"| {f'{s}.{i}' if multi else i} | {g} | `{name}` | {med(v):.2f} |")
        lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="run folders traced at --trace-level kernels")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    lines = ["# Kernel breakdown per step", "", (__doc__ or "").split("\n\n")[0].replace("\n", " "), ""]
    for r in a.runs:
        lines += breakdown(Path(r))
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
