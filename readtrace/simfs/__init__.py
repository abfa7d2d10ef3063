"""The lab FUSE mount: a read-only mirror of a directory that behaves like an object-store mount.

    from readtrace.simfs import SimMount, mount
    with mount(src, mnt, profile="gcsfuse", latency_ms=20) as m:
        ...                      # read files under mnt from this or any other process
    m.requests()                 # DataFrame of every FUSE READ (ground truth)
    m.counters()                 # requests, backend_requests, seeks, bytes, modelled_wait_s, ...

The daemon always runs in a process of its own (readtrace.simfs.daemon).
"""

from readtrace.fs.mounts import force_unmount, mount_at
from readtrace.simfs.model import PROFILES
from readtrace.simfs.mount import SimMount, mount

__all__ = ["PROFILES", "SimMount", "force_unmount", "mount", "mount_at"]
