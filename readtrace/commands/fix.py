"""Run a load with the fix, or prove it: rerun baseline and fixed, each cold, and compare.

  readtrace fix --compare                          # the newest trace's command, in this directory
  readtrace fix --compare run.rtrace               # a recorded command (options before TRACE)
  readtrace fix --compare --trust-trace theirs.rtrace   # a trace another user owns: read its command first
  readtrace fix --compare --plan -- python load.py ckpt/   # the runs it would make (how many), running nothing
  readtrace fix --compare --repeat 3 -- python load.py model.safetensors
  readtrace fix --compare --budget 120 run.rtrace   # at most 2 minutes: what did not fit is "not tried"
  readtrace fix --compare -- torchrun --nproc_per_node 4 load.py ckpt/   # and rank by rank
  readtrace fix -- python load.py model.safetensors   # just run it with the fix

The fix is injected into the unchanged command (a sitecustomize shim on PYTHONPATH routes
safetensors load_file/safe_open): `prefetch` streams each checkpoint into the page cache with large
sequential reads on fds of its own; `own-fd` loads it with one sequential reader per fd into pinned
buffers and onto the target device; `both` does both; `auto` (default) measures first: with
--compare it leaves a load alone that is not slow on reads, else tries each candidate (these and
the loader's own levers: backend="pread", disable_mmap, torch.load mmap=False, OMP_NUM_THREADS)
and keeps the fastest; without --compare it picks per file system and device. Every loaded tensor's name, dtype, shape and sha256 are recorded in both runs: any
difference is an error naming the tensors. Under torchrun each rank prefetches only the byte spans
it read in the trace (or its share of files every rank reads whole) and the table adds one line per
rank: its loader time, prefetched bytes and a digest of its tensors, baseline vs fixed.
"""

from __future__ import annotations

import argparse
import json
import sys

from readtrace.commands.args import at_least_one
from readtrace.errors import ExitStatus, NoEvidenceError, ReadtraceError, TraceError, UsageError
from readtrace.rerun.protocol import FIX_STRATEGIES
from readtrace.validate import directory, regular_file


def add_arguments(parser) -> None:
    parser.add_argument("--compare", action="store_true", help="rerun baseline and fixed, cold, and compare")
    parser.add_argument("--strategy", choices=FIX_STRATEGIES, default="auto",
                        help="the fix (default: auto: measure first, act only where it gains)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="N interleaved runs per side")
    parser.add_argument("--device", help="load onto this device instead of the one the script asks for")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="the own-fd loader's readers, each its own fd and range (default: 1 on a CPU; "
                             "fix --compare uses the mount's probed streams where they measured faster)")
    parser.add_argument("--files", nargs="+", metavar="PATH", type=regular_file,
                        help="checkpoint files to evict before each run (default: found by a discovery run)")
    parser.add_argument("--no-record", action="store_true", help="do not record the reruns with eBPF")
    parser.add_argument("--warm", action="store_true",
                        help="warm runs instead of cold ones: what the fix costs where nothing is slow")
    parser.add_argument("--keep", metavar="DIR", type=directory, help="keep manifests, logs and traces of every run in DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--plan", action="store_true",
                        help="with --compare: list the runs it would make and how many times the command runs; run nothing")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="with --compare: spend at most SECONDS in all; candidates that no longer fit are "
                             "listed as not tried, a running one is stopped")
    parser.add_argument("--no-wait", action="store_true",
                        help="with --compare: fail instead of waiting while another compare measures the same files")
    parser.add_argument("--trust-trace", action="store_true",
                        help="run a trace's recorded command although another user owns or can change the trace")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="TRACE | -- CMD",
                        help="a trace, or -- and a command (options go before it)")


def run(args) -> int:
    from readtrace.fix import child

    with child.stop_signals_interrupt():  # SIGTERM/SIGHUP: 130 like Ctrl-C, runs stopped, work dirs removed
        return _run(args, child)


def _run(args, child) -> int:
    from readtrace import runstate
    from readtrace.fix.compare import compare  # imports torch: only when running
    from readtrace.fix.compare_report import render_table, to_json
    from readtrace.fix.plan import plan, render_plan
    from readtrace.fix.progress import Progress
    from readtrace.fix.runs import default_recorder
    from readtrace.fix.verdict import DIFFERS, UNPROVEN, verdict_of
    from readtrace.fix.workdir import checked_keep
    from readtrace.record.launch import sudo_credentials
    from readtrace.rerun.environment import shim_environment

    at_least_one(args, "repeat")
    if args.threads is not None:
        at_least_one(args, "threads")
        if args.compare:
            raise UsageError("--threads sets the own-fd loader of a fix run; fix --compare chooses its readers "
                             "from the mount's probe")
    if args.budget is not None and not args.budget > 0:
        raise UsageError(f"--budget must be a positive number of seconds, not {args.budget:g}")
    if args.budget is not None and (not args.compare or args.strategy != "auto" or args.warm):
        raise UsageError("--budget caps the candidates of fix --compare --strategy auto (cold): "
                         "other runs have no candidates to leave out")
    say = _say
    if args.plan:
        command, cwd, files, trace, shown = _target(args.target, trust=True)
        files = args.files or files
        p = plan(args.strategy, args.repeat, files_known=files is not None, cold=not args.warm, budget=args.budget,
                 recorded=trace is not None)
        render_plan(p, command, cwd, files, shown, sys.stdout)
        return ExitStatus.OK
    cleaned: list[str] = []
    runstate.sweep(cleaned.append)  # said after the first line: a compare's first line is its run count
    command, cwd, files, trace, shown = _target(args.target, args.trust_trace)
    child.check_runnable(command, cwd)
    if args.compare:
        if args.keep:
            checked_keep(args.keep, sudo_credentials())  # a refused DIR before anything is said or run
        say(plan(args.strategy, args.repeat, files_known=(args.files or files) is not None,
                 cold=not args.warm, budget=args.budget, recorded=trace is not None).headline())
    for line in [shown] * bool(shown) + cleaned:
        say(line)
    if not args.compare:
        files = args.files or files
        threads = {"threads": args.threads} if args.threads else {}
        with shim_environment(args.strategy, None, device=args.device, prefetch_files=files or (), **threads) as env:
            return child.run(command, env=env, cwd=cwd)
    recorder, why_not = (None, "runs not recorded (--no-record)") if args.no_record else default_recorder()
    with Progress(say, sys.stderr if not args.json else None) as progress:  # live on a terminal
        log = progress.say if not args.json else (lambda line: None)
        result = compare(command, strategy=args.strategy, repeat=args.repeat, files=args.files or files,
                         device=args.device, cwd=cwd, workdir=args.keep, recorder=recorder, cold=not args.warm,
                         log=log, spans_from=trace, wait=not args.no_wait, tell=progress.say, budget=args.budget,
                         progress=progress, recorded_from=trace)
    if why_not:
        result.notes.append(why_not)
    if args.json:
        json.dump(to_json(result), sys.stdout, indent=2)
        print()
    else:
        render_table(result, sys.stdout)
    verdict = verdict_of(result)  # the exit code is the verdict's (fix/verdict.py), as in the JSON
    if verdict.word == DIFFERS:
        raise ReadtraceError(verdict.why)
    if verdict.word == UNPROVEN:
        raise NoEvidenceError(verdict.why)
    return ExitStatus.OK


def _say(line: str) -> None:
    print(f"readtrace: {line}", file=sys.stderr)


def _target(target: list[str], trust: bool = False
            ) -> tuple[list[str], str | None, list[str] | None, str | None, str | None]:
    """(command, cwd, files to evict, the trace, the line saying what will run) from `-- CMD`, a trace,
    or the newest trace here; a trace's recorded command only from a trace of this user or root
    (fix/trust.py)."""
    if target and target[0] == "--":
        target = target[1:]
        if not target:
            raise UsageError("nothing to run after --")
        return target, None, None, None, None
    if len(target) > 1:
        raise UsageError("give one trace, or a command after --")
    from readtrace.fix.tracefacts import command_from_trace
    from readtrace.fix.trust import checked_trace, describe

    if not target:
        from readtrace.trace import newest_trace

        target = [str(newest_trace("."))]
    owner, meta = checked_trace(target[0], trust=trust)
    recorded = meta.get("command") if meta else None
    recorded = recorded if isinstance(recorded, list) and recorded and all(isinstance(a, str) for a in recorded) \
        else None
    command, cwd, files = command_from_trace(target[0], recorded)
    if meta is not None:  # the cwd as read from the checked meta.json, not from a second read
        cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
    if command != recorded and not trust:  # what load_trace read is not what was checked
        raise TraceError(f"{target[0]}: the trace changed while it was read; run again")
    return command, cwd, files, target[0], describe(command, cwd, target[0], owner)

