"""A real unprivileged user for tests (created with useradd, removed after the session).

Non-root behaviour is tested as that user, never by faking uid checks. Each pytest session makes its
own user, ``rtu<pid>`` (several sessions may run at once), marked in its GECOS field with the owner's
pid; a session first removes the users (and their processes and bind mounts) of sessions that are
dead, so a killed run leaves nothing behind for long.

The user must be able to run this checkout's Python: when the interpreter's prefix, the checkout or
the venv's site-packages sit below a directory the user cannot enter (e.g. /root, mode 0700), that
directory is bind-mounted read-only under ``/run/readtrace-tests/<pid>/`` for the session.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from readtrace.runstate import pid_running

REPO = Path(__file__).resolve().parents[1]
PREFIX = "rtu"
MARK = "readtrace test user, owner pid"
STAGING = Path("/run/readtrace-tests")
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids


def _kill_processes_of(uid: int) -> None:
    """SIGKILL each process (by pid) owned by the test user ``uid``; wait until they are gone."""
    deadline = time.monotonic() + 5
    while (pids := _processes_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _umount_under(directory: Path) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _remove_staging(session: Path) -> None:
    """Unmount a session's bind mounts and remove its empty mount points (rmdir only: never a
    recursive delete, which would reach through a mount that failed to detach)."""
    _umount_under(session)
    for point in session.iterdir() if session.is_dir() else ():
        with contextlib.suppress(OSError):
            point.rmdir()
    with contextlib.suppress(OSError):
        session.rmdir()


def _remove_user(name: str, uid: int) -> None:
    _kill_processes_of(uid)
    subprocess.run(["userdel", "--remove", "--force", name], check=False, capture_output=True)
    sudoers = Path(f"/etc/sudoers.d/{name}")
    if sudoers.exists():
        sudoers.unlink()


def _owner_pid(entry: pwd.struct_passwd) -> int | None:
    if not entry.pw_name.startswith(PREFIX) or not entry.pw_gecos.startswith(MARK):
        return None
    try:
        return int(entry.pw_gecos[len(MARK):].strip())
    except ValueError:
        return None


def remove_leftovers() -> list[str]:
    """Remove test users, bind mounts and staging dirs of sessions whose owner process is dead."""
    removed = []
    for entry in pwd.getpwall():
        owner = _owner_pid(entry)
        if owner is not None and not pid_running(owner):
            _remove_user(entry.pw_name, entry.pw_uid)
            removed.append(entry.pw_name)
    if STAGING.is_dir():
        for session in STAGING.iterdir():
            if session.name.isdigit() and not pid_running(int(session.name)):
                _remove_staging(session)
    return removed


@dataclass
class UnprivilegedUser:
    """A real user without privileges; ``run``/``popen``/``readtrace`` execute as it, clean env."""

    name: str
    uid: int
    gid: int
    home: Path
    python: str  # an interpreter this user can execute, with this checkout's readtrace importable
    base_env: dict = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        """A directory on the user's PATH holding a ``readtrace`` launcher."""
        return self.home / "bin"

    def env(self, extra: dict | None = None) -> dict:
        return {**self.base_env, **(extra or {})}

    def _kwargs(self, cwd, env) -> dict:
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o022,
                "cwd": str(cwd or self.home), "env": self.env(env)}

    def run(self, argv, *, cwd=None, env=None, timeout: float = 120, input=None, check: bool = False
            ) -> subprocess.CompletedProcess:
        """Run ``argv`` as this user (text output captured)."""
        return subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout,
                              input=input, check=check, **self._kwargs(cwd, env))

    def popen(self, argv, *, cwd=None, env=None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(list(map(str, argv)), **self._kwargs(cwd, env), **kwargs)

    def readtrace(self, *args, **kwargs) -> subprocess.CompletedProcess:
        """``readtrace ARGS`` as this user."""
        return self.run([self.python, "-m", "readtrace", *args], **kwargs)

    def sudo(self, argv, **kwargs) -> subprocess.CompletedProcess:
        """``sudo -n ARGV`` as this user (a NOPASSWD sudoers entry lives as long as the user)."""
        sudoers = Path(f"/etc/sudoers.d/{self.name}")
        if not sudoers.exists():
            sudoers.write_text(f"{self.name} ALL=(root) NOPASSWD: ALL\nDefaults:{self.name} !lecture\n")
            sudoers.chmod(0o440)
        return self.run(["sudo", "-n", "--preserve-env=READTRACE_TEST_TAG", *argv], **kwargs)

    def can_read(self, path) -> bool:
        return self.run(["test", "-r", str(path)]).returncode == 0


class _Reach:
    """Paths the user can reach: inaccessible ones are bind-mounted read-only under a staging dir."""

    def __init__(self, user: str, staging: Path):
        self.user, self.staging, self.bound = user, staging, {}

    def _accessible(self, path: Path) -> bool:
        probe = subprocess.run(["runuser", "-u", self.user, "--", "test", "-x", str(path), "-a", "-r", str(path)],
                               capture_output=True, check=False)
        return probe.returncode == 0

    def __call__(self, path: Path) -> Path:
        path = Path(path).resolve()
        for root, target in self.bound.items():
            if path.is_relative_to(root):
                return target / path.relative_to(root)
        if self._accessible(path):
            return path
        target = self.staging / f"m{len(self.bound)}"
        target.mkdir(parents=True)
        subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(target)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=False, capture_output=True)
        self.bound[path] = target
        return target


def create_user() -> UnprivilegedUser:
    """useradd a fresh ``rtu<pid>`` with a home; the caller removes it with ``destroy_user``."""
    remove_leftovers()
    name = f"{PREFIX}{os.getpid()}"
    if any(e.pw_name == name for e in pwd.getpwall()):  # a pid reused after a killed run of ours
        _remove_user(name, pwd.getpwnam(name).pw_uid)
    subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/sh",
                    "--comment", f"{MARK} {os.getpid()}", name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    home.chmod(0o755)
    staging = STAGING / str(os.getpid())
    STAGING.mkdir(mode=0o755, exist_ok=True)
    STAGING.chmod(0o755)
    staging.mkdir(mode=0o755, exist_ok=True)
    reach = _Reach(name, staging)
    home_dir = reach(Path(sys.base_prefix))  # first: the interpreter below it maps into it
    real = Path(sys.executable).resolve()
    python = reach(real.parent) / real.name
    site = reach(Path(sysconfig.get_paths()["purelib"]))
    platsite = reach(Path(sysconfig.get_paths()["platlib"]))
    repo = reach(REPO)
    env = {"PATH": f"{home}/bin:{SAFE_PATH}", "HOME": str(home), "USER": name, "LOGNAME": name,
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHOME": str(home_dir),
           "LD_LIBRARY_PATH": str(home_dir / "lib"),
           "PYTHONPATH": os.pathsep.join(dict.fromkeys(map(str, (repo, site, platsite)))),
           "MPLCONFIGDIR": f"{home}/.mpl"}
    user = UnprivilegedUser(name, entry.pw_uid, entry.pw_gid, home, str(python), env)
    user.bin.mkdir()
    launcher = user.bin / "readtrace"
    launcher.write_text(f'#!/bin/sh\nexec "{python}" -m readtrace "$@"\n')
    launcher.chmod(0o755)
    check = user.run([python, "-c", "import readtrace, numpy, pandas, pyarrow"])
    if check.returncode != 0:
        destroy_user(user)
        raise RuntimeError(f"test user {name} cannot import readtrace: {check.stderr.strip()[-500:]}")
    return user


def destroy_user(user: UnprivilegedUser) -> None:
    """Kill the user's processes, remove it with its home, and unmount this session's bind mounts."""
    _remove_user(user.name, user.uid)
    _remove_staging(STAGING / str(os.getpid()))
