"""Recorder + lab mount + analyzer together, on real recordings of the example loads.

A 32 MiB checkpoint behind the lab mount with the gcsfuse profile: the loads that read one open file
from several tasks (forked shared fd, threads faulting one mapping) must come out as
SHARED_FD_INTERLEAVE with every task consecutive on its own and the merged handle random; own fds and
one sequential reader must not. A cold local load must be called cold, the same load warm must not.
"""

from __future__ import annotations

import os
import sys

import pytest
from conftest import fuse_available, require
from workloads import ebpf_ready

from readtrace.analyze import analyze
from readtrace.fix.evict import evict
from readtrace.simfs import force_unmount, mount
from readtrace.trace import load_trace
from readtrace.workloads import make_checkpoint

pytestmark = [pytest.mark.ebpf, pytest.mark.fuse, pytest.mark.slow]
WORKERS = 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("src"), 32)[0]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, checkpoint):
    require(*ebpf_ready())
    require(*fuse_available())
    mnt = tmp_path_factory.mktemp("mnt")
    try:
        with mount(checkpoint.parent, mnt, profile="gcsfuse", latency_ms=2) as m:
            yield m
    finally:
        force_unmount(mnt)


def record_load(tmp_path, pattern: str, path) -> object:
    from readtrace.record import record_command

    cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern,
           "--workers", str(WORKERS), str(path)]
    result = record_command(cmd, tmp_path / f"{pattern}.rtrace", quiet=True)
    assert result.exit_code == 0 and result.lost_events == 0
    return analyze(load_trace(result.trace_path))


def _codes(a) -> set[str]:
    return {f.code for f in a.findings}


def _data_handles(a, path):
    """The FUSE handles that read the tensors (the loader's header read has a handle of its own)."""
    s = a.streams
    handles = s[(s["kind"] == "fuse_handle") & (s["path"] == str(path))]
    return handles[handles["bytes"] >= 2**20]


@pytest.mark.parametrize("pattern", ["fork-shared-fd", "mmap-threads"])
def test_shared_handle_loads_are_interleaved(lab, checkpoint, tmp_path, pattern):
    target = f"{lab.mountpoint}/{checkpoint.name}"
    a = record_load(tmp_path, pattern, target)
    assert "SHARED_FD_INTERLEAVE" in _codes(a)
    handles = _data_handles(a, target)
    assert len(handles) == 1, handles[["stream", "bytes"]]
    handle = handles.iloc[0]
    assert handle["tasks"] >= WORKERS
    assert handle["min_task_consecutive_fraction"] >= 0.90
    assert handle["consecutive_fraction"] <= 0.30
    assert handle["gcsfuse_read_type"] == "random"


@pytest.mark.parametrize("pattern", ["fork-own-fd", "sequential"])
def test_own_fd_and_sequential_loads_are_not(lab, checkpoint, tmp_path, pattern):
    target = f"{lab.mountpoint}/{checkpoint.name}"
    a = record_load(tmp_path, pattern, target)
    assert "SHARED_FD_INTERLEAVE" not in _codes(a)
    assert "RANDOM_ON_FUSE_HANDLE" not in _codes(a)
    handles = _data_handles(a, target)
    assert len(handles) == (WORKERS if pattern == "fork-own-fd" else 1)
    # Each handle is one task's own stream. Not 100 % consecutive: every open() of a FUSE file without
    # keep_cache drops its page cache, so the workers' opens make each other re-read a few pages.
    assert (handles["consecutive_fraction"] >= 0.80).all()


def test_cold_load_is_called_cold_and_warm_is_not(checkpoint, tmp_path):
    require(*ebpf_ready())
    evict([checkpoint])
    cold = record_load(tmp_path, "sequential", checkpoint)
    os.rename(tmp_path / "sequential.rtrace", tmp_path / "cold.rtrace")
    warm = record_load(tmp_path, "sequential", checkpoint)
    assert "COLD_CACHE" in _codes(cold)
    assert "COLD_CACHE" not in _codes(warm)
    assert cold.summary["cache_miss_bytes"] >= 30 * 2**20 > warm.summary["cache_miss_bytes"]
