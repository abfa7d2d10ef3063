"""``record_command``: run a command under the probes and write its trace."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.fs.mounts import fuse_connections, fuse_daemons, read_mounts
from readtrace.record.btf import BTFError
from readtrace.record.decode import Decoder
from readtrace.record.launch import HeldChild, resolve_command, sudo_credentials
from readtrace.record.prereq import fuse_view_available, require_prerequisites
from readtrace.record.program import (
    EVENTS_RING_BYTES,
    build_source,
    compile_program,
    detach,
    detach_in_background,
)
from readtrace.record.session import Session
from readtrace.trace import TraceWriter, default_trace_name

DRAIN_INTERVAL_S = 0.02
BUSY_DRAIN_RECORDS = 50_000  # drained this many at once: drain again at once instead of sleeping
RECORDER_NICE = -10  # the recorder mostly sleeps; when it wakes it must not be starved (ring full)
BACKEND = "ebpf"  # trace/views.BACKEND_EBPF


@dataclass
class RecordResult:
    exit_code: int
    trace_path: Path
    lost_events: int
    wall_s: float
    events: int


class _StopSignals:
    """SIGINT/SIGTERM only set a flag: the loop then stops the child and still writes the trace."""

    def __init__(self):
        self.received: int | None = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, _frame):
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _output_path(output, cmd: list[str], pid: int) -> Path:
    return Path(output) if output is not None else Path.cwd() / default_trace_name(cmd, pid)


def _check_output(output, force: bool) -> None:
    if output is not None and Path(output).exists() and not force:
        raise ReadtraceError(f"{output} exists; use --force to overwrite it")


def record_command(cmd: list[str], output: str | Path | None = None, *, force: bool = False,
                   env: dict | None = None, cwd: str | None = None, quiet: bool = False,
                   coalesce: bool = True, ring_mib: int = EVENTS_RING_BYTES >> 20) -> RecordResult:
    """Run ``cmd`` with the probes attached to its whole process tree; write the trace.

    Raises ReadtraceError: PREREQUISITE (with the doctor's line), NOT_FOUND (no such command).
    The command's own exit code is in the result (130 when interrupted by SIGINT/SIGTERM).
    ``coalesce=False``: one row per read call. ``ring_mib``: events ring size (a power of two).
    """
    require_prerequisites()
    exe = resolve_command(cmd, env)
    _check_output(output, force)
    creds = sudo_credentials()
    mounts = read_mounts()
    connections = fuse_connections(mounts) if fuse_view_available() else set()
    try:
        source = build_source(with_fuse=bool(connections), coalesce=coalesce, ring_bytes=ring_mib << 20)
    except BTFError as e:
        raise ReadtraceError(f"kernel BTF: {e}", ExitStatus.PREREQUISITE) from e
    run_cwd = os.path.abspath(cwd or os.getcwd())
    child = HeldChild(exe, cmd, env, cwd, creds)
    path = _output_path(output, cmd, child.pid)
    writer = None
    bpf = None
    detaching = None
    try:
        writer = TraceWriter(path, force=force)
        bpf = compile_program(source)
        session = Session(bpf, writer, Decoder(root_pid=child.pid, cwd=run_cwd), ring_bytes=ring_mib << 20)
        session.trace_pid(child.pid)
        if connections:
            session.watch_fuse(connections, fuse_daemons())
        with _StopSignals() as stop, _Priority():
            start_wall, t0_ns = datetime.now(UTC), time.monotonic_ns()
            child.release()
            code = _run_until_exit(child, session, stop)
            end_ns = time.monotonic_ns()
            lost = session.stop()
            detaching = detach_in_background(bpf)
            session.write(read_mounts(child.pid) if _alive(child.pid) else mounts)
        meta = {
            "command": list(cmd), "exit_code": code, "interrupted": stop.received is not None,
            "start_time": start_wall.isoformat(), "end_time": datetime.now(UTC).isoformat(),
            "t0_ns": t0_ns, "end_ns": end_ns, "wall_s": (end_ns - t0_ns) / 1e9,
            "hostname": socket.gethostname(), "kernel": platform.release(), "backend": BACKEND,
            "missing_views": [] if connections else ["fuse"],
            "pid": child.pid, "cwd": run_cwd, "lost_events": sum(lost.values()), "lost_detail": lost,
            "records": session.records, "calls": session.calls, "coalesce": coalesce,
            "max_drain_gap_s": round(session.max_drain_gap_s, 4), "ring_mib": ring_mib,
            "fuse_connections": sorted(connections), "page_size": os.sysconf("SC_PAGE_SIZE"),
        }
        writer.close(meta)
        if creds:
            writer.chown(creds.uid, creds.gid)
    except BaseException:
        child.abandon()
        if child.poll() is None:
            child.stop()
        if writer is not None and not writer.closed:
            _remove_partial(path)
        raise
    finally:
        if bpf is not None:
            detach(bpf, detaching)
    result = RecordResult(exit_code=ExitStatus.INTERRUPTED if stop.received else code, trace_path=path,
                          lost_events=meta["lost_events"], wall_s=meta["wall_s"], events=session.records)
    if not quiet:
        _print_summary(result, meta)
    return result


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}/mountinfo")


def _run_until_exit(child: HeldChild, session: Session, stop: _StopSignals) -> int:
    last = time.monotonic()
    while True:
        code = child.poll()
        taken = session.drain()
        now = time.monotonic()
        session.max_drain_gap_s = max(session.max_drain_gap_s, now - last)  # in meta: why events got lost
        last = now
        if code is not None:
            return code
        if stop.received is not None:
            return child.stop()
        if taken < BUSY_DRAIN_RECORDS:
            time.sleep(DRAIN_INTERVAL_S)


class _Priority:
    """Raise the recorder's scheduling priority (after the child was forked), restore it after."""

    def __enter__(self):
        self._old = os.getpriority(os.PRIO_PROCESS, 0)
        with contextlib.suppress(OSError):  # best effort: without CAP_SYS_NICE drain at normal priority
            os.setpriority(os.PRIO_PROCESS, 0, RECORDER_NICE)
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, self._old)


def _remove_partial(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _print_summary(result: RecordResult, meta: dict) -> None:
    err = sys.stderr
    print(f"readtrace: {result.events:,} records ({meta['calls']:,} calls) in {result.wall_s:.2f} s, "
          f"exit code {meta['exit_code']}, lost events: {result.lost_events:,} -> {result.trace_path}",
          file=err)
    if result.lost_events:
        print(f"readtrace: WARNING: {result.lost_events:,} events lost (ring buffer full): "
              "the trace is incomplete", file=err)
    print(f"next: readtrace report {result.trace_path}", file=err)
