"""Start the lab mount in a daemon process, wait until it serves, and take it down again."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from readtrace import runstate
from readtrace.errors import InputError, PrerequisiteError, ReadtraceError, UsageError
from readtrace.fs.mounts import force_unmount, mount_at
from readtrace.simfs.config import SimConfig
from readtrace.simfs.link import check_rate
from readtrace.simfs.log import count, read_records, requests_frame

if TYPE_CHECKING:
    import pandas as pd

READY_TIMEOUT_S = 20.0


def check_prerequisites() -> None:
    if not os.path.exists("/dev/fuse"):
        raise PrerequisiteError("simfs needs /dev/fuse (modprobe fuse)")
    if shutil.which("fusermount3") is None:
        raise PrerequisiteError("simfs needs fusermount3 (apt-get install fuse3)")


def check_paths(src: str | Path, mountpoint: str | Path) -> None:
    """Refuse a missing SRC and a missing, non-directory, non-empty or mounted MNT: one line each;
    SRC and MNT that overlap (one is or holds the other: the daemon would serve its own mount and
    deadlock in the kernel) are a usage error."""
    if not os.path.isdir(src):
        raise InputError(f"simfs source is not a directory: {src}")
    if not os.path.isdir(mountpoint):
        raise InputError(f"simfs mount point is not a directory: {mountpoint}")
    real_src, real_mnt = os.path.realpath(src), os.path.realpath(mountpoint)
    if os.path.commonpath([real_src, real_mnt]) in (real_src, real_mnt):
        raise UsageError(f"simfs source and mount point overlap ({src}, {mountpoint}): give two separate "
                         "directories, neither inside the other")
    if mount_at(mountpoint) is not None:
        raise InputError(f"simfs mount point is already a mount: {mountpoint}")
    if os.listdir(mountpoint):
        raise InputError(f"simfs mount point is not empty: {mountpoint}")


class SimMount:
    """A running lab mount. A context manager; ``unmount()`` is idempotent."""

    def __init__(self, config: SimConfig, process: subprocess.Popen, stderr_path: str, temp_dir: str | None):
        self.config = config
        self.mountpoint = config.mountpoint
        self.log_path = config.log
        self.daemon_pid = process.pid
        self._process = process
        self._stderr_path = stderr_path
        self._temp_dir = temp_dir  # no --log: the log lives here and goes with the mount
        self._records: list | None = None  # the log's records, kept when a temp log is removed
        self.note = runstate.register("simfs", mountpoint=config.mountpoint, src=config.src,
                                      daemon_pid=process.pid, daemon_start=runstate.start_time(process.pid),
                                      temp_paths=[temp_dir] if temp_dir else [])
        self.bdi: str | None = None
        self.readahead_kib: int | None = None  # what the bdi says after set-up

    def __enter__(self) -> SimMount:
        return self

    def __exit__(self, *exc) -> None:
        self.unmount()

    @property
    def mounted(self) -> bool:
        return mount_at(self.mountpoint) is not None

    def wait(self, timeout: float | None = None) -> int:
        """Block until the daemon exits (it exits when the file system is unmounted); its exit code."""
        return self._process.wait(timeout)

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount and reap the daemon; never leaves a mount behind. A busy mount is detached lazily
        and the daemon keeps serving the files still open for up to ``timeout`` seconds."""
        try:
            force_unmount(self.mountpoint)
        finally:
            _reap(self._process, timeout)
            force_unmount(self.mountpoint)  # a daemon that died leaves a dead mount behind
            if os.path.exists(self._stderr_path) and not _meaningful(self._stderr_path):
                os.unlink(self._stderr_path)
            if self._temp_dir and os.path.isdir(self._temp_dir):
                with contextlib.suppress(ReadtraceError):  # a torn log stays for counters() to report
                    self._records = read_records(self.log_path)
                    shutil.rmtree(self._temp_dir, ignore_errors=True)
            runstate.unregister(self.note)

    def hand_to_daemon(self) -> None:
        """``--daemon``: the mount outlives this process; it is stale only once its daemon is gone."""
        runstate.update(self.note, owner_pid=self.daemon_pid)

    def requests(self) -> pd.DataFrame:
        """Every FUSE READ so far, as logged by the daemon (see readtrace.simfs.log)."""
        return requests_frame(self._log_records())

    def counters(self) -> dict:
        """Totals: the daemon's final counters after unmount, running totals before."""
        return count(self._log_records())

    def _log_records(self) -> list:
        return self._records if self._records is not None else read_records(self.log_path)


def _meaningful(path: str) -> bool:
    """Whether the daemon said more than libfuse 3.14's harmless max_threads notice."""
    lines = Path(path).read_text(errors="replace").splitlines()
    return any(not line.startswith("Ignoring invalid max threads value") for line in lines)


def _reap(process: subprocess.Popen, timeout: float) -> None:
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        if sig is not None:
            process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            continue


def mount(src: str | Path, mountpoint: str | Path, *, profile: str = "gcsfuse", latency_ms: float = 20.0,
          bandwidth_mbps: float | None = None, max_read_kib: int = 1024, readahead_kib: int | None = None,
          max_backend: int = 64, log: str | Path | None = None, keep_cache: bool = False,
          overwrite_log: bool = False, shared_link: str | None = None) -> SimMount:
    """Mount ``src`` read-only at ``mountpoint`` behind the modelled store; returns once it serves.
    ``shared_link``: the bandwidth is one link shared with every lab mount given the same name."""
    check_prerequisites()
    check_paths(src, mountpoint)
    log_path, temp_dir = _log_path(log, overwrite_log)
    config = SimConfig(src=os.path.realpath(src), mountpoint=os.path.realpath(mountpoint), log=log_path,
                       profile=profile, latency_ms=float(latency_ms), bandwidth_mbps=bandwidth_mbps,
                       max_read_kib=int(max_read_kib), readahead_kib=readahead_kib,
                       max_backend=int(max_backend), keep_cache=bool(keep_cache), shared_link=shared_link)
    if shared_link is not None:
        check_rate(shared_link, config.bytes_per_s)
    stderr_path = log_path + ".stderr"  # beside the log; in the temp dir when there is no --log
    ready_r, ready_w = os.pipe()
    with open(stderr_path, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "readtrace.simfs.daemon", config.to_json(), str(ready_w)],
            pass_fds=(ready_w,), stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
    os.close(ready_w)
    sim = SimMount(config, process, stderr_path, temp_dir)
    try:
        _wait_ready(ready_r, process, stderr_path)
        os.stat(sim.mountpoint)  # returns once FUSE_INIT is answered
        sim.bdi, sim.readahead_kib = _set_readahead(sim.mountpoint, readahead_kib)
    except BaseException:
        sim.unmount()
        raise
    finally:
        os.close(ready_r)
    return sim


def _log_path(log: str | Path | None, overwrite: bool) -> tuple[str, str | None]:
    """(log path, temp dir to remove with the mount or None): without --log, a temp dir of ours."""
    if log is None:
        temp_dir = tempfile.mkdtemp(prefix=f"{runstate.PREFIX}simfs-")
        path = os.path.join(temp_dir, "reads.jsonl")
        Path(path).write_text("")
        return path, temp_dir
    path = os.path.abspath(log)
    if os.path.exists(path) and os.path.getsize(path) > 0 and not overwrite:
        raise InputError(f"simfs log exists (use {{option}} to overwrite): {path}", option="force")
    try:
        Path(path).write_text("")
    except OSError as e:
        raise InputError(f"cannot write simfs log {path}: {e.strerror}") from None
    return path, None


def _wait_ready(ready_r: int, process: subprocess.Popen, stderr_path: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        readable, _, _ = select.select([ready_r], [], [], 0.1)
        if readable:
            if os.read(ready_r, 64).startswith(b"ready"):
                return
            break  # EOF: the daemon exited before the kernel's INIT
    process.poll()
    detail = Path(stderr_path).read_text(errors="replace").strip().splitlines()
    why = detail[-1] if detail else f"no answer within {READY_TIMEOUT_S:.0f} s"
    raise PrerequisiteError(f"simfs daemon did not start: {why}")


def _set_readahead(mountpoint: str, readahead_kib: int | None) -> tuple[str | None, int | None]:
    """Set the mount's bdi read_ahead_kb (root only); return the bdi and the value now in effect."""
    entry = mount_at(mountpoint)
    if entry is None:
        return None, None
    knob = Path(f"/sys/class/bdi/{entry.dev_name}/read_ahead_kb")
    if readahead_kib is not None and os.geteuid() == 0 and knob.exists():
        with contextlib.suppress(OSError):  # read-only /sys (containers): report what is in effect
            knob.write_text(str(int(readahead_kib)))
    return entry.dev_name, int(knob.read_text()) if knob.exists() else None
