"""A live recording: the loaded probes, their rings, the decoder and the trace writer."""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.record.decode import Decoder, files_table
from readtrace.record.program import EVENTS_RING_BYTES
from readtrace.record.records import EVENT_DTYPE, STR_EVENT_DTYPE
from readtrace.record.ring import CallbackRing, FastRing
from readtrace.trace import TraceWriter

FLUSH_ROWS = 200_000  # rows buffered per table before they go to disk (bounded memory)


class Session:
    """Drains the rings into the trace; ``drain`` on a timer, ``finish`` once at the end."""

    def __init__(self, bpf, writer: TraceWriter, decoder: Decoder):
        self.bpf = bpf
        self.writer = writer
        self.decoder = decoder
        self.fast = FastRing(bpf[b"events"].map_fd, EVENTS_RING_BYTES)
        self.strs = CallbackRing(bpf, b"strs")
        self.records = 0
        self.calls = 0
        self._buffers: dict[str, list[pd.DataFrame]] = {"events": [], "pages": [], "fuse": []}
        self._buffered = dict.fromkeys(self._buffers, 0)

    def trace_pid(self, pid: int) -> None:
        """Add the command's process to the traced set before it is released."""
        tgids, tids = self.bpf[b"tgids"], self.bpf[b"tids"]
        tgids[tgids.Key(pid)] = tgids.Leaf(1)
        tids[tids.Key(pid)] = tids.Leaf(pid)

    def watch_fuse(self, connections: set[int], daemons: set[int]) -> None:
        for name, ids in (("fuse_conns", connections), ("daemons", daemons)):
            table = self.bpf[name.encode()]
            for i in ids:
                table[table.Key(i)] = table.Leaf(1)

    def drain(self) -> None:
        # Fast ring first, then strs: an open is committed before any read of its file, so after
        # this order every read drained here has its open decoded too.
        events = self.fast.drain()
        strs = self.strs.drain()
        self._decode(strs, events)

    def _decode(self, strs: np.ndarray, events: np.ndarray) -> None:
        self.records += len(strs) + len(events)
        opens = self.decoder.strs(strs)
        app, pages, fuse_rows = self.decoder.events(events) if len(events) else (pd.DataFrame(),) * 2 + ([],)
        app = pd.concat([f for f in (opens, app) if len(f)]) if len(opens) or len(app) else app
        self._buffer("events", app)
        self._buffer("pages", pages)
        self._buffer("fuse", pd.DataFrame(fuse_rows))

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
        if frames:
            frame = pd.concat(frames, ignore_index=True).sort_values("ts_ns", kind="stable")
            self.writer.append(name, frame)
        self._buffers[name], self._buffered[name] = [], 0

    def _pending_runs(self) -> np.ndarray:
        """Merged reads / page runs still held in kernel maps (threads alive at the end)."""
        raw = []
        header = np.array([EVENT_DTYPE.itemsize - 8, 0], dtype="<u4").tobytes()
        for map_name in ("runs", "page_runs"):
            for _key, value in self.bpf[map_name.encode()].items():
                raw.append(header + bytes(value)[: EVENT_DTYPE.itemsize - 8])
        return np.frombuffer(b"".join(raw), dtype=EVENT_DTYPE).copy() if raw else np.empty(0, EVENT_DTYPE)

    def lost(self) -> dict[str, int]:
        counts = self.bpf[b"lost"]
        totals = [sum(counts[counts.Key(i)]) for i in range(2)]
        return {"events_ring": int(totals[0]), "strs_ring_or_map": int(totals[1])}

    def finish(self, mounts) -> None:
        """Final drain, the kernel-held runs, unfinished FUSE requests; everything to disk."""
        self.drain()
        self._decode(np.empty(0, dtype=STR_EVENT_DTYPE), self._pending_runs())
        self._buffer("fuse", pd.DataFrame(self.decoder.unfinished_fuse()))
        for name in self._buffers:
            self._flush(name)
        self.writer.append("files", files_table(self.decoder.files, mounts))
        self.fast.close()
