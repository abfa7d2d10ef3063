"""Run a command under eBPF probes and record how it reads files.

Follows the whole process tree (threads, forks, execs) and records joinable views: syscalls
(open, read/pread/readv/preadv, mmap, lseek, dup, close, ...), the page cache (faults, lookups,
misses, readahead), for files on FUSE mounts every FUSE request (handle, thread, offset, size), and
for Python commands the loader calls that issued the reads (safetensors, torch.load, transformers,
diffusers; --no-python-calls: off).
Needs root (or CAP_BPF+CAP_PERFMON); `readtrace doctor` checks the rest. Without them (a pod, a
shared node) it records with strace instead (--backend ptrace, chosen automatically with a notice):
syscalls with threads, fds and offsets, plus the page cache's residency sampled every --sample-ms;
no page-fault order and no FUSE requests (`readtrace import gcsfuse LOG` adds the daemon's view).

With -p PID[,PID...] it attaches to processes already running instead (root, eBPF only): each
with its threads and every child it starts from then on; the files, open file descriptions and
mappings they held before are recovered from /proc. --cgroup PATH: every process of a cgroup v2
directory and every one that joins it (a container, a pod); --wait-for REGEX: the next process whose
command line matches. It stops after --duration SECONDS, --until-idle SECONDS without a checkpoint
read, on Ctrl-C or when they have all exited (the cgroup is removed); they keep running.

  sudo readtrace record -- python load.py
  sudo readtrace record -o load.rtrace -- torchrun --nproc-per-node 2 load.py
  sudo readtrace record -o s3://bucket/job/node$NODE_RANK.rtrace -- torchrun ...   written here, then uploaded
  sudo readtrace record -p 4242 --duration 60
  sudo readtrace record --wait-for 'vllm serve' --until-idle 10
  sudo readtrace record --cgroup /sys/fs/cgroup/kubepods.slice/.../pod<uid>.slice --until-idle 10

Exit code: the command's own; 126 when it cannot be run, 127 when it does not exist; 130 after
Ctrl-C, SIGTERM or SIGHUP (the trace is still written); 3 without the prerequisites (readtrace doctor).
Attached: 0, 130 after Ctrl-C/SIGTERM (the trace is written), 5 when a PID does not exist or PATH is
no cgroup v2 directory, 3 not root.
"""

from __future__ import annotations

import argparse
import sys

from readtrace.errors import ExitStatus, PrerequisiteError, UsageError
from readtrace.validate import NON_NEGATIVE, arg


def _int(text: str):
    """An int, or the text itself: record_command says what is wrong in one line."""
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str):
    """A float, or the text itself: the recorder says what is wrong in one line."""
    try:
        return float(text)
    except ValueError:
        return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="trace path (default: ./readtrace-<prog>-<pid>.rtrace), or an "
                        "object-store URL (s3://BUCKET/PREFIX/NAME.rtrace): recorded here, then uploaded")
    parser.add_argument("--upload", metavar="URL",
                        help="also upload the finished trace to this object-store URL (a NAME.rtrace, or a "
                             "prefix to put it in); readers never see a half-uploaded trace")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing trace")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument("--no-coalesce", action="store_true",
                        help="one row per read call (default: merge consecutive same-size reads in kernel)")
    parser.add_argument("--backend", default="auto", choices=["auto", "ebpf", "ptrace"],
                        help="auto (default): eBPF when allowed, else ptrace (strace, no privileges)")
    parser.add_argument("--sample-ms", type=arg(NON_NEGATIVE), default=5.0, metavar="MS",
                        help="ptrace backend: residency sampling interval (0: no sampler)")
    parser.add_argument("--ring-mib", type=_int, default=None, metavar="N",
                        help="events ring buffer in MiB, a power of two (default 64); "
                             "raise it when the report says LOST_EVENTS")
    parser.add_argument("--no-python-calls", dest="python_calls", action="store_false",
                        help="do not record which Python loader calls (safetensors, torch.load, transformers, "
                             "diffusers) issued the reads (default: recorded for Python commands)")
    parser.add_argument("-p", "--pid", metavar="PID[,PID...]",
                        help="attach to running processes (their threads and later children) instead of running CMD")
    parser.add_argument("--cgroup", metavar="PATH",
                        help="attach to every process of a cgroup v2 directory (and below), and every one that joins it")
    parser.add_argument("--wait-for", metavar="REGEX",
                        help="attach to the first process started from now on whose command line matches")
    parser.add_argument("--duration", type=_float, default=None, metavar="SECONDS",
                        help="attached: stop after this long (default: Ctrl-C or when they all exited)")
    parser.add_argument("--until-idle", type=_float, default=None, metavar="SECONDS",
                        help="attached: stop once no checkpoint-like file was read for this long (after the first)")
    parser.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                        help="the command to run and trace")


def run(args: argparse.Namespace) -> int:
    if args.ebpf:
        from readtrace.record.btf import BTFError
        from readtrace.record.program import build_source, fuse_supported

        try:
            print(build_source(with_fuse=fuse_supported(), coalesce=not args.no_coalesce))
        except BTFError as e:
            raise PrerequisiteError(f"kernel BTF: {e}") from e
        return ExitStatus.OK
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    attach = any(v is not None for v in (args.pid, args.cgroup, args.wait_for))
    if attach and cmd:
        raise UsageError("-p, --cgroup and --wait-for record running processes: give no command with them")
    if not attach and (args.duration is not None or args.until_idle is not None):
        raise UsageError("--duration and --until-idle go with -p, --cgroup or --wait-for (a command runs to its end)")
    if not cmd and not attach:
        raise UsageError("no command given: readtrace record -- CMD [ARGS...]")
    upload, args.output, scratch = _upload_target(args)
    try:
        result = _record(args, cmd, attach)
    except BaseException:
        if scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        raise
    if upload:
        _upload(result.trace_path, upload, args, scratch)
    return result.exit_code


def _record(args: argparse.Namespace, cmd: list[str], attach: bool):
    from readtrace import runstate
    from readtrace.record.backend import choose_backend

    runstate.sweep((lambda line: None) if args.quiet else (lambda line: print(f"readtrace: {line}", file=sys.stderr)))
    if attach:
        return _attach(args)
    backend, notice = choose_backend(args.backend)
    if notice and not args.quiet:
        print(notice, file=sys.stderr)
    if backend == "ptrace":
        from readtrace.ptrace.recorder import record_ptrace

        result = record_ptrace(cmd, args.output, force=args.force, quiet=args.quiet,
                               interval_s=args.sample_ms / 1000 or None, python_calls=args.python_calls)
    else:
        from readtrace.record import record_command

        result = record_command(cmd, args.output, force=args.force, quiet=args.quiet,
                                coalesce=not args.no_coalesce, ring_mib=args.ring_mib,
                                python_calls=args.python_calls)
    return result


def _attach(args: argparse.Namespace):
    if args.backend == "ptrace":
        raise UsageError("-p, --cgroup and --wait-for need the eBPF backend (root)")
    if sum(v is not None for v in (args.pid, args.cgroup, args.wait_for)) > 1:
        raise UsageError("give one of -p PID, --cgroup PATH, --wait-for REGEX")
    from readtrace.record.attach import parse_pids
    from readtrace.record.attached import record_attached, targets

    pids = parse_pids(args.pid) if args.pid is not None else None
    return record_attached(targets(pids, args.cgroup, args.wait_for), args.output, force=args.force,
                           quiet=args.quiet, coalesce=not args.no_coalesce, ring_mib=args.ring_mib,
                           duration=args.duration, until_idle=args.until_idle)


def _upload_target(args: argparse.Namespace) -> tuple[str | None, str | None, str | None]:
    """(URL to upload to, local output, scratch directory to remove after the upload), the URL checked
    before the command runs."""
    from readtrace.trace.location import is_url
    from readtrace.trace.upload import check_upload_target, trace_url

    url = args.output if args.output and is_url(args.output) else args.upload
    if not url:
        return None, args.output, None
    output, scratch = args.output, None
    if url is args.output:
        import tempfile
        from pathlib import Path

        name = url.rstrip("/").rsplit("/", 1)[-1]
        if not name.endswith(".rtrace"):
            raise UsageError(f"-o {url}: name the trace (a URL ending in NAME.rtrace), or use --upload URL")
        check_upload_target(url, args.force)
        scratch = tempfile.mkdtemp(prefix="readtrace-upload-", dir=".")
        return url, str(Path(scratch) / name), scratch
    if output:
        url = trace_url(url, output.rstrip("/").rsplit("/", 1)[-1])
        check_upload_target(url, args.force)
    return url, output, None


def _upload(trace: str, url: str, args: argparse.Namespace, scratch: str | None) -> None:
    """Upload the recorded trace; the local copy of ``-o URL`` is removed once uploaded (kept on failure)."""
    import shutil

    from readtrace.trace.upload import trace_url, upload_trace

    done = upload_trace(trace, trace_url(url, str(trace).rstrip("/").rsplit("/", 1)[-1]), force=args.force)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    if not args.quiet:
        print(f"readtrace: uploaded {trace} -> {done}", file=sys.stderr)
