"""Analyze a trace: random vs sequential per task, process, open file and FUSE handle,
shared-fd interleaving, page-cache misses, and findings with the lever to pull.

  readtrace report                      newest *.rtrace in the current directory
  readtrace report T.rtrace --json      machine-readable (stable keys; `fix --compare` reads them)
  readtrace report T.rtrace --html r.html --perfetto r.json
  readtrace report T.rtrace --threshold small_request_fraction=0.2
  readtrace report node*.rtrace         a job of several nodes: one trace per node, joined (or a directory of them)
  readtrace report s3://bucket/job/ --scheduler tcp://HOST:8786   a job in a bucket, analysed on a Dask cluster
  readtrace report T.rtrace --what-if gcsfuse,nfs,local-nvme --latency-ms 20   this load on other storage
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from readtrace.analyze.rules.thresholds import (
    Thresholds,  # no pandas: `readtrace --help` needs only its names
)
from readtrace.errors import ExitStatus, UsageError
from readtrace.validate import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, arg


def trace_paths(paths: list[str]) -> list[Path | str]:
    """The traces to report (local paths, or object-store URLs as given): the newest here by default;
    a directory (or prefix) that is not itself a trace stands for the traces in it (a job of nodes)."""
    from readtrace.trace import SUFFIX, newest_trace
    from readtrace.trace.format import META_FILE
    from readtrace.trace.location import is_url, locate

    if not paths:
        return [newest_trace()]
    one = locate(paths[0])
    if len(paths) == 1 and not one.name.endswith(SUFFIX) and one.is_dir() and not one.has(META_FILE):
        found = [t.path for t in one.children(SUFFIX)]
        if not found:
            raise UsageError(f"{paths[0]}: not a trace, and no {SUFFIX} trace in it")
        return found
    return [p if is_url(p) else Path(p) for p in paths]


def _report_job(paths: list, thresholds: Thresholds, as_json: bool, scheduler: str | None) -> int:
    from readtrace.analyze.job.analysis import analyze_job
    from readtrace.report.jobreport import render_job, write_job_json

    job = analyze_job(paths, thresholds, scheduler=scheduler)  # worker processes, as memory allows, or Dask's
    (write_job_json if as_json else render_job)(job, sys.stdout)
    if job.missing:
        sys.stdout.flush()
        print(f"readtrace report: partial job: {len(job.missing)} of {len(paths)} node traces not analysed "
              f"({', '.join(m.trace for m in job.missing)})", file=sys.stderr)
        return ExitStatus.BAD_TRACE
    return ExitStatus.OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="*",
                        help="a .rtrace directory (default: the newest in the current one); several traces, or a "
                             "directory holding them, report a job of several nodes")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a job of several nodes: analyse the node traces on this Dask cluster "
                             "(tcp://HOST:8786; default: $DASK_SCHEDULER_ADDRESS, else local worker processes)")
    parser.add_argument("--all", action="store_true",
                        help="with --json: list every file and stream (default: the first 100 files and "
                             "100 streams of each kind; 'listing' counts the rest)")
    parser.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with plots")
    parser.add_argument("--perfetto", metavar="FILE", help="write a Chrome trace JSON (open in ui.perfetto.dev)")
    parser.add_argument("--threshold", action="append", metavar="NAME=VALUE", default=[],
                        help=f"override a threshold (repeatable): {', '.join(Thresholds.names())}")
    parser.add_argument("--streams", type=arg(NON_NEGATIVE_INT), default=12, metavar="N", help="stream rows in the terminal report")
    parser.add_argument("--force", action="store_true", help="replace --html/--perfetto files (only reports readtrace wrote)")
    parser.add_argument("--what-if", metavar="PROFILES",
                        help="predict this load on other storage: comma-separated, from "
                             "gcsfuse, prefetch, mountpoint-s3, rclone, hf-mount, nfs, lustre, local-nvme, or 'mount' "
                             "(this trace's own mount, its costs measured from the trace)")
    parser.add_argument("--latency-ms", type=arg(NON_NEGATIVE), metavar="MS", help="--what-if: first-byte latency per backend request")
    parser.add_argument("--bandwidth-mbps", type=arg(POSITIVE), metavar="MB/S", help="--what-if: link bandwidth (default unlimited)")


def what_if_profiles(args: argparse.Namespace, a) -> list:
    """The --what-if profiles with the user's latency and bandwidth (a usage error names the bad one)."""
    from readtrace.analyze.storage import whatif

    out = []
    for name in (n.strip() for n in args.what_if.split(",") if n.strip()):
        if name == "mount":
            p = whatif.mount_profile(a)
            if p is None:
                raise UsageError("--what-if mount: no storage model for this trace's mount")
            out.append(whatif.profile(p.name, args.latency_ms if args.latency_ms is not None else p.latency_ms,
                                      args.bandwidth_mbps if args.bandwidth_mbps is not None else p.bandwidth_mbps,
                                      request_ms=p.request_ms))
            continue
        try:
            out.append(whatif.profile(name, args.latency_ms, args.bandwidth_mbps))
        except ValueError as e:
            raise UsageError(f"--what-if: {e}") from None
    return out


def _outputs(args: argparse.Namespace) -> list[tuple[str, str, Callable, bytes]]:
    """(label, path, writer, marker) of each file asked for, each checked before any work is done:
    never through a symlink; with --force only over a report of ours (readtrace.replace)."""
    from readtrace.replace import check_target
    from readtrace.report import html, perfetto

    outputs = [(label, path, write, marker) for label, path, write, marker in (
        ("HTML report", args.html, _write_html, html.MARKER),
        ("Perfetto trace", args.perfetto, lambda a, path, _predictions: perfetto.write_perfetto(a, path),
         perfetto.MARKER)) if path]
    for label, path, _, marker in outputs:
        check_target(path, force=args.force, is_ours=_ours(marker), what=label)
    return outputs


def _write_html(a, path: Path, predictions: list | None) -> None:
    from readtrace.analyze.storage.whatif import own_mount_predictions
    from readtrace.report.html import write_html

    write_html(a, path, own_mount_predictions(a), predictions)


def _ours(marker: bytes) -> Callable[[Path], bool]:
    from readtrace.replace import has_marker

    return lambda path: has_marker(path, marker)


def run(args: argparse.Namespace) -> int:
    from readtrace.memory import reuse_freed_memory

    with reuse_freed_memory():  # one batch analysis: freed arrays serve the next ones
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    from readtrace.analyze import analyze
    from readtrace.replace import replacing_file
    from readtrace.report.jsonreport import write_json
    from readtrace.report.terminal import TerminalReport
    from readtrace.trace import load_trace

    thresholds = Thresholds().override(args.threshold)
    outputs = _outputs(args)
    paths = trace_paths(args.trace)
    if len(paths) > 1:
        from readtrace.analyze.job.cluster import scheduler_address

        if outputs:
            raise UsageError("--html/--perfetto report one trace; give one node's trace")
        return _report_job(paths, thresholds, args.json, scheduler_address(args.scheduler))
    if (args.latency_ms is not None or args.bandwidth_mbps is not None) and not args.what_if:
        raise UsageError("--latency-ms/--bandwidth-mbps go with --what-if")
    trace = load_trace(paths[0], lean=True)
    a = analyze(trace, thresholds)
    predictions = None
    if args.what_if:
        from readtrace.analyze.storage.whatif import what_if

        predictions = what_if(a, what_if_profiles(args, a))
    for label, path, write, marker in outputs:
        with replacing_file(path, force=args.force, is_ours=_ours(marker), what=label) as tmp:
            write(a, tmp, predictions)
    if args.json:
        write_json(a, sys.stdout, predictions, everything=args.all)
    else:
        TerminalReport(a, streams=args.streams, predictions=predictions).render(sys.stdout)
        for label, path, _, _ in outputs:
            print(f"{label}: {path}")
    return ExitStatus.OK
