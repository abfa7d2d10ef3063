"""Measure a mount by reading a file already on it (never a write): ``probe(path) -> MountProfile``.

Each test starts cold (readtrace.pagecache.evict) and reads a bounded sample, sized from a first short
sequential read so the whole probe takes seconds, not minutes, on slow mounts too:

- first byte: small reads at random offsets, each on a fresh open (the median, and the open's own time);
- one sequential stream (1 MiB reads), then N forked readers of contiguous shares, one fd each (over
  what their rate moves in the test's time where they scale, up to N samples), each
  fd marked POSIX_FADV_SEQUENTIAL as readtrace's own readers mark theirs (the prefetch, the own-fd
  loader): on sshfs at 20 ms that doubles one stream (5.7 -> 2.95 s for 64 MiB), so without it the
  floor a fix reaches was measured as half what it is;
- the per-handle penalty: the same N readers taking turns on ONE open file (opened before the fork),
  time shared / time own (a mount keeping read-ahead state per open file makes it > 1);
- whether the page cache survives another open (readtrace.pagecache.residency.cache_survives_open);
- as root: a sequential stream of small (64 KiB) reads at the mount's read_ahead_kb and at a larger
  one (restored after, also on error).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import stat
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from readtrace.errors import InputError
from readtrace.fs.mounts import Mount, file_mount
from readtrace.measure.profile import MountProfile

MiB = 1 << 20
CHUNK = 1 * MiB
SMALL_READ = 4096  # a first-byte read
SMALL_CHUNK = 64 * 1024  # the read-ahead test's reads (what page faults and small preads ask for)
SAMPLE_BYTES = 64 * MiB  # the most one bandwidth test reads
HANDLE_BYTES = 16 * MiB  # the most the shared / own-fd tests read where the parallel test was slow
# ... and where it took less than this, they read the whole sample: JuiceFS (4 MiB blocks, 20 ms) read
# 16 MiB by 4 readers (one block each) at 1.14x shared/own, its 64 MiB at 3.0x (255 vs 42 GETs)
HANDLE_WHOLE_SAMPLE_UNDER_S = 2.5
MIN_FILE = 1 * MiB
WARMUP_BYTES = 4 * MiB
TEST_BUDGET_S = 4.0  # a bandwidth test's sample is what the first read's rate moves in this time
DEADLINE_S = 12.0  # a test still running then is stopped (its time is then a lower bound)
READAHEAD_BEFORE_S = 30.0  # a probe slower than this so far leaves the read_ahead_kb test out (<= 60 s in all)
FIRST_BYTE_SAMPLES = 8
STREAMS = 4
REPEAT_UNDER_S = 1.0  # compared runs this short are repeated (in turns) and the fastest kept
REPEATS = 5
STOP_SHARED_AFTER = 8.0
WALK_LIMIT = 100_000  # directory entries looked at to find the largest file


def largest_file(path: str | os.PathLike) -> str:
    """``path`` itself when it is a regular file, else the largest regular file below it (same file
    system, symlinks not followed); InputError when there is none of at least 1 MiB."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"probe: cannot read {path}: {e.strerror or e}") from None
    if stat.S_ISREG(st.st_mode):
        best = (st.st_size, path)
    elif stat.S_ISDIR(st.st_mode):
        best = _largest_below(path, st.st_dev)
    else:
        raise InputError(f"probe: {path} is neither a regular file nor a directory")
    if best[0] < MIN_FILE:
        raise InputError(f"probe: no file of at least 1 MiB to read at {path} (the probe reads one, never writes)")
    return best[1]


def _largest_below(root: str, dev: int) -> tuple[int, str]:
    best, seen, todo = (0, root), 0, [root]
    while todo and seen < WALK_LIMIT:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                seen += 1
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if st.st_dev != dev:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
                    elif stat.S_ISREG(st.st_mode) and st.st_size > best[0]:
                        best = (st.st_size, entry.path)
    return best


def read_shares(path: str | os.PathLike, workers: int, shared: bool, chunk: int = CHUNK,
                limit: int | None = None, deadline_s: float | None = None, advise: bool = False) -> float:
    """Seconds for ``workers`` forked readers to pread their contiguous shares of ``path`` (of its
    first ``limit`` bytes), through ONE open file opened before the fork (``shared``) or one each
    (``advise``: each marked POSIX_FADV_SEQUENTIAL). Readers still running after ``deadline_s`` are
    killed: the time is then a lower bound."""
    size = min(os.path.getsize(path), limit or os.path.getsize(path))
    share = -(-size // workers)
    fd = os.open(path, os.O_RDONLY) if shared else -1
    started = time.perf_counter()
    children = []
    try:
        for i in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: read [lo, hi) in order, then leave without running any cleanup
                code = 0
                try:
                    own = fd if shared else os.open(path, os.O_RDONLY)
                    if advise and not shared:
                        os.posix_fadvise(own, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                    offset, hi = i * share, min(size, (i + 1) * share)
                    while offset < hi:
                        got = os.pread(own, min(chunk, hi - offset), offset)
                        if not got:
                            break
                        offset += len(got)
                except BaseException:
                    code = 1
                os._exit(code)
            children.append(pid)
        failed = _wait_all(children, None if deadline_s is None else started + deadline_s)
    finally:
        for pid in children:  # after an error or the deadline: none outlives the call
            with contextlib.suppress(ChildProcessError, ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        if shared:
            os.close(fd)
    seconds = time.perf_counter() - started
    if failed:
        raise OSError(f"{failed} reader(s) of {path} failed")
    return seconds


def _wait_all(children: list[int], deadline: float | None) -> int:
    """Reap the readers (until ``deadline``); how many failed. Reaped ones leave ``children``."""
    failed = 0
    while children:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG if deadline is not None else 0)
            if done:
                children.remove(pid)
                failed += os.waitstatus_to_exitcode(status) != 0
        if children and deadline is not None:
            if time.perf_counter() >= deadline:
                return failed  # the caller kills the rest
            time.sleep(0.005)
    return failed


def _cold(path: str) -> None:
    from readtrace.pagecache.evict import evict

    evict([path])


def _timed(path: str, workers: int, shared: bool, limit: int, chunk: int = CHUNK,
           deadline_s: float = DEADLINE_S, advise: bool = False) -> float:
    _cold(path)
    return read_shares(path, workers, shared, chunk=chunk, limit=limit, deadline_s=deadline_s, advise=advise)


def _pair(first, second, a: float | None = None) -> tuple[float, float]:
    """Two timed runs to compare (``a``: the first's time, already measured): once each, and where
    both took under REPEAT_UNDER_S again in turns, keeping each one's fastest (short runs on a busy
    machine are noisy)."""
    a, b = first() if a is None else a, second()
    for _ in range(REPEATS - 1):
        if max(a, b) >= REPEAT_UNDER_S:
            break
        a, b = min(a, first()), min(b, second())
    return a, b


def first_byte(path: str, size: int, samples: int = FIRST_BYTE_SAMPLES) -> tuple[list[float], list[float]]:
    """(read ms, open ms) of ``samples`` small reads at random offsets, each cold on a fresh open."""
    rng = random.Random()  # other offsets each probe: a daemon's own cache may hold the last ones
    reads, opens = [], []
    for _ in range(samples):
        offset = rng.randrange(0, max(size - SMALL_READ, 1)) // SMALL_READ * SMALL_READ
        _cold(path)
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        t1 = time.perf_counter()
        try:
            os.pread(fd, SMALL_READ, offset)
            t2 = time.perf_counter()
        finally:
            os.close(fd)
        opens.append((t1 - t0) * 1e3)
        reads.append((t2 - t1) * 1e3)
    return reads, opens


def _max_read_kib(mount: Mount) -> int | None:
    for option in mount.options.replace(";", ",").split(","):
        name, _, value = option.partition("=")
        if name == "max_read" and value.isdigit():
            return int(value) // 1024
    return None


def _knob(mount: Mount) -> Path:
    return Path(f"/sys/class/bdi/{mount.dev_name}/read_ahead_kb")


def _read_ahead_kb(mount: Mount) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(_knob(mount).read_text())
    return None


@contextlib.contextmanager
def read_ahead(mount: Mount, kb: int):
    """The mount's read_ahead_kb set to ``kb`` inside the block, the old value back after (also on
    error). Yields False (and changes nothing) where it cannot be set: not root, no bdi, read-only /sys."""
    knob = _knob(mount)
    old = _read_ahead_kb(mount)
    if old is None or os.geteuid() != 0:
        yield False
        return
    try:
        knob.write_text(str(int(kb)))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        knob.write_text(str(old))


def _sample(path: str, size: int, cap: int) -> tuple[int, float]:
    """(bytes one bandwidth test reads, the warm-up's MB/s): what the first read's rate moves in
    TEST_BUDGET_S, between 4 MiB and ``cap`` (and the file)."""
    warm = min(size, WARMUP_BYTES)
    seconds = _timed(path, 1, False, warm)
    rate = warm / max(seconds, 1e-6)
    return int(min(size, cap, max(WARMUP_BYTES, rate * TEST_BUDGET_S))) // CHUNK * CHUNK or size, rate / 1e6


def probe(path: str | os.PathLike, *, streams: int = STREAMS, sample_bytes: int = SAMPLE_BYTES,
          handle_bytes: int = HANDLE_BYTES, try_readahead: bool = True, say=None) -> MountProfile:
    """Measure the mount holding ``path`` (a file, or a directory: its largest file) by reading it."""
    say = say or (lambda _msg: None)
    started = time.perf_counter()
    target = largest_file(path)
    mount = file_mount(target)
    if mount is None:
        raise InputError(f"probe: no mount found for {target}")
    size = os.path.getsize(target)
    try:
        say(f"probe: {target} ({size / MiB:.0f} MiB) on {mount.mountpoint} ({mount.fstype})")
        reads, opens = first_byte(target, size)
        sample, warm_mbps = _sample(target, size, sample_bytes)
        say(f"probe: first byte {statistics.median(reads):.1f} ms; samples of {sample / MiB:.0f} MiB "
            f"(warm-up {warm_mbps:.0f} MB/s)")
        # the rates readtrace's own readers get (fadvised); the handle and read-ahead tests read as loads do
        sequential = _timed(target, 1, False, sample, advise=True)
        parallel_bytes, parallel = _parallel_rate(target, size, streams, sample, sample_bytes)
        # a fast mount's short runs are all noise, and a block store's penalty needs several blocks per
        # reader: there the handle test reads the whole sample
        handle = sample if parallel * sample / parallel_bytes < HANDLE_WHOLE_SAMPLE_UNDER_S else min(sample, handle_bytes)
        own = _timed(target, streams, False, handle)
        # a shared handle slower than STOP_SHARED_AFTER x the own fds is stopped there: penalty >= that
        cap = min(max(own * STOP_SHARED_AFTER, REPEAT_UNDER_S), DEADLINE_S)
        own, shared = _pair(lambda: _timed(target, streams, False, handle),
                            lambda: _timed(target, streams, True, handle, deadline_s=cap), own)
        survives = _survives(target)
        ra_kb = _read_ahead_kb(mount)
        tried, old_s, new_s = _readahead_test(target, mount, ra_kb, sample) \
            if try_readahead and ra_kb is not None and time.perf_counter() - started < READAHEAD_BEFORE_S \
            else (None, None, None)
    except OSError as e:
        raise InputError(f"probe: cannot read {target}: {e.strerror or e}") from None
    return MountProfile(
        dev=mount.dev_name, mountpoint=mount.mountpoint, fstype=mount.fstype, source=mount.source,
        options=mount.options, measured_at=datetime.now(UTC).isoformat(timespec="seconds"), file=target,
        file_size=size, sample_bytes=sample, seconds=round(time.perf_counter() - started, 3),
        first_byte_ms=round(statistics.median(reads), 3), first_byte_max_ms=round(max(reads), 3),
        first_byte_samples=len(reads), open_ms=round(statistics.median(opens), 3),
        sequential_mbps=round(sample / sequential / 1e6, 2), streams=streams,
        parallel_mbps=round(parallel_bytes / parallel / 1e6, 2), parallel_bytes=parallel_bytes, own_fd_s=round(own, 4), shared_fd_s=round(shared, 4),
        handle_bytes=handle, cache_survives_open=survives, read_ahead_kb=ra_kb, max_read_kib=_max_read_kib(mount),
        readahead_tried_kb=tried, readahead_old_s=old_s, readahead_new_s=new_s)


def _parallel_rate(path: str, size: int, streams: int, sample: int, cap: int) -> tuple[int, float]:
    """(bytes, seconds) of ``streams`` fadvised own-fd readers: first over the one-stream sample, and
    where that ended in under half of TEST_BUDGET_S again over what their rate moves in TEST_BUDGET_S
    (at most ``cap`` per stream and the file). N streams that scale finish the one-stream sample
    before their read-ahead has grown: sshfs at 20 ms, 60 MB/s over 38 MiB where 256 MiB read by the
    own-fd loader's 4 streams went at ~80 MB/s, so the fixed loads were predicted 36-40 % slow."""
    seconds = _timed(path, streams, False, sample, advise=True)
    if seconds >= TEST_BUDGET_S / 2:
        return sample, seconds
    larger = int(min(size, cap * streams, sample / max(seconds, 1e-6) * TEST_BUDGET_S)) // CHUNK * CHUNK
    if larger < 1.5 * sample:
        return sample, seconds
    return larger, _timed(path, streams, False, larger, advise=True)


def _survives(path: str) -> bool:
    from readtrace.pagecache.residency import cache_survives_open

    _cold(path)
    return cache_survives_open(path)


def _readahead_test(path: str, mount: Mount, old_kb: int, nbytes: int
                    ) -> tuple[int | None, float | None, float | None]:
    """(the larger read_ahead_kb tried, seconds at the old value, seconds at the larger one) of one
    sequential stream of 64 KiB reads; (None, None, None) where it cannot be set."""
    larger = max(1024, 4 * old_kb)

    def at(kb: int) -> float:
        with read_ahead(mount, kb) as changed:
            if not changed:
                raise _CannotSet
            return _timed(path, 1, False, nbytes, SMALL_CHUNK)

    try:
        before, after = _pair(lambda: at(old_kb), lambda: at(larger))
    except _CannotSet:
        return None, None, None
    return larger, round(before, 4), round(after, 4)


class _CannotSet(Exception):
    """read_ahead_kb cannot be set here."""
