"""What readtrace leaves running or on disk while it works (lab mounts, their daemons, temp dirs),
noted in a state file so that a later run can clean up after one that was killed.

Each note names its owner process (pid and start time: a reused pid is not the owner). ``clean_stale``
acts only on notes whose owner is dead, and only on what is provably ours: a mount that is still a
simfs mount of the noted source, a daemon whose command line is our daemon module and whose start
time matches, temp paths named ``readtrace-*`` owned by this user and reached through no symlink. The
state directory must be this user's and writable by no one else (a note is a removal order).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import stat
import time
from pathlib import Path

from readtrace.owners import host_uid, is_host_root, writable_by_others

PREFIX = "readtrace-"
PR_SET_PDEATHSIG = 1
DAEMON_MODULE = "readtrace.simfs.daemon"
STATE_DIR_ENV = "READTRACE_STATE_DIR"  # one set of notes per value: runs with another value never meet
CACHE_DIR_ENV = "READTRACE_CACHE_DIR"  # what outlives a reboot (measured mount profiles)


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """In a forked child (a preexec_fn): get ``sig`` when the parent dies (PR_SET_PDEATHSIG), so a
    killed readtrace does not leave its command running; exit at once if the parent is already gone.
    Call it after any setuid (a credential change clears the setting)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(128 + int(sig))


def state_dir() -> Path:
    """$READTRACE_STATE_DIR, else /run/readtrace for root, else $XDG_RUNTIME_DIR/readtrace or
    /tmp/readtrace-<uid> (0700, ours)."""
    if os.environ.get(STATE_DIR_ENV):
        base = Path(os.environ[STATE_DIR_ENV])
    elif is_host_root():
        base = Path("/run/readtrace")
    elif os.environ.get("XDG_RUNTIME_DIR"):
        base = Path(os.environ["XDG_RUNTIME_DIR"]) / "readtrace"
    else:  # the host's uid: a user namespace's "root" is not the owner of /tmp/readtrace-0
        base = Path(f"/tmp/readtrace-{host_uid()}")
    return _private(base, STATE_DIR_ENV)


def cache_dir(create: bool = True) -> Path:
    """$READTRACE_CACHE_DIR, else /var/cache/readtrace for root, else $XDG_CACHE_HOME/readtrace or
    ~/.cache/readtrace (0700, ours): what should outlive a reboot. ``create`` False: a missing one is
    not made (a reader finds nothing in it)."""
    if os.environ.get(CACHE_DIR_ENV):
        base = Path(os.environ[CACHE_DIR_ENV])
    elif is_host_root():
        base = Path("/var/cache/readtrace")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "readtrace"
    if not create and not os.path.lexists(base):
        return base
    return _private(base, CACHE_DIR_ENV, parents=True)


def _private(base: Path, env: str, parents: bool = False) -> Path:
    """``base`` made (0700) if missing; PermissionError unless it is a directory of this user that no
    one else may write (``env``: the variable that names another)."""
    base.mkdir(mode=0o700, parents=parents, exist_ok=True)
    st = os.lstat(base)
    what = "state" if env == STATE_DIR_ENV else "cache"
    if st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{what} directory {base} is not a directory of this user: refused "
                              f"(set {env} to a directory of yours that only you can write)")
    if writable_by_others(st):  # a sticky /tmp is no excuse: anyone could plant a note there
        raise PermissionError(f"{what} directory {base} is writable by group or others "
                              f"(mode {stat.S_IMODE(st.st_mode):o}): refused (chmod go-w it, or set "
                              f"{env} to a directory only you can write)")
    return base


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def alive(pid: int | None, started: str | None) -> bool:
    return pid is not None and start_time(pid) is not None and start_time(pid) == started


def register(kind: str, *, owner_pid: int | None = None, **fields) -> Path | None:
    """Note what this run is about to leave around; returns the note (pass it to ``unregister``), or
    None where no state directory can be made (nothing to clean up after then, but nothing breaks)."""
    owner = owner_pid or os.getpid()
    try:
        note = state_dir() / f"{kind}-{owner}-{secrets.token_hex(3)}.json"
        _write(note, {"kind": kind, "owner_pid": owner, "owner_start": start_time(owner), **fields})
    except OSError:
        return None
    return note


@contextlib.contextmanager
def noted(kind: str, *temp_paths: str | os.PathLike):
    """Note this run's temp paths while the block runs, so a later run removes them if this one is
    killed (SIGKILL leaves no chance to clean up)."""
    note = register(kind, temp_paths=[os.fspath(p) for p in temp_paths])
    try:
        yield
    finally:
        unregister(note)


def update(note: Path | None, **fields) -> None:
    """Change a note (e.g. a ``--daemon`` mount is handed to its daemon as the new owner)."""
    if note is None:
        return
    data = json.loads(note.read_text())
    if "owner_pid" in fields:
        fields["owner_start"] = start_time(fields["owner_pid"])
    _write(note, {**data, **fields})


def _write(note: Path, data: dict) -> None:
    tmp = note.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, note)


def unregister(note: Path | None) -> None:
    if note is not None:
        with contextlib.suppress(FileNotFoundError):
            note.unlink()


def notes() -> list[tuple[Path, dict]]:
    found = []
    with contextlib.suppress(OSError):
        for note in sorted(state_dir().glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                st = os.lstat(note)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():  # not a link, not planted
                    found.append((note, json.loads(note.read_text())))
    return found


def note_for_mount(mountpoint: str) -> tuple[Path, dict] | None:
    want = os.path.realpath(mountpoint)
    return next(((p, d) for p, d in notes() if d.get("mountpoint") == want), None)


def _take_down(data: dict) -> list[str]:
    """Stop a note's daemon and unmount its mount (only if they are still ours)."""
    from readtrace.fs.mounts import force_unmount, mount_at

    done = []
    point = data.get("mountpoint")
    entry = mount_at(point) if point else None
    ours = entry is not None and entry.fstype.startswith("fuse.simfs-") and entry.source == f"simfs:{data.get('src')}"
    daemon = data.get("daemon_pid")
    if alive(daemon, data.get("daemon_start")) and DAEMON_MODULE in _cmdline(daemon):
        _terminate(daemon)  # libfuse unmounts on SIGTERM
        done.append(f"daemon {daemon}")
    if ours:
        force_unmount(point)  # a no-op when the daemon took it down
        done.append(f"mount {point}")
    return done


def _remove_temp(data: dict) -> list[str]:
    """Remove a note's temp paths: ours by name and owner, and with no mount left inside."""
    done = []
    for path in data.get("temp_paths", []):
        if _ours(path) and not _mounts_below(path):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            done.append(f"temp {path}")
    return done


def clean(note: Path, data: dict) -> list[str]:
    """Take down what a note names (its daemon, its mount, then its temp paths) and drop the note."""
    done = _take_down(data) + _remove_temp(data)
    unregister(note)
    return done


def clean_stale() -> list[str]:
    """Clean up after every run of this user whose owner process is dead: mounts and daemons first,
    then temp paths (a mount may sit inside another run's temp dir). What was done, one item each."""
    stale = [(note, data) for note, data in notes() if not alive(data.get("owner_pid"), data.get("owner_start"))]
    done = [item for _, data in stale for item in _take_down(data)]
    for note, data in stale:
        done += _remove_temp(data)
        unregister(note)
    return done


def sweep(say) -> list[str]:
    """``clean_stale``, each item told through ``say`` (a command starts with it). A state directory
    that others could write (or that is not ours) is refused: UsageError, nothing noted or cleaned."""
    from readtrace.errors import UsageError

    try:
        state_dir()
    except PermissionError as e:
        raise UsageError(str(e)) from None
    except OSError:
        pass  # none can be made: nothing to clean up after, nothing noted (register says None)
    done = clean_stale()
    for item in done:
        say(f"cleaned up after a killed run: {item}")
    return done


def _mounts_below(path: str) -> list[str]:
    from readtrace.fs.mounts import parse_mountinfo

    root = os.path.realpath(path)
    points = [m.mountpoint for m in parse_mountinfo(Path("/proc/self/mountinfo").read_bytes())]
    return [p for p in points if p == root or p.startswith(root + os.sep)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _terminate(pid: int, grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and start_time(pid) is not None and not _zombie(pid):
            time.sleep(0.05)
        if start_time(pid) is None or _zombie(pid):
            return


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _ours(path: str) -> bool:
    """Named ``readtrace-*``, owned by us, not a link, and reached through no link (an absolute path
    that is its own real path): a note never leads a removal elsewhere."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    real_parent = os.path.realpath(os.path.dirname(path))
    return (os.path.isabs(path) and real_parent == os.path.dirname(os.path.normpath(path))
            and os.path.basename(path).startswith(PREFIX) and st.st_uid == os.geteuid()
            and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)))
