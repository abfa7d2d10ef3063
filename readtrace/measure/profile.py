"""A mount's measured profile (what ``readtrace probe`` found) and the cache of them, one per mount.

The knowledge table (fs/knowledge.py) is the prior, named by fstype; a profile is what this mount did
when read: first-byte latency, bandwidth, the per-handle penalty (N readers on ONE open file against
one fd each), whether the page cache survives an open, whether a larger read_ahead_kb changed the
time. Cached in ``runstate.cache_dir()/mount-profiles.json`` (0600, replaced atomically), keyed by
the mount's device, fstype, source and options: a remount with other options is another mount.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, fields

from readtrace import runstate
from readtrace.errors import ReadtraceError
from readtrace.fs.mounts import Mount, file_mount, read_mounts

CACHE_FILE = "mount-profiles.json"
VERSION = 1
MAX_PROFILES = 64  # the newest kept (a FUSE mount gets a new device each time it is mounted)
# own fds at least this much faster than one shared fd: the mount keeps state per open file and a
# shared handle costs (the issue's own-fd 1.39-1.50x on sshfs, 1.5x on JuiceFS)
HANDLE_PENALTY_MIN = 1.3
# N own-fd streams measured this much faster than one: readtrace's own-fd loader reads with N there
READER_STREAMS_GAIN = 1.3
# a larger read_ahead_kb must make the sequential small-read stream at least this much faster to count
READAHEAD_GAIN_MIN = 1.1


@dataclass(frozen=True)
class MountProfile:
    """What one mount did under ``readtrace probe`` (times in ms or s, bandwidths in MB/s = 10**6 B/s)."""

    # the mount (the cache key: dev, fstype, source, options)
    dev: str  # "major:minor"
    mountpoint: str
    fstype: str
    source: str
    options: str
    measured_at: str  # ISO 8601, UTC
    file: str  # the file read (never written)
    file_size: int
    sample_bytes: int  # at most this many bytes read per bandwidth test
    seconds: float  # the whole probe
    first_byte_ms: float  # median of small reads at random offsets on fresh opens, cold
    first_byte_max_ms: float
    first_byte_samples: int
    open_ms: float  # median open() of those
    sequential_mbps: float  # one stream, 1 MiB reads
    streams: int  # N of the parallel tests
    parallel_mbps: float  # N streams, each its own fd and contiguous share
    own_fd_s: float  # N readers, one fd each (the parallel test)
    shared_fd_s: float  # the same N readers taking turns on ONE open file
    handle_bytes: int  # bytes the shared / own-fd tests read each
    cache_survives_open: bool
    read_ahead_kb: int | None  # the mount's bdi read_ahead_kb (None: no bdi entry)
    max_read_kib: int | None  # the FUSE max_read mount option (None: not given: the kernel's limit)
    shared_fd_stopped: bool = False  # the shared run was stopped (8x the own fds): the penalty is a lower bound
    readahead_tried_kb: int | None = None  # the larger read_ahead_kb tried (None: not tried: not root)
    readahead_old_s: float | None = None  # sequential small reads at read_ahead_kb, then at the larger one
    readahead_new_s: float | None = None
    parallel_bytes: int | None = None  # bytes the N-stream test read (None: sample_bytes, as probes before it)

    @property
    def parallel_sample(self) -> int:
        """Bytes the N-stream rate was measured over."""
        return self.parallel_bytes or self.sample_bytes

    @property
    def handle_penalty(self) -> float:
        """Time on one shared fd / time with one fd each (1.0: sharing costs nothing)."""
        return self.shared_fd_s / self.own_fd_s if self.own_fd_s > 0 else 1.0

    @property
    def punishes_shared_handle(self) -> bool:
        return self.handle_penalty >= HANDLE_PENALTY_MIN

    @property
    def stream_gain(self) -> float:
        """N own-fd streams' rate / one stream's (1.0: unknown)."""
        return self.parallel_mbps / self.sequential_mbps if self.sequential_mbps > 0 else 1.0

    @property
    def reader_streams(self) -> int:
        """How many own-fd readers readtrace's loader uses on this mount: N where N streams measured
        >= READER_STREAMS_GAIN x one (sshfs at 20 ms: 64 MiB in 0.95 s by 4, 3.0 s by one), else 1."""
        return self.streams if self.streams > 1 and self.stream_gain >= READER_STREAMS_GAIN else 1

    def read_s(self, nbytes: int, streams: int) -> float:
        """Seconds reading ``nbytes`` in order with ``streams`` own-fd readers (1, or the probe's N) at the
        rate measured, no first byte."""
        rate = self.parallel_mbps if streams > 1 else self.sequential_mbps
        return nbytes / (rate * 1e6) if rate > 0 else math.inf

    @property
    def readahead_gain(self) -> float | None:
        """Time at the old read_ahead_kb / time at the larger one (None: not measured)."""
        if self.readahead_old_s is None or not self.readahead_new_s:
            return None
        return self.readahead_old_s / self.readahead_new_s

    @property
    def readahead_helps(self) -> bool | None:
        gain = self.readahead_gain
        return None if gain is None else gain >= READAHEAD_GAIN_MIN

    @property
    def request_kib(self) -> int | None:
        """The largest FUSE READ the kernel sends for buffered reads, where knowable: its read-ahead
        window, capped by max_read."""
        sizes = [s for s in (self.read_ahead_kb, self.max_read_kib) if s]
        return min(sizes) if sizes else None

    @property
    def date(self) -> str:
        """``2026-12-02 18:30 UTC``."""
        return f"{self.measured_at[:10]} {self.measured_at[11:16]} UTC"

    def key(self) -> tuple[str, str, str, str]:
        return self.dev, self.fstype, self.source, self.options

    def data(self) -> dict:
        return {**asdict(self), "handle_penalty": round(self.handle_penalty, 3),
                "readahead_gain": None if self.readahead_gain is None else round(self.readahead_gain, 3),
                "request_kib": self.request_kib}

    @classmethod
    def from_data(cls, data: dict) -> MountProfile:
        """From ``data()`` (derived and unknown keys are ignored); ValueError when a field is missing."""
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as e:
            raise ValueError(f"not a mount profile: {e}") from None


def mount_key(mount: Mount) -> tuple[str, str, str, str]:
    return mount.dev_name, mount.fstype, mount.source, mount.options


def cache_path(create: bool = True) -> str:
    return os.path.join(runstate.cache_dir(create), CACHE_FILE)


def load_profiles() -> list[MountProfile]:
    """Every cached profile (none when there is no cache, or one that cannot be read)."""
    try:
        with open(cache_path(create=False), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return []
    out = []
    for item in data.get("profiles", []):
        with contextlib.suppress(ValueError, AttributeError):
            out.append(MountProfile.from_data(item))
    return out


def save_profile(profile: MountProfile) -> str:
    """Cache ``profile`` (replacing the one of the same mount); returns the cache file. Writers take
    turns on a lock file; the cache is replaced whole (a reader never sees half of it)."""
    try:
        return _save(profile)
    except OSError as e:
        raise ReadtraceError(f"cannot cache the mount profile: {e.strerror or e}") from None


def _save(profile: MountProfile) -> str:
    path = cache_path()
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [p for p in load_profiles() if p.key() != profile.key()][-(MAX_PROFILES - 1):]
        body = json.dumps({"version": VERSION, "profiles": [p.data() for p in [*kept, profile]]}, indent=1)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".mount-profiles-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def cached(mount: Mount | None) -> MountProfile | None:
    """The cached profile of exactly this mount (same device, fstype, source and options), or None."""
    if mount is None:
        return None
    key = mount_key(mount)
    return next((p for p in reversed(load_profiles()) if p.key() == key), None)


def cached_for_path(path: str | os.PathLike) -> MountProfile | None:
    """The cached profile of the mount holding ``path`` (None: none, or no such file)."""
    try:
        return cached(file_mount(path))
    except OSError:
        return None


def mounted_profiles() -> list[MountProfile]:
    """The cached profiles of the mounts mounted now (what ``record`` notes in the trace's meta)."""
    profiles = load_profiles()
    if not profiles:
        return []
    try:
        keys = {mount_key(m) for m in read_mounts()}
    except OSError:
        return []
    return [p for p in profiles if p.key() in keys]


def profile_in_meta(meta: dict | None, mountpoint: str | None, fstype: str | None) -> MountProfile | None:
    """The profile a trace recorded (meta ``mount_profiles``) for the mount of a file, or None."""
    for item in (meta or {}).get("mount_profiles") or []:
        if isinstance(item, dict) and item.get("mountpoint") == mountpoint and item.get("fstype") == fstype:
            with contextlib.suppress(ValueError):
                return MountProfile.from_data(item)
    return None
