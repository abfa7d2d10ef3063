"""Where a patched loader call goes: the strategy for its file (``auto`` decides per file), the
prefetch once per file, the own-fd load (shared by the safe_open handles open on one file at once,
or taken from the file's early read), and the populate of the loader's own mapping."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from readtrace.errors import ReadtraceError
from readtrace.fs.knowledge import is_remote
from readtrace.inject import early, loaded
from readtrace.inject.callrecords import flush, pending
from readtrace.inject.failclosed import guarded
from readtrace.inject.shimstate import REFUSED, STATE, Inside
from readtrace.inject.startup import already_prefetched, hold, pin_seconds, release_pin, wait_prefetched
from readtrace.loader import loader
from readtrace.loader.fileio import open_fd, read_into
from readtrace.pagecache import prefetch as prefetcher
from readtrace.pagecache.populate import populate
from readtrace.pagecache.residency import cache_survives_open
from readtrace.rerun.protocol import LeverName, prefetches
from readtrace.rerun.records import PopulateCall


@guarded("strategy choice", default="none")
def strategy_for(path: str, device) -> str:
    """The strategy to use for one file: the configured one, or the ``auto`` choice."""
    chosen = STATE.config.strategy
    if chosen != "auto":
        return chosen
    if not os.path.exists(path):
        return "none"  # let the original loader report it its own way
    if is_remote(path):
        return "both"
    return "own-fd" if str(device).startswith("cuda") or isinstance(device, int) else "none"


def lever_kwargs(kwargs: dict) -> dict:
    """safetensors' own keyword arguments with the ``safetensors-pread`` lever applied."""
    if STATE.config.lever == LeverName.SAFETENSORS_PREAD and "backend" not in kwargs:
        return {**kwargs, "backend": "pread"}
    return kwargs


@dataclass
class RoutedCall:
    """One patched loader call on a checkpoint path, as ``routed`` runs and records it."""

    mode: str = "none"
    populate: bool = False  # this call prefetched the file: a mapping of it is populated too
    result: object = None
    fallback: str | None = None
    error: str | None = None
    seconds: float = 0.0


@contextmanager
def routed(path: str, device, record: Callable[[RoutedCall], None]):
    """Around one patched call on ``path``: picks the strategy, waits for the start-up prefetch,
    prefetches once where the strategy does, and records the call (its error too) when it ends."""
    call, started = RoutedCall(), time.perf_counter()
    call.mode = strategy_for(path, device)
    try:
        with Inside():
            wait_prefetched(path)
            call.populate = prefetches(call.mode) and prefetch_once(path)
            yield call
    except Exception as e:
        call.error = f"{type(e).__name__}: {e}"
        raise
    finally:
        call.seconds = time.perf_counter() - started
        record(call)
        flush()


def own_fd_tensors(path: str, device) -> dict:
    """The own-fd loader's tensors of ``path``: from its early read when there is one, else read now."""
    data = _early_bytes(path)
    if data is not None:
        return loader.tensors_from_memory(path, data, device)
    tensors = loader.load_file(path, device, chunk_bytes=STATE.config.chunk_bytes, threads=STATE.config.threads)
    release_pin(path)
    return tensors


@dataclass
class SharedLoad:
    """One own-fd load of a file, shared by the safe_open handles open on it at the same time
    (threads that each open the checkpoint read it once, not once per thread)."""

    handles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    tensors: dict | None = None
    identity: tuple | None = None

    def tensors_of(self, path: str, device) -> dict:
        """The tensors, loaded by the first handle that asks; a file that changed since, again."""
        with self.lock:
            current = early.identity(os.stat(path))
            if self.tensors is None or self.identity != current:
                self.tensors, self.identity = own_fd_tensors(path, device), current
            return self.tensors


SHARED: dict[tuple[str, str], SharedLoad] = {}
os.register_at_fork(after_in_child=SHARED.clear)  # a lock another thread held would never be released


def share(key: tuple[str, str]) -> SharedLoad:
    """A handle of ``key`` = (path, device) opens: the load it shares with the others open."""
    with STATE.lock:
        shared = SHARED.setdefault(key, SharedLoad())
        shared.handles += 1
        return shared


def unshare(key: tuple[str, str], shared: SharedLoad) -> None:
    """A handle closes: the last one lets go of the load (its tensors live on where they are used)."""
    with STATE.lock:
        shared.handles -= 1
        if shared.handles == 0 and SHARED.get(key) is shared:
            del SHARED[key]


@guarded("early read")
def _early_bytes(path: str) -> memoryview | None:
    """``path``'s bytes as read at start-up (early.py), noted in the manifest; None: there are none."""
    data, note = early.take(path, STATE.config.strategy)
    if note is not None:
        pending(note)
    return data


def read_own_fd(path: str) -> bytearray | memoryview:
    """The whole file, read front to back on an fd of our own in large chunks (or read early)."""
    data = _early_bytes(path)
    if data is not None:
        return data
    with open_fd(path) as fd:
        size = os.fstat(fd).st_size
        buf = bytearray(size)
        got = read_into(fd, memoryview(buf), 0, chunk_bytes=STATE.config.chunk_bytes)
    return buf if got == size else buf[:got]


@guarded("prefetch", default=False)
def prefetch_once(path: str) -> bool:
    """Prefetch ``path`` once per process tree. True: this mount drops the page cache on every open,
    so nothing was read: the caller populates the loader's own mapping once it exists instead."""
    with STATE.lock:
        if path in STATE.prefetched or already_prefetched(path):
            return False
        STATE.prefetched.add(path)
    try:
        if not cache_survives_open(path):
            return True  # the loader's own open() would drop what we read now
        fetched = prefetcher.prefetch([path], chunk_bytes=STATE.config.chunk_bytes,
                                      threads=STATE.config.prefetch_threads, progress=False,
                                      distributed=STATE.config.prefetch_distributed,
                                      pin=pin_seconds(STATE.config.prefetch_pin_s) > 0)  # as the start-up prefetch: held until loaded
        hold(fetched, pin_seconds(STATE.config.prefetch_pin_s))
    except (*REFUSED, ReadtraceError):
        pass  # the load that follows reports the problem the way the user's loader does
    return False


@guarded("populate")
def populate_mapping(path: str) -> None:
    """Fault the loader's own mapping of ``path`` in, front to back (no open of ours: see populate)."""
    done, seconds, why = populate(loaded.mapped_ranges(path))
    pending(PopulateCall(file=path, strategy=STATE.config.strategy, seconds=seconds, bytes=done, pid=os.getpid(),
                         note=why or None))
