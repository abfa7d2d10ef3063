"""The prefetch where it can work: in the background while the script starts (its loads wait for
it), and, on a mount that drops the page cache on every open, the loader's own mapping populated
front to back right after its open (real loads, the lab mount without keep_cache)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import lab_mount
from safetensors.torch import save_file

from readtrace.inject.manifest import compare_manifests, read_manifest
from readtrace.pagecache.evict import evict
from readtrace.rerun.environment import shim_environment

LOAD = """
import sys, torch
from safetensors.torch import load_file
state = load_file(sys.argv[1])
print(len(state))
"""

TORCH_LOAD = """
import sys, torch
state = torch.load(sys.argv[1], mmap=True, weights_only=True)
print(len(state))
"""


def run(tmp_path, script: str, path, strategy: str, name: str, **settings):
    manifest = tmp_path / f"{name}.jsonl"
    (tmp_path / "load.py").write_text(script)
    evict([str(path)])
    with shim_environment(strategy, manifest, prefetch_files=[str(path)], **settings) as env:
        out = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(path)], env=env, capture_output=True,
                             text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return read_manifest(manifest)


def tensors(tmp_path, mib: int):
    torch.manual_seed(5)
    return {f"w{i}": torch.randn(256, 1024) for i in range(mib)}


def test_background_prefetch_is_waited_for_and_loads_the_same(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(tensors(tmp_path, 8), path)
    base = run(tmp_path, LOAD, path, "none", "base")
    fixed = run(tmp_path, LOAD, path, "prefetch", "fixed", prefetch_background=True)
    [pre] = [c for c in fixed.calls if c.call == "prefetch"]
    assert pre.background is True and pre.bytes == path.stat().st_size
    assert pre.nested is True  # overlapped with start-up: not counted as time inside loader calls
    assert compare_manifests(base, fixed).all_identical and len(fixed.tensors) == 8


@pytest.fixture
def dropping(tmp_path):
    def fill(src):
        save_file(tensors(tmp_path, 8), src / "model.safetensors")
        torch.save(tensors(tmp_path, 8), src / "model.pt")

    with lab_mount(tmp_path, fill, latency_ms=2, keep_cache=False) as (mnt, _):
        yield mnt


@pytest.mark.fuse
@pytest.mark.parametrize("script,name", [(LOAD, "model.safetensors"), (TORCH_LOAD, "model.pt")])
def test_mount_that_drops_the_cache_gets_the_loaders_mapping_populated(tmp_path, dropping, script, name):
    mnt = dropping
    path = mnt / name
    base = run(tmp_path, script, path, "none", "base")
    fixed = run(tmp_path, script, path, "prefetch", "fixed")
    assert not any(c.call == "prefetch" for c in fixed.calls)  # before the open it would be dropped
    [pop] = [c for c in fixed.calls if c.call == "populate"]
    assert pop.bytes >= path.stat().st_size - 4096 and pop.note is None
    assert compare_manifests(base, fixed).all_identical and len(fixed.tensors) == 8


SAFE_OPEN = """
import sys, torch
from safetensors import safe_open
with safe_open(sys.argv[1], "pt") as f:
    state = {k: f.get_slice(k)[...] for k in f.keys()}
print(len(state))
"""


@pytest.mark.fuse
@pytest.mark.parametrize("script,name", [(LOAD, "model.safetensors"), (SAFE_OPEN, "model.safetensors"),
                                         (TORCH_LOAD, "model.pt")])
def test_mount_that_drops_the_cache_has_the_own_fd_files_read_at_start_up(tmp_path, dropping, script, name):
    path = dropping / name
    base = run(tmp_path, script, path, "none", "base")
    fixed = run(tmp_path, script, path, "own-fd", "fixed")
    [read] = [c for c in fixed.calls if c.call == "early read"]
    assert read.bytes == path.stat().st_size and read.note is None and read.nested is True
    assert compare_manifests(base, fixed).all_identical and len(fixed.tensors) == 8
    off = run(tmp_path, script, path, "own-fd", "off", early_read=False)
    assert not any(c.call == "early read" for c in off.calls)
    assert compare_manifests(base, off).all_identical


SAFE_OPEN_THREADS = """
import sys, threading, torch
from safetensors import safe_open
names, state, ready = [f"w{i}" for i in range(8)], {}, threading.Barrier(4)
def worker(part):
    with safe_open(sys.argv[1], "pt") as f:  # every thread opens the file, all at the same time
        ready.wait()
        state.update({k: f.get_tensor(k) for k in names[part::4]})
threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(state))
"""


@pytest.mark.fuse
@pytest.mark.parametrize("early_read", [True, False])
def test_threads_that_each_open_the_file_share_one_own_fd_load(tmp_path, early_read):
    from readtrace.simfs import force_unmount, mount

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    save_file(tensors(tmp_path, 8), src / "model.safetensors")
    path = mnt / "model.safetensors"
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=2, keep_cache=False, log=tmp_path / "reads.jsonl") as lab:
            base = run(tmp_path, SAFE_OPEN_THREADS, path, "none", "base")
            before = lab.counters()["bytes"]
            fixed = run(tmp_path, SAFE_OPEN_THREADS, path, "own-fd", "fixed", early_read=early_read)
            read = lab.counters()["bytes"] - before
    finally:
        force_unmount(mnt)
    size = (src / "model.safetensors").stat().st_size
    assert size <= read < 1.5 * size  # the file once, not once per thread (4x)
    assert compare_manifests(base, fixed).all_identical and len(fixed.tensors) == 8


RAW_MMAP = """
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    print(sum(m[i] for i in range(0, len(m), 4096)))
"""


@pytest.mark.fuse
@pytest.mark.parametrize("script,routed", [(LOAD, True), (RAW_MMAP, False)])
def test_fix_reads_early_only_for_loads_the_shim_routes(tmp_path, dropping, script, routed):
    """A loader the shim cannot route (a raw mmap) would only get a second read of the file."""
    from readtrace.fix.compare import compare

    path = dropping / "model.safetensors"
    (tmp_path / "load.py").write_text(script)
    result = compare([sys.executable, str(tmp_path / "load.py"), str(path)], strategy="own-fd", files=[str(path)])
    [fixed] = result.side("fixed")
    early = [c for c in fixed.manifest.calls if c.call == "early read"]  # taken, or noted at exit unused
    assert fixed.exit_code == 0 and len(early) == (1 if routed else 0)
    assert all(c.note is None for c in early)


def test_early_reads_only_where_a_routed_load_ran_outside_a_distributed_job():
    from readtrace.fix.session import early_read_helps
    from readtrace.inject.manifest import Manifest
    from readtrace.rerun.records import record_of

    def manifest(*calls):
        return Manifest(tensors=[], calls=[record_of({"event": "call", **c}) for c in calls])

    assert early_read_helps(manifest({"call": "load_file"}))
    assert early_read_helps(manifest({"call": "torch.load", "mmap": True}))
    assert not early_read_helps(manifest({"call": "load"}))  # bytes read by the loader itself
    assert not early_read_helps(manifest())  # a raw mmap or pread loop: nothing seen
    assert not early_read_helps(manifest({"call": "safe_open", "rank": 0}, {"call": "safe_open", "rank": 1}))
