"""``ProbeSet``: the probes compiled, loaded and attached once, with their rings, for one recording or
for a series of recordings one after another (``readtrace fix --compare``'s runs: ``probe_set()``).

Compiling the probes costs 1.5-9 s on a 2-vCPU machine (bcc's clang, more under load) and detaching
them an RCU grace period per attach point; a series pays both once. Between two recordings
``forget`` clears what the kernel maps still hold of the last one (traced pids and threads, merged
runs and in-flight syscalls parked in per-thread slots, mappings, scheduler totals, lost counters), so
nothing of one run can be emitted into, or counted against, the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from readtrace.errors import PrerequisiteError
from readtrace.fs.mounts import fuse_connections, read_mounts
from readtrace.record.btf import BTFError
from readtrace.record.prereq import fuse_view_available
from readtrace.record.program import build_source, compile_program, detach, detach_in_background
from readtrace.record.ring import CallbackRing, FastRing

# kernel maps of per-thread slots (tid % SLOTS): probes/common.bpf.c, app.bpf.c, sched.bpf.c
_SLOT_MAPS = (b"runs", b"inflight", b"fault_at")


class ProbeSet:
    """The attached program and its two rings; ``close`` detaches (also on error: use ``probe_set``)."""

    def __init__(self, coalesce: bool, ring_mib: int):
        self.coalesce, self.ring_mib = coalesce, ring_mib
        self.mounts, self.connections, source = probe_source(coalesce, ring_mib)
        self.bpf = compile_program(source)
        try:
            self.fast = FastRing(self.bpf[b"events"].map_fd, ring_mib << 20)
            self.strs = CallbackRing(self.bpf, b"strs")
        except BaseException:
            detach(self.bpf)
            raise
        self.recordings = 0
        self._detaching = None
        self._closed = False

    @property
    def with_fuse(self) -> bool:
        return bool(self.connections)

    def connections_now(self, mounts) -> set[int]:
        """The FUSE connections of ``mounts`` (read now: a series outlives mounts) to watch for the
        next recording, none when the probes were compiled without the FUSE view."""
        return fuse_connections(mounts) if self.with_fuse else set()

    def begin(self) -> None:
        """Before a recording of a series: drop what the rings hold from between recordings (nothing
        is traced then; a survivor of the last run untraced by ``forget`` may still have written)."""
        self.fast.drain(lambda _events: None)
        self.strs.drain()
        self.recordings += 1

    def forget(self, tids: Iterable[int]) -> None:
        """After a recording: untrace ``tids`` (the run's threads and processes) and clear their
        per-thread slots and the run's maps, so the next recording starts from empty maps."""
        bpf = self.bpf
        slots = len(bpf[b"runs"])
        page_kinds = len(bpf[b"page_runs"]) // slots
        tgids, table = bpf[b"tgids"], bpf[b"tids"]
        for tid in sorted(set(tids)):
            if not 0 < tid < len(tgids):
                continue
            tgids.clearitem(tgids.Key(tid))  # a thread id is a process id only for main threads: harmless
            table.clearitem(table.Key(tid))
            slot = tid & (slots - 1)
            for name in _SLOT_MAPS:
                bpf[name].clearitem(bpf[name].Key(slot))
            for k in range(page_kinds):
                bpf[b"page_runs"].clearitem(bpf[b"page_runs"].Key(slot * page_kinds + k))
        for name in (b"sched_acct", b"mmaps"):
            bpf[name].clear()
        lost = bpf[b"lost"]
        for i in range(len(lost)):
            lost.clearitem(lost.Key(i))

    def detach_in_background(self) -> None:
        """Start detaching while the trace is still written (a single recording: its maps stay usable)."""
        self._detaching = detach_in_background(self.bpf)

    def close(self) -> None:
        """Unmap the rings and detach every probe (waits for a background detach)."""
        if self._closed:
            return
        self._closed = True
        self.fast.close()
        detach(self.bpf, self._detaching)


def probe_source(coalesce: bool, ring_mib: int, cgroup: int | None = None) -> tuple[list, set[int], str]:
    """The mounts now, the FUSE connections to watch and the probes' C text for them (``cgroup``: see
    program.build_source)."""
    mounts = read_mounts()
    connections = fuse_connections(mounts) if fuse_view_available() else set()
    try:
        source = build_source(with_fuse=bool(connections), coalesce=coalesce, ring_bytes=ring_mib << 20,
                              cgroup=cgroup)
    except BTFError as e:
        raise PrerequisiteError(f"kernel BTF: {e}") from e
    return mounts, connections, source


@contextlib.contextmanager
def probe_set(coalesce: bool = True, ring_mib: int | None = None) -> Iterator[ProbeSet]:
    """Compile and attach the probes once for several ``record_command(..., probes=)`` calls; detached
    at the end, also on an error or Ctrl-C. Checks the prerequisites first (PrerequisiteError)."""
    from readtrace.record.prereq import require_prerequisites
    from readtrace.record.program import EVENTS_RING_BYTES
    from readtrace.record.recorder import check_ring_mib

    ring_mib = check_ring_mib(EVENTS_RING_BYTES >> 20 if ring_mib is None else ring_mib)
    require_prerequisites()
    probes = ProbeSet(coalesce, ring_mib)
    try:
        yield probes
    finally:
        probes.close()
