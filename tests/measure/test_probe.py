"""`readtrace probe` on the lab mount: what it measures follows the mount's configured behaviour."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from conftest import lab_mount, require
from workloads import ebpf_ready

from readtrace.measure.probe import probe
from readtrace.measure.profile import cached_for_path, load_profiles, save_profile
from readtrace.trace import load_trace

MiB = 1 << 20


def _fill(src):
    path = src / "model.bin"
    path.write_bytes(os.urandom(64 * MiB))
    (src / "small.txt").write_text("x")
    return path


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("READTRACE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("keep_cache", [False, True])
def test_probe_measures_a_gcsfuse_like_mount(tmp_path, keep_cache):
    with lab_mount(tmp_path, _fill, latency_ms=20.0, keep_cache=keep_cache) as (mnt, _):
        started = time.monotonic()
        p = probe(mnt)  # the directory: its largest file
        took = time.monotonic() - started
    assert p.file == str(mnt / "model.bin") and p.fstype == "fuse.simfs-gcsfuse"
    assert took < 60
    assert 15 <= p.first_byte_ms <= 80, p.first_byte_ms  # a fresh handle pays the configured 20 ms
    assert p.handle_penalty > 1.3 and p.punishes_shared_handle, (p.shared_fd_s, p.own_fd_s)
    assert p.cache_survives_open is keep_cache
    assert p.sample_bytes <= 64 * MiB and p.handle_bytes <= 64 * MiB
    assert p.max_read_kib == 1024
    if os.geteuid() == 0:
        assert p.readahead_tried_kb == 1024 and p.readahead_gain is not None
        assert p.read_ahead_kb == 128  # restored after the test


def test_streams_that_finish_one_streams_sample_early_are_measured_again_over_more(tmp_path):
    """N streams that scale finish one stream's sample before their read-ahead grows (sshfs at 20 ms:
    60 MB/s over 38 MiB, ~80 MB/s over 256 MiB): their rate is measured again over what it moves in the
    test's time, at most N samples."""
    with lab_mount(tmp_path, _fill, profile="nfs", latency_ms=5.0) as (mnt, _):
        p = probe(mnt / "model.bin", sample_bytes=8 * MiB, try_readahead=False)
    assert p.sample_bytes == 8 * MiB
    assert 12 * MiB <= p.parallel_sample <= 4 * 8 * MiB, p
    assert p.handle_bytes == 8 * MiB  # the handle test keeps the sample its first run was timed on


def test_probe_finds_no_handle_penalty_on_a_passthrough(tmp_path):
    with lab_mount(tmp_path, _fill) as (mnt, _):
        pass  # the fixture's profile is gcsfuse: mount the local one below
    from readtrace.simfs import mount

    (tmp_path / "mnt2").mkdir()
    with mount(tmp_path / "src", tmp_path / "mnt2", profile="local") as m:
        p = probe(tmp_path / "mnt2" / "model.bin")
        assert m.mounted
    assert p.first_byte_ms < 10
    assert p.handle_penalty < 1.3 and not p.punishes_shared_handle, (p.shared_fd_s, p.own_fd_s)
    assert p.cache_survives_open is False


def test_cache_round_trip_and_cli(tmp_path):
    with lab_mount(tmp_path, _fill, latency_ms=5.0) as (mnt, _):
        path = mnt / "model.bin"
        env = {**os.environ, "READTRACE_CACHE_DIR": str(tmp_path / "cache")}
        done = subprocess.run([sys.executable, "-m", "readtrace", "probe", str(path), "--json"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        measured = json.loads(done.stdout)[0]
        cached = cached_for_path(path)  # the same mount: found by device, fstype, source and options
        assert cached is not None and cached.data() == measured
        assert cached.handle_penalty == pytest.approx(measured["handle_penalty"], rel=1e-3)
        cache = tmp_path / "cache" / "mount-profiles.json"
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
        save_profile(cached)  # the same mount again replaces its entry
        assert len(load_profiles()) == 1
        shown = subprocess.run([sys.executable, "-m", "readtrace", "probe", "--show"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and f"{mnt} (fuse.simfs-gcsfuse" in shown.stdout
        assert "per-handle penalty" in shown.stdout and "measured " in shown.stdout
    assert cached_for_path(path) is None  # unmounted: a file elsewhere, no profile


def test_probe_refuses_what_it_cannot_read(tmp_path):
    env = {**os.environ, "READTRACE_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "tiny").write_text("x")
    for target in (tmp_path / "missing", tmp_path / "tiny"):
        done = subprocess.run([sys.executable, "-m", "readtrace", "probe", str(target)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 5, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "readtrace", "probe", "--show"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "no cached mount profile" in done.stdout
    done = subprocess.run([sys.executable, "-m", "readtrace", "probe"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "readtrace: probe: give a PATH on the mount to measure, or --show"
    assert not (tmp_path / "cache").exists()  # reading makes no cache directory
    (tmp_path / "cache").mkdir(mode=0o777)
    (tmp_path / "cache").chmod(0o777)  # a cache others could plant profiles in is refused
    with lab_mount(tmp_path, _fill) as (mnt, _):
        done = subprocess.run([sys.executable, "-m", "readtrace", "probe", str(mnt)], env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "writable by group or others" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


@pytest.mark.ebpf
def test_record_notes_the_profile_and_report_says_it(tmp_path):
    require(*ebpf_ready())
    env = {**os.environ, "READTRACE_CACHE_DIR": str(tmp_path / "cache")}
    reader = "import sys; f = open(sys.argv[1], 'rb'); [f.read(1 << 20) for _ in range(8)]"

    def record_and_report(path, name):
        out = tmp_path / f"{name}.rtrace"
        done = subprocess.run([sys.executable, "-m", "readtrace", "record", "-q", "-o", str(out), "--",
                               sys.executable, "-c", reader, str(path)], env=env, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr
        report = subprocess.run([sys.executable, "-m", "readtrace", "report", str(out)], env={**env, "COLUMNS": "1000"},
                                capture_output=True, text=True, timeout=180)
        assert report.returncode == 0, report.stderr
        as_json = subprocess.run([sys.executable, "-m", "readtrace", "report", "--json", str(out)], env=env,
                                 capture_output=True, text=True, timeout=180)
        assert as_json.returncode == 0, as_json.stderr
        return load_trace(out).meta, report.stdout, json.loads(as_json.stdout)["summary"]["measured_mount"]

    with lab_mount(tmp_path, _fill) as (mnt, _):
        path = mnt / "model.bin"
        meta, text, measured = record_and_report(path, "before")
        assert meta["mount_profiles"] == [] and measured is None
        assert f"no profile: table prior (fs/knowledge.py); measure the mount: readtrace probe {mnt}" in text
        profile = probe(path, try_readahead=False)
        save_profile(profile)
        meta, text, measured = record_and_report(path, "after")
        # a trace recorded before the probe: the report takes the cache's profile of the mount, still mounted
        again = subprocess.run([sys.executable, "-m", "readtrace", "report", str(tmp_path / "before.rtrace")],
                               env={**env, "COLUMNS": "1000"}, capture_output=True, text=True, timeout=180)
        assert again.returncode == 0 and f"mount profile: measured {profile.date}" in again.stdout
    [noted] = meta["mount_profiles"]
    assert noted["mountpoint"] == str(mnt) and noted["measured_at"] == profile.measured_at
    assert f"mount profile: measured {profile.date}" in text
    assert measured["mountpoint"] == str(mnt) and measured["handle_penalty"] == round(profile.handle_penalty, 3)


def test_the_cache_keeps_one_profile_per_mount_and_the_newest_64():
    from dataclasses import replace

    from readtrace.measure.profile import MAX_PROFILES, MountProfile

    p = MountProfile(dev="0:1", mountpoint="/m", fstype="fuse.x", source="s", options="ro;max_read=131072",
                     measured_at="2026-12-02T00:00:00+00:00", file="/m/f", file_size=1, sample_bytes=1, seconds=1,
                     first_byte_ms=1, first_byte_max_ms=1, first_byte_samples=1, open_ms=0, sequential_mbps=1,
                     streams=4, parallel_mbps=1, own_fd_s=1, shared_fd_s=2, handle_bytes=1, cache_survives_open=True,
                     read_ahead_kb=128, max_read_kib=128)
    for i in range(MAX_PROFILES + 6):
        save_profile(replace(p, dev=f"0:{i}"))
    save_profile(replace(p, dev=f"0:{MAX_PROFILES + 5}", first_byte_ms=7.0))  # the same mount: replaced
    kept = load_profiles()
    assert len(kept) == MAX_PROFILES and kept[0].dev == "0:6" and kept[-1].first_byte_ms == 7.0
    assert kept[-1].handle_penalty == 2.0 and kept[-1].request_kib == 128
