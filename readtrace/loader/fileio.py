"""Low-level reading helpers: open a file on its own fd, read exact ranges in big chunks."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MiB = 1 << 20


@contextmanager
def open_fd(path: str | os.PathLike, *, sequential: bool = True) -> Iterator[int]:
    """Open ``path`` read-only on a new fd of its own (never shared), closed on exit. A file that
    cannot be opened raises the OSError itself (with its filename), as open() does."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if sequential:
            # Doubles the kernel's readahead window for this open file description.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        yield fd
    finally:
        os.close(fd)


def pread_exact(fd: int, size: int, offset: int) -> bytes:
    """Read exactly ``size`` bytes at ``offset`` (loops over short reads; short at EOF)."""
    buf = bytearray(size)
    got = read_into(fd, memoryview(buf), offset, chunk_bytes=max(size, 1))
    return bytes(buf[:got])


def read_into(fd: int, dest: memoryview, offset: int, *, chunk_bytes: int) -> int:
    """Fill ``dest`` from ``offset`` with sequential reads of at most ``chunk_bytes``.

    Returns the number of bytes read: less than ``len(dest)`` only when the file ended early.
    """
    pos, total = 0, len(dest)
    while pos < total:
        n = os.preadv(fd, [dest[pos:pos + min(chunk_bytes, total - pos)]], offset + pos)
        if n == 0:
            break
        pos += n
    return pos


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (no copy; the tensor must outlive it)."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError("tensor_bytes needs a contiguous CPU tensor")
    n = tensor.numel() * tensor.element_size()
    if n == 0:
        return memoryview(bytearray(0))
    return memoryview((ctypes.c_ubyte * n).from_address(tensor.data_ptr())).cast("B")
