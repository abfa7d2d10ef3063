"""Drain the BPF ring buffers without per-event callbacks.

The ``events`` ring holds fixed-size records only, so it is read straight from its mmapped pages
(consumer page, producer page, data pages mapped twice so a wrapping span is contiguous) and decoded
in bulk with numpy: no Python work per event. The ``strs`` ring (opens, forks, execs: a few per file)
goes through bcc's ring_buffer_consume callback, which only copies the bytes.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

from readtrace.record.records import EVENT_DTYPE, STR_EVENT_DTYPE

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
RECORD_HEADER = 8


class FastRing:
    """Consumer of a BPF ring buffer whose records are all ``EVENT_DTYPE`` (header included)."""

    def __init__(self, map_fd: int, data_bytes: int):
        page = mmap.PAGESIZE
        self.size = data_bytes
        self.mask = data_bytes - 1
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(map_fd, page + 2 * data_bytes, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._page = page
        self.stride = EVENT_DTYPE.itemsize
        # The positions are read and written as whole aligned 64-bit words (numpy element access):
        # struct.pack_into writes byte by byte, and the kernel then sees torn consumer positions
        # (a carry into a higher byte looks like the consumer went back: "ring full", events lost).
        self._cons_pos = np.frombuffer(self._consumer, dtype="<u8", count=1)
        self._prod_pos = np.frombuffer(self._producer, dtype="<u8", count=1)

    def drain(self, sink) -> int:
        """Hand every committed record since the last call to ``sink`` as a structured array that is
        a view of the ring (valid only during the call: no copy, so no per-drain allocation that
        would grow the heap), then release them to the producer. Returns the records taken."""
        cons = int(self._cons_pos[0])
        prod = int(self._prod_pos[0])
        n = (prod - cons) // self.stride
        if n <= 0:
            return 0
        start = self._page + (cons & self.mask)
        raw = np.frombuffer(self._producer, dtype=EVENT_DTYPE, count=n, offset=start)
        busy = np.flatnonzero(raw["hdr_len"] & (BUSY_BIT | DISCARD_BIT))
        if busy.size:  # a record still being written ends what can be taken now
            n = int(busy[0])
            raw = raw[:n]
        if n and (raw["hdr_len"] != EVENT_DTYPE.itemsize - RECORD_HEADER).any():
            raise RuntimeError("events ring holds a record of an unexpected size")
        if n:
            sink(raw)
        del raw  # no export of the mapping may outlive the records given back
        self._cons_pos[0] = cons + n * self.stride
        return n

    def close(self) -> None:
        del self._cons_pos, self._prod_pos  # release the exports before unmapping
        self._consumer.close()
        self._producer.close()


class CallbackRing:
    """The strs ring through bcc: the callback only copies bytes; decoding happens in bulk."""

    def __init__(self, bpf, name: str):
        self._bpf = bpf
        self._chunks: list[bytes] = []
        size = STR_EVENT_DTYPE.itemsize

        def on_record(_ctx, data, _size):
            self._chunks.append(ctypes.string_at(data, size))
            return 0

        bpf[name].open_ring_buffer(on_record)

    def drain(self) -> np.ndarray:
        self._bpf.ring_buffer_consume()
        if not self._chunks:
            return np.empty(0, dtype=STR_EVENT_DTYPE)
        data, self._chunks = b"".join(self._chunks), []
        return np.frombuffer(data, dtype=STR_EVENT_DTYPE).copy()
