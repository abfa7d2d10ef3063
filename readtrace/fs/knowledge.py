"""What each file system does: the one table of file-system knowledge (findings, the fix, eviction).

Per fstype: whether reads on one open file form a stream the client/daemon keeps state for, whether a
miss pays a network or daemon round trip ("remote": the fix prefetches there), and its levers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from readtrace.fs.mounts import file_mount, is_fuse


@dataclass(frozen=True)
class FsProfile:
    """How a file system reacts to the read pattern on one open file."""

    family: str  # short name used in messages
    per_handle_stream: bool  # the daemon/client keeps read-ahead state per open file
    remote: bool  # every miss pays a network / daemon round trip
    levers: str  # file-system specific knobs, named in recommendations


_GCSFUSE = FsProfile(
    "gcsfuse", True, True,
    "gcsfuse: --file-cache-max-size-mb with --file-cache-cache-file-for-range-read, "
    "--sequential-read-size-mb, --enable-buffered-read")
_RCLONE = FsProfile(
    "rclone", True, True,
    "rclone mount: --vfs-cache-mode full, --vfs-read-chunk-size, --buffer-size")
_HF = FsProfile("hf-mount", True, True, "hf-mount: enable its local cache / prefetch")
_LUSTRE = FsProfile("lustre", True, True, "lustre: llite.*.max_read_ahead_mb, max_read_ahead_per_file_mb")
_NFS = FsProfile("nfs", True, True, "nfs: rsize=1048576 and read_ahead_kb of the NFS bdi")
_FUSE = FsProfile("fuse", True, True, "the FUSE daemon's read-ahead / chunk-size options")
_SSHFS = FsProfile("sshfs", False, True, "sshfs: -o max_read, -o cache=yes")
_LOCAL = FsProfile("local", False, False, "read_ahead_kb of the block device")
_MEMORY = FsProfile("memory", False, False, "the file lives in memory: nothing to tune")
# Kernel network clients keep read-ahead per open file, as NFS does.
_CIFS = FsProfile("cifs", True, True, "cifs/smb3: rsize=, the read_ahead_kb of the mount's bdi")
_CEPH = FsProfile("ceph", True, True, "cephfs: rasize=, rsize=")
_NETWORK = FsProfile("network", True, True, "the client's read-ahead and request-size options")
_VIRTIOFS = FsProfile("virtiofs", False, True, "virtiofs: the host daemon's cache mode (virtiofsd --cache=always), DAX")
_9P = FsProfile("9p", False, True, "9p: msize=, cache=loose or fscache")
# The lab mount (readtrace simfs) names its cost model in the subtype: fuse.simfs-<profile>.
_SIM = "readtrace simfs: --max-read-kib, the kernel's FUSE read_ahead_kb"
_SIM_GCSFUSE = FsProfile("simfs-gcsfuse", True, True, _SIM)
_SIM_NFS = FsProfile("simfs-nfs", False, True, _SIM)
_SIM_LOCAL = FsProfile("simfs-local", False, False, _SIM)

# Matched in order: exact names first, then prefixes. Unknown types are treated as local.
FS_TABLE: tuple[tuple[str, FsProfile], ...] = (
    ("fuse.gcsfuse", _GCSFUSE), ("gcsfuse", _GCSFUSE),
    ("fuse.rclone", _RCLONE), ("rclone", _RCLONE),
    ("fuse.hf-mount", _HF), ("hf-mount", _HF), ("fuse.hf_mount", _HF),
    ("fuse.sshfs", _SSHFS), ("sshfs", _SSHFS),
    ("fuse.simfs-gcsfuse", _SIM_GCSFUSE), ("fuse.simfs-nfs", _SIM_NFS), ("fuse.simfs-local", _SIM_LOCAL),
    ("lustre", _LUSTRE),
    ("nfs", _NFS), ("nfs4", _NFS),
    ("cifs", _CIFS), ("smb3", _CIFS), ("ceph", _CEPH), ("virtiofs", _VIRTIOFS), ("9p", _9P),
    ("glusterfs", _NETWORK), ("beegfs", _NETWORK), ("gpfs", _NETWORK), ("wekafs", _NETWORK),
    ("tmpfs", _MEMORY), ("ramfs", _MEMORY), ("hugetlbfs", _MEMORY),
    ("fuse", _FUSE),  # fuse, fuse.<anything else>, fuseblk: generic FUSE daemon (the lab simfs too)
)
LOCAL = _LOCAL


def fs_profile(fstype: str | None) -> FsProfile:
    """The profile of a mount's fstype (``fuse.gcsfuse``, ``nfs4``, ``ext4`` ...)."""
    name = (fstype or "").strip().lower()
    for key, profile in FS_TABLE:
        if name == key:
            return profile
    for key, profile in FS_TABLE:
        if name.startswith(key):
            return profile
    return LOCAL


def is_remote(path: str | os.PathLike) -> bool:
    """On a file system where every miss pays a network or daemon round trip (False when it cannot
    be told)."""
    try:
        mount = file_mount(path)
    except OSError:
        return False
    return mount is not None and fs_profile(mount.fstype).remote


def cold_cache_caveat(fstype: str) -> str | None:
    """Why dropping the kernel page cache may not make a file on ``fstype`` cold (None: it does)."""
    if is_fuse(fstype):
        return (f"{fstype}: the FUSE daemon may keep its own cache (gcsfuse file cache, rclone VFS cache) "
                "that posix_fadvise cannot evict; only the kernel page cache was dropped")
    profile = fs_profile(fstype)
    if profile.remote:
        return f"{fstype}: server-side caches cannot be evicted from this machine"
    if profile is _MEMORY:
        return f"{fstype}: the file lives in memory and cannot be made cold"
    return None
