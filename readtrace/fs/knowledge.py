"""What each file system does: the one table of file-system knowledge (findings, the fix, eviction).

Per fstype: whether reads on one open file form a stream the client/daemon keeps state for, whether a
miss pays a network or daemon round trip ("remote": the fix prefetches there), and its levers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from readtrace.fs.mounts import file_mount, is_fuse


@dataclass(frozen=True)
class FsProfile:
    """How a file system reacts to the read pattern on one open file.

    ``per_handle_stream``: the client keeps read-ahead / sequential-stream state per open file, so
    several tasks taking turns on ONE handle make it see random reads (SHARED_FD_INTERLEAVE costs).
    ``keeps_page_cache``: the kernel page cache of a file survives a new open() (the daemon replies
    FOPEN_KEEP_CACHE), so a prefetch before the loader's own open helps; None: not known.
    ``known``: False for the generic entry of a FUSE daemon the table does not name.
    ``source``: where the judgement comes from (source code read, or measured by the lab harness, lab/ in the repository).
    ``storage_model``: the what-if profile of readtrace/analyze/storage/whatif.py for this file system (None:
    none models it; ``report --what-if mount`` then says so).
    """

    family: str  # short name used in messages
    per_handle_stream: bool
    remote: bool  # every miss pays a network / daemon round trip
    levers: str  # file-system specific knobs, named in recommendations
    keeps_page_cache: bool | None = None
    known: bool = True
    source: str = ""
    storage_model: str | None = None  # the what-if model (readtrace/analyze/storage/whatif.py) that replays it


# Measured with benchmarks/compat_matrix.py and tests/compat/test_knowledge.py (lab.handles: 4 forked readers of
# contiguous quarters, one shared fd vs one fd each, cold, backend requests counted by the server)
# and readtrace.pagecache.residency.cache_survives_open; see docs/compatibility.md.
_MEASURED = "measured (docs/compatibility.md)"
_GCSFUSE = FsProfile(
    "gcsfuse", True, True,
    "gcsfuse: --file-cache-max-size-mb with --file-cache-cache-file-for-range-read, "
    "--sequential-read-size-mb, --enable-buffered-read", keeps_page_cache=True,
    source="gcsfuse internal/gcsx/random_reader.go: one reader per handle, random after 2 seeks; "
           "kernel cache kept (docs/simfs.md)", storage_model="gcsfuse")
_RCLONE = FsProfile(
    "rclone", True, True,
    "rclone mount: --vfs-cache-mode full, --vfs-read-chunk-size, --buffer-size", keeps_page_cache=False,
    source="rclone vfs ChunkedReader per handle; measured (shared/ENVIRONMENT.md: 130 s shared vs 2 s own)", storage_model="rclone")
_MOUNTPOINT_S3 = FsProfile(
    "mountpoint-s3", True, True,
    "mountpoint-s3: --cache DIR, --max-threads, --part-size (prefetcher window per open file)",
    keeps_page_cache=False,
    source="mountpoint-s3 prefetcher: one sequential prefetch stream per open file handle, reset by seeks", storage_model="mountpoint-s3")
_HF = FsProfile("hf-mount", True, True, "hf-mount: enable its local cache / prefetch", storage_model="hf-mount")
_LUSTRE = FsProfile("lustre", True, True, "lustre: llite.*.max_read_ahead_mb, max_read_ahead_per_file_mb",
                    keeps_page_cache=True, storage_model="lustre")
_NFS = FsProfile("nfs", True, True, "nfs: rsize=1048576 and read_ahead_kb of the NFS bdi", keeps_page_cache=True, storage_model="nfs")
_SSHFS = FsProfile(
    "sshfs", False, True, "sshfs: -o max_read=1048576, -o kernel_cache (keep the page cache across opens)",
    keeps_page_cache=False,
    source="sshfs: SFTP reads per request, no per-handle stream; " + _MEASURED, storage_model="nfs")
_S3FS = FsProfile(
    "s3fs", False, True,
    "s3fs: -o multipart_size, -o parallel_count (ranged GETs per file), -o use_cache=DIR, -o kernel_cache",
    keeps_page_cache=False,
    source="s3fs fdcache: one FdEntity per path shared by every handle, parallel ranged GETs; " + _MEASURED)
_HTTPDIRFS = FsProfile(
    "httpdirfs", False, True,
    "httpdirfs: --cache (its own disk cache); raise the mount's read_ahead_kb (one Range request per "
    "FUSE READ, served one at a time)", keeps_page_cache=False,
    source="httpdirfs: one Range request per FUSE READ, no per-handle state; " + _MEASURED)
_BINDFS = FsProfile("bindfs", False, False, "bindfs: a passthrough; the backing file system's own read-ahead",
                    keeps_page_cache=False, source="bindfs passes each read through; " + _MEASURED, storage_model="local-nvme")
_JUICEFS = FsProfile(
    "juicefs", True, True,
    "juicefs mount: --prefetch (blocks read ahead per open file), --buffer-size, --max-downloads, "
    "--cache-size / --cache-dir (its local block cache)", keeps_page_cache=True,
    source="JuiceFS vfs reader: read-ahead sessions per open file over 4 MiB blocks; " + _MEASURED)
# (no storage model named: a probe of the mount picks it, whatif.measured_model)
_SQUASHFUSE = FsProfile(
    "squashfuse", False, False,
    "squashfuse: a local image decompressed in the daemon; keep the image in the page cache, or mount it "
    "with the kernel's squashfs (mount -t squashfs -o loop)", keeps_page_cache=True,
    source="squashfuse reads blocks of a local image, no per-handle state; " + _MEASURED, storage_model="local-nvme")
_FUSE = FsProfile("fuse", True, True, "the FUSE daemon's read-ahead / chunk-size options", known=False)
_LOCAL = FsProfile("local", False, False, "read_ahead_kb of the block device", keeps_page_cache=True, storage_model="local-nvme")
_MEMORY = FsProfile("memory", False, False, "the file lives in memory: nothing to tune")
# Kernel network clients keep read-ahead per open file, as NFS does.
_CIFS = FsProfile("cifs", True, True, "cifs/smb3: rsize=, the read_ahead_kb of the mount's bdi")
_CEPH = FsProfile("ceph", True, True, "cephfs: rasize=, rsize=")
_NETWORK = FsProfile("network", True, True, "the client's read-ahead and request-size options")
_VIRTIOFS = FsProfile("virtiofs", False, True, "virtiofs: the host daemon's cache mode (virtiofsd --cache=always), DAX")
_9P = FsProfile("9p", False, True, "9p: msize=, cache=loose or fscache")
# The lab mount (readtrace simfs) names its cost model in the subtype: fuse.simfs-<profile>.
_SIM = "readtrace simfs: --max-read-kib, the kernel's FUSE read_ahead_kb"
_SIM_GCSFUSE = FsProfile("simfs-gcsfuse", True, True, _SIM, source="readtrace/simfs/model.py", storage_model="gcsfuse")
_SIM_NFS = FsProfile("simfs-nfs", False, True, _SIM, source="readtrace/simfs/model.py", storage_model="nfs")
_SIM_LOCAL = FsProfile("simfs-local", False, False, _SIM, source="readtrace/simfs/model.py", storage_model="local-nvme")

# Matched in order: exact names first, then prefixes. Unknown non-FUSE types are treated as local;
# a FUSE daemon the table does not name gets the generic (known=False) FUSE entry.
FS_TABLE: tuple[tuple[str, FsProfile], ...] = (
    ("fuse.gcsfuse", _GCSFUSE), ("gcsfuse", _GCSFUSE),
    ("fuse.rclone", _RCLONE), ("rclone", _RCLONE),
    ("fuse.mountpoint-s3", _MOUNTPOINT_S3), ("fuse.mount-s3", _MOUNTPOINT_S3),
    ("fuse.hf-mount", _HF), ("hf-mount", _HF), ("fuse.hf_mount", _HF),
    ("fuse.sshfs", _SSHFS), ("sshfs", _SSHFS),
    ("fuse.s3fs", _S3FS), ("fuse.httpdirfs", _HTTPDIRFS), ("fuse.bindfs", _BINDFS),
    ("fuse.juicefs", _JUICEFS), ("fuse.squashfuse", _SQUASHFUSE), ("fuse.squashfuse_ll", _SQUASHFUSE),
    ("fuse.simfs-gcsfuse", _SIM_GCSFUSE), ("fuse.simfs-nfs", _SIM_NFS), ("fuse.simfs-local", _SIM_LOCAL),
    ("lustre", _LUSTRE),
    ("nfs", _NFS), ("nfs4", _NFS),
    ("cifs", _CIFS), ("smb3", _CIFS), ("ceph", _CEPH), ("virtiofs", _VIRTIOFS), ("9p", _9P),
    ("glusterfs", _NETWORK), ("beegfs", _NETWORK), ("gpfs", _NETWORK), ("wekafs", _NETWORK),
    ("tmpfs", _MEMORY), ("ramfs", _MEMORY), ("hugetlbfs", _MEMORY),
    ("fuse", _FUSE),  # fuse, fuse.<anything else>, fuseblk: a FUSE daemon the table does not know
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
