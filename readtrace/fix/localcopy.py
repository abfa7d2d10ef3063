"""The floor on a mount that drops the page cache on every open: the load warm from a local copy.

Such a mount has no warm run of the load: every open reads through the daemon again. So the bytes are
read once through the mount, cold, as the own-fd loader reads them (timed: the read half of the floor),
into a local copy of each file; then the unchanged command runs with each file bound over by its copy
in a private mount namespace of its own (``bind_over``, in the child before its exec: the host and
every other process still see the mount), where it reads the same bytes from the page cache. Root
only (a mount namespace needs CAP_SYS_ADMIN). The copies are made by root in a directory of its own
(0700), each with its file's owner and mode so that the command reads it as it reads the file, and
are removed after.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from readtrace import runstate
from readtrace.loader.fileio import MiB, open_fd, read_into
from readtrace.loader.spans import split_pieces
from readtrace.owners import writable_by_others
from readtrace.pagecache.pin import fits_in_memory
from readtrace.replace import new_file

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
ROOM_MARGIN = 256 * MiB  # free space left beside the copies on the local file system
MEMORY_FS = "/dev/shm"

_libc = ctypes.CDLL(None, use_errno=True)


class NoLocalCopy(Exception):
    """Why the load cannot run warm from a local copy here (the floor stays unknown)."""


@dataclass
class LocalCopies:
    """The files read once through the mount into local copies: bytes, seconds the reads took, and
    each file's copy (``binds``: file -> copy)."""

    bytes: int
    read_s: float
    streams: int
    binds: dict[str, str] = field(default_factory=dict)


@contextmanager
def local_copies(files: list[str], streams: int = 1, chunk_bytes: int = 16 * MiB) -> Iterator[LocalCopies]:
    """Read ``files`` (cold: the caller evicts them) through their mount into local copies, each of
    ``streams`` own-fd readers one contiguous share, in ``chunk_bytes`` reads; removed on exit.
    Raises NoLocalCopy where that cannot be done here (not root, no room)."""
    if os.geteuid() != 0:
        raise NoLocalCopy("not root: the load's files cannot be bound over by local copies")
    sizes = {path: os.stat(path).st_size for path in files}
    total = sum(sizes.values())
    base = _root_only_base(total)
    if (free := _free(base)) < total + ROOM_MARGIN:
        raise NoLocalCopy(f"no room for a local copy of its {total / MiB:.0f} MiB in {base} "
                          f"({free / MiB:.0f} MiB free)")
    with tempfile.TemporaryDirectory(prefix=f"{runstate.PREFIX}copy-", dir=base) as tmp, runstate.noted("copy", tmp):
        copies = {path: os.path.join(tmp, f"{i:04d}") for i, path in enumerate(files)}
        fds = {path: _new_copy(path, copy, sizes[path]) for path, copy in copies.items()}
        try:
            read_s = _copy_in_shares([(path, 0, size) for path, size in sizes.items()], fds, streams, chunk_bytes)
        finally:
            for fd in fds.values():
                os.close(fd)
        yield LocalCopies(total, read_s, streams, copies)


def _root_only_base(total: int) -> str:
    """Where root's copies of ``total`` bytes go: the memory file system (/dev/shm) where they fit in
    half of MemAvailable and its room, else $TMPDIR, /var/tmp, /tmp; the first that no one but root can
    swap out from under it (it and every directory above it root's, each writable by no one else or
    sticky): root writes the file's bytes there. The warm run reads the copies from memory either way;
    written to a disk file system they may wait on its write-back (220 MiB into ext4 here: 0.04-1.04 s,
    most of a rclone floor's 1.5 s beyond its 0.33 s read; into /dev/shm 0.08 s), and there they could be
    evicted before the warm run reads them."""
    in_memory = [MEMORY_FS] if fits_in_memory(total, 0.5) and _free(MEMORY_FS) >= total + ROOM_MARGIN else []
    for base in dict.fromkeys([*in_memory, tempfile.gettempdir(), "/var/tmp", "/tmp"]):
        if _root_only(base):
            return base
    raise NoLocalCopy("no temporary directory only root controls for a local copy ($TMPDIR, /var/tmp, /tmp)")


def _free(base: str) -> int:
    """Bytes free on ``base``'s file system (0 where it cannot be told)."""
    try:
        return shutil.disk_usage(base).free
    except OSError:
        return 0


def _root_only(path: str) -> bool:
    path = os.path.realpath(path)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid != 0 or (writable_by_others(st) and not st.st_mode & stat.S_ISVTX):
            return False
        if path == os.path.dirname(path):
            return True
        path = os.path.dirname(path)


def _new_copy(path: str, copy: str, size: int) -> int:
    """A write fd on ``copy``, created now, with ``path``'s owner and mode (read bits only)."""
    st = os.stat(path)
    fd = new_file(copy, 0o600)
    os.ftruncate(fd, size)
    os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o444)
    return fd


def _copy_in_shares(pieces, fds: Mapping[str, int], streams: int, chunk_bytes: int) -> float:
    """Copy each share on a thread of its own; the seconds of the reads alone (the slowest share's
    reads: the writes into the local page cache are not the mount's)."""
    lock = threading.Lock()
    read_s: list[float] = []

    def copy_share(share) -> None:
        buf = memoryview(bytearray(chunk_bytes))
        spent = 0.0
        for path, start, end in share:
            with open_fd(path) as fd:
                pos = start
                while pos < end:
                    began = time.perf_counter()
                    n = read_into(fd, buf[:min(chunk_bytes, end - pos)], pos, chunk_bytes=chunk_bytes)
                    spent += time.perf_counter() - began
                    if n == 0:
                        raise NoLocalCopy(f"{path} ended at {pos} of {end} bytes while it was copied")
                    os.pwrite(fds[path], buf[:n], pos)
                    pos += n
        with lock:
            read_s.append(spent)

    shares = split_pieces(pieces, max(streams, 1))
    with ThreadPoolExecutor(max(len(shares), 1)) as pool:
        for future in [pool.submit(copy_share, share) for share in shares]:
            future.result()
    return max(read_s, default=0.0)


def bind_over(binds: Mapping[str, str]) -> None:
    """In a forked child before its exec: a private mount namespace where each file is its copy."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    for target, copy in binds.items():
        _check(_libc.mount(os.fsencode(copy), os.fsencode(target), None, MS_BIND, None), f"bind over {target}")


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
