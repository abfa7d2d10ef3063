"""Prefetched pages survive proactive reclaim until the loader uses them (pin=True).

The cause of the lab's scattered 4 KiB re-reads after a complete prefetch: this VM runs a DAMON
`pageout` scheme (kdamond) that reclaims page cache nobody touched since it was filled, through the
kernel's reclaim_pages(). madvise(MADV_PAGEOUT) goes through the same reclaim_pages(), so it stands in
for kdamond here, deterministically. The mount's request log is the ground truth: every page lost
comes back as a FUSE READ when the loader's private mapping faults it.
"""

from __future__ import annotations

import mmap
import os

import pytest
from conftest import fuse_available, require

from readtrace.inject import startup
from readtrace.pagecache.evict import evict
from readtrace.pagecache.pin import PinnedFile
from readtrace.pagecache.prefetch import prefetch
from readtrace.simfs import force_unmount, mount

pytestmark = pytest.mark.fuse

SIZE = 16 << 20 | 12345  # a partial last page
MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)


@pytest.fixture
def lab(tmp_path):
    require(*fuse_available())
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "model.bin").write_bytes(os.urandom(SIZE))
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=0, keep_cache=True) as m:
            yield m, str(mnt / "model.bin"), (src / "model.bin").read_bytes()
    finally:
        force_unmount(mnt)


def reclaim(path: str) -> None:
    """What kdamond's pageout does to the file's cold pages: reclaim_pages() via MADV_PAGEOUT."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))  # map every page
        mapped.madvise(MADV_PAGEOUT)


def load_through_private_mapping(path: str) -> bytes:
    """The mmap-threads loader's access: a private (ACCESS_COPY) mapping, faulted page by page."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
        return bytes(mapped)


def fuse_reads_of(m, action) -> tuple[int, int, object]:
    """(READs, bytes) the mount served while ``action`` ran, and its result."""
    before = len(m.requests())
    result = action()
    reads = m.requests().iloc[before:]
    return len(reads), int(reads["size"].sum()), result


@pytest.mark.parametrize("pin", [False, True])
def test_prefetched_pages_survive_reclaim_only_when_pinned(lab, pin):
    m, path, expected = lab
    evict([path])
    result = prefetch([path], threads=4, chunk_bytes=1 << 20, pin=pin)
    try:
        assert result.bytes_read == SIZE
        reclaim(path)
        reads, fetched, data = fuse_reads_of(m, lambda: load_through_private_mapping(path))
        assert data == expected
        if pin:
            assert result.pin_note == ""
            assert result.pinned_bytes >= SIZE
            assert reads == 0  # nothing went back to the (remote) file system
        else:
            assert result.pins is None and result.pinned_bytes == 0
            assert reads > 0 and fetched >= SIZE // 2  # reclaimed, so fetched again from the mount
    finally:
        if result.pins is not None:
            result.pins.release()
    # Released: the same reclaim drops the pages again.
    reclaim(path)
    reads, fetched, _ = fuse_reads_of(m, lambda: load_through_private_mapping(path))
    assert reads > 0 and fetched >= SIZE // 2


def test_pin_of_an_empty_or_missing_file_is_harmless(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    pinned = PinnedFile.map(str(empty))
    assert pinned.addr is None and pinned.pin(0, 0) is False and pinned.error is None
    missing = PinnedFile.map(str(tmp_path / "missing"))
    assert missing.error and missing.pin(0, 4096) is False
    pinned.release()
    missing.release()


def locked_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


def test_shim_releases_the_pin_once_the_file_is_loaded(tmp_path, monkeypatch):
    """Start-up prefetch holds its pins; the shim's release after a load unlocks exactly that file."""
    require(os.geteuid() == 0, "needs root: RLIMIT_MEMLOCK would refuse to lock 2 x 4 MiB")
    paths = []
    for name in ("a.bin", "b.bin"):
        (tmp_path / name).write_bytes(os.urandom(4 << 20))
        paths.append(str(tmp_path / name))
    monkeypatch.setattr(startup, "_cache_kept", lambda path: True)
    monkeypatch.setattr(startup, "_HELD", [])
    before = locked_kib()
    env = {"READTRACE_FIX": "prefetch", "READTRACE_PREFETCH_FILES": os.pathsep.join(paths)}
    startup.prefetch_at_start(env)
    try:
        assert env["READTRACE_PREFETCHED"] == os.pathsep.join(paths)
        assert locked_kib() - before == 2 * 4096
        startup.release_pin(paths[0])
        assert locked_kib() - before == 4096
        startup.release_pin(paths[0])  # idempotent
        assert locked_kib() - before == 4096
    finally:
        for pins in startup._HELD:
            pins.release()
    assert locked_kib() == before


LOCKED_INSIDE = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="pt") as f:  # the shim prefetches the file here, once
    locked = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmLck:"))
    f.get_tensor("w")
print(locked)
"""


def test_a_prefetch_made_when_the_loader_opens_the_file_holds_its_pages_too(tmp_path):
    """A file not prefetched at start-up is prefetched when the loader opens it (routing.prefetch_once):
    its pages are pinned as the start-up prefetch's are, so proactive reclaim cannot take them between
    the prefetch and the loader's reads (it took them from unpinned warm reads: benchmarks/warm_read_held.py)."""
    require(os.geteuid() == 0, "needs root: RLIMIT_MEMLOCK would refuse to lock 8 MiB")
    import subprocess
    import sys

    import torch
    from safetensors.torch import save_file

    from readtrace.rerun.environment import shim_environment

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.randn(2 << 20)}, path)  # 8 MiB
    with shim_environment("prefetch", tmp_path / "manifest.jsonl") as env:  # no start-up prefetch files
        out = subprocess.run([sys.executable, "-c", LOCKED_INSIDE, str(path)], env=env, capture_output=True, text=True,
                             timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) * 1024 >= os.path.getsize(path)  # the whole file held while it loads
