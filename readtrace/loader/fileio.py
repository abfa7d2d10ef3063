"""Low-level reading helpers: open a file on its own fd, read exact ranges in big chunks."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MiB = 1 << 20
DEFAULT_CHUNK_BYTES = 16 * MiB  # the own-fd loader's reads
PAGE = mmap.PAGESIZE
CACHESTAT_NR = {"x86_64": 451, "aarch64": 451}.get(platform.machine())  # same number on both ABIs
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def map_readonly(fd: int, length: int, offset: int = 0, *, private: bool = False, what: str = "mmap") -> int:
    """The address of a read-only mapping of ``length`` bytes of ``fd`` from ``offset`` (a page
    multiple): shared, or ``private``; OSError("``what`` failed: ...") where the kernel refuses."""
    flags = mmap.MAP_PRIVATE if private else mmap.MAP_SHARED
    addr = _libc.mmap(None, length, mmap.PROT_READ, flags, fd, offset)
    if addr in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f"{what} failed: {os.strerror(err)}")
    return addr


def unmap(addr: int, length: int) -> None:
    _libc.munmap(addr, length)


class CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class CachestatResult(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def cachestat(fd: int, offset: int = 0, length: int = 0) -> int | None:
    """Pages of ``fd``'s file in the page cache (``length`` 0: to the end), those still being read
    included; None where cachestat(2) is missing (kernels before 6.5: readtrace.pagecache.residency
    falls back to mincore)."""
    if CACHESTAT_NR is None:
        return None
    stat = CachestatResult()
    rc = _libc.syscall(CACHESTAT_NR, fd, ctypes.byref(CachestatRange(offset, length)), ctypes.byref(stat), 0)
    return stat.nr_cache if rc == 0 else None


def range_cached(fd: int, offset: int, size: int) -> bool:
    """Whether every page of bytes ``[offset, offset + size)`` of ``fd``'s file is in the page cache
    (False where the kernel cannot say: before Linux 6.5's cachestat)."""
    first, last = offset // PAGE, (offset + max(size, 1) - 1) // PAGE
    cached = cachestat(fd, first * PAGE, (last - first + 1) * PAGE)
    return cached is not None and cached >= last - first + 1


def chunk_bytes_of(mib: float | None) -> int:
    """A chunk size given in MiB (a rerun's chunk_mib), or the default."""
    return int(mib * MiB) if mib else DEFAULT_CHUNK_BYTES


def read_error(fd: int, e: OSError) -> OSError:
    """The OSError of a failed read, with the file's name; a dead FUSE daemon (ENOTCONN) said as such."""
    why = e.strerror or str(e)
    if e.errno == errno.ENOTCONN:
        why = ("the FUSE daemon of its mount died (transport endpoint is not connected); unmount it "
               "(fusermount3 -u MOUNTPOINT) and mount it again")
    return OSError(e.errno, why, fd_path(fd))


def fd_path(fd: int) -> str:
    """The path an fd was opened with (for messages), or ``fd N``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


@contextmanager
def open_fd(path: str | os.PathLike, *, sequential: bool = True) -> Iterator[int]:
    """Open the regular file ``path`` read-only on a new fd of its own (never shared), closed on exit. A
    file that cannot be opened raises the OSError itself (with its filename), as open() does; so does a
    directory (IsADirectoryError, not a bare one from the first read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    try:
        if sequential:
            # Doubles the kernel's readahead window for this open file description.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        yield fd
    finally:
        # read-only: a failed close loses nothing, and must not hide why the load failed (a FUSE
        # daemon that died fails the FLUSH of close with ENOTCONN, after the read already said so)
        with contextlib.suppress(OSError):
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
        try:
            n = os.preadv(fd, [dest[pos:pos + min(chunk_bytes, total - pos)]], offset + pos)
        except OSError as e:
            raise read_error(fd, e) from None
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
