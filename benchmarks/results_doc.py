"""docs/results.md, written from the committed data alone: per machine kind
the headline measurements (with machine, date, code and command, read from
the files themselves) and the model's blind accuracy per sweep
(reports/blind-tests.csv).

    python benchmarks/results_doc.py            # writes docs/results.md
    python benchmarks/results_doc.py --check    # exit 1 if docs/results.md is not what the data give

tests/test_results_doc.py makes the page again in memory and compares.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("docs/results.md")
BLIND = Path("reports/blind-tests.csv")
QUIET = 0.03            # repeats within 3% of each other "agree"
KINDS = {"h100": "1 x H100", "h200": "1 x H200", "h200-x2": "2 x H200", "h200-x4": "4 x H200", "cpu": "CPU"}

INTRO = """\
# Results

Written by `python benchmarks/results_doc.py` from the committed data; do
not edit by hand (`tests/test_results_doc.py` fails when this page is not
what the data give). Each section names its data (`Data:`), when, on what
and with which code it was measured (`Made:`), and the command that made
the data (`Command:`). Times are per training step (one batch); D = 784,
C = 10, one hidden layer of H units; B is the batch, p the number of GPUs.
Question 2.1 is that of Homework 6 Problem 2 of Stanford CME 213: the
step's FLOPs per second over the GPUs' float32 datasheet peak.
"""


# ---- reading and formatting -----------------------------------------------------------------

def read_json(root: Path, rel: str) -> dict:
    return json.loads((root / rel).read_text(encoding="utf-8"))


def read_jsonl(root: Path, rel: str) -> list[dict]:
    return [json.loads(line) for line in (root / rel).read_text(encoding="utf-8").splitlines() if line.strip()]


def read_csv(root: Path, rel: str) -> list[dict]:
    with (root / rel).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def table(head: list[str], rows: list[list]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(map(esc, head)) + " |", "| " + " | ".join("---" for _ in head) + " |",
            *("| " + " | ".join(map(esc, r)) + " |" for r in rows), ""]


def section(title: str, data: list[str], made: str, command: str, words: str, lines: list[str]) -> list[str]:
    return [f"### {title}", "", "Data: " + ", ".join(f"`{d}`" for d in data) + ".", f"Made: {made}.",
            f"Command: `{command}`.", "", *words.strip().splitlines(), "", *lines]


def day(stamp: str) -> str:
    return stamp[:10]


# ---- one GPU: the step against PyTorch, the tracer's cost ----------------------------------

def precision_step(root: Path, kind: str) -> list[str]:
    rel = f"reports/{kind}/benchmarks/precision/precision_step.json"
    d = read_json(root, rel)
    t = {(r["H"], r["B"], r["precision"], r["variant"]): r["median_us"] for r in d["rows"]}
    rows = []
    order = ["float32", "tf32", "bf16", "fp16"]
    for h, b, prec in sorted({k[:3] for k in t}, key=lambda k: (k[1], k[0], order.index(k[2]) if k[2] in order else 9)):
        own, torch, gemm = (t.get((h, b, prec, v)) for v in ("perfmlp", "pytorch", "GEMMs alone"))
        if own and torch:
            rows.append([h, b, prec, f"{own:.1f}", f"{torch:.1f}", f"{gemm:.1f}", f"{torch / own:.2f}x"])
    words = """
Resident data, each step one CUDA graph; microseconds per step, the median
over interleaved rounds. PyTorch: its whole step captured as one CUDA graph
(`torch.autocast` for bf16 and fp16). The last column: how many times
longer PyTorch's step took than perfmlp's.
"""
    return section("Step time per precision, against PyTorch", [rel], f"{d['date']}, code `{d['commit']}`, "
                   f"{d['machine']}", d["command"], words,
                   table(["H", "B", "precision", "perfmlp us", "PyTorch us", "perfmlp's GEMMs alone us",
                          "PyTorch / perfmlp"], rows))


def trace_cost_gpu(root: Path, kind: str) -> list[str]:
    files = sorted((root / "reports" / kind / "benchmarks" / "trace_cost-gpu").glob("*/trace_cost.json"))
    runs = [(f, json.loads(f.read_text(encoding="utf-8"))) for f in files]
    rows = [[d["exec"], d["batch"], f.parent.name.rsplit("-", 1)[-1], f"{d['untraced_us_median']:.2f}",
             f"{d['c']['cost_us_median']:.2f}", f"{d['c']['cost_pct_median']:+.2f}%",
             f"{d['python']['cost_us_median']:.2f}", f"{d['python']['cost_pct_median']:+.2f}%"] for f, d in runs]
    d0 = runs[0][1]
    made = (f"{', '.join(sorted({day(d['date']) for _, d in runs}))}, code "
            f"{', '.join(sorted({'`' + d['commit'] + '`' for _, d in runs}))}, {d0['machine']}")
    command = (f"python benchmarks/trace_cost.py --backend {d0['backend']} --hidden {d0['hidden']} --batch B "
               f"--exec EXEC --comm {d0['comm']} --rounds {d0['rounds']} --steps {d0['steps']} --out DIR")
    words = f"""
The trainer's own step (H = {d0['hidden']}, resident, one GPU) in blocks of
{d0['steps']} batches: untraced, traced at the default level with the C batch
hooks, and with the Python ones, in turn, {d0['rounds']} rounds in one process.
The tracer's cost: a traced block's time less the untraced one's in the same
round, per batch (median), and as a share of the untraced step.
"""
    return section("The tracer's cost inside the GPU step", [str(f.relative_to(root)) for f, _ in runs], made,
                   command, words, table(["exec", "B", "run", "untraced us", "C hooks us", "share",
                                          "Python hooks us", "share"], rows))


# ---- several GPUs: Question 2.1, the step against PyTorch ---------------------------------

def report_command(root: Path, kind: str) -> str:
    lines = [x.strip() for x in (root / "reports" / kind / "SET.md").read_text(encoding="utf-8").splitlines()
             if x.strip().startswith("python -m perfmlp.report ")]
    return lines[0]


def q2_1(root: Path, kind: str) -> list[str]:
    rel = f"reports/{kind}/q2_1_utilisation.csv"
    rows = read_csv(root, rel)
    cols = [c for c in rows[0] if c.endswith(": ms") or c.endswith(": utilisation")]
    out = [[r["GPUs"], r["reference (Quadro RTX 6000) utilisation"], r["target (5x) utilisation"],
            *(f"{float(r[c]):.3f}" if c.endswith(": ms") and r[c] else (r[c] or "-") for c in cols)] for r in rows
           if any(r[c] not in ("", "-") for c in cols)]
    runs = {n for r in rows for c in r if c.endswith(": runs") for n in r[c].split() if n != "-"}
    starts, gpus = [], set()
    for run in runs:
        for m in (root / "reports" / kind / "traces").glob(f"**/{run}/manifest.json"):
            man = json.loads(m.read_text(encoding="utf-8"))
            starts.append(day(man["start"]))
            gpus |= {f"{n['gpu_count']} x {n['gpu']}" for n in man["machine"]["nodes"].values()}
    made = f"traces of {', '.join(sorted(set(starts)))}, {', '.join(sorted(gpus))}"
    words = """
B = 3200 split over the GPUs. The reference solution ran on a Quadro RTX
6000; the target is five times its utilisation. perfmlp's times (ms per
step) in the reference's scheme (pageable copies, the gradients staged
through the host for MPI) and with the data resident on the GPU and NCCL.
"""
    head = ["GPUs", "reference solution", "target"] + [c.removeprefix("perfmlp, ") for c in cols]
    return section("Question 2.1: effective compute utilisation", [rel], made, report_command(root, kind), words,
                   table(head, out))


PEERS = [("perfmlp graph", "perfmlp, CUDA graph"), ("perfmlp eager", "perfmlp, eager"),
         ("pytorch graph", "PyTorch, whole step as one CUDA graph (DDP on several GPUs)"),
         ("pytorch eager", "PyTorch, eager (DDP on several GPUs)")]


def graph_step(root: Path, kind: str, rel: str) -> list[str]:
    rows = read_jsonl(root, rel)
    p = max(r["procs"] for r in rows)
    times: dict[tuple, list] = {}
    for r in rows:
        if r["hidden"] == [512]:
            times.setdefault((r["variant"].removesuffix(" (DDP)"), r["procs"], r["B"]), []).extend(r["us_per_step"])
    med = {k: statistics.median(v) for k, v in times.items()}
    out = []
    for key, name in PEERS:
        one, split, weak = (med.get((key, q, b)) for q, b in ((1, 3200), (p, 3200), (p, 3200 * p)))
        if one and split and weak:
            out.append([name, f"{one:.1f}", f"{split:.1f}", f"{one / split:.2f}x", f"{weak:.1f}",
                        f"{100 * one / weak:.1f}%"])
    first = next(r for r in rows if r["procs"] == p)
    made = f"{first['date']}, code `{first['perfmlp_git']}`, {p} x {first['gpu']}"
    words = f"""
H = 512, resident data, NCCL; microseconds per step (the slowest rank's
wall time over {first['steps']} steps, median over every round of every run).
Strong scaling: B = 3200 split over {p} GPUs; weak: 3200 per GPU (B = {3200 * p});
weak efficiency: the one-GPU time over the weak time.
"""
    return section(f"Step time on 1 and {p} GPUs, against PyTorch", [rel], made, "python " + first["command"] + " (and --impl torch)",
                   words, table(["variant", "p = 1", f"p = {p}, B split", "strong speed-up", f"p = {p}, B = {3200 * p}",
                                 "weak efficiency"], out))


def scaling(root: Path, kind: str) -> list[str]:
    """The graph step's scaling against PyTorch and DDP (benchmarks/scaling.py's ratio table)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scaling as sc
    rel = f"reports/{kind}/benchmarks/scaling.jsonl"
    rows = read_jsonl(root, rel)
    cs = sc.cells(rows)
    procs = sorted({r["procs"] for r in rows} | {1})
    precs = [p for p in ("float32", "bf16") if any(k[1] == p for k in cs)]
    first = rows[0]
    made = f"{day(first['date'])}, code `{first['perfmlp_git']}`, {procs[-1]} x {first['gpu']}"
    words = f"""
H = 512, resident data, CUDA graph, NCCL; ratios of medians (the slowest rank's wall time over
{first['steps']} steps, {first['rounds']} rounds a run, implementations in turn). {sc.TARGETS}
Every time, with its range: `reports/{kind}/benchmarks/scaling.md`.
"""
    return section(f"The graph step's scaling on 1 and {procs[-1]} GPUs, against PyTorch and DDP", [rel], made,
                   f"SCALING_FLAGS=--quick bash benchmarks/gpu_suite.sh {kind} scaling", words,
                   [*sc.ratio_table(cs, procs, precs), ""])


# ---- the CPU ----------------------------------------------------------------------------------

HOOKS = {"c": "C", "python": "Python"}


def trace_cost_cpu(root: Path) -> list[str]:
    rel = "reports/cpu/trace_cost/trace_cost.json"
    d = read_json(root, rel)
    rows = [[HOOKS.get(hooks, hooks), f"{d['untraced_us_median']:.2f}", f"{d[hooks]['cost_us_median']:.2f}",
             f"{d[hooks]['cost_pct_median']:+.2f}%"] for hooks in d["hooks"]]
    words = f"""
NumPy, a tiny step (H = {d['hidden']}, B = {d['batch']}) so that the tracer's host
time shows: blocks of {d['steps']} batches untraced and traced in turn, {d['rounds']}
rounds; the cost per batch is the median difference.
"""
    return section("The tracer's host time", [rel], f"{day(d['date'])}, code `{d['commit']}`, {d['machine']}",
                   d["command"], words, table(["batch hooks", "untraced us", "cost us", "share"], rows))


# ---- the model tested blind -------------------------------------------------------------------

def error(r: dict) -> float:
    """predicted / measured - 1: positive where the model expected a slower step than ran."""
    return float(r["predicted_s"]) / float(r["measured_s"]) - 1


def agree(rows: list[dict]) -> list[dict]:
    """The configurations run at least twice whose repeats lie within QUIET of each other."""
    return [r for r in rows if int(r["repeats"]) > 1 and float(r["spread"]) < QUIET]


def summary(rows: list[dict]) -> list[str]:
    errs = [abs(error(r)) for r in rows]
    repeated = [float(r["spread"]) for r in rows if int(r["repeats"]) > 1]
    return [str(len(rows)), f"{100 * statistics.median(errs):.1f}%", f"{100 * max(errs):.1f}%",
            f"{sum(error(r) > 0 for r in rows)} / {sum(error(r) < 0 for r in rows)}",
            f"{100 * statistics.median(repeated):.1f}%" if repeated else "-"]


SUMMARY_HEAD = ["configurations", "median |error|", "worst |error|", "above / below", "median spread"]


def blind(root: Path) -> list[str]:
    rows = read_csv(root, str(BLIND))
    sweeps: dict[str, list] = {}
    for r in rows:
        sweeps.setdefault(r["sweep"], []).append(r)
    kinds = list(dict.fromkeys(r["machine"] for r in rows))
    per_kind = [[f"`{k}`", len({r['sweep'] for r in rows if r['machine'] == k}),
                 *summary([r for r in rows if r["machine"] == k])] for k in kinds]
    per_kind.append(["all", len(sweeps), *summary(rows)])
    per_kind.append(["all, spread < 3%", len({r["sweep"] for r in agree(rows)}), *summary(agree(rows))])
    per_sweep = [[f"`{s}`", ", ".join(sorted({r['commit'] for r in rs})), ", ".join(sorted({r['date'] for r in rs})),
                  *summary(rs)] for s, rs in sweeps.items()]
    dates = sorted({r["date"] for r in rows})
    words = f"""
{len(rows)} configurations from {len(sweeps)} sweeps, {dates[0]} to {dates[-1]}. In each sweep the machine
was calibrated by microbenchmarks only (never the trainer), every
prediction was written before the first run, and each configuration ran
one to three times. Error = predicted / measured - 1 (measured: the median
of the repeats); "median |error|" is the typical miss, "worst |error|" the
largest; "above / below": how many were predicted slower / faster than they
ran; spread: how far a configuration's own repeats lay apart (slowest /
fastest - 1), the median over the configurations run more than once. The
row "spread < 3%" keeps the configurations whose repeats agree within 3%:
there the run itself is steady and the miss is the model's. The model
changed between sweeps: each row is the model of its commit.
"""
    per_latest = latest(kinds, sweeps)
    return [*section("The model's accuracy, per machine kind", [str(BLIND)], f"{len(sweeps)} sweeps, "
                     f"{dates[0]} to {dates[-1]}; each row names its commit", "python -m perfmlp.report.blind_rows "
                     "TRACES --machine-kind KIND --machine CALIBRATED.yaml >> reports/blind-tests.csv", words,
                     table(["rows", "sweeps", *SUMMARY_HEAD], per_kind)),
            *per_latest,
            "### The model's accuracy, per sweep", "", f"Data: `{BLIND}` (`reports/BLIND-TESTS.md` says how each "
            "sweep was made).", "", *table(["sweep", "commit", "date", *SUMMARY_HEAD], per_sweep)]


def latest(kinds: list[str], sweeps: dict[str, list]) -> list[str]:
    """One plain sentence per machine kind: its last sweep's typical and worst miss."""
    out = []
    for k in kinds:
        name, rs = [(s, rs) for s, rs in sweeps.items() if rs[0]["machine"] == k][-1]
        n, med, worst, sign, _ = summary(rs)
        quiet = agree(rs)
        extra = (f"; on the {len(quiet)} whose repeats agree within 3%, {summary(quiet)[1]}" if quiet else "")
        out.append(f"- {KINDS.get(k, k)}, latest sweep `{name}` ({n} configurations): the prediction missed "
                   f"by {med} typically and {worst} at worst{extra}; predicted slower / faster: {sign}.")
    return ["Each machine kind's latest sweep, in words:", "", *out, ""]


# ---- the page -----------------------------------------------------------------------------------

def render(root: Path = ROOT) -> str:
    lines = [INTRO]
    parts = {"h100": [precision_step, trace_cost_gpu], "h200": [trace_cost_gpu],
             "h200-x2": [q2_1, lambda r, k: graph_step(r, k, "reports/h200-x2/benchmarks/graph/graph_step.jsonl"),
                         scaling],
             "h200-x4": [q2_1, lambda r, k: graph_step(r, k, "reports/h200-x4/benchmarks/scaling/graph_step.jsonl")],
             "cpu": [lambda r, k: trace_cost_cpu(r)]}
    for kind, makers in parts.items():
        lines += [f"## {KINDS[kind]} (`reports/{kind}`)", ""]
        for make in makers:
            lines += make(root, kind)
    lines += ["## The model tested blind, every machine", "", *blind(root)]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/results.md is not what the data give")
    a = ap.parse_args(argv)
    try:
        text = render()
    except (OSError, ValueError, KeyError) as e:
        print(f"results_doc: the committed data cannot be read: {e}", file=sys.stderr)
        return 2
    path = ROOT / OUT
    if a.check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'current' if same else 'stale: python benchmarks/results_doc.py'}")
        return 0 if same else 1
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(f"wrote {OUT} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
