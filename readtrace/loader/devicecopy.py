"""Copy one byte range of a file into a GPU tensor, overlapping reads with host-to-device copies.

Two ways, chosen per range:
- **registered**: where every page of the range is in the page cache, the pages themselves are
  mapped read-only, registered with the driver (``cudaHostRegister``, read-only flag) chunk by
  chunk and copied by DMA: no CPU copy at all, the next chunk's registration overlapping the last
  chunk's copy. A range that is not all cached, a mapping or a registration that fails, falls back
  to staging for what is left (the load never fails because of this path).
- **staging**: chunks are read (``preadv``) into pinned buffers and copied from there; an event per
  buffer guards its reuse.

Both copy on a side stream. A CPU ``dest`` (tests) takes the same loops with plain copies.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import os
import threading

import torch

from readtrace.loader.fileio import read_into, tensor_bytes
from readtrace.pagecache.residency import cached_in

PAGE = mmap.PAGESIZE
HOST_REGISTER_READ_ONLY = 0x08  # cudaHostRegisterReadOnly (CUDA 11.1+): the device never writes them
MAX_POOLED_BUFFERS = 64

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def copy_range(fd: int, offset: int, dest: torch.Tensor, chunk_bytes: int, *, pinned: bool = True,
               num_buffers: int = 2, register_cached: bool = True) -> int:
    """Fill ``dest`` (uint8) from ``offset`` of ``fd``; returns the bytes copied (short: the file ended)."""
    size = dest.numel()
    done = 0
    if register_cached and dest.is_cuda and size and all_cached(fd, offset, size):
        done = copy_registered(fd, offset, dest, chunk_bytes, depth=num_buffers)
    if done < size:
        done += copy_through_staging(fd, offset + done, dest[done:], min(chunk_bytes, size - done), pinned,
                                     num_buffers)
    return done


def all_cached(fd: int, offset: int, size: int) -> bool:
    """Whether every page of ``[offset, offset + size)`` of ``fd``'s file is in the page cache (False
    where the kernel cannot say: before Linux 6.5's cachestat)."""
    first, last = offset // PAGE, (offset + size - 1) // PAGE
    cached = cached_in(fd, first * PAGE, (last - first + 1) * PAGE)
    return cached is not None and cached >= last - first + 1


class ReadOnlyMapping:
    """A shared read-only mapping of bytes ``[start, end)`` of an open file (from the page below)."""

    def __init__(self, fd: int, start: int, end: int):
        self.base = start - start % PAGE
        self.length = end - self.base
        addr = _libc.mmap(None, self.length, mmap.PROT_READ, mmap.MAP_SHARED, fd, self.base)
        if addr in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.addr: int = addr

    def address(self, file_offset: int) -> int:
        return self.addr + file_offset - self.base

    def view(self, file_offset: int, n: int) -> torch.Tensor:
        """The mapped bytes ``[file_offset, file_offset + n)`` as a uint8 tensor (no copy)."""
        return torch.frombuffer((ctypes.c_ubyte * n).from_address(self.address(file_offset)), dtype=torch.uint8)

    def close(self) -> None:
        _libc.munmap(self.addr, self.length)


def register_chunks(offset: int, size: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """``[offset, offset + size)`` cut into chunks of about ``chunk_bytes`` (file offsets) whose pages do
    not overlap: every cut is on a page boundary, so no page is registered twice."""
    step = max(PAGE, -(-chunk_bytes // PAGE) * PAGE)
    end = offset + size
    cuts = [offset, *range((offset // step + 1) * step, end, step), end]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if a < b]


def copy_registered(fd: int, offset: int, dest: torch.Tensor, chunk_bytes: int, depth: int = 2) -> int:
    """Copy ``[offset, offset + dest.numel())`` straight from the page cache (see the module's
    docstring); returns how many bytes from the start were copied before the first chunk that could
    not be registered (0 if the range cannot be mapped). At most ``depth`` chunks are registered at once."""
    size = dest.numel()
    try:
        mapping = ReadOnlyMapping(fd, offset, offset + size)
    except OSError:
        return 0
    stream = torch.cuda.Stream(device=dest.device) if dest.is_cuda else None
    in_flight: collections.deque[tuple[torch.cuda.Event, int]] = collections.deque()
    done = 0
    try:
        for start, end in register_chunks(offset, size, chunk_bytes):
            src = mapping.view(start, end - start)
            pos = start - offset
            if stream is None:
                dest[pos:pos + end - start].copy_(src)
                done = end - offset
                continue
            page = mapping.address(start - start % PAGE)  # only the first chunk starts mid-page
            if not _host_register(page, -(-(mapping.address(end) - page) // PAGE) * PAGE):
                break
            with torch.cuda.stream(stream):
                dest[pos:pos + end - start].copy_(src, non_blocking=True)
                event = torch.cuda.Event()
                event.record(stream)
            in_flight.append((event, page))
            done = end - offset
            while len(in_flight) > depth:
                _retire(*in_flight.popleft())
        return done
    finally:
        if stream is not None:
            stream.synchronize()
        while in_flight:
            _retire(*in_flight.popleft())
        mapping.close()


def _host_register(addr: int, size: int) -> bool:
    """Page-lock ``size`` bytes at ``addr`` (read-only) for DMA; False where the driver refuses.

    A refusal also sets the calling thread's CUDA "last error", which a later kernel launch in that
    thread would raise: the loader calls this from its own reader threads only, which end with the load.
    """
    return int(torch.cuda.cudart().cudaHostRegister(addr, size, HOST_REGISTER_READ_ONLY)) == 0


def _retire(event: torch.cuda.Event, addr: int) -> None:
    event.synchronize()
    torch.cuda.cudart().cudaHostUnregister(addr)


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

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


STAGING = StagingPool()
