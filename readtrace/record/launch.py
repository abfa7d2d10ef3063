"""Start the command held on a pipe, so the probes see it from its first instruction.

bcc's exec.py pattern: fork; the child blocks reading a pipe; the parent attaches the probes, puts
the child's pid in the traced set and only then releases it to exec. Exec failures come back on a
close-on-exec pipe, like subprocess does. The child gets PR_SET_PDEATHSIG: a recorder killed
with SIGKILL takes its command down with it (SIGTERM, so torchrun or a shell can pass it on).

Under sudo the command runs as the invoking user (its own groups, HOME, USER), and everything the
recorder writes is opened with that user's file-system rights (``output_rights``): a symlink or a
directory the user cannot write is refused, as it would be without sudo.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pwd
import shutil
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass

from readtrace.errors import (
    CommandNotExecutableError,
    CommandNotFoundError,
    ExitStatus,
    UsageError,
)
from readtrace.runstate import die_with_parent

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    user: str
    home: str | None = None


def sudo_credentials() -> Credentials | None:
    """The invoking user when running under sudo as root, else None."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid:
        return None
    if not (uid.isdigit() and gid.isdigit()):
        raise UsageError(f"SUDO_UID/SUDO_GID are not numbers ({uid!r}, {gid!r}): unset them or run "
                             "readtrace through sudo")
    if int(uid) == 0:
        return None
    try:
        entry = pwd.getpwuid(int(uid))
        user, home = entry.pw_name, entry.pw_dir
    except KeyError:
        user, home = os.environ.get("SUDO_USER", str(uid)), None
    return Credentials(int(uid), int(gid), user, home)


def child_setup(creds: Credentials | None, parent: int | None = None) -> Callable[[], None]:
    """What a child runs between fork and exec (a ``preexec_fn``; ``HeldChild`` too): become the invoking
    user under sudo (groups, gid, uid: the group list is looked up here, in the parent, not after the
    fork), then get SIGTERM when readtrace dies (``die_with_parent``, after the setuid that clears it)."""
    groups = os.getgrouplist(creds.user, creds.gid) if creds else None

    def setup() -> None:
        if creds:
            os.setgroups(groups)
            os.setgid(creds.gid)
            os.setuid(creds.uid)
        die_with_parent(signal.SIGTERM, parent)
    return setup


def command_environment(env: dict | None, creds: Credentials | None) -> dict:
    """The command's environment: under sudo with the invoking user's HOME, USER and LOGNAME."""
    env = dict(os.environ if env is None else env)
    if creds is not None:
        env.update(USER=creds.user, LOGNAME=creds.user)
        if creds.home:
            env["HOME"] = creds.home
    return env


@contextlib.contextmanager
def output_rights(creds: Credentials | None):
    """Open, create and rename files with the invoking user's rights (fsuid/fsgid and groups):
    root's capabilities do not apply to them. A no-op when not under sudo."""
    if creds is None:
        yield
        return
    groups = os.getgroups()
    os.setgroups(os.getgrouplist(creds.user, creds.gid))
    _libc.setfsgid(creds.gid)
    _libc.setfsuid(creds.uid)
    try:
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)
        os.setgroups(groups)


def resolve_command(cmd: list[str], env: dict | None) -> str:
    """The executable ``cmd[0]`` names; like a shell: 127 when missing, 126 when it cannot be run."""
    if not cmd:
        raise UsageError("no command given")  # the command line says how to give one
    name = cmd[0]
    if os.sep in name:
        candidates = [name]
    else:
        path = (env or os.environ).get("PATH", os.defpath)
        exe = shutil.which(name, path=path)
        if exe is not None:
            return exe
        candidates = [os.path.join(d or ".", name) for d in path.split(os.pathsep)]
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        why = "Is a directory" if stat.S_ISDIR(st.st_mode) else (
            None if os.access(candidate, os.X_OK) else "Permission denied")
        if why:
            raise CommandNotExecutableError(f"{name}: cannot run: {why}")
        return candidate
    if os.sep in name:
        raise CommandNotFoundError(f"{name}: No such file or directory")
    raise CommandNotFoundError(f"{name}: command not found")


class HeldChild:
    """A forked child waiting on a pipe to exec ``cmd``."""

    def __init__(self, exe: str, cmd: list[str], env: dict | None, cwd: str | None,
                 creds: Credentials | None):
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        self._parent = os.getpid()
        setup = child_setup(creds, self._parent)
        pid = os.fork()
        if pid == 0:  # child
            os.close(go_w)
            os.close(err_r)
            self._child(go_r, err_w, exe, cmd, env, cwd, setup)
        os.close(go_r)
        os.close(err_w)
        self.pid = pid
        self.cmd0 = cmd[0]
        self.returncode: int | None = None
        self._go = go_w
        self._err = err_r

    @staticmethod
    def _child(go_r, err_w, exe, cmd, env, cwd, setup) -> None:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            if not os.read(go_r, 1):  # the recorder gave up before releasing us
                os._exit(ExitStatus.INTERRUPTED)
            os.close(go_r)
            if cwd:
                os.chdir(cwd)
            setup()
            os.execve(exe, cmd, env if env is not None else os.environ)
        except BaseException as e:  # noqa: BLE001 - report anything to the parent, never return
            code = getattr(e, "errno", None) or 0
            msg = f"{code} {getattr(e, 'strerror', None) or f'{type(e).__name__}: {e}'}"
            os.write(err_w, msg.encode()[:4000])
        os._exit(ExitStatus.NOT_FOUND)

    def release(self) -> None:
        """Let the child exec; raise CommandNotFoundError (or CommandNotExecutableError) if the exec failed."""
        os.write(self._go, b"g")
        os.close(self._go)
        self._go = None
        chunks = []
        while chunk := os.read(self._err, 4096):
            chunks.append(chunk)
        os.close(self._err)
        if chunks:
            self._reap(os.waitpid(self.pid, 0)[1])
            code, _, why = b"".join(chunks).decode(errors="replace").partition(" ")
            missing = code == str(errno.ENOENT)  # like a shell: 127 missing (or its interpreter), else 126
            kind = CommandNotFoundError if missing else CommandNotExecutableError
            raise kind(f"{self.cmd0}: cannot run: {why}")

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

    def wait(self) -> int:
        """Block until the child exits; its exit code."""
        code = self.poll()
        return code if code is not None else self._reap(os.waitpid(self.pid, 0)[1])

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
