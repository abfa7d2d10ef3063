"""``record_ptrace``: record without privileges: strace for the syscalls, the residency sampler for the
page cache. Same trace format as the eBPF recorder, with ``meta.backend = "ptrace"`` and
``meta.missing_views``: no page faults (which thread touched which page of a mapping), no page-cache
misses or readahead (only residency, sampled), no FUSE requests.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ExitStatus, PrerequisiteError, ReadtraceError
from readtrace.fs.mounts import kernel_dev, read_mounts
from readtrace.measure.profile import mounted_profiles
from readtrace.pagecache.reclaim import Watch
from readtrace.ptrace.parse import StraceParser
from readtrace.ptrace.sampler import ResidencySampler
from readtrace.record import pycalls
from readtrace.record.decode import FileInfo, files_table
from readtrace.record.launch import HeldChild, resolve_command
from readtrace.record.recorder import RecordResult, _output_path, _print_summary, _StopSignals
from readtrace.trace import TraceWriter, views
from readtrace.trace.format import check_trace_target

SYSCALLS = ("open,openat,openat2,close,dup,dup2,dup3,fcntl,read,pread64,readv,preadv,preadv2,mmap,munmap,"
            "lseek,fadvise64,readahead,clone,clone3,fork,vfork,execve,exit_group")
SPOOL = "strace.out"
PARSE_ROWS = 200_000  # rows parsed before they go to the trace (bounded memory)
DEFAULT_INTERVAL_S = 0.005


def strace_path() -> str:
    path = shutil.which("strace")
    if path is None:
        raise PrerequisiteError("strace not found: the unprivileged backend runs the command under strace; "
                             "fix: apt-get install -y strace (see: readtrace doctor)")
    return path


def strace_version(path: str) -> str:
    try:
        out = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.splitlines()[0].rsplit(" ", 1)[-1] if out else "?"


def strace_argv(strace: str, output: Path, cmd: list[str]) -> list[str]:
    """-f threads and forks, -ttt wall-clock µs, -T durations, -y fd paths, -s 0 no buffer contents,
    -X raw hex flags, --seccomp-bpf: stop only at the traced syscalls (the rest run at full speed)."""
    return [strace, "-f", "-qq", "-ttt", "-T", "-y", "-s", "0", "-X", "raw", "--seccomp-bpf",
            "-e", f"trace={SYSCALLS}", "-o", str(output), "--", *cmd]


def parse_into(spool: Path, writer: TraceWriter, clock_offset_ns: int) -> StraceParser:
    """Parse strace's output into the events table, PARSE_ROWS at a time."""
    parser = StraceParser(clock_offset_ns=clock_offset_ns)
    with open(spool, encoding="utf-8", errors="replace") as f:
        for line in f:
            parser.feed(line)
            if len(parser) >= PARSE_ROWS:
                writer.append("events", parser.take())
    writer.append("events", parser.take())
    return parser


def _files(paths) -> dict[tuple[int, int], FileInfo]:
    files = {}
    for path in sorted(paths):
        try:
            st = os.stat(path)
        except OSError:
            continue
        files.setdefault((kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino), FileInfo(path, st.st_size))
    return files


def ptrace_meta(sampler: ResidencySampler | None, interval_s: float) -> dict:
    """backend, missing_views and how the missing page views were inferred (when the sampler ran)."""
    meta = {"backend": views.BACKEND_PTRACE,
            "missing_views": [views.PAGE_FAULTS, views.PAGE_CACHE, views.FUSE]}
    if sampler is not None:
        how = f"residency sampling every {interval_s * 1000:g} ms"
        meta["inferred"] = {views.PAGE_FAULTS: how, views.PAGE_CACHE: how}
        s = sampler.stats
        meta["sampler"] = {"interval_ms": interval_s * 1000, "samples": s.samples, "files": s.files,
                           "own_fd": s.own_fd, "reopened": s.reopened, "reopened_paths": s.reopened_paths, "failed": s.failed,
                           "unmeasurable": s.unmeasurable_count, "unmeasurable_paths": s.unmeasurable,
                           "sample_cpu_s": round(s.sample_s, 4), "max_gap_ms": round(s.max_gap_s * 1000, 2)}
    return meta


def record_ptrace(cmd: list[str], output: str | Path | None = None, *, force: bool = False, env: dict | None = None,
                  cwd: str | None = None, quiet: bool = False, interval_s: float | None = DEFAULT_INTERVAL_S,
                  python_calls: bool = True) -> RecordResult:
    """Run ``cmd`` under strace (and the residency sampler unless ``interval_s`` is None); write the trace.
    ``python_calls``: record which Python loader calls issued the reads (record/pycalls.py)."""
    strace = strace_path()
    resolve_command(cmd, env)
    if output is not None:
        check_trace_target(output, force)
    mounts = read_mounts()
    run_cwd = os.path.abspath(cwd or os.getcwd())
    writer = TraceWriter(_output_path(output, cmd, os.getpid()), force=force)
    with contextlib.ExitStack() as cleanup:  # the hook's directory and log outlive the command
        calls = cleanup.enter_context(pycalls.python_calls(env, None)) if python_calls else None
        spool = writer.dir / SPOOL
        child = HeldChild(strace, strace_argv(strace, spool, cmd), calls.env if calls else env, cwd, None)
        sampler = ResidencySampler(str(spool), interval_s) if interval_s else None
        try:
            with _StopSignals() as stop:
                start_wall, t0_ns, reclaim = datetime.now(UTC), time.monotonic_ns(), Watch()
                clock_offset = time.monotonic_ns() - time.time_ns()
                child.release()
                if sampler:
                    sampler.start()
                while (code := child.poll()) is None:
                    if stop.received is not None:
                        code = child.stop()
                        break
                    time.sleep(0.02)
                end_ns, reclaimed = time.monotonic_ns(), reclaim.stop()
                if sampler:
                    sampler.stop()
            if sampler and sampler.error:
                raise ReadtraceError(f"residency sampler failed: {sampler.error}")
            parser = parse_into(spool, writer, clock_offset)
            spool.unlink()
            if sampler:
                writer.append("pages", sampler.pages_frame())
            calls_meta = pycalls.write_calls(calls, writer)
            writer.append("files", files_table(_files(parser.paths | set(sampler._seen if sampler else ())), mounts))
            meta = {
                "command": list(cmd), "exit_code": code, "interrupted": stop.received is not None,
                "start_time": start_wall.isoformat(), "end_time": datetime.now(UTC).isoformat(),
                "t0_ns": t0_ns, "end_ns": end_ns, "wall_s": (end_ns - t0_ns) / 1e9,
                "hostname": socket.gethostname(), "kernel": platform.release(), "pid": None, "cwd": run_cwd,
                "lost_events": 0, "records": parser.lines, "calls": writer.rows["events"],
                "strace": {"version": strace_version(strace), "lines": parser.lines, "unparsed_lines": parser.unparsed},
                "page_size": os.sysconf("SC_PAGE_SIZE"), **ptrace_meta(sampler, interval_s or 0),
                "mount_profiles": [p.data() for p in mounted_profiles()], "reclaim": reclaimed,
                **calls_meta,
            }
            writer.close(meta)
        except BaseException:
            child.abandon()
            if child.poll() is None:
                child.stop()
            if not writer.closed:
                writer.abort()  # the unfinished trace only: a previous one at the path stays
            raise
    result = RecordResult(exit_code=ExitStatus.INTERRUPTED if stop.received else code, trace_path=writer.path,
                          lost_events=0, wall_s=meta["wall_s"], events=writer.rows["events"])
    if not quiet:
        _print_summary(result, meta)
    return result
