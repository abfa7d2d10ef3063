"""Fixtures of the compatibility suite: the checkpoints (built once per session) and one mount per
FUSE client (its servers on 127.0.0.1), unmounted and stopped at the end, also on failure or SIGTERM.
The mount and server logic lives in lab (shared with benchmarks/compat_matrix.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import pytest
from conftest import require

from lab.cells import readtrace_cli
from lab.checkpoints import build_all
from lab.clients import missing, mounted
from readtrace.measure.profile import MountProfile
from readtrace.pagecache.evict import evict

SIZE_MIB = int(os.environ.get("READTRACE_COMPAT_MIB", "64"))


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """``{kind: directory}`` of every checkpoint the loaders read, about SIZE_MIB each."""
    root = tmp_path_factory.mktemp("compat-checkpoints")
    built = build_all(root, SIZE_MIB)
    return root, built


@pytest.fixture(scope="session")
def mounts(checkpoints, tmp_path_factory):
    """``mount(client, latency_ms) -> Mounted`` of the whole checkpoint directory, one per (client,
    latency) for the session."""
    root, _ = checkpoints
    stack = contextlib.ExitStack()
    live = {}
    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so the teardown below still unmounts and stops servers
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)

    def mount(client: str, latency_ms: float = 0.0):
        key = (client, latency_ms)
        if key not in live:
            why = missing(client)
            require(why is None, f"{client}: {why}")
            work = tmp_path_factory.mktemp(f"mount-{client}-{int(latency_ms)}ms")
            live[key] = stack.enter_context(mounted(client, root, work, latency_ms=latency_ms))
        return live[key]

    try:
        yield mount
    finally:
        stack.close()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def probed(tmp_path_factory):
    """``probed(mount) -> MountProfile``: ``readtrace probe`` of the mount's largest file, once per mount,
    run as a user runs it; cached in a cache of this session's own (record and report read it from there)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("READTRACE_CACHE_DIR", str(tmp_path_factory.mktemp("profile-cache")))
        done: dict = {}

        def probe(mount) -> MountProfile:
            if mount.mountpoint not in done:
                evict([str(p) for p in mount.backing])  # squashfuse's image: the probe reads cold through it
                run = subprocess.run([*readtrace_cli(), "probe", "--json", str(mount.mountpoint)], capture_output=True,
                                     text=True, timeout=120)
                assert run.returncode == 0, run.stderr
                done[mount.mountpoint] = MountProfile.from_data(json.loads(run.stdout)[0])
            return done[mount.mountpoint]

        yield probe
