"""Import a FUSE daemon's own log as a trace with the FUSE view (no root needed).

  readtrace import gcsfuse gcsfuse.log -o load.rtrace
  readtrace import gcsfuse gcsfuse.log -o joined.rtrace --onto app.rtrace   (joined onto a recorded app view)

gcsfuse must log with --log-severity=trace (JSON or text format; lines quoted as
`connection.go:420] <- ReadFile (inode 2, PID 77, handle 1, offset 0, 262144 bytes)` work too: file
order is then time order). Malformed ReadFile lines are counted and reported, not fatal.
"""

from __future__ import annotations

import argparse
import sys

from readtrace.errors import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("daemon", choices=["gcsfuse"], help="whose log it is")
    parser.add_argument("log", help="the daemon's log file")
    parser.add_argument("-o", "--output", required=True, help="trace to write (.rtrace)")
    parser.add_argument("--onto", metavar="APP.rtrace", help="join onto this recorded trace (by inode, thread, time)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing trace")


def run(args: argparse.Namespace) -> int:
    from readtrace.fuselog.importer import import_gcsfuse

    result = import_gcsfuse(args.log, args.output, onto=args.onto, force=args.force)
    bad = f", {result.malformed} malformed ReadFile line(s) skipped" if result.malformed else ""
    joined = f" joined onto {args.onto}" if result.joined else ""
    print(f"readtrace: {result.reads:,} ReadFile requests from {result.lines:,} lines{bad}{joined} "
          f"({result.note}) -> {result.path}", file=sys.stderr)
    print(f"next: readtrace report {result.path}", file=sys.stderr)
    return ExitStatus.OK
