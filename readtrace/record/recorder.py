"""``record_command``: run a command under the probes and write its trace."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import signal
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ExitStatus, ReadtraceError, UsageError
from readtrace.fs.mounts import fuse_daemons, read_mounts
from readtrace.measure.profile import mounted_profiles
from readtrace.pagecache.reclaim import Watch
from readtrace.record import pycalls
from readtrace.record.decode import Decoder
from readtrace.record.launch import (
    HeldChild,
    command_environment,
    output_rights,
    resolve_command,
    sudo_credentials,
)
from readtrace.record.prereq import require_prerequisites
from readtrace.record.probeset import ProbeSet
from readtrace.record.program import EVENTS_RING_BYTES, strs_ring_bytes
from readtrace.record.session import Session
from readtrace.trace import TraceWriter, default_trace_name
from readtrace.trace.format import check_trace_target

DRAIN_INTERVAL_S = 0.02
BUSY_DRAIN_RECORDS = 50_000  # drained this many at once: drain again at once instead of sleeping
RECORDER_NICE = -10  # the recorder mostly sleeps; when it wakes it must not be starved (ring full)
BACKEND = "ebpf"  # trace/views.BACKEND_EBPF
RING_MIB_RANGE = (1, 4096)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: an SSH session went away


@dataclass
class RecordResult:
    exit_code: int
    trace_path: Path
    lost_events: int
    wall_s: float
    events: int
    interrupted: bool = False  # stopped by SIGINT/SIGTERM/SIGHUP: a caller doing more should stop too

    def raise_if_interrupted(self) -> None:
        """For callers that record as one step of more (fix --compare, demo): Ctrl-C stops them too."""
        if self.interrupted:
            raise KeyboardInterrupt


class _StopSignals:
    """SIGINT/SIGTERM/SIGHUP only set a flag: the loop then stops the child and still writes the trace."""

    def __init__(self):
        self.received: int | None = None
        self._old = {}

    def __enter__(self):
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, _frame):
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _output_path(output, cmd: list[str], pid: int) -> Path:
    return Path(output) if output is not None else Path.cwd() / default_trace_name(cmd, pid)


def check_ring_mib(ring_mib) -> int:
    """The events ring size in MiB: a power of two in RING_MIB_RANGE, else UsageError."""
    low, high = RING_MIB_RANGE
    if isinstance(ring_mib, bool) or not isinstance(ring_mib, int) or not low <= ring_mib <= high \
            or ring_mib & (ring_mib - 1):
        raise UsageError(f"{{option}} must be a power of two from {low} to {high}, not {ring_mib!r}", option="ring_mib")
    return ring_mib


def record_command(cmd: list[str], output: str | Path | None = None, *, force: bool = False,
                   env: dict | None = None, cwd: str | None = None, quiet: bool = False,
                   coalesce: bool = True, ring_mib: int | None = None, python_calls: bool = True,
                   probes: ProbeSet | None = None) -> RecordResult:
    """Run ``cmd`` with the probes attached to its whole process tree; write the trace.

    Raises ReadtraceError: PREREQUISITE (with the doctor's line), NOT_FOUND (no such command).
    The command's own exit code is in the result (130 when interrupted by SIGINT/SIGTERM).
    ``coalesce=False``: one row per read call. ``ring_mib``: events ring size (a power of two).
    ``python_calls``: record which Python loader calls issued the reads (record/pycalls.py).
    ``probes``: record under this already attached probe set (record/probeset.py: one compile for a
    series of recordings; its ``coalesce`` and ring size apply), left attached; else compile and
    attach for this recording alone.
    """
    if probes is None:
        ring_mib = check_ring_mib(EVENTS_RING_BYTES >> 20 if ring_mib is None else ring_mib)
        require_prerequisites()
    else:
        coalesce, ring_mib = probes.coalesce, probes.ring_mib
    exe = resolve_command(cmd, env)
    creds = sudo_credentials()
    if output is not None:
        with output_rights(creds):
            check_trace_target(output, force)
    run_cwd = os.path.abspath(cwd or os.getcwd())
    with contextlib.ExitStack() as cleanup:  # the hook's directory and log outlive the command
        if probes is None:
            probes = ProbeSet(coalesce, ring_mib)
            cleanup.callback(probes.close)
            mounts, connections, series = probes.mounts, probes.connections, False
        else:
            probes.begin()
            mounts = read_mounts()
            connections, series = probes.connections_now(mounts), True
        calls = cleanup.enter_context(pycalls.python_calls(env, creds)) if python_calls else None
        child = HeldChild(exe, cmd, command_environment(calls.env if calls else env, creds), cwd, creds)
        path = _output_path(output, cmd, child.pid)
        writer = session = None
        try:
            with output_rights(creds):
                writer = TraceWriter(path, force=force)
                session = Session(probes.bpf, writer, Decoder(root_pid=child.pid, cwd=run_cwd),
                                  ring_bytes=ring_mib << 20, rights=functools.partial(output_rights, creds),
                                  rings=(probes.fast, probes.strs))
            session.trace_pid(child.pid)
            if connections:
                session.watch_fuse(connections, fuse_daemons())
            with _StopSignals() as stop, _Priority() as priority:
                start_wall, t0_ns, reclaim = datetime.now(UTC), time.monotonic_ns(), Watch()
                child.release()
                drain_until(session, stop, priority, lambda: child.poll() is not None)
                code = child.poll() if child.poll() is not None else child.stop()
                end_ns, reclaimed = time.monotonic_ns(), reclaim.stop()
                survivors = session.survivors(child.pid)
                lost = session.stop()
                if not series:
                    probes.detach_in_background()
                with output_rights(creds):
                    session.write(read_mounts(child.pid) if _alive(child.pid) else mounts)
                    calls_meta = pycalls.write_calls(calls, writer)
            meta = {
                "command": list(cmd), "exit_code": code, "interrupted": stop.received is not None,
                **recording_meta(session, lost, start_wall, t0_ns, end_ns, connections=connections,
                                 coalesce=coalesce, ring_mib=ring_mib),
                "pid": child.pid, "cwd": run_cwd, "survivors": survivors, "reclaim": reclaimed, **calls_meta,
                "probe_set_recording": probes.recordings,  # > 1: probes compiled once for a series
            }
            with output_rights(creds):
                writer.close(meta)
        except BaseException as e:
            _outlive_our_failure(child, e)
            unfinished(writer, e)
            raise
        finally:
            if series:
                probes.forget(session.decoder.tids if session else {child.pid})
        result = RecordResult(exit_code=ExitStatus.INTERRUPTED if stop.received else code, trace_path=path,
                              lost_events=meta["lost_events"], wall_s=meta["wall_s"], events=session.records,
                              interrupted=stop.received is not None)
        if not quiet:
            with contextlib.suppress(OSError):  # stderr gone (SIGHUP, closed): the trace is written anyway
                _print_summary(result, meta)
        return result


def unfinished(writer: TraceWriter | None, error: BaseException) -> None:
    """The recording failed with ``error`` (the caller re-raises it): an OSError (e.g. no space even for
    meta.json) keeps what was written and says where, anything else removes the unfinished trace."""
    if writer is None or writer.closed:
        return
    if isinstance(error, OSError):
        raise ReadtraceError(f"could not finish the trace ({error.strerror}); what was written is in "
                             f"{writer.dir}") from None
    writer.abort()


def partial_fields(problems: list[str], dropped: int) -> dict:
    """The meta keys of a partial trace: ``partial`` (bool), ``partial_reasons`` (one line each) and
    ``dropped_records`` (records the recorder received but could not keep)."""
    return {"partial": bool(problems), "partial_reasons": list(problems), "dropped_records": int(dropped)}


def _outlive_our_failure(child: HeldChild, error: BaseException) -> None:
    """The recorder failed: a released command is the user's work and keeps running to its end (the
    probes are detached after); one never released exits without running."""
    child.abandon()
    if child.poll() is not None:
        return
    if isinstance(error, KeyboardInterrupt | SystemExit):
        child.stop()
        return
    with contextlib.suppress(OSError):
        print(f"readtrace: recording failed ({type(error).__name__}: {error}); the command (pid "
              f"{child.pid}) keeps running untraced until it exits", file=sys.stderr)
    try:
        child.wait()
    except KeyboardInterrupt:
        child.stop()


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}/mountinfo")


def recording_meta(session: Session, lost: dict, start_wall: datetime, t0_ns: int, end_ns: int, *,
                   connections: set[int], coalesce: bool, ring_mib: int) -> dict:
    """The meta keys every eBPF recording writes (a launched command or an attach)."""
    return {
        "start_time": start_wall.isoformat(), "end_time": datetime.now(UTC).isoformat(),
        "t0_ns": t0_ns, "end_ns": end_ns, "wall_s": (end_ns - t0_ns) / 1e9,
        "hostname": socket.gethostname(), "kernel": platform.release(), "backend": BACKEND,
        "missing_views": [] if connections else ["fuse"],
        "lost_events": sum(lost.values()), "lost_detail": lost,
        "records": session.records, "calls": session.calls, "coalesce": coalesce,
        "max_drain_gap_s": round(session.max_drain_gap_s, 4), "ring_mib": ring_mib,
        "live_decoded_records": session.live_decoded, "bpf_program_misses": session.misses,
        "strs_ring_mib": strs_ring_bytes(ring_mib << 20) >> 20,
        "fuse_connections": sorted(connections), "page_size": os.sysconf("SC_PAGE_SIZE"),
        **partial_fields(session.problems, session.dropped),
        "ranks": {str(pid): rank for pid, rank in sorted(session.decoder.ranks.items())},
        "sched": session.sched, "truncated_paths": session.decoder.truncated_paths,
        "mount_profiles": [p.data() for p in mounted_profiles()],  # readtrace probe's, of the mounts here
    }


def drain_until(session: Session, stop: _StopSignals, priority: _Priority, finished) -> None:
    """Drain the rings on a timer until ``finished()`` is true (checked before each drain, so the
    last drain follows it) or a stop signal arrived."""
    last = time.monotonic()
    while True:
        over = finished()
        taken = session.drain()
        now = time.monotonic()
        session.max_drain_gap_s = max(session.max_drain_gap_s, now - last)  # in meta: why events got lost
        last = now
        if over or stop.received is not None:
            return
        if taken < BUSY_DRAIN_RECORDS:
            if session.live_decode_due():
                with priority.normal():  # decoding is work the command would otherwise wait on: no precedence
                    session.decode_some()
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

    @contextlib.contextmanager
    def normal(self):
        """Back at the priority from before for a while (the drain's raised one after)."""
        raised = os.getpriority(os.PRIO_PROCESS, 0)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, self._old)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, raised)


def _print_summary(result: RecordResult, meta: dict) -> None:
    err = sys.stderr
    attached = meta.get("attached")
    how = f"exit code {meta['exit_code']}" if not attached else \
        f"{len(attached['processes'])} process(es) attached, stopped by {attached['stopped_by']}"
    print(f"readtrace: {result.events:,} records ({meta['calls']:,} calls) in {result.wall_s:.2f} s, "
          f"{how}, lost events: {result.lost_events:,} -> {result.trace_path}", file=err)
    if attached:
        got = attached["recovered"]
        print(f"readtrace: recovered at attach: {got['open_files']} open file(s) ({got['open_files_identified']} "
              f"with their open file description), {got['mappings']} mapping(s); {attached['not_known']}", file=err)
    if result.lost_events:
        print(f"readtrace: WARNING: {result.lost_events:,} events lost (ring buffer full): "
              f"the trace is incomplete; record again with a larger --ring-mib (this run: {meta.get('ring_mib')})",
              file=err)
    dropped = meta.get("dropped_records", 0)
    for reason in meta.get("partial_reasons", []):
        print(f"readtrace: WARNING: partial trace: {reason}"
              + (f" ({dropped:,} records dropped)" if dropped else ""), file=err)
    if meta.get("survivors") and not attached:
        print(f"readtrace: WARNING: {len(meta['survivors'])} process(es) of the traced tree still run "
              f"(pid {', '.join(map(str, meta['survivors'][:5]))}): the trace stops before they do", file=err)
    print(f"next: readtrace report {result.trace_path}", file=err)
