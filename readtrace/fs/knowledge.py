"""What each file system does with a shared file handle: the one table findings consult."""

from __future__ import annotations

from dataclasses import dataclass


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
