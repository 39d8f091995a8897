"""`python -m perfmlp.report traces/`: the roofline analysis of every run
under a folder, measured beside predicted.

Three steps: `analysis` reads every run once into a typed summary;
`sections` words what each section says, for a study (`study`: the
reference question as data); `render` writes report.md, report.html, the
tables as CSV and the figures (`figures`) as PNG and SVG. Reads only trace
files and the files beside them; never imports CuPy or the trainer.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import PerfmlpError
from ..safeio import check_output_folder, replace_folder
from ..trace.reader import Run, read_traces
from . import figures
from .analyses.psasync import is_async
from .analysis import Analysis, analyse
from .sections.cluster import section_cluster
from .configurations import run_labels
from .sections.overview import overview_of, section_configurations, section_overview, section_recommendations
from .sections.published import section_published
from .sections.questions import section_modes, section_q2_1, section_q2_2
from .render import render
from .sections.scaling import section_execution, section_host_timeline, section_phases, section_scaling
from .sections.strategies import section_psasync, section_strategies
from .study import Study, load_study
from .model_error import History, read_blind_tests
from .sections.timeline import section_correctness, section_nsys, section_profiles, section_timeline
from .sections.validation import section_history, section_model, section_no_gpu, section_runs, section_validation


def sections_of(a: Analysis, history: History | None = None) -> list:
    """The report's sections, in order (`history`: the blind-test history, in the validation section)."""
    o = overview_of(a)
    labels = run_labels(list(o.configs))
    bound = {r.run_id: o.verdicts[c.label].text for c in o.configs for r in c.runs}
    out = [section_overview(a, o), section_configurations(o), section_recommendations(o),
           section_runs(a, labels, bound), section_q2_1(a)]
    if a.gpu_runs:
        out += [section_published(a), section_modes(a), section_q2_2(a), section_model(a, labels),
                section_validation(a, history), section_execution(a), section_scaling(a)]
    else:
        out += [section_no_gpu(a), section_history(history)]
    out += [section_strategies(a), section_cluster(a), section_phases(a), section_host_timeline(a)]
    out += section_timeline(a.traces)  # runs with GPU activity records (--trace-level timeline|kernels)
    if a.folder is not None:
        out += [section_correctness(a.folder), section_profiles(a), section_nsys(a)]
    return [s for s in out if s is not None]


def header_of(a: Analysis, runs: int | None = None) -> list[str]:
    ds, cal = a.machines.datasheet, a.machines.calibrated
    if a.gpu_runs:
        machines = (f"Machine files: datasheet {ds.name} ({Path(ds.path).name})"
                    + (f", calibrated {cal.name} ({Path(cal.path).name})" if cal
                       else ", no calibrated file for this GPU") + ".")
    elif a.machines.cpu is not None:
        cpu = a.machines.cpu
        where = f" ({Path(cpu.path).name})" if cpu.path else ""
        machines = f"Machine file: the CPU's, {cpu['name']}{where}; no run ran on a GPU."
    else:
        machines = "No machine file used: no run ran on a GPU, and no CPU file describes this one."
    n = len(a.runs) if runs is None else runs   # with ps-async runs, which the analysis leaves to their section
    count = f"{n} run{'s' if n != 1 else ''}"
    if n > len(a.runs):   # the overview's text counts the analysed runs: say where the others are
        count += f": {len(a.runs)} analysed, {n - len(a.runs)} asynchronous parameter server in its own section"
    return [f"Traces: {a.folder or 'in memory'} ({count}). {machines} Study: {a.study.title} "
            f"({Path(a.study.path).name}).", "Made by `python -m perfmlp.report` from the trace files alone."]


def build(folder: str | Path, out: str | Path, machine: str | None = None, log=print,
          study: str | Path | None = None, blind_tests: str | Path | None = None, draw: bool = True) -> Path:
    """The report of every run under `folder`, written to `out` (`blind_tests`: the blind-test history's CSV;
    `draw=False`: words and tables only, no matplotlib needed)."""
    if draw:
        figures.require()
    history = read_blind_tests(blind_tests) if blind_tests is not None else None
    folder = Path(folder)
    runs, skipped = read_traces(folder)
    if not runs:   # one line, with the first run's reason (which names its file)
        why = skipped[0] if len(skipped) == 1 else f"{len(skipped)} skipped, the first: {skipped[0]}" if skipped else ""
        raise PerfmlpError(f"{folder}: no readable run" + (f" ({why})" if why else ""))
    for line in skipped:
        log(f"skipped: {line}")
    return build_from_runs(runs, skipped, out, machine, folder, study, history, draw)


def build_from_runs(runs: list[Run], skipped: list[str], out: str | Path, machine: str | None = None,
                    folder: Path | None = None, study: str | Path | Study | None = None,
                    history: History | None = None, draw: bool = True) -> Path:
    """The report of runs already read (or made with Run.from_records)."""
    if draw:
        figures.require()
    out = Path(out)
    st = study if isinstance(study, Study) else load_study(study)
    a = analyse([r for r in runs if not is_async(r)], skipped, st, machine, folder)  # ps-async: its own section
    sections = [s for s in (sections_of(a, history) if a.runs else []) + [section_psasync(runs)] if s is not None]
    check_output_folder(out, [r.path for r in runs if r.path], what="report folder")
    try:
        replace_folder(out, lambda d: render(sections, d, "perfmlp report", header_of(a, len(runs)), draw), "report.md")
    except OSError as e:
        where = e.filename or out
        raise PerfmlpError(f"{where}: cannot write the report ({e.strerror or e})") from None
    return out
