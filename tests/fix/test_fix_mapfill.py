"""Populate through the loader's own open file (inject/mapfill.py): any loader that maps a checkpoint
with Python's mmap (a raw mmap read by threads, numpy.memmap) gets the file read ahead, front to back,
before its mapping returns (or alongside it, in a helper process); every run digests the mapped bytes so that loaders without tensors compare too.
Real processes on the lab mount without keep_cache (it drops the page cache on every open)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import lab_mount, require
from workloads import ebpf_ready

from lab.loaders import SCRIPTS
from readtrace.fix.compare import compare
from readtrace.inject.manifest import compare_manifests, read_manifest
from readtrace.inject.mapfill import INLINE
from readtrace.pagecache.evict import evict
from readtrace.rerun.environment import shim_environment
from readtrace.rerun.protocol import POPULATE

MiB = 1 << 20

RAW_MMAP = (SCRIPTS / "raw_mmap_threads.py").read_text()

NUMPY_MEMMAP = """
import sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
data = np.memmap(sys.argv[1], dtype=np.float32, mode="r")
tensors = np.array_split(data, 8)
with ThreadPoolExecutor(4) as pool:  # every tensor touched, every page of it
    print(sum(pool.map(lambda t: float(t[::1024].sum()), tensors)))
"""

# Uses up its file descriptors before mapping: mmap's own dup takes the last one, so the populate's
# dup fails inside mmap.mmap(); the script's mapping must still come back and read the same bytes.
NO_FDS_LEFT = """
import mmap, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
f = open(sys.argv[1], "rb")
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    os.close(held.pop())
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
for fd in held: os.close(fd)
print(sum(m[pos] for pos in range(0, len(m), 4096)))
m.close()
"""


def write_weights(src, mib: int) -> str:
    data = os.urandom(mib * MiB)
    (src / "weights.raw").write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def run(tmp_path, script: str, path, strategy: str, name: str, inline: bool = True):
    manifest = tmp_path / f"{name}.jsonl"
    (tmp_path / f"{name}.py").write_text(script)
    evict([str(path)])
    with shim_environment(strategy, manifest, files=(str(path),), populate_inline=inline) as env:
        out = subprocess.run([sys.executable, str(tmp_path / f"{name}.py"), str(path)], env=env,
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return read_manifest(manifest)


@pytest.mark.fuse
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "helper-process"])
def test_populate_reads_the_file_once_ahead_and_every_run_digests_the_mapped_bytes(tmp_path, inline):
    with lab_mount(tmp_path, lambda src: write_weights(src, 16), latency_ms=2, keep_cache=False) as (mnt, sha):
        path = mnt / "weights.raw"
        base = run(tmp_path, RAW_MMAP, path, "none", "base")
        fixed = run(tmp_path, RAW_MMAP, path, POPULATE, "fixed", inline)
    assert not any(c.call == "populate" for c in base.calls)
    [pop] = [c for c in fixed.calls if c.call == "populate"]
    if inline:  # the whole file, on the loader's fd, before mmap.mmap returned
        assert pop.how == INLINE and pop.bytes == 16 * MiB and pop.note is None, pop
    # alongside: a helper process, stopped when the load ends: at 2 ms the 4 threads may finish first (even
    # before the helper reopened the file), and then the helper says so instead of having read it all
    elif pop.note is not None:
        assert pop.note == "stopped: the load ended first" and pop.bytes <= 16 * MiB, pop
    else:
        assert pop.how == "reopened" and pop.bytes == 16 * MiB, pop
    for m in (base, fixed):
        assert [c.call for c in m.calls if c.call == "mmap"] == ["mmap"]
        [digest] = m.tensors
        assert digest.sha256 == sha and digest.shape == (16 * MiB,)
    assert compare_manifests(base, fixed).all_identical


@pytest.mark.fuse
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "helper-process"])
def test_a_populate_that_cannot_start_leaves_the_mapping_untouched(tmp_path, inline):
    """No fd left for the helper's duplicate: that populate fails closed, the mapping as made. The inline
    fill needs no fd of its own: it reads the whole file."""
    manifest = tmp_path / "fixed.jsonl"
    (tmp_path / "load.py").write_text(NO_FDS_LEFT)
    with lab_mount(tmp_path, lambda src: write_weights(src, 4), latency_ms=1, keep_cache=False) as (mnt, sha):
        path = str(mnt / "weights.raw")
        with shim_environment(POPULATE, manifest, files=(path,), populate_inline=inline) as env:
            out = subprocess.run([sys.executable, str(tmp_path / "load.py"), path], env=env, capture_output=True,
                                 text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().isdigit(), out.stderr  # the script's mapping worked
    fixed = read_manifest(manifest)
    populated = [c for c in fixed.calls if c.call == "populate"]
    if inline:
        assert "readtrace" not in out.stderr, out.stderr
        assert [(c.how, c.bytes) for c in populated] == [(INLINE, 4 * MiB)]
    else:
        assert "readtrace's populate failed" in out.stderr and "this run is unproven" in out.stderr
        assert not populated
    assert [t.sha256 for t in fixed.tensors] == [sha]  # the script's mapping read the file's bytes


@pytest.mark.fuse
@pytest.mark.parametrize("script", [RAW_MMAP, NUMPY_MEMMAP], ids=["raw-mmap-4-threads", "numpy-memmap"])
def test_auto_picks_populate_on_a_mount_that_drops_the_cache(tmp_path, script):
    with lab_mount(tmp_path, lambda src: write_weights(src, 32), latency_ms=20, keep_cache=False) as (mnt, sha):
        (tmp_path / "load.py").write_text(script)
        path = str(mnt / "weights.raw")
        result = compare([sys.executable, str(tmp_path / "load.py"), path], files=[path], workdir=tmp_path / "work")
    assert result.choice.chosen.strategy == POPULATE, result.choice.why
    assert result.speedup is not None and result.speedup >= 1.3, result.choice.why
    assert result.diff.all_identical and result.diff.count == 1 and not result.unproven
    assert {t.sha256 for r in result.runs for t in r.manifest.tensors} == {sha}


GGUF_LOAD = """
import sys
from concurrent.futures import ThreadPoolExecutor
from gguf import GGUFReader
reader = GGUFReader(sys.argv[1])
with ThreadPoolExecutor(4) as pool:  # every tensor touched, every page of it
    print(sum(pool.map(lambda t: float(t.data.reshape(-1)[::1024].sum()), reader.tensors)))
"""


def write_gguf(src, tensors: int) -> None:
    import numpy as np
    from gguf import GGUFWriter

    rng = np.random.default_rng(3)
    writer = GGUFWriter(str(src / "model.gguf"), "llama")
    for i in range(tensors):
        writer.add_tensor(f"blk.{i}.weight", rng.random((1024, 1024), dtype=np.float32))  # 4 MiB each
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.fuse
@pytest.mark.ebpf
def test_a_gguf_load_recorded_then_fixed_without_files(tmp_path):
    """GGUFReader (numpy memmap, 4 threads touching every tensor) on the lab mount without keep_cache:
    recorded, then `fix --compare TRACE` finds the .gguf from the trace alone and populates it."""
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    with lab_mount(tmp_path, lambda src: write_gguf(src, 8), latency_ms=20, keep_cache=False) as (mnt, _):
        (tmp_path / "load.py").write_text(GGUF_LOAD)
        trace = tmp_path / "t.rtrace"
        recorded = record_command([sys.executable, str(tmp_path / "load.py"), str(mnt / "model.gguf")], trace,
                                  quiet=True)
        assert recorded.exit_code == 0
        out = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record", "--json",
                              str(trace)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [f["path"] for f in report["files"]] == [str(mnt / "model.gguf")]
    assert report["choice"]["chosen"] == "readtrace populate" and report["speedup"] >= 1.3, report["choice"]
    assert report["tensors_identical"] is True and report["tensors"] == 1
