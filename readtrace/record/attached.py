"""``record_attached``: record processes that are already running (``readtrace record -p PID``).

The probes are the same as for a launched command; the traced set is seeded with the processes, their
threads and their descendants from /proc (children started later are followed by the fork probe), and
what they held open before the attach is recovered (record/attach.py). Recording stops after
``duration`` seconds, on SIGINT/SIGTERM/SIGHUP, or when every recorded process has exited; the
processes themselves are never stopped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ExitStatus, PrerequisiteError, UsageError
from readtrace.fs.mounts import fuse_daemons, read_mounts
from readtrace.record.attach import (
    Process,
    borrow_fds,
    check_pids,
    descendants,
    give_back,
    recover,
    touch_borrowed,
)
from readtrace.record.decode import AttachedState, Decoder
from readtrace.record.prereq import require_prerequisites
from readtrace.record.program import EVENTS_RING_BYTES, compile_program, detach, detach_in_background
from readtrace.record.recorder import (
    RecordResult,
    _print_summary,
    _Priority,
    _StopSignals,
    check_ring_mib,
    drain_until,
    probe_source,
    recording_meta,
    unfinished,
)
from readtrace.record.session import Session
from readtrace.trace import TraceWriter, default_trace_name
from readtrace.trace.format import check_trace_target

ALIVE_CHECK_S = 0.5  # how often the recorder looks whether any recorded process is left
BEFORE_ATTACH = "reads, opens and mmaps made before the attach are not in the trace"


def _seed(session: Session, roots: set[int]) -> dict[int, Process]:
    """Put the processes of ``roots``' trees and their threads in the traced set; scan again until no
    process or thread appears that was not seeded (one that forked before it was traced)."""
    seeded: dict[int, Process] = {}
    while True:
        tree = descendants(roots | set(seeded))
        new = {pid: proc for pid, proc in tree.items()
               if pid not in seeded or set(proc.threads) - set(seeded[pid].threads)}
        if not new:
            return seeded
        for pid, proc in new.items():
            session.trace_process(pid, proc.threads)
            seeded[pid] = proc


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return os.getcwd()


def record_attached(pids: list[int], output: str | Path | None = None, *, force: bool = False,
                    quiet: bool = False, coalesce: bool = True, ring_mib: int | None = None,
                    duration: float | None = None) -> RecordResult:
    """Record the running processes ``pids`` (and their threads and descendants) until ``duration``
    seconds passed, a stop signal came or all of them exited; write the trace.

    Raises PrerequisiteError (not root, no bcc ...), InputError (no such process), UsageError."""
    ring_mib = check_ring_mib(EVENTS_RING_BYTES >> 20 if ring_mib is None else ring_mib)
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)
                                 or not duration > 0):
        raise UsageError(f"{{option}} must be more than 0 seconds, not {duration!r}", option="duration")
    if os.geteuid() != 0:
        raise PrerequisiteError("attaching to running processes needs root (sudo readtrace record -p PID)")
    require_prerequisites()
    targets = check_pids(pids)
    root = pids[0]
    if output is not None:
        check_trace_target(output, force)
    mounts, connections, source = probe_source(coalesce, ring_mib)
    cmd = targets[root].cmdline
    path = Path(output) if output is not None else Path.cwd() / default_trace_name(cmd, root)
    writer = TraceWriter(path, force=force)
    bpf = detaching = None
    try:
        start_wall, attach_ns = datetime.now(UTC), time.monotonic_ns()
        bpf = compile_program(source)
        session = Session(bpf, writer, Decoder(root_pid=root, cwd=_cwd(root)), ring_bytes=ring_mib << 20)
        # The recovery's records first in the ring (the decoder takes them from the first batch), then the tree.
        recovered = recover(descendants(set(pids)))
        borrowed = borrow_fds(recovered.files)
        session.trace_self(True)
        try:
            touch_borrowed(borrowed)
        finally:
            session.trace_self(False)
            give_back(borrowed)
        state = AttachedState(recovered, borrowed, os.getpid(), attach_ns)
        tree = _seed(session, set(pids))
        session.decoder.attach({tid: (p.pid, comm) for p in tree.values() for tid, comm in p.threads.items()},
                               state)
        if connections:
            session.watch_fuse(connections, fuse_daemons())
        if not quiet:
            until = f"for {duration:g} s, " if duration is not None else ""
            with contextlib.suppress(OSError):
                print(f"readtrace: attached to {len(tree)} process(es) ({sum(len(p.threads) for p in tree.values())} "
                      f"threads); recording {until}until Ctrl-C or they exit", file=sys.stderr, flush=True)
        t0_ns = time.monotonic_ns()
        deadline = None if duration is None else time.monotonic() + duration
        why = {"stopped_by": "exit"}
        checked = [0.0]

        def finished() -> bool:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                why["stopped_by"] = "duration"
                return True
            if now - checked[0] >= ALIVE_CHECK_S:
                checked[0] = now
                return not session.survivors(0)
            return False

        with _StopSignals() as stop, _Priority() as priority:
            drain_until(session, stop, priority, finished)
            end_ns = time.monotonic_ns()
            if stop.received is not None:
                why["stopped_by"] = "signal"
            survivors = session.survivors(0)
            lost = session.stop()
            detaching = detach_in_background(bpf)
            alive = [p for p in pids if os.path.exists(f"/proc/{p}/mountinfo")]
            session.write(read_mounts(alive[0]) if alive else mounts)
        attached = {
            "pids": list(pids), "cgroup": None, "start_time": start_wall.isoformat(),
            "processes": [{"pid": p.pid, "ppid": p.ppid, "threads": len(p.threads), "cmdline": p.cmdline}
                          for p in tree.values()],
            "recovered": {"open_files": len(recovered.files), "open_files_identified": state.resolved,
                          "mappings": len(recovered.mappings),
                          "files": [{"pid": f.pid, "fd": f.fd, "path": f.path, "pos": f.pos, "flags": f.flags}
                                    for f in recovered.files]},
            "not_known": BEFORE_ATTACH, "stopped_by": why["stopped_by"],
        }
        meta = {
            "command": list(cmd), "exit_code": None, "interrupted": stop.received is not None,
            **recording_meta(session, lost, start_wall, t0_ns, end_ns, connections=connections,
                             coalesce=coalesce, ring_mib=ring_mib),
            "pid": root, "cwd": _cwd(root), "survivors": survivors, "attached": attached,
        }
        writer.close(meta)
    except BaseException as e:
        unfinished(writer, e)
        raise
    finally:
        if bpf is not None:
            detach(bpf, detaching)
    result = RecordResult(exit_code=ExitStatus.INTERRUPTED if stop.received else ExitStatus.OK, trace_path=path,
                          lost_events=meta["lost_events"], wall_s=meta["wall_s"], events=session.records,
                          interrupted=stop.received is not None)
    if not quiet:
        with contextlib.suppress(OSError):
            _print_summary(result, meta)
    return result
