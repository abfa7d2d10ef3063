"""Copy a file's bytes into a GPU tensor, overlapping reads with host-to-device copies.

- **staging** (``copy_through_staging``): chunks are read (``preadv``) into pinned buffers and copied
  from there on a side stream; an event per buffer guards its reuse.
- **cached** (``copy_cached``, the loader's ``register_cached=True``): where every page is already in
  the page cache, readers claim units of the range in turn; registering ones copy their units
  straight from the cached pages (mapped read-only, registered with the driver by
  ``cudaHostRegister``, DMA'd: no CPU copy), the others through staging. The pages are unregistered
  after the load, off its critical path (``cudaHostUnregister`` waits for the device). A registration
  the driver refuses turns that reader into a staging one: the load never fails for it.

Measured on an H200 VM (16 vCPUs, 2 GiB warm, docs/fix.md): one pinned copy 55 GB/s; 16 threads
pread-ing the cached file into pinned buffers 35-38 GB/s (the staging path's ceiling; the loader 29-30);
registering alone 51 GB/s in 256 MiB calls, but registering while copies run overlapped badly
(two registering readers 32 GB/s) and staging readers beside them added nothing: staging stays the
default.

A CPU ``dest`` (tests) takes the same loops with plain copies.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from readtrace.loader.fileio import map_readonly, open_fd, read_into, tensor_bytes, unmap

PAGE = mmap.PAGESIZE
# cudaHostRegisterReadOnly (CUDA 11.1+: the device never writes them; a read-only file mapping needs it)
# | cudaHostRegisterPortable (any context may unregister them: the unpinning thread's too)
HOST_REGISTER_FLAGS = 0x08 | 0x01
MAX_POOLED_BUFFERS = 64
CACHED_UNIT_BYTES = 256 << 20  # what a reader of a cached range claims at a time (H200: 64 MiB calls 35 GB/s)
CACHED_READERS = 2  # registering readers of a cached range (H200: 1, 2 and 4 within 15 %)


class ReadOnlyMapping:
    """A shared read-only mapping of bytes ``[start, end)`` of an open file (from the page below)."""

    def __init__(self, fd: int, start: int, end: int):
        self.base = start - start % PAGE
        self.length = end - self.base
        self.addr = map_readonly(fd, self.length, self.base)

    def address(self, file_offset: int) -> int:
        return self.addr + file_offset - self.base

    def pages(self, start: int, end: int) -> tuple[int, int]:
        """(address, bytes) of the whole pages that hold file bytes ``[start, end)``: what to register."""
        first = self.address(start - start % PAGE)
        return first, -(-(self.address(end) - first) // PAGE) * PAGE

    def view(self, file_offset: int, n: int) -> torch.Tensor:
        """The mapped bytes ``[file_offset, file_offset + n)`` as a uint8 tensor (no copy)."""
        return torch.frombuffer((ctypes.c_ubyte * n).from_address(self.address(file_offset)), dtype=torch.uint8)

    def close(self) -> None:
        unmap(self.addr, self.length)


def register_chunks(offset: int, size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """``[offset, offset + size)`` cut into chunks of about ``chunk_bytes`` (file offsets) whose pages do
    not overlap: every cut is on a page boundary, so no page is registered twice."""
    step = max(PAGE, -(-chunk_bytes // PAGE) * PAGE)
    end = offset + size
    cuts = [offset, *range((offset // step + 1) * step, end, step), end]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if a < b]


def copy_cached(path, offset: int, dest: torch.Tensor, *, readers: int, chunk_bytes: int, pinned: bool = True,
                num_buffers: int = 2, registering: int = 1, unit_bytes: int = CACHED_UNIT_BYTES) -> int:
    """Copy ``[offset, offset + dest.numel())`` of ``path``, all in the page cache, with ``readers``
    threads on fds of their own, ``registering`` of them from registered pages (see the module's
    docstring). Returns the bytes copied: short only where the file ended early."""
    units = iter(register_chunks(offset, dest.numel(), unit_bytes))
    lock = threading.Lock()

    def claim() -> tuple[int, int] | None:
        with lock:
            return next(units, None)

    def staged(fd: int, start: int, end: int) -> int:
        part = dest[start - offset:end - offset]
        return copy_through_staging(fd, start, part, min(chunk_bytes, end - start), pinned, num_buffers)

    def read(index: int) -> int:
        copied = 0
        with open_fd(path) as fd, torch.cuda.device(dest.device) if dest.is_cuda else contextlib.nullcontext():
            registrar = _Registrar(fd, offset, dest) if index < registering else None
            try:
                while (unit := claim()) is not None:
                    start, end = unit
                    if registrar is not None and registrar.copy(start, end):
                        copied += end - start
                        continue
                    if registrar is not None:  # refused: this unit and the rest go through staging
                        registrar.finish()
                        registrar = None
                    copied += staged(fd, start, end)
            finally:
                if registrar is not None:
                    registrar.finish()
        return copied

    with ThreadPoolExecutor(readers, thread_name_prefix="readtrace-cached") as pool:
        return sum(pool.map(read, range(readers)))


class _Registrar:
    """One reader's copies straight from the page cache: a mapping of the whole range, each unit's
    pages registered and copied on the reader's stream; unregistered after the load (``finish``)."""

    def __init__(self, fd: int, offset: int, dest: torch.Tensor):
        self.offset, self.dest = offset, dest
        self.stream = torch.cuda.Stream(device=dest.device) if dest.is_cuda else None
        self.registered: list[int] = []
        try:
            self.mapping: ReadOnlyMapping | None = ReadOnlyMapping(fd, offset, offset + dest.numel())
        except OSError:
            self.mapping = None

    def copy(self, start: int, end: int) -> bool:
        """Copy file bytes ``[start, end)`` (page-aligned cuts but the range's own ends); False where
        they could not be mapped or registered (nothing was copied)."""
        if self.mapping is None:
            return False
        src, part = self.mapping.view(start, end - start), self.dest[start - self.offset:end - self.offset]
        if self.stream is None:
            part.copy_(src)
            return True
        page, nbytes = self.mapping.pages(start, end)
        if not _host_register(page, nbytes):
            return False
        self.registered.append(page)
        with torch.cuda.stream(self.stream):
            part.copy_(src, non_blocking=True)
        return True

    def finish(self) -> None:
        """Wait for this reader's copies; its pages are unregistered and unmapped in the background."""
        if self.stream is not None:
            self.stream.synchronize()
        if self.mapping is not None:
            _UNPINNER.later(self.mapping, self.registered, self.dest.device)
            self.mapping = None


def _host_register(addr: int, size: int) -> bool:
    """Page-lock ``size`` bytes at ``addr`` (read-only) for DMA; False where the driver refuses.

    A refusal also sets the calling thread's CUDA "last error", which a later kernel launch in that
    thread would raise: only the loader's own reader threads, which end with the load, call this.
    """
    return int(torch.cuda.cudart().cudaHostRegister(addr, size, HOST_REGISTER_FLAGS)) == 0


class _Unpinner:
    """Unregisters and unmaps what a load registered, in a thread of its own after the copies ended:
    ``cudaHostUnregister`` waits for the device, which would serialise a reader's next registration
    behind its last copy (measured: registering and copying did not overlap at all)."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def later(self, mapping: ReadOnlyMapping, registered: list[int], device: torch.device) -> None:
        if not registered:
            mapping.close()
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="readtrace-unpin", daemon=True)
                self._thread.start()
        self._queue.put((mapping, registered, device))

    def drain(self) -> None:
        """Wait until everything handed over so far is unregistered (tests)."""
        done = threading.Event()
        self._queue.put((None, done, None))
        if self._thread is not None:
            done.wait()

    def _run(self) -> None:
        while True:
            mapping, registered, device = self._queue.get()
            if mapping is None:
                registered.set()
                continue
            with torch.cuda.device(device):
                for addr in registered:
                    torch.cuda.cudart().cudaHostUnregister(addr)
            mapping.close()

    def _forget(self) -> None:
        self._queue, self._thread = queue.SimpleQueue(), None


_UNPINNER = _Unpinner()
wait_unpinned = _UNPINNER.drain


def copy_through_staging(fd: int, offset: int, dest: torch.Tensor, slot_bytes: int, pinned: bool,
                         num_buffers: int) -> int:
    """Read ``dest.numel()`` bytes at ``offset`` into ``dest`` through ``num_buffers`` staging buffers.

    On a GPU the copies run on a side stream and an event per buffer guards its reuse; a CPU ``dest``
    (tests) takes the same path with plain synchronous copies.
    """
    size = dest.numel()
    slots = STAGING.take(num_buffers, slot_bytes, pinned)
    events: list[torch.cuda.Event | None] = [None] * num_buffers
    stream = torch.cuda.Stream(device=dest.device) if dest.is_cuda else None
    try:
        for i, pos in enumerate(range(0, size, slot_bytes)):
            n = min(slot_bytes, size - pos)
            slot, event = slots[i % num_buffers], events[i % num_buffers]
            if event is not None:
                event.synchronize()  # the copy out of this buffer has finished: safe to refill
            got = read_into(fd, tensor_bytes(slot)[:n], offset + pos, chunk_bytes=n)
            if got != n:
                return pos + got
            if stream is None:
                dest[pos:pos + n].copy_(slot[:n])
                continue
            with torch.cuda.stream(stream):
                dest[pos:pos + n].copy_(slot[:n], non_blocking=True)
                events[i % num_buffers] = torch.cuda.Event()
                events[i % num_buffers].record(stream)
        return size
    finally:
        if stream is not None:
            stream.synchronize()
        STAGING.give(slots)


class StagingPool:
    """Reuses pinned staging buffers across loads (pinning memory costs milliseconds per buffer)."""

    def __init__(self):
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, count: int, size: int, pinned: bool) -> list[torch.Tensor]:
        with self._lock:
            fits = [b for b in self._free if b.numel() >= size and b.is_pinned() == pinned][:count]
            taken = {id(b) for b in fits}  # by identity: == on tensors compares elements
            self._free = [b for b in self._free if id(b) not in taken]
        fits += [torch.empty(size, dtype=torch.uint8, pin_memory=pinned) for _ in range(count - len(fits))]
        return fits

    def give(self, buffers: list[torch.Tensor]) -> None:
        with self._lock:
            self._free.extend(buffers)
            del self._free[:-MAX_POOLED_BUFFERS]  # enough for one load, no more


STAGING = StagingPool()
