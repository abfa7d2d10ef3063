"""Start the command held on a pipe, so the probes see it from its first instruction.

bcc's exec.py pattern: fork; the child blocks reading a pipe; the parent attaches the probes, puts
the child's pid in the traced set and only then releases it to exec. Exec failures come back on a
close-on-exec pipe, like subprocess does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
from dataclasses import dataclass

from readtrace.errors import ExitStatus, ReadtraceError


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    user: str


def sudo_credentials() -> Credentials | None:
    """The invoking user when running under sudo as root, else None."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid or int(uid) == 0:
        return None
    try:
        user = pwd.getpwuid(int(uid)).pw_name
    except KeyError:
        user = os.environ.get("SUDO_USER", str(uid))
    return Credentials(int(uid), int(gid), user)


def resolve_command(cmd: list[str], env: dict | None) -> str:
    """The executable ``cmd[0]`` names, or ReadtraceError(NOT_FOUND) with one line."""
    if not cmd:
        raise ReadtraceError("no command given: readtrace record -- CMD [ARGS...]", ExitStatus.USAGE)
    path = (env or os.environ).get("PATH", os.defpath)
    exe = shutil.which(cmd[0], path=path)
    if exe is None:
        raise ReadtraceError(f"{cmd[0]}: command not found", ExitStatus.NOT_FOUND)
    return exe


class HeldChild:
    """A forked child waiting on a pipe to exec ``cmd``."""

    def __init__(self, exe: str, cmd: list[str], env: dict | None, cwd: str | None,
                 creds: Credentials | None):
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # child
            os.close(go_w)
            os.close(err_r)
            self._child(go_r, err_w, exe, cmd, env, cwd, creds)
        os.close(go_r)
        os.close(err_w)
        self.pid = pid
        self.returncode: int | None = None
        self._go = go_w
        self._err = err_r

    @staticmethod
    def _child(go_r, err_w, exe, cmd, env, cwd, creds) -> None:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if not os.read(go_r, 1):  # the recorder gave up before releasing us
                os._exit(ExitStatus.INTERRUPTED)
            os.close(go_r)
            if cwd:
                os.chdir(cwd)
            if creds:
                os.initgroups(creds.user, creds.gid)
                os.setgid(creds.gid)
                os.setuid(creds.uid)
            os.execve(exe, cmd, env if env is not None else os.environ)
        except BaseException as e:  # noqa: BLE001 - report anything to the parent, never return
            msg = f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
            os.write(err_w, msg.encode()[:4000])
        os._exit(ExitStatus.NOT_FOUND)

    def release(self) -> None:
        """Let the child exec; raise ReadtraceError(NOT_FOUND) if the exec failed."""
        os.write(self._go, b"g")
        os.close(self._go)
        self._go = None
        chunks = []
        while chunk := os.read(self._err, 4096):
            chunks.append(chunk)
        os.close(self._err)
        if chunks:
            self._reap(os.waitpid(self.pid, 0)[1])
            raise ReadtraceError(f"cannot run command: {b''.join(chunks).decode(errors='replace')}",
                                 ExitStatus.NOT_FOUND)

    def abandon(self) -> None:
        """Never released (set-up failed): the child exits without running anything."""
        if self._go is not None:
            os.close(self._go)
            self._go = None
            os.close(self._err)
            self._reap(os.waitpid(self.pid, 0)[1])

    def _reap(self, status: int) -> int:
        self.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        return self.returncode

    def poll(self) -> int | None:
        """The exit code once the child exited (128+N when killed by signal N), else None."""
        if self.returncode is not None:
            return self.returncode
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        return None if pid == 0 else self._reap(status)

    def stop(self, grace_s: float = 5.0) -> int:
        """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
        import time

        code = self.poll()
        if code is not None:
            return code
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            code = self.poll()
            if code is not None:
                return code
            time.sleep(0.02)
        os.kill(self.pid, signal.SIGKILL)
        return self._reap(os.waitpid(self.pid, 0)[1])
