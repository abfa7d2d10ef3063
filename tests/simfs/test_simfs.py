"""The lab mount for real: data integrity, the per-handle model seen through O_DIRECT reads with
known offsets, the request log, the CLI, and clean-up."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from readtrace.errors import ExitStatus, InputError, UsageError
from readtrace.simfs import force_unmount, mount, mount_at

pytestmark = pytest.mark.fuse
MiB = 1024 * 1024


@pytest.fixture
def lab(tmp_path, need_fuse):
    """(src, mnt) directories; whatever a test leaves mounted is unmounted afterwards."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    try:
        yield src, mnt
    finally:
        force_unmount(mnt)
    assert mount_at(mnt) is None


def write_random(path, size, seed=1):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_pattern(size, seed))
    return path


def _pattern(size, seed):
    import numpy as np
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


def direct_preads(path, offsets_mib, size=MiB):
    """O_DIRECT preads (no kernel readahead, no page cache): FUSE sees exactly these reads.
    Runs in a thread of its own and returns that thread's id."""
    tid = []

    def work():
        tid.append(threading.get_native_id())
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for offset in offsets_mib:
                assert os.preadv(fd, [buf], offset * MiB) == size
        finally:
            os.close(fd)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return tid[0]


def test_sha256_through_mount_equals_source(lab):
    src, mnt = lab
    files = [write_random(src / "model.safetensors", 24 * MiB + 123), write_random(src / "sub" / "b.bin", 5000, 2)]
    with mount(src, mnt, profile="local") as m:
        for f in files:
            assert sha256(mnt / f.relative_to(src)) == sha256(f)
        assert sorted(os.listdir(mnt)) == ["model.safetensors", "sub"]
        assert os.stat(mnt / "model.safetensors").st_size == 24 * MiB + 123
        with pytest.raises(OSError):
            os.open(mnt / "model.safetensors", os.O_RDWR)  # read-only
    counters = m.counters()
    assert counters["bytes"] >= 24 * MiB + 123 + 5000
    assert counters["opens"] >= 2


def test_gcsfuse_handle_model_known_offsets(lab, tmp_path):
    src, mnt = lab
    write_random(src / "f.bin", 64 * MiB)
    log = tmp_path / "reads.jsonl"
    with mount(src, mnt, profile="gcsfuse", latency_ms=40, log=log) as m:
        t0 = time.monotonic()
        tid = direct_preads(mnt / "f.bin", [0, 1, 2, 3, 0, 40, 41, 42, 43])
        elapsed = time.monotonic() - t0
        live = m.counters()  # running totals before unmount
    reads = m.requests()
    assert list(reads["offset"] // MiB) == [0, 1, 2, 3, 0, 40, 41, 42, 43]
    assert list(reads["new_request"]) == [True, False, False, False, True, True, False, False, True]
    assert list(reads["seek"]) == [False] * 4 + [True, True] + [False] * 3
    assert list(reads["mode"])[-4:] == ["random"] * 4
    assert reads["range_end"].iloc[5] == 43 * MiB  # 5 MiB over 2 seeks -> 3 MiB random ranges
    assert set(reads["pid"]) == {tid}  # the kernel reports the reading thread's id
    assert len(set(reads["fh"])) == 1
    assert elapsed >= 4 * 0.040  # four first-byte latencies, slept for real
    final = m.counters()
    assert final["backend_requests"] == live["backend_requests"] == 4
    assert final["seeks"] == 2 and final["requests"] == 9 and final["bytes"] == 9 * MiB
    assert final["modelled_wait_s"] == pytest.approx(4 * 0.040, abs=0.01)
    assert final["random_handles"] == 1
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds[0] == "mount" and kinds[-1] == "counters" and "open" in kinds and "release" in kinds


def test_page_cache_dropped_on_open_unless_keep_cache(lab):
    src, mnt = lab
    write_random(src / "f.bin", 4 * MiB)
    for keep_cache, second_pass_reads in ((False, True), (True, False)):
        with mount(src, mnt, profile="local", keep_cache=keep_cache) as m:
            (mnt / "f.bin").read_bytes()
            first = len(m.requests())
            (mnt / "f.bin").read_bytes()  # a new open: rclone/gcsfuse-like mounts drop the cache here
            assert (len(m.requests()) > first) == second_pass_reads


def test_kernel_max_read_and_readahead(lab, need_root):
    src, mnt = lab
    write_random(src / "f.bin", 16 * MiB)
    with mount(src, mnt, profile="local", max_read_kib=256, readahead_kib=2048) as m:
        assert m.readahead_kib == 2048
        assert int(Path(f"/sys/class/bdi/{m.bdi}/read_ahead_kb").read_text()) == 2048
        with open(mnt / "f.bin", "rb") as f:
            while f.read(4 * MiB):
                pass
    sizes = m.requests()["size"]
    assert sizes.max() == 256 * 1024 and (sizes == 256 * 1024).mean() > 0.9
    with mount(src, mnt, profile="local") as m:
        assert m.readahead_kib == 128  # the kernel's default for a FUSE mount
        (mnt / "f.bin").read_bytes()
    assert m.requests()["size"].max() == 128 * 1024


def test_nfs_profile_charges_every_request(lab):
    src, mnt = lab
    write_random(src / "f.bin", 16 * MiB)
    with mount(src, mnt, profile="nfs", latency_ms=10) as m:
        direct_preads(mnt / "f.bin", [0, 1, 2, 3])
    reads = m.requests()
    assert list(reads["new_request"]) == [True] * 4 and not reads["seek"].any()
    assert set(reads["mode"]) == {"stateless"}


def test_bandwidth_is_slept(lab):
    src, mnt = lab
    write_random(src / "f.bin", 8 * MiB)
    with mount(src, mnt, profile="gcsfuse", latency_ms=0, bandwidth_mbps=40) as m:
        t0 = time.monotonic()
        direct_preads(mnt / "f.bin", range(8))
        elapsed = time.monotonic() - t0
    assert elapsed >= 8 * MiB / 40e6 * 0.95
    assert m.counters()["modelled_wait_s"] == pytest.approx(8 * MiB / 40e6, rel=0.05)


def test_a_shared_link_limits_two_mounts_together(lab, tmp_path):
    """Two mounts of one shared link, read at once: together they stay within its bandwidth (each on
    a link of its own would move twice as much), and the link's file goes with its last user."""
    from readtrace.simfs.link import link_path
    from readtrace.simfs.log import aggregate_rate

    src, mnt = lab
    other = tmp_path / "mnt-b"
    other.mkdir()
    write_random(src / "f.bin", 8 * MiB)
    name, rate = f"test-{os.getpid()}", 32e6
    try:
        with mount(src, mnt, latency_ms=0, bandwidth_mbps=rate / 1e6, shared_link=name) as a, \
                mount(src, other, latency_ms=0, bandwidth_mbps=rate / 1e6, shared_link=name) as b:
            assert link_path(name).exists()
            (tmp_path / "mnt-c").mkdir()
            with pytest.raises(UsageError, match="runs at 32 MB/s, not 64 MB/s"):
                mount(src, tmp_path / "mnt-c", latency_ms=0, bandwidth_mbps=64, shared_link=name)
            readers = [threading.Thread(target=direct_preads, args=(m / "f.bin", range(8))) for m in (mnt, other)]
            for r in readers:
                r.start()
            for r in readers:
                r.join()
            moved, seconds = aggregate_rate([a.requests(), b.requests()])
    finally:
        force_unmount(other)
    assert moved == 16 * MiB
    assert moved / seconds <= 1.1 * rate, (moved, seconds)
    assert seconds >= 0.9 * moved / rate
    assert not link_path(name).exists()


def test_max_backend_limits_concurrent_requests(lab):
    src, mnt = lab
    write_random(src / "f.bin", 8 * MiB)

    def two_readers(m):
        t0 = time.monotonic()
        readers = [threading.Thread(target=direct_preads, args=(mnt / "f.bin", offsets)) for offsets in
                   ([0, 1, 2, 3], [4, 5, 6, 7])]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        return time.monotonic() - t0

    with mount(src, mnt, profile="nfs", latency_ms=50, max_backend=1) as m:
        serial = two_readers(m)
    with mount(src, mnt, profile="nfs", latency_ms=50, max_backend=8) as m:
        parallel = two_readers(m)
    assert serial >= 8 * 0.050  # one backend request at a time
    assert parallel < serial * 0.8


def test_refuses_bad_paths_with_one_line(lab, tmp_path):
    src, mnt = lab
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    cases = [(src, tmp_path / "missing", "not a directory"), (tmp_path / "nosrc", mnt, "source is not"),
             (src, tmp_path / "full", "not empty")]
    overlap = [(src, src.parent, "overlap")]  # the mount point holds the source: a usage error
    for s, m, why in cases + overlap:
        error, status = (UsageError, ExitStatus.USAGE) if why == "overlap" else (InputError, ExitStatus.BAD_INPUT)
        with pytest.raises(error, match=why):
            mount(s, m)
        done = subprocess.run([sys.executable, "-m", "readtrace", "simfs", str(s), str(m)],
                              capture_output=True, text=True)
        assert done.returncode == status
        assert len(done.stderr.strip().splitlines()) == 1 and why in done.stderr
    assert mount_at(mnt) is None


def test_cli_daemon_and_unmount(lab, tmp_path):
    src, mnt = lab
    write_random(src / "f.bin", 4 * MiB)
    log = tmp_path / "cli.jsonl"
    cli = [sys.executable, "-m", "readtrace", "simfs"]
    done = subprocess.run([*cli, str(src), str(mnt), "--daemon", "--log", str(log), "--latency-ms", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    entry = mount_at(mnt)
    assert entry is not None and entry.fstype == "fuse.simfs-gcsfuse"
    assert sha256(mnt / "f.bin") == sha256(src / "f.bin")
    done = subprocess.run([*cli, "--unmount", str(mnt)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert mount_at(mnt) is None
    deadline = time.monotonic() + 10
    while '"counters"' not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["kind"] == "counters" and last["bytes"] == 4 * MiB


def test_foreground_cli_unmounts_on_sigterm(lab, tmp_path):
    src, mnt = lab
    write_random(src / "f.bin", MiB)
    proc = subprocess.Popen([sys.executable, "-m", "readtrace", "simfs", str(src), str(mnt), "--profile", "local"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while mount_at(mnt) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (mnt / "f.bin").read_bytes() == (src / "f.bin").read_bytes()
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["bytes"] == MiB
    assert mount_at(mnt) is None


def test_unmount_when_busy_and_daemon_gone(lab):
    src, mnt = lab
    write_random(src / "f.bin", MiB)
    m = mount(src, mnt, profile="local", log=src.parent / "busy.jsonl")  # kept after unmount: read below
    busy = open(mnt / "f.bin", "rb")  # noqa: SIM115 - closed by the timer while unmount() waits
    closer = threading.Timer(0.5, busy.close)
    closer.start()
    m.unmount()  # busy: detached lazily, the daemon serves the open file until it is closed
    closer.join()
    assert mount_at(mnt) is None
    assert json.loads(Path(m.log_path).read_text().splitlines()[-1])["kind"] == "counters"
    m1 = mount(src, mnt, profile="local")
    os.kill(m1.daemon_pid, signal.SIGTERM)  # libfuse unmounts on SIGTERM and the daemon writes its counters
    assert m1.wait(timeout=10) == 0
    assert mount_at(mnt) is None and json.loads(Path(m1.log_path).read_text().splitlines()[-1])["kind"] == "counters"
    m1.unmount()
    m2 = mount(src, mnt, profile="local")
    os.kill(m2.daemon_pid, signal.SIGKILL)  # a crashed daemon leaves "transport endpoint not connected"
    time.sleep(0.2)
    m2.unmount()
    assert mount_at(mnt) is None


def test_non_ascii_mount_point_is_found_by_the_one_mountinfo_parser(tmp_path, need_fuse):
    """mountinfo octal-escapes the space and leaves è as UTF-8: both decode to the real path."""
    from readtrace.fs.knowledge import is_remote
    from readtrace.fs.mounts import file_mount

    src, mnt = tmp_path / "src", tmp_path / "modèle x"
    src.mkdir()
    mnt.mkdir()
    write_random(src / "w.bin", 4096)
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=0):
            entry = mount_at(mnt)
            assert entry is not None and entry.mountpoint == str(mnt) and entry.fstype == "fuse.simfs-gcsfuse"
            assert file_mount(mnt / "w.bin") == entry and is_remote(mnt / "w.bin")
            assert not is_remote(src / "w.bin")
    finally:
        force_unmount(mnt)
    assert mount_at(mnt) is None
