"""Fill the page cache of a checkpoint the user's code maps, before its threads fault on it.

For any loader that maps a checkpoint with Python's ``mmap.mmap(fd, ...)`` (a raw mmap, numpy.memmap,
gguf's GGUFReader, np.load(mmap_mode=...)): ``install`` makes ``mmap.mmap`` a subclass that, for a
mapping of one of the rerun's checkpoint files (``Rerun.files``), reads the file front to back on the
loader's own open file, in 2 MiB preads into one reused buffer, before the mapping is returned: the
threads then fault on a warm cache, the daemon sees one sequential reader, and nothing of ours opens the
file (rclone at 20 ms, 256 MiB, 4 threads: 34-36 s -> 0.7-1.2 s, a cold dd 0.84 s; lab-drop 42 s ->
0.5 s, dd 0.4-0.6 s). A file larger than half of MemAvailable (it would evict its own front before
the loader got there), or ``Rerun.populate_inline`` off, is filled alongside the loader instead: one
helper process reopens the loader's own open file (``/proc/self/fd/N`` of a duplicate it inherits: the same inode,
whatever its path is now) and reads it front to back in 2 MiB reads into one reused buffer: the reads
only fill the page cache the loader's threads then fault on. On a FUSE mount that drops the page cache
on every open, that open comes after the loader's, so what it reads stays; and the daemon sees one
sequential reader on a handle of its own. A process, not a thread: a thread touching a mapping
(``m[i]``, a slice) holds the GIL through its page fault, so a filling thread waited for every slow
fault of the loader's threads between two of its reads (rclone, 256 MiB, 4 threads: 34.5 s -> 18.7 s
with a thread, docs/fix.md). The helper is stopped when the user's process exits (its stretch of work
is the load's); a fork of the user's process may start its own. Any error of ours returns the user's
mapping as made, or ends the helper and leaves the load as it was; it is noted
(readtrace.inject.failclosed: stderr once, the run unproven).

In every rerun (baseline too), a mapping of a checkpoint made outside a loader call the shim records
is digested when it is closed (or at exit): the manifest gets its bytes' sha256 as a record like a
tensor's, so two runs of a loader without tensors still compare what they read. Standard library only.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import hashlib
import io
import mmap
import os
import sys
import threading
import time
import weakref

from readtrace.inject.failclosed import failed, guarded
from readtrace.rerun.protocol import POPULATE, Rerun, append_manifest
from readtrace.rerun.records import MappedBytesCall, MappedCall, PopulateCall, Record, Tensor

STEP = 2 << 20  # one read's size, and the stretch whose residency decides whether a loader is there
# A file up to this share of MemAvailable is filled before its mapping returns: a larger one would push
# its own first pages out of the page cache before the loader touched them, and is filled alongside.
INLINE_FRACTION = 0.5
INLINE = "inline, on the loader's fd"  # the populate record's "how": filled before the mapping (or open) returned

_ORIGINAL = mmap.mmap
_ORIGINAL_OPEN = io.open
_STARTED: set[tuple[int, int]] = set()  # (st_dev, st_ino) of the files this process fills (once each)
_LIVE: weakref.WeakSet = weakref.WeakSet()  # checkpoint mappings not digested yet
_LOCK = threading.Lock()
_CONFIG: dict = {}  # "rerun", "files": {(st_dev, st_ino): path}
_UNWRITTEN: list[Record] = []  # manifest records not written yet (_note)
_HELPERS: list = []  # the fill processes this process started: (subprocess.Popen, path)


def install(rerun: Rerun) -> None:
    """Patch ``mmap.mmap`` and Python's ``open`` for this rerun (its checkpoint files are ``rerun.files``)."""
    files = {}
    for path in rerun.files or rerun.prefetch_files:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            files[(st.st_dev, st.st_ino)] = os.path.abspath(path)
    if not files or not rerun.manifest and rerun.strategy != POPULATE:
        return
    _CONFIG.update(rerun=rerun, files=files)
    mmap.mmap = _Mapping
    builtins.open = io.open = _open  # pathlib's Path.open calls io.open
    atexit.register(_digest_all)
    atexit.register(_stop_helpers)  # registered last, so it runs first: the digests read the mapping after


# The fix's own own-fd loader maps the checkpoint too: not the script's mapping (the examples of
# readtrace.workloads are a user's script, and are noted).
_OWN_MAPPERS = ("readtrace.loader.", "readtrace.inject.")


class _Mapping(_ORIGINAL):
    """``mmap.mmap`` that fills and digests the checkpoint files it maps."""

    def __new__(cls, fileno, length, *args, **kwargs):
        self = super().__new__(cls, fileno, length, *args, **kwargs)
        ours = sys._getframe(1).f_globals.get("__name__", "").startswith(_OWN_MAPPERS)
        self._readtrace = None if ours else _checkpoint(fileno, args, kwargs)
        if self._readtrace is not None:
            _mapped(self)
            _started(fileno, self._readtrace)
        return self  # fail closed: whatever of ours failed above, the user's mapping as made

    def close(self):
        _digest(self)
        return super().close()

    def __del__(self):
        _digest(self)


def _open(file, mode="r", *args, **kwargs):
    """Python's ``open``: with ``populate``, a checkpoint file that a loader call the shim records opens
    for reading (torch.distributed.checkpoint's reader stream) is filled from that open file as a mapping
    is; the script's own opens are left to its mmap (a populate starts once per file)."""
    opened = _ORIGINAL_OPEN(file, mode, *args, **kwargs)
    if _CONFIG["rerun"].strategy == POPULATE and isinstance(mode, str) and "r" in mode and "+" not in mode \
            and not isinstance(file, int) and _inside_recorded_call():
        _opened(opened)
    return opened


@guarded("open hook")
def _opened(opened) -> None:
    info = _checkpoint(opened.fileno(), (), {})
    if info is not None:
        _started(opened.fileno(), info)


@guarded("mmap hook")
def _checkpoint(fileno: int, args, kwargs) -> dict | None:
    """What to know of a mapping of one of the checkpoint files (None: another file or anonymous)."""
    if not isinstance(fileno, int) or fileno < 0:
        return None
    st = os.fstat(fileno)
    path = _CONFIG["files"].get((st.st_dev, st.st_ino))
    if path is None:
        return None
    offset = args[3] if len(args) >= 4 else kwargs.get("offset", 0)  # mmap(fileno, length, flags, prot, access, offset)
    return {"path": path, "key": (st.st_dev, st.st_ino), "offset": int(offset or 0), "pending": False}


@guarded("mmap hook")
def _mapped(mapping) -> None:
    """Note the mapping, and keep it to digest (unless a loader call the shim records made it)."""
    info = mapping._readtrace
    _note([MappedCall(file=info["path"], strategy=_CONFIG["rerun"].strategy, pid=os.getpid())])
    if not _inside_recorded_call():
        info["pending"] = True
        _LIVE.add(mapping)


@guarded("populate")
def _started(fileno: int, info: dict) -> None:
    """Fill the file from the loader's open file, once per file and process: here, before the mapping
    (or the open) returns to the loader, where the page cache can hold it; else alongside the loader,
    in a helper process (``main``)."""
    rerun = _CONFIG["rerun"]
    if rerun.strategy != POPULATE:
        return
    with _LOCK:
        if info["key"] in _STARTED:
            return
        _STARTED.add(info["key"])
    size = os.fstat(fileno).st_size
    if rerun.populate_inline and size <= _available_bytes() * INLINE_FRACTION:
        _fill_inline(fileno, info["path"], size, rerun)
        return
    import subprocess

    fd = os.dup(fileno)  # the loader may close its fd right after mmap(): the helper reopens this one
    try:
        root = os.path.dirname(os.path.dirname(sys.modules["readtrace"].__path__[0]))
        # -S: no site, so no sitecustomize (the shim) in the helper; readtrace and the standard library only
        helper = subprocess.Popen(
            [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {root!r}); "
             "from readtrace.inject.mapfill import main; main()", str(fd), info["path"]],
            pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        os.close(fd)
    _HELPERS.append((helper, info["path"]))


def _stop_helpers() -> None:
    """At exit: a helper still reading is stopped (it notes how far it got) and waited for, so that none
    outlives the load (the next cold run's eviction must not race it)."""
    import signal

    for helper, path in _HELPERS:
        if helper.poll() is None:
            helper.terminate()
        with contextlib.suppress(Exception):
            helper.wait(timeout=10)
        if helper.poll() is None:
            helper.kill()
            helper.wait()
        if helper.returncode in (-signal.SIGTERM, -signal.SIGKILL):  # stopped before it could say so itself
            _note([PopulateCall(file=path, strategy=_CONFIG["rerun"].strategy, how="not started", seconds=0.0,
                                bytes=0, pid=helper.pid, note=_Stopped.MESSAGE)])


def main() -> None:
    """The helper process: ``FD PATH`` (an inherited duplicate of the loader's fd, the file's name)."""
    import signal

    signal.signal(signal.SIGTERM, _stopped)
    loader_fd, path = int(sys.argv[1]), sys.argv[2]
    rerun = Rerun.from_env()
    _CONFIG.update(rerun=rerun)
    _fill(loader_fd, path, rerun)
    # noted: a stop from here on must not kill it either (the interpreter's exit restores SIGTERM's default
    # action, and the load's exit would then note a second, "not started" record for it: CI, stop 39)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


class _Stopped(Exception):
    """The user's process exited before the fill was done."""

    MESSAGE = "stopped: the load ended first"


_FILLED = []  # one item once the helper's fill is over: a stop then interrupts nothing (its record is noted next)


def _stopped(signum, frame):
    if not _FILLED:
        raise _Stopped(_Stopped.MESSAGE)


def _available_bytes() -> int:
    """What the kernel says memory can still hold (MemAvailable); where /proc/meminfo cannot be opened
    (no fd left), the free pages alone (sysconf needs no fd)."""
    with contextlib.suppress(OSError, ValueError), _ORIGINAL_OPEN("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return 0


def _fill_inline(fd: int, path: str, size: int, rerun: Rerun) -> None:
    """Read the whole file front to back on the loader's own open file before it gets its mapping: its
    threads then fault on a warm cache, and the daemon sees one sequential reader. No open of ours (on a
    mount that drops the page cache on every open, what is read here stays); preadv leaves the file
    position alone and releases the GIL."""
    started, progress, error = time.perf_counter(), [0], None
    try:
        _read_range(fd, memoryview(bytearray(min(STEP, max(size, 1)))), 0, size, progress)
    except OSError as e:  # fail closed: the loader reads what is left itself
        error = f"{type(e).__name__}: {e}"
        failed("populate", e)
    _note([_populate_record(path, rerun, INLINE, started, progress[0], error)])


def _populate_record(path: str, rerun: Rerun, how: str, started: float, nbytes: int,
                     error: str | None) -> PopulateCall:
    return PopulateCall(file=path, strategy=rerun.strategy, how=how, seconds=time.perf_counter() - started,
                        bytes=nbytes, pid=os.getpid(), note=error or None)


def _fill(loader_fd: int, path: str, rerun: Rerun) -> None:
    """Read the whole file front to back into one reused buffer, on a new open of the loader's open
    file (else on the loader's handle itself); note what it did."""
    started, progress, error, how, fd = time.perf_counter(), [0], None, "loader's fd", loader_fd
    try:
        with contextlib.suppress(OSError):
            fd, how = os.open(f"/proc/self/fd/{loader_fd}", os.O_RDONLY | os.O_CLOEXEC), "reopened"
        if fd != loader_fd:
            os.close(loader_fd)
        _read_around_readers(fd, os.fstat(fd).st_size, progress)
    except _Stopped as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - fail closed: the loader reads what it needs itself
        error = f"{type(e).__name__}: {e}"
        failed("populate", e)
    finally:
        _FILLED.append(True)
        with contextlib.suppress(OSError):
            os.close(fd)
    _note([_populate_record(path, rerun, how, started, progress[0], error)])


def _read_around_readers(fd: int, size: int, progress: list[int]) -> None:
    """Read the file front to back in STEP reads, skipping past stretches already in the page cache
    or being read (cachestat counts both): a loader thread is there, and a read of pages it is
    fetching would wait for each of its slow requests instead of streaming ahead of it. The stretches
    skipped are read at the end (mostly cached by then). ``progress[0]``: the bytes read so far."""
    from readtrace.pagecache.residency import cached_in  # in the helper: the hook itself stays cheap

    buf = memoryview(bytearray(min(STEP, max(size, 1))))
    pos, skipped = 0, []
    while pos < size:  # reads, not POSIX_FADV_WILLNEED: FUSE skips readahead when its queue is busy
        n = min(STEP, size - pos)
        if cached_in(fd, pos, n):
            start = pos
            while pos < size and cached_in(fd, pos, min(STEP, size - pos)):
                pos += STEP
            skipped.append((start, min(pos, size)))
            continue
        _read_range(fd, buf, pos, pos + n, progress)
        pos += n
    for start, end in skipped:
        _read_range(fd, buf, start, end, progress)


def _read_range(fd: int, buf: memoryview, start: int, end: int, progress: list[int]) -> None:
    while start < end:
        got = os.preadv(fd, [buf[:min(len(buf), end - start)]], start)
        if got <= 0:
            break
        start += got
        progress[0] += got


def _inside_recorded_call() -> bool:
    """Made inside a loader call the shim records (it digests that call's tensors itself)."""
    state = sys.modules.get("readtrace.inject.shimstate")  # the shim's, imported with it
    return state is not None and state.inside()


def _digest(mapping) -> None:
    """The manifest record of the bytes a checkpoint mapping shows, once, while it is still open."""
    info = getattr(mapping, "_readtrace", None)
    if info is None or not info["pending"] or mapping.closed:
        return
    info["pending"] = False
    try:
        started = time.perf_counter()
        digest = hashlib.sha256()
        with memoryview(mapping) as view:
            for pos in range(0, len(view), STEP):
                digest.update(view[pos:pos + STEP])
        name = f"mapped bytes {info['offset']}+{len(mapping)}"
        _note([Tensor(file=info["path"], name=name, dtype="uint8", shape=(len(mapping),), sha256=digest.hexdigest()),
               MappedBytesCall(file=info["path"], strategy=_CONFIG["rerun"].strategy,
                               digest_seconds=time.perf_counter() - started, pid=os.getpid())])
    except Exception as e:  # noqa: BLE001 - a mapping we cannot read: no digest, so the run proves nothing
        failed("mapped-bytes digest", e)


def _digest_all() -> None:
    for mapping in list(_LIVE):
        _digest(mapping)
    _note([])  # what could not be written before


def _note(records: list[Record]) -> None:
    """Append to the manifest. Records it could not write (no fd left) are kept and written ahead of
    the next ones, or at exit (``_digest_all``); with none kept, ``records`` go as they are, so notes
    from two threads never drop each other's."""
    global _UNWRITTEN
    manifest = _CONFIG["rerun"].manifest
    if not manifest:
        return
    held, _UNWRITTEN = _UNWRITTEN, []
    batch = held + list(records)
    if not batch:
        return
    try:
        append_manifest(manifest, batch)
    except OSError:
        _UNWRITTEN = batch + _UNWRITTEN


def _forget_in_child() -> None:
    """A forked child's fills are its parent's to stop: it may start its own (its parent's fd is shared)."""
    global _LOCK, _UNWRITTEN
    _LOCK = threading.Lock()
    _STARTED.clear()
    _HELPERS.clear()
    _UNWRITTEN = []  # the parent's to write


os.register_at_fork(after_in_child=_forget_in_child)
