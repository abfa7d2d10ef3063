"""Analyze a trace: random vs sequential per task, process, open file and FUSE handle,
shared-fd interleaving, page-cache misses, and findings with the lever to pull.

  readtrace report                      newest *.rtrace in the current directory
  readtrace report T.rtrace --json      machine-readable (stable keys; `fix --compare` reads them)
  readtrace report T.rtrace --html r.html --perfetto r.json
  readtrace report T.rtrace --threshold small_request_fraction=0.2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from readtrace.analyze import Thresholds, analyze
from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.trace import load_trace, newest_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="?", help="a .rtrace directory (default: the newest in the current one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with plots")
    parser.add_argument("--perfetto", metavar="FILE", help="write a Chrome trace JSON (open in ui.perfetto.dev)")
    parser.add_argument("--threshold", action="append", metavar="NAME=VALUE", default=[],
                        help=f"override a threshold (repeatable): {', '.join(Thresholds.names())}")
    parser.add_argument("--streams", type=int, default=12, metavar="N", help="stream rows in the terminal report")
    parser.add_argument("--force", action="store_true", help="overwrite --html/--perfetto files")


def _output(path: str | None, force: bool) -> Path | None:
    if path is None:
        return None
    out = Path(path)
    if out.exists() and not force:
        raise ReadtraceError(f"{out} exists; use --force to overwrite it", ExitStatus.USAGE)
    return out


def run(args: argparse.Namespace) -> int:
    from readtrace.report import html, perfetto
    from readtrace.report.jsonreport import write_json
    from readtrace.report.terminal import TerminalReport

    thresholds = Thresholds().override(args.threshold)
    html_out, perfetto_out = _output(args.html, args.force), _output(args.perfetto, args.force)
    trace = load_trace(args.trace or newest_trace(), lean=True)
    a = analyze(trace, thresholds)
    if html_out:
        html.write_html(a, html_out)
    if perfetto_out:
        perfetto.write_perfetto(a, perfetto_out)
    if args.json:
        write_json(a, sys.stdout)
    else:
        TerminalReport(a, streams=args.streams).render(sys.stdout)
        for label, out in (("HTML report", html_out), ("Perfetto trace", perfetto_out)):
            if out:
                print(f"{label}: {out}")
    return ExitStatus.OK
