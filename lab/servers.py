"""Servers on 127.0.0.1 that real FUSE clients mount: an HTTP range server, a first-byte-latency TCP
proxy (both with a request log), a TCP relay that delays every chunk each way (a link's round trip),
moto's S3 server and a private sshd; and a local Dask cluster (report --scheduler). Each is a context manager that stops what it started, also on error."""

from __future__ import annotations

import contextlib
import html
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

LOCALHOST = "127.0.0.1"
_REQUEST_LINE = re.compile(rb"^(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.[01]\r\n", re.M)
_RANGE = re.compile(rb"^Range: *bytes=(\d+)-(\d*)", re.M | re.I)


@dataclass(frozen=True)
class Request:
    """One HTTP request as a server or proxy saw it: ``start``/``end`` of its byte range (end exclusive,
    None: open or no range)."""

    method: str
    path: str
    start: int | None
    end: int | None
    ts: float


@dataclass
class RequestLog:
    """Thread-safe list of requests; ``mark()`` / ``since(mark)`` cut out one run's requests."""

    _items: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: Request) -> None:
        with self._lock:
            self._items.append(request)

    def mark(self) -> int:
        with self._lock:
            return len(self._items)

    def since(self, mark: int = 0) -> list[Request]:
        with self._lock:
            return list(self._items[mark:])

    def ranged_gets(self, mark: int = 0, suffix: str = "") -> list[Request]:
        return [r for r in self.since(mark) if r.method == "GET" and r.start is not None
                and r.path.endswith(suffix)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 20.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((LOCALHOST, port), timeout=0.5):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {LOCALHOST}:{port} after {timeout:.0f} s")
        time.sleep(0.05)


def start_listening(argv: list[str], port: int, log_path: str | os.PathLike, env: dict | None = None,
                    timeout: float = 30.0) -> subprocess.Popen:
    """Start a server process (its output to ``log_path``) and wait until it listens on ``port``."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    try:
        wait_for_port(port, timeout, process)
    except BaseException:
        stop_process(process)
        raise
    return process


def stop_process(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate, then kill, and reap one child we started."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


COPY_CHUNK = 1 << 20


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that drops a connection mid-body (rclone, httpdirfs abandoning a read-ahead) is normal."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class RangeServer:
    """A threaded HTTP/1.1 server of one directory that answers Range requests (Python's http.server
    does not), lists directories as HTML links (what httpdirfs parses) and waits ``latency_ms`` before
    the first byte of every response."""

    def __init__(self, root: str | os.PathLike, latency_ms: float = 0.0):
        self.root = Path(root).resolve()
        self.latency_s = latency_ms / 1000
        self.log = RequestLog()
        self._httpd = _QuietServer((LOCALHOST, 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="range-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self._httpd.server_address[1]}/"

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


def _handler(server: RangeServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms ACK wait

        def log_message(self, *args) -> None:  # the request log replaces stderr lines
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._serve(body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            path = (server.root / rel).resolve()
            start = end = None
            if m := _RANGE.match(f"Range: {self.headers.get('Range', '')}".encode()):
                start = int(m.group(1))
                end = int(m.group(2)) + 1 if m.group(2) else None
            server.log.add(Request(self.command, "/" + rel, start, end, time.monotonic()))
            if server.latency_s:
                time.sleep(server.latency_s)
            if not path.is_relative_to(server.root) or not path.exists():
                return self._reply(404, b"not found\n", "text/plain", body)
            if path.is_dir():
                if not self.path.endswith("/"):
                    self.send_response(301)
                    self.send_header("Location", self.path + "/")
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
                links = "".join(f'<a href="{urllib.parse.quote(p.name)}{"/" if p.is_dir() else ""}">'
                                f"{html.escape(p.name)}</a>\n" for p in sorted(path.iterdir()))
                return self._reply(200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html", body)
            size = path.stat().st_size
            if start is None:
                status, lo, hi = 200, 0, size
            elif start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            else:
                status, lo, hi = 206, start, min(end or size, size)
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(hi - lo))
            if status == 206:
                self.send_header("Content-Range", f"bytes {lo}-{hi - 1}/{size}")
            self.end_headers()
            if body:
                # copied, not sendfile(): bytes a client leaves unread (rclone abandons read streams on
                # connections it keeps open) would keep the served file's pages referenced from the socket,
                # and no eviction of that file (the local cells share it) could make it cold
                with open(path, "rb") as f:
                    sent = lo
                    while sent < hi:
                        chunk = os.pread(f.fileno(), min(hi - sent, COPY_CHUNK), sent)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        sent += len(chunk)

        def _reply(self, status: int, data: bytes, ctype: str, body: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


class _Relay:
    """A listener on 127.0.0.1 in front of ``upstream_port`` whose connections threads serve
    (``_accepted``); leaving it stops them, shutting down the sockets they registered."""

    def __init__(self, upstream_port: int):
        self.upstream = (LOCALHOST, upstream_port)
        self._listener = socket.create_server((LOCALHOST, 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> Self:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([self._listener], [], [], 0.2)
                if not readable:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return
            self._accepted(client)

    def _accepted(self, client: socket.socket) -> None:
        raise NotImplementedError


class DelayProxy(_Relay):
    """A TCP proxy on 127.0.0.1 in front of ``upstream_port`` that holds every HTTP request for
    ``latency_ms`` before passing it on (a first-byte latency per request, keep-alive or not) and logs
    each request's method, path and Range."""

    def __init__(self, upstream_port: int, latency_ms: float = 0.0):
        super().__init__(upstream_port)
        self.latency_s = latency_ms / 1000
        self.log = RequestLog()

    def _accepted(self, client: socket.socket) -> None:
        self._spawn(self._pipe, client)

    def _pipe(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):  # a client or server that resets its connection ends it
            self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as upstream:
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ends = {client: upstream, upstream: client}
            while not self._stop.is_set():
                readable, _, _ = select.select(list(ends), [], [], 0.2)
                for sock in readable:
                    data = sock.recv(1 << 20)
                    if not data:
                        return
                    if sock is client:
                        self._note(data)
                    ends[sock].sendall(data)

    def _note(self, data: bytes) -> None:
        """Log (and delay) each request that starts in this chunk of the client's bytes."""
        found = list(_REQUEST_LINE.finditer(data))
        for m in found:
            r = _RANGE.search(data, m.end())
            start = int(r.group(1)) if r else None
            end = int(r.group(2)) + 1 if r and r.group(2) else None
            self.log.add(Request(m.group(1).decode(), m.group(2).decode(), start, end, time.monotonic()))
        if found and self.latency_s:
            time.sleep(self.latency_s)


class DelayRelay(_Relay):
    """A TCP relay on 127.0.0.1 in front of ``upstream_port`` that holds every chunk ``one_way_ms`` in each
    direction before passing it on: a link with a round trip of twice that, for any protocol (SSH), with
    the chunks in flight pipelined (latency, not a bandwidth cap). This kernel has no netem."""

    def __init__(self, upstream_port: int, one_way_ms: float):
        super().__init__(upstream_port)
        self.delay_s = one_way_ms / 1000

    def _accepted(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sockets = [s for s in self._sockets if s.fileno() >= 0] + [client, upstream]
        self._spawn(self._connection, client, upstream)

    def _connection(self, client: socket.socket, upstream: socket.socket) -> None:
        """Both directions of one connection; the sockets are closed when both have ended."""
        back = threading.Thread(target=self._direction, args=(upstream, client), daemon=True)
        back.start()
        self._direction(client, upstream)
        back.join()
        client.close()
        upstream.close()

    def _direction(self, src: socket.socket, dst: socket.socket) -> None:
        """Read ``src`` into a queue stamped with each chunk's due time; a sender passes them on when due."""
        import queue

        chunks: queue.SimpleQueue = queue.SimpleQueue()
        sender = threading.Thread(target=self._send, args=(chunks, dst), daemon=True)
        sender.start()
        try:
            while not self._stop.is_set():
                data = src.recv(1 << 20)
                if not data:
                    break
                chunks.put((time.monotonic() + self.delay_s, data))
        except OSError:
            pass
        chunks.put(None)
        sender.join()

    def _send(self, chunks, dst: socket.socket) -> None:
        try:
            while (item := chunks.get()) is not None:
                due, data = item
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)


class MotoServer:
    """moto's S3 server (``moto[server]``, installed by ``make test``) on a free port of 127.0.0.1."""

    ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing", "us-east-1"

    def __init__(self, log_path: str | os.PathLike):
        self.port = free_port()
        self._log_path = Path(log_path)
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    def __enter__(self) -> MotoServer:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=self.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=self.SECRET_KEY)
        self._process = start_listening(
            [sys.executable, "-c", "from moto.server import main; main()", "-H", LOCALHOST, "-p", str(self.port)],
            self.port, self._log_path, env)
        return self

    def __exit__(self, *exc) -> None:
        if self._process is not None:
            stop_process(self._process)

    def create_bucket(self, bucket: str):
        """Create ``bucket``; returns the boto3 client."""
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.url, aws_access_key_id=self.ACCESS_KEY,
                          aws_secret_access_key=self.SECRET_KEY, region_name=self.REGION)
        s3.create_bucket(Bucket=bucket)
        return s3

    def upload(self, bucket: str, src: str | os.PathLike) -> None:
        """Create ``bucket`` and put every file under ``src`` into it at its relative path."""
        from boto3.s3.transfer import TransferConfig

        s3 = self.create_bucket(bucket)
        config = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20)
        root = Path(src)
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            s3.upload_file(str(path), bucket, path.relative_to(root).as_posix(), Config=config)

    def passwd_file(self, directory: str | os.PathLike) -> Path:
        """The s3fs credentials file (mode 0600, as s3fs demands)."""
        path = Path(directory) / "s3fs.passwd"
        path.write_text(f"{self.ACCESS_KEY}:{self.SECRET_KEY}\n")
        path.chmod(0o600)
        return path


class DaskCluster:
    """A Dask scheduler and ``workers`` worker processes (no nanny: a worker killed stays dead) on
    127.0.0.1, each started by ``dask`` (``readtrace[dask]``) with ``env``; ``address`` for a client."""

    def __init__(self, workdir: str | os.PathLike, workers: int = 2, env: dict | None = None, nthreads: int = 1):
        self.port = free_port()
        self.workdir = Path(workdir)
        self.env = dict(os.environ, **(env or {}))
        self.nworkers, self.nthreads = workers, nthreads
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"tcp://{LOCALHOST}:{self.port}"

    def __enter__(self) -> DaskCluster:
        dask = str(Path(sys.executable).with_name("dask"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.scheduler = start_listening([dask, "scheduler", "--host", LOCALHOST, "--port", str(self.port),
                                              "--no-dashboard"], self.port, self.workdir / "scheduler.log",
                                             self.env, timeout=120)
            for i in range(self.nworkers):
                with open(self.workdir / f"worker{i}.log", "wb") as log:
                    self.workers.append(subprocess.Popen(
                        [dask, "worker", self.address, "--name", f"w{i}", "--nthreads", str(self.nthreads),
                         "--no-nanny", "--no-dashboard", "--host", LOCALHOST, "--memory-limit", "0",
                         "--local-directory", str(self.workdir / f"w{i}")],
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                        start_new_session=True))
            self.wait_for_workers(self.nworkers)
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_for_workers(self, n: int, timeout: float = 120.0) -> None:
        from distributed import Client

        with Client(self.address, timeout=timeout, set_as_default=False) as client:
            client.wait_for_workers(n, timeout=timeout)

    def __exit__(self, *exc) -> None:
        for process in self.workers:
            stop_process(process)
        if self.scheduler is not None:
            stop_process(self.scheduler)


SSHD = "/usr/sbin/sshd"
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server")


class Sshd:
    """A private sshd on a free port of 127.0.0.1 with its own host key and one authorized key for the
    current user, all in ``workdir``; the system's sshd and /etc/ssh are left alone."""

    def __init__(self, workdir: str | os.PathLike):
        self.dir = Path(workdir)
        self.port = free_port()
        self.identity = self.dir / "id_ed25519"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> Sshd:
        sftp = next((p for p in SFTP_SERVERS if os.path.exists(p)), None)
        if not os.path.exists(SSHD) or sftp is None or shutil.which("ssh-keygen") is None:
            raise FileNotFoundError("openssh-server missing (apt-get install -y openssh-server)")
        self.dir.mkdir(parents=True, exist_ok=True)
        for key in (self.dir / "host_ed25519", self.identity):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (self.dir / "authorized_keys").write_text(self.identity.with_suffix(".pub").read_text())
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {LOCALHOST}", f"HostKey {self.dir / 'host_ed25519'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}", f"PidFile {self.dir / 'sshd.pid'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", f"Subsystem sftp {sftp}", ""]))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        self._process = start_listening([SSHD, "-D", "-e", "-f", str(config)], self.port, self.dir / "sshd.log")
        return self

    def __exit__(self, *exc) -> None:
        if self._process is not None:
            stop_process(self._process)
