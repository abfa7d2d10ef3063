"""One ``fix --compare`` at a time per checkpoint file: another compare's eviction, prefetch or load of
the same file would make this one's cold runs warm (or its warm runs cold), and both would print a
wrong ratio. Each file's lock is an flock on ``cold-<dev>-<ino>.lock`` in the state directory
(``runstate.state_dir``), taken for every file of the comparison in sorted order (two compares of
overlapping sets never deadlock), held from the first measured run to the end and removed on release
(a waiter that then holds a removed file takes the new one). The holder writes its pid into the lock
file; a second compare names it and waits, or with ``wait=False`` fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator

from readtrace import runstate
from readtrace.errors import ReadtraceError
from readtrace.escape import printable


def lock_path(path: str) -> str:
    st = os.stat(path)
    return os.path.join(runstate.state_dir(), f"cold-{st.st_dev}-{st.st_ino}.lock")


@contextlib.contextmanager
def holding(files: Iterable[str], *, wait: bool = True, say: Callable[[str], None] = lambda line: None
            ) -> Iterator[list[str]]:
    """Hold every file's lock while the block runs; yields notes (why no lock could be taken)."""
    locks, notes = {}, []
    for path in files:
        try:
            locks[lock_path(path)] = path
        except OSError as e:
            notes.append(f"{printable(path)}: not locked against another fix --compare ({e.strerror or e})")
    with contextlib.ExitStack() as stack:
        for lock in sorted(locks):
            fd = _lock(lock, locks[lock], wait, say)
            stack.callback(os.close, fd)
            stack.callback(_unlink, lock)  # before the close: a waiter then finds the file gone and retries
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield notes


def _lock(lock: str, path: str, wait: bool, say: Callable[[str], None]) -> int:
    """An fd holding the flock of the file now at ``lock`` (a holder removes it on release: a lock
    taken on a file no longer there is dropped and taken again)."""
    said = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            said = _take(fd, path, wait, say, said)
            held, now = os.fstat(fd), os.stat(lock, follow_symlinks=False)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _take(fd: int, path: str, wait: bool, say: Callable[[str], None], said: bool) -> bool:
    """flock ``fd``; whether the wait was said."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return said
    except BlockingIOError:
        pass
    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    busy = f"another fix --compare (pid {holder}) is measuring {printable(path)}"
    if not wait:
        raise ReadtraceError(f"{busy}: its cold runs and ours would spoil each other; try again when it is done "
                             "(without --no-wait, fix waits for it)")
    if not said:
        say(f"{busy}: waiting for it to finish (its runs and ours would spoil each other's cold cache)")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return True


def _unlink(lock: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
