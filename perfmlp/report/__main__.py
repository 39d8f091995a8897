import sys
from pathlib import Path

from ..errors import Parser, PerfmlpError, add_machine, cli, say
from ..model.machine import MachineError
from ..trace.reader import TraceError
from . import build
from .study import DEFAULT_STUDY


def main(argv=None) -> int:
    ap = Parser(prog="python -m perfmlp.report", description="Roofline report from traces: report.md, "
                "report.html (linking its figures), figures (PNG, SVG) and tables (CSV)")
    ap.add_argument("traces", help="folder holding run folders (any depth)")
    ap.add_argument("--out", default=None, help="report folder (default: report/ inside the traces folder, "
                                                "beside the runs it describes)")
    add_machine(ap, "the datasheet and calibrated files for the traces' GPU")
    ap.add_argument("--study", default=DEFAULT_STUDY,
                    help="the reference question the tables compare with: a shipped study name "
                         f"(perfmlp/report/studies/) or a .yaml file (default: {DEFAULT_STUDY})")
    ap.add_argument("--blind-tests", default=None, metavar="CSV",
                    help="the model's blind-test history (reports/blind-tests.csv): its error per machine in the "
                         "validation section")
    ap.add_argument("--no-figures", dest="draw", action="store_false",
                    help="words and tables only: no figure drawn (no matplotlib needed), a report in seconds")
    a = ap.parse_args(argv)
    out = a.out or str(Path(a.traces) / "report")
    try:
        path = build(a.traces, out, a.machine, log=lambda m: say(m, file=sys.stderr), study=a.study,
                     blind_tests=a.blind_tests, draw=a.draw)
    except (PerfmlpError, TraceError, MachineError) as e:
        say(f"perfmlp.report: error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    say(f"report: {path / 'report.md'} and {path / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(cli("perfmlp.report", main))
