"""Stop one run of the user's command at a time limit, its whole process tree with it.

Each limited run carries a mark in its environment (``READTRACE_FIX_RUN=<token>``), inherited by every
process it starts, whichever launcher or recorder started it. The limit counts from when the first
marked process exists (the command's exec: a recorder's own start-up is not the run's). At the limit
each marked process's process group gets SIGTERM (the process alone where it shares readtrace's own
group), then SIGKILL after ``GRACE_S``; the launcher reaps it and finishes as after any exit, a
recorder writes its trace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

MARK = "READTRACE_FIX_RUN"
GRACE_S = 2.0
POLL_S = 0.1  # how often the processes are looked at until the command has started


@dataclass
class Limit:
    """A run's time limit: its environment mark, and whether it fired (at which second of the run)."""

    seconds: float | None
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    fired_at_s: float | None = None

    @property
    def env(self) -> dict[str, str]:
        return {MARK: self.token} if self.seconds is not None else {}


@contextlib.contextmanager
def limited(seconds: float | None) -> Iterator[Limit]:
    """Within it, a run whose environment includes ``limit.env`` is stopped after ``seconds`` (None: never)."""
    limit = Limit(seconds)
    if seconds is None:
        yield limit
        return
    done = threading.Event()

    def watch() -> None:
        while not marked_pids(limit.token):  # the clock starts with the command, not a recorder's start-up
            if done.wait(POLL_S):
                return
        started = time.monotonic()
        if done.wait(max(seconds, 0.0)):
            return
        limit.fired_at_s = time.monotonic() - started
        _signal_marked(limit.token, signal.SIGTERM)
        if not done.wait(GRACE_S):
            _signal_marked(limit.token, signal.SIGKILL)

    watcher = threading.Thread(target=watch, name="fix-run-limit", daemon=True)
    watcher.start()
    try:
        yield limit
    finally:
        done.set()
        watcher.join()


def marked_pids(token: str) -> list[int]:
    """Processes whose environment carries the mark ``token``."""
    needle = f"{MARK}={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def _signal_marked(token: str, sig: int) -> None:
    own = os.getpgrp()
    for pid in marked_pids(token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, sig)
            else:
                os.kill(pid, sig)
