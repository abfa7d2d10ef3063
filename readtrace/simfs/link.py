"""The modelled link a lab mount's transfers queue on: its own, or one shared by several daemons.

A link has a rate (bytes/s) and a time at which it is next free; ``reserve`` books a transfer of
``n`` bytes that is ready to start at ``ready`` and returns when it ends (FIFO: a transfer starts at
``max(ready, free_at)``), so the bytes that cross it never exceed the rate, whoever sends them.

``SharedLink`` keeps ``free_at`` (CLOCK_MONOTONIC, the same clock in every process of the machine) and
the rate in a small file of the state directory (readtrace.runstate.state_dir), so the lab's "nodes"
(one daemon per mount) share one file system's bandwidth. Bookings are serialised by a POSIX record
lock across processes plus a thread lock within one (POSIX locks are per process). Each user holds a
shared flock on the file for its whole life; the last one to leave (an exclusive flock succeeds)
removes it, and a daemon killed outright drops its flock with its life, so the file never outlives
its users for long: the next one to close removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
import threading
import time
from pathlib import Path

from readtrace.errors import UsageError

_STATE = struct.Struct("<dd")  # free_at (monotonic s), bytes_per_s
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class Link:
    """One daemon's own link."""

    def __init__(self, bytes_per_s: float):
        self.bytes_per_s = bytes_per_s
        self._lock = threading.Lock()
        self._free_at = 0.0

    def reserve(self, ready: float, nbytes: int) -> float:
        with self._lock:
            start = max(ready, self._free_at)
            self._free_at = end = start + nbytes / self.bytes_per_s
        return end

    def close(self) -> None:
        pass


class SharedLink(Link):
    """A link of ``bytes_per_s`` shared by every daemon that opens ``name`` (same rate required)."""

    def __init__(self, name: str, bytes_per_s: float):
        super().__init__(bytes_per_s)
        self.path = link_path(name)
        self._fd = _open_live(self.path)
        try:
            with self._locked():
                state = os.pread(self._fd, _STATE.size, 0)
                if len(state) < _STATE.size:  # the first user sets the rate
                    os.pwrite(self._fd, _STATE.pack(0.0, bytes_per_s), 0)
                elif _STATE.unpack(state)[1] != bytes_per_s:
                    raise UsageError(_mismatch(name, _STATE.unpack(state)[1], bytes_per_s))
        except BaseException:
            self.close()
            raise

    def reserve(self, ready: float, nbytes: int) -> float:
        with self._locked():
            free_at, rate = _STATE.unpack(os.pread(self._fd, _STATE.size, 0))
            end = max(ready, free_at) + nbytes / rate
            os.pwrite(self._fd, _STATE.pack(end, rate), 0)
        return end

    def close(self) -> None:
        """Leave the link; the last user removes its file."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # only when nobody else holds it
            if _same_file(self._fd, self.path):
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = -1

    @contextlib.contextmanager
    def _locked(self):
        with self._lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise UsageError(f"simfs: a shared link's name is 1-64 letters, digits, '.', '_' or '-' (got {name!r})")


def check_rate(name: str, bytes_per_s: float) -> None:
    """Refuse to join a live link of another rate (before a daemon is started for it)."""
    try:
        state = link_path(name).read_bytes()
    except FileNotFoundError:
        return
    if len(state) >= _STATE.size and _STATE.unpack(state[:_STATE.size])[1] != bytes_per_s:
        raise UsageError(_mismatch(name, _STATE.unpack(state[:_STATE.size])[1], bytes_per_s))


def _mismatch(name: str, theirs: float, ours: float) -> str:
    return f"simfs: shared link {name!r} runs at {theirs / 1e6:g} MB/s, not {ours / 1e6:g} MB/s"


def link_path(name: str) -> Path:
    check_name(name)
    from readtrace.runstate import state_dir

    return state_dir() / f"simfs-link-{name}"


def _open_live(path: Path) -> int:
    """Open (or create) the link's file and hold a shared flock on it: retried when the last user
    removed it between our open and our lock."""
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _same_file(fd, path):
            return fd
        os.close(fd)
        time.sleep(0.001)
    raise OSError(f"{path}: removed again and again while opening it")


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
