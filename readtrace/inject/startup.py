"""Prefetch at interpreter start-up, for loaders the shim cannot route (raw mmap, forked preads ...).

``Rerun.prefetch_files`` (protocol.py) names the checkpoint files; the first Python process of the
rerun streams them into the page cache before the script runs and exports ``Rerun.prefetched`` so its
Python children do not read them again. Under torchrun with a rank plan (``Rerun.prefetch_plan``,
readtrace.rerun.rankplan) the launcher reads nothing and each rank reads its own pieces. Imports no torch.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
from dataclasses import replace

from readtrace.errors import ReadtraceError
from readtrace.fs.knowledge import is_remote
from readtrace.inject import early
from readtrace.inject.failclosed import guarded
from readtrace.loader.fileio import chunk_bytes_of
from readtrace.pagecache.pin import DEFAULT_HOLD_S, Pins
from readtrace.pagecache.prefetch import DEFAULT_THREADS, PrefetchResult, local_rank_and_size, prefetch_pieces
from readtrace.pagecache.residency import cache_survives_open
from readtrace.rerun.protocol import Rerun, append_manifest, process_rank
from readtrace.rerun.records import PrefetchCall, Record

_HELD: list[Pins] = []  # prefetched pages locked in memory until their hold time ends or we exit
_PENDING: dict[str, threading.Event] = {}  # files a background prefetch is still reading
_PEERS: dict[str, list[str]] = {}  # file -> markers of the node's ranks that prefetch shares of it
PEER_WAIT_S = 120.0  # a rank whose peer never marks its share (killed) loads anyway after this


@guarded("start-up prefetch")
def prefetch_at_start(env=os.environ) -> None:
    """Prefetch the rerun's files before the script runs; with ``Rerun.prefetch_background`` in a
    thread while the interpreter imports the script's libraries (the loads the shim sees wait for
    it: ``wait_prefetched``)."""
    rerun = Rerun.from_env(env)
    kept = functools.cache(_cache_kept)  # one probe per file (it reads from the mount), for both uses
    files = rerun.start_prefetch()  # before the early reads mark their files as read for the children
    rerun = _read_early(rerun, env, kept)
    if rerun.strategy == "auto":
        files = [f for f in files if is_remote(f)]  # auto prefetches on FUSE and network file systems only
    files = [f for f in files if kept(f)]  # else the loader's own open() drops what we read
    if not files:
        return
    pieces, peers = [(f, 0, os.stat(f).st_size) for f in files], ()
    if rerun.prefetch_plan:
        rank = process_rank(env)
        if rank is None:
            return  # the launcher (torchrun): each rank prefetches its own pieces
        pieces, peers = _rank_pieces(rerun, rank, files)
    replace(rerun, prefetched=(*rerun.prefetched, *files)).export(env)  # children of this process need not read them
    if rerun.prefetch_background:
        done = threading.Event()
        _PENDING.update((os.path.abspath(f), done) for f in files)
        threading.Thread(target=_prefetch, args=(rerun, pieces, done, peers), name="readtrace-prefetch",
                         daemon=True).start()
        return
    _prefetch(rerun, pieces, None, peers)


def _read_early(rerun: Rerun, env, kept) -> Rerun:
    """Start the early reads (inject/early.py) of the files the own-fd loader will load from a mount
    that drops the page cache on every open (``kept(f)`` False); the first process only (its children
    are told)."""
    files = [f for f in rerun.early_read_candidates() if is_remote(f) and not kept(f)]
    started = early.start(files, chunk_bytes=chunk_bytes_of(rerun.chunk_mib), readers=rerun.threads or 1)
    if not started:
        return rerun
    atexit.register(_note_never_taken, rerun, os.getpid())
    rerun = replace(rerun, prefetched=(*rerun.prefetched, *started))
    rerun.export(env)
    return rerun


def _rank_pieces(rerun: Rerun, rank: int, files: list[str]) -> tuple[list, tuple[str, ...]]:
    """This rank's pieces of the plan, and (split plans) the markers of its node's ranks: a load waits
    until its peers have read their shares too (``wait_prefetched``), then finds the whole file cached."""
    from readtrace.rerun.rankplan import SPLIT, RankPlan

    plan = RankPlan.load(rerun.prefetch_plan)
    local_rank, local_world = local_rank_and_size()
    pieces = [p for p in plan.pieces(rank, local_rank, local_world) if p[0] in files]
    if plan.mode != SPLIT or not rerun.manifest:
        return pieces, ()
    markers = f"{rerun.manifest}.prefetched"
    os.makedirs(markers, exist_ok=True)
    _PEERS.update((os.path.abspath(f), [os.path.join(markers, str(r)) for r in range(local_world)]) for f in files)
    return pieces, (os.path.join(markers, str(local_rank)),)


def _prefetch(rerun: Rerun, pieces: list, done: threading.Event | None, markers=()) -> None:
    try:
        _prefetch_and_note(rerun, pieces)
    finally:
        for marker in markers:  # even when it failed: the peers must not wait for it
            with contextlib.suppress(OSError):
                open(marker, "w").close()
        if done is not None:
            done.set()


@guarded("start-up prefetch")
def _prefetch_and_note(rerun: Rerun, pieces: list) -> None:
    started = time.perf_counter()
    files = list(dict.fromkeys(path for path, _, _ in pieces))
    try:
        result = prefetch_pieces(pieces, threads=rerun.prefetch_threads or DEFAULT_THREADS, progress=False,
                                 pin=pin_seconds(rerun.prefetch_pin_s) > 0)
    except ReadtraceError as e:
        _note(rerun, PrefetchCall(strategy=rerun.strategy, seconds=0.0, error=str(e), pid=os.getpid()))
        return
    hold(result, pin_seconds(rerun.prefetch_pin_s))
    _note(rerun, PrefetchCall(file=os.pathsep.join(files), strategy=rerun.strategy,
                              seconds=time.perf_counter() - started, bytes=result.bytes_read, tensors=0,
                              background=rerun.prefetch_background, nested=rerun.prefetch_background,
                              pinned_bytes=result.pinned_bytes, pin_note=result.pin_note, pid=os.getpid()))


@guarded("wait for the prefetch", default=0.0)
def wait_prefetched(path: str) -> float:
    """Wait until a background prefetch of ``path`` (if any) has finished; returns the seconds waited."""
    done = _PENDING.get(os.path.abspath(path))
    peers = _PEERS.get(os.path.abspath(path), ())
    started = time.perf_counter()
    if done is not None:
        done.wait()
    while not all(os.path.exists(m) for m in peers) and time.perf_counter() - started < PEER_WAIT_S:
        time.sleep(0.01)
    return time.perf_counter() - started


def _forget_in_child() -> None:
    _PENDING.clear()  # a forked child has no prefetch thread to wait for (its parent has the pages)
    _PEERS.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def pin_seconds(asked_s: float | None) -> float:
    """How long a prefetch holds its pages locked (READTRACE_PREFETCH_PIN_S, else the default; 0: not pinned)."""
    return DEFAULT_HOLD_S if asked_s is None else asked_s


def hold(result: PrefetchResult, seconds: float) -> None:
    """Keep a prefetch's pinned pages locked for ``seconds``, or until ``release_pin`` after the file's load."""
    if result.pins is not None:
        result.pins.hold(seconds)
        _HELD.append(result.pins)


@guarded("release of the prefetch's pinned pages")
def release_pin(path: str) -> None:
    """``path`` has been loaded: its prefetched pages need not stay locked any longer."""
    for pins in _HELD:
        for pinned in pins.files:
            if os.path.abspath(pinned.path) == os.path.abspath(path):
                pinned.release()


def already_prefetched(path: str, env=os.environ) -> bool:
    return path in Rerun.from_env(env).prefetched


def _cache_kept(path: str) -> bool:
    try:
        return cache_survives_open(path)
    except (OSError, ReadtraceError):
        return False


def _note_never_taken(rerun: Rerun, pid: int) -> None:
    if os.getpid() == pid:  # a forked child runs its parent's atexit handlers too
        for record in early.never_taken(rerun.strategy):
            _note(rerun, record)


@guarded("manifest write")
def _note(rerun: Rerun, record: Record) -> None:
    if rerun.manifest:
        append_manifest(rerun.manifest, [record])
