"""``record_attached``: record processes that are already running (``readtrace record -p PID``), the
processes of a cgroup (``--cgroup PATH``) or the next process whose command line matches
(``--wait-for REGEX``).

The probes are the same as for a launched command; the traced set is seeded with the processes, their
threads and their descendants from /proc (children started later are followed by the fork probe;
processes that join the cgroup later by a probe on cgroup_attach_task), and what they held open before
the attach is recovered (record/attach.py). Recording stops after ``duration`` seconds, on
SIGINT/SIGTERM/SIGHUP, ``until_idle`` seconds after the last read of a checkpoint-like file
(record/idle.py), or when every recorded process has exited (the cgroup removed); the processes
themselves are never stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import ExitStatus, PrerequisiteError, UsageError
from readtrace.fs.mounts import fuse_daemons, read_mounts
from readtrace.pagecache.reclaim import Watch
from readtrace.record.attach import (
    Cgroup,
    Process,
    all_pids,
    borrow_fds,
    cgroup_dir,
    cgroup_pids,
    check_pids,
    descendants,
    give_back,
    process,
    recover,
    touch_borrowed,
)
from readtrace.record.decode import AttachedState, Decoder
from readtrace.record.idle import IdleWatch
from readtrace.record.namespaces import Namespaces
from readtrace.record.prereq import require_prerequisites
from readtrace.record.probeset import probe_source
from readtrace.record.program import EVENTS_RING_BYTES, compile_program, detach, detach_in_background
from readtrace.record.recorder import (
    RecordResult,
    _print_summary,
    _Priority,
    _StopSignals,
    check_ring_mib,
    drain_until,
    recording_meta,
    unfinished,
)
from readtrace.record.session import Session
from readtrace.trace import TraceWriter, default_trace_name
from readtrace.trace.format import check_trace_target

ALIVE_CHECK_S = 0.5  # how often the recorder looks whether any recorded process is left (or joined)
WAIT_POLL_S = 0.01  # --wait-for: how often /proc is scanned for new processes
WAIT_RECHECK_S = 2.0  # a new process's command line is checked again this long (a fork execs after)
BEFORE_ATTACH = "reads, opens and mmaps made before the attach are not in the trace"


@dataclass
class Targets:
    """What to record: processes by pid, a cgroup v2 directory, or the next process matching a regex."""

    pids: list[int] | None = None
    cgroup: Cgroup | None = None
    wait_for: re.Pattern | None = None

    def check(self) -> None:
        """Before anything is compiled: the processes exist, the cgroup is one (InputError)."""
        if self.pids is not None:
            check_pids(self.pids)

    def roots(self) -> set[int]:
        """The processes to seed now (pids or the cgroup's; a --wait-for match is found first)."""
        if self.cgroup is not None:
            return cgroup_pids(self.cgroup)
        return set(self.pids or ())


def targets(pids: list[int] | None = None, cgroup: str | None = None, wait_for: str | None = None) -> Targets:
    """One of ``pids``, ``cgroup``, ``wait_for`` as Targets (UsageError for none or several, a bad regex;
    InputError for a path that is no cgroup v2 directory)."""
    if sum(x is not None for x in (pids, cgroup, wait_for)) != 1:
        raise UsageError("record one target: processes by pid, a cgroup, or the next process to match")
    if wait_for is not None:
        try:
            return Targets(wait_for=re.compile(wait_for))
        except re.error as e:
            raise UsageError(f"{{option}} {wait_for!r}: not a regular expression ({e})", option="wait_for") from None
    if cgroup is not None:
        return Targets(cgroup=cgroup_dir(cgroup))
    return Targets(pids=list(pids))


def _seed(session: Session, roots: set[int], seeded: dict[int, Process]) -> dict[int, Process]:
    """Put the processes of ``roots``' trees and their threads in the traced set; scan again until no
    process or thread appears that was not seeded (one that forked before it was traced). Returns the
    newly seeded ones (``seeded`` is updated)."""
    added: dict[int, Process] = {}
    while True:
        tree = descendants(roots | set(seeded))
        new = {pid: proc for pid, proc in tree.items()
               if pid not in seeded or set(proc.threads) - set(seeded[pid].threads)}
        if not new:
            return added
        for pid, proc in new.items():
            session.trace_process(pid, proc.threads)
            seeded[pid] = added[pid] = proc


def _threads(procs: dict[int, Process]) -> dict[int, tuple[int, str]]:
    return {tid: (p.pid, comm) for p in procs.values() for tid, comm in p.threads.items()}


def _wait_for(pattern: re.Pattern, stop: _StopSignals) -> int | None:
    """The first process started from now on whose command line matches (None: a stop signal came)."""
    known = set(all_pids())
    young: dict[int, float] = {}  # pid -> when first seen
    own = os.getpid()
    while stop.received is None:
        now = time.monotonic()
        pids = set(all_pids())
        for pid in pids - known:
            young[pid] = now
        known = pids
        for pid, first in list(young.items()):
            proc = process(pid) if pid in pids and pid != own else None
            if proc is not None and pattern.search(" ".join(proc.cmdline)):
                return pid
            if proc is None or now - first > WAIT_RECHECK_S:
                del young[pid]
        time.sleep(WAIT_POLL_S)
    return None


def _mounts(pids, fallback: list, namespaces: Namespaces) -> list:
    """The mounts as the first recorded process sees them (its mount namespace; read when it was met if
    it is gone now), else ours."""
    for pid in pids:
        try:
            return read_mounts(pid)
        except OSError:  # gone, or exiting (a zombie's mountinfo reads EINVAL)
            theirs = namespaces.mounts_of(pid)
            if theirs:
                return theirs
    return fallback


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return os.getcwd()


def _recover(session: Session, roots: set[int], attach_ns: int):
    """Recover what the processes of ``roots``' trees hold open now; their struct files are named by our
    own lseeks, traced alone (before the processes are seeded: first in the ring)."""
    recovered = recover(descendants(roots))
    borrowed = borrow_fds(recovered.files)
    session.trace_self(True)
    try:
        touch_borrowed(borrowed)
    finally:
        session.trace_self(False)
        give_back(borrowed)
    return AttachedState(recovered, borrowed, os.getpid(), attach_ns)


class _StopWhen:
    """The recording's end: the duration, idle after the load, or no recorded process left."""

    def __init__(self, session: Session, target: Targets, duration: float | None, idle: IdleWatch | None,
                 seeded: dict[int, Process]):
        self.session, self.target, self.idle, self.seeded = session, target, idle, seeded
        self.deadline = None if duration is None else time.monotonic() + duration
        self.checked = time.monotonic()
        self.why = "exit"

    def __call__(self) -> bool:
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            self.why = "duration"
            return True
        if self.idle is not None and self.idle.idle():
            self.why = "idle"
            return True
        if now - self.checked < ALIVE_CHECK_S:
            return False
        self.checked = now
        if self.target.cgroup is not None:  # joined since (caught by the probe, or here if it came first)
            if not os.path.isdir(self.target.cgroup.path):
                self.why = "cgroup removed"
                return True
            self.session.decoder.add_threads(_threads(_seed(self.session, self.target.roots(), self.seeded)))
            return False
        return not self.session.survivors(0)


def record_attached(target: Targets, output: str | Path | None = None, *, force: bool = False,
                    quiet: bool = False, coalesce: bool = True, ring_mib: int | None = None,
                    duration: float | None = None, until_idle: float | None = None) -> RecordResult:
    """Record ``target`` (see ``targets``) with its threads and descendants until ``duration`` seconds
    passed, ``until_idle`` seconds went by without a checkpoint read, a stop signal came or all of
    them exited; write the trace.

    Raises PrerequisiteError (not root, no bcc ...), InputError (no such process), UsageError."""
    ring_mib = check_ring_mib(EVENTS_RING_BYTES >> 20 if ring_mib is None else ring_mib)
    for name, value in (("duration", duration), ("until_idle", until_idle)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
            raise UsageError(f"{{option}} must be more than 0 seconds, not {value!r}", option=name)
    if os.geteuid() != 0:
        raise PrerequisiteError("attaching to running processes needs root (sudo readtrace record -p PID)")
    require_prerequisites()
    target.check()
    if output is not None:
        check_trace_target(output, force)
    cgroup = target.cgroup
    mounts, connections, source = probe_source(coalesce, ring_mib, cgroup.id if cgroup else None)
    first = target.pids[0] if target.pids else None
    writer = bpf = detaching = None
    say = (lambda line: None) if quiet else (lambda line: print(f"readtrace: {line}", file=sys.stderr, flush=True))
    try:
        bpf = compile_program(source)
        with _StopSignals() as stop, _Priority() as priority:
            if target.wait_for is not None:
                say(f"waiting for a process whose command line matches {target.wait_for.pattern!r}")
                first = _wait_for(target.wait_for, stop)
                if first is None:
                    say("stopped before any process matched: no trace written")
                    return RecordResult(ExitStatus.INTERRUPTED, Path(output or "."), 0, 0.0, 0, interrupted=True)
                target.pids = [first]
            start_wall, attach_ns = datetime.now(UTC), time.monotonic_ns()
            roots = target.roots()
            first = first or min(roots, default=None)
            name = (process(first).cmdline if first else None) or ["cgroup"]
            path = Path(output) if output is not None else Path.cwd() / default_trace_name(name, first or os.getpid())
            writer = TraceWriter(path, force=force)
            decoder = Decoder(root_pid=first or 0, cwd=_cwd(first or os.getpid()), namespaces=Namespaces())
            session = Session(bpf, writer, decoder, ring_bytes=ring_mib << 20)
            state = _recover(session, roots, attach_ns)
            session.note_mappings(state.recovered.mappings)
            seeded: dict[int, Process] = {}
            _seed(session, roots, seeded)
            session.decoder.attach(_threads(seeded), state)
            if connections:
                session.watch_fuse(connections, fuse_daemons())
            idle = IdleWatch(session.decoder, until_idle, session.held_runs) if until_idle is not None else None
            session.watch = idle.seen if idle is not None else None
            what = f"cgroup {cgroup.path}: " if cgroup else ""
            until = f"for {duration:g} s, " if duration is not None else ""
            say(f"attached to {what}{len(seeded)} process(es) ({sum(len(p.threads) for p in seeded.values())} "
                f"threads); recording {until}until Ctrl-C or they exit")
            t0_ns, reclaim = time.monotonic_ns(), Watch()
            stop_when = _StopWhen(session, target, duration, idle, seeded)
            drain_until(session, stop, priority, stop_when)
            end_ns, reclaimed = time.monotonic_ns(), reclaim.stop()
            if stop.received is not None:
                stop_when.why = "signal"
            survivors = session.survivors(0)
            lost = session.stop()
            detaching = detach_in_background(bpf)
            session.write(_mounts(seeded, mounts, session.decoder.namespaces))
        recovered = state.recovered
        attached = {
            "pids": sorted(roots), "start_time": start_wall.isoformat(),
            "cgroup": {"path": cgroup.path, "id": cgroup.id} if cgroup else None,
            "wait_for": target.wait_for.pattern if target.wait_for else None, "until_idle_s": until_idle,
            "processes": [{"pid": p.pid, "ppid": p.ppid, "threads": len(p.threads), "cmdline": p.cmdline}
                          for p in seeded.values()],
            "recovered": {"open_files": len(recovered.files), "open_files_identified": state.resolved,
                          "mappings": len(recovered.mappings),
                          "files": [{"pid": f.pid, "fd": f.fd, "path": f.path, "pos": f.pos, "flags": f.flags}
                                    for f in recovered.files]},
            "not_known": BEFORE_ATTACH, "stopped_by": stop_when.why,
            "still_running": survivors,  # by design: the recording ends, they do not
        }
        first = first if first in seeded else next(iter(seeded), first)  # --cgroup: the first that joined
        command = seeded[first].cmdline if first in seeded else name
        meta = {
            "command": list(command), "exit_code": None, "interrupted": stop.received is not None,
            **recording_meta(session, lost, start_wall, t0_ns, end_ns, connections=connections,
                             coalesce=coalesce, ring_mib=ring_mib),
            "pid": first, "cwd": _cwd(first) if first else None, "attached": attached, "reclaim": reclaimed,
        }
        writer.close(meta)
    except BaseException as e:
        unfinished(writer, e)
        raise
    finally:
        if bpf is not None:
            detach(bpf, detaching)
    result = RecordResult(exit_code=ExitStatus.INTERRUPTED if stop.received else ExitStatus.OK,
                          trace_path=path, lost_events=meta["lost_events"], wall_s=meta["wall_s"],
                          events=session.records, interrupted=stop.received is not None)
    if not quiet:
        with contextlib.suppress(OSError):
            _print_summary(result, meta)
    return result
