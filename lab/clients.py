"""Mount a directory through a FUSE client somebody else wrote (s3fs-fuse over moto's S3 server,
rclone and httpdirfs over an HTTP range server, sshfs to a private sshd, bindfs), through the lab
mount, or not at all ("local"). Servers listen on 127.0.0.1 only; everything started is stopped on exit.

    with mounted("s3fs", src, workdir, latency_ms=20) as m:
        m.path("model.safetensors")   # the file through the mount
        m.requests                    # the backend's request log (None where there is no HTTP backend)
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.servers import DelayProxy, MotoServer, RangeServer, RequestLog, Sshd, stop_process

CLIENTS = ("lab", "s3fs", "rclone", "sshfs", "httpdirfs", "bindfs", "local")
# What each client needs on PATH (Debian packages in scripts/setup-system.sh).
BINARIES = {"s3fs": ("s3fs",), "sshfs": ("sshfs", "ssh-keygen"), "httpdirfs": ("httpdirfs",), "rclone": ("rclone",),
            "bindfs": ("bindfs",), "lab": ("fusermount3",), "local": ()}
BUCKET = "models"


@dataclass
class Mounted:
    """A live mount: where it is, what /proc/self/mountinfo calls it, and the backend's request log."""

    client: str
    mountpoint: Path
    fstype: str
    requests: RequestLog | None = None
    lab: object | None = None  # the SimMount of the lab client (its own READ log)

    def path(self, name: str) -> Path:
        return self.mountpoint / name

    def backend_requests(self, name: str) -> int | None:
        """Data requests the backend has served for files named ``name`` so far (None: not logged):
        ranged GETs of the HTTP servers, new backend streams of the lab mount."""
        if self.lab is not None:
            reads = self.lab.requests()
            return int(reads["new_request"].sum()) if len(reads) else 0
        if self.requests is not None:
            return len(self.requests.ranged_gets(0, name))
        return None


def missing(client: str) -> str | None:
    """Why ``client`` cannot be mounted here (None: it can)."""
    if client != "local" and not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    absent = [b for b in BINARIES[client] if shutil.which(b) is None]
    if absent:
        return f"{', '.join(absent)} missing (scripts/setup-system.sh installs it)"
    if client == "s3fs":
        try:
            import boto3  # noqa: F401
            import moto.server  # noqa: F401
        except ImportError:
            return "moto[server]/boto3 missing (pip install -e '.[test]')"
    if client == "sshfs" and not os.path.exists("/usr/sbin/sshd"):
        return "sshd missing (apt-get install -y openssh-server)"
    return None


@contextlib.contextmanager
def mounted(client: str, src: str | os.PathLike, workdir: str | os.PathLike, *,
            latency_ms: float = 0.0) -> Iterator[Mounted]:
    """Mount ``src`` read-only through ``client``; ``workdir`` holds the mount point, keys, logs.
    ``latency_ms``: first-byte latency per backend request (lab, s3fs, rclone, httpdirfs)."""
    src, work = Path(src).resolve(), Path(workdir)
    mnt = work / f"mnt-{client}"
    mnt.mkdir(parents=True, exist_ok=True)
    if client == "local":
        yield Mounted(client, src, _fstype(src))
    elif client == "lab":
        from readtrace.simfs import force_unmount, mount

        try:
            # keep_cache: gcsfuse keeps the page cache across opens (docs/simfs.md)
            with mount(src, mnt, profile="gcsfuse", latency_ms=latency_ms, keep_cache=True,
                       log=work / "lab-reads.jsonl", overwrite_log=True) as lab:
                yield Mounted(client, mnt, _fstype(mnt), lab=lab)
        finally:
            force_unmount(mnt)
    elif client == "s3fs":
        with MotoServer(work / "moto.log") as s3:
            s3.upload(BUCKET, src)
            with DelayProxy(s3.port, latency_ms) as proxy:
                opts = (f"ro,url=http://127.0.0.1:{proxy.port},use_path_request_style,"
                        f"passwd_file={s3.passwd_file(work)}")
                with _daemon(["s3fs", BUCKET, str(mnt), "-f", "-o", opts], mnt, work / "s3fs.log"):
                    yield Mounted(client, mnt, _fstype(mnt), proxy.log)
    elif client == "sshfs":
        with Sshd(work / "sshd") as sshd:
            opts = (f"ro,IdentityFile={sshd.identity},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
                    f"port={sshd.port}")
            with _daemon(["sshfs", "-f", "-o", opts, f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1:{src}", str(mnt)],
                         mnt, work / "sshfs.log"):
                yield Mounted(client, mnt, _fstype(mnt))
    elif client == "httpdirfs":
        with RangeServer(src, latency_ms) as http, \
                _daemon(["httpdirfs", "-f", "-o", "ro", http.url, str(mnt)], mnt, work / "httpdirfs.log"):
            yield Mounted(client, mnt, _fstype(mnt), http.log)
    elif client == "rclone":
        # rclone mount of an HTTP remote, no VFS cache: reads stream through rclone's per-handle reader
        with RangeServer(src, latency_ms) as http, _daemon(
                ["rclone", "mount", "--read-only", "--vfs-cache-mode", "off", "--http-url", http.url,
                 "--config", os.devnull, ":http:", str(mnt)], mnt, work / "rclone.log"):
            yield Mounted(client, mnt, _fstype(mnt), http.log)
    elif client == "bindfs":
        with _daemon(["bindfs", "-f", "-r", str(src), str(mnt)], mnt, work / "bindfs.log"):
            yield Mounted(client, mnt, _fstype(mnt))
    else:
        raise ValueError(f"unknown client {client!r}; one of {', '.join(CLIENTS)}")


@contextlib.contextmanager
def _daemon(argv: list[str], mnt: Path, log_path: Path, timeout: float = 30.0) -> Iterator[None]:
    """Run a FUSE daemon in the foreground until ``mnt`` is mounted; unmount and reap it on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mnt) or not any(mnt.iterdir()):
            if process.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {process.returncode}: {_tail(log_path)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{argv[0]} did not mount {mnt} in {timeout:.0f} s: {_tail(log_path)}")
            time.sleep(0.1)
        yield
    finally:
        unmount(mnt)
        stop_process(process)


def unmount(mnt: str | os.PathLike) -> None:
    """Unmount ``mnt`` if mounted, lazily when busy."""
    for argv in (["umount", str(mnt)], ["umount", "-l", str(mnt)]):
        if not os.path.ismount(mnt):
            return
        subprocess.run(argv, capture_output=True)


def _fstype(path: Path) -> str:
    """The file system type as readtrace names it (``fuse.<daemon>`` for a mount without a subtype)."""
    from readtrace.fs.mounts import file_mount

    found = file_mount(path)
    return found.fstype if found else ""


def _tail(path: Path, chars: int = 400) -> str:
    return path.read_bytes()[-chars:].decode(errors="replace").strip()
