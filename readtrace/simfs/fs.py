"""The lab file system: a read-only passthrough of SRC whose reads pay the modelled backend cost.

Runs only inside the daemon process (readtrace.simfs.daemon). Reads are served by mfusepy's
multithreaded libfuse3 loop; each request sleeps its modelled time in its own thread so the wall
clock of the reading program shows it.

Access: the mount shows SRC's owners and modes and the kernel enforces them (default_permissions);
the mount's root keeps group/other bits only when everyone can reach SRC (a 0700 parent of SRC stays
closed through the mount). Only regular files, directories and symlinks are served: a FIFO, socket
or device in SRC is invisible (opening one would block or reach the device as root).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field

from readtrace.simfs._fuse3 import mfusepy
from readtrace.simfs.config import SimConfig
from readtrace.simfs.link import Link, SharedLink
from readtrace.simfs.log import RequestLog
from readtrace.simfs.model import PROFILES, HandleReader, Plan, stateless_plan

FUSE_CAP_ASYNC_READ = 1 << 0
SERVED = (stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK)
STAT_KEYS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns",
             "st_ctime_ns", "st_blocks", "st_blksize")


@dataclass
class Handle:
    """One open of a file through the mount (what the kernel calls fh)."""

    fd: int
    path: str
    reader: HandleReader
    path_json: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Backend:
    """The modelled remote store: first-byte latency, a link of finite bandwidth (this mount's own, or
    one shared with other lab mounts: readtrace.simfs.link) and a limit on concurrent backend
    requests. ``serve`` sleeps the modelled time and returns it."""

    def __init__(self, config: SimConfig):
        self.first_byte_s = config.first_byte_s
        self.bytes_per_s = config.bytes_per_s
        self.slots = threading.BoundedSemaphore(config.max_backend)
        self.link = None
        if self.bytes_per_s is not None:
            self.link = SharedLink(config.shared_link, self.bytes_per_s) if config.shared_link \
                else Link(self.bytes_per_s)

    @property
    def free(self) -> bool:
        return self.first_byte_s == 0 and self.bytes_per_s is None

    def serve(self, plan: Plan) -> float:
        if self.free or (not plan.new_request and self.link is None):
            return 0.0
        with self.slots:
            now = time.monotonic()
            ready = now + (self.first_byte_s if plan.new_request else 0.0)
            if self.link is not None:
                ready = self.link.reserve(ready, plan.transfer_bytes)
            time.sleep(max(0.0, ready - now))
            return ready - now

    def close(self) -> None:
        if self.link is not None:
            self.link.close()


class SimFS(mfusepy.Operations):
    """Read-only mirror of ``config.src`` with a per-handle (or stateless) cost model."""

    use_ns = True

    def __init__(self, config: SimConfig, log: RequestLog, on_ready=None):
        self.config = config
        self.root = os.path.realpath(config.src)
        self.profile = PROFILES[config.profile]
        self.log = log
        self.backend = Backend(config)
        self.handles: dict[int, Handle] = {}
        self._next_fh = itertools.count(1)
        self._on_ready = on_ready
        self._counter_lock = threading.Lock()
        self.counters = {"requests": 0, "bytes": 0, "backend_requests": 0, "seeks": 0,
                         "modelled_wait_s": 0.0, "opens": 0, "random_handles": 0}

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _root_mask(self) -> int:
        """Mode bits the mount's root may keep: group/other ones only when others can reach SRC."""
        parent = os.path.dirname(self.root)
        while parent and parent != os.sep:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return ~0o077
            parent = os.path.dirname(parent)
        return ~0

    # --- lifecycle -------------------------------------------------------------------------------
    def init_with_config(self, conn_info, config_3) -> None:
        if conn_info is not None:
            # libfuse3 checks that init agrees with the max_read mount option.
            conn_info.max_read = self.config.max_read_kib * 1024
            conn_info.max_readahead = self.config.max_read_kib * 1024 * 32
            if self.profile.async_read:
                conn_info.want |= FUSE_CAP_ASYNC_READ & conn_info.capable
            else:
                conn_info.want &= ~FUSE_CAP_ASYNC_READ
        if config_3 is not None:
            # A read-only mirror: let the kernel cache attributes and names for a while.
            config_3.attr_timeout = config_3.entry_timeout = 60.0
            config_3.use_ino = 1
        if self._on_ready is not None:
            self._on_ready()

    def destroy(self, path: str) -> None:
        still_open = sum(h.reader.mode == "random" for h in self.handles.values())
        with self._counter_lock:
            final = {**self.counters, "modelled_wait_s": round(self.counters["modelled_wait_s"], 6),
                     "random_handles": self.counters["random_handles"] + still_open}
        self.log.write("counters", **final)

    # --- metadata --------------------------------------------------------------------------------
    def getattr(self, path: str, fh=None) -> dict:
        try:
            st = os.lstat(self._real(path))
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno) from None
        if not any(kind(st.st_mode) for kind in SERVED):
            raise mfusepy.FuseOSError(errno.ENOENT)
        attrs = {key.replace("_ns", ""): getattr(st, key) for key in STAT_KEYS}
        attrs["st_mode"] &= ~0o222  # read-only mirror
        if path == "/":
            attrs["st_mode"] &= self._root_mask()
        return attrs

    def readdir(self, path: str, fh) -> list:
        # With use_ino the inode numbers must be real: readdir(3) hides entries whose d_ino is 0.
        try:
            with os.scandir(self._real(path)) as entries:
                stats = [(e, e.stat(follow_symlinks=False)) for e in entries]
                names = [(e.name, {"st_mode": st.st_mode, "st_ino": e.inode()}, 0) for e, st in stats
                         if any(kind(st.st_mode) for kind in SERVED)]
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno) from None
        return [".", "..", *names]

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict:
        st = os.statvfs(self.root)
        return {key: getattr(st, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_namemax")}

    # --- files -----------------------------------------------------------------------------------
    def open(self, path: str, fi) -> int:
        if fi.flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise mfusepy.FuseOSError(errno.EROFS)
        try:  # never block on a FIFO swapped in since getattr, never follow a symlink as root
            fd = os.open(self._real(path), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise mfusepy.FuseOSError(errno.EACCES)
        fh = next(self._next_fh)
        self.handles[fh] = Handle(fd, path, HandleReader(os.fstat(fd).st_size), json.dumps(path))
        fi.fh = fh
        fi.keep_cache = int(self.config.keep_cache)
        with self._counter_lock:
            self.counters["opens"] += 1
        self.log.write("open", fh=fh, pid=mfusepy.fuse_get_context()[2], path=path)
        return 0

    def release(self, path: str, fi) -> int:
        fh = fi.fh
        handle = self.handles.pop(fh, None)
        if handle is not None:
            os.close(handle.fd)
            with self._counter_lock:
                self.counters["random_handles"] += handle.reader.mode == "random"
            self.log.write("release", fh=fh, path=handle.path)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        """mfusepy's plain read (registers the callback; ZeroCopyFUSE routes it to ``readinto``)."""
        buf = ctypes.create_string_buffer(size)
        return buf.raw[: self.readinto(fh, buf, size, offset)]

    def readinto(self, fh: int, buf, size: int, offset: int) -> int:
        """Serve one FUSE READ into the kernel's buffer: model, sleep, then pread into ``buf``."""
        handle = self.handles[fh]
        pid = mfusepy.fuse_get_context()[2]
        arrived = time.monotonic()
        if self.profile.per_handle:
            with handle.lock:  # gcsfuse serialises reads of one handle
                plan = handle.reader.plan(offset, size)
                cost = self.backend.serve(plan)
                returned = _pread_into(handle.fd, buf, size, offset)
        else:
            plan = stateless_plan(offset, size)
            cost = self.backend.serve(plan)
            returned = _pread_into(handle.fd, buf, size, offset)
        wait = time.monotonic() - arrived
        with self._counter_lock:
            c = self.counters
            c["requests"] += 1
            c["bytes"] += returned
            c["backend_requests"] += plan.new_request
            c["seeks"] += plan.seek
            c["modelled_wait_s"] += cost
        self.log.write_read(fh, pid, handle.path_json, offset, size, returned, plan.new_request, plan.seek,
                            plan.mode, plan.range_end, cost, wait)
        return returned


def _pread_into(fd: int, buf, size: int, offset: int) -> int:
    """pread straight into libfuse's buffer (no intermediate bytes object)."""
    target = (ctypes.c_char * size).from_address(ctypes.cast(buf, ctypes.c_void_p).value)
    return os.preadv(fd, [target], offset)


class ZeroCopyFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with a read callback that fills the kernel buffer in place; mfusepy's own
    ``read`` returns bytes and copies them once more."""

    def read(self, path, buf, size: int, offset: int, fip) -> int:
        return self.operations.readinto(fip.contents.fh, buf, size, offset)
