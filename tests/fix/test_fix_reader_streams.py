"""The own-fd loader reads with the mount's probed streams where several measured faster than one
(sshfs at 20 ms: 64 MiB in 0.95 s by 4 own-fd readers, 3.0 s by one): fix --compare's candidate takes
them from the cached profile (readtrace probe), and ``readtrace fix --threads N`` applies them."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import lab_mount

from readtrace.fix.candidates import candidates, sequential_read_s
from readtrace.fix.session import reader_streams
from readtrace.measure.probe import probe
from readtrace.measure.profile import READER_STREAMS_GAIN, save_profile

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("READTRACE_CACHE_DIR", str(tmp_path / "cache"))


def _checkpoint(src):
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file({f"w{i}": torch.randn(256, 1024) for i in range(16)}, str(src / "model.safetensors"))  # 16 MiB


def test_the_own_fd_candidate_reads_with_the_streams_the_mount_measured_faster(tmp_path):
    with lab_mount(tmp_path, _checkpoint, latency_ms=20.0) as (mnt, _):
        path = str(mnt / "model.safetensors")
        assert reader_streams([path]) == (None, "")  # never probed: one reader, nothing claimed
        measured = probe(path)
        save_profile(measured)  # as `readtrace probe` caches it
        threads, why = reader_streams([path])
        gain = measured.parallel_mbps / measured.sequential_mbps
        assert (threads == measured.streams) is (gain >= READER_STREAMS_GAIN), (gain, why)
        # the same mount where N streams measured no faster than one, and where they measured 3x
        save_profile(replace(measured, parallel_mbps=measured.sequential_mbps))
        assert reader_streams([path]) == (None, "")
        save_profile(replace(measured, parallel_mbps=3 * measured.sequential_mbps))
        threads, why = reader_streams([path])
        assert threads == measured.streams and f"{threads} own-fd streams" in why and "3.0x" in why
    found, _ = candidates({"load_file"}, keeps_cache=True, reader_threads=4)
    by_label = {c.label: c for c in found}
    assert by_label["readtrace own-fd"].settings == {"threads": 4}
    assert "--threads 4" in by_label["readtrace own-fd"].change and "load_file(path, threads=4)" in by_label[
        "readtrace own-fd"].change
    assert by_label["readtrace both"].settings["threads"] == 4
    assert "threads" not in by_label["readtrace prefetch"].settings
    found, _ = candidates({"load_file"}, keeps_cache=True)
    assert all("threads" not in c.settings for c in found)


SCRIPT = """
import hashlib, sys, threading
from safetensors.torch import load_file
state = load_file(sys.argv[1])
h = hashlib.sha256()
for k in sorted(state):
    h.update(k.encode()); h.update(state[k].numpy().tobytes())
print(h.hexdigest(), threading.active_count())
"""


def test_fix_threads_loads_the_same_tensors_with_several_readers(tmp_path):
    (tmp_path / "src").mkdir()
    _checkpoint(tmp_path / "src")
    script = tmp_path / "digest.py"
    script.write_text(SCRIPT)
    command = [sys.executable, str(script), str(tmp_path / "src" / "model.safetensors")]
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout.split()[0]
    fixed = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--strategy", "own-fd", "--threads", "4", "--",
                            *command], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "READTRACE_CACHE_DIR": str(tmp_path / "cache")})
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.split()[0] == plain
    for bad in (["--threads", "0"], ["--compare", "--threads", "2"]):
        done = subprocess.run([sys.executable, "-m", "readtrace", "fix", *bad, "--", *command], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr


def test_the_floor_reads_with_the_streams_the_mount_measured_faster(tmp_path):
    """On a mount that keeps the page cache and serves a handle's requests at once (the lab nfs profile,
    20 ms a request: 4 own-fd streams ~4x one), the floor is the bytes read as the own-fd loader reads
    them: one plain stream would call a load "at its floor" that 4 readers make faster."""
    from readtrace.fix.session import Session
    from readtrace.pagecache.evict import evict

    with lab_mount(tmp_path, _checkpoint, profile="nfs", latency_ms=20.0, keep_cache=True) as (mnt, _):
        path = str(mnt / "model.safetensors")
        measured = probe(path)
        save_profile(measured)  # as `readtrace probe` caches it
        assert measured.cache_survives_open and measured.reader_streams == measured.streams, measured
        evict([path])
        one = sequential_read_s([path])
        evict([path])
        several = sequential_read_s([path], streams=measured.streams)
        assert one[0] == several[0] == os.path.getsize(path)
        assert several[1] * 1.5 < one[1], (one, several)
        (tmp_path / "work").mkdir()
        session = Session([sys.executable, "-c", "pass"], tmp_path / "work", None, None, None, [path], True, print)
        floor, _, _ = session.floor(keeps_cache=True)
    assert floor.streams == measured.streams and f"{measured.streams} own-fd streams" in floor.read_how
    assert floor.bytes == one[0] and floor.read_s < one[1]
