"""A live recording: the loaded probes, their rings, the decoder and the trace writer.

While the command runs, the fast ring is only written to a spool file next to the trace, straight
from the ring's mapping (the recorder takes almost no CPU from the workload, and no memory per
drain); of the few open/fork/exec records only what needs /proc of live processes is done live
(absolute paths, exec'd images); they become rows every STRS_HELD_RECORDS and after the command
exits, then the spool is decoded in chunks of CHUNK_RECORDS and appended to the trace: memory stays
bounded. A recording longer than LIVE_DECODE_S also decodes its spool while the command runs, a
chunk of LIVE_CHUNK_RECORDS per idle drain, then lets the decoder forget the history no later
record can need (which file each struct file named, each thread's comm): that history grew by one
row per open, ~0.2 MiB per `import torch` process of a soak."""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from readtrace.record.decode import Decoder, files_table
from readtrace.record.program import CONSTANTS, EVENTS_RING_BYTES, merged_page_kinds
from readtrace.record.records import EVENT_DTYPE
from readtrace.record.ring import RECORD_HEADER, CallbackRing, FastRing
from readtrace.trace import TraceWriter

SLOTS = CONSTANTS["SLOTS"]
MERGED_PAGE_KINDS = merged_page_kinds()  # probes/pages.bpf.c: RT_FAULT .. RT_MISS keep a run per thread
FLUSH_ROWS = 200_000  # rows buffered per table before they go to disk (bounded memory)
CHUNK_RECORDS = 500_000  # spooled records decoded at a time
# open/fork/exec records (352 bytes each, with their path) held before they become rows: held until
# the end, a loop of `import torch` runs grew the recorder's Python heap by ~17 MB a minute
STRS_HELD_RECORDS = 20_000
LIVE_DECODE_S = 30.0  # spool older than this is decoded while the command runs
LIVE_CHUNK_RECORDS = 50_000  # decoded per idle drain (~0.1 s): the ring is drained again before it fills
SPOOL_NAME = "events.spool"
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
_libc = ctypes.CDLL(None, use_errno=True)


def _punch_hole(fd: int, offset: int, length: int) -> None:
    """Free the disk blocks of a decoded part of the spool (a full disk can take the tables)."""
    _libc.fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, ctypes.c_long(offset), ctypes.c_long(length))


class Session:
    """Drains the rings into the trace; ``drain`` on a timer, ``finish`` once at the end."""

    def __init__(self, bpf, writer: TraceWriter, decoder: Decoder, ring_bytes: int = EVENTS_RING_BYTES,
                 rights=contextlib.nullcontext, rings: tuple[FastRing, CallbackRing] | None = None):
        """``rights``: a context manager factory under which the trace is written while the command
        runs (the invoking user's rights under sudo; record/launch.output_rights). ``rings``: the
        rings of a probe set that outlives this session (record/probeset.py), left open by ``stop``."""
        self.bpf = bpf
        self._rights = rights
        self.writer = writer
        self.decoder = decoder
        self._own_rings = rings is None
        self.fast, self.strs = rings or (FastRing(bpf[b"events"].map_fd, ring_bytes), CallbackRing(bpf, b"strs"))
        self.records = 0
        self.calls = 0
        self.max_drain_gap_s = 0.0
        self._strs_seen: list[tuple[np.ndarray, list[str]]] = []  # noted, not yet rows
        self._spool_path = writer.dir / SPOOL_NAME
        self._spool = os.open(self._spool_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self._spool_bytes = 0
        self._spool_decoded = 0  # bytes of the spool decoded so far (from its start)
        self._decoded_through_ns = 0  # the latest timestamp among the decoded records
        self._live_pass_at = time.monotonic()  # when the spool was last decoded to its end
        self.live_decoded = 0  # records decoded while the command ran (meta "live_decoded_records")
        self.dropped = 0  # records taken from the ring but not kept (the disk was full)
        self.problems: list[str] = []  # why the trace is partial, one line each
        self._buffers: dict[str, list[pd.DataFrame]] = {"events": [], "pages": [], "fuse": []}
        self._buffered = dict.fromkeys(self._buffers, 0)
        self._failed: set[str] = set()
        self.watch = None  # called with each drained batch of the fast ring before it is spooled (--until-idle)

    def trace_pid(self, pid: int) -> None:
        """Add the command's process to the traced set before it is released."""
        tgids, tids = self.bpf[b"tgids"], self.bpf[b"tids"]
        tgids[tgids.Key(pid)] = tgids.Leaf(1)
        tids[tids.Key(pid)] = tids.Leaf(pid)

    def trace_process(self, pid: int, tids) -> None:
        """Add a running process and its threads to the traced set (record -p: attach)."""
        tgids, table = self.bpf[b"tgids"], self.bpf[b"tids"]
        tgids[tgids.Key(pid)] = tgids.Leaf(1)
        for tid in tids:
            table[table.Key(tid)] = table.Leaf(pid)

    def note_mappings(self, mappings) -> None:
        """File mappings made before the attach (record/attach.Mapping), so their munmap is recorded: each
        under the id its recovered mmap row carries (1..N in order, decode.Decoder._recovery_rows)."""
        table = self.bpf[b"mmaps"]
        for n, m in enumerate(mappings, start=1):
            key, val = table.Key(), table.Leaf()
            key.tgid, key.addr = m.pid, m.start
            val.ofd, val.ino, val.dev = n, m.ino, m.dev
            table[key] = val

    def trace_self(self, on: bool) -> None:
        """Trace the recorder's own process for a moment (attach: its lseeks name the borrowed files)."""
        tgids = self.bpf[b"tgids"]
        tgids[tgids.Key(os.getpid())] = tgids.Leaf(int(on))

    def traced_alive(self, pids) -> list[int]:
        """Of ``pids``, those still in the traced set (the exit probe takes a process out at its end)."""
        tgids = self.bpf[b"tgids"]
        return [p for p in pids if p < len(tgids) and tgids[tgids.Key(p)].value]

    def watch_fuse(self, connections: set[int], daemons: set[int]) -> None:
        for name, ids in (("fuse_conns", connections), ("daemons", daemons)):
            table = self.bpf[name.encode()]
            for i in ids:
                table[table.Key(i)] = table.Leaf(1)

    def drain(self) -> int:
        """Copy the fast ring to the spool, note the strs ring (opens, forks, execs); records taken."""
        taken = self.fast.drain(self._spool_write if self.watch is None else self._watched_write)
        strs = self.strs.drain()
        if len(strs):
            self._strs_seen.append((strs, self.decoder.note_strs(strs)))
            if sum(len(rec) for rec, _ in self._strs_seen) >= STRS_HELD_RECORDS:
                with self._rights():
                    self._decode_strs()  # noted already (live /proc work done): rows now, bounded memory
                    self._flush("events")  # and on disk now: held to FLUSH_ROWS, they grew the heap by ~100 MiB
        return taken + len(strs)

    def live_decode_due(self) -> bool:
        """Part of the spool waits to be decoded and the last pass to its end is LIVE_DECODE_S old."""
        return self._spool_decoded < self._spool_bytes and time.monotonic() - self._live_pass_at >= LIVE_DECODE_S

    def decode_some(self) -> None:
        """Decode one chunk of the spool while the command runs; at its end, forget the decoder's
        history from before the decoded records (records are spooled in about time order)."""
        before = self._spool_decoded
        with self._rights():
            self._decode_spool(max_records=LIVE_CHUNK_RECORDS)
            self.live_decoded += (self._spool_decoded - before) // EVENT_DTYPE.itemsize
            if self._spool_decoded < self._spool_bytes:
                return
            self.decoder.forget_before(self._decoded_through_ns)
            for name in self._buffers:  # a pass's rows (~30 s of them) on disk now, not held to FLUSH_ROWS
                self._flush(name)
        _libc.malloc_trim(0)  # the chunks' frames are freed: give the heap back, so RSS is what is held
        self._live_pass_at = time.monotonic()

    def _watched_write(self, events: np.ndarray) -> None:
        self.watch(events)
        self._spool_write(events)

    def _spool_write(self, events: np.ndarray) -> None:
        """Append to the spool; on a write error (full disk) keep what is there and drop the rest:
        the command goes on, the trace will say what is missing."""
        if self.problems:
            self.dropped += len(events)
            return
        data = memoryview(events).cast("B")
        done = 0
        try:
            while done < len(data):
                done += os.write(self._spool, data[done:])
        except OSError as e:
            kept = done // EVENT_DTYPE.itemsize
            self._spool_bytes += kept * EVENT_DTYPE.itemsize
            with contextlib.suppress(OSError):
                os.ftruncate(self._spool, self._spool_bytes)
            self.dropped += len(events) - kept
            self.problems.append(f"writing the trace failed while recording ({e.strerror}): "
                                 "later events were not kept")
            return
        self._spool_bytes += done

    def _decode_spool(self, max_records: int | None = None) -> None:
        """Decode the spool from where the last call stopped, to its end or ``max_records``."""
        end = self._spool_bytes
        if max_records is not None:
            end = min(end, self._spool_decoded + max_records * EVENT_DTYPE.itemsize)
        with open(self._spool_path, "rb") as spool:
            spool.seek(self._spool_decoded)
            while self._spool_decoded < end:
                count = min(CHUNK_RECORDS, (end - self._spool_decoded) // EVENT_DTYPE.itemsize)
                chunk = np.fromfile(spool, dtype=EVENT_DTYPE, count=count)
                if not len(chunk):
                    break
                _punch_hole(spool.fileno(), self._spool_decoded, chunk.nbytes)
                self._spool_decoded += chunk.nbytes
                self._decoded_through_ns = max(self._decoded_through_ns, int(chunk["ts_ns"].max()))
                self._decode(chunk)

    def _decode(self, events: np.ndarray) -> None:
        self.records += len(events)
        app, pages, fuse_rows = self.decoder.events(events)
        self._buffer("events", app)
        self._buffer("pages", pages)
        self._buffer("fuse", pd.DataFrame(fuse_rows))

    def _decode_strs(self) -> None:
        """The held open/fork/exec records as rows, in one frame: one per drain cost ~45 ms of pandas
        each (a torch import's opens come over ~200 drains: ~9 s after the command ended)."""
        if not self._strs_seen:
            return
        rec = np.concatenate([r for r, _ in self._strs_seen])
        paths = [p for _, batch in self._strs_seen for p in batch]
        self._strs_seen = []
        self.records += len(rec)
        self._buffer("events", self.decoder.strs_frame(rec, paths))

    def _buffer(self, name: str, frame: pd.DataFrame) -> None:
        if not len(frame):
            return
        if name == "events":
            self.calls += int(frame["count"].sum())
        self._buffers[name].append(frame)
        self._buffered[name] += len(frame)
        if self._buffered[name] >= FLUSH_ROWS:
            self._flush(name)

    def _flush(self, name: str) -> None:
        frames = self._buffers[name]
        self._buffers[name], self._buffered[name] = [], 0
        if not frames or name in self._failed:
            return
        self._write(name, pd.concat(frames, ignore_index=True).sort_values("ts_ns", kind="stable"))

    def _write(self, name: str, frame: pd.DataFrame) -> None:
        if name in self._failed:
            return
        try:
            self.writer.append(name, frame)
        except OSError as e:  # a full disk: keep the rows written so far, say what is missing
            self._failed.add(name)
            self.writer.release_reserve()
            kept = self.writer.salvage(name)
            self.problems.append(f"writing {name}.parquet failed ({e.strerror}): kept {kept:,} rows, "
                                 f"lost {len(frame):,} and all later ones")

    def held_runs(self) -> np.ndarray:
        """Merged reads / page runs still held in kernel slots (threads alive at the end)."""
        record = EVENT_DTYPE.itemsize - RECORD_HEADER
        header = np.array([record, 0], dtype="<u4").tobytes()
        runs, page_runs = self.bpf[b"runs"], self.bpf[b"page_runs"]
        raw = []
        for tid in sorted(self.decoder.tids):
            slot = tid & (SLOTS - 1)
            candidates = [runs[runs.Key(slot)]]
            candidates += [page_runs[page_runs.Key(slot * MERGED_PAGE_KINDS + k)] for k in range(MERGED_PAGE_KINDS)]
            for value in candidates:
                ev = bytes(value)[:record]
                held = np.frombuffer(header + ev, dtype=EVENT_DTYPE)
                if held["count"][0] and held["tid"][0] == tid:
                    raw.append(header + ev)
        return np.frombuffer(b"".join(raw), dtype=EVENT_DTYPE).copy() if raw else np.empty(0, EVENT_DTYPE)

    def survivors(self, exited: int) -> list[int]:
        """Processes of the traced tree still running (a daemonised grandchild), besides ``exited``: the
        exit probe clears a process from ``tgids`` when its last thread ends."""
        tgids = self.bpf[b"tgids"]
        alive = (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != exited)
        return sorted(p for p in alive if p < len(tgids) and tgids[tgids.Key(p)].value)

    def lost(self) -> dict[str, int]:
        counts = self.bpf[b"lost"]
        totals = [sum(counts[counts.Key(i)]) for i in range(2)]
        return {"events_ring_full": int(totals[0]), "strs_ring_full_or_slot_clash": int(totals[1])}

    def program_misses(self) -> int:
        """Runs of our programs the kernel skipped (fdinfo recursion_misses): a tracepoint program does not
        run while another BPF program, or a bpf() map syscall preempted on that CPU, holds it busy."""
        total = 0
        for fn in self.bpf.funcs.values():
            try:
                info = Path(f"/proc/self/fdinfo/{fn.fd}").read_text()
            except OSError:
                continue
            total += sum(int(line.split()[1]) for line in info.splitlines() if line.startswith("recursion_misses:"))
        return total

    def sched_totals(self) -> list[dict]:
        """Per traced thread: first and last context switch seen, ns on a CPU, runnable, off it
        (probes/sched.bpf.c); the trace's meta["sched"]."""
        acct = self.bpf[b"sched_acct"]
        rows = [{"tid": int(k.value), "first_ns": int(v.first_ns), "last_ns": int(v.last_ns),
                 "cpu_ns": int(v.cpu_ns), "runq_ns": int(v.runq_ns), "off_ns": int(v.off_ns)}
                for k, v in acct.items() if int(k.value) in self.decoder.tids]
        return sorted(rows, key=lambda r: r["tid"])

    def stop(self) -> dict[str, int]:
        """Last drain and everything still held in kernel maps; the probes may be detached after."""
        self.drain()
        self.sched = self.sched_totals()
        self.misses = self.program_misses()
        self._held_runs = self.held_runs()
        lost = self.lost()
        if self._own_rings:
            self.fast.close()
        os.close(self._spool)
        return lost

    def write(self, mounts) -> None:
        """Decode the spool and the held runs, finish FUSE requests, write the files table."""
        if self.problems:
            self.writer.release_reserve()  # the disk filled up: finish the trace in the space held back
        self._decode_strs()
        self._decode_spool()
        self._spool_path.unlink()
        self._decode(self._held_runs)
        self._buffer("fuse", pd.DataFrame(self.decoder.unfinished_fuse()))
        for name in self._buffers:
            self._flush(name)
        if self.decoder.namespaces is not None:
            self.decoder.namespaces.refresh()
        self._write("files", files_table(self.decoder.files, mounts, self.decoder.namespaces))
        if self.decoder.namespaces is not None:
            self._write("tasks", pd.DataFrame(self.decoder.namespaces.rows()))
