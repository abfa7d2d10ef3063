"""Shared by the reliability cases: run readtrace as a user would and check the state it leaves."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

READTRACE = [sys.executable, "-m", "readtrace"]
TAG = "READTRACE_TEST_TAG"  # in the environment of everything a case starts: finds survivors by it


def _tagged(tag: str) -> list[int]:
    pids = []
    needle = f"{TAG}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def fuse_mounts_under(directory: Path) -> list[str]:
    """FUSE mount points at or below ``directory``."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1].startswith("fuse") and fields[4].startswith(str(directory)):
            points.append(fields[4])
    return points


class Leftovers:
    """What a case must not leave: processes it started (by tag), mounts and temp names under tmp_path."""

    def __init__(self, tmp_path: Path):
        self.tag = uuid.uuid4().hex
        self.tmp_path = tmp_path
        self.env = {**os.environ, TAG: self.tag}

    def processes(self) -> list[int]:
        return _tagged(self.tag)

    def check(self) -> None:
        survivors = self.processes()
        mounts = fuse_mounts_under(self.tmp_path)
        stray = [str(p) for p in self.tmp_path.rglob(".*") if ".partial-" in p.name or ".tmp-" in p.name]
        assert not survivors, f"processes left running: {survivors}"
        assert not mounts, f"mounts left: {mounts}"
        assert not stray, f"temporary outputs left: {stray}"


@pytest.fixture
def leftovers(tmp_path):
    """A per-case tag for the environment of what it runs; after the case: nothing left behind."""
    state = Leftovers(tmp_path)
    yield state
    try:
        state.check()
    finally:
        for pid in state.processes():  # do not let one case's leak break the next
            subprocess.run(["kill", "-9", str(pid)], check=False)
        for point in fuse_mounts_under(tmp_path):
            subprocess.run(["fusermount3", "-uz", point], check=False)


def readtrace(args, *, cwd, env=None, timeout=180, **kw) -> subprocess.CompletedProcess:
    """``readtrace ARGS`` in a subprocess, text output captured."""
    return subprocess.run(READTRACE + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def fingerprint(path: Path) -> dict:
    """sha256 and mtime of every file below (or at) ``path``: unchanged means untouched."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in files}


def one_line(stderr: str) -> str:
    """The single line a user error prints (asserts there is exactly one and no traceback)."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@contextmanager
def tmpfs_at(directory: Path, options: str) -> Iterator[Path]:
    """A fresh directory with a private tmpfs mounted on it (``options``: ``size=64k`` ...); unmounted after."""
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)
