"""Safe replacement of readtrace's outputs (traces, HTML, Perfetto files): the one helper every writer uses.

Rules: never write through a symlink; an existing path is replaced only with ``force`` and only when
it is itself a readtrace output (``is_ours``); the new output is written beside the target under a
temporary name and renamed into place at the end, so a failed run never destroys the previous output
and two concurrent runs onto one path leave one complete output. A directory is swapped in with
renameat2(RENAME_EXCHANGE) (rename the old away, then the new in, where the file system lacks it).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from readtrace.errors import ReadtraceError
from readtrace.runstate import pid_running

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100
UNFINISHED_MARK = ".readtrace-unfinished"  # in a directory readtrace is still writing (holds the pid)

_libc = ctypes.CDLL(None, use_errno=True)


def _renameat2(src: Path, dst: Path, flags: int) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(dst))


def check_target(path: str | os.PathLike, *, force: bool, is_ours: Callable[[Path], bool], what: str) -> None:
    """Refuse a symlink, an existing path without ``force`` and, even with it, anything not ``is_ours``."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ReadtraceError(f"cannot use {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ReadtraceError(f"{path} is a symlink; readtrace never writes through one (remove it or name "
                             "another path)")
    if not force:
        raise ReadtraceError(f"{path} exists; use {{option}} to overwrite it", option="force")
    if not is_ours(path):
        raise ReadtraceError(f"{path} is not a readtrace {what}; {{option}} only replaces a readtrace {what} "
                             "(remove it yourself if you mean it)", option="force")


def new_file(path: str | os.PathLike, mode: int = 0o644) -> int:
    """A write fd on a file created now: never one that existed, never through a symlink (O_EXCL)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def no_follow(path: str | os.PathLike, flags: int) -> int:
    """An ``open(..., opener=no_follow)``: the last component is never followed if it is a symlink."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def _sibling(path: Path, tag: str) -> Path:
    return path.parent / f".{path.name}.{tag}-{os.getpid()}-{secrets.token_hex(3)}"


@contextlib.contextmanager
def replacing_file(path: str | os.PathLike, *, force: bool, is_ours: Callable[[Path], bool],
                   what: str) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it replaces ``path`` atomically."""
    path = Path(path)
    check_target(path, force=force, is_ours=is_ours, what=what)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        check_target(path, force=force, is_ours=is_ours, what=what)  # it may have appeared meanwhile
        os.replace(tmp, path)
    except OSError as e:
        raise ReadtraceError(f"cannot write {path}: {e.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def remove_stale_staging(path: Path) -> list[Path]:
    """Remove the unfinished outputs for ``path`` that killed runs left beside it (marked, named with
    a pid that is no longer running): only what is provably ours."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in path.parent.glob(f".{glob.escape(path.name)}.partial-*-*"):
            pid = entry.name.rsplit("-", 2)[-2]
            if pid.isdigit() and not pid_running(int(pid)) and is_unfinished(entry) \
                    and not os.path.islink(entry):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def staging_dir(path: str | os.PathLike) -> Path:
    """A new directory beside ``path``, marked as readtrace's unfinished output (with the pid); the
    leftovers of killed runs for the same path are removed first."""
    path = Path(path)
    remove_stale_staging(path)
    staging = _sibling(path, "partial")
    try:
        staging.mkdir(mode=0o755)
        (staging / UNFINISHED_MARK).write_text(f"{os.getpid()}\n")
    except OSError as e:
        raise ReadtraceError(f"cannot create {path}: {e.strerror}") from None
    return staging


def is_unfinished(path: Path) -> bool:
    """A directory readtrace started writing and never finished (a killed run)."""
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(path / UNFINISHED_MARK).st_mode)
    return False


def install_dir(staging: Path, path: str | os.PathLike, *, force: bool, is_ours: Callable[[Path], bool],
                what: str) -> Path:
    """Rename the finished ``staging`` directory to ``path``; an existing ``path`` (checked as in
    ``check_target``) is swapped out and removed. ``staging`` loses its unfinished mark."""
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        (staging / UNFINISHED_MARK).unlink()
    try:
        _renameat2(staging, path, RENAME_NOREPLACE)
        return path
    except OSError as e:
        if e.errno == errno.EINVAL:  # no RENAME_NOREPLACE here: check, then rename (a small race)
            if not os.path.lexists(path):
                os.rename(staging, path)
                return path
        elif e.errno != errno.EEXIST:
            raise ReadtraceError(f"cannot write {path}: {e.strerror} (the new {what} is in {staging})") from None
    try:
        check_target(path, force=force, is_ours=is_ours, what=what)
    except ReadtraceError as e:
        raise e.with_note(f"(the new {what} is in {staging})") from None
    old = _swap(staging, path)
    if is_ours(old):
        shutil.rmtree(old, ignore_errors=True)
    else:  # replaced by something else between the check and the swap: put it back
        _swap(old, path)
        raise ReadtraceError(f"{path} changed while writing; left it alone (the new {what} is in {old})")
    return path


def _swap(new: Path, path: Path) -> Path:
    """Put ``new`` at ``path``; returns where the previous ``path`` now is."""
    try:
        _renameat2(new, path, RENAME_EXCHANGE)
        return new
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise ReadtraceError(f"cannot replace {path}: {e.strerror}") from None
    old = _sibling(path, "old")
    os.rename(path, old)
    os.rename(new, path)
    return old


def remove_dir(staging: Path) -> None:
    """Remove an unfinished output directory of ours (a failed run)."""
    if is_unfinished(staging):
        shutil.rmtree(staging, ignore_errors=True)


def has_marker(path: Path, marker: bytes, at_end: bool = False, window: int = 4096) -> bool:
    """Whether a regular file (not followed through a symlink) holds ``marker`` in its first (or last)
    ``window`` bytes: how readtrace recognises its own report files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if at_end:
            os.lseek(fd, max(0, st.st_size - window), os.SEEK_SET)
        return marker in os.read(fd, window)
    finally:
        os.close(fd)

