"""Mount a directory read-only through the lab FUSE file system that behaves like an object store.

Every read pays what the chosen profile charges: `gcsfuse` keeps one stream per open file handle
(continuing reads cost only bandwidth, a jump costs a first-byte latency and a new ranged request,
a handle that keeps jumping turns "random"), `nfs` charges every request the same whoever sends it,
`local` charges nothing. The daemon logs every FUSE READ as a JSON line (--log) and prints its
counters on unmount.

examples:
  readtrace simfs /data/ckpt /mnt/lab --latency-ms 20        # foreground; Ctrl-C unmounts
  readtrace simfs /data/ckpt /mnt/lab --daemon --log reads.jsonl
  readtrace simfs --unmount /mnt/lab
  readtrace simfs /bucket /mnt/n0 --daemon --bandwidth-mbps 100 --shared-bandwidth lab   # two "nodes",
  readtrace simfs /bucket /mnt/n1 --daemon --bandwidth-mbps 100 --shared-bandwidth lab   # one 100 MB/s link
"""

from __future__ import annotations

import json
import os
import signal
import sys

from readtrace.errors import ExitStatus, InputError, UsageError
from readtrace.simfs.config import RANGES
from readtrace.simfs.model import PROFILES
from readtrace.validate import arg


def add_arguments(parser) -> None:
    parser.add_argument("src", nargs="?", help="directory to mirror (read-only)")
    parser.add_argument("mountpoint", nargs="?", metavar="MNT", help="empty directory to mount on")
    parser.add_argument("--profile", choices=list(PROFILES), default="gcsfuse", help="cost model (default gcsfuse)")
    parser.add_argument("--latency-ms", type=arg(RANGES["latency_ms"]), default=20.0, help="first-byte latency per backend request")
    parser.add_argument("--bandwidth-mbps", type=arg(RANGES["bandwidth_mbps"]), default=None,
                        help="link bandwidth in MB/s (10^6 bytes/s); default unlimited")
    parser.add_argument("--max-read-kib", type=arg(RANGES["max_read_kib"]), default=1024, help="largest FUSE READ (kernel max_read)")
    parser.add_argument("--readahead-kib", type=arg(RANGES["readahead_kib"]), default=None,
                        help="set the mount's read_ahead_kb (root only); default: the kernel's 128")
    parser.add_argument("--max-backend", type=arg(RANGES["max_backend"]), default=64, help="concurrent backend requests")
    parser.add_argument("--shared-bandwidth", metavar="NAME", default=None,
                        help="share --bandwidth-mbps with every lab mount given the same NAME (one file system "
                             "seen by several nodes)")
    parser.add_argument("--keep-cache", action="store_true", help="keep the page cache across opens")
    parser.add_argument("--log", help="request log (JSON lines); default a new file in /tmp")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --log file")
    parser.add_argument("--daemon", action="store_true", help="return once mounted, leave the daemon running")
    parser.add_argument("--unmount", metavar="MNT", help="unmount a simfs mount and exit")


def run(args) -> int:
    from readtrace.simfs import mount

    if args.unmount:
        return unmount(args.unmount)
    if not args.src or not args.mountpoint:
        raise UsageError("simfs needs SRC and MNT (or --unmount MNT)")
    # From before the mount: a SIGTERM that comes while it comes up (mount() then unmounts and
    # raises) or right after must not leave the mount behind.
    signal.signal(signal.SIGTERM, _interrupt)
    sim = mount(args.src, args.mountpoint, profile=args.profile, latency_ms=args.latency_ms,
                bandwidth_mbps=args.bandwidth_mbps, max_read_kib=args.max_read_kib,
                readahead_kib=args.readahead_kib, max_backend=args.max_backend, log=args.log,
                keep_cache=args.keep_cache, overwrite_log=args.force, shared_link=args.shared_bandwidth)
    handed = False
    try:
        print(f"simfs: {sim.config.src} on {sim.mountpoint} (profile {args.profile}, first byte "
              f"{sim.config.first_byte_s * 1000:g} ms, read_ahead_kb {sim.readahead_kib}); daemon pid "
              f"{sim.daemon_pid}; log {sim.log_path}", file=sys.stderr)
        if args.daemon:
            sim.hand_to_daemon()
            handed = True
            print(f"simfs: unmount with: readtrace simfs --unmount {sim.mountpoint}", file=sys.stderr)
            return ExitStatus.OK
        sim.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if not handed:
            sim.unmount()
    print(json.dumps(sim.counters()))
    return ExitStatus.OK


def unmount(mountpoint: str) -> int:
    """Unmount MNT (its daemon exits, a log of ours goes with it); first clean up after killed runs."""
    from readtrace import runstate
    from readtrace.simfs import force_unmount, mount_at

    cleaned = runstate.sweep(lambda line: print(f"simfs: {line}", file=sys.stderr))
    entry = mount_at(mountpoint)
    if entry is None or not entry.fstype.startswith("fuse.simfs-"):
        if any(item == f"mount {os.path.realpath(mountpoint)}" for item in cleaned):
            return ExitStatus.OK
        raise InputError(f"not a simfs mount: {mountpoint}")
    force_unmount(mountpoint)
    found = runstate.note_for_mount(mountpoint)
    if found:
        _wait_gone(found[1].get("daemon_pid"), found[1].get("daemon_start"))
        runstate.clean(*found)
    print(f"simfs: unmounted {entry.mountpoint}", file=sys.stderr)
    return ExitStatus.OK


def _wait_gone(pid, started, timeout_s: float = 5.0) -> None:
    """Give an unmounted daemon a moment to write its counters and exit by itself."""
    import time

    from readtrace.runstate import alive

    deadline = time.monotonic() + timeout_s
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)


def _interrupt(signum, frame):
    raise KeyboardInterrupt
