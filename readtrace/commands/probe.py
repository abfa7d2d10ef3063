"""Measure the mount holding PATH by reading a file already there (never a write), and cache it.

  readtrace probe /mnt/models/model.safetensors     (a directory: its largest file is read)
  readtrace probe --show [--json]                     (the cached profiles)

First-byte latency, bandwidth of one and of N streams, the per-handle penalty (N readers on ONE open
file against one fd each), whether the page cache survives an open, and (root) whether a larger
read_ahead_kb changes the time (the old value is restored). Each test reads a bounded sample, cold;
a probe takes seconds. record, report and fix use the cached profile of the mount (docs/probe.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from readtrace.errors import ExitStatus, UsageError
from readtrace.validate import POSITIVE_INT, arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help="a file on the mount (or a directory: its largest file)")
    parser.add_argument("--show", action="store_true", help="print the cached profiles and exit")
    parser.add_argument("--json", action="store_true", help="JSON on standard output")
    parser.add_argument("--streams", type=arg(POSITIVE_INT), default=4, help="parallel readers (default 4)")
    parser.add_argument("--sample-mib", type=arg(POSITIVE_INT), default=64,
                        help="the most one bandwidth test reads, MiB (default 64)")
    parser.add_argument("--no-cache", action="store_true", help="measure only: do not cache the profile")


def run(args: argparse.Namespace) -> int:
    from readtrace.measure.profile import load_profiles

    if args.show:
        return _print(load_profiles(), args.json, empty="readtrace probe: no cached mount profile")
    if not args.path:
        raise UsageError("probe: give a PATH on the mount to measure, or --show")
    from readtrace.measure.probe import probe
    from readtrace.measure.profile import save_profile

    say = (lambda msg: print(msg, file=sys.stderr)) if not args.json else None
    profile = probe(args.path, streams=args.streams, sample_bytes=args.sample_mib << 20, say=say)
    _print([profile], args.json)  # what was measured is shown even where it cannot be cached
    if not args.no_cache:
        where = save_profile(profile)
        if say:
            say(f"probe: cached in {where}")
    return ExitStatus.OK


def _print(profiles: list, as_json: bool, empty: str = "") -> int:
    from readtrace.report.mountprofile import profile_lines

    if as_json:
        print(json.dumps([p.data() for p in profiles], indent=1))
    elif not profiles:
        print(empty)
    for p in profiles if not as_json else ():
        print("\n".join(profile_lines(p)))
    return ExitStatus.OK
