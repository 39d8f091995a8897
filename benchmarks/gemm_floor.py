"""The least a graph step can take beside its GEMMs, by the model's byte
counts: for each row of a `precision_step.py --parts precision` result,
the measured GEMMs alone plus the step's own kernels' bytes and the copy of
the resident piece into the graph's static inputs (read and written), both
at the machine file's memory bandwidth, with no gap between kernels. No
GPU needed:

    python benchmarks/gemm_floor.py reports/h100/benchmarks/precision/precision_step.json \\
        --machine h100-sxm --out reports/h100/benchmarks/precision/gemm_floor.md

The own kernels' bytes are `perfmlp.model.costs.op_cost` over the step's
kernels (`step_kernels`: the bias and sigmoid pass, the output bias, the
loss, the fused output backward and its sums, the update; fp16's gradient
check too), each counted once as the model counts it; the static copy is
the trainer's device-to-device bytes (`batch_counts`' bytes_d2d), read and
written. A step whose floor / GEMMs is above a target cannot reach it
while its kernels stay separate passes over the activations.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmlp.config import Config  # noqa: E402
from perfmlp.model.costs import batch_counts, kernel_name, op_cost, step_kernels, widths  # noqa: E402
from perfmlp.model.machine import load_machine  # noqa: E402


def step_bytes(layer_sizes, b: int, precision: str) -> tuple[int, int]:
    """(the own kernels' bytes, the static copy's bytes) of one step."""
    isz = widths(precision)
    own = sum(op_cost(op, shape, isz)[1] for kernels in step_kernels(layer_sizes, b, None, isz, True).values()
              for k in kernels if kernel_name(k) != "gemm" for op, shape in k)
    copied = batch_counts(layer_sizes, b, isz, "nccl", "resident", exec_mode="graph").bytes_d2d
    return own, 2 * copied   # read and written


def floor_rows(result: dict, bandwidth: float) -> list[dict]:
    rows = {(r["H"], r["B"], r["precision"], r["variant"]): r["median_us"] for r in result["rows"]}
    out = []
    for (h, b, prec, variant), gemm_us in sorted(rows.items()):
        if variant != "GEMMs alone":
            continue
        own, static = step_bytes((Config.input_size, h, Config.num_classes), b, prec)
        own_us, static_us = own / bandwidth * 1e6, static / bandwidth * 1e6
        floor = gemm_us + own_us + static_us
        step = rows.get((h, b, prec, "perfmlp"))
        out.append({"H": h, "B": b, "precision": prec, "gemm_us": gemm_us, "own_mb": own / 1e6, "own_us": own_us,
                    "static_us": static_us, "floor_us": floor, "floor_x": floor / gemm_us,
                    "step_us": step, "step_x": step / gemm_us if step else None})
    return out


def table(rows: list[dict], result: dict, machine) -> str:
    head = (f"Floors of the graph step beside its GEMMs ({machine.name}, {machine.mem_bw_bytes_per_s / 1e12:.2f} "
            f"TB/s), from {result['command']} (commit {result['commit']}, {result['date']}, {result['machine']}).\n"
            "Microseconds per step; floor = GEMMs alone + own kernels' bytes + static copy's bytes at that "
            "bandwidth, no gaps; step: the measured perfmlp graph step.\n\n"
            "| H | B | precision | GEMMs alone | own kernels MB | own kernels' bytes | static copy's bytes "
            "| floor | floor / GEMMs | step | step / GEMMs |\n" + "| --- " * 11 + "|\n")
    def step(r, key, spec):   # "-" where the result has no perfmlp step beside its GEMMs
        return "-" if r[key] is None else format(r[key], spec)
    return head + "".join(
        f"| {r['H']} | {r['B']} | {r['precision']} | {r['gemm_us']:.1f} | {r['own_mb']:.1f} | {r['own_us']:.1f} | "
        f"{r['static_us']:.1f} | {r['floor_us']:.1f} | {r['floor_x']:.2f} | {step(r, 'step_us', '.1f')} | "
        f"{step(r, 'step_x', '.2f')} |\n" for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="precision_step.json (its --parts precision rows)")
    ap.add_argument("--machine", default="h100-sxm", help="the machine file whose memory bandwidth prices the bytes")
    ap.add_argument("--out", help="markdown file to write (default: print)")
    a = ap.parse_args(argv)
    result = json.loads(Path(a.result).read_text())
    machine = load_machine(a.machine)
    text = table(floor_rows(result, machine.mem_bw_bytes_per_s), result, machine)
    if a.out:
        Path(a.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
