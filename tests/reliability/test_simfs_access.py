"""Item 2 of issue 8 (simfs): through a root simfs mount another user reads only what SRC's
permissions let them read; a FIFO (or socket) in SRC is not served and never blocks a reader."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from readtrace.simfs import mount

pytestmark = pytest.mark.fuse


@pytest.fixture
def open_dir():
    """A directory every user can enter (tmp_path lives below root's 0700 pytest directory)."""
    base = Path(f"/tmp/readtrace-reliability-{os.getpid()}")
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def _tree(base: Path) -> tuple[Path, Path]:
    src, mnt = base / "src", base / "mnt"
    src.mkdir()
    mnt.mkdir()
    src.chmod(0o755)
    (src / "public.bin").write_bytes(b"public\n")
    (src / "public.bin").chmod(0o644)
    (src / "secret.bin").write_bytes(b"root only\n")
    (src / "secret.bin").chmod(0o600)
    return src, mnt


def test_root_only_files_stay_root_only_through_the_mount(need_fuse, need_root, unprivileged_user, open_dir):
    src, mnt = _tree(open_dir)
    user = unprivileged_user
    assert user.run(["cat", src / "public.bin"]).returncode == 0
    assert user.run(["cat", src / "secret.bin"]).returncode != 0  # as in SRC itself
    with mount(src, mnt, profile="local", log=open_dir / "log.jsonl"):
        ok = user.run(["cat", mnt / "public.bin"])
        assert ok.returncode == 0 and ok.stdout == "public\n"
        denied = user.run(["cat", mnt / "secret.bin"])
        assert denied.returncode == 1 and "Permission denied" in denied.stderr
        assert (mnt / "secret.bin").read_bytes() == b"root only\n"  # root still reads it
    assert not os.path.ismount(mnt)


def test_a_src_others_cannot_reach_stays_closed(need_fuse, need_root, unprivileged_user, open_dir, tmp_path):
    """SRC below a 0700 directory: its 0644 files were unreachable for others, and stay so."""
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    src, _ = _tree(hidden)
    mnt = open_dir / "mnt"
    mnt.mkdir()
    assert unprivileged_user.run(["cat", src / "public.bin"]).returncode != 0
    with mount(src, mnt, profile="local", log=open_dir / "log.jsonl"):
        p = unprivileged_user.run(["cat", mnt / "public.bin"])
        assert p.returncode == 1 and "Permission denied" in p.stderr
        assert (mnt / "public.bin").read_bytes() == b"public\n"


def test_a_fifo_or_socket_in_src_is_not_served_and_blocks_nobody(need_fuse, open_dir):
    src, mnt = _tree(open_dir)
    os.mkfifo(src / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    try:
        with mount(src, mnt, profile="local", log=open_dir / "log.jsonl"):
            assert sorted(os.listdir(mnt)) == ["public.bin", "secret.bin"]
            started = time.monotonic()
            reader = subprocess.run(["cat", str(mnt / "pipe")], capture_output=True, text=True, timeout=10)
            assert reader.returncode == 1 and "No such file or directory" in reader.stderr
            assert time.monotonic() - started < 5
            assert (mnt / "public.bin").read_bytes() == b"public\n"
    finally:
        sock.close()
    assert not os.path.ismount(mnt)
